"""Group-normalised advantages (docs/credit/specification.md#group-advantage) and the per-agent group rule."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit.values.group import group_advantage, group_credit_advantage

finite = st.floats(-100, 100, allow_nan=False)


def test_spec_example_population_and_unbiased():
    # r = [1,0,0,1]: mean 0.5, deviations +-0.5; population std 0.5 -> +-1;
    # unbiased std sqrt(4*0.25/3) = 0.577350 -> 0.5/0.577350 = 0.866025.
    assert group_advantage([1, 0, 0, 1]) == pytest.approx([1, -1, -1, 1], abs=1e-6)
    assert group_advantage([1, 0, 0, 1], ddof=1) == pytest.approx(
        [0.866025, -0.866025, -0.866025, 0.866025], abs=1e-6)


def test_mean_only():
    # mean 0.25 -> [0.75, -0.25, -0.25, -0.25]
    assert group_advantage([1, 0, 0, 0], mode="mean_only") == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_edge_cases_singleton_and_all_equal_are_exact_zeros():
    assert group_advantage([0.7]).tolist() == [0.0]  # exact: the edge cases return zeros without arithmetic
    # exact: the edge cases return zeros without arithmetic
    assert group_advantage([0.1, 0.1, 0.1]).tolist() == [0.0, 0.0, 0.0]
    # exact: the edge cases return zeros without arithmetic
    assert group_advantage([0.1, 0.1, 0.1], mode="mean_only").tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf"), 0.0], [[1.0, 2.0]]])
def test_bad_input_raises(bad):
    with pytest.raises(ValueError):
        group_advantage(bad)


def test_bad_options_raise():
    with pytest.raises(ValueError, match="mode"):
        group_advantage([1, 0], mode="median")
    with pytest.raises(ValueError, match="ddof"):
        group_advantage([1, 0], ddof=2)


@given(st.lists(finite, min_size=1, max_size=16), st.sampled_from([0, 1]),
       st.sampled_from(["std", "mean_only"]))
def test_zero_sum(r, ddof, mode):
    assert abs(group_advantage(r, ddof=ddof, mode=mode).sum()) < 1e-6


@given(st.lists(st.floats(0, 1), min_size=2, max_size=16), st.floats(0.1, 10), st.floats(-5, 5))
def test_affine_invariance(r, a, b):
    r = np.array(r)
    if np.ptp(r) < 1e-3:  # near-equal rewards sit at the eps floor, where invariance is not promised
        return
    assert group_advantage(a * r + b) == pytest.approx(group_advantage(r), abs=1e-6)


def test_group_credit_symmetric_agents_reproduce_grpo():
    # n = 2 symmetric agents, phi = R/2: the rule reproduces group_advantage(R) on each agent.
    R = np.array([1.0, 0.0, 0.0, 1.0])
    phi = np.stack([R / 2, R / 2], axis=1)  # [G=4, n=2]
    A = group_credit_advantage(phi)
    assert A[:, 0] == pytest.approx(group_advantage(R), abs=1e-12)
    assert A[:, 1] == pytest.approx(group_advantage(R), abs=1e-12)


def test_group_credit_hand_worked_and_free_rider():
    # agent 0 carries: phi0 = [1, 0]; agent 1 free-rides: phi1 = [0, 0]. n = 2, G = 2.
    # c0 = [0.5, -0.5], c1 = 0; scaled n*c = [1, -1] and [0, 0];
    # sigma^2 = (1 + 1) / (2 * 2) = 0.5 -> sigma = 0.707107; A0 = [1.414214, -1.414214], A1 = 0.
    A = group_credit_advantage([[1.0, 0.0], [0.0, 0.0]])
    assert A[:, 0] == pytest.approx([1.414214, -1.414214], abs=1e-6)
    assert A[:, 1].tolist() == [0.0, 0.0]  # exact: a free rider's phi is 0: 0 - 0 = 0
    assert group_credit_advantage([[1.0, 0.0], [0.0, 0.0]], mode="mean_only")[:, 0] == pytest.approx([1, -1])


def test_group_credit_edge_cases():
    # exact: the edge cases return zeros without arithmetic
    assert group_credit_advantage([[0.3, 0.2]]).tolist() == [[0.0, 0.0]]
    assert np.all(group_credit_advantage([[0.3, 0.2], [0.3, 0.2]]) == 0)
    with pytest.raises(ValueError, match="agent 1"):
        group_credit_advantage([[0.3, float("nan")]])
    with pytest.raises(ValueError):
        group_credit_advantage(np.zeros((0, 2)))


@settings(max_examples=50)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**31 - 1), st.sampled_from(["std", "mean_only"]))
def test_group_credit_zero_sum_per_agent(G, n, seed, mode):
    phi = np.random.default_rng(seed).uniform(-1, 1, size=(G, n))
    A = group_credit_advantage(phi, mode=mode)
    assert np.abs(A.sum(axis=0)).max() < 1e-9
