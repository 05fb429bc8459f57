"""Protocol registry: built-in protocols by name, user protocols by file path.

``get_protocol("debate", rounds=3)`` builds a registered protocol with validated options;
``get_protocol("configs/protocols/solver_checker.yaml")`` loads a YAML protocol and
``get_protocol("configs/protocols/example_protocol.py")`` a Python file that defines exactly one
``Protocol`` subclass. Every failure is a one-line ``ConfigError`` naming what to fix.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from teamplay.envs.protocols.base import Protocol
from teamplay.errors import ConfigError

_REGISTRY: dict[str, type[Protocol]] = {}

YAML_SUFFIXES = (".yaml", ".yml")


def register_protocol(cls: type[Protocol]) -> type[Protocol]:
    """Class decorator adding ``cls`` under ``cls.name``; a repeated name is a ``ValueError``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name; set the class attribute `name`")
    if cls.name in _REGISTRY:
        raise ValueError(f"protocol {cls.name!r} is already registered by "
                         f"{_REGISTRY[cls.name].__module__}.{_REGISTRY[cls.name].__name__}")
    _REGISTRY[cls.name] = cls
    return cls


def protocol_names() -> list[str]:
    """Names of the registered protocols, sorted."""
    return sorted(_REGISTRY)


def get_protocol(name_or_path: str, **options: Any) -> Protocol:
    """A protocol instance by registry name or by ``.yaml``/``.yml``/``.py`` file path.

    Raises ``ConfigError`` for an unknown name, a missing or malformed file and invalid options.
    """
    if not isinstance(name_or_path, str):
        raise ConfigError(f"protocol: expected a name or a file path, got {type(name_or_path).__name__}")
    if name_or_path in _REGISTRY:
        return _REGISTRY[name_or_path](**options)
    suffix = Path(name_or_path).suffix.lower()
    if suffix in YAML_SUFFIXES or suffix == ".py":
        path = Path(name_or_path)
        if not path.is_file():
            raise ConfigError(f"protocol file not found: {name_or_path}")
        if suffix == ".py":
            return load_python_protocol(path)(**options)
        from teamplay.envs.protocols.yaml_protocol import load_yaml_protocol

        return load_yaml_protocol(path, **options)
    raise ConfigError(f"unknown protocol {name_or_path!r} (known: {', '.join(protocol_names())}; "
                      f"or a path to a .yaml/.py protocol file)")


def load_python_protocol(path: Path) -> type[Protocol]:
    """The one concrete ``Protocol`` subclass defined in the Python file ``path``."""
    module_name = f"teamplay_user_protocol_{path.stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: cannot import this file as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pydantic resolve annotations through it
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[module_name]
        raise ConfigError(f"{path}:{exc.lineno}: invalid Python: {exc.msg}") from exc
    except Exception as exc:
        del sys.modules[module_name]
        raise ConfigError(f"{path}: importing the protocol file failed: "
                          f"{type(exc).__name__}: {exc}") from exc
    found = [obj for obj in vars(module).values()
             if inspect.isclass(obj) and issubclass(obj, Protocol) and obj.__module__ == module_name
             and not inspect.isabstract(obj)]
    if len(found) != 1:
        names = ", ".join(c.__name__ for c in found) or "none"
        raise ConfigError(f"{path}: a protocol file must define exactly one concrete Protocol "
                          f"subclass, found {len(found)} ({names})")
    return found[0]
