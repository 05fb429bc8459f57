"""PRM refinement and first-error localisation (docs/credit/specification.md#prm), message scorers."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit.values.characteristic import last_answer_scorer
from teamplay.credit.values.prm import (
    PreferencePair,
    first_error_signals,
    leave_one_message_out_scores,
    prefix_success,
    refine_to_messages,
    verifier_message_scores,
)
from teamplay.records import Message


def test_e51_success_refinement():
    # agent 0: phi/n = 31/120 = 0.258333, q = [0.6, 0] -> qbar 0.3, devs +-0.3,
    # beta = min(1, (1 - 0.258333)/0.3) = 1 -> r = [0.558333, -0.041667]; agents 1, 2 -> phi.
    r = refine_to_messages([31 / 60, 19 / 60, 1 / 6], [0, 0, 1, 2], [0.6, 0.0, 0.3, 0.1])
    assert r == pytest.approx([0.558333, -0.041667, 0.316667, 0.166667], abs=1e-6)
    assert r[:2].sum() == pytest.approx(31 / 60, abs=1e-15)


def test_bound_active_example():
    # phi/n = 0.3, devs [1, -1, 0]: beta = min(1, (1 - 0.3)/1) = 0.7 -> r = [1.0, -0.4, 0.3]
    r = refine_to_messages([0.9], [0, 0, 0], [1, -1, 0])
    assert r == pytest.approx([1.0, -0.4, 0.3], abs=1e-12)
    assert np.abs(r).max() <= 1.0 + 1e-12


def test_proportional_mode():
    # softmax([0, log 3]) = [0.25, 0.75]; phi 0.4 -> [0.1, 0.3]
    r = refine_to_messages([0.4], [0, 0], [0.0, np.log(3)], mode="proportional")
    assert r == pytest.approx([0.1, 0.3], abs=1e-12)


def test_refine_errors():
    with pytest.raises(ValueError, match="no messages"):
        refine_to_messages([0.5, 0.2], [0, 0], [0.1, 0.2])
    assert refine_to_messages([0.5, 0.0], [0, 0], [0.1, 0.2]).sum() == pytest.approx(0.5)  # null agent ok
    with pytest.raises(ValueError, match="exceeds the bound"):
        refine_to_messages([1.5], [0], [0.0])
    with pytest.raises(ValueError, match="equal length"):
        refine_to_messages([0.5], [0, 0], [0.1])
    with pytest.raises(ValueError, match="author indices"):
        refine_to_messages([0.5], [1], [0.1])
    with pytest.raises(ValueError, match="not finite"):
        refine_to_messages([0.5], [0], [np.nan])


@settings(max_examples=100)
@given(st.integers(1, 4), st.integers(0, 2**31 - 1), st.sampled_from(["signed", "proportional"]),
       st.floats(0.1, 2.0))
def test_conservation_and_bound(n, seed, mode, beta0):
    rng = np.random.default_rng(seed)
    T = int(rng.integers(n, 3 * n + 1))
    authors = np.concatenate([np.arange(n), rng.integers(0, n, T - n)])  # every agent speaks
    rng.shuffle(authors)
    counts = np.bincount(authors, minlength=n)
    phi = rng.uniform(-1, 1, n) * counts / counts.max()  # |phi_i| / n_i <= 1 = B
    q = rng.uniform(-1, 1, T)
    r = refine_to_messages(phi, authors, q, B=1.0, beta0=beta0, mode=mode)
    for i in range(n):
        assert r[authors == i].sum() == pytest.approx(phi[i], abs=1e-12)
    assert r.sum() == pytest.approx(phi.sum(), abs=1e-12)
    assert np.abs(r).max() <= 1.0 + 1e-12


def test_null_agent_messages_sum_to_zero_and_signed():
    r = refine_to_messages([0.8, 0.0], [0, 1, 0, 1], [0.5, 0.9, -0.5, -0.1])
    assert r[[1, 3]].sum() == pytest.approx(0.0, abs=1e-15)
    assert r[1] > 0 > r[3]  # signed inside a null agent: the better message is positive
    assert r[2] < 0  # redundant/sabotaging message of a successful agent is negative


def test_e52_first_error():
    # d = [0.1, -0.4, 0.05, 0.25, -0.4]: first d <= -0.2 at t=1 (0-based); repair d >= 0.2 at t=3.
    res = first_error_signals(0.5, [0.6, 0.2, 0.25, 0.5, 0.1], 0.2, 0.2, 1.0, 0.5)
    assert res.deltas == pytest.approx([0.1, -0.4, 0.05, 0.25, -0.4], abs=1e-12)
    assert res.t_star == 1 and res.repairs == (3,) and not res.fell_back
    assert res.signals.tolist() == [0, -1, 0, 0.5, 0]  # exact: signals are the constants 0, -1, c_rep = 0.5
    assert res.pairs == (PreferencePair(1, None, 1, "error"), PreferencePair(3, 3, None, "repair"))
    # conserve with C = R - p0 = -0.5: r_t* = -0.5 - 0.5 = -1.0 (unchanged, within B), sum -0.5
    cons = first_error_signals(0.5, [0.6, 0.2, 0.25, 0.5, 0.1], conserve=True, C=-0.5)
    # exact: signals are the constants 0, -1, c_rep = 0.5
    assert cons.signals.tolist() == [0, -1, 0, 0.5, 0] and not cons.conservation_violated
    assert cons.signals.sum() == pytest.approx(-0.5)


def test_conservation_violation_is_flagged():
    # C = -2: r_t* would be -2 - 0.5 = -2.5, clipped to -1 -> flagged, not silent.
    res = first_error_signals(0.5, [0.6, 0.2, 0.25, 0.5, 0.1], conserve=True, C=-2.0)
    assert res.signals[1] == -1.0 and res.conservation_violated  # exact: clipped to the bound -1
    with pytest.raises(ValueError, match="needs C"):
        first_error_signals(0.5, [0.6], conserve=True)


def test_iterate_fallback_and_flags():
    p = [0.6, 0.2, 0.25, 0.5, 0.1]
    it = first_error_signals(0.5, p, iterate=True)
    # exact: signals are the constants 0, -1, c_rep = 0.5
    assert it.errors == (1, 4) and it.signals.tolist() == [0, -1, 0, 0.5, -1]
    # no drop of 0.2 or more: the most negative step (t=1, d=-0.1) is the error
    fb = first_error_signals(0.5, [0.6, 0.5, 0.55], delta=0.2)
    assert fb.fell_back and fb.t_star == 1 and fb.signals.tolist() == [0, -1, 0]
    fl = first_error_signals(0.5, p, error_flags=[False, False, True, False, False])
    assert fl.t_star == 2 and fl.repairs == (3,)


@settings(max_examples=60)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=10), st.floats(0, 1))
def test_first_error_properties(p, p0):
    res = first_error_signals(p0, p)
    d = res.deltas
    if not res.fell_back:
        assert d[res.t_star] <= -0.2 and all(d[t] > -0.2 for t in range(res.t_star))
    assert np.all(res.signals[: res.t_star] == 0)  # nothing before the first error
    assert all(res.signals[t] > 0 and t > res.t_star for t in res.repairs)


def msgs():
    return [
        Message("a", "solver", 0, "solve", "The answer is 5.", answer="5"),
        Message("b", "reviewer", 1, "review", "Check: 2+2=4. The answer is 4.", answer="4"),
        Message("a", "solver", 2, "revise", "", spoke=False),
        Message("b", "reviewer", 3, "review", "RIGHT"),
    ]


def right(a):
    return 1.0 if a == "4" else 0.0


def test_verifier_message_scores():
    assert verifier_message_scores(msgs(), right).tolist() == [-1.0, 1.0, 0.0, 0.0]


def test_leave_one_message_out_with_verifier_scorer():
    # V(full) = 1 (last answer "4"); without m0: still "4" -> 1; without m1: last answer "5" -> 0;
    # without m3: "4" -> 1. q = [0, 1, 0 (skipped), 0]
    calls = []

    def scorer(ts):
        calls.append(len(ts))
        return last_answer_scorer(right)(ts)

    assert leave_one_message_out_scores(msgs(), scorer).tolist() == [0.0, 1.0, 0.0, 0.0]
    assert calls == [4]  # full + 3 spoken messages in one call


def test_prefix_success():
    p0, p = prefix_success(msgs(), last_answer_scorer(right))
    assert p0 == 0.0 and p.tolist() == [0.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="prefixes"):
        prefix_success(msgs(), lambda ts: np.zeros(2))
