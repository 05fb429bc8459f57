"""Shapley values: exact, Monte Carlo, max game, ShapE-GRPO (docs/credit/specification.md#shapley)."""

import time
from itertools import permutations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit.values.shapley import (
    permutation_variance,
    shape_grpo_advantages,
    shapley_exact,
    shapley_exact_batch,
    shapley_max_game,
    shapley_permutation,
)

# E4.1 by bitmask: {}, {0}, {1}, {0,1}, {2}, {0,2}, {1,2}, {0,1,2}
E41 = [0.0, 0.2, 0.1, 0.6, 0.0, 0.4, 0.1, 1.0]


def brute_force(n, v):
    """Shapley by averaging marginal gains over all n! orders (the definition)."""
    phi = np.zeros(n)
    orders = list(permutations(range(n)))
    for order in orders:
        mask = 0
        for i in order:
            phi[i] += v(mask | (1 << i)) - v(mask)
            mask |= 1 << i
    return phi / len(orders)


def test_e41_exact_and_extra_null_player_and_size_game():
    # player 0: weights 1/3 (|S|=0), 1/6 (|S|=1), 1/3 (|S|=2):
    # 1/3*0.2 + 1/6*(0.6-0.1) + 1/6*(0.4-0) + 1/3*(1-0.1) = 0.066667+0.083333+0.066667+0.3 = 0.516667
    assert shapley_exact(3, E41) == pytest.approx([0.516667, 0.316667, 0.166667], abs=1e-6)
    four = E41 + E41  # bit 3 changes nothing
    assert shapley_exact(4, four) == pytest.approx([0.516667, 0.316667, 0.166667, 0.0], abs=1e-6)
    size_game = [0.0, 0.3, 0.3, 0.8, 0.3, 0.8, 0.8, 1.0]
    assert shapley_exact(3, size_game) == pytest.approx([1 / 3] * 3, abs=1e-12)


def test_callable_equals_table_and_brute_force():
    v = lambda m: E41[m]  # noqa: E731
    assert shapley_exact(3, v) == pytest.approx(shapley_exact(3, E41), abs=1e-12)
    assert shapley_exact(3, E41) == pytest.approx(brute_force(3, v), abs=1e-12)


def test_e42_exact_permutation_variances():
    assert permutation_variance(3, E41) == pytest.approx([0.084722, 0.051389, 0.032222], abs=1e-6)


def test_e42_first_permutations_match_spec_debug_values():
    # spec's debugging numbers for default_rng(0), M = 10 (RNG-dependent; efficiency exact).
    phi = shapley_permutation(3, E41, 10, np.random.default_rng(0))
    assert phi == pytest.approx([0.59, 0.35, 0.06], abs=1e-9)


@pytest.mark.parametrize("M", [10, 100, 1000])
def test_mc_error_within_four_standard_errors(M):
    exact = shapley_exact(3, E41)
    se = np.sqrt(permutation_variance(3, E41) / M)
    for seed in range(5):
        est = shapley_permutation(3, E41, M, np.random.default_rng(seed))
        assert np.all(np.abs(est - exact) <= 4 * se), (seed, est, exact, se)
        assert est.sum() == pytest.approx(1.0, abs=1e-12)


def test_batch_eval_gets_one_call_of_deduplicated_masks():
    calls = []

    def batch_eval(masks):
        calls.append(np.asarray(masks).copy())
        return np.asarray(E41)[masks]

    phi = shapley_permutation(3, None, 200, np.random.default_rng(1), batch_eval=batch_eval)
    assert len(calls) == 1
    assert len(np.unique(calls[0])) == len(calls[0]) == 8  # 200 permutations need all 8, once each
    assert phi.sum() == pytest.approx(1.0, abs=1e-12)


def test_antithetic_uses_reversed_permutations():
    # with 1 sampled permutation + its reverse, player 0's estimate is the mean of its gain in
    # the two orders; efficiency still exact.
    phi = shapley_permutation(3, E41, 1, np.random.default_rng(3), antithetic=True)
    assert phi.sum() == pytest.approx(1.0, abs=1e-12)
    perm = np.random.default_rng(3).permutation(3)
    single = shapley_permutation(3, E41, 1, np.random.default_rng(3))
    rev = np.zeros(3)
    mask = 0
    for i in perm[::-1]:
        rev[i] = E41[mask | (1 << i)] - E41[mask]
        mask |= 1 << i
    assert phi == pytest.approx((single + rev) / 2, abs=1e-12)


