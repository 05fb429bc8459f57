"""Per-turn baselines: LOTO, A2TGPO, GiGPO (worked numbers and edge cases of
docs/credit/specification.md#turn-baselines)."""

from __future__ import annotations

import itertools
from math import factorial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit.methods.a2tgpo import A2TGPOOptions, a2tgpo_advantage, a2tgpo_credit, information_gain
from teamplay.credit.methods.gigpo import GiGPOOptions, gigpo_advantage, gigpo_credit
from teamplay.credit.methods.loto import LOTOOptions, loto_credit, loto_method
from teamplay.credit.registry import CreditBatch, CreditResources, assign
from teamplay.records import Episode, Message


def brute_force_shapley(V, T):
    """Shapley by the subset formula, written independently of the library (tests only)."""
    phi = np.zeros(T)
    for i in range(T):
        others = [j for j in range(T) if j != i]
        for size in range(T):
            w = factorial(size) * factorial(T - size - 1) / factorial(T)
            for S in itertools.combinations(others, size):
                phi[i] += w * (V(frozenset(S) | {i}) - V(frozenset(S)))
    return phi


# ---- §6.1 LOTO ------------------------------------------------------------------------------------

def test_loto_equals_shapley_for_additive_value():
    w = [0.3, 0.0, 0.5]
    V = lambda kept: sum(w[t] for t in kept)  # noqa: E731
    assert loto_credit(V, 3) == pytest.approx([0.3, 0.0, 0.5], abs=1e-12)
    assert brute_force_shapley(V, 3) == pytest.approx([0.3, 0.0, 0.5], abs=1e-12)


def test_loto_failure_mode_redundant_pair():
    V = lambda kept: 1.0 if (0 in kept or 1 in kept) else 0.0  # noqa: E731
    # removing turn 0 keeps turn 1 (and vice versa): V stays 1, so both get 0
    assert loto_credit(V, 3) == pytest.approx([0.0, 0.0, 0.0], abs=0)
    assert brute_force_shapley(V, 3) == pytest.approx([0.5, 0.5, 0.0], abs=1e-12)


def test_loto_rejects_bad_inputs():
    with pytest.raises(ValueError, match="T >= 1"):
        loto_credit(lambda kept: 0.0, 0)
    with pytest.raises(ValueError, match="non-finite"):
        loto_credit(lambda kept: float("nan"), 2)


# ---- §6.2 A2TGPO ------------------------------------------------------------------------------------

P = [[0.1, 0.3, 0.6], [0.1, 0.1, 0.05, 0.4], [0.1, 0.2]]


def test_a2tgpo_worked_example():
    IG = information_gain(P)
    assert [list(x) for x in IG] == [pytest.approx([0.2, 0.3]), pytest.approx([0, -0.05, 0.35]),
                                     pytest.approx([0.1])]
    res = a2tgpo_advantage(IG, gamma=1.0)
    # turn 1: IG [0.2, 0, 0.1], mean 0.1, pop. std 0.0816497 -> z [1.224745, −1.224745, 0]
    # turn 2: IG [0.3, −0.05], mean 0.125, std 0.175 -> z [1, −1]; turn 3: one rollout -> 0
    assert res.z[0] == pytest.approx([1.224745, 1.0], abs=1e-6)
    assert res.z[1] == pytest.approx([-1.224745, -1.0, 0.0], abs=1e-6)
    assert res.z[2] == pytest.approx([0.0], abs=1e-6)
    # r1: (1.224745 + 1)/sqrt(2) = 1.573132, 1/sqrt(1); r2: (−1.224745 − 1 + 0)/sqrt(3) = −1.284457
    assert res.advantages[0] == pytest.approx([1.573132, 1.0], abs=1e-6)
    assert res.advantages[1] == pytest.approx([-1.284457, -0.707107, 0.0], abs=1e-6)
    assert res.advantages[2] == pytest.approx([0.0], abs=1e-6)
    res9 = a2tgpo_advantage(IG, gamma=0.9)
    # r1: (1.224745 + 0.9·1)/sqrt(2) = 1.502422; r2: (−1.224745 − 0.9)/sqrt(3) = −1.226722
    assert res9.advantages[0] == pytest.approx([1.502422, 1.0], abs=1e-6)
    assert res9.advantages[1] == pytest.approx([-1.226722, -0.707107, 0.0], abs=1e-6)


