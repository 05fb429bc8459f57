"""``gigpo``: GiGPO, an episode advantage plus a step advantage of anchor-state groups
(docs/credit/specification.md#turn-baselines).

:func:`gigpo_advantage` — episode advantage (group-centred return) plus a step advantage from
grouping steps of different trajectories that start from the same anchor state; the registered
method :func:`gigpo_credit` says what it takes as a step's "state" in a dialogue.
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.methods.turn_arrays import ragged, spoken_only_mask
from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit
from teamplay.records import Episode


def _cluster(anchors: list[Hashable], similarity: float | None) -> list[int]:
    """Group ids for the anchors: exact equality, or greedy ``SequenceMatcher`` clustering (each
    anchor joins the first cluster whose first member has ratio ≥ ``similarity``)."""
    if similarity is None:
        ids: dict[Hashable, int] = {}
        return [ids.setdefault(a, len(ids)) for a in anchors]
    reps: list[str] = []
    out = []
    for a in anchors:
        if not isinstance(a, str):
            raise ValueError(f"similarity clustering needs string anchors, got {type(a).__name__}")
        for c, rep in enumerate(reps):
            if difflib.SequenceMatcher(None, rep, a).ratio() >= similarity:
                out.append(c)
                break
        else:
            reps.append(a)
            out.append(len(reps) - 1)
    return out


def _normalise(x: np.ndarray, mode: str, std_eps: float, ref: np.ndarray | None = None) -> np.ndarray:
    """Centre ``x`` on the mean of ``ref`` (default ``x``); ``mean_std_norm`` also divides by the
    unbiased std of ``ref`` plus ``std_eps`` (torch's default std; a single value's std is 1)."""
    ref = x if ref is None else ref
    centred = x - ref.mean()
    if mode == "mean_norm":
        return centred
    std = ref.std(ddof=1) if ref.size > 1 else 1.0
    return centred / (std + std_eps)


def gigpo_advantage(rewards: Sequence[Sequence[float]], anchors: Sequence[Sequence[Hashable]],
                    gamma: float = 0.95, omega: float = 1.0,
                    mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm",
                    episode_mean_over: Literal["trajectories", "steps"] = "trajectories",
                    similarity: float | None = None, std_eps: float = 1e-6) -> list[np.ndarray]:
    """GiGPO advantages ``A = A^E + ω·A^S`` for the trajectories of one task group.

    Args:
        rewards: ragged step rewards ``r[i]`` [T_i]; the episode return is ``R_i = Σ_t r[i][t]``.
        anchors: ragged anchor states [T_i] (hashable; the state the agent acted from).
        gamma: discount of the step returns ``G_t = r_t + γ G_{t+1}``.
        omega: weight of the step advantage.
        mode: ``mean_norm`` (centre only) or ``mean_std_norm`` (divide by unbiased std + std_eps;
            a singleton's std is 1), for both levels.
        episode_mean_over: centre ``R`` over trajectories (default) or over step rows (each
            trajectory counted once per step, as one fork does).
        similarity: None groups steps by exact anchor equality; a float in (0, 1] clusters string
            anchors whose ``difflib.SequenceMatcher`` ratio reaches it.

    Returns:
        ragged [T_i] advantages. Singleton step groups contribute 0 step advantage.
    """
    r = ragged(rewards, "rewards")
    if len(anchors) != len(r) or any(len(a) != x.size for a, x in zip(anchors, r, strict=False)):
        raise ValueError("anchors must have the same ragged shape as rewards "
                         f"({[x.size for x in r]} steps), got {[len(a) for a in anchors]}")
    if mode not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"mode must be 'mean_norm' or 'mean_std_norm', got {mode!r}")
    if episode_mean_over not in ("trajectories", "steps"):
        raise ValueError(f"episode_mean_over must be 'trajectories' or 'steps', got {episode_mean_over!r}")
    if similarity is not None and not 0 < similarity <= 1:
        raise ValueError(f"similarity must be in (0, 1], got {similarity}")
    R = np.array([x.sum() for x in r])  # [G]
    # statistics over trajectories, or over step rows (each trajectory counted once per step)
    ref = R if episode_mean_over == "trajectories" else np.repeat(R, [x.size for x in r])
    A_E = _normalise(R, mode, std_eps, ref=ref) if ref.size else np.zeros(len(r))  # [G]
    returns = []
    for x in r:
        G = np.zeros(x.size)
        running = 0.0
        for t in range(x.size - 1, -1, -1):
            running = x[t] + gamma * running
            G[t] = running
        returns.append(G)
    flat_G = np.concatenate(returns) if returns else np.zeros(0)
    groups = np.array(_cluster([a for traj in anchors for a in traj], similarity), dtype=np.int64)
    A_S = np.zeros_like(flat_G)
    for gid in np.unique(groups):
        idx = np.flatnonzero(groups == gid)
        A_S[idx] = _normalise(flat_G[idx], mode, std_eps)
    out, start = [], 0
    for i, x in enumerate(r):
        out.append(A_E[i] + omega * A_S[start:start + x.size])
        start += x.size
    return out


class GiGPOOptions(MethodOptions):
    """Options of the registered ``gigpo`` method."""

    gamma: float = Field(0.95, ge=0, le=1, description="Discount of the step returns.")
    omega: float = Field(1.0, description="Weight of the step (anchor-group) advantage.")
    mode: Literal["mean_norm", "mean_std_norm"] = Field("mean_norm", description="Normalisation.")
    episode_mean_over: Literal["trajectories", "steps"] = Field(
        "trajectories", description="Centre episode returns over trajectories or over step rows.")
    anchor: Literal["transcript", "prompt_ids"] = Field(
        "transcript", description="Anchor state of a message: the agent, its stage and the texts of all "
                                  "earlier messages of the episode ('transcript'), or the exact token ids "
                                  "of the prompt it saw ('prompt_ids', needs recorded prompt ids).")
    similarity: float | None = Field(
        None, gt=0, le=1, description="Cluster transcript anchors by SequenceMatcher ratio >= this value "
                                      "(None: exact equality).")


def _anchor(ep: Episode, t: int, kind: str) -> Hashable:
    msg = ep.messages[t]
    if kind == "prompt_ids":
        if not msg.prompt_ids:
            raise ValueError(f"gigpo: anchor='prompt_ids' but message {t} of {ep.problem_id} has no "
                             f"prompt_ids recorded; use anchor='transcript'")
        return (msg.agent, tuple(msg.prompt_ids))
    history = "\n".join(f"[{m.agent}] {m.text}" for m in ep.messages[:t])
    return f"<{msg.agent}|{msg.stage}>\n{history}"


GIGPO_CARD = CardText(
    "GiGPO: A = A^E + omega A^S, the episode's team reward centred over the group plus the "
    "discounted return G_t = gamma^(T-1-t) R centred within the messages of the group that share "
    "an anchor state (author, stage and the text of every earlier message, or the prompt ids).",
    ("messages with identical anchors are draws from one state, so their return difference is "
     "the effect of the action taken there",
     "in free-text dialogues most anchors after the first turn are unique: A^S is then 0 and the "
     "method is the group-centred team reward"),
    ("tests/credit/test_turn_baselines.py::test_gigpo_worked_example",
     "tests/credit/test_turn_baselines.py::test_gigpo_method_on_episodes"),
    "no generation: hashing the anchors (similarity clustering compares them pairwise)")


@register_credit("gigpo", GiGPOOptions,
                 "GiGPO: group-centred episode return + step advantage within anchor-state groups", card=GIGPO_CARD)
def gigpo_credit(batch: CreditBatch, options: GiGPOOptions) -> list[np.ndarray]:
    """GiGPO on a group of episodes: a message is a step, its anchor state what the agent acted from.

    Step rewards: 0 for every message except the episode's last, which carries the team reward, so
    ``G_t = γ^(T−1−t)·reward``. Anchor (``options.anchor``): by default the author, the stage and the
    text of every earlier message of the episode — a protocol-independent stand-in for "the text the
    agent saw" (protocols that hide messages from an agent make it finer than the true observation);
    or the exact prompt token ids. Messages with the same anchor in different episodes form a step
    group. Skipped messages count as steps but get 0 (registry convention).
    """
    rewards, anchors = [], []
    for ep in batch.episodes:
        T = len(ep.messages)
        r = np.zeros(T)
        if T:
            r[-1] = ep.reward
        rewards.append(r)
        anchors.append([_anchor(ep, t, options.anchor) for t in range(T)])
    if options.similarity is not None and options.anchor != "transcript":
        raise ValueError("gigpo: similarity clustering needs anchor='transcript' (string anchors)")
    adv = gigpo_advantage(rewards, anchors, gamma=options.gamma, omega=options.omega, mode=options.mode,
                          episode_mean_over=options.episode_mean_over, similarity=options.similarity)
    return [np.where(spoken_only_mask(ep), a, 0.0) for ep, a in zip(batch.episodes, adv, strict=True)]


__all__ = ["GiGPOOptions", "gigpo_advantage", "gigpo_credit"]
