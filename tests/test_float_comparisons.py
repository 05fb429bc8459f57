"""No exact comparison of computed floats in the tests, unless a ``# exact: <reason>`` says why it is exact.

Two computations of one real number agree only to rounding, and how they round depends on the CPU:
BLAS and ATen pick kernels (AVX-512/AMX or AVX2) that sum in different orders, with or without
fused multiply-adds. ``assert phi[0] == phi[1]`` (two players' Shapley values, each a dot product of
one table with its own column of weights) held on an AVX-512 machine and failed by one ulp on an
AVX2-only AMD one. This test parses every ``tests/**/*.py`` with ``ast`` and fails, naming the line,
on each comparison that looks like one of computed floats, so the next one is caught before CI.

What is flagged (a heuristic: there is no type information, so it reads the file for hints):

* ``==`` / ``!=`` inside an ``assert`` statement (nested ones too: ``all(a == b for ...)``,
  ``x == y and ...``) when neither side is exempt (below) and

  1. a side is a float literal with a fractional part, or a list/tuple/dict/arithmetic of such
     (``lr == 0.003``, ``m == {"share": 0.625}``); or
  2. a side calls something that computes a float: ``.item()``, ``float(...)``, ``math.*`` (not
     ``isclose``, ``floor``, ...), or a reduction / transcendental such as ``.sum()``, ``.mean()``,
     ``np.exp``, ``torch.log_softmax``, ``np.linalg.slogdet`` (``FLOAT_CALLS``; the builtin ``sum``
     is not one: it mostly counts); or
  3. a side's *head* (its variable, attribute, string key or callee: the ``phi`` of ``phi[0]``, the
     ``total`` of ``a.total``, the ``"loss"`` of ``m["loss"]``, the ``f`` of ``f(x)[0]``) is known to
     hold floats from elsewhere in the file: it is compared with ``pytest.approx``, given to
     ``math.isclose`` / ``np.allclose`` / ``assert_allclose`` / ``assert_close``, ordered against or
     equated to a fractional literal (``x < 1e-9``), or assigned from a float expression as in 1-2
     (in such evidence a sum or difference names its operands, a product or ratio does not: the ints
     of ``a * n / b`` make a float without being floats).
     Variables are scoped to their top-level function (module-level names to the file); attributes,
     string keys and callees to the file; a variable assigned from ``f(...)`` links the two, so
     ``phi = coverage_shapley(...)`` in one test and ``phi == pytest.approx(...)`` there make ``phi``
     a float in every test that assigns it from ``coverage_shapley``. This is the rule that catches
     ``phi[0] == phi[1]`` and ``a.total == b.total``; with it, ``phi[3] == 0.0`` (a float literal
     without a fractional part) is flagged too, while ``ep.reward == 1.0`` is not unless something
     in the file treats ``reward`` as a float.

  Exempt sides: ``pytest.approx(...)``, ``math.isclose``, ``int``, ``round``, ``len``, ``str``,
  ``bool``, ``type``, ``id`` ..., and literals that are not floats (ints, strings, bytes, None, bools,
  f-strings, containers of them).
* Calls anywhere of ``np.array_equal`` / ``np.array_equiv`` / ``torch.equal`` /
  ``np.testing.assert_array_equal`` / ``np.testing.assert_equal``, and ``assert_close`` /
  ``assert_allclose`` / ``allclose`` with both tolerances 0 - unless an argument is a literal of ints
  (an integer tensor's expected values).

A flagged line either gets a bound (``pytest.approx(y, rel=..., abs=...)``, ``math.isclose`` with a
stated ulp budget: say in a comment what it tolerates and why that size) or, if the two sides are
exact by construction (one function called twice on one input in one process, a copy, a clamp to
0/1, sums of dyadic values such as 0.5 + 0.25, integers stored as floats), the comment
``# exact: <reason>`` at the end of a line of the statement that holds the comparison (or the
equality call), or in the comment lines right above that statement. The reason is required: a bare
``# exact:`` is itself reported. ``PENDING`` may list a flagged line (path, text) whose reason
cannot go on the line yet (a file being rewritten elsewhere); it is empty, and should stay so.

Limits: comparisons outside ``assert`` (``if a == b``, a helper's ``return a == b``) are not read;
a computed float compared with an int literal (``x.sum() == 0``) is not flagged; nor is ``a == b``
when nothing in the file says ``a`` or ``b`` holds floats (a dict of metrics compared whole, a value
returned by a helper no test compares approximately): the rules only read hints, so review still
matters. Tuple unpacking (``a, b = f()``) and loop variables carry no evidence.

To see whether a bound holds under other kernels on an AVX-512 machine: numpy's OpenBLAS takes
``OPENBLAS_CORETYPE=Haswell`` (the AVX2 kernels; ``Zen`` picks the same ones, ``Sandybridge`` AVX
without FMA) and ``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"``; torch takes
``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2``. The CI failure above
reproduces with ``OPENBLAS_CORETYPE=Haswell`` alone.
"""

