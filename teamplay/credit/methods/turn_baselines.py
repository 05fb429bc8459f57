"""Per-turn credit baselines (docs/credit/specification.md#turn-baselines): leave-one-turn-out, A2TGPO, GiGPO.

* :func:`loto_credit` — ``c_t = V(all turns) − V(all turns but t)``: one masked re-evaluation per
  turn. No efficiency guarantee; it gives zero credit to each of two redundant turns (the known
  failure mode, tested next to Shapley).
* :func:`a2tgpo_advantage` — information gain per turn, z-normalised within (group, turn index),
  discounted sum over the remaining turns divided by the square root of their count, and a per-turn
  clip range that widens for informative turns.
* :func:`gigpo_advantage` — episode advantage (group-centred return) plus a step advantage from
  grouping steps of different trajectories that start from the same anchor state.

Ragged inputs are sequences of 1-D arrays, one per trajectory (rollout) of one task group; outputs
have the same ragged shape. Each function also has a registered credit method on Episodes whose
docstring says what it takes as "turn", "state" and "value".
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from teamplay.credit.methods.assumptions import MASKING
from teamplay.credit.registry import CardText, CreditBatch, register_credit
from teamplay.credit.values.characteristic import Transcript
from teamplay.credit.values.replay_query import ReplayEngine, ReplayQuery, replay_values
from teamplay.records import Episode


def _ragged(values: Sequence[Sequence[float]], name: str) -> list[np.ndarray]:
    if len(values) == 0:
        raise ValueError(f"{name}: empty group (need at least one trajectory)")
    out = []
    for i, v in enumerate(values):
        arr = np.asarray(v, dtype=np.float64)
        if arr.ndim != 1:
            raise ValueError(f"{name}[{i}] must be 1-D, got shape {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}[{i}] holds non-finite values {arr.tolist()}")
        out.append(arr)
    return out


# ---- §6.1 leave-one-turn-out ------------------------------------------------------------------

def loto_credit(V: Callable[[frozenset[int]], float], T: int) -> np.ndarray:
    """Leave-one-turn-out credit [T]: ``c_t = V({0..T-1}) − V({0..T-1} \\ {t})``.

    ``V(kept)`` scores the transcript in which only the turns in ``kept`` keep their content (the
    others replaced by a neutral placeholder, role/turn structure kept). Cost: ``T + 1`` calls.
    No efficiency: ``Σ c_t`` need not equal ``V(all) − V(∅)``; redundant turns each get 0.
    """
    if T < 1:
        raise ValueError(f"loto_credit needs T >= 1 turns, got {T}")
    full = frozenset(range(T))
    v_full = float(V(full))
    credit = np.array([v_full - float(V(full - {t})) for t in range(T)])
    if not np.all(np.isfinite(credit)) or not np.isfinite(v_full):
        raise ValueError("loto_credit: V returned a non-finite value")
    return credit


# ---- §6.2 A2TGPO -----------------------------------------------------------------------------

def information_gain(p: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """Per-turn information gain from per-rollout answer probabilities.

    ``p[i]`` [T_i + 1] holds ``p_θ(y* | h_t)`` for ``t = 0..T_i`` (entry 0 before any turn); returns
    ``IG[i] = diff(p[i])`` [T_i].
    """
    arrays = _ragged(p, "p")
    for i, a in enumerate(arrays):
        if a.size < 2:
            raise ValueError(f"p[{i}] needs the pre-turn probability and at least one turn, got {a.size}")
    return [np.diff(a) for a in arrays]


@dataclass(frozen=True)
class A2TGPOResult:
    """Ragged outputs of :func:`a2tgpo_advantage`, one array [T_i] per rollout.

    Fields:
        z: information gain z-normalised within each turn index.
        advantages: ``Â_{i,t}``.
        clip: per-turn clip range ``ε_{i,t}``.
    """

    z: tuple[np.ndarray, ...]
    advantages: tuple[np.ndarray, ...]
    clip: tuple[np.ndarray, ...]


def a2tgpo_advantage(IG: Sequence[Sequence[float]], gamma: float = 1.0, eps0: float = 0.2,
                     kappa: float = 1.0, outcome: Sequence[float] | None = None,
                     eps: float = 1e-8) -> A2TGPOResult:
    """A2TGPO turn advantages from ragged information gains ``IG[i]`` [T_i] of one group.

    ``z_{i,t} = (IG_{i,t} − mean_j IG_{j,t}) / max(std_j IG_{j,t}, eps)`` over the rollouts that
    have a turn t (population std; a turn index reached by one rollout only, or with all-equal
    gains, gives 0). With ``outcome`` [G] given, ``outcome_i`` is added to ``z`` at rollout i's
    last turn ([INFERRED]: the spec leaves the outcome term as an option). Then

        Â_{i,t} = Σ_{k=t..T_i} γ^{k−t} z_{i,k} / sqrt(T_i − t + 1)
        ε_{i,t} = eps0 · (1 + κ · tanh|z_{i,t}|)        ([INFERRED] form; κ default 1.0 [INFERRED])

    Rollouts with zero turns get empty arrays.
    """
    gains = _ragged(IG, "IG")
    if not 0 <= gamma <= 1:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if outcome is not None and len(outcome) != len(gains):
        raise ValueError(f"outcome has {len(outcome)} entries but IG has {len(gains)} rollouts")
    T_max = max((g.size for g in gains), default=0)
    z = [np.zeros(g.size) for g in gains]
    for t in range(T_max):
        members = [i for i, g in enumerate(gains) if g.size > t]
        vals = np.array([gains[i][t] for i in members])
        if len(members) < 2:
            continue  # a singleton turn group carries no comparison
        normed = (vals - vals.mean()) / max(vals.std(), eps)
        for i, v in zip(members, normed, strict=True):
            z[i][t] = v
    if outcome is not None:
        out = np.asarray(outcome, dtype=np.float64)
        if not np.all(np.isfinite(out)):
            raise ValueError("outcome holds non-finite values")
        for i, zi in enumerate(z):
            if zi.size:
                zi[-1] += out[i]
    advantages, clips = [], []
    for zi in z:
        n = zi.size
        acc = np.zeros(n)
        running = 0.0
        for t in range(n - 1, -1, -1):  # discounted suffix sums
            running = zi[t] + gamma * running
            acc[t] = running
        advantages.append(acc / np.sqrt(n - np.arange(n)))  # sqrt(T_i − t + 1), 1-based t
        clips.append(eps0 * (1.0 + kappa * np.tanh(np.abs(zi))))
    return A2TGPOResult(z=tuple(z), advantages=tuple(advantages), clip=tuple(clips))


# ---- §6.3 GiGPO ------------------------------------------------------------------------------

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
    r = _ragged(rewards, "rewards")
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


# ---- registered methods on Episodes -------------------------------------------------------------

def _spoke_mask(ep: Episode) -> np.ndarray:
    return np.array([m.spoke for m in ep.messages], dtype=bool)


class GiGPOOptions(BaseModel):
    """Options of the registered ``gigpo`` method."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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
    return [np.where(_spoke_mask(ep), a, 0.0) for ep, a in zip(batch.episodes, adv, strict=True)]


