"""``coverage``: GCPO, each episode's Shapley share of the group's valid-solution volume.

Needs an ``embedder`` (an :class:`~teamplay.credit.values.coverage.Embedder`, the resource of that
name) or loads the packaged MiniLM model once per process.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.methods.assumptions import BROADCAST
from teamplay.credit.methods.group_baseline import broadcast
from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit
from teamplay.credit.values.coverage import Embedder, TransformerEmbedder, coverage_advantages, coverage_shapley


class CoverageOptions(MethodOptions):
    """Options of the ``coverage`` method (GCPO)."""

    alpha: float = Field(1.0, gt=0, description="Kernel scale in log det(I + alpha L_S).")
    exact_max: int = Field(12, ge=1, le=16, description="Exact Shapley up to this group size.")
    permutations: int = Field(256, ge=1, description="Monte Carlo permutations above exact_max.")
    seed: int = Field(0, description="Seed of the Monte Carlo permutations.")
    ddof: Literal[0, 1] = Field(0, description="Std used to normalise the Shapley credit.")
    eps: float = Field(1e-8, gt=0, description="Floor of that std.")
    text: Literal["transcript", "final_message"] = Field(
        "transcript", description="What is embedded: all spoken messages joined, or the last one.")
    embedding_model: str | None = Field(
        None, description="Model folder or hub id of the embedder; None = packaged MiniLM default. "
                          "Ignored when the embedder resource is given.")


@lru_cache(maxsize=4)
def _load_embedder(model: str | None) -> TransformerEmbedder:
    return TransformerEmbedder(model)


COVERAGE_CARD = CardText(
    "GCPO: the Shapley share phi_g of each episode of the group (the players are the G episodes, "
    "not agents) in v(S) = log det(I + alpha L_S), L = X X^T, x_g = R_g e_g (reward-weighted unit "
    "embeddings); A_g = (phi_g - mean phi) / std phi on every message of episode g.",
    ("the embedding's similarity stands for 'the same solution': correct and semantically "
     "distinct episodes earn more, a wrong episode is a null player (kernel and alpha are "
     "[INFERRED])",
     BROADCAST),
    ("tests/credit/test_coverage.py::test_duplicate_shares_credit_and_wrong_is_null",
     "tests/credit/test_methods.py::test_coverage_e44"),
    "no generation; the embedding model (packaged MiniLM by default) loads once per process")


@register_credit("coverage", CoverageOptions, "GCPO: Shapley share of the group's valid-solution volume",
                 cost="one embedding per episode", card=COVERAGE_CARD)
def coverage_credit(batch: CreditBatch, options: CoverageOptions) -> list[np.ndarray]:
    """GCPO over the G episodes of the group: each episode is a player of the coverage game
    (docs/credit/specification.md#coverage).

    ``phi = coverage_shapley(embed(texts), rewards, alpha)``; ``A_g = (phi_g - mean phi) / std phi``
    on every spoken message of episode g.

    Invariants: ``sum_g phi_g = v(all)`` (efficiency); an episode with reward 0 has ``phi = 0`` (null
    player); episode advantages sum to 0 over the group.
    """
    if batch.resources.embedder is not None:
        embedder: Embedder = batch.resources.embedder
    else:
        embedder = _load_embedder(options.embedding_model)
    texts = []
    for ep in batch.episodes:
        spoken = [m.text for m in ep.messages if m.spoke]
        texts.append("\n\n".join(spoken) if options.text == "transcript" else (spoken[-1] if spoken else ""))
    E = np.asarray(embedder.embed(texts), dtype=np.float64)
    rewards = [ep.reward for ep in batch.episodes]
    phi = coverage_shapley(E, rewards, options.alpha, options.exact_max, options.permutations,
                           np.random.default_rng(options.seed))
    adv = coverage_advantages(phi, options.ddof, options.eps)
    return [broadcast(ep, dict.fromkeys(ep.agents, float(a)))
            for ep, a in zip(batch.episodes, adv, strict=True)]


__all__ = ["CoverageOptions", "coverage_credit"]
