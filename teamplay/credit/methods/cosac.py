"""COSAC: counterfactual credit for K agents acting in a fixed order (docs/credit/specification.md#cosac).

Target (SeqAU): agent k's advantage is ``Q_k(a_≤k) − Q_{k−1}(a_<k)`` where ``Q_k`` is the expected
team reward given the prefix, downstream agents following their behaviour policies. COSAC estimates
it without extra reward calls:

1. ``cosac_ridge``: fit an additive surrogate ``f̂(a) = Σ_k φ̂_k(a_k)`` to the batch's rewards by ridge
   regression on concatenated one-hot features.
2. ``cosac_advantage``: under the surrogate, upstream terms cancel and

       Â_k = φ̂_k(a_k) + W(a_≤k) − W(a_<k),   W(p) = E[Σ_{j ≥ |p|} φ̂_j(a_j) | p]

   (direct term ``D_k = φ̂_k(a_k) − E_{π_k} φ̂_k``, indirect term ``I_k`` = how a_k shifts what the
   downstream agents are expected to earn). Expectations come from the policies only ("fictitious
   continuations"): exactly by enumerating continuations, or by Monte Carlo with ``L`` of them.

Policies are given as one batched callable, ``policy_fn(k, prefixes) -> probs``: ``prefixes`` is
an int array [B, k] (actions of agents 0..k-1, one row per query) and ``probs`` a float array
[B, A] of agent k's action probabilities. Use :func:`per_prefix` to wrap a one-prefix-at-a-time
function.

The registered method ``cosac`` applies this to episodes with a fixed turn order: the protocols
declaring the trait ``chain`` (sequential, proposer_reviewer, review; proposals labelled by their
answers, reviews by their verdicts; see :func:`cosac_credit`).

Invariants (tested): with exact expectations ``Σ_k Â_k = f̂(a) − E[f̂]`` (telescoping); adding a
constant to every entry of one block ``φ̂_k`` changes no advantage; when no policy depends on its
predecessors, the indirect terms are 0; the Monte-Carlo estimator is unbiased for the exact one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, overload

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit

PolicyFn = Callable[[int, np.ndarray], np.ndarray]

# Probabilities are checked to sum to 1 within this tolerance (float rounding of a softmax or of
# count ratios is ~1e-15; anything larger is a bug in the caller's policy).
_PROB_TOL = 1e-6


# ---- inputs -------------------------------------------------------------------------------------

def _check_actions(Z: np.ndarray, A: int, name: str = "Z") -> np.ndarray:
    Z = np.asarray(Z)
    if Z.ndim != 2 or Z.shape[0] == 0 or Z.shape[1] == 0:
        raise ValueError(f"{name} must be an int array [N, K] with N, K >= 1, got shape {Z.shape}")
    if not np.issubdtype(Z.dtype, np.integer):
        raise ValueError(f"{name} must hold integer action labels, got dtype {Z.dtype}")
    if Z.min() < 0 or Z.max() >= A:
        raise ValueError(f"{name} holds labels outside 0..{A - 1} (min {Z.min()}, max {Z.max()})")
    return Z.astype(np.int64)


def ridge_features(Z: np.ndarray, A: int) -> np.ndarray:
    """Concatenated one-hot features ``Ψ`` [N, K·A]: column ``k·A + Z[n, k]`` of row n is 1."""
    Z = _check_actions(Z, A)
    N, K = Z.shape
    psi = np.zeros((N, K * A))
    psi[np.arange(N)[:, None], np.arange(K)[None, :] * A + Z] = 1.0
    return psi


@overload
def cosac_ridge(Z: np.ndarray, R: np.ndarray, A: int, lam: float = ...,
                intercept: Literal[False] = ...) -> np.ndarray: ...
@overload
def cosac_ridge(Z: np.ndarray, R: np.ndarray, A: int, lam: float = ...,
                intercept: Literal[True] = ...) -> tuple[np.ndarray, float]: ...


def cosac_ridge(Z: np.ndarray, R: np.ndarray, A: int, lam: float = 1e-2,
                intercept: bool = False) -> np.ndarray | tuple[np.ndarray, float]:
    """Ridge fit of the additive surrogate: ``φ̂ = (λI + ΨᵀΨ)⁻¹ Ψᵀ R`` reshaped to [K, A].

    Args:
        Z: int [N, K], agent k's action label in rollout n, each in ``0..A-1``.
        R: float [N], observed team rewards (raw: the spec's formula does not centre them).
        A: number of labels per agent.
        lam: ridge strength, must be > 0: every row has exactly one 1 per block, so ``ΨᵀΨ`` is
            singular for K > 1 and ``λ`` selects the minimum-norm solution (blocks are identified
            only up to per-block constants, which no advantage depends on). Default 1e-2 is
            [INFERRED] (the paper's value is unknown).
        intercept: add an unpenalised bias column; then returns ``(phi, b)``.

    Returns:
        ``phi`` float [K, A] (labels never seen at position k get 0), or ``(phi, b)``.

    Raises:
        ValueError: empty or mismatched inputs, labels out of range, non-finite rewards, ``lam <= 0``.
    """
    Z = _check_actions(Z, A)
    R = np.asarray(R, dtype=np.float64)
    if R.shape != (Z.shape[0],):
        raise ValueError(f"R must have shape [N]=({Z.shape[0]},) to match Z, got {R.shape}")
    if not np.all(np.isfinite(R)):
        raise ValueError(f"R holds non-finite rewards at rows {np.flatnonzero(~np.isfinite(R)).tolist()}")
    if not (np.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be a finite number > 0, got {lam!r}")
    psi = ridge_features(Z, A)  # [N, K*A]
    N, KA = psi.shape
    if intercept:
        X = np.concatenate([psi, np.ones((N, 1))], axis=1)  # [N, K*A+1]
        penalty = np.full(KA + 1, lam)
        penalty[-1] = 0.0  # the bias is not shrunk
    else:
        X, penalty = psi, np.full(KA, lam)
    w = np.linalg.solve(X.T @ X + np.diag(penalty), X.T @ R)
    phi = w[:KA].reshape(Z.shape[1], A)
    return (phi, float(w[-1])) if intercept else phi


# ---- policies -----------------------------------------------------------------------------------

def per_prefix(fn: Callable[[int, tuple[int, ...]], np.ndarray]) -> PolicyFn:
    """Turn ``fn(k, prefix_tuple) -> probs[A]`` into the batched ``policy_fn`` contract."""

    def batched(k: int, prefixes: np.ndarray) -> np.ndarray:
        return np.stack([np.asarray(fn(k, tuple(int(a) for a in row)), dtype=np.float64)
                         for row in prefixes])

    return batched


def _probs(policy_fn: PolicyFn, k: int, prefixes: np.ndarray, A: int) -> np.ndarray:
    """Call the policy and check its output: float [B, A], non-negative, rows sum to 1."""
    p = np.asarray(policy_fn(k, prefixes), dtype=np.float64)
    if p.shape != (prefixes.shape[0], A):
        raise ValueError(f"policy_fn(k={k}) returned shape {p.shape}, expected ({prefixes.shape[0]}, {A})")
    if np.any(p < 0) or not np.allclose(p.sum(axis=1), 1.0, atol=_PROB_TOL, rtol=0):
        raise ValueError(f"policy_fn(k={k}) returned rows that are not probability vectors")
    return p


def _sample(p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    u = rng.random(p.shape[0])  # [B]
    return np.minimum((np.cumsum(p, axis=1) <= u[:, None]).sum(axis=1), p.shape[1] - 1)


# ---- exact expectations -------------------------------------------------------------------------

class _ContinuationValues:
    """``W(p) = E[Σ_{j ≥ |p|} φ̂_j(a_j) | p]`` by enumerating continuations, memoised by prefix.

    Zero-probability actions are pruned (they contribute nothing), so a policy with small support
    (e.g. the empirical policy of a group) enumerates only the branches it can reach. ``max_nodes``
    bounds the number of prefixes expanded.
    """

    def __init__(self, phi: np.ndarray, policy_fn: PolicyFn, max_nodes: int) -> None:
        self.phi, self.policy_fn, self.max_nodes = phi, policy_fn, max_nodes
        self.K, self.A = phi.shape
        self.memo: dict[tuple[int, ...], float] = {}

    def probs(self, prefix: tuple[int, ...]) -> np.ndarray:
        row = np.array(prefix, dtype=np.int64).reshape(1, len(prefix))
        return _probs(self.policy_fn, len(prefix), row, self.A)[0]

    def __call__(self, prefix: tuple[int, ...]) -> float:
        if len(prefix) == self.K:
            return 0.0
        if prefix in self.memo:
            return self.memo[prefix]
        if len(self.memo) >= self.max_nodes:
            raise ValueError(f"exact COSAC expectations need more than max_nodes={self.max_nodes} "
                             f"prefix expansions (K={self.K}, A={self.A}); use exact=False (Monte Carlo) "
                             f"or raise max_nodes")
        k = len(prefix)
        p = self.probs(prefix)
        value = sum(p[a] * (self.phi[k, a] + self(prefix + (a,))) for a in np.flatnonzero(p > 0))
        self.memo[prefix] = float(value)
        return float(value)


def cosac_direct_indirect(phi: np.ndarray, policy_fn: PolicyFn, Z: np.ndarray,
                          max_nodes: int = 200_000) -> tuple[np.ndarray, np.ndarray]:
    """Exact direct and indirect terms ``D, I`` [N, K] (``Â = D + I``).

    ``D[n, k] = φ̂_k(a_k) − Σ_a π_k(a|a_<k) φ̂_k(a)``;
    ``I[n, k] = W(a_≤k) − Σ_a π_k(a|a_<k) W(a_<k, a)``.
    Enumeration cost grows like ``A^(K−k)`` for a full-support policy; ``max_nodes`` caps it.
    """
    phi = np.asarray(phi, dtype=np.float64)
    if phi.ndim != 2:
        raise ValueError(f"phi must be [K, A], got shape {phi.shape}")
    K, A = phi.shape
    Z = _check_actions(Z, A)
    if Z.shape[1] != K:
        raise ValueError(f"Z has {Z.shape[1]} agents per row but phi has K={K} blocks")
    W = _ContinuationValues(phi, policy_fn, max_nodes)
    D = np.zeros(Z.shape)
    I = np.zeros(Z.shape)
    for n, row in enumerate(Z):
        for k in range(K):
            before = tuple(int(a) for a in row[:k])
            p = W.probs(before)
            support = np.flatnonzero(p > 0)
            D[n, k] = phi[k, row[k]] - p @ phi[k]
            I[n, k] = W(before + (int(row[k]),)) - sum(p[a] * W(before + (int(a),)) for a in support)
    return D, I


# ---- Monte Carlo --------------------------------------------------------------------------------

def _rollout_value(phi: np.ndarray, policy_fn: PolicyFn, prefixes: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
    """Sample one continuation of each row of ``prefixes`` [B, m] and return Σ_{j≥m} φ̂_j(ã_j) [B]."""
    K, A = phi.shape
    rows = prefixes
    total = np.zeros(rows.shape[0])
    for j in range(rows.shape[1], K):
        a = _sample(_probs(policy_fn, j, rows, A), rng)  # [B]
        total += phi[j, a]
        rows = np.concatenate([rows, a[:, None]], axis=1)
    return total


def cosac_advantage(phi: np.ndarray, policy_fn: PolicyFn, Z: np.ndarray, L: int = 8,
                    rng: np.random.Generator | None = None, exact: bool = False,
                    baseline: Literal["sampled", "exact_alternatives"] = "sampled",
                    max_nodes: int = 200_000) -> np.ndarray:
    """COSAC advantages ``Â`` [N, K] for the rollouts ``Z`` under the surrogate ``phi`` [K, A].

    Args:
        phi: additive surrogate from :func:`cosac_ridge`, [K, A].
        policy_fn: batched policy (module docstring); for agents > k it must be the behaviour
            policy ``μ`` (they are not yet updated when agent k is), for agent k its policy at the
            time of the update.
        Z: int [N, K], the realised rollouts.
        L: fictitious continuations per (rollout, agent) [and per alternative action with
            ``baseline="exact_alternatives"``]; ignored when ``exact``.
        rng: random generator for the continuations (required unless ``exact``).
        exact: compute the expectations by enumeration instead of sampling (cost grows like
            ``A^(K−k)``; bounded by ``max_nodes``, a ValueError says when it is exceeded).
        baseline: Monte-Carlo only. ``"sampled"`` is the spec's estimator
            ``(1/L) Σ_ℓ [f̂(a_≤k, ã_>k) − f̂(a_<k, ã_k, ã'_>k)]``; ``"exact_alternatives"`` is the
            lower-variance variant that sums the baseline over all A alternatives ``a'`` weighted by
            ``π_k(a'|a_<k)`` with L continuations each (A times the cost on that side).

    Returns:
        float64 [N, K]. Upstream terms of ``f̂`` cancel, so only ``φ̂_{≥k}`` enters column k.
        With ``exact`` each row telescopes: ``Σ_k Â_k = f̂(a) − E[f̂]``.
    """
    phi = np.asarray(phi, dtype=np.float64)
    if phi.ndim != 2 or not np.all(np.isfinite(phi)):
        raise ValueError(f"phi must be a finite array [K, A], got shape {phi.shape}")
    K, A = phi.shape
    Z = _check_actions(Z, A)
    if Z.shape[1] != K:
        raise ValueError(f"Z has {Z.shape[1]} agents per row but phi has K={K} blocks")
    if exact:
        D, I = cosac_direct_indirect(phi, policy_fn, Z, max_nodes=max_nodes)
        return D + I
    if L < 1:
        raise ValueError(f"L (continuations) must be >= 1, got {L}")
    if rng is None:
        raise ValueError("cosac_advantage: Monte-Carlo mode needs rng (a numpy Generator)")
    if baseline not in ("sampled", "exact_alternatives"):
        raise ValueError(f"baseline must be 'sampled' or 'exact_alternatives', got {baseline!r}")
    N = Z.shape[0]
    adv = np.zeros((N, K))
    for k in range(K):
        # "Q" side: the realised a_≤k followed by L continuations from μ_{>k}.
        q_rows = np.repeat(Z[:, : k + 1], L, axis=0)  # [N*L, k+1]
        q = phi[k, Z[:, k]] + _rollout_value(phi, policy_fn, q_rows, rng).reshape(N, L).mean(axis=1)
        if baseline == "sampled":
            # "V" side: a fresh ã_k ~ π_k(·|a_<k) and its continuation, L times.
            v_rows = np.repeat(Z[:, :k], L, axis=0)  # [N*L, k]
            v = _rollout_value(phi, policy_fn, v_rows, rng).reshape(N, L).mean(axis=1)
        else:
            p = _probs(policy_fn, k, Z[:, :k], A)  # [N, A]
            alt = np.repeat(np.arange(A), L)  # [A*L]
            v_rows = np.concatenate([np.repeat(Z[:, :k], A * L, axis=0),
                                     np.tile(alt, N)[:, None]], axis=1)  # [N*A*L, k+1]
            cont = _rollout_value(phi, policy_fn, v_rows, rng).reshape(N, A, L).mean(axis=2)  # [N, A]
            v = (p * (phi[k][None, :] + cont)).sum(axis=1)
        adv[:, k] = q - v
    return adv


# ---- the registered method on episodes ----------------------------------------------------------

class EmpiricalPolicy:
    """The group's own label frequencies as a batched ``policy_fn`` (the [INFERRED] stand-in for LLM
    label probabilities, which the batch does not carry).

    ``mode="prefix"``: ``π̂_k(a | p) = #{episodes starting with p then a} / #{episodes starting
    with p}`` — the empirical conditional law of the group; chaining it reproduces the uniform law
    over the G episodes, so exact expectations cost O(G·K) nodes.
    ``mode="markov"``: ``π̂_k(a | a_{k−1})`` from the counts of consecutive label pairs at positions
    (k−1, k) (and the position-0 marginal for k=0); pools episodes that share only the previous label.

    A prefix that no episode supports (impossible for continuations drawn from this same policy)
    raises ValueError rather than inventing probabilities.
    """

    def __init__(self, Z: np.ndarray, A: int, mode: Literal["prefix", "markov"]) -> None:
        self.Z = _check_actions(Z, A)
        self.A, self.mode = A, mode
        self.onehot = np.eye(A)[self.Z]  # [G, K, A]

    def __call__(self, k: int, prefixes: np.ndarray) -> np.ndarray:
        prefixes = np.asarray(prefixes, dtype=np.int64)  # [B, k]
        if self.mode == "prefix" or k == 0:
            match = np.all(prefixes[:, None, :] == self.Z[None, :, :k], axis=2)  # [B, G]
        else:
            match = prefixes[:, None, k - 1] == self.Z[None, :, k - 1]  # [B, G]
        counts = match.astype(np.float64) @ self.onehot[:, k, :]  # [B, A]
        totals = counts.sum(axis=1, keepdims=True)
        if np.any(totals == 0):
            bad = prefixes[int(np.flatnonzero(totals[:, 0] == 0)[0])].tolist()
            raise ValueError(f"empirical policy ({self.mode}) has no episode supporting prefix {bad} "
                             f"at position {k}")
        return counts / totals


class CosacOptions(MethodOptions):
    """Options of the registered ``cosac`` method."""

    lam: float = Field(1e-2, gt=0, description="Ridge strength λ ([INFERRED] default 1e-2).")
    intercept: bool = Field(
        True, description="Fit an unpenalised bias. Default True here (unlike cosac_ridge) so that a "
                          "group with all-equal rewards gives exactly φ̂ = 0 and zero advantages.")
    continuation: Literal["prefix", "markov"] = Field(
        "prefix", description="[INFERRED] Continuation policy: the group's empirical conditional label "
                              "frequencies given the whole prefix, or given the previous agent's label.")
    exact: bool = Field(True, description="Exact expectations by enumeration (else Monte Carlo).")
    L: int = Field(8, ge=1, description="Monte-Carlo continuations per (episode, agent).")
    baseline: Literal["sampled", "exact_alternatives"] = Field(
        "sampled", description="Monte-Carlo baseline: sampled ã_k, or exact over the alternatives.")
    seed: int = Field(0, description="Seed of the Monte-Carlo continuations.")
    max_nodes: int = Field(200_000, ge=1, description="Cap on prefixes expanded in exact mode.")


def episode_labels(batch: CreditBatch) -> tuple[np.ndarray, list[str]]:
    """Discrete labels of the group: ``Z`` int [G, T] and the label names (index -> label string).

    A message's label is the action it took: for a turn that judged the pending answer (a record
    in ``Episode.metadata["verdicts"]`` with its round and agent, written by proposer_reviewer) its
    verdict, ``"verdict:RIGHT"``, ``"verdict:WRONG"`` or ``"verdict:none"``; for any other turn
    its extracted ``answer`` (``None`` becomes ``"none"``). A review carries no answer, so labelling
    it by its answer would make every review the same action and give it no credit. Labels are
    indexed in order of first appearance (episode by episode, message by message). All episodes
    must have the same sequence of authors: COSAC is defined for actions taken in a fixed order
    (each turn of a fixed schedule is one position k, so an agent acting in several rounds is
    several positions).
    """
    episodes = batch.episodes
    authors = [m.agent for m in episodes[0].messages]
    if not authors:
        raise ValueError("cosac: episode 0 has no messages")
    names: dict[str, int] = {}
    Z = np.zeros((len(episodes), len(authors)), dtype=np.int64)
    for g, ep in enumerate(episodes):
        seq = [m.agent for m in ep.messages]
        if seq != authors:
            raise ValueError(f"cosac: episode {g} has author order {seq} but episode 0 has {authors}; "
                             f"COSAC needs one fixed turn order (a protocol with the trait chain)")
        verdicts = {(v.get("round"), v.get("agent")): v.get("verdict")
                    for v in ep.metadata.get("verdicts", ()) or ()}
        for k, msg in enumerate(ep.messages):
            if (msg.round, msg.agent) in verdicts:
                label = f"verdict:{verdicts[(msg.round, msg.agent)] or 'none'}"
            else:
                label = "none" if msg.answer is None else msg.answer
            Z[g, k] = names.setdefault(label, len(names))
    return Z, list(names)


COSAC_CARD = CardText(
    "COSAC's estimate of the SeqAU advantage Q_k(a_<=k) - Q_{k-1}(a_<k) of the action at each "
    "position k (a message's extracted answer, or a review's verdict), under a ridge additive "
    "surrogate f(a) = sum_k phi_k(a_k) fitted to the group's team rewards (a decomposition over "
    "positions); expectations use the group's empirical label frequencies.",
    ("one fixed turn order: every episode of the group has the same author sequence",
     "a message acts only through its discrete label (answer or verdict); the rest of its text "
     "is invisible",
     "the reward is close to additive over positions (the bias grows with the non-additive "
     "residual)",
     "the group's empirical continuation frequencies stand for the downstream agents' behaviour "
     "policies, not the LLM's probabilities: the indirect term says how an answer shifted its "
     "successors' answers in this group"),
    ("tests/credit/test_cosac.py::test_e31_lambda_to_zero_recovers_exact_seqau",
     "tests/credit/test_cosac.py::test_registered_cosac_credits_the_review_that_decided_the_outcome"),
    "no generation: one ridge fit over one-hot labels and an enumeration of continuations "
    "(max_nodes caps it)")


@register_credit("cosac", CosacOptions,
                 "COSAC: ridge additive surrogate of the team reward over answer labels + counterfactual "
                 "continuations (one fixed turn order: protocols with the trait chain)",
                 traits=("chain",), card=COSAC_CARD)
def cosac_credit(batch: CreditBatch, options: CosacOptions) -> list[np.ndarray]:
    """COSAC on a group of episodes with one fixed turn order; one advantage per message.

    Protocols: those declaring the trait ``chain`` (turns one at a time in one fixed order):
    ``sequential`` (K agents, once each), ``proposer_reviewer`` (R rounds in a fixed schedule; a
    controller's skip is still a message, so the order stays fixed) and ``review``. Other protocols
    are refused: in debate and vote the messages of a round are simultaneous, so any order among
    them is arbitrary and would change the credit; ``single`` has one action, whose COSAC credit
    is R − mean R (GRPO).

    What it really computes: message t of every episode is "the action at position t"; its label
    is the extracted answer, or the verdict for a review (see :func:`episode_labels`; labels shared
    across positions). The ridge surrogate
    is fitted to the G team rewards, and the continuation expectations use the group's empirical
    label frequencies (``options.continuation``) because the batch carries no LLM probabilities over
    labels — so the indirect term says how agent t's answer shifted the answers its successors gave
    *in this group*, not under the current policy. [INFERRED]

    Edge cases: a single episode gets zeros (every prefix is followed by itself, so ``Â = 0``); all-
    equal rewards give zeros (with the default ``intercept=True``); skipped messages
    (``spoke=False``) are labelled like any other but get 0 (the registry's convention).
    Invariant: with ``exact=True`` each episode's advantages sum to ``f̂(a) − mean over the group of
    f̂`` under the prefix policy (telescoping).
    """
    Z, names = episode_labels(batch)
    R = np.array([ep.reward for ep in batch.episodes], dtype=np.float64)
    A = len(names)
    if options.intercept:
        phi, _ = cosac_ridge(Z, R, A, lam=options.lam, intercept=True)
    else:
        phi = cosac_ridge(Z, R, A, lam=options.lam, intercept=False)
    policy = EmpiricalPolicy(Z, A, options.continuation)
    adv = cosac_advantage(phi, policy, Z, L=options.L, rng=np.random.default_rng(options.seed),
                          exact=options.exact, baseline=options.baseline, max_nodes=options.max_nodes)
    out = []
    for g, ep in enumerate(batch.episodes):
        spoke = np.array([m.spoke for m in ep.messages], dtype=bool)
        out.append(np.where(spoke, adv[g], 0.0))
    return out