from __future__ import annotations

import ast
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

TESTS = Path(__file__).resolve().parent

#: method / function names whose result is a float computed by numpy, torch or math
FLOAT_CALLS = frozenset({
    "item", "sum", "mean", "std", "var", "norm", "prod", "dot", "matmul", "mm", "bmm", "einsum",
    "tensordot", "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "softmax", "log_softmax",
    "logsumexp", "sigmoid", "tanh", "cumsum", "cumprod", "average", "median", "quantile", "percentile",
    "nanmean", "nansum", "slogdet", "det", "inv", "solve", "lstsq", "svd", "eigh", "pinv", "cov",
    "corrcoef", "entropy", "kl_div", "cross_entropy", "nll_loss", "mse_loss", "hypot", "pow",
})
#: math functions that return ints or bools
MATH_NOT_FLOAT = frozenset({"isclose", "floor", "ceil", "comb", "perm", "factorial", "isnan", "isinf",
                            "isfinite", "gcd", "lcm", "isqrt", "trunc"})
#: calls whose value is not a float (or is a tolerant comparison): a side wrapped in one is exempt
EXEMPT_CALLS = frozenset({"approx", "isclose", "allclose", "int", "round", "len", "str", "repr", "bool",
                          "type", "id", "hash", "isinstance", "bytes", "ord", "chr", "floor", "ceil"})
#: methods that pass their receiver's values through (``x.tolist()`` holds what ``x`` holds)
PASSTHROUGH = frozenset({"tolist", "copy", "clone", "detach", "numpy", "cpu", "ravel", "flatten",
                         "squeeze", "reshape", "view", "astype", "float", "double", "values", "abs",
                         "max", "min", "amax", "amin"} | FLOAT_CALLS)
#: array-module namespaces: ``np.abs(x)`` holds what ``x`` holds
ARRAY_MODULES = frozenset({"np", "numpy", "torch", "math", "F"})
#: callees too generic to say anything about what they return (``json.loads``, ``d.get``)
GENERIC_CALLS = frozenset({"loads", "load", "get", "read_text", "read", "items", "keys", "values", "dict",
                           "list", "tuple", "sorted", "set", "next", "iter", "getattr", "vars", "copy",
                           "deepcopy", "to_dict", "from_dict", "model_dump", "json", "state_dict"})
EQUAL_CALLS = frozenset({"array_equal", "array_equiv", "equal", "assert_array_equal", "assert_equal"})
TOLERANT_CALLS = frozenset({"isclose", "allclose", "assert_allclose", "assert_close"})
MARKER = re.compile(r"#\s*exact:(.*)$")
#: flagged lines in files this change could not edit, by path: the line's text, until its owner puts
#: the reason on it as an ``# exact:`` comment (then delete the entry)
PENDING: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    text: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.why}: {self.text}"


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    return ""


def _call_name(call: ast.Call) -> str:
    """Last component of the called name: ``approx`` for ``pytest.approx(...)``."""
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _is_fractional(node: ast.AST) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, float)
            and not float(node.value).is_integer())


