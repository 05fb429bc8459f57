"""Token-level credit: the typed token statistics, one registry of token methods, one dispatcher.

Token credit is the last level of team -> agent -> message -> token credit. A token method takes
the message advantages a message-level method produced for a group and redistributes each one
over the completion tokens of its message:

    method(batch: CreditBatch, message_adv: list[np.ndarray], options) -> list[list[np.ndarray | None]]

returning, for episode g and message t, an array [C_{g,t}] of token advantages (``C`` = number of
completion tokens of the message), or ``None`` for a message without tokens (skipped turns,
scripted text), which keeps its scalar. What a method needs of the policy is read from
``batch.resources["token_stats"]``, a :class:`GroupTokenStats`, which the trainer computes once
per step in one batched no-grad pass (only the statistics some configured method ``needs``).

Conservation: a method that conserves gives ``sum_j a_{t,j} = C_t * A_t``, i.e. the mean token
advantage is the message advantage the level above assigned; the GRPO loss with
``seq_mean_token_mean`` then sees the same total per message as with the scalar.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from teamplay.credit.registry import CardText, CreditBatch, CreditOutputError, validate_options
from teamplay.registry import Registry, decorated

NEEDS: tuple[str, ...] = ("entropies", "ref_logprobs", "hellinger", "text_offsets", "teacher_logprobs")


#: what the "teacher" of ``teacher_logprobs`` is shown after the prompt: the reference answer
TEACHER_HINT = "(The reference answer is {reference}.)\n"


@dataclass(frozen=True)
class TokenStats:
    """Per-token statistics of one generated message (all arrays [C], float64).

    Fields:
        logprobs: log-probs of the sampled tokens under the policy that generated them (recorded
            at generation; always present, free).
        entropies: entropy of the policy's next-token distribution at each position, nats
            (``None`` unless a configured method needs ``"entropies"``).
        ref_logprobs: log-probs of the sampled tokens under the reference policy (base model,
            adapters disabled); ``None`` unless needed.
        hellinger: Hellinger distance between the policy's and the reference's next-token
            distributions at each position, ``sqrt(1 - sum_v sqrt(p_v q_v))`` in [0, 1];
            ``None`` unless needed.
        current_logprobs: log-probs of the sampled tokens under the adapter as it is when credit
            runs (from the same pass as the entropies; they differ from ``logprobs`` only when the
            rollouts came from an older adapter, e.g. remote rollout workers); ``None`` without a
            model pass.
        teacher_logprobs: log-probs of the sampled tokens under the same policy shown the reference
            answer (the prompt followed by :data:`TEACHER_HINT`); ``None`` unless needed.
        text: the completion decoded by the tokenizer (``"text_offsets"``), and
        token_ends: [C] ints, ``text[:token_ends[j]]`` is the decoding of tokens 0..j (non-decreasing).
    """

    logprobs: np.ndarray
    entropies: np.ndarray | None = None
    ref_logprobs: np.ndarray | None = None
    hellinger: np.ndarray | None = None
    text: str | None = None
    token_ends: np.ndarray | None = None
    teacher_logprobs: np.ndarray | None = None
    current_logprobs: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.logprobs)
        for name in ("entropies", "ref_logprobs", "hellinger", "token_ends", "teacher_logprobs", "current_logprobs"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"TokenStats.{name} has {len(value)} entries for {n} tokens")

    def need(self, name: str, method: str) -> np.ndarray:
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"token method {method!r} needs token statistic {name!r}; the trainer "
                             f"computes it when the method declares it")
        return value


@dataclass(frozen=True)
class GroupTokenStats:
    """Token statistics of a group: ``messages[g][t]`` for message t of episode g (``None`` for a
    message without completion tokens or one the trainer did not score, e.g. a frozen role)."""

    messages: tuple[tuple[TokenStats | None, ...], ...]

    def get(self, g: int, t: int) -> TokenStats | None:
        return self.messages[g][t]


#: the assumption every card of a method that splits a message advantage over its tokens states
TOKEN_SPLIT = ("the message advantage comes from the message-level method; this method only decides which "
               "tokens carry it")

TokenAdvantages = list[list[np.ndarray | None]]
TokenFn = Callable[[CreditBatch, Sequence[np.ndarray], BaseModel], TokenAdvantages]
#: one message's token advantages [C] from its advantage and statistics alone (no group context)
RowFn = Callable[[float, TokenStats, BaseModel], np.ndarray]


@dataclass(frozen=True)
class TokenMethod:
    name: str
    fn: TokenFn
    options: type[BaseModel]
    summary: str
    needs: frozenset[str]
    conserves: bool
    excludes_kl: bool = False
    keeps_zero_variance: Callable[[BaseModel], bool] | None = None
    row: RowFn | None = None
    card: CardText | None = None

    def wants_zero_variance_groups(self, options: BaseModel) -> bool:
        """Whether, with these options, groups whose rewards are all equal still get token credit
        (the trainer drops them otherwise: their message advantages carry no signal)."""
        return self.keeps_zero_variance is not None and self.keeps_zero_variance(options)


TOKEN_CREDIT: Registry[TokenMethod] = Registry(
    "token credit method", "credit.token.method",
    decorated(TokenMethod, "token_method", "@register_token_credit(name, Options, summary) from teamplay.credit.token"))


def register_token_credit(name: str, options: type[BaseModel], summary: str, needs: Collection[str] = (),
                          conserves: bool = True, excludes_kl: bool = False,
                          keeps_zero_variance: Callable[[BaseModel], bool] | None = None,
                          row: RowFn | None = None, card: CardText | None = None
                          ) -> Callable[[TokenFn], TokenFn]:
    """Decorator registering a token method.

    ``needs``: token statistics beyond the behaviour log-probs; ``conserves``: each message's token
    advantages sum to C * A (checked by :func:`assign_tokens`); ``excludes_kl``: the method replaces
    the KL penalty, so a config with ``objective.kl_beta > 0`` is refused at load;
    ``keeps_zero_variance(options)``: the method gives groups with all-equal rewards a signal of
    its own (conservation is then not checked for those groups: their message totals are 0);
    ``row(advantage, stats, options)``: the method is message by message (a message's tokens depend
    on its own advantage and statistics only), and this is its rule for one message. The trainer
    then applies it inside the update, from the statistics of the update's own forward pass
    (:func:`message_tokens`), instead of scoring the messages in a pass of their own.
    ``card``: what the method's card says (its cost included: token methods declare no other).
    """
    unknown = set(needs) - set(NEEDS)
    if unknown:
        raise ValueError(f"token method {name!r}: unknown needs {sorted(unknown)}; known: {NEEDS}")

    def wrap(fn: TokenFn) -> TokenFn:
        method = TokenMethod(name, fn, options, summary, frozenset(needs), conserves, excludes_kl,
                             keeps_zero_variance, row, card)
        TOKEN_CREDIT.add(name, method)
        fn.token_method = method  # type: ignore[attr-defined]  (how a user's file is found)
        return fn

    return wrap


def token_methods() -> dict[str, TokenMethod]:
    """The built-in token methods by name."""
    return TOKEN_CREDIT.entries()


def get_token_credit(name: str) -> TokenMethod:
    """A token method by registered name or by user file (``path/to/file.py:function``)."""
    return TOKEN_CREDIT.get(name)


def parse_token_options(method: TokenMethod, options: BaseModel | dict | None) -> BaseModel:
    """``options`` parsed by the token method's options model (one ``ConfigError`` line if not)."""
    return validate_options(method.options, options, "credit.token.options", f"token method {method.name!r}")


