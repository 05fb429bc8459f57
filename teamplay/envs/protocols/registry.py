"""Protocol registry: built-in protocols by name, user protocols by file path.

``get_protocol("debate", rounds=3)`` builds a registered protocol with validated options;
``get_protocol("configs/protocols/solver_checker.yaml")`` loads a YAML protocol and
``get_protocol("configs/protocols/example_protocol.py")`` a Python file that defines exactly one
``Protocol`` subclass (``file.py:ClassName`` picks one of several). Loading a Python file runs its
code, by design. Every failure is a one-line ``ConfigError`` naming what to fix. A protocol's
traits are checked when it is registered or loaded (``teamplay.envs.protocols.traits``);
``traits_of`` reads what one declares and ``protocols_with`` finds the registered ones that declare
some.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from teamplay.envs.protocols.base import Protocol
from teamplay.envs.protocols.traits import check_traits
from teamplay.errors import ConfigError, did_you_mean
from teamplay.registry import Registry, import_user_file, is_plugin_spec


def _check_protocol(entry: Any, where: str) -> type[Protocol]:
    if not (inspect.isclass(entry) and issubclass(entry, Protocol) and not inspect.isabstract(entry)):
        raise ConfigError(f"{where}: not a concrete Protocol subclass")
    check_traits(entry.traits, f"{where}: traits")
    return entry


PROTOCOLS: Registry[type[Protocol]] = Registry("protocol", "protocol.name", _check_protocol)

YAML_SUFFIXES = (".yaml", ".yml")


def register_protocol(cls: type[Protocol]) -> type[Protocol]:
    """Class decorator adding ``cls`` under ``cls.name``; a repeated name is a ``ValueError``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name; set the class attribute `name`")
    check_traits(cls.traits, f"protocol {cls.name!r}: traits")
    return PROTOCOLS.add(cls.name, cls)


def protocol_names() -> list[str]:
    """Names of the registered protocols, sorted."""
    return PROTOCOLS.names()


def get_protocol(name_or_path: str, **options: Any) -> Protocol:
    """A protocol instance by registry name or by ``.yaml``/``.yml``/``.py`` file path.

    Raises ``ConfigError`` for an unknown name, a missing or malformed file and invalid options.
    """
    if not isinstance(name_or_path, str):
        raise ConfigError(f"protocol: expected a name or a file path, got {type(name_or_path).__name__}")
    if name_or_path in PROTOCOLS.names() or is_plugin_spec(name_or_path):
        return PROTOCOLS.get(name_or_path)(**options)
    suffix = Path(name_or_path).suffix.lower()
    if suffix in YAML_SUFFIXES or suffix == ".py":
        path = Path(name_or_path)
        if not path.is_file():
            raise ConfigError(f"protocol file not found: {name_or_path}")
        if suffix == ".py":
            return load_python_protocol(path)(**options)
        from teamplay.envs.protocols.yaml_protocol import load_yaml_protocol

        return load_yaml_protocol(path, **options)
    raise ConfigError(f"unknown protocol {name_or_path!r}{did_you_mean(name_or_path, protocol_names())} "
                      f"(known: {', '.join(protocol_names())}; "
                      f"or a path to a .yaml/.py protocol file)")


def load_python_protocol(path: Path) -> type[Protocol]:
    """The one concrete ``Protocol`` subclass defined in the Python file ``path``."""
    module = import_user_file(path, "protocol.name")
    module_name = module.__name__
    found = [obj for obj in vars(module).values()
             if inspect.isclass(obj) and issubclass(obj, Protocol) and obj.__module__ == module_name
             and not inspect.isabstract(obj)]
    if len(found) != 1:
        names = ", ".join(c.__name__ for c in found) or "none"
        raise ConfigError(f"{path}: a protocol file must define exactly one concrete Protocol "
                          f"subclass, found {len(found)} ({names})")
    check_traits(found[0].traits, f"{path}: {found[0].__name__}.traits")
    return found[0]


def traits_of(protocol: Any) -> frozenset[str]:
    """The traits a protocol declares: ``protocol`` is a ``Protocol`` (instance or class) or a name.

    A registered name gives its class's traits; any other name (a YAML protocol named only by its
    ``name:``) declares none: pass the protocol object to read a user protocol's traits.
    """
    if isinstance(protocol, str):
        return frozenset(PROTOCOLS.get(protocol).traits) if protocol in PROTOCOLS.names() else frozenset()
    return frozenset(getattr(protocol, "traits", frozenset()))


def protocols_with(traits: Iterable[str]) -> list[str]:
    """The registered protocols that declare every trait of ``traits``, sorted."""
    needed = frozenset(traits)
    return [name for name in PROTOCOLS.names() if needed <= frozenset(PROTOCOLS.get(name).traits)]