def _literal_values(node: ast.AST) -> Iterator[ast.AST]:
    """The leaves of a literal-ish value: constants through containers, arithmetic and array builders."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for e in node.elts:
            yield from _literal_values(e)
    elif isinstance(node, ast.Dict):
        for v in node.values:
            yield from _literal_values(v)
    elif isinstance(node, ast.BinOp):
        yield from _literal_values(node.left)
        yield from _literal_values(node.right)
    elif isinstance(node, ast.UnaryOp):
        yield from _literal_values(node.operand)
    elif isinstance(node, ast.Call) and _call_name(node) in ("array", "tensor", "asarray", "as_tensor"):
        for a in node.args[:1]:
            yield from _literal_values(a)
    else:
        yield node


def has_fractional_literal(node: ast.AST) -> bool:
    return any(_is_fractional(leaf) for leaf in _literal_values(node))


def is_exempt(node: ast.AST) -> bool:
    """A side that is not a float: a tolerant wrapper, an int/str cast, or a literal of non-floats."""
    if isinstance(node, ast.Call) and _call_name(node) in EXEMPT_CALLS:
        return True
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Constant, ast.UnaryOp)):
        leaves = list(_literal_values(node))
        if leaves and all(isinstance(x, ast.Constant) and not isinstance(x.value, float) for x in leaves):
            return True
        if not leaves and isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            return True  # empty container
    return False


def float_call(node: ast.AST) -> str | None:
    """Name of a float-computing call in ``node``'s value chain (receivers, operands), if any."""
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Lambda, ast.comprehension)):
            continue
        if not isinstance(sub, ast.Call):
            continue
        name = _call_name(sub)
        dotted = _dotted(sub.func)
        if name == "float" and isinstance(sub.func, ast.Name):
            return "float()"
        if dotted.startswith("math.") and name not in MATH_NOT_FLOAT:
            return dotted + "()"
        if name in FLOAT_CALLS and isinstance(sub.func, ast.Attribute):  # not the builtin sum of ints
            return (dotted or name) + "()"
    return None


def heads(node: ast.AST, evidence: bool = False) -> set[tuple[str, str]]:
    """What a value is named by: ``("name", "phi")`` for ``phi[0]``, ``("attr", "total")`` for
    ``a.total``, ``("key", "loss")`` for ``m["loss"]``, ``("call", "f")`` for ``f(x)``. As evidence
    (the value is known to be a float) only sums and differences pass it to their operands: the ints
    of ``a * n / b`` make a float without being floats."""
    if isinstance(node, ast.Name):
        return {("name", node.id)}
    if isinstance(node, ast.Attribute):
        return {("attr", node.attr)}
    if isinstance(node, ast.Subscript):
        s = node.slice
        if isinstance(s, ast.Constant) and isinstance(s.value, str):
            return {("key", s.value)}
        return heads(node.value, evidence)
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute):
            if f.attr in PASSTHROUGH:
                receiver = _dotted(f.value)
                if receiver in ARRAY_MODULES or receiver.startswith(("np.", "torch.")):
                    return set().union(*(heads(a, evidence) for a in node.args[:1])) if node.args else set()
                return heads(f.value, evidence)
            if _dotted(f.value) in ARRAY_MODULES:
                return set().union(*(heads(a, evidence) for a in node.args[:1])) if node.args else set()
            return set() if f.attr in GENERIC_CALLS else {("call", f.attr)}
        if isinstance(f, ast.Name):
            if f.id in ("abs", "max", "min", "sum"):
                return set().union(*(heads(a, evidence) for a in node.args[:1])) if node.args else set()
            return set() if f.id in GENERIC_CALLS else {("call", f.id)}
        return set()
    if isinstance(node, ast.BinOp):
        if evidence and not isinstance(node.op, (ast.Add, ast.Sub)):
            return set()
        return heads(node.left, evidence) | heads(node.right, evidence)
    if isinstance(node, ast.UnaryOp):
        return heads(node.operand, evidence)
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*(heads(e, evidence) for e in node.elts)) if node.elts else set()
    return set()


def _is_float_expr(node: ast.AST) -> bool:
    """An assigned value that is a float: a fractional literal (or arithmetic of one) or a float call."""
    return has_fractional_literal(node) or (isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp))
                                            and float_call(node) is not None)


