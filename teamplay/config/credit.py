"""The ``credit`` section: how the team reward becomes per-message (and per-token) advantages."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from teamplay.config.base import Section


class TokenCreditConfig(Section):
    """Token-level credit: spread each message's advantage over its tokens."""

    method: str = Field(..., description="Token credit method (teamplay list), e.g. dgpo, aem.")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of that method.")
    roles: list[str] | None = Field(None, description="Roles whose messages get token credit; the "
                                                      "others keep one advantage per message. "
                                                      "None = every role.")


class CreditConfig(Section):
    """How the team reward becomes per-message advantages."""

    method: str = Field("grpo", description="Credit method (teamplay list), e.g. grpo, shapley.")
    options: dict[str, Any] = Field(default_factory=dict, description="Options of that method.")
    token: TokenCreditConfig | None = Field(None, description="Token-level credit after the message "
                                                              "method (None = one advantage per message).")
    judge_model: str | None = Field(
        None, description="Model (hub id, folder or alias, as model.name) of the generative judge of a "
                          "method that asks for one (shapley with value: judge), loaded beside the team's "
                          "with model.dtype and without adapters. None: the team's base model, adapters off.")