def test_a2tgpo_clip_range_and_outcome():
    IG = information_gain(P)
    res = a2tgpo_advantage(IG, eps0=0.2, kappa=0.5)
    # ε = 0.2·(1 + 0.5·tanh|z|): tanh(1.224745) = 0.841048 -> 0.284105; tanh(1) = 0.761594 -> 0.276159
    assert res.clip[0] == pytest.approx([0.284105, 0.276159], abs=1e-6)
    assert res.clip[2] == pytest.approx([0.2], abs=1e-12)
    with_outcome = a2tgpo_advantage(IG, outcome=[1.0, 0.0, -1.0])
    # outcome added at the last turn before accumulation: r1 z [1.224745, 2] -> [(3.224745)/√2, 2]
    assert with_outcome.advantages[0] == pytest.approx([2.280238, 2.0], abs=1e-6)
    assert with_outcome.advantages[2] == pytest.approx([-1.0], abs=1e-12)


def test_a2tgpo_edge_cases():
    single = a2tgpo_advantage([[0.3, -0.1]])
    assert single.advantages[0] == pytest.approx([0.0, 0.0], abs=0)  # groups of size 1 -> 0
    equal = a2tgpo_advantage([[0.1], [0.1]])
    assert equal.advantages[0] == pytest.approx([0.0], abs=0)
    assert a2tgpo_advantage([[], [0.2]]).advantages[0].shape == (0,)
    with pytest.raises(ValueError, match="empty group"):
        a2tgpo_advantage([])
    with pytest.raises(ValueError, match="non-finite"):
        a2tgpo_advantage([[np.nan]])
    with pytest.raises(ValueError, match="outcome"):
        a2tgpo_advantage([[0.1], [0.2]], outcome=[1.0])
    with pytest.raises(ValueError, match="at least one turn"):
        information_gain([[0.5]])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(-1, 1), min_size=1, max_size=5), min_size=2, max_size=6))
def test_a2tgpo_z_is_centred_per_turn(IG):
    res = a2tgpo_advantage(IG)
    for t in range(max(len(x) for x in IG)):
        zs = [z[t] for z in res.z if len(z) > t]
        xs = np.array([x[t] for x in IG if len(x) > t])
        # exact z-scores sum to 0; in floats the mean's rounding error (<= n eps max|x|) is divided
        # by the std, so near-equal gains (std ~1e-9) legitimately leave ~1e-8 (hypothesis found one)
        std = xs.std()
        slack = 4 * len(xs) ** 2 * np.finfo(float).eps * np.abs(xs).max() / std if std > 0 else 0.0
        assert abs(sum(zs)) <= 1e-9 + slack


# ---- §6.3 GiGPO -----------------------------------------------------------------------------------

REWARDS = [[0, 0, 1], [0, 0, 0], [0, 0]]
ANCHORS = [["s0", "s1", "s2"], ["s0", "s1", "s3"], ["s0", "s4"]]


def test_gigpo_worked_example():
    adv = gigpo_advantage(REWARDS, ANCHORS, gamma=0.95)
    # A^E = R − mean = [1, 0, 0] − 1/3; returns A = [0.9025, 0.95, 1]; group s0 mean 0.300833,
    # s1 mean 0.475; s2, s3, s4 singletons -> 0
    assert adv[0] == pytest.approx([1.268333, 1.141667, 0.666667], abs=1e-6)
    assert adv[1] == pytest.approx([-0.634167, -0.808333, -0.333333], abs=1e-6)
    assert adv[2] == pytest.approx([-0.634167, -0.333333], abs=1e-6)


def test_gigpo_options():
    steps = gigpo_advantage(REWARDS, ANCHORS, episode_mean_over="steps")
    # step rows: A's R=1 three times, B's and C's 0 five times -> mean 3/8; A^E(A) = 5/8
    assert steps[0][2] == pytest.approx(1 - 3 / 8, abs=1e-12)
    assert steps[2][1] == pytest.approx(-3 / 8, abs=1e-12)
    no_step = gigpo_advantage(REWARDS, ANCHORS, omega=0.0)
    assert no_step[0] == pytest.approx([2 / 3] * 3, abs=1e-12)
    std = gigpo_advantage(REWARDS, ANCHORS, mode="mean_std_norm", omega=0.0)
    # R = [1,0,0]: unbiased std = sqrt(1/3) = 0.577350 -> A^E(A) = (2/3)/(0.577350 + 1e-6)
    assert std[0][0] == pytest.approx((2 / 3) / (np.sqrt(1 / 3) + 1e-6), abs=1e-9)
    # similarity clustering merges "s1" with "s1!" (ratio 0.8) at threshold 0.8
    fuzzy = gigpo_advantage(REWARDS, [["s0", "s1", "s2"], ["s0", "s1!", "s3"], ["s0", "s4"]], similarity=0.8)
    assert fuzzy[1][1] == pytest.approx(-0.808333, abs=1e-6)
    exact = gigpo_advantage(REWARDS, [["s0", "s1", "s2"], ["s0", "s1!", "s3"], ["s0", "s4"]])
    assert exact[1][1] == pytest.approx(-1 / 3, abs=1e-12)  # now a singleton group


