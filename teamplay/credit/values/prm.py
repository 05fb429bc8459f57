"""From agent credit to message signals: conserved refinement and first-error localisation
(docs/credit/specification.md#prm).

Success case (:func:`refine_to_messages`): split each agent's Shapley credit ``phi_i`` over its
messages, shifted by local signed message scores ``q_t``, so that the messages of an agent sum to
exactly ``phi_i`` (conservation), every signal is within ``[-B, B]`` (boundedness) and a message
scored below its agent's mean can be negative inside a successful run (signed).

Failure case (:func:`first_error_signals`): from prefix success estimates ``p_0, p_1..p_T`` find the
first message that dropped the success estimate by ``delta`` or more, penalise it, reward later
messages that raised it by ``delta_rep`` or more (repairs), and emit DPO preference pairs.

Message scorers for ``q_t``: :func:`verifier_message_scores` (the answers a message contains),
:func:`leave_one_message_out_scores` (masking with any transcript scorer, e.g. a verifier on the
last remaining answer or an :class:`~teamplay.credit.values.characteristic.LLMJudge`) and
:func:`prefix_success` (``p_t`` for the failure case, same scorers). All formulas are [INFERRED]
instantiations of the paper's stated properties; the free constants are arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from teamplay.credit.values.characteristic import DEFAULT_PLACEHOLDER, Transcript, TranscriptScorer
from teamplay.credit.values.group import as_finite_vector
from teamplay.records import Message

RefineMode = Literal["signed", "proportional"]


def refine_to_messages(phi: ArrayLike, authors: Sequence[int], q: ArrayLike, B: float = 1.0,
                       beta0: float = 1.0, mode: RefineMode = "signed",
                       temperature: float = 1.0) -> np.ndarray:
    """Per-message rewards ``r`` [T] that conserve each agent's credit.

    ``mode="signed"`` (default): for agent i with messages ``M_i`` (``n_i`` of them),
    ``r_t = phi_i / n_i + beta_i (q_t - qbar_i)`` with
    ``beta_i = min(beta0, (B - |phi_i| / n_i) / max_t |q_t - qbar_i|)`` (``beta_i = beta0`` when all
    of the agent's ``q`` are equal, where the shift is 0 anyway).
    ``mode="proportional"``: ``r_t = phi_i * softmax(q / temperature)`` over ``M_i`` (conserving, never
    changes sign, bounded by ``|phi_i|``).

    Args:
        phi: credit per agent [n] (agent j = index j).
        authors: author index of each message [T], values in ``0..n-1``.
        q: local signed message score [T] (e.g. leave-one-message-out gain, in [-1, 1]).
        B: bound on ``|r_t|`` (default 1 for ``v`` in [0, 1]).
        beta0: largest spread coefficient.

    Invariants: ``sum_{t in M_i} r_t = phi_i`` for every agent (to rounding); ``|r_t| <= B``.

    Raises ValueError: lengths differ, non-finite input, an author index outside ``0..n-1``, an agent
    with non-zero credit but no messages (its credit could not be conserved), or
    ``|phi_i| / n_i > B`` (the bound cannot hold; raise ``B``).
    """
    phi = as_finite_vector(phi, "phi")
    q = np.asarray(q, dtype=np.float64)
    a = np.asarray(authors, dtype=np.int64)
    if q.shape != a.shape or q.ndim != 1:
        raise ValueError(f"authors and q must be 1-D of equal length, got {a.shape} and {q.shape}")
    if not np.all(np.isfinite(q)):
        raise ValueError(f"q[{int(np.flatnonzero(~np.isfinite(q))[0])}] is not finite")
    if a.size and (a.min() < 0 or a.max() >= phi.size):
        raise ValueError(f"author indices must lie in 0..{phi.size - 1}, got {sorted(set(a.tolist()))}")
    if mode not in ("signed", "proportional"):
        raise ValueError(f"mode must be 'signed' or 'proportional', got {mode!r}")
    if not (B > 0 and beta0 >= 0 and temperature > 0):
        raise ValueError(f"need B > 0, beta0 >= 0, temperature > 0; got {B}, {beta0}, {temperature}")
    r = np.zeros(a.size)
    for i in range(phi.size):
        idx = np.flatnonzero(a == i)
        if idx.size == 0:
            if phi[i] != 0.0:
                raise ValueError(f"agent {i} has credit {phi[i]} but no messages to carry it")
            continue
        qi = q[idx]
        if mode == "proportional":
            z = np.exp((qi - qi.max()) / temperature)
            r[idx] = phi[i] * z / z.sum()
            continue
        base = phi[i] / idx.size
        if abs(base) > B:
            raise ValueError(f"agent {i}: |phi|/n = {abs(base):.6g} exceeds the bound B = {B}; raise B")
        dev = qi - qi.mean()
        spread = np.abs(dev).max()
        beta = beta0 if spread == 0 else min(beta0, (B - abs(base)) / spread)
        r[idx] = base + beta * dev
        # the mean deviation is 0 only to rounding; put the residue on the agent's last message so
        # the conservation invariant is exact to one ulp.
        r[idx[-1]] += phi[i] - r[idx].sum()
    return r


@dataclass(frozen=True)
class PreferencePair:
    """A DPO pair to build at context ``messages[:context_len]``.

    ``kind="error"``: ``rejected`` is the erroneous message index, ``chosen`` is ``None`` (regenerate
    an alternative judged non-erroneous). ``kind="repair"``: ``chosen`` is the repairing message,
    ``rejected`` is ``None`` (sample a non-repairing alternative).
    """

    context_len: int
    chosen: int | None
    rejected: int | None
    kind: Literal["error", "repair"]


@dataclass(frozen=True)
class FirstErrorResult:
    """Output of :func:`first_error_signals`.

    Fields:
        signals: per-message signal [T].
        t_star: 0-based index of the first error.
        errors: indices penalised (``(t_star,)`` unless ``iterate``).
        repairs: indices rewarded as repairs.
        deltas: ``d_t = p_t - p_{t-1}`` [T].
        pairs: preference pairs, errors and repairs in message order.
        fell_back: True when no step dropped by ``delta`` and ``t_star`` is the most negative step.
        conservation_violated: True when ``conserve`` clipping moved ``r_{t*}`` off its conserving value.
    """

    signals: np.ndarray
    t_star: int
    errors: tuple[int, ...]
    repairs: tuple[int, ...]
    deltas: np.ndarray
    pairs: tuple[PreferencePair, ...]
    fell_back: bool
    conservation_violated: bool


def first_error_signals(p0: float, p: ArrayLike, delta: float = 0.2, delta_rep: float = 0.2,
                        c_err: float = 1.0, c_rep: float = 0.5, conserve: bool = False,
                        C: float | None = None, iterate: bool = False, B: float = 1.0,
                        error_flags: Sequence[bool] | None = None) -> FirstErrorResult:
    """First-error localisation with repair-aware signals (docs/credit/specification.md#prm-failure).

    ``d_t = p_t - p_{t-1}`` (``p_{-1} = p0``). First error ``t* = min{t: d_t <= -delta}`` (or the first
    ``error_flags[t]`` when flags are given); if none qualifies, the message with the most negative
    ``d_t`` (``fell_back=True``). ``r_{t*} = -c_err``; each ``t > t*`` with ``d_t >= delta_rep`` gets
    ``+c_rep``; all else 0 (later errors are not penalised). ``iterate=True``: after the first repair
    following an error, the next message with ``d_t <= -delta`` is a new error (-c_err), and so on.

    ``conserve=True`` needs ``C`` (e.g. ``R - p0``): ``r_{t*} = C - sum_{t != t*} r_t`` clipped to
    ``[-B, B]``; if the clip changed it, ``conservation_violated=True`` (never silently).
    """
    p = as_finite_vector(p, "p")
    if not np.isfinite(p0):
        raise ValueError(f"p0 must be finite, got {p0!r}")
    if conserve and C is None:
        raise ValueError("conserve=True needs C, the total to conserve (e.g. R - p0 or v(N) - v(empty))")
    T = p.size
    d = np.diff(np.concatenate([[p0], p]))  # [T]
    drops = d <= -delta
    if error_flags is not None:
        if len(error_flags) != T:
            raise ValueError(f"error_flags has {len(error_flags)} entries for {T} messages")
        drops = np.asarray(error_flags, dtype=bool)
    fell_back = not drops.any()
    t_star = int(np.argmin(d)) if fell_back else int(np.flatnonzero(drops)[0])
    errors, repairs = [t_star], []
    t = t_star + 1
    while t < T:
        if d[t] >= delta_rep:
            repairs.append(t)
            if iterate:
                later = [k for k in range(t + 1, T) if drops[k]]
                if not later:
                    repairs.extend(k for k in range(t + 1, T) if d[k] >= delta_rep)
                    break
                # messages between this repair and the next error that also raise p are repairs too
                repairs.extend(k for k in range(t + 1, later[0]) if d[k] >= delta_rep)
                errors.append(later[0])
                t = later[0] + 1
                continue
        t += 1
    r = np.zeros(T)
    r[errors] = -c_err
    r[repairs] = c_rep
    violated = False
    if conserve:
        target = float(C) - (r.sum() - r[t_star])
        r[t_star] = float(np.clip(target, -B, B))
        violated = r[t_star] != target
    pairs = sorted([PreferencePair(e, None, e, "error") for e in errors]
                   + [PreferencePair(k, k, None, "repair") for k in repairs], key=lambda x: x.context_len)
    return FirstErrorResult(signals=r, t_star=t_star, errors=tuple(errors), repairs=tuple(sorted(repairs)),
                            deltas=d, pairs=tuple(pairs), fell_back=fell_back, conservation_violated=violated)


def verifier_message_scores(messages: Sequence[Message], score_answer: Callable[[str], float]) -> np.ndarray:
    """``q_t = 2 * score(answer_t) - 1`` for messages that state an answer, 0 otherwise. [T]

    Maps the verifier's [0, 1] to a signed [-1, 1]: a right answer is +1, a wrong one -1, a message
    without an answer (a review, a skipped turn) is neutral.
    """
    return np.array([2.0 * score_answer(m.answer) - 1.0 if (m.spoke and m.answer is not None) else 0.0
                     for m in messages], dtype=np.float64)


def leave_one_message_out_scores(messages: Sequence[Message], scorer: TranscriptScorer, question: str = "",
                                 placeholder: str = DEFAULT_PLACEHOLDER) -> np.ndarray:
    """``q_t = V(tau) - V(tau without m_t)`` with ``m_t`` replaced by the placeholder. [T]

    One batched scorer call on the full transcript plus one masked transcript per spoken message;
    skipped messages get 0 without being scored. ``V`` is any transcript scorer (verifier on the
    last visible answer, LLM judge, ...).
    """
    msgs = tuple(messages)
    spoken = [t for t, m in enumerate(msgs) if m.spoke]
    full = Transcript(question, msgs, (False,) * len(msgs), placeholder)
    masked = [Transcript(question, msgs, tuple(k == t for k in range(len(msgs))), placeholder)
              for t in spoken]
    vals = np.asarray(scorer([full, *masked]), dtype=np.float64)
    if vals.shape != (len(masked) + 1,) or not np.all(np.isfinite(vals)):
        raise ValueError(f"transcript scorer returned {vals!r} for {len(masked) + 1} transcripts")
    q = np.zeros(len(msgs))
    q[spoken] = vals[0] - vals[1:]
    return q


def prefix_success(messages: Sequence[Message], scorer: TranscriptScorer,
                   question: str = "") -> tuple[float, np.ndarray]:
    """``(p0, p)``: scorer on the question alone and on each prefix ``m_<=t``, one batched call. p: [T]"""
    msgs = tuple(messages)
    prefixes = [Transcript(question, msgs[:t], (False,) * t) for t in range(len(msgs) + 1)]
    vals = np.asarray(scorer(prefixes), dtype=np.float64)
    if vals.shape != (len(msgs) + 1,) or not np.all(np.isfinite(vals)):
        raise ValueError(f"transcript scorer returned {vals!r} for {len(msgs) + 1} prefixes")
    return float(vals[0]), vals[1:]