def group_token_stats(batch: CreditBatch) -> GroupTokenStats:
    stats = batch.resources.token_stats
    if not isinstance(stats, GroupTokenStats):
        raise ValueError("token credit needs batch.resources.token_stats (a GroupTokenStats); "
                         "the trainer provides it when credit.token is configured")
    return stats


def per_message(batch: CreditBatch, message_adv: Sequence[np.ndarray],
                row_of: Callable[[int, int, float, TokenStats], np.ndarray]) -> TokenAdvantages:
    """Token advantages message by message: ``row_of(g, t, message advantage, stats)`` [C] for message
    t of episode g when it has token statistics; a message without them keeps its scalar (None)."""
    stats = group_token_stats(batch)
    return [[None if (st := stats.get(g, t)) is None else row_of(g, t, float(adv[t]), st)
             for t in range(len(ep.messages))]
            for g, (ep, adv) in enumerate(zip(batch.episodes, message_adv, strict=True))]


def assign_tokens(name: str, batch: CreditBatch, message_adv: Sequence[np.ndarray],
                  options: BaseModel | dict | None = None, roles: Collection[str] | None = None
                  ) -> TokenAdvantages:
    """Run token method ``name``; messages of roles outside ``roles`` (when given) keep their scalar.

    Checks the contract: one entry per message, each ``None`` or a finite [C] array, and, for a
    method that declares conservation, ``sum_j a_j = C * A`` (to 1e-6 relative) in groups whose
    rewards differ.
    """
    method = get_token_credit(name)
    out = method.fn(batch, message_adv, parse_token_options(method, options))
    if len(out) != len(batch.episodes):
        raise CreditOutputError(f"token method {name!r} returned {len(out)} episodes for {len(batch.episodes)}")
    result: TokenAdvantages = []
    check_conservation = method.conserves and len({ep.reward for ep in batch.episodes}) > 1
    for g, (ep, rows, adv) in enumerate(zip(batch.episodes, out, message_adv, strict=True)):
        if len(rows) != len(ep.messages):
            raise CreditOutputError(f"token method {name!r}: episode {g} has {len(ep.messages)} messages, "
                               f"got {len(rows)} rows")
        kept: list[np.ndarray | None] = []
        for t, (msg, row) in enumerate(zip(ep.messages, rows, strict=True)):
            if row is None or (roles is not None and msg.role not in roles):
                kept.append(None)
                continue
            row = np.asarray(row, dtype=np.float64)
            if row.shape != (len(msg.completion_ids),):
                raise CreditOutputError(f"token method {name!r}: message {t} of episode {g} has "
                                   f"{len(msg.completion_ids)} tokens, got shape {row.shape}")
            if not np.all(np.isfinite(row)):
                raise CreditOutputError(f"token method {name!r} produced non-finite token advantages "
                                   f"(episode {g}, message {t})")
            if check_conservation:
                total = len(row) * float(adv[t])
                if abs(row.sum() - total) > 1e-6 * max(1.0, abs(total)):
                    raise CreditOutputError(f"token method {name!r} broke conservation on message {t} of "
                                       f"episode {g}: sum {row.sum()} != {total}")
            kept.append(row)
        result.append(kept)
    return result


