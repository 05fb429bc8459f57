"""The additive ``oracle`` with a per-agent baseline of more samples (``baseline_samples: M > 0``).

On the ``split`` team with ``reward: fraction`` (``R = (1/K) sum_j c_j``) the true advantage is
``A*_i = (c_i - p_i) / K``, ``p_i`` agent i's accuracy on the problem. The plain ``oracle``
estimates ``p_i`` by the group's mean of ``c_i`` (G draws). Here the estimate pools the group's G
answers with M more answers of agent i alone, re-run by the replay engine:

* one :class:`~teamplay.credit.values.replay_query.ReplayQuery` per agent and group: the group's
  first episode (all of a group's episodes share one problem) replayed from the question
  (``start=0``) with only agent i kept and every other agent's turn skipped (``removal: skip``);
* ``split`` scores a skipped turn 0 and divides by K whatever spoke (``Split.outcome``), so such a
  replay's team reward is ``c'_i / K``, ``c'_i`` the score of agent i's fresh answer on its own
  sub-problem: ``c'_i = K * reward``. A replay reward above ``1 / K`` breaks that rule and is a
  ``DataError``;
* ``p^_i = (sum_g c_{g,i} + sum_m c'_{m,i}) / (G + M')`` (the pooled mean; ``M' <= M`` when the
  engine's budget cut the samples: the engine says how many it ran).

The replayed answers only estimate the baseline: they are never trained on (the engine keeps them),
and the engine counts their generated tokens as the step's extra tokens (``replay_tokens``), as it
does for ``continuation``.
"""

from __future__ import annotations

import numpy as np

from teamplay.credit.registry import CreditBatch
from teamplay.credit.values.group import GroupMode, pooled_credit_spread
from teamplay.credit.values.replay_query import ReplayQuery, need_replay_engine, replay_samples
from teamplay.errors import DataError

#: a replay reward is a mean of K scores, each 0 but one: rounding stays far below this
_SOLO_TOL = 1e-9


def solo_replay_scores(batch: CreditBatch, agents: tuple[str, ...], samples: int) -> list[np.ndarray]:
    """Per agent i (in ``agents`` order), c' [M']: the scores of M' fresh answers of agent i playing
    alone from the question (one batched ``scores`` call for the group; M' <= ``samples``)."""
    engine = need_replay_engine(batch.resources, "method 'oracle' with baseline_samples > 0")
    if batch.item is None:
        raise ValueError("credit method 'oracle' with baseline_samples > 0 re-runs the problem: the "
                         "CreditBatch needs its item")
    first = batch.episodes[0]
    queries = [ReplayQuery(first, batch.item, frozenset({a}), start=0, removal="skip") for a in agents]
    K = len(agents)
    out = []
    for a, rewards in zip(agents, replay_samples(engine, queries, samples, None), strict=True):
        if rewards.max() > 1.0 / K + _SOLO_TOL:
            raise DataError(f"credit oracle: a replay of {a} alone scored {float(rewards.max())!r}, above 1/K = "
                            f"{1.0 / K!r}; under split's reward 'fraction' one agent's answer is worth at most "
                            f"1/K (baseline_samples needs that protocol)")
        out.append(np.minimum(K * rewards, 1.0))  # [M']; min: the tolerance above, not a clip of real values
    return out


def pooled_baseline(c: np.ndarray, replayed: list[np.ndarray]) -> np.ndarray:
    """p^ [n]: per agent, the mean of its G own scores ``c[:, i]`` and its M' replayed ones."""
    return np.array([(c[:, i].sum() + r.sum()) / (c.shape[0] + r.size) for i, r in enumerate(replayed)])


def baseline_advantages(c: np.ndarray, p_hat: np.ndarray, ddof: int, mode: GroupMode, eps: float
                        ) -> np.ndarray:
    """A [G, n] of the additive A* with baseline ``p_hat`` [n], scaled as the plain oracle is.

    ``K * A*_{g,i} = c_{g,i} - p^_i`` (the n-scaled credit, as ``group_credit_advantage`` scales
    ``u = c / K``); ``mode: std`` divides it by the plain oracle's own pooled std ``sigma`` (of the
    group-centred ``c_{g,i} - mean_g c_{g,i}``, ``pooled_credit_spread``), so the advantages differ
    from the plain oracle's by ``(mean_g c_{g,i} - p^_i) / sigma`` per agent: the baseline alone.
    ``mode: mean_only``: ``c_{g,i} - p^_i``, not scaled.

    Edge case (mode std): when every agent's scores are constant over the group (G = 1 included),
    ``sigma = 0`` and the scale is undefined: zeros, as the plain oracle gives (dividing by eps would
    make a baseline shift 1e8 times too large).
    """
    shifted = c - p_hat[None, :]  # [G, n]
    if mode == "mean_only":
        return shifted
    if c.shape[0] <= ddof or np.all(c == c[0]):  # exact: constant scores have no spread at all
        return np.zeros_like(c)
    sigma = pooled_credit_spread(c - c.mean(axis=0), ddof)
    return shifted / max(sigma, eps)