def test_gigpo_rejects_bad_inputs():
    with pytest.raises(ValueError, match="same ragged shape"):
        gigpo_advantage(REWARDS, [["s0"], ["s0"], ["s0"]])
    with pytest.raises(ValueError, match="non-finite"):
        gigpo_advantage([[np.inf]], [["s"]])
    with pytest.raises(ValueError, match="empty group"):
        gigpo_advantage([], [])
    with pytest.raises(ValueError, match="mode"):
        gigpo_advantage(REWARDS, ANCHORS, mode="zscore")


# ---- registered methods --------------------------------------------------------------------------

def episode(texts: list[str], reward: float, spoke: list[bool] | None = None) -> Episode:
    spoke = spoke or [True] * len(texts)
    agents = ("a_0", "b_0")
    msgs = tuple(Message(agent=agents[t % 2], role=agents[t % 2][0], round=t, stage="solve",
                         text=x if s else "", spoke=s, prompt_ids=(t, 7))
                 for t, (x, s) in enumerate(zip(texts, spoke, strict=True)))
    return Episode(problem_id="p", group_id="g", agents=agents, messages=msgs, final_answer=None,
                   reward=reward)


def test_gigpo_method_on_episodes():
    eps = (episode(["x", "y", "z"], 1.0), episode(["x", "q", "w"], 0.0), episode(["u", "v"], 0.0))
    out = gigpo_credit(CreditBatch(episodes=eps), GiGPOOptions())
    # anchors: first messages share "<a_0|solve>" (s0); second messages of eps 0 and 1 share
    # history "x" (s1); third messages see "x, y" vs "x, q"; the rest are singletons
    # -> the §6.3 worked example exactly
    assert out[0] == pytest.approx([1.268333, 1.141667, 0.666667], abs=1e-6)
    assert out[1] == pytest.approx([-0.634167, -0.808333, -0.333333], abs=1e-6)
    assert out[2] == pytest.approx([-0.634167, -0.333333], abs=1e-6)
    by_ids = gigpo_credit(CreditBatch(episodes=eps), GiGPOOptions(anchor="prompt_ids"))
    # prompt ids (t, 7) coincide at every position: step t of all episodes is one group
    assert by_ids[2][1] == pytest.approx(-1 / 3 + (0 - (0.95 + 0 + 0) / 3), abs=1e-9)
    skipped = gigpo_credit(CreditBatch(episodes=(episode(["x", "y"], 1.0, [True, False]), eps[2])),
                           GiGPOOptions())
    assert skipped[0][1] == 0.0  # exact: a skipped turn's credit is the constant 0.0
    via_registry = assign("gigpo", CreditBatch(episodes=eps), {"gamma": 0.95})
    assert via_registry[0] == pytest.approx(out[0], abs=0)


def test_a2tgpo_and_loto_methods_need_their_resources():
    eps = (episode(["x", "y"], 1.0), episode(["u", "v"], 0.0))
    with pytest.raises(ValueError, match="answer_probability"):
        a2tgpo_credit(CreditBatch(episodes=eps), A2TGPOOptions())
    with pytest.raises(ValueError, match="transcript_scorer"):  # value=masking, the default
        loto_method(CreditBatch(episodes=eps), LOTOOptions())
    with pytest.raises(ValueError, match="replay"):
        loto_method(CreditBatch(episodes=eps), LOTOOptions(value="replay"))
    table = {id(eps[0]): [0.1, 0.3, 0.6], id(eps[1]): [0.1, 0.1, 0.05]}
    out = a2tgpo_credit(CreditBatch(episodes=eps, resources=CreditResources(
        answer_probability=lambda ep, n: table[id(ep)][n])),
                        A2TGPOOptions())
    # IG [0.2, 0.3] vs [0, −0.05]: z = [1, 1] and [−1, −1]; Â_1 = (1 + 1)/√2, Â_2 = 1
    assert out[0] == pytest.approx([np.sqrt(2), 1.0], abs=1e-9)
    assert out[1] == pytest.approx([-np.sqrt(2), -1.0], abs=1e-9)

    def value(ep, kept):  # success iff message 0 is kept
        return ep.reward if 0 in kept else 0.0

    loto = loto_method(CreditBatch(episodes=eps, resources=CreditResources(transcript_value=value)), LOTOOptions())
    assert loto[0] == pytest.approx([1.0, 0.0], abs=0)
    assert loto[1] == pytest.approx([0.0, 0.0], abs=0)
