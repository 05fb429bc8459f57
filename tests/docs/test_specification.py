"""The credit specification page (``docs/credit/specification.md``) names, beside each worked
number, the test that checks it: every one it names exists, so a renamed or deleted test cannot
leave a number on the page unchecked."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "credit" / "specification.md"
#: ``tests/x.py::test_name``, ``tests/x.py`` alone, or ``::test_name`` (in the file named last)
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)?(?:::(test_\w+))?`")


def named_tests() -> list[tuple[str, str]]:
    """(test file, test function) for every test the page names; ``::name`` takes the last file."""
    out, current = [], None
    for m in REFERENCE.finditer(PAGE.read_text(encoding="utf-8")):
        current = m.group(1) or current
        if m.group(2):
            assert current is not None, f"{m.group(0)} names no file before it"
            out.append((current, m.group(2)))
    return out


def functions(path: Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.FunctionDef)}


def test_every_test_the_page_names_exists():
    named = named_tests()
    assert len(named) >= 30  # one per worked number or check; the page names about forty
    missing = [f"{file}::{name}" for file, name in named
               if not (ROOT / file).is_file() or name not in functions(ROOT / file)]
    assert not missing, "the specification names tests that do not exist:\n" + "\n".join(missing)


def test_the_page_is_in_the_site_navigation():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    credit = next(entry["Credit"] for entry in nav if isinstance(entry, dict) and "Credit" in entry)
    assert "credit/specification.md" in [page for entry in credit for page in entry.values()]
