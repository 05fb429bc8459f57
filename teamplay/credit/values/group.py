"""Group-normalised advantages (docs/credit/specification.md#group-advantage).

A group is the G rollouts of one prompt. Every method of the credit layer that turns rewards into
advantages "relative to the group" goes through :func:`group_advantage`, so singleton groups,
all-equal rewards and bad input are handled by one rule everywhere.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

GroupMode = Literal["std", "mean_only"]
EpsRule = Literal["floor", "add"]


def as_finite_vector(values: ArrayLike, name: str) -> np.ndarray:
    """``values`` as a 1-D float64 array; ValueError when empty, not 1-D, NaN or infinite."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (a group needs at least one value)")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] = {arr[bad[0]]!r} is not finite; rewards must be real numbers")
    return arr


def group_advantage(r: ArrayLike, ddof: int = 0, mode: GroupMode = "std", eps: float = 1e-8,
                    eps_rule: EpsRule = "floor", std: float | None = None) -> np.ndarray:
    """Advantage of each rollout relative to its group.

    ``mode="std"``:       ``A_i = (r_i - mean(r)) / max(std(r; ddof), eps)``   (eps_rule "floor")
                          ``A_i = (r_i - mean(r)) / (std(r; ddof) + eps)``     (eps_rule "add")
    ``mode="mean_only"``: ``A_i = r_i - mean(r)`` (GiGPO's default; TRL ``scale_rewards="none"``).

    Args:
        r: rewards of the G rollouts of one prompt, shape [G].
        ddof: 0 = population std (TRACER, our default), 1 = unbiased std (``torch.std``; TRL and
            verl). At G = 2 the ddof-0 advantages are sqrt(2) = 1.41x the ddof-1 ones.
        mode: ``"std"`` or ``"mean_only"``.
        eps: the floor of the std (``"floor"``) or the constant added to it (``"add"``; TRL 1e-4,
            verl 1e-6). A floor keeps the advantages exactly scale-invariant down to std = eps, so
            rewards that differ by 1e-7 still become unit-size advantages; an added eps shrinks the
            advantages of nearly equal rewards towards 0.
        eps_rule: ``"floor"`` (default) or ``"add"``.
        std: the scale to divide by instead of the group's own std (TRL ``scale_rewards="batch"``:
            the std of every reward of the step); ``None`` = the group's std.

    Returns:
        float64 array of shape [G].

    Invariants: ``sum(A) == 0`` (to rounding); with ``mode="std"`` invariant to ``r -> a*r + b``
    for ``a > 0`` (up to eps).

    Edge cases (one rule each): ``G == 1`` gives ``[0.0]`` (nothing to compare with); all-equal
    rewards give all zeros (no signal; tested exactly, not via a tiny std). Empty, non-1-D, NaN or
    infinite input raises ValueError naming the index.
    """
    if mode not in ("std", "mean_only"):
        raise ValueError(f"mode must be 'std' or 'mean_only', got {mode!r}")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof!r}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")
    if eps_rule not in ("floor", "add"):
        raise ValueError(f"eps_rule must be 'floor' or 'add', got {eps_rule!r}")
    if std is not None and not (np.isfinite(std) and std >= 0):
        raise ValueError(f"std must be a finite number >= 0, got {std!r}")
    r = as_finite_vector(r, "rewards")
    # exact check: the mean of equal floats need not equal them, which would leak 1e-17/eps noise.
    if r.size == 1 or np.all(r == r[0]):
        return np.zeros_like(r)
    centred = r - r.mean()  # [G]
    if mode == "mean_only":
        return centred
    sigma = float(r.std(ddof=ddof)) if std is None else float(std)
    return centred / (sigma + eps if eps_rule == "add" else max(sigma, eps))


def batch_std(rewards: ArrayLike, ddof: int = 0) -> float:
    """Std of every reward of a step (all groups pooled), for ``scale_rewards="batch"``.

    One reward gives 0 (nothing to spread); ``ddof`` as in :func:`group_advantage`.
    """
    r = as_finite_vector(rewards, "rewards")
    return 0.0 if r.size <= ddof else float(r.std(ddof=ddof))


def group_credit_advantage(phi: ArrayLike, ddof: int = 0, mode: GroupMode = "std",
                           eps: float = 1e-8) -> np.ndarray:
    """Per-agent advantages from per-agent credit over a group: phi [G, n] -> A [G, n].

    Rule (the credit layer's choice for Shapley-type credit; docs/credit/specification.md marks it as ours):

        c_{g,i} = phi_{g,i} - mean_{g'} phi_{g',i}          (each agent's own baseline over the group)
        A_{g,i} = n * c_{g,i} / max(sigma, eps)             mode "std"
        A_{g,i} = n * c_{g,i}                               mode "mean_only"
        sigma^2 = sum_{g,i} (n c_{g,i})^2 / (n (G - ddof))  (pooled spread of the scaled credits)

    Why: an agent that never contributes (phi ~ 0 in every episode, a free rider) gets ~0; every
    agent's advantages sum to 0 over the group (zero-sum, per agent and hence overall); with n
    symmetric agents (``phi_{g,i} = R_g / n``) it reproduces GRPO's ``group_advantage(R)`` exactly,
    so learning rates carry over. Locality: ``c`` of agent i uses only agent i's credit; in mode
    "std" other agents enter only through the shared scale ``sigma`` (like GRPO's shared std).

    Edge cases: ``G == 1`` or every agent's credit constant over the group -> zeros.
    """
    if mode not in ("std", "mean_only"):
        raise ValueError(f"mode must be 'std' or 'mean_only', got {mode!r}")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof!r}")
    p = np.asarray(phi, dtype=np.float64)
    if p.ndim != 2 or p.size == 0:
        raise ValueError(f"credit must be a non-empty [G, n] array, got shape {p.shape}")
    if not np.all(np.isfinite(p)):
        g, i = np.argwhere(~np.isfinite(p))[0]
        raise ValueError(f"credit of episode {g}, agent {i} is {p[g, i]!r}; it must be finite")
    G, n = p.shape
    if G == 1 or np.all(p == p[0]):
        return np.zeros_like(p)
    scaled = n * (p - p.mean(axis=0))  # [G, n]
    if mode == "mean_only":
        return scaled
    return scaled / max(pooled_credit_spread(scaled, ddof), eps)


def pooled_credit_spread(scaled: np.ndarray, ddof: int = 0) -> float:
    """sigma of :func:`group_credit_advantage`: ``sqrt(sum_{g,i} scaled^2 / (n (G - ddof)))`` for the
    centred, n-scaled credits ``scaled`` [G, n] (G > ddof)."""
    G, n = scaled.shape
    return float(np.sqrt(np.sum(scaled**2) / (n * (G - ddof))))