def _index(tree: ast.Module) -> list[tuple[str, ast.AST, ast.AST, bool]]:
    """(scope, node, its innermost statement, inside an assert) for every node, in one walk. The
    scope is the node's top-level function (a method: its class's), or ``<module>``."""
    out: list[tuple[str, ast.AST, ast.AST, bool]] = []
    stack: list[tuple[ast.AST, str, ast.AST, bool]] = [(tree, "<module>", tree, False)]
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    while stack:
        node, scope, stmt, asserted = stack.pop()
        out.append((scope, node, stmt, asserted))
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, functions) and (scope == "<module>" or isinstance(node, ast.ClassDef)):
                inner = f"{getattr(node, 'name', '')}.{child.name}@{child.lineno}"
            stack.append((child, inner, child if isinstance(child, ast.stmt) else stmt,
                          asserted or isinstance(node, ast.Assert)))
    return out


@dataclass
class Evidence:
    """Which heads of a file hold floats (rule 3)."""

    names: dict[str, set[str]] = field(default_factory=dict)  # scope -> variable names
    other: set[tuple[str, str]] = field(default_factory=set)  # attrs, string keys, callees
    assigned: dict[str, dict[str, set[str]]] = field(default_factory=dict)  # scope -> name -> callees
    local: dict[str, set[str]] = field(default_factory=dict)  # scope -> names assigned there

    def mark(self, scope: str, keys: set[tuple[str, str]]) -> None:
        for kind, key in keys:
            if kind == "name":
                where = scope if key in self.local.get(scope, ()) else "<module>"
                self.names.setdefault(where, set()).add(key)
            else:
                self.other.add((kind, key))

    def floaty(self, scope: str, keys: set[tuple[str, str]]) -> bool:
        for kind, key in keys:
            if kind == "name":
                where = scope if key in self.local.get(scope, ()) else "<module>"
                if key in self.names.get(where, ()):
                    return True
            elif (kind, key) in self.other:
                return True
        return False


