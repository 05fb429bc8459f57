"""One registry of credit methods, one signature.

A credit method is a pure function

    method(batch: CreditBatch, options: <its pydantic options model>) -> list[np.ndarray]

returning, for each episode ``g`` of the group, a float64 array of shape [T_g] (one advantage per
message of ``batch.episodes[g]``, skipped turns included, which get 0 by convention). The dispatcher
``assign`` never looks at a method's name: everything a method needs is in the batch or its options.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

from teamplay.errors import ConfigError
from teamplay.records import Episode, TaskItem


@dataclass(frozen=True)
class CreditBatch:
    """A group of G episodes of one problem, plus what methods may need to re-score them.

    Fields:
        episodes: G >= 1 episodes of the same problem (same ``problem_id``).
        item: the problem (needed by methods that re-score answers with the verifier).
        score: the task's verifier, ``score(text, item) -> float in [0, 1]``.
        extract: the task's answer extractor, ``extract(text) -> str | None``.
        resources: optional helpers for expensive methods (an LLM judge, a replay engine,
            an embedding model), by name; a method that needs one it is not given raises a
            ``ValueError`` saying which.
    """

    episodes: tuple[Episode, ...]
    item: TaskItem | None = None
    score: Callable[[str, TaskItem], float] | None = None
    extract: Callable[[str], str | None] | None = None
    resources: Mapping[str, Any] = field(default_factory=dict)


CreditFn = Callable[[CreditBatch, BaseModel], list[np.ndarray]]


@dataclass(frozen=True)
class CreditMethod:
    name: str
    fn: CreditFn
    options: type[BaseModel]
    summary: str


_REGISTRY: dict[str, CreditMethod] = {}


def register_credit(name: str, options: type[BaseModel], summary: str) -> Callable[[CreditFn], CreditFn]:
    """Decorator registering ``fn`` under ``name``; a duplicate name is an error."""

    def wrap(fn: CreditFn) -> CreditFn:
        if name in _REGISTRY:
            raise ValueError(f"credit method {name!r} is already registered")
        _REGISTRY[name] = CreditMethod(name=name, fn=fn, options=options, summary=summary)
        return fn

    return wrap


def credit_methods() -> dict[str, CreditMethod]:
    """All registered methods by name (importing ``teamplay.credit`` registers the built-ins)."""
    return dict(sorted(_REGISTRY.items()))


def get_credit(name: str) -> CreditMethod:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"unknown credit method {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def parse_options(method: CreditMethod, options: BaseModel | Mapping[str, Any] | None) -> BaseModel:
    if isinstance(options, method.options):
        return options
    try:
        return method.options.model_validate(dict(options or {}))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"credit.options.{where}: {first['msg']} (method {method.name!r})") from None


def assign(name: str, batch: CreditBatch, options: BaseModel | Mapping[str, Any] | None = None
           ) -> list[np.ndarray]:
    """Run credit method ``name`` on ``batch``; checks the output shape contract."""
    method = get_credit(name)
    validate_batch(batch.episodes)
    out = method.fn(batch, parse_options(method, options))
    if len(out) != len(batch.episodes):
        raise RuntimeError(f"credit method {name!r} returned {len(out)} arrays for {len(batch.episodes)} episodes")
    for g, (adv, ep) in enumerate(zip(out, batch.episodes, strict=True)):
        if np.shape(adv) != (len(ep.messages),):
            raise RuntimeError(f"credit method {name!r}: episode {g} has {len(ep.messages)} messages "
                               f"but {np.shape(adv)} advantages")
        if not np.all(np.isfinite(adv)):
            raise RuntimeError(f"credit method {name!r} produced non-finite advantages for episode {g}")
    return [np.asarray(a, dtype=np.float64) for a in out]


def validate_batch(episodes: Sequence[Episode]) -> None:
    """Refuse empty groups and non-finite rewards with a ValueError that says what is wrong."""
    if len(episodes) == 0:
        raise ValueError("credit: empty group (need at least one episode)")
    for g, ep in enumerate(episodes):
        if not np.isfinite(ep.reward):
            raise ValueError(f"credit: episode {g} ({ep.problem_id}) has non-finite reward {ep.reward!r}")
    ids = {ep.problem_id for ep in episodes}
    if len(ids) > 1:
        raise ValueError(f"credit: a group must hold episodes of one problem, got {sorted(ids)}")
