"""The token level of a step's credit (``credit.token``): which groups it keeps, how the token
advantages reach the policy samples, and the rows an update resolved.

The token method alone picks the route, the same on every learner (in-process or a cluster's ranks):

- a per-message method (one with a ``row`` rule, e.g. ``dgpo``) is applied inside the update, from
  the update's own forward pass: the samples of the listed roles carry a ``TokenRule``, and after
  the update ``resolved`` writes the rows the learner computed (``Learner.resolved_tokens``) into
  the groups' token rows and samples;
- any other method gets the token statistics it declares in one batched no-grad pass before the
  update (``stages.token_credit``), and the samples carry its token advantages.

Every group enters the credit stage; after it, this stage keeps a group for an agent when that
agent's advantages are not all zero (``stages.informative``).

Without ``credit.token`` the stage makes the informative groups' samples with one advantage per
message.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from teamplay.config import OptimConfig, SamplingConfig, TokenCreditConfig
from teamplay.training.learn.samples import TokenRule
from teamplay.training.step.stages import (
    GroupWork,
    StepContext,
    informative,
    resolve_token_rows,
    token_credit,
    with_samples,
)
from teamplay.training.wiring.setup import CheckedRun


class TokenStage:
    """The token credit of a run, built once from its sections (``credit.token``, ``sampling``,
    ``optim``), its checked config and the team model its statistics pass scores with (see the module).

    Fields:
        rule: the per-message method the update applies (``None`` without token credit or with a
            method that takes the statistics pass).
        keeps_zero_variance: whether every group and agent goes on to the samples, signal or not
            (the token method gives them a signal, e.g. ``ep_grpo``'s progress credit).
    """

    def __init__(self, token: TokenCreditConfig | None, sampling: SamplingConfig, optim: OptimConfig,
                 checked: CheckedRun, team_model) -> None:
        self.token, self.team_model = token, team_model
        self.temperature = sampling.temperature
        self.chunk = max(1, min(8, optim.minibatch_size))  # messages per no-grad statistics pass
        method = checked.token_method
        self.roles = set(token.roles) if token is not None and token.roles is not None else None
        self.keeps_zero_variance = method is not None and method.wants_zero_variance_groups(checked.token_options)
        per_message = method is not None and method.row is not None
        self.rule = TokenRule(method.name, checked.token_options) if per_message else None

    def __call__(self, groups: Sequence[GroupWork], ctx: StepContext) -> list[GroupWork]:
        """Each informative credited group's policy samples (``stages.informative``, then
        ``stages.with_samples`` for ``ctx.active``), after its token rows from the statistics pass
        when the method takes it; a rule goes to the listed roles' samples. A token method that
        gives all-equal groups a signal of its own (``keeps_zero_variance``) keeps every group and
        every agent."""
        groups = list(groups) if self.keeps_zero_variance else informative(groups)
        if self.token is not None and groups and self.rule is None:
            groups = token_credit(groups, self.team_model, self.token, ctx.active, self.temperature,
                                  chunk=self.chunk)
        return with_samples(groups, ctx.active, self.rule, self.roles)

    def metrics(self) -> dict[str, Any]:
        """Nothing beyond what the step's metrics read from the samples (``token_credit_metrics``)."""
        return {}

    def resolved(self, groups: Sequence[GroupWork], rows: dict[int, tuple[float, ...]],
                 active: Collection[str]) -> list[GroupWork]:
        """The groups with the token rows an update resolved (``rows``: by index into the step's
        samples), when a rule ran; else ``groups`` as they are (the update stage calls it)."""
        return resolve_token_rows(groups, rows, active) if self.rule is not None and groups else list(groups)
