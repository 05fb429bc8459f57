"""Reading a config: YAML files, ``--set`` overrides, and one line per invalid field.

Loading reports the first invalid field by its dotted path, with the value given and what is
allowed:

    config error: sampling.temperature: Input should be greater than or equal to 0 (got -1)

``--set a.b=c`` overrides are applied to the YAML mapping before validation; values are parsed as
YAML scalars (``--set sampling.temperature=0.7``, ``--set team.roles=[...]``). The loader knows no
section: it validates into whichever model it is given (``TrainConfig``, ``EvalConfig``, ...).

Files and overrides are read as YAML with one change: ``1e-4`` is a float, as in YAML 1.2 and
JSON (PyYAML's YAML 1.1 reads it as a string, which the strict sections would refuse). An unknown
field or a value outside a fixed list of names gets the closest known one ("did you mean").
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from teamplay.errors import ConfigError, did_you_mean

C = TypeVar("C", bound=BaseModel)


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for ``dotted = "a.b.c"``, creating mappings on the way."""
    keys = dotted.split(".")
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: {'.'.join(keys[:i + 1])} is not a section")
        node = child
    node[keys[-1]] = value


def parse_overrides(overrides: Sequence[str]) -> list[tuple[str, Any]]:
    """Parse ``["a.b=1", "c=[x, y]"]`` into (key, YAML-parsed value) pairs."""
    parsed = []
    for text in overrides:
        key, sep, raw = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set sampling.temperature=0.7")
        try:
            value = yaml.load(raw, Loader=_ConfigLoader) if raw.strip() else ""  # noqa: S506 - a SafeLoader
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc.problem})") from None
        parsed.append((key.strip(), value))
    return parsed


class _ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that reads ``1e-4`` (an exponent without a dot, or with an unsigned
    exponent: ``1.0e5``) as a float, as YAML 1.2 and JSON do, rather than as a string."""


_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


class _UniqueKeyLoader(_ConfigLoader):
    """``_ConfigLoader`` that refuses a key given twice in one mapping.

    Plain YAML loaders keep the last value silently, so ``lr: 1e-4`` followed later by
    ``lr: 1.0`` trains with 1.0 while the reader of the file sees 1e-4.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                first = seen[key].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first given on line {first})", key_node.start_mark)
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; missing file, syntax errors and duplicate keys name the file (and line)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"malformed YAML in {path}{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def build_config(model: type[C], data: Mapping[str, Any], overrides: Sequence[str] = ()) -> C:
    """Validate ``data`` (plus ``--set`` overrides) into ``model``; errors name the field."""
    merged = yaml.safe_load(yaml.safe_dump(dict(data)))  # deep copy of plain data
    for key, value in parse_overrides(overrides):
        set_dotted(merged, key, value)
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, model)) from None


def load_config(model: type[C], path: str | Path | None, overrides: Sequence[str] = ()) -> C:
    """Load a YAML file (or defaults when ``path`` is None) into ``model``."""
    return build_config(model, read_yaml(path) if path else {}, overrides)


def format_validation_error(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """One line per invalid field: ``a.b.c: message (got value)``, joined by ``; ``.

    With ``model`` (the one validated), an unknown field names the closest field of its section, and
    the errors of a union's members are one error: ``a: Input should be a valid string or a valid
    list (got 3)`` rather than one line per member, each under a loc naming the member type."""
    lines: dict[str, list[str]] = {}  # "a.b.c" + " (got ...)" -> its messages
    for err in exc.errors():
        if err["type"] == "value_error" and (not err["loc"] or "ctx" in err):
            # a cross-field rule (model_validator): its message names the fields itself
            lines.setdefault(str(err["ctx"]["error"]) if "ctx" in err else err["msg"], [])
            continue
        loc = _without_union_tags(model, err["loc"]) if model is not None else err["loc"]
        where = ".".join(str(p) for p in loc) or "(top level)"
        got = err.get("input")
        shown = "" if isinstance(got, dict) or err["type"] == "missing" else f" (got {got!r})"
        lines.setdefault(f"{where}: {{}}{shown}", []).append(_message(err, model))
    return "; ".join(line.format(" or ".join([msgs[0], *(m.removeprefix("Input should be ") for m in msgs[1:])]))
                     if msgs else line for line, msgs in lines.items())


def _message(err: Any, model: type[BaseModel] | None) -> str:
    """pydantic's message for ``err``, said for a config: unknown fields and names get a "did you mean";
    a value of the wrong type (a boolean for a number, a number for a boolean, a string for either)
    is named as such."""
    got, kind = err.get("input"), err["type"]
    if kind == "extra_forbidden":
        hint = did_you_mean(str(err["loc"][-1]), _fields_at(model, err["loc"][:-1]) if model is not None else [])
        return f"unknown field{hint or ' (check the spelling; see docs/reference/configuration.md)'}"
    if kind == "literal_error":
        return err["msg"] + did_you_mean(str(got), re.findall(r"'([^']*)'", err["ctx"]["expected"]))
    wanted = {"int_type": "an integer", "float_type": "a number", "bool_type": "true or false"}.get(kind)
    if wanted and type(got) in (bool, int, float, str):
        what = {bool: "a boolean", str: "a string", int: "an integer", float: "a float"}[type(got)]
        return f"expected {wanted}, not {what}"
    return err["msg"]


def _fields_at(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """The field names of the model found at ``loc`` (field names, item indexes, dict keys) inside
    ``model``; [] where ``loc`` leads to no model."""
    here: list[Any] = [model]
    for part in loc:
        here = [found for tp in here for found in _step(tp, part)]
    return sorted({name for tp in here if _is_model(tp) for name in tp.model_fields})


def _without_union_tags(model: type[BaseModel], loc: Sequence[Any]) -> tuple[Any, ...]:
    """``loc`` without the member names pydantic puts after a union field (``target_modules.str``)."""
    here: list[Any] = [model]
    kept = []
    for part in loc:
        members = [tp for tp in here if tp is not type(None)]
        if isinstance(part, str) and len(members) > 1 and not any(_step(tp, part) for tp in members):
            continue  # the name of the union member that refused the value, not a field
        kept.append(part)
        here = [found for tp in here for found in _step(tp, part)]
    return tuple(kept)


def _step(tp: Any, part: Any) -> list[Any]:
    """The types a value may have at ``part`` (a field name, an item index or a dict key) inside a
    value of type ``tp``."""
    if _is_model(tp):
        return _options(tp.model_fields[part].annotation) if part in tp.model_fields else []
    origin = typing.get_origin(tp)
    if origin is dict or (origin in (list, tuple) and isinstance(part, int)):
        items = [arg for arg in typing.get_args(tp) if arg is not Ellipsis]
        return _options(items[-1]) if items else []
    return []


def _options(annotation: Any) -> list[Any]:
    """The members of a union (an optional field has two), or ``[annotation]``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [member for arg in typing.get_args(annotation) for member in _options(arg)]
    return [annotation]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)
