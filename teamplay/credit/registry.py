"""One registry of credit methods, one signature.

A credit method is a pure function

    method(batch: CreditBatch, options: <its pydantic options model>) -> list[np.ndarray]

returning, for each episode ``g`` of the group, a float64 array of shape [T_g] (one advantage per
message of ``batch.episodes[g]``, skipped turns included, which get 0 by convention). The dispatcher
``assign`` never looks at a method's name: everything a method needs is in the batch or its options.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from teamplay.credit.values.generative_judge import GenerativeJudge
from teamplay.credit.values.listener_query import ListenerScorer
from teamplay.credit.values.replay_query import ReplayEngine
from teamplay.errors import ConfigError, DataError, TeamplayError, TeamplayWarning
from teamplay.records import Episode, TaskItem
from teamplay.registry import Registry, decorated

if TYPE_CHECKING:
    from teamplay.envs.protocols.base import Protocol


@dataclass(frozen=True)
class CreditResources:
    """What expensive credit methods may use, beyond the episodes: typed, named, each optional.

    A method declares the fields it needs when it registers (``requires``); a run whose trainer does
    not provide one is refused before the model loads. A misspelt field is an ``AttributeError``.

    Fields:
        transcript_scorer: ``scorer(episode, visible: frozenset[int]) -> float``: the value of a
            transcript with only the messages ``visible`` kept (``value: masking``).
        replay: a :class:`~teamplay.credit.values.replay_query.ReplayEngine` (batched re-executions: what the
            trainer gives; ``shapley value=replay``, ``continuation``, ``loto value=replay``), or a
            plain ``replay(episode, kept_agents: frozenset[str]) -> list[float]`` (``shapley`` only).
        transcript_value: ``value(episode, kept: frozenset[int]) -> float`` (``loto``).
        answer_probability: ``prob(episode, prefix_len: int) -> float``: the policy's probability of
            the gold answer after the first ``prefix_len`` messages (``a2tgpo``).
        listener: a :class:`~teamplay.credit.values.listener_query.ListenerScorer`: a listener's
            teacher-forced log-probability of an answer with one message withheld or not
            (``influence``; the trainer's: the protocol's prompts, the listener's adapter).
        embedder: an :class:`~teamplay.credit.values.coverage.Embedder` (``coverage``; default: packaged).
        judge: a :class:`~teamplay.credit.values.generative_judge.GenerativeJudge`: greedy completions of a
            batch of prompts (``shapley value=judge``; the trainer's: the base model, adapters off,
            or ``credit.judge_model``).
        backend: the generation backend of the run (for methods that generate).
        token_stats: per-token statistics of the step's completions (token-level methods), a
            :class:`~teamplay.credit.token.base.GroupTokenStats`.
        batch_rewards: the team reward of every episode of the training step, all groups pooled
            (``grpo``/``gspo`` with ``scale_rewards: batch``).
    """

    transcript_scorer: Callable[..., float] | None = None
    replay: ReplayEngine | Callable[..., Sequence[float]] | None = None
    transcript_value: Callable[..., float] | None = None
    answer_probability: Callable[..., float] | None = None
    listener: ListenerScorer | None = None
    embedder: Any | None = None
    judge: GenerativeJudge | None = None
    backend: Any | None = None
    token_stats: Any | None = None
    batch_rewards: Sequence[float] | None = None

    def provided(self) -> frozenset[str]:
        """Names of the fields that are set."""
        return frozenset(f.name for f in fields(self) if getattr(self, f.name) is not None)

    def need(self, name: str, why: str) -> Any:
        """The resource ``name``, or a ValueError saying which method option needs it."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"credit {why} needs the {name!r} resource; the trainer must provide it")
        return value


@dataclass(frozen=True)
class CreditBatch:
    """A group of G episodes of one problem, plus what methods may need to re-score them.

    Fields:
        episodes: G >= 1 episodes of the same problem (same ``problem_id``).
        item: the problem (needed by methods that re-score answers with the verifier).
        score: the task's verifier, ``score(text, item) -> float in [0, 1]``.
        extract: the task's answer extractor, ``extract(text) -> str | None``.
        resources: the typed optional helpers of expensive methods (see ``CreditResources``).
    """

    episodes: tuple[Episode, ...]
    item: TaskItem | None = None
    score: Callable[[str, TaskItem], float] | None = None
    extract: Callable[[str], str | None] | None = None
    resources: CreditResources = field(default_factory=CreditResources)


CreditFn = Callable[[CreditBatch, BaseModel], list[np.ndarray]]


@dataclass(frozen=True)
class CardText:
    """What a method's identification card says beyond its registry entry (``teamplay credit --card``,
    the method's docs page); a method declares it where it registers, beside its code.

    Fields:
        estimand: the quantity the advantage estimates.
        assumptions: what must hold for it to identify the causal contrast, one sentence each.
        falsified_by: tests as ``path::function`` (paths relative to the repository root) that fail
            when the method does not compute its estimand; ``tests/credit/test_cards.py`` checks
            that each exists.
        cost: for a message method, a note after its declared ``cost``; for a token method (which
            declares none) the whole cost. Empty: nothing to add.
        fails_where: what is wrong with it today and the measured cases where an assumption fails.
    """

    estimand: str
    assumptions: tuple[str, ...]
    falsified_by: tuple[str, ...]
    cost: str = ""
    fails_where: tuple[str, ...] = ()


def _needs_nothing(options: BaseModel) -> frozenset[str]:
    return frozenset()


@dataclass(frozen=True)
class CreditMethod:
    """A registered credit method and what it declares.

    Fields:
        name, fn, options (its pydantic options model), summary (one line for ``teamplay list``).
        requires: ``requires(options) -> resource names`` the method needs with these options.
        traits: the protocol traits it needs whatever its options
            (``teamplay.envs.protocols.traits``; empty: any protocol).
        cost: one line on what it costs beyond the rollout (for ``teamplay list`` and the docs).
        traits_of: ``traits_of(options) -> names``: the traits it needs under these options, a
            superset of ``traits`` (None: ``traits`` whatever the options).
        card: what its card says beyond these fields (None: no card declared, as for most users'
            methods; ``teamplay.credit.audit.cards`` then builds one saying so).
        protocols: deprecated: protocol names a user's method registered with ``protocols=``
            (None: none; built-in methods declare traits).
    """

    name: str
    fn: CreditFn
    options: type[BaseModel]
    summary: str
    requires: Callable[[BaseModel], frozenset[str]] = _needs_nothing
    traits: frozenset[str] = frozenset()
    cost: str = "negligible"
    traits_of: Callable[[BaseModel], frozenset[str]] | None = None
    card: CardText | None = None
    protocols: frozenset[str] | None = None

    def needed_traits(self, options: BaseModel) -> frozenset[str]:
        """The protocol traits the method needs under ``options`` (empty: any protocol)."""
        return self.traits | (frozenset(self.traits_of(options)) if self.traits_of is not None else frozenset())

    def fitting_protocols(self) -> tuple[str, ...] | None:
        """The registered protocols it works with under some options, sorted (None: any). With
        ``traits_of``, each value of each ``Literal`` option is tried (the others at their defaults)."""
        from teamplay.envs.protocols.registry import protocols_with

        if self.protocols is not None:
            return tuple(sorted(self.protocols))
        if self.traits_of is None:
            return None if not self.traits else tuple(protocols_with(self.traits))
        fitting = {p for options in _option_variants(self.options) for p in protocols_with(self.needed_traits(options))}
        return tuple(sorted(fitting))


def _option_variants(model: type[BaseModel]) -> list[BaseModel]:
    """The options ``model`` takes with one ``Literal`` field set to each of its values, the rest at
    their defaults (a combination the model refuses is left out)."""
    variants = [model()]
    for name, info in model.model_fields.items():
        if get_origin(info.annotation) is not Literal:
            continue
        for value in get_args(info.annotation):
            try:
                variants.append(model(**{name: value}))
            except ValidationError:
                continue
    return variants


CREDIT: Registry[CreditMethod] = Registry(
    "credit method", "credit.method",
    decorated(CreditMethod, "credit_method", "@register_credit(name, Options, summary) from teamplay.credit"))


def register_credit(name: str, options: type[BaseModel], summary: str, *,
                    requires: Callable[[BaseModel], frozenset[str]] | None = None,
                    traits: Sequence[str] = (), cost: str = "negligible",
                    traits_of: Callable[[BaseModel], frozenset[str]] | None = None,
                    card: CardText | None = None,
                    protocols: Sequence[str] | None = None) -> Callable[[CreditFn], CreditFn]:
    """Decorator registering ``fn`` under ``name`` (a duplicate name is an error); the method declares
    what it ``requires`` (resource names, a function of its options), the protocol ``traits`` it
    needs (``traits_of``: the ones it needs under given options; names of
    ``teamplay.envs.protocols.traits.TRAITS``) and its ``card`` (what it estimates, under which
    assumptions, which tests would catch it). ``protocols`` (protocol names) is the old form of
    ``traits``: read with one warning until the next release. The decorated function keeps a
    ``credit_method`` attribute, which is how a user's file named as ``credit.method: ./file.py:fn``
    is found."""
    from teamplay.envs.protocols.traits import check_traits

    needed = check_traits(traits, f"credit method {name!r}: traits")
    if protocols is not None:
        warnings.warn(TeamplayWarning(f"register_credit({name!r}, protocols=...) is now traits=... (what the method "
                                      f"needs of a protocol); protocol names are read until the next release, "
                                      f"then refused"), stacklevel=2)

    def wrap(fn: CreditFn) -> CreditFn:
        method = CreditMethod(name=name, fn=fn, options=options, summary=summary,
                              requires=requires or _needs_nothing, traits=needed, cost=cost,
                              traits_of=traits_of, card=card,
                              protocols=None if protocols is None else frozenset(protocols))
        CREDIT.add(name, method)
        fn.credit_method = method  # type: ignore[attr-defined]
        return fn

    return wrap


def credit_methods() -> dict[str, CreditMethod]:
    """All registered methods by name (importing ``teamplay.credit`` registers the built-ins)."""
    return CREDIT.entries()


def get_credit(name: str) -> CreditMethod:
    """A method by registered name or by user file (``path/to/file.py:function``)."""
    return CREDIT.get(name)


def check_credit(name: str, options: BaseModel | Mapping[str, Any] | None, protocol: Protocol | str | None,
                 provided: frozenset[str] | None, method: CreditMethod | None = None) -> BaseModel:
    """Everything about a credit choice that can be known before a model loads: the method exists,
    its options parse, ``protocol`` (a ``Protocol``, a registered protocol's name, or None: not
    checked) declares every trait the method needs and the resources it needs are in ``provided``
    (None: not checked). ``method``: what ``name`` resolves to, where the caller looked it up already
    (no second lookup). Returns the parsed options; raises ConfigError."""
    method = get_credit(name) if method is None else method
    parsed = parse_options(method, options)
    if protocol is not None:
        check_protocol_fits(method, parsed, protocol)
    if provided is not None:
        missing = sorted(method.requires(parsed) - provided)
        if missing:
            raise ConfigError(f"credit.method: {method.name!r} with these options needs the resource"
                              f"{'s' if len(missing) > 1 else ''} {', '.join(missing)}, which this run does "
                              f"not provide (it provides: {', '.join(sorted(provided)) or 'none'})")
    return parsed


def check_protocol_fits(method: CreditMethod, options: BaseModel, protocol: Protocol | str) -> None:
    """ConfigError (one line) when ``protocol`` (a ``Protocol`` or a name) lacks a trait ``method``
    needs under ``options``: the line names the trait, what it promises and the protocols that
    declare it."""
    from teamplay.envs.protocols.registry import protocols_with, traits_of
    from teamplay.envs.protocols.traits import describe

    label = protocol if isinstance(protocol, str) else getattr(protocol, "name", type(protocol).__name__)
    if method.protocols is not None:  # a user's method registered with the old protocols=
        if label not in method.protocols:
            raise ConfigError(f"credit.method: {method.name!r} works with the protocols "
                              f"{', '.join(sorted(method.protocols))}, not {label!r}")
        return
    with_options = "" if method.traits_of is None else " with these options"
    missing = sorted(method.needed_traits(options) - traits_of(protocol))
    if missing:
        trait = missing[0]
        raise ConfigError(f"credit.method: {method.name!r}{with_options} needs a protocol where "
                          f"{describe(trait)} (trait {trait!r}); protocol {label!r} does not declare it "
                          f"(protocols that do: {', '.join(protocols_with([trait])) or 'none built in'})")


class MethodOptions(BaseModel):
    """The base of a credit method's options (message- or token-level): an unknown option is refused
    (one ``ConfigError`` line through ``validate_options``) and a parsed instance is frozen, so the
    options a method reads are the ones the config gave."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_options(method: CreditMethod, options: BaseModel | Mapping[str, Any] | None) -> BaseModel:
    """``options`` parsed by the method's options model (an instance of it passes as it is)."""
    return validate_options(method.options, options, "credit.options", f"method {method.name!r}")


def validate_options(model: type[BaseModel], options: BaseModel | Mapping[str, Any] | None, field: str,
                     owner: str) -> BaseModel:
    """``options`` parsed by ``model`` (an instance of it passes as it is); the first problem is one
    ``ConfigError`` line naming the config ``field`` and the ``owner`` (the method) of the options."""
    if isinstance(options, model):
        return options
    try:
        return model.model_validate(dict(options or {}))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{field}.{where}: {first['msg']} ({owner})") from None


class CreditOutputError(TeamplayError, RuntimeError):
    """A credit method (built-in, or a user's file) broke the output contract: a wrong number of
    arrays, a wrong shape or a non-finite value. The message names the method; the CLI shows it as
    one ``error:`` line (a bad plugin is the user's to fix, not a teamplay traceback)."""


def assign(name: str, batch: CreditBatch, options: BaseModel | Mapping[str, Any] | None = None,
           method: CreditMethod | None = None) -> list[np.ndarray]:
    """Run credit method ``name`` on ``batch``; checks the output contract (one finite [T_g] array per
    episode) here, the one place every method's output passes, and raises ``CreditOutputError``.
    ``method``: what ``name`` resolves to, where the caller resolved it once for every batch (the
    trainer's credit stage carries the method ``check_run`` looked up); ``name`` still labels errors."""
    method = get_credit(name) if method is None else method
    validate_batch(batch.episodes)
    out = method.fn(batch, parse_options(method, options))
    label = repr(method.name) if method.name == name else f"{method.name!r} ({name})"
    if len(out) != len(batch.episodes):
        raise CreditOutputError(f"credit method {label} returned {len(out)} arrays for "
                                f"{len(batch.episodes)} episodes")
    for g, (adv, ep) in enumerate(zip(out, batch.episodes, strict=True)):
        if np.shape(adv) != (len(ep.messages),):
            raise CreditOutputError(f"credit method {label}: episode {g} has {len(ep.messages)} messages "
                                    f"but {np.shape(adv)} advantages")
        values = np.asarray(adv, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise CreditOutputError(
                f"credit method {label} returned a non-finite advantage ({values[bad[0]]} for message "
                f"{int(bad[0])} of episode {g}, problem {ep.problem_id!r}); advantages must be finite numbers")
    return [np.asarray(a, dtype=np.float64) for a in out]


def validate_batch(episodes: Sequence[Episode]) -> None:
    """Refuse empty groups and non-finite rewards with a ValueError that says what is wrong (a
    ``DataError`` for a non-finite reward)."""
    if len(episodes) == 0:
        raise ValueError("credit: empty group (need at least one episode)")
    for g, ep in enumerate(episodes):
        if not np.isfinite(ep.reward):  # the task's score: the user's to fix, one error: line
            raise DataError(f"credit: episode {g} ({ep.problem_id}) has non-finite reward {ep.reward!r}; "
                            "a task's score must be a finite number")
    ids = {ep.problem_id for ep in episodes}
    if len(ids) > 1:
        raise ValueError(f"credit: a group must hold episodes of one problem, got {sorted(ids)}")