def test_validation_nan_and_range():
    bad = list(E41)
    bad[5] = float("nan")
    with pytest.raises(ValueError, match=r"coalition \[0, 2\]"):
        shapley_exact(3, bad)
    with pytest.raises(ValueError, match=r"outside the declared range"):
        shapley_exact(3, [x * 2 for x in E41], value_range=(0.0, 1.0))
    with pytest.raises(ValueError, match=r"coalition \[0, 1, 2\]"):
        shapley_permutation(3, [x * 2 for x in E41], 5, np.random.default_rng(0), value_range=(0, 1))
    with pytest.raises(ValueError, match="needs 8 values"):
        shapley_exact(3, E41[:7])
    with pytest.raises(ValueError):
        shapley_exact(0, [0.0])
    with pytest.raises(ValueError, match="M"):
        shapley_permutation(3, E41, 0, np.random.default_rng(0))


def test_efficiency_does_not_assume_empty_zero():
    v = [0.5 + x for x in E41]  # v(empty) = 0.5
    assert shapley_exact(3, v).sum() == pytest.approx(1.0, abs=1e-12)  # v(N) - v(empty) = 1.5 - 0.5


def test_exact_n8_table_is_fast_and_batch_agrees():
    rng = np.random.default_rng(0)
    tables = rng.uniform(size=(64, 256))
    shapley_exact(8, tables[0])  # build the cached coefficient matrix
    start = time.perf_counter()
    single = np.stack([shapley_exact(8, t) for t in tables])
    per_call = (time.perf_counter() - start) / 64
    assert per_call < 0.01  # ~0.1 ms on a laptop; generous for a shared CI core
    assert shapley_exact_batch(8, tables) == pytest.approx(single, abs=1e-12)


games = st.integers(1, 5).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.floats(-1, 1), min_size=2**n, max_size=2**n)))


@settings(max_examples=60)
@given(games)
def test_axioms_efficiency_and_brute_force(game):
    n, table = game
    phi = shapley_exact(n, table)
    assert phi.sum() == pytest.approx(table[-1] - table[0], abs=1e-9)
    assert phi == pytest.approx(brute_force(n, lambda m: table[m]), abs=1e-9)


@settings(max_examples=40)
@given(games, st.integers(1, 50), st.integers(0, 2**31 - 1), st.booleans())
def test_mc_efficiency_exact_for_any_M(game, M, seed, antithetic):
    n, table = game
    phi = shapley_permutation(n, table, M, np.random.default_rng(seed), antithetic=antithetic)
    assert phi.sum() == pytest.approx(table[-1] - table[0], abs=1e-9)


@settings(max_examples=40)
@given(st.integers(3, 5), st.data())
def test_symmetry_null_linearity(n, data):
    # build a game where players 0 and 1 are interchangeable and player n-1 is null:
    # v(S) = f(|S without n-1| , whether S holds 0 or 1 counted symmetrically)
    size_vals = data.draw(st.lists(st.floats(-1, 1), min_size=n, max_size=n))
    extra = data.draw(st.floats(-1, 1))

    def v(mask):
        core = mask & ~(1 << (n - 1))
        k = bin(core).count("1")
        return size_vals[k] + extra * (((core >> 0) & 1) + ((core >> 1) & 1))

    phi = shapley_exact(n, v)
    assert phi[0] == pytest.approx(phi[1], abs=1e-12)
    assert phi[n - 1] == pytest.approx(0.0, abs=1e-12)
    w = data.draw(st.lists(st.floats(-1, 1), min_size=2**n, max_size=2**n))
    c = data.draw(st.floats(-3, 3))
    table = np.array([v(m) for m in range(2**n)])
    assert shapley_exact(n, table + np.array(w)) == pytest.approx(
        shapley_exact(n, table) + shapley_exact(n, w), abs=1e-9)
    assert shapley_exact(n, c * table) == pytest.approx(c * shapley_exact(n, table), abs=1e-9)