class A2TGPOOptions(BaseModel):
    """Options of the registered ``a2tgpo`` method."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gamma: float = Field(1.0, ge=0, le=1, description="Discount of the accumulated normalised gains.")
    outcome: bool = Field(False, description="Add the group-centred team reward at each episode's last "
                                             "turn ([INFERRED] outcome term).")


A2TGPO_CARD = CardText(
    "A2TGPO: the information gain IG_t = p(y* | h_t) - p(y* | h_{t-1}), the change in the "
    "policy's own probability of the gold answer after message t, z-normalised per turn index "
    "across the group, then a discounted suffix sum divided by sqrt(turns left).",
    ("the policy's teacher-forced probability of the reference answer is a calibrated value of "
     "the transcript so far (a proxy for E[R | h_t], not a sampled one)",
     "messages with the same turn index across episodes are comparable",
     "every problem has a reference answer"),
    ("tests/credit/test_turn_baselines.py::test_a2tgpo_worked_example",
     "tests/credit/test_turn_baselines.py::test_a2tgpo_and_loto_methods_need_their_resources"),
    "no generation")


@register_credit("a2tgpo", A2TGPOOptions,
                 "A2TGPO: per-turn information gain in the gold answer, z-normalised per turn index",
                 requires=lambda options: frozenset({"answer_probability"}),
                 cost="one teacher-forced pass per message prefix", card=A2TGPO_CARD)
def a2tgpo_credit(batch: CreditBatch, options: A2TGPOOptions) -> list[np.ndarray]:
    """A2TGPO on episodes. Needs ``batch.resources.answer_probability``, a callable
    ``(episode, n_messages) -> p`` giving the policy's probability of the gold answer after the first
    ``n_messages`` messages (``n_messages = 0`` is the question alone). The per-turn clip ranges of
    :func:`a2tgpo_advantage` are not part of the registry's output (one advantage per message); a
    trainer that wants them calls the function directly.
    """
    prob = batch.resources.need("answer_probability", "method 'a2tgpo'")
    many = getattr(prob, "many", None)
    if many is not None:  # one batched pass over every (episode, prefix) of the group
        pairs = [(ep, n) for ep in batch.episodes for n in range(len(ep.messages) + 1)]
        flat = np.asarray(many(pairs), dtype=np.float64)
        if flat.shape != (len(pairs),):
            raise ValueError(f"answer_probability.many returned shape {flat.shape} for {len(pairs)} prefixes")
        p, start = [], 0
        for ep in batch.episodes:
            p.append(flat[start:start + len(ep.messages) + 1].tolist())
            start += len(ep.messages) + 1
    else:
        p = [[float(prob(ep, n)) for n in range(len(ep.messages) + 1)] for ep in batch.episodes]
    IG = [np.diff(np.asarray(x)) for x in p]
    outcome = None
    if options.outcome:
        R = np.array([ep.reward for ep in batch.episodes])
        outcome = R - R.mean()
    result = a2tgpo_advantage(IG, gamma=options.gamma, outcome=outcome)
    return [np.where(_spoke_mask(ep), a, 0.0)
            for ep, a in zip(batch.episodes, result.advantages, strict=True)]


class LOTOOptions(BaseModel):
    """Options of the registered ``loto`` method."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: Literal["masking", "replay"] = Field(
        "masking", description="V of a transcript without turn t: 'masking' (turn t's text withheld, "
                               "resources['transcript_scorer'] scores what remains) or 'replay' (re-run "
                               "from turn t with that turn removed, resources['replay']).")
    removal: Literal["skip", "null_message", "base_policy"] = Field(
        "skip", description="value=replay: what the removed turn becomes.")
    samples: int = Field(1, ge=1, le=64, description="value=replay: samples per removed turn.")
    budget: float | None = Field(None, gt=0, description="value=replay: extra-token cap per step, as a "
                                                         "multiple of the rollout tokens.")


