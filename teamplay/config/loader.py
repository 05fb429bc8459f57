"""Reading a config: YAML files, ``--set`` overrides, and one line per invalid field.

Loading reports the first invalid field by its dotted path, with the value given and what is
allowed:

    config error: sampling.temperature: Input should be greater than or equal to 0 (got -1)

``--set a.b=c`` overrides are applied to the YAML mapping before validation; values are parsed as
YAML scalars (``--set sampling.temperature=0.7``, ``--set team.roles=[...]``). The loader knows no
section: it validates into whichever model it is given (``TrainConfig``, ``EvalConfig``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from teamplay.errors import ConfigError

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
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc.problem})") from None
        parsed.append((key.strip(), value))
    return parsed


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping.

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
        raise ConfigError(format_validation_error(exc)) from None


def load_config(model: type[C], path: str | Path | None, overrides: Sequence[str] = ()) -> C:
    """Load a YAML file (or defaults when ``path`` is None) into ``model``."""
    return build_config(model, read_yaml(path) if path else {}, overrides)


def format_validation_error(exc: ValidationError) -> str:
    """One line per invalid field: ``a.b.c: message (got value)``."""
    lines = []
    for err in exc.errors():
        if err["type"] == "value_error" and (not err["loc"] or "ctx" in err):
            # a cross-field rule (model_validator): its message names the fields itself
            lines.append(str(err["ctx"]["error"]) if "ctx" in err else err["msg"])
            continue
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see docs/reference/configuration.md)"
        got = err.get("input")
        shown = "" if isinstance(got, dict) or err["type"] == "missing" else f" (got {got!r})"
        lines.append(f"{where}: {msg}{shown}")
    return "; ".join(lines)
