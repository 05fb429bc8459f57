"""The fidelity arithmetic: true advantages from prefix values, the noisy-teammate closed form, and
the agreement statistics (hand-worked numbers and invariants against numpy)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit.audit.fidelity import (
    advantages_from_values,
    agreement,
    centred_within,
    cluster_codes,
    noisy_teammate_values,
    paired_difference,
    pearson,
    ranks,
    sign_agreement,
    spearman,
    within_pearson,
)

floats = st.floats(-10, 10, allow_nan=False, allow_infinity=False)


def test_true_advantages_sum_to_reward_minus_initial_value() -> None:
    v = [0.375, 0.75, 1.0]
    adv = advantages_from_values(v)
    assert adv.tolist() == [0.375, 0.25]  # exact: differences of 0.375, 0.75, 1.0 are exact
    assert adv.sum() == pytest.approx(v[-1] - v[0], abs=1e-12)


@pytest.mark.parametrize(("c", "p", "q", "r", "expected"), [
    # solver right (c=1) on a problem it gets right half the time, teammate kept it (R=1), q=0.25:
    # V = [(1-q)p, (1-q)c, R] = [0.375, 0.75, 1]; A*(solver) = 0.375, A*(teammate) = 0.25
    (1.0, 0.5, 0.25, 1.0, [0.375, 0.25]),
    # the same right answer, replaced by the teammate: A*(teammate) = 0 - 0.75
    (1.0, 0.5, 0.25, 0.0, [0.375, -0.75]),
    # a wrong answer can only stay wrong: A*(solver) = -(1-q)p, A*(teammate) = 0
    (0.0, 0.2, 0.5, 0.0, [-0.1, 0.0]),
    # q = 0: the teammate never matters
    (1.0, 0.3, 0.0, 1.0, [0.7, 0.0]),
])
def test_noisy_teammate_closed_form(c, p, q, r, expected) -> None:
    adv = advantages_from_values(noisy_teammate_values(c, p, q, r))
    assert adv == pytest.approx(expected, abs=1e-12)


def test_noisy_teammate_refuses_values_outside_unit_interval() -> None:
    with pytest.raises(ValueError, match="q must lie in"):
        noisy_teammate_values(1.0, 0.5, 1.5, 1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(floats, floats), min_size=3, max_size=40))
def test_pearson_matches_numpy(pairs) -> None:
    x, y = np.array(pairs).T
    expected = np.corrcoef(x, y)[0, 1] if np.std(x) > 1e-6 and np.std(y) > 1e-6 else None
    got = pearson(x, y)
    if expected is None:
        return  # near-constant inputs: numpy's value is rounding noise, ours may be NaN
    assert got == pytest.approx(expected, abs=1e-9)


def test_pearson_of_a_constant_is_undefined() -> None:
    assert np.isnan(pearson(np.ones(5), np.arange(5.0)))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-3, 3).map(float), max_size=12))
def test_ranks_are_the_mean_position_of_equal_values(values: list[float]) -> None:
    # the definition, counted by hand: below(v) values sort before v, equal(v) share positions
    # below .. below + equal - 1, whose mean is below + (equal - 1) / 2 (halves: exact)
    expected = [sum(u < v for u in values) + (sum(u == v for u in values) - 1) / 2 for v in values]
    assert ranks(np.array(values, dtype=np.float64)).tolist() == expected  # exact: halves of small integers


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(floats, st.sampled_from("abc")), min_size=1, max_size=12))
def test_centring_by_codes_equals_centring_by_labels(pairs: list[tuple[float, str]]) -> None:
    x = np.array([v for v, _ in pairs])
    labels = np.array([g for _, g in pairs])
    codes = cluster_codes(labels)
    assert codes.tolist() == [sorted(set(labels.tolist())).index(g) for g in labels.tolist()]
    # exact: the same sums over the same entries in the same order, divided by the same counts
    assert centred_within(x, codes).tolist() == centred_within(x, labels).tolist()
    # codes with a gap (a cluster no entry has, as in a bootstrap resample) centre the same way
    assert centred_within(x, codes * 2).tolist() == centred_within(x, labels).tolist()  # exact: as above


def test_ranks_average_ties() -> None:
    # exact: average ranks of ties are halves
    assert ranks(np.array([0.0, 0.0, 1.0, -1.0])).tolist() == [1.5, 1.5, 3.0, 0.0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), min_size=3, max_size=30))
def test_spearman_is_invariant_to_monotone_maps(pairs) -> None:
    # integers: a monotone map keeps distinct values distinct (no ties made by rounding)
    x, y = np.array(pairs, dtype=np.float64).T
    a, b = spearman(x, y), spearman(np.exp(x / 5.0), y * 3.0 + 1.0)
    assert (np.isnan(a) and np.isnan(b)) or a == pytest.approx(b, abs=1e-9)


def test_spearman_of_a_monotone_relation_is_one() -> None:
    x = np.array([0.1, 0.5, 0.2, 3.0])
    assert spearman(x, x ** 3) == pytest.approx(1.0)


def test_sign_agreement_counts_only_clear_oracle_values_and_zero_disagrees() -> None:
    oracle = np.array([0.5, -0.5, 0.05, 0.3])
    method = np.array([1.0, 0.0, -9.0, -0.1])
    # clear: 0.5 (agrees), -0.5 (method 0: disagrees), 0.3 (disagrees); 0.05 is below the threshold
    assert sign_agreement(method, oracle, 0.1) == pytest.approx(1 / 3)
    assert np.isnan(sign_agreement(method, np.zeros(4), 0.1))


def test_agreement_intervals_hold_the_estimate_and_keep_clusters_together() -> None:
    rng = np.random.default_rng(0)
    oracle = rng.normal(size=60)
    method = oracle + rng.normal(scale=0.5, size=60)
    clusters = np.repeat(np.arange(15), 4)
    fit = agreement(method, oracle, clusters, threshold=0.1, resamples=300, seed=1)
    assert fit.pearson_ci[0] <= fit.pearson <= fit.pearson_ci[1]
    assert 0.7 < fit.pearson < 1.0
    assert fit.n == 60 and fit.clear == int(np.sum(np.abs(oracle) > 0.1))
    # a method that is the oracle exactly: every resample gives r = 1
    exact = agreement(oracle, oracle, clusters, resamples=50)
    assert exact.pearson == pytest.approx(1.0) and exact.pearson_ci == pytest.approx((1.0, 1.0))
    assert exact.sign == 1.0


def test_agreement_refuses_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="one length"):
        agreement([1.0, 2.0], [1.0], ["a", "b"])


def test_within_group_pearson_ignores_the_spread_between_groups() -> None:
    # two problems: the method orders each problem's utterances as A* does, but its level per
    # problem is the opposite of A*'s, so the pooled r is negative and the within-group r is 1
    method = np.array([10.0, 11.0, 0.0, 1.0])
    oracle = np.array([0.0, 0.5, 2.0, 2.5])
    groups = np.array(["p", "p", "q", "q"])
    # exact: 10.5 and 0.5 are the exact group means here
    assert centred_within(method, groups).tolist() == [-0.5, 0.5, -0.5, 0.5]
    assert pearson(method, oracle) < -0.9
    assert within_pearson(method, oracle, groups) == pytest.approx(1.0)
    # constant within every group: undefined, like a constant method
    assert np.isnan(within_pearson(np.array([1.0, 1.0, 3.0, 3.0]), oracle, groups))
    fit = agreement(method, oracle, groups, resamples=40)
    assert fit.within == pytest.approx(1.0) and fit.within_ci == pytest.approx((1.0, 1.0))


def test_paired_difference_is_antisymmetric_and_drawn_on_agreements_resamples() -> None:
    rng = np.random.default_rng(3)
    oracle = rng.normal(size=48)
    good = oracle + rng.normal(scale=0.3, size=48)
    poor = oracle + rng.normal(scale=2.0, size=48)
    clusters = np.repeat(np.arange(12), 4)
    diff = paired_difference(good, poor, oracle, clusters, resamples=200, seed=5)
    fit_good = agreement(good, oracle, clusters, resamples=200, seed=5)
    fit_poor = agreement(poor, oracle, clusters, resamples=200, seed=5)
    assert diff.pearson == pytest.approx(fit_good.pearson - fit_poor.pearson, abs=1e-12)
    assert diff.within == pytest.approx(fit_good.within - fit_poor.within, abs=1e-12)
    assert diff.pearson_ci[0] <= diff.pearson <= diff.pearson_ci[1] and diff.pearson_ci[0] > 0
    back = paired_difference(poor, good, oracle, clusters, resamples=200, seed=5)
    assert back.pearson == pytest.approx(-diff.pearson, abs=1e-12)
    assert back.pearson_ci == pytest.approx((-diff.pearson_ci[1], -diff.pearson_ci[0]), abs=1e-12)
    # a method against itself: 0 on every resample
    same = paired_difference(good, good, oracle, clusters, resamples=50, seed=5)
    # exact: x - x = 0 on every resample
    assert same.pearson == 0.0 and same.pearson_ci == (0.0, 0.0) and same.within_ci == (0.0, 0.0)
    with pytest.raises(ValueError, match="one length"):
        paired_difference(good, poor[:-1], oracle, clusters)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(floats, floats), min_size=4, max_size=12), st.integers(2, 4),
       st.lists(floats, min_size=4, max_size=4))
def test_within_group_pearson_does_not_see_a_level_per_group(pairs, n_groups, shifts) -> None:
    x = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    groups = np.arange(len(pairs)) % n_groups
    shifted = x + np.array(shifts)[groups]  # any constant added to each group's values
    before, after = within_pearson(x, y, groups), within_pearson(shifted, y, groups)
    # the centred values agree to rounding (values and shifts up to 10), so r does where defined
    assert np.allclose(centred_within(shifted, groups), centred_within(x, groups), atol=1e-9)
    # where the centred x are well away from constant (a spread of 1e-3 against rounding of 1e-14)
    if np.isfinite(before) and min(np.std(centred_within(v, groups)) for v in (x, y)) > 1e-3:
        assert after == pytest.approx(before, abs=1e-6)
    # centring leaves every group's sum at 0 (to rounding of values up to 10)
    for g in range(n_groups):
        assert abs(centred_within(x, groups)[groups == g].sum()) < 1e-9 * len(pairs)