@settings(max_examples=40)
@given(games)
def test_bounds_by_marginal_contributions(game):
    n, table = game
    phi = shapley_exact(n, table)
    t = np.array(table)
    for i in range(n):
        masks = np.array([m for m in range(2**n) if not (m >> i) & 1])
        gains = t[masks | (1 << i)] - t[masks]
        assert gains.min() - 1e-12 <= phi[i] <= gains.max() + 1e-12


# ------------------------------------------------------------------ max game (ShapE-GRPO, §4.3)

def test_max_game_spec_examples():
    # sorted [0, 0.2, 0.5, 0.9]: phi(0.0) = 0; phi(0.2) = 0.2/3 = 0.066667;
    # phi(0.5) = 0.066667 + 0.3/2 = 0.216667; phi(0.9) = 0.216667 + 0.4 = 0.616667
    phi = shapley_max_game([0.2, 0.9, 0.5, 0.0])
    assert phi == pytest.approx([0.066667, 0.616667, 0.216667, 0], abs=1e-6)
    assert shapley_max_game([1, 0, 1, 1]) == pytest.approx([1 / 3, 0, 1 / 3, 1 / 3], abs=1e-12)
    assert shapley_max_game([0.5, 0.5, 0.2]) == pytest.approx([0.216667, 0.216667, 0.066667], abs=1e-6)
    phi = shapley_max_game([-0.5, 0.3, 0.1], base=-1)
    assert phi == pytest.approx([0.166667, 0.666667, 0.466667], abs=1e-6)
    assert phi.sum() == pytest.approx(1.3, abs=1e-12)
    with pytest.raises(ValueError, match="below base"):
        shapley_max_game([0.2, -0.1])


@settings(max_examples=60)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=6), st.floats(-1, 0))
def test_max_game_closed_form_equals_brute_force(u, base):
    n = len(u)

    def v(mask):
        vals = [u[i] for i in range(n) if (mask >> i) & 1]
        return max([base, *vals])

    assert shapley_max_game(u, base) == pytest.approx(shapley_exact(n, v), abs=1e-9)


def test_shape_grpo_spec_example():
    res = shape_grpo_advantages([[0.9, 0.1, 0.0], [0.5, 0.5, 0.4]])
    assert res.shapley[0] == pytest.approx([0.85, 0.05, 0.0], abs=1e-6)
    assert res.shapley[1] == pytest.approx([0.183333, 0.183333, 0.133333], abs=1e-6)
    assert res.set_reward.tolist() == [0.9, 0.5]  # exact: the set reward is the largest reward, copied
    # K*phi pooled = [2.55, .15, 0, .55, .55, .4], mean 0.7 = mean R, population std 0.851469
    assert res.candidate[0] == pytest.approx([2.172715, -0.645942, -0.822108], abs=1e-6)
    assert res.candidate[1] == pytest.approx([-0.176166, -0.176166, -0.352332], abs=1e-6)
    assert res.explanation == pytest.approx([1, -1], abs=1e-6)
    assert abs(np.concatenate(res.candidate).sum()) < 1e-9


def test_shape_grpo_length_normalise():
    # lengths [10, 30, 20] and [20, 20, 20]: mean 20 -> factors [2, 2/3, 1] and [1, 1, 1]
    plain = shape_grpo_advantages([[0.9, 0.1, 0.0], [0.5, 0.5, 0.4]])
    norm = shape_grpo_advantages([[0.9, 0.1, 0.0], [0.5, 0.5, 0.4]], length_normalise=True,
                                 lengths=[[10, 30, 20], [20, 20, 20]])
    assert norm.candidate[0] == pytest.approx(plain.candidate[0] * np.array([2, 2 / 3, 1]), abs=1e-12)
    assert norm.candidate[1] == pytest.approx(plain.candidate[1], abs=1e-12)
    with pytest.raises(ValueError, match="lengths"):
        shape_grpo_advantages([[0.9, 0.1]], length_normalise=True)
    with pytest.raises(ValueError, match="positive"):
        shape_grpo_advantages([[0.9, 0.1]], length_normalise=True, lengths=[[3, 0]])
