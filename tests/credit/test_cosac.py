"""COSAC: worked examples E3.1 of docs/credit/specification.md#cosac-checks and the invariants T3.1, T3.3-T3.5."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit.audit.bandit import SeqBandit
from teamplay.credit.methods.cosac import (
    CosacOptions,
    EmpiricalPolicy,
    cosac_advantage,
    cosac_credit,
    cosac_direct_indirect,
    cosac_ridge,
    episode_labels,
    per_prefix,
)
from teamplay.credit.registry import CreditBatch, assign, check_credit
from teamplay.errors import ConfigError
from teamplay.records import Episode, Message

# ---- E3.1: K=2, A=2, π_1 = [.5,.5], π_2(·|0) = [.8,.2], π_2(·|1) = [.3,.7]; R = φ_1 + φ_2 exactly ----

_P2 = {0: [0.8, 0.2], 1: [0.3, 0.7]}
E31_POLICY = per_prefix(lambda k, p: np.array([0.5, 0.5]) if k == 0 else np.array(_P2[p[0]]))
E31_Z = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
E31_R = np.array([0.0, 2.0, 1.0, 3.0])


def test_e31_lambda_to_zero_recovers_exact_seqau():
    phi = cosac_ridge(E31_Z, E31_R, 2, lam=1e-8)
    # min-norm solution: the truth [[0,1],[0,2]] shifted by block constants (+.25, −.25)
    assert phi == pytest.approx(np.array([[0.25, 1.25], [-0.25, 1.75]]), abs=1e-6)
    fitted = phi[0, E31_Z[:, 0]] + phi[1, E31_Z[:, 1]]
    assert fitted == pytest.approx(E31_R, abs=1e-6)
    adv = cosac_advantage(phi, E31_POLICY, E31_Z, exact=True)
    # exact SeqAU, agent 1: ±1 (φ_1 difference 1, halved, plus the indirect shift of agent 2's
    # expected φ_2: E[φ_2|a1=0] = 0.4, E[φ_2|a1=1] = 1.4, mean 0.9 -> ∓0.5); agent 2: φ_2(a2) − E[φ_2|a1]
    expected = np.array([[-1, -0.4], [-1, 1.6], [1, -1.4], [1, 0.6]])
    assert adv == pytest.approx(expected, abs=1e-6)


def test_e31_lambda_001_direct_equals_indirect():
    phi = cosac_ridge(E31_Z, E31_R, 2, lam=1e-2)
    assert phi == pytest.approx(np.array([[0.250617, 1.245642], [-0.246895, 1.743155]]), abs=1e-6)
    adv = cosac_advantage(phi, E31_POLICY, E31_Z, exact=True)
    expected = np.array([[-0.995025, -0.398010], [-0.995025, 1.592040],
                         [0.995025, -1.393035], [0.995025, 0.597015]])
    assert adv == pytest.approx(expected, abs=1e-6)
    D, I = cosac_direct_indirect(phi, E31_POLICY, E31_Z)
    # D_1 = (φ̂_1(0) − φ̂_1(1))/2 = (0.250617 − 1.245642)/2 = −0.497512 for a1 = 0
    assert D[:, 0] == pytest.approx([-0.497512, -0.497512, 0.497512, 0.497512], abs=1e-6)
    assert I[:, 0] == pytest.approx([-0.497512, -0.497512, 0.497512, 0.497512], abs=1e-6)
    assert I[:, 1] == pytest.approx(0.0, abs=1e-12)  # the last agent has no downstream


def test_e31_lambda_one_shrinks():
    phi = cosac_ridge(E31_Z, E31_R, 2, lam=1.0)
    adv = cosac_advantage(phi, E31_POLICY, E31_Z, exact=True)
    expected = np.array([[-0.666667, -0.266667], [-0.666667, 1.066667],
                         [0.666667, -0.933333], [0.666667, 0.4]])
    assert adv == pytest.approx(expected, abs=1e-6)


def test_e31_intercept_same_advantages():
    phi, b = cosac_ridge(E31_Z, E31_R, 2, lam=1e-2, intercept=True)
    assert b == pytest.approx(1.5, abs=1e-6)
    adv = cosac_advantage(phi, E31_POLICY, E31_Z, exact=True)
    assert adv[:, 0] == pytest.approx([-0.995025, -0.995025, 0.995025, 0.995025], abs=1e-6)


def test_e31_monte_carlo_matches_spec_run():
    phi = cosac_ridge(E31_Z, E31_R, 2, lam=1e-2)
    adv = cosac_advantage(phi, E31_POLICY, E31_Z[3:4], L=20000, rng=np.random.default_rng(123))
    # spec: ≈ 0.998 for sample (1,1), agent 1 (exact 0.995025); per-continuation std ≈ 0.7, so the
    # s.e. with L = 20000 on both sides is ≈ 0.007.
    assert adv[0, 0] == pytest.approx(0.998, abs=2e-3)
    assert adv[0, 0] == pytest.approx(0.995025, abs=0.02)


# ---- helpers for the invariants --------------------------------------------------------------

def random_policy(K: int, A: int, seed: int, coupling: float = 1.0):
    """A policy that depends on the whole prefix through a random table keyed by the prefix."""
    table: dict[tuple[int, ...], np.ndarray] = {}
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(K, A))

    def probs(k: int, prefix: tuple[int, ...]) -> np.ndarray:
        if prefix not in table:
            table[prefix] = rng.normal(size=A)
        logits = base[k] + coupling * table[prefix]
        e = np.exp(logits - logits.max())
        return e / e.sum()

    return probs


def joint_expectation(phi: np.ndarray, probs) -> float:
    """E[f̂] by enumerating all A^K joint actions (independent of the memoised recursion)."""
    K, A = phi.shape
    total = 0.0
    for a in itertools.product(range(A), repeat=K):
        p = np.prod([probs(k, a[:k])[a[k]] for k in range(K)])
        total += p * sum(phi[k, a[k]] for k in range(K))
    return total


@settings(max_examples=30, deadline=None)
@given(K=st.integers(1, 4), A=st.integers(1, 3), seed=st.integers(0, 10_000))
def test_telescoping_with_exact_expectations(K, A, seed):
    rng = np.random.default_rng(seed)
    phi = rng.normal(size=(K, A))
    Z = rng.integers(0, A, size=(5, K))
    probs = random_policy(K, A, seed)
    adv = cosac_advantage(phi, per_prefix(probs), Z, exact=True)
    f_hat = phi[np.arange(K)[None, :], Z].sum(axis=1)
    assert adv.sum(axis=1) == pytest.approx(f_hat - joint_expectation(phi, probs), abs=1e-10)


@settings(max_examples=30, deadline=None)
@given(K=st.integers(1, 4), A=st.integers(1, 3), seed=st.integers(0, 10_000),
       block=st.integers(0, 3), c=st.floats(-50, 50))
def test_block_constant_invariance(K, A, seed, block, c):
    """T3.3: φ̂_k + c changes no advantage (exact and Monte Carlo with the same random stream)."""
    rng = np.random.default_rng(seed)
    phi = rng.normal(size=(K, A))
    Z = rng.integers(0, A, size=(4, K))
    shifted = phi.copy()
    shifted[block % K] += c
    policy = per_prefix(random_policy(K, A, seed))
    assert cosac_advantage(shifted, policy, Z, exact=True) == pytest.approx(
        cosac_advantage(phi, policy, Z, exact=True), abs=1e-9)
    for baseline in ("sampled", "exact_alternatives"):
        mc = cosac_advantage(phi, policy, Z, L=3, rng=np.random.default_rng(1), baseline=baseline)
        mc_shifted = cosac_advantage(shifted, policy, Z, L=3, rng=np.random.default_rng(1), baseline=baseline)
        assert mc_shifted == pytest.approx(mc, abs=1e-9)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), K=st.integers(2, 4))
def test_rho_zero_has_no_indirect_term(seed, K):
    """T3.4: independent policies (ρ = 0) ⇒ I_k ≡ 0 under exact expectations; with ρ = 1 it is not."""
    bandit = SeqBandit.generate(K, A=3, rho=0.0, seed=seed)
    rng = np.random.default_rng(seed)
    phi = rng.normal(size=(K, 3))
    Z = rng.integers(0, 3, size=(4, K))
    _, I = cosac_direct_indirect(phi, bandit.policy, Z)
    assert np.abs(I).max() < 1e-12
    _, I_coupled = cosac_direct_indirect(phi, SeqBandit.generate(K, A=3, rho=1.0, seed=seed).policy, Z)
    assert np.abs(I_coupled[:, :-1]).max() > 1e-6


@pytest.mark.parametrize("baseline", ["sampled", "exact_alternatives"])
def test_monte_carlo_is_unbiased(baseline):
    """T3.5: the mean of independent MC estimates is within 3 standard errors of the exact Â."""
    bandit = SeqBandit.generate(3, A=3, rho=1.5, seed=4)
    rng = np.random.default_rng(0)
    phi = rng.normal(size=(3, 3))
    Z = np.array([[0, 1, 2], [2, 2, 0]])
    exact = cosac_advantage(phi, bandit.policy, Z, exact=True)
    reps = np.stack([cosac_advantage(phi, bandit.policy, Z, L=2, rng=np.random.default_rng(s),
                                     baseline=baseline) for s in range(600)])  # [600, 2, 3]
    se = reps.std(axis=0, ddof=1) / np.sqrt(len(reps))
    assert np.all(np.abs(reps.mean(axis=0) - exact) <= 3 * se + 1e-12)
    assert se.max() > 0  # the estimator really is random here


# ---- bad inputs ------------------------------------------------------------------------------

def test_ridge_rejects_bad_inputs():
    with pytest.raises(ValueError, match="non-finite"):
        cosac_ridge(E31_Z, np.array([0.0, np.nan, 1.0, 3.0]), 2)
    with pytest.raises(ValueError, match="shape"):
        cosac_ridge(E31_Z, E31_R[:3], 2)
    with pytest.raises(ValueError, match="N, K >= 1"):
        cosac_ridge(np.zeros((0, 2), dtype=int), np.zeros(0), 2)
    with pytest.raises(ValueError, match="outside 0..1"):
        cosac_ridge(E31_Z + 1, E31_R, 2)
    with pytest.raises(ValueError, match="integer"):
        cosac_ridge(E31_Z.astype(float), E31_R, 2)
    with pytest.raises(ValueError, match="lam"):
        cosac_ridge(E31_Z, E31_R, 2, lam=0.0)


def test_advantage_rejects_bad_inputs():
    phi = cosac_ridge(E31_Z, E31_R, 2)
    with pytest.raises(ValueError, match="agents per row"):
        cosac_advantage(phi, E31_POLICY, E31_Z[:, :1], exact=True)
    with pytest.raises(ValueError, match="rng"):
        cosac_advantage(phi, E31_POLICY, E31_Z)
    with pytest.raises(ValueError, match="L"):
        cosac_advantage(phi, E31_POLICY, E31_Z, L=0, rng=np.random.default_rng(0))
    not_probs = per_prefix(lambda k, p: np.array([0.5, 0.6]))
    with pytest.raises(ValueError, match="probability"):
        cosac_advantage(phi, not_probs, E31_Z, exact=True)
    with pytest.raises(ValueError, match="max_nodes"):
        cosac_advantage(np.zeros((6, 4)), per_prefix(lambda k, p: np.full(4, 0.25)),
                        np.zeros((1, 6), dtype=int), exact=True, max_nodes=100)


# ---- the registered method on episodes ----------------------------------------------------------

def sequential_episode(answers: list[str | None], reward: float, spoke: list[bool] | None = None) -> Episode:
    agents = tuple(f"solver_{k}" for k in range(len(answers)))
    spoke = spoke or [True] * len(answers)
    messages = tuple(Message(agent=a, role="solver", round=k, stage="solve",
                             text="" if not s else f"answer {ans}", answer=ans, spoke=s)
                     for k, (a, ans, s) in enumerate(zip(agents, answers, spoke, strict=True)))
    return Episode(problem_id="p0", group_id="g0", agents=agents, messages=messages,
                   final_answer=answers[-1], reward=reward)


def test_registered_cosac_on_e31_group():
    # The E3.1 batch as answers: agent 0 says "a"/"b", agent 1 "c"/"d"; rewards additive.
    eps = tuple(sequential_episode(ans, r) for ans, r in
                [(["a", "c"], 0.0), (["a", "d"], 2.0), (["b", "c"], 1.0), (["b", "d"], 3.0)])
    out = cosac_credit(CreditBatch(episodes=eps), CosacOptions(lam=1e-8))
    # prefix policy = the group's own frequencies: agent 0's advantage is mean R of the episodes
    # sharing its answer minus the group mean ((0+2)/2 − 1.5 = −0.5); agent 1's is its R minus the
    # mean R of the episodes sharing agent 0's answer (0 − 1 = −1).
    expected = [[-0.5, -1.0], [-0.5, 1.0], [0.5, -1.0], [0.5, 1.0]]
    for adv, exp in zip(out, expected, strict=True):
        assert adv == pytest.approx(exp, abs=1e-6)
    via_registry = assign("cosac", CreditBatch(episodes=eps), {"lam": 1e-8})
    assert via_registry[3] == pytest.approx([0.5, 1.0], abs=1e-6)
    markov = cosac_credit(CreditBatch(episodes=eps), CosacOptions(lam=1e-8, continuation="markov"))
    for adv, exp in zip(markov, expected, strict=True):  # K = 2: previous label = whole prefix
        assert adv == pytest.approx(exp, abs=1e-6)


def test_registered_cosac_edge_cases_and_telescoping():
    single = cosac_credit(CreditBatch(episodes=(sequential_episode(["1", "2", None], 1.0),)), CosacOptions())
    assert single[0] == pytest.approx([0, 0, 0], abs=1e-12)
    equal = (sequential_episode(["1", "2", "3"], 1.0), sequential_episode(["4", None, "3"], 1.0))
    assert all(np.abs(a).max() < 1e-12 for a in cosac_credit(CreditBatch(episodes=equal), CosacOptions()))

    answers = [["1", "2", "3"], ["1", "5", "3"], ["4", "2", None], ["1", "2", "3"], ["4", "4", "4"]]
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0]
    eps = tuple(sequential_episode(a, r) for a, r in zip(answers, rewards, strict=True))
    out = cosac_credit(CreditBatch(episodes=eps), CosacOptions(intercept=False))
    # telescoping under the prefix policy: Σ_t Â = f̂(episode) − mean over the group of f̂
    labels = {"1": 0, "2": 1, "3": 2, "5": 3, "4": 4, "none": 5}
    Z = np.array([[labels["none" if x is None else x] for x in a] for a in answers])
    phi = cosac_ridge(Z, np.array(rewards), 6)
    f_hat = phi[np.arange(3)[None, :], Z].sum(axis=1)
    assert [a.sum() for a in out] == pytest.approx(f_hat - f_hat.mean(), abs=1e-10)
    mc = cosac_credit(CreditBatch(episodes=eps), CosacOptions(intercept=False, exact=False, L=4, seed=3))
    assert [a.shape for a in mc] == [(3,)] * 5


def test_registered_cosac_skipped_message_gets_zero_and_order_is_checked():
    eps = (sequential_episode(["1", None], 1.0, spoke=[True, False]), sequential_episode(["2", "2"], 0.0))
    out = cosac_credit(CreditBatch(episodes=eps), CosacOptions())
    assert out[0][1] == 0.0 and out[0][0] != 0.0  # exact: a skipped message's credit is the constant 0.0
    swapped = Episode(problem_id="p0", group_id="g0", agents=("solver_0", "solver_1"),
                      messages=tuple(reversed(eps[1].messages)), final_answer="2", reward=0.0)
    with pytest.raises(ValueError, match="author order"):
        cosac_credit(CreditBatch(episodes=(eps[0], swapped)), CosacOptions())


def test_empirical_policy_refuses_unsupported_prefix():
    policy = EmpiricalPolicy(np.array([[0, 1], [1, 1]]), 2, "prefix")
    assert policy(1, np.array([[0]]))[0] == pytest.approx([0.0, 1.0])
    with pytest.raises(ValueError, match="no episode supporting"):
        EmpiricalPolicy(np.array([[0, 1], [0, 1]]), 2, "markov")(1, np.array([[1]]))


def review_episode(first: str, verdict: str | None, final: str, reward: float) -> Episode:
    """A 3-round proposer_reviewer episode: proposal, review, proposal (reviews carry no answer)."""
    messages = (Message(agent="proposer_0", role="proposer", round=0, stage="propose",
                        text=f"The answer is {first}.", answer=first),
                Message(agent="reviewer_0", role="reviewer", round=1, stage="review",
                        text=f"Verdict: {verdict or 'maybe'}", answer=None),
                Message(agent="proposer_0", role="proposer", round=2, stage="propose",
                        text=f"The answer is {final}.", answer=final))
    verdicts = ({"round": 1, "agent": "reviewer_0", "verdict": verdict, "spoke": True},)
    return Episode(problem_id="p0", group_id="g0", agents=("proposer_0", "reviewer_0"), messages=messages,
                   final_answer=final, reward=reward, metadata={"verdicts": verdicts})


def test_registered_cosac_credits_the_review_that_decided_the_outcome():
    # The controlled arena's team (3 + 4 = 7): a compliant proposer switches after WRONG.
    eps = (review_episode("8", "WRONG", "7", 1.0),   # wrong answer caught
           review_episode("8", "RIGHT", "8", 0.0),   # wrong answer missed
           review_episode("7", "RIGHT", "7", 1.0),   # right answer confirmed
           review_episode("7", "WRONG", "8", 0.0))   # right answer wrongly rejected
    out = cosac_credit(CreditBatch(episodes=eps), CosacOptions(lam=1e-8))
    # R = 1[final = 7] is additive (block of position 2 alone), so f̂ = R and, under the group's
    # prefix policy, Â_k = mean R given a_≤k − mean R given a_<k. Group mean 0.5.
    # proposal: each first answer has R {1, 0}: 0.5 − 0.5 = 0;
    # review: the prefix (first, verdict) is unique: R − 0.5 = ±0.5;
    # final proposal: fixed by (first, verdict): R − R = 0.
    expected = [[0.0, 0.5, 0.0], [0.0, -0.5, 0.0], [0.0, 0.5, 0.0], [0.0, -0.5, 0.0]]
    for adv, exp in zip(out, expected, strict=True):
        assert adv == pytest.approx(exp, abs=1e-6)
    # labelled by its (absent) answer, every review would be the same action: the credit would go
    # to the final proposal instead (R − 0.5) and the reviewer would get none
    blind = tuple(dataclasses.replace(ep, metadata={}) for ep in eps)
    for adv, ep in zip(cosac_credit(CreditBatch(episodes=blind), CosacOptions(lam=1e-8)), eps, strict=True):
        assert adv == pytest.approx([0.0, 0.0, ep.reward - 0.5], abs=1e-6)


def test_cosac_labels_reviews_by_verdict_and_accepts_proposer_reviewer():
    eps = (review_episode("8", None, "8", 0.0), review_episode("8", "WRONG", "7", 1.0))
    Z, names = episode_labels(CreditBatch(episodes=eps))
    assert names == ["8", "verdict:none", "verdict:WRONG", "7"]
    assert Z.tolist() == [[0, 1, 0], [0, 2, 3]]
    check_credit("cosac", {}, "proposer_reviewer", None)  # accepted
    with pytest.raises(ConfigError, match="protocol 'debate' does not declare it"):  # simultaneous rounds: no chain
        check_credit("cosac", {}, "debate", None)
