"""GCPO coverage game (docs/credit/specification.md#coverage) and the offline embedding model."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.credit.values.coverage import (
    Embedder,
    TransformerEmbedder,
    coverage_advantages,
    coverage_shapley,
    coverage_value,
    default_embedding_model_path,
)

E44 = [[1, 0], [1, 0], [0, 1], [0.6, 0.8]]
R44 = [1, 1, 1, 0]
#: float64 machine epsilon, 2**-52; the unit roundoff of one rounded operation is EPS / 2
EPS = np.finfo(np.float64).eps


def test_e44_values():
    # singles: log(1 + 1) = log 2; {0,1} identical: det([[2,1],[1,2]]) = 3 -> log 3;
    # {0,2} orthogonal: log 4; all: rollout 3 is wrong (r = 0) so v = log(2 * 3) = log 6.
    v = coverage_value(E44, R44, [1, 2, 4, 8, 3, 5, 15])
    assert v == pytest.approx([0.693147, 0.693147, 0.693147, 0, 1.098612, 1.386294, 1.791759], abs=1e-6)


def test_e44_shapley_and_advantages():
    phi = coverage_shapley(E44, R44)
    assert phi == pytest.approx([0.549306, 0.549306, 0.693147, 0.0], abs=1e-6)
    assert phi.sum() == pytest.approx(math.log(6), abs=1e-12)  # efficiency, v(empty) = 0
    assert coverage_advantages(phi) == pytest.approx([0.382224, 0.382224, 0.924608, -1.689056], abs=1e-6)
    assert coverage_shapley(E44, R44, alpha=2) == pytest.approx([0.804719, 0.804719, 1.098612, 0], abs=1e-6)


def test_duplicate_shares_credit_and_wrong_is_null():
    phi = coverage_shapley(E44, R44)
    # Symmetry and the null player hold to rounding, not bit for bit: phi_i is one BLAS product of the
    # 16 coalition values v(T) with player i's column of +-Shapley weights, and the kernel sums those 16
    # products in an order of its own (AVX-512 and AVX2 builds differ; an AVX2 AMD machine gave
    # phi_0 - phi_1 = 1 ulp). A sum of 16 rounded products is within gamma_16 ~ 16 (EPS / 2) times
    # sum_T |w_T v(T)| of the exact sum, and that is 1.94 here for players 0 and 1, 1.89 for player 3.
    # Players 0 and 1 have one exact value (the same log-dets times the same weights, permuted), so
    # they are at most 2 * 8 EPS * 1.94 < 32 EPS (7e-15) apart. Player 3's terms cancel in pairs
    # (r_3 = 0: v(T + 3) = v(T) bit for bit), so |phi_3| <= 8 EPS * 1.89 < 16 EPS (4e-15). A real
    # asymmetry or a leak of credit to a wrong rollout would be orders of magnitude larger.
    assert phi[0] == pytest.approx(phi[1], rel=0, abs=32 * EPS)  # identical embeddings, equal credit
    assert phi[0] < phi[2]  # a duplicate is worth less than a unique correct rollout
    assert phi[3] == pytest.approx(0.0, abs=16 * EPS)


def test_monte_carlo_path_above_exact_max():
    exact = coverage_shapley(E44, R44)
    mc = coverage_shapley(E44, R44, exact_max=3, M=400, rng=np.random.default_rng(0))
    assert mc.sum() == pytest.approx(math.log(6), abs=1e-12)  # efficiency exact for any M
    # exact: each gain of player 3 is v(S + 3) - v(S) of equal bits (I + L_S gains the row e_3; the LU of
    # these dyadic matrices rounds nothing), so every gain and their mean is 0 on any kernel
    assert mc[3] == 0.0
    assert np.abs(mc - exact).max() < 0.05  # marginal gains lie in [0, 0.7]: 4 s.e. <= 4*0.35/20 = 0.07
    with pytest.raises(ValueError, match="rng"):
        coverage_shapley(E44, R44, exact_max=3)


@settings(max_examples=30)
@given(st.integers(2, 7), st.integers(0, 2**31 - 1))
def test_properties_random_groups(G, seed):
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(G, 5))
    r = rng.uniform(size=G) * (rng.uniform(size=G) < 0.7)
    phi = coverage_shapley(E, r)
    full = coverage_value(E, r, [(1 << G) - 1])[0]
    assert phi.sum() == pytest.approx(full, abs=1e-9)
    assert np.all(phi >= -1e-12)  # monotone game
    assert np.all(phi[r == 0] == pytest.approx(0.0, abs=1e-12))


def test_validation():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        coverage_shapley(E44, [1, 1, 2, 0])
    with pytest.raises(ValueError, match="all zeros"):
        coverage_shapley([[0, 0], [1, 0]], [1, 1])
    with pytest.raises(ValueError, match="G=3"):
        coverage_shapley(E44, [1, 1, 1])
    with pytest.raises(ValueError, match="not finite"):
        coverage_shapley([[np.nan, 1], [1, 0]], [1, 1])
    with pytest.raises(ValueError, match="alpha"):
        coverage_shapley(E44, R44, alpha=0)


def test_default_model_loads_offline_and_embeds(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = default_embedding_model_path()
    assert (folder / "config.json").is_file()
    emb = TransformerEmbedder()
    assert isinstance(emb, Embedder)
    assert emb.pooling == "mean"  # what the package's 1_Pooling/config.json declares
    x = emb.embed(["The answer is 4.", "So the answer is four.", "Cats sleep most of the day."])
    assert x.shape == (3, 384)
    assert np.linalg.norm(x, axis=1) == pytest.approx([1, 1, 1], abs=1e-9)
    assert x[0] @ x[1] > x[0] @ x[2] + 0.2  # paraphrases are closer than unrelated text
    assert emb.embed([]).shape == (0, 384)


def test_missing_model_folder_is_a_model_load_error(tmp_path):
    from teamplay.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="could not load embedding model"):
        TransformerEmbedder(tmp_path / "no-such-model")
