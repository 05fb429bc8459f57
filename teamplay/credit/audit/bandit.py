"""The sequential bandit: a testbed with exact SeqAU ground truth for COSAC
(docs/credit/specification.md#cosac-bandit).

``K`` agents act once each, in order; agent ``k`` picks one of ``A`` actions from a softmax policy
that depends on its predecessor's action only (first-order dependence, strength ``rho``). The team
reward is additive per agent plus pairwise interactions, plus Gaussian noise:

    f(a) = Σ_k phi[k, a_k] + lam_int · Σ_{k<l} g[k, l, a_k, a_l]        R = f(a) + sigma_r · N(0, 1)
    π_0(·) = softmax(theta[0])        π_k(·|a_{k-1}) = softmax(theta[k] + rho · B[k, a_{k-1}])

Everything except "A=4 actions, additive + pairwise reward, rho couples the policies" is
[INFERRED] in the specification and is a constructor argument here. The generator draws its parameters from
``numpy.random.default_rng(seed)`` in exactly the specification's order (phi, g, B, theta); the published
check numbers of test T3.2 depend on that order.

Exact expectations use the Markov structure: with transition matrices
``T_j[a_{j-1}, a_j] = π_j(a_j | a_{j-1})`` and products ``M[m, l] = T_{m+1} ··· T_l`` (``M[m, m] = I``),
``P(a_l | a_m) = M[m, l][a_m, a_l]`` and ``P(a_j, a_l | a_m) = M[m, j][a_m, a_j] M[j, l][a_j, a_l]``.
So ``Q_m(a_≤m) = E[f | a_≤m]`` (policies of agents > m as given) splits into the realised part plus
tables that depend only on ``(m, a_m)`` (and, for the cross terms, one upstream ``(k, a_k)``); they
are built once per instance in ``O(K^3 A^3)`` (cached) and any prefix's ``Q`` then costs ``O(K^2)``
— no ``A^K`` enumeration, so ``K=16`` is exact.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the max for stability."""
    z = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def sample_categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row of ``probs`` [B, A] by inverse CDF with one uniform per row -> int [B].

    The ``minimum`` guards against a cumulative sum that rounds to just below 1.
    """
    u = rng.random(probs.shape[0])  # [B]
    idx = (np.cumsum(probs, axis=1) <= u[:, None]).sum(axis=1)  # [B]
    return np.minimum(idx, probs.shape[1] - 1)


@dataclass(frozen=True)
class SeqBandit:
    """One sequential-bandit instance; build it with :meth:`generate`.

    Fields (shapes):
        phi: per-agent additive reward tables [K, A].
        g: pairwise interaction tables [K, K, A, A]; only entries with ``k < l`` are used.
        B: logit offsets [K, A, A]; ``B[k, a_prev]`` shifts agent k's logits (``B[0]`` unused).
        theta: policy logits [K, A].
        lam_int, rho, sigma_r: interaction weight, policy coupling, reward-noise std.
    """

    phi: np.ndarray
    g: np.ndarray
    B: np.ndarray
    theta: np.ndarray
    lam_int: float = 0.5
    rho: float = 1.0
    sigma_r: float = 0.5
    _tables: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def generate(cls, K: int, A: int = 4, lam_int: float = 0.5, rho: float = 1.0, sigma_r: float = 0.5,
                 sigma_theta: float = 1.0, seed: int = 0) -> SeqBandit:
        """Draw an instance in the specification's order: phi, g, B, theta (one ``default_rng(seed)``)."""
        if K < 1 or A < 1:
            raise ValueError(f"SeqBandit needs K >= 1 and A >= 1, got K={K}, A={A}")
        rng = np.random.default_rng(seed)
        phi = rng.normal(size=(K, A))
        g = rng.normal(size=(K, K, A, A)) / np.sqrt(max(K - 1, 1))
        B = rng.normal(size=(K, A, A))
        theta = rng.normal(size=(K, A)) * sigma_theta
        return cls(phi=phi, g=g, B=B, theta=theta, lam_int=lam_int, rho=rho, sigma_r=sigma_r)

    @property
    def K(self) -> int:
        return self.phi.shape[0]

    @property
    def A(self) -> int:
        return self.phi.shape[1]

    # ---- policies -------------------------------------------------------------------------------

    def with_theta(self, theta: np.ndarray) -> SeqBandit:
        """The same reward and coupling with other policy logits (e.g. perturbed upstream agents)."""
        return SeqBandit(phi=self.phi, g=self.g, B=self.B, theta=np.asarray(theta, dtype=np.float64),
                         lam_int=self.lam_int, rho=self.rho, sigma_r=self.sigma_r)

    def policy(self, k: int, prefixes: np.ndarray) -> np.ndarray:
        """Batched policy of agent ``k``: ``prefixes`` int [B, k] (actions of agents < k) -> probs [B, A].

        This is the ``policy_fn`` contract of :func:`teamplay.credit.methods.cosac.cosac_advantage`.
        """
        n = prefixes.shape[0]
        if k == 0:
            return np.broadcast_to(softmax(self.theta[0]), (n, self.A)).copy()
        return softmax(self.theta[k][None, :] + self.rho * self.B[k][prefixes[:, k - 1]])  # [B, A]

    def transitions(self) -> np.ndarray:
        """``T[j, a_prev, a] = π_j(a | a_prev)`` for ``j >= 1``, shape [K, A, A] (``T[0]`` unused: zeros)."""
        T = np.zeros((self.K, self.A, self.A))
        for j in range(1, self.K):
            T[j] = softmax(self.theta[j][None, :] + self.rho * self.B[j])
        return T

    # ---- rewards --------------------------------------------------------------------------------

    def mean_reward(self, Z: np.ndarray) -> np.ndarray:
        """``f(a)`` for each row of ``Z`` int [N, K] -> [N] (noise-free)."""
        Z = np.asarray(Z)
        K = self.K
        additive = self.phi[np.arange(K)[None, :], Z].sum(axis=1)  # [N]
        k_idx, l_idx = np.triu_indices(K, k=1)  # all pairs k < l, P = K(K-1)/2 of them
        pair_vals = self.g[k_idx[None, :], l_idx[None, :], Z[:, k_idx], Z[:, l_idx]]  # [N, P]
        return additive + self.lam_int * pair_vals.sum(axis=1)

    def sample(self, N: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``N`` rollouts from the policies: actions int [N, K] and noisy rewards [N].

        Draw order: agent 0's actions for all rollouts, then agent 1's, ..., then the reward noise.
        """
        Z = np.zeros((N, self.K), dtype=np.int64)
        for k in range(self.K):
            Z[:, k] = sample_categorical(self.policy(k, Z[:, :k]), rng)
        R = self.mean_reward(Z) + self.sigma_r * rng.normal(size=N)
        return Z, R

    # ---- exact expectations by dynamic programming ----------------------------------------------

    def _dp_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``U[m, a]`` (expected future terms given ``a_m = a``) and ``H[m, a, k, b]`` (expected
        cross terms between upstream ``(k, a_k=b)``, ``k <= m``, and agents ``> m``); cached."""
        if "U" in self._tables:
            return self._tables["U"], self._tables["H"]
        K, A = self.K, self.A
        T = self.transitions()
        # M[m, l] = T_{m+1} ... T_l for l >= m (identity on the diagonal); zeros for l < m.
        M = np.zeros((K, K, A, A))
        for m in range(K):
            M[m, m] = np.eye(A)
            for l in range(m + 1, K):
                M[m, l] = M[m, l - 1] @ T[l]
        upper = np.triu(np.ones((K, K)), k=1)  # upper[m, l] = 1 iff l > m
        g = self.g * upper[:, :, None, None]  # only k < l pairs count
        # S[j, b] = E[Σ_{l>j} g[j, l, b, a_l] | a_j = b]
        S = np.einsum("jlbc,jlbc->jb", M, g)  # M[j, l] is zero for l < j and g is zero for l <= j
        w = self.phi + self.lam_int * S  # [K, A]: what agent j contributes in expectation given a_j
        # U[m, a] = Σ_{j>m} Σ_b M[m, j][a, b] w[j, b]
        U = np.einsum("mjab,jb,mj->ma", M, w, upper)
        # H[m, a, k, b] = lam Σ_{l>m} Σ_c M[m, l][a, c] g[k, l, b, c]   (used for k <= m)
        H = self.lam_int * np.einsum("mlac,klbc,ml->makb", M, g, upper)
        self._tables["U"], self._tables["H"] = U, H
        return U, H

    def q_values(self, Z: np.ndarray) -> np.ndarray:
        """``Q_m(a_≤m)`` for every row of ``Z`` int [N, K] and every position ``m`` -> [N, K].

        Column ``m`` conditions on the first ``m+1`` actions of the row (the rest of the row is ignored
        for that column); the last column is ``f(a)``.
        """
        Z = np.asarray(Z)
        N, K = Z.shape
        U, H = self._dp_tables()
        pos = np.arange(K)[None, :]
        realised_add = np.cumsum(self.phi[pos, Z], axis=1)  # [N, K]
        pair = self.g[pos[:, :, None], pos[:, None, :], Z[:, :, None], Z[:, None, :]]  # [N, K, K] (k, l)
        pair = pair * np.triu(np.ones((K, K)), k=1)[None]
        realised_pair = self.lam_int * np.cumsum(pair.sum(axis=1), axis=1)  # [N, K]: Σ_{k<l<=m}
        future = U[pos, Z]  # [N, K]
        # cross[n, m] = Σ_{k<=m} H[m, Z[n,m], k, Z[n,k]]
        Hn = H[pos[:, :, None], Z[:, :, None], pos[:, None, :], Z[:, None, :]]  # [N, K(m), K(k)]
        cross = (Hn * np.tril(np.ones((K, K)))[None]).sum(axis=2)  # [N, K]
        return realised_add + realised_pair + future + cross

    def q_value(self, prefix: tuple[int, ...]) -> float:
        """``Q`` of one non-empty prefix (tuple of actions of agents 0..m)."""
        if not 1 <= len(prefix) <= self.K:
            raise ValueError(f"prefix length must be in 1..{self.K}, got {len(prefix)}")
        row = np.zeros((1, self.K), dtype=np.int64)
        row[0, : len(prefix)] = prefix
        return float(self.q_values(row)[0, len(prefix) - 1])

    def expected_reward(self) -> float:
        """``E_π[f]`` exactly: ``Σ_a π_0(a) Q_0((a,))``."""
        Z = np.zeros((self.A, self.K), dtype=np.int64)
        Z[:, 0] = np.arange(self.A)
        return float(softmax(self.theta[0]) @ self.q_values(Z)[:, 0])

    def seqau(self, Z: np.ndarray) -> np.ndarray:
        """Exact SeqAU advantages ``Q_k(a_≤k) − Q_{k−1}(a_<k)`` for rows of ``Z`` [N, K] -> [N, K].

        Telescoping: each row sums to ``f(a) − E_π[f]``.
        """
        Q = self.q_values(Z)
        prev = np.concatenate([np.full((Q.shape[0], 1), self.expected_reward()), Q[:, :-1]], axis=1)
        return Q - prev

    # ---- brute force (tests and small K only) ---------------------------------------------------

    def q_value_bruteforce(self, prefix: tuple[int, ...]) -> float:
        """``Q`` by enumerating all ``A^(K-m-1)`` suffixes; for checking the DP on small ``K``."""
        m = len(prefix)
        total = 0.0
        for suffix in itertools.product(range(self.A), repeat=self.K - m):
            a = np.array(prefix + suffix, dtype=np.int64)
            p = 1.0
            for j in range(m, self.K):
                p *= self.policy(j, a[None, :j])[0, a[j]]
            total += p * float(self.mean_reward(a[None, :])[0])
        return total

    def best_value(self, max_K: int = 10) -> float:
        """``f* = max_a f(a)`` by enumerating all ``A^K`` joint actions (refuses ``K > max_K``)."""
        if self.K > max_K:
            raise ValueError(f"best_value enumerates A^K = {self.A}^{self.K} joint actions; K={self.K} "
                             f"exceeds max_K={max_K}")
        Z = np.array(list(itertools.product(range(self.A), repeat=self.K)), dtype=np.int64)
        return float(self.mean_reward(Z).max())


# ---- the advantage-MSE protocol of §3.5 -----------------------------------------------------------

ESTIMATORS = ("cosac", "ma_grpo", "ha_grpo")


@dataclass(frozen=True)
class MSETrial:
    """Result of one MSE trial: squared errors of each estimator against the exact SeqAU.

    Fields:
        K, seed: the bandit.
        mse: estimator name -> mean over (rollout, agent) of (Â − A*)², raw advantages.
        mse_by_position: estimator name -> float [K], the same mean per agent position.
    """

    K: int
    seed: int
    mse: dict[str, float]
    mse_by_position: dict[str, np.ndarray]


def mse_trial(K: int, seed: int, N: int = 16, tau: float = 0.3, cosac_lam: float = 1.0, L: int = 8,
              baseline: str = "sampled", A: int = 4, lam_int: float = 0.5, rho: float = 1.0,
              sigma_r: float = 0.5, sigma_theta: float = 1.0) -> MSETrial:
    """One seed of the advantage-MSE study (docs/credit/specification.md#cosac-bandit).

    Protocol: draw ``SeqBandit.generate(K, ..., seed)``; from a separate stream
    ``default_rng([seed, 1])`` ([INFERRED]; the specification fixes only the generator's stream) sample N
    rollouts from ``μ = π_θ``, then the perturbation ``θ' = θ + τ·N(0,1)`` of all logits (the
    already-updated upstream agents), then COSAC's continuations. Estimators per (n, k):

    * truth: exact SeqAU with every agent ``>= k`` at ``μ`` (agents are updated in order);
    * COSAC: ridge (``λ = cosac_lam``, no intercept) + ``L`` Monte-Carlo continuations from ``μ``;
    * MA-GRPO: ``R_n − mean(R)`` for every agent;
    * HA-GRPO: ``(R_n − mean(R)) · Π_{j<k} π'_j(a_j|·) / μ_j(a_j|·)``.
    """
    from teamplay.credit.methods.cosac import cosac_advantage, cosac_ridge  # cosac imports nothing from here

    bandit = SeqBandit.generate(K, A=A, lam_int=lam_int, rho=rho, sigma_r=sigma_r,
                                sigma_theta=sigma_theta, seed=seed)
    rng = np.random.default_rng([seed, 1])
    Z, R = bandit.sample(N, rng)  # [N, K], [N]
    perturbed = bandit.with_theta(bandit.theta + tau * rng.normal(size=bandit.theta.shape))
    truth = bandit.seqau(Z)  # [N, K]

    phi = cosac_ridge(Z, R, A, lam=cosac_lam)
    cosac = cosac_advantage(phi, bandit.policy, Z, L=L, rng=rng, baseline=baseline)  # [N, K]
    centred = R - R.mean()  # [N]
    ma = np.repeat(centred[:, None], K, axis=1)  # [N, K]
    ratio = np.stack([perturbed.policy(j, Z[:, :j])[np.arange(N), Z[:, j]]
                      / bandit.policy(j, Z[:, :j])[np.arange(N), Z[:, j]] for j in range(K)], axis=1)
    upstream = np.concatenate([np.ones((N, 1)), np.cumprod(ratio, axis=1)[:, :-1]], axis=1)  # Π_{j<k}
    ha = centred[:, None] * upstream

    by_pos = {name: ((est - truth) ** 2).mean(axis=0)
              for name, est in zip(ESTIMATORS, (cosac, ma, ha), strict=True)}
    return MSETrial(K=K, seed=seed, mse={k: float(v.mean()) for k, v in by_pos.items()},
                    mse_by_position=by_pos)