def _loto_needs(options: LOTOOptions) -> frozenset[str]:
    return frozenset({"transcript_scorer"} if options.value == "masking" else {"replay"})


def _transcript_value(batch: CreditBatch, options: LOTOOptions):
    """``value(episode, kept) -> float``: the ``transcript_value`` resource when given, else built
    as ``options.value`` says from the ``transcript_scorer`` or ``replay`` resource."""
    if batch.resources.transcript_value is not None:
        return batch.resources.transcript_value
    if options.value == "masking":
        scorer = batch.resources.need("transcript_scorer", "method 'loto' (value=masking)")
        question = batch.item.prompt if batch.item is not None else ""

        def masked(ep: Episode, kept: frozenset[int]) -> float:
            withheld = tuple(t not in kept for t in range(len(ep.messages)))
            return float(np.asarray(scorer([Transcript(question, ep.messages, withheld)]))[0])

        return masked
    engine = batch.resources.need("replay", "method 'loto' (value=replay)")
    if not isinstance(engine, ReplayEngine) or batch.item is None:
        raise ValueError("credit method 'loto' with value=replay needs a replay engine "
                         "(teamplay.credit.values.replay_query.ReplayEngine) as the replay resource, "
                         "and the batch's item")
    item = batch.item

    def replayed(ep: Episode, kept: frozenset[int]) -> float:
        dropped = sorted(set(range(len(ep.messages))) - kept)
        if not dropped:
            return float(ep.reward)
        if len(dropped) > 1:
            raise ValueError("loto value=replay removes one turn at a time")
        query = ReplayQuery(ep, item, frozenset(ep.agents), start=dropped[0], removal=options.removal,
                            remove_turn=True)
        return float(replay_values(engine, [query], options.samples, options.budget)[0])

    return replayed


LOTO_CARD = CardText(
    "Leave-one-turn-out: c_t = V(all turns) - V(all turns but t), the drop in the transcript's "
    "value when message t is masked (value: masking) or removed and the rest replayed (value: "
    "replay); not centred across the group.",
    ("no efficiency: two redundant messages each get 0, and interaction effects are not split",
     MASKING,
     "replay needs restorable state at turn t and a fixed policy for the turns after it"),
    ("tests/credit/test_turn_baselines.py::test_loto_equals_shapley_for_additive_value",
     "tests/credit/test_turn_baselines.py::test_loto_failure_mode_redundant_pair"),
    "value=masking generates nothing (one scorer call per value)",
    fails_where=("masking sees no influence through later turns: r -0.01 [-0.03, 0.01] for a helpful reviewer "
                 "(section 12); not centred across the group, so its advantages need not sum to 0",))


@register_credit("loto", LOTOOptions,
                 "Leave-one-turn-out: drop in the transcript's value when one message is masked "
                 "or removed and replayed",
                 requires=_loto_needs,
                 cost="T + 1 transcript values per episode (value=replay: T replays per sample)", card=LOTO_CARD)
def loto_method(batch: CreditBatch, options: LOTOOptions) -> list[np.ndarray]:
    """LOTO on episodes. ``V(episode, kept: frozenset[int]) -> float`` scores the transcript with
    only the messages in ``kept``: ``batch.resources.transcript_value`` when given, else built from
    ``options.value`` (masking with the ``transcript_scorer`` resource, or replay with the ``replay``
    resource: re-run from turn t with turn t removed, docs/credit/specification.md#characteristic). ``T + 1`` values per
    episode; skipped messages get 0 (the registry's convention).
    """
    value = _transcript_value(batch, options)
    out = []
    for ep in batch.episodes:
        if not ep.messages:
            out.append(np.zeros(0))
            continue
        credit = loto_credit(lambda kept, ep=ep: value(ep, kept), len(ep.messages))
        out.append(np.where(_spoke_mask(ep), credit, 0.0))
    return out
