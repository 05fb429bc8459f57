"""The decoding settings of a run's generate calls, from its ``sampling`` sections."""

from __future__ import annotations

from teamplay.config import SamplingConfig, TokenCreditConfig
from teamplay.credit.token import get_token_credit
from teamplay.records import SamplingParams


def sampling_params(cfg: SamplingConfig, seed: int | None = None, entropies: bool = False) -> SamplingParams:
    return SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                          top_p=cfg.top_p, top_k=cfg.top_k, seed=seed, entropies=entropies)


def rollout_sampling(sampling: SamplingConfig, token: TokenCreditConfig | None) -> SamplingParams:
    """The training rollouts' sampling: ``sampling`` (the run's ``sampling`` section), recording token
    entropies when the token-level credit method (``credit.token``) reads them from the messages. A
    per-message method (``row``) reads them from the update's own forward pass instead (every
    learner applies it there)."""
    method = get_token_credit(token.method) if token is not None else None
    wants = method is not None and "entropies" in method.needs and method.row is None
    return sampling_params(sampling, entropies=wants)
