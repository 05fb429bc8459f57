"""Shapley values of cooperative games over bitmask coalitions (docs/credit/specification.md#shapley).

Players are ``0..n-1``; a coalition is an int bitmask (bit ``i`` set = player ``i`` in it). A game
``v`` is given as one of:

* a table: array-like of length ``2**n`` with ``table[mask] = v(mask)``;
* a callable ``v(mask: int) -> float`` (evaluated once per coalition, cached by mask);
* for Monte Carlo, additionally ``batch_eval(masks: np.ndarray[int64]) -> np.ndarray[float]``,
  which receives every de-duplicated coalition a batch of permutations needs in ONE call (one
  batched LLM / verifier call instead of one per coalition).

``v(empty)`` is whatever the game says: nothing here assumes it is 0, so efficiency reads
``sum(phi) == v(N) - v(empty)``.

Validation: a NaN/inf value raises ValueError naming the coalition; with ``value_range=(lo, hi)``
a value outside it raises ValueError naming the coalition (scores are expected to be clipped to
their declared range by the characteristic function, so an out-of-range value is a bug upstream).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from math import factorial

import numpy as np
from numpy.typing import ArrayLike

from teamplay.credit.values.group import as_finite_vector, group_advantage

#: exact enumeration builds a [2^n, n] coefficient matrix; 2^16 x 16 float64 is 8 MB.
MAX_EXACT_PLAYERS = 16

Game = Callable[[int], float] | Sequence[float] | np.ndarray
BatchEval = Callable[[np.ndarray], ArrayLike]


def members(mask: int, n: int) -> list[int]:
    """Players in coalition ``mask`` (ascending)."""
    return [i for i in range(n) if (mask >> i) & 1]


def check_values(masks: np.ndarray, values: ArrayLike, n: int,
                 value_range: tuple[float, float] | None = None,
                 players: Sequence[str] | None = None) -> np.ndarray:
    """``values`` as float64 [len(masks)]; ValueError naming the coalition if NaN/inf/out of range.

    The coalition is named by player indices, or by ``players[j]`` (agent ids) when given.
    """
    vals = np.asarray(values, dtype=np.float64)
    if vals.shape != (len(masks),):
        raise ValueError(f"game returned shape {vals.shape} for {len(masks)} coalitions")
    bad = ~np.isfinite(vals)
    if value_range is not None:
        lo, hi = value_range
        bad |= (vals < lo) | (vals > hi)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        m = int(masks[k])
        who = members(m, n) if players is None else [players[j] for j in members(m, n)]
        where = f"coalition {who} (mask {m})"
        if not np.isfinite(vals[k]):
            raise ValueError(f"game value of {where} is {float(vals[k])!r}; values must be finite")
        raise ValueError(f"game value of {where} is {float(vals[k])!r}, "
                         f"outside the declared range {value_range}")
    return vals


def game_values(n: int, v: Game, masks: np.ndarray) -> ArrayLike:
    """``v`` at ``masks`` [U], not yet validated: called once per mask when ``v`` is a function, looked
    up when it is a table of ``2**n`` values indexed by bitmask (ValueError for a table of another size)."""
    if callable(v):
        return [v(int(m)) for m in masks]
    table = np.asarray(v, dtype=np.float64)
    if table.shape != (1 << n,):
        raise ValueError(f"a game table for n={n} players needs {1 << n} values, got shape {table.shape}")
    return table[masks]


def game_table(n: int, v: Game, value_range: tuple[float, float] | None = None) -> np.ndarray:
    """All ``2**n`` values of ``v`` as a float64 array indexed by bitmask, validated."""
    _check_n(n)
    masks = np.arange(1 << n, dtype=np.int64)
    return check_values(masks, game_values(n, v, masks), n, value_range)


def _check_n(n: int) -> None:
    if not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"number of players must be a positive int, got {n!r}")


@lru_cache(maxsize=MAX_EXACT_PLAYERS)
def _popcount(n: int) -> np.ndarray:
    masks = np.arange(1 << n, dtype=np.int64)
    return ((masks[:, None] >> np.arange(n)) & 1).sum(axis=1)  # [2^n]


@lru_cache(maxsize=MAX_EXACT_PLAYERS)
def _shapley_matrix(n: int) -> np.ndarray:
    """C [2^n, n] with ``phi = table @ C``.

    ``phi_i = sum_{S not containing i} w(|S|) (v(S+i) - v(S))``, ``w(s) = s!(n-s-1)!/n!``; collecting
    the coefficient of each ``v(T)``: ``+w(|T|-1)`` if ``i in T``, ``-w(|T|)`` otherwise.
    """
    w = np.array([factorial(s) * factorial(n - s - 1) / factorial(n) for s in range(n)] + [0.0])
    masks = np.arange(1 << n, dtype=np.int64)
    size = _popcount(n)  # [2^n]
    has = ((masks[:, None] >> np.arange(n)) & 1).astype(bool)  # [2^n, n]
    plus = w[np.maximum(size - 1, 0)][:, None]  # [2^n, 1]
    minus = w[size][:, None]  # [2^n, 1]; |T| = n never occurs without i, w[n] = 0 is unused
    C = np.where(has, plus, -minus)  # [2^n, n]
    C.setflags(write=False)
    return C


def shapley_exact(n: int, v: Game, value_range: tuple[float, float] | None = None) -> np.ndarray:
    """Exact Shapley values by enumerating all ``2**n`` coalitions (each evaluated once).

    Args:
        n: number of players, ``1 <= n <= MAX_EXACT_PLAYERS``.
        v: table [2^n] or callable on a bitmask.
        value_range: optional declared ``(lo, hi)`` of ``v``; values outside raise ValueError.

    Returns:
        float64 [n]. Efficiency ``sum(phi) = v(N) - v(empty)``, symmetry, null player, linearity
        hold exactly (to rounding). Cost: ``2**n`` evaluations, one ``[2^n] @ [2^n, n]`` product.
    """
    _check_n(n)
    if n > MAX_EXACT_PLAYERS:
        raise ValueError(f"exact Shapley enumerates 2^n coalitions; n={n} > {MAX_EXACT_PLAYERS}, "
                         "use shapley_permutation")
    return game_table(n, v, value_range) @ _shapley_matrix(n)


def shapley_exact_batch(n: int, tables: ArrayLike) -> np.ndarray:
    """Exact Shapley values of E games at once: tables [E, 2^n] -> phi [E, n] (validated finite)."""
    _check_n(n)
    if n > MAX_EXACT_PLAYERS:
        raise ValueError(f"exact Shapley: n={n} > {MAX_EXACT_PLAYERS}, use shapley_permutation")
    t = np.asarray(tables, dtype=np.float64)
    if t.ndim != 2 or t.shape[1] != 1 << n:
        raise ValueError(f"tables must have shape [E, {1 << n}], got {t.shape}")
    if not np.all(np.isfinite(t)):
        e, m = np.argwhere(~np.isfinite(t))[0]
        raise ValueError(f"game {e}: value of coalition {members(int(m), n)} is {t[e, m]!r}")
    return t @ _shapley_matrix(n)  # [E, n]


def permutation_variance(n: int, v: Game) -> np.ndarray:
    """Exact variance over uniform permutations of each player's marginal contribution, [n].

    ``sigma_i^2 = sum_S w(|S|) (v(S+i) - v(S))^2 - phi_i^2``: the Monte Carlo estimator with M
    permutations has standard error ``sqrt(sigma_i^2 / M)`` (used by tests and for sizing M).
    """
    table = game_table(n, v)
    w = np.array([factorial(s) * factorial(n - s - 1) / factorial(n) for s in range(n)])
    masks = np.arange(1 << n, dtype=np.int64)
    size = _popcount(n)
    second = np.empty(n)
    for i in range(n):
        without = masks[((masks >> i) & 1) == 0]  # [2^(n-1)]
        delta = table[without | (1 << i)] - table[without]
        second[i] = np.sum(w[size[without]] * delta**2)
    phi = table @ _shapley_matrix(n)
    return np.maximum(second - phi**2, 0.0)


def shapley_permutation(
    n: int,
    v: Game | None,
    M: int,
    rng: np.random.Generator,
    antithetic: bool = False,
    batch_eval: BatchEval | None = None,
    value_range: tuple[float, float] | None = None,
) -> np.ndarray:
    """Monte Carlo Shapley values from M uniformly random permutations
    (docs/credit/specification.md#shapley-permutation).

    Each permutation contributes the marginal gains ``v(prefix + i) - v(prefix)`` along its order;
    the estimate is their mean. Because one permutation's gains telescope to ``v(N) - v(empty)``,
    efficiency holds exactly for every M (to rounding) - a property test checks it.

    Args:
        n: number of players.
        v: table or callable on a bitmask; may be ``None`` when ``batch_eval`` is given.
        M: number of sampled permutations (>= 1).
        rng: source of randomness (the only one; results are deterministic given its state).
        antithetic: also use each permutation reversed (2M permutations evaluated; variance
            reduction for games where early and late positions mirror each other).
        batch_eval: if given, all distinct coalitions needed (the empty one included) are
            evaluated in ONE call ``batch_eval(masks)`` and ``v`` is not used.
        value_range: optional declared range; values outside raise ValueError.

    Returns:
        float64 [n], unbiased; per-player standard error ``sqrt(sigma_i^2 / M')`` with
        ``M'`` the number of permutations used (see :func:`permutation_variance`).
    """
    _check_n(n)
    if not isinstance(M, int | np.integer) or M < 1:
        raise ValueError(f"M (number of permutations) must be a positive int, got {M!r}")
    if v is None and batch_eval is None:
        raise ValueError("shapley_permutation needs a game v or a batch_eval function")
    perms = np.stack([rng.permutation(n) for _ in range(M)])  # [M, n]
    if antithetic:
        perms = np.concatenate([perms, perms[:, ::-1]])  # [2M, n]
    prefix = np.cumsum(np.left_shift(np.int64(1), perms.astype(np.int64)), axis=1)  # [M', n]
    chain = np.concatenate([np.zeros((len(perms), 1), dtype=np.int64), prefix], axis=1)  # [M', n+1]
    needed, inverse = np.unique(chain, return_inverse=True)  # [U], [M' * (n+1)]
    raw = batch_eval(needed) if batch_eval is not None else game_values(n, v, needed)
    vals = check_values(needed, raw, n, value_range)
    along = vals[inverse.reshape(chain.shape)]  # [M', n+1]
    gains = np.diff(along, axis=1)  # [M', n], gains[m, k] belongs to player perms[m, k]
    contrib = np.empty_like(gains)
    np.put_along_axis(contrib, perms, gains, axis=1)  # [M', n] by player
    return contrib.mean(axis=0)


def shapley_max_game(u: ArrayLike, base: float = 0.0) -> np.ndarray:
    """Exact Shapley values of the max game ``v(S) = max(base, max_{i in S} u_i)``, ``v(empty) = base``.

    Closed form (docs/credit/specification.md#shapley-max): sort ascending ``u_(1) <= ... <= u_(K)``, ``u_(0) = base``;
    ``phi_(k) = sum_{j<=k} (u_(j) - u_(j-1)) / (K - j + 1)``. Ties share credit equally.

    Args:
        u: candidate utilities [K], each ``>= base`` (ValueError otherwise: the closed form would
            then not be the Shapley value of the max game).
        base: ``v(empty)``.

    Returns:
        float64 [K]; ``sum(phi) = max(u) - base``; binary utilities give 1/m to each of m winners.
    """
    u = as_finite_vector(u, "candidate utilities")
    if not np.isfinite(base):
        raise ValueError(f"base must be finite, got {base!r}")
    below = np.flatnonzero(u < base)
    if below.size:
        raise ValueError(f"candidate utility u[{below[0]}] = {u[below[0]]} is below base = {base}; "
                         "choose base <= min(u)")
    K = u.size
    order = np.argsort(u, kind="stable")
    sorted_u = u[order]  # [K]
    steps = np.diff(np.concatenate([[base], sorted_u]))  # [K]
    share = steps / (K - np.arange(K))  # divided by K - j + 1 for 1-based j
    phi = np.empty(K)
    phi[order] = np.cumsum(share)
    return phi


@dataclass(frozen=True)
class ShapEAdvantages:
    """ShapE-GRPO advantages for a group of responses (docs/credit/specification.md#shapley-max).

    Fields:
        candidate: per response g, advantages of its K_g candidates, [K_g] each (per token when
            ``length_normalise``: multiply by nothing more, broadcast to the candidate's tokens).
        explanation: per response, the advantage of its non-candidate tokens, [G].
        shapley: per response, the Shapley values of its candidates, [K_g] each.
        set_reward: per response, ``R_g = max_i u_{g,i}``, [G].
    """

    candidate: tuple[np.ndarray, ...]
    explanation: np.ndarray
    shapley: tuple[np.ndarray, ...]
    set_reward: np.ndarray


def shape_grpo_advantages(
    utilities: Sequence[ArrayLike],
    base: float = 0.0,
    eps: float = 1e-8,
    ddof: int = 0,
    length_normalise: bool = False,
    lengths: Sequence[ArrayLike] | None = None,
) -> ShapEAdvantages:
    """ShapE-GRPO: Shapley credit of the max game per response, normalised over the group.

    For each response g with candidate utilities ``u_g`` [K_g]: ``R_g = max u_g``,
    ``phi_g = shapley_max_game(u_g, base)``. Then [INFERRED scaling, docs/credit/specification.md#shapley-max]:

    * candidate i of response g: ``(K_g phi_{g,i} - mean_g R_g) / (std_pool(K phi) + eps)``, the
      pooled (population) std over all candidates of the group; for ``base = 0`` the pooled mean of
      ``K phi`` equals ``mean_g R_g``, i.e. the baseline is GRPO's.
    * other tokens of response g: ``(R_g - mean R) / (std(R; ddof) + eps)`` (spec: ``std + eps``).

    ``length_normalise=True`` (needs ``lengths``, token counts [K_g] per response, all > 0)
    scales candidate i's per-token advantage by ``Lbar / L_{g,i}`` (``Lbar`` = pooled mean
    length), so a candidate's summed token advantage no longer grows with its length; the paper's
    no-extra-bias argument assumes equal lengths, where this is the identity.
    """
    if len(utilities) == 0:
        raise ValueError("shape_grpo_advantages: empty group of responses")
    us = [as_finite_vector(u, f"utilities[{g}]") for g, u in enumerate(utilities)]
    phis = [shapley_max_game(u, base) for u in us]
    R = np.array([u.max() for u in us])  # [G]
    scaled = [len(u) * p for u, p in zip(us, phis, strict=True)]  # K_g * phi_g
    pooled = np.concatenate(scaled)
    denom = float(pooled.std()) + eps
    candidate = [(s - R.mean()) / denom for s in scaled]
    if length_normalise:
        if lengths is None or len(lengths) != len(us):
            raise ValueError("length_normalise=True needs lengths: one array of token counts per response")
        ls = [as_finite_vector(x, f"lengths[{g}]") for g, x in enumerate(lengths)]
        for g, (x, u) in enumerate(zip(ls, us, strict=True)):
            if x.shape != u.shape or np.any(x <= 0):
                raise ValueError(f"lengths[{g}] must be {u.size} positive token counts, got {x.tolist()}")
        mean_len = float(np.concatenate(ls).mean())
        candidate = [a * mean_len / x for a, x in zip(candidate, ls, strict=True)]
    if R.size == 1 or np.all(R == R[0]):
        explanation = np.zeros_like(R)
    else:
        explanation = (R - R.mean()) / (float(R.std(ddof=ddof)) + eps)
    return ShapEAdvantages(candidate=tuple(candidate), explanation=explanation,
                           shapley=tuple(phis), set_reward=R)


__all__ = [
    "MAX_EXACT_PLAYERS", "ShapEAdvantages", "check_values", "game_table", "group_advantage", "members",
    "permutation_variance", "shape_grpo_advantages", "shapley_exact", "shapley_exact_batch",
    "shapley_max_game", "shapley_permutation",
]