def message_tokens(method: TokenMethod, advantage: float, stats: TokenStats, options: BaseModel) -> np.ndarray:
    """``method.row`` on one message, with :func:`assign_tokens`' checks: shape [C], finite values
    and, for a conserving method, ``sum_j a_j = C * A`` (to 1e-6 relative)."""
    if method.row is None:
        raise ValueError(f"token method {method.name!r} works on whole groups; it has no per-message rule")
    row = np.asarray(method.row(advantage, stats, options), dtype=np.float64)
    n = len(stats.logprobs)
    if row.shape != (n,):
        raise CreditOutputError(f"token method {method.name!r}: a message of {n} tokens got shape {row.shape}")
    if not np.all(np.isfinite(row)):
        raise CreditOutputError(f"token method {method.name!r} produced non-finite token advantages")
    if method.conserves and abs(row.sum() - n * advantage) > 1e-6 * max(1.0, abs(n * advantage)):
        raise CreditOutputError(f"token method {method.name!r} broke conservation: sum {row.sum()} != {n * advantage}")
    return row


def conserve(weights: np.ndarray) -> np.ndarray:
    """Weights [C] >= 0 rescaled to mean 1 (so ``A * w`` sums to ``C * A``); all-zero -> all ones."""
    w = np.asarray(weights, dtype=np.float64)
    total = w.sum()
    if not total > 0:
        return np.ones_like(w)
    return w * (len(w) / total)