def collect_evidence(nodes: list[tuple[str, ast.AST, ast.AST, bool]]) -> Evidence:
    ev = Evidence()
    for scope, node, _, _ in nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    ev.local.setdefault(scope, set()).add(t.id)
                    if isinstance(node.value, ast.Call):
                        ev.assigned.setdefault(scope, {}).setdefault(t.id, set()).update(
                            k for kind, k in heads(node.value) if kind == "call")
    for scope, node, _, _ in nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _is_float_expr(node.value):
                ev.mark(scope, {("name", t.id) for t in targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, a, b in zip(node.ops, operands, operands[1:], strict=False):
                for x, y in ((a, b), (b, a)):
                    if isinstance(y, ast.Call) and _call_name(y) == "approx" and isinstance(op, (ast.Eq, ast.NotEq)):
                        ev.mark(scope, heads(x, evidence=True))
                        if y.args:
                            ev.mark(scope, heads(y.args[0], evidence=True))
                    elif has_fractional_literal(y) and not isinstance(op, (ast.In, ast.NotIn, ast.Is, ast.IsNot)):
                        ev.mark(scope, heads(x, evidence=True))
        elif isinstance(node, ast.Call) and _call_name(node) in TOLERANT_CALLS:
            for a in node.args[:2]:
                ev.mark(scope, heads(a, evidence=True))
    # a variable assigned from f(...) is a float wherever f's result is, and the other way round
    for _ in range(3):
        for scope, names in ev.assigned.items():
            for name, callees in names.items():
                if name in ev.names.get(scope, ()):
                    ev.other.update(("call", c) for c in callees)
                elif any(("call", c) in ev.other for c in callees):
                    ev.names.setdefault(scope, set()).add(name)
    return ev


def _zero_tolerance(call: ast.Call) -> bool:
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    def zero(name: str, default: bool) -> bool:
        v = kw.get(name)
        if v is None:
            return default
        return isinstance(v, ast.Constant) and v.value == 0
    name = _call_name(call)
    if name == "assert_allclose":  # numpy's default atol is 0, rtol 1e-7
        return zero("rtol", False) and zero("atol", True)
    return zero("rtol", False) and zero("atol", False)


def _int_literal(node: ast.AST) -> bool:
    leaves = list(_literal_values(node))
    return bool(leaves) and node is not leaves[0] and all(
        isinstance(x, ast.Constant) and isinstance(x.value, int) for x in leaves)


def _marker_lines(lines: list[str], nodes: list[tuple[str, ast.AST, ast.AST, bool]]
                  ) -> tuple[dict[int, str], list[int], set[int]]:
    """``{line: reason}`` of ``# exact: reason`` comments, the lines whose marker has no reason, and
    the lines that hold nothing but a comment. A ``# exact:`` inside a string literal is no marker."""
    marked, bare = {}, []
    comment_only = {n for n, line in enumerate(lines, 1) if line.lstrip().startswith("#")}
    found = {n: m for n, line in enumerate(lines, 1) if "exact:" in line and (m := MARKER.search(line))}
    if found:
        strings = [(s.lineno, s.col_offset, s.end_lineno, s.end_col_offset) for _, s, _, _ in nodes
                   if isinstance(s, ast.JoinedStr) or (isinstance(s, ast.Constant) and isinstance(s.value, str))]
        for n, m in found.items():
            at = (n, m.start())
            if any((l0, c0) <= at < (l1, c1) for l0, c0, l1, c1 in strings):
                continue
            reason = m.group(1).strip()
            if len(reason) < 3:
                bare.append(n)
            else:
                marked[n] = reason
    return marked, bare, comment_only


def scan_source(source: str, path: str = "<snippet>") -> list[Finding]:
    """Every exact comparison of (likely) computed floats in ``source`` that no ``# exact:`` explains.

    A marker counts on any line of the statement that holds the comparison, or in the block of
    comment-only lines right above that statement."""
    tree = ast.parse(source)
    lines = source.splitlines()
    nodes = _index(tree)
    marked, bare, comment_only = _marker_lines(lines, nodes)
    ev = collect_evidence(nodes)
    found: list[Finding] = [Finding(path, n, lines[n - 1].strip(), "'# exact:' needs a reason") for n in bare]
    seen: set[tuple[int, int]] = set()

    def explained(node: ast.AST, stmt: ast.AST) -> bool:
        first, last = min(stmt.lineno, node.lineno), max(stmt.end_lineno or 0, node.end_lineno or node.lineno)
        above = first - 1
        while above in comment_only:
            if above in marked:
                return True
            above -= 1
        return any(n in marked for n in range(first, last + 1))

    def report(node: ast.AST, stmt: ast.AST, why: str) -> None:
        if (node.lineno, node.col_offset) in seen or explained(node, stmt):
            return
        seen.add((node.lineno, node.col_offset))
        text = lines[node.lineno - 1].strip()
        if (path, text) in PENDING:
            return
        found.append(Finding(path, node.lineno, text, why))

    for scope, node, stmt, asserted in nodes:
        if isinstance(node, ast.Compare) and asserted:
            operands = [node.left, *node.comparators]
            for op, a, b in zip(node.ops, operands, operands[1:], strict=False):
                if not isinstance(op, (ast.Eq, ast.NotEq)) or is_exempt(a) or is_exempt(b):
                    continue
                sign = "==" if isinstance(op, ast.Eq) else "!="
                if has_fractional_literal(a) or has_fractional_literal(b):
                    report(node, stmt, f"{sign} with a fractional float literal")
                elif call := float_call(a) or float_call(b):
                    report(node, stmt, f"{sign} on the result of {call}")
                elif ev.floaty(scope, heads(a)) or ev.floaty(scope, heads(b)):
                    report(node, stmt, f"{sign} between values this file treats as floats")
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            exact = (name in EQUAL_CALLS and (name != "equal" or _dotted(node.func).startswith("torch"))) \
                or (name in TOLERANT_CALLS and _zero_tolerance(node))
            if exact and not any(_int_literal(a) for a in node.args[:2]):
                report(node, stmt, f"{_dotted(node.func) or name} compares floats bit for bit")
    return sorted(found, key=lambda f: (f.line, f.why))


def scan_tree(root: Path = TESTS) -> list[Finding]:
    out: list[Finding] = []
    for path in sorted(root.rglob("*.py")):
        out += scan_source(path.read_text(encoding="utf-8"), str(path.relative_to(root.parent)))
    return out


# ----------------------------------------------------------------------------------------------
# the scanner's own tests


def flagged(snippet: str) -> list[int]:
    return [f.line for f in scan_source(snippet)]


def test_flags_two_computed_floats_compared_exactly():
    # the case CI met: both sides are one function's float results, known as floats from another test
    snippet = (
        "def test_values():\n"
        "    phi = coverage_shapley(E, R)\n"
        "    assert phi == pytest.approx([0.5, 0.5])\n"
        "def test_symmetry():\n"
        "    phi = coverage_shapley(E, R)\n"
        "    assert phi[0] == phi[1]\n"
        "    assert phi[3] == 0.0\n"
        "    assert phi[0] < phi[2]\n"
    )
    assert flagged(snippet) == [6, 7]


def test_flags_attributes_keys_literals_calls_and_equal_functions():
    snippet = (
        "def test_a():\n"
        "    assert run.total < 0.5\n"
        "    assert m['loss'] == pytest.approx(0.25)\n"
        "def test_b():\n"
        "    assert a.total == b.total\n"        # 5: attribute known as a float
        "    assert m['loss'] != n['loss']\n"    # 6: string key known as a float
        "    assert lr == 0.003\n"               # 7: fractional literal
        "    assert x.mean().item() == y\n"      # 8: float-computing call
        "    assert math.log(6) == s\n"          # 9
        "    assert np.array_equal(u, v)\n"      # 10
        "    torch.testing.assert_close(u, v, rtol=0, atol=0)\n"  # 11
        "    assert all(x.total == y.total for x, y in zip(a, b))\n"  # 12
    )
    assert flagged(snippet) == [5, 6, 7, 8, 9, 10, 11, 12]


def test_passes_bounded_exempt_and_unhinted_comparisons():
    snippet = (
        "def test_ok():\n"
        "    phi = coverage_shapley(E, R)\n"
        "    assert phi[0] == pytest.approx(phi[1], rel=4 * EPS)\n"
        "    assert math.isclose(phi.sum(), math.log(6), rel_tol=1e-15)\n"
        "    assert len(phi) == 4 and phi.shape == (4,) and int(phi.sum()) == 1\n"
        "    assert round(phi[0], 3) == 0.549\n"
        "    assert ep.reward == 1.0 and ep.text == 'x' and ids == [1, 2]\n"  # no hint that reward is computed
        "    assert torch.equal(mask, torch.tensor([1, 0]))\n"             # integer tensor
        "    torch.testing.assert_close(u, v, rtol=0, atol=1e-6)\n"
        "    assert a.total == b.total\n"                                   # nothing says total is a float
    )
    assert flagged(snippet) == []


def test_an_exact_marker_with_a_reason_passes_and_one_without_is_reported():
    snippet = (
        "def test_m():\n"
        "    x = torch.ones(3).sum().item()\n"
        "    assert x == x + 0.0  # exact: adding 0.0 is exact\n"
        "    assert torch.equal(\n"
        "        a, b)  # exact: b is a copy of a\n"
        "    # exact: both are float32 copies of one tensor, no arithmetic\n"
        "    # (the marker may sit in the comment block above the statement)\n"
        "    assert torch.equal(u,\n"
        "                       v)\n"
        "    assert x == 3.5  # exact:\n"
        "    assert x == 2.5, '# exact: in a string is no marker'\n"
    )
    found = scan_source(snippet)
    assert [(f.line, f.why) for f in found] == [
        (10, "'# exact:' needs a reason"), (10, "== with a fractional float literal"),
        (11, "== with a fractional float literal")]


def test_the_tests_compare_computed_floats_only_within_a_bound_or_with_a_stated_reason():
    start = time.process_time()  # CPU time: a loaded machine stretches the wall clock, not this
    found = scan_tree()
    took = time.process_time() - start
    assert not found, (
        f"{len(found)} exact float comparison(s): bound each (pytest.approx / math.isclose with a comment "
        "on what it tolerates) or, if exact by construction, end the line with '# exact: <reason>' "
        "(see this file's docstring):\n" + "\n".join(map(str, found)))
    assert took < 2.0, f"the scan took {took:.2f} s of CPU time"  # about 0.6 s for 200 files


if __name__ == "__main__":  # python -m tests.test_float_comparisons: list what the scan finds
    for finding in scan_tree():
        print(finding)
