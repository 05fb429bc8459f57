"""One registry helper for everything a user can name in a config: protocols, credit methods, tasks,
generation backends.

A registry maps names to entries. Built-ins register with the registry's decorator
(``@CREDIT.register("shapley")``-style factories built on :meth:`Registry.add`) or, when importing
the entry would be expensive (vLLM), lazily as ``"module:attribute"``. A user's own entry needs no
registration at all: the config names it by path, ``./my_credit.py:blend``, and :meth:`Registry.get`
imports that file and takes the attribute. Importing a user's file runs its code, by design: only
name files you trust.

Every failure is a :class:`~teamplay.errors.ConfigError` naming the config field, the value and the
known names, so ``teamplay`` prints one ``error:`` line.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from teamplay.errors import ConfigError, did_you_mean

T = TypeVar("T")

#: modules of user files already imported, by resolved path (a file is imported once per process)
_USER_MODULES: dict[Path, Any] = {}


def is_plugin_spec(name: str) -> bool:
    """Whether ``name`` names an attribute of a user's Python file (``path/to/file.py:attr``).

    >>> is_plugin_spec("./my_credit.py:blend"), is_plugin_spec("shapley")
    (True, False)
    """
    path, sep, attr = name.rpartition(":")
    return bool(sep) and path.endswith(".py") and attr.isidentifier()


def import_user_file(path: str | Path, field: str) -> Any:
    """Import the Python file ``path`` as a module (once per process); errors name ``field``."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{field}: file not found: {path}")
    key = file.resolve()
    if key in _USER_MODULES:
        return _USER_MODULES[key]
    # named by the file's path (not by hash(), which differs between processes)
    module_name = f"teamplay_user_{file.stem}_{hashlib.sha256(str(key).encode()).hexdigest()[:16]}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{field}: {path}: cannot import this file as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pydantic resolve annotations through it
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        del sys.modules[module_name]
        raise ConfigError(f"{field}: {path}:{exc.lineno}: invalid Python: {exc.msg}") from exc
    except ConfigError:
        del sys.modules[module_name]
        raise
    except Exception as exc:
        del sys.modules[module_name]
        raise ConfigError(f"{field}: importing {path} failed: {type(exc).__name__}: {exc}") from exc
    _USER_MODULES[key] = module
    return module


def user_modules() -> list[Any]:
    """The modules imported from users' files in this process (``import_user_file``), in import
    order: a process that ships objects of them elsewhere (Ray workers) sends them by value."""
    return list(_USER_MODULES.values())


def decorated(kind: type[T], attribute: str, decorator: str) -> Callable[[Any, str], T]:
    """A ``check`` for registries of functions registered by a decorator that keeps the record in
    ``fn.<attribute>``: a user's file names the function, the registry takes its record."""

    def check(entry: Any, where: str) -> T:
        record = getattr(entry, attribute, entry)
        if not isinstance(record, kind):
            raise ConfigError(f"{where}: not a {kind.__name__}; decorate the function with {decorator}")
        return record

    return check


class Registry(Generic[T]):
    """Names -> entries of one kind, plus user entries by file path.

    ``kind`` ("credit method") and ``field`` ("credit.method") make the error messages;
    ``check(entry, where)`` validates (and may convert) a user's attribute, raising ConfigError.
    """

    def __init__(self, kind: str, field: str, check: Callable[[Any, str], T] | None = None) -> None:
        self.kind = kind
        self.field = field
        self._check = check
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, str] = {}
        self._plugins: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` under ``name``; a name registered twice is a ValueError (a bug)."""
        if not name:
            raise ValueError(f"a {self.kind} needs a name")
        if name in self._entries or name in self._lazy:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`: ``@REGISTRY.register("name")``."""
        return lambda entry: self.add(name, entry)

    def add_lazy(self, name: str, target: str) -> None:
        """Register ``"module:attribute"``, imported on first :meth:`get`."""
        if name in self._entries or name in self._lazy:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._lazy[name] = target

    def names(self) -> list[str]:
        """Registered names (built-in and lazy), sorted."""
        return sorted({*self._entries, *self._lazy})

    def entries(self) -> dict[str, T]:
        """Every registered entry by name, sorted (lazy ones imported)."""
        return {name: self.get(name) for name in self.names()}

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._entries or name in self._lazy or is_plugin_spec(name))

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str) -> T:
        """The entry for a registered name or a ``file.py:attr`` spec (imported once)."""
        if not isinstance(name, str):
            raise ConfigError(f"{self.field}: expected a name, got {type(name).__name__}")
        if name in self._entries:
            return self._entries[name]
        if name in self._lazy:
            module, _, attr = self._lazy[name].partition(":")
            return getattr(importlib.import_module(module), attr)
        if is_plugin_spec(name):
            return self.load_plugin(name)
        raise ConfigError(f"{self.field}: unknown {self.kind} {name!r}{did_you_mean(name, self.names())}; "
                          f"known: {', '.join(self.names())}; "
                          f"or a user file as path/to/file.py:name")

    def load_plugin(self, spec: str) -> T:
        """The attribute named by ``spec`` (``path.py:attr``) of a user's file, checked."""
        if spec in self._plugins:
            return self._plugins[spec]
        path, _, attr = spec.rpartition(":")
        module = import_user_file(path, self.field)
        if not hasattr(module, attr):
            raise ConfigError(f"{self.field}: {path} defines no {attr!r}")
        entry = getattr(module, attr)
        if self._check is not None:
            entry = self._check(entry, f"{self.field}: {spec}")
        self._plugins[spec] = entry
        return entry

    def plugins(self) -> dict[str, T]:
        """User entries loaded so far, by spec."""
        return dict(self._plugins)
