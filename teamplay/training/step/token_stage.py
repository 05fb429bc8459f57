"""The token level of a step's credit (``credit.token``): which groups it keeps and how the token
advantages reach the policy samples.

The token method alone picks the route, the same on every learner (in-process or a cluster's ranks):

- a per-message method (one with a ``row`` rule, e.g. ``dgpo``) is applied inside the update, from
  the update's own forward pass: the samples of the listed roles carry a ``TokenRule``, the groups
  say so (``GroupWork.tokens_in_update``), and after the update the update stage writes the rows
  the learner computed (``Learner.resolved_tokens``) into the groups' token rows and samples
  (``stages.resolve_token_rows``);
- any other method gets the token statistics it declares in one batched no-grad pass before the
  update (``stages.token_credit``), and the samples carry its token advantages.

Every group enters the credit stage; after it, this stage keeps a group for an agent when that
agent's advantages are not all zero (``stages.informative``).

Why a per-message rule is not applied here, so that every advantage is final before the loss runs
(as in TRL or prime-rl): the rule reads the token distributions of the pass that first scores a
sample in the update (epoch 1). Every minibatch after the first optimiser step is scored by
weights that step already moved, so a pass here, on the step's starting weights, would give other
token advantages for those samples, so other numbers than a run gives today (the two routes
agree only where the update scores every sample before it steps, as
``tests/training/test_token_credit.py`` checks with one minibatch). It would also cost a second
full-vocabulary forward pass of every such message, which the update's own pass avoids.

Without ``credit.token`` the stage makes the informative groups' samples with one advantage per
message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from teamplay.config import OptimConfig, SamplingConfig, TokenCreditConfig
from teamplay.training.learn.samples import TokenRule
from teamplay.training.step.stages import GroupWork, StepContext, informative, token_credit, with_samples
from teamplay.training.wiring.checks import CheckedRun


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
        groups = with_samples(groups, ctx.active, self.rule, self.roles)
        if self.rule is not None:  # the update applies it; the update stage writes back what it resolved
            groups = [dataclasses.replace(work, tokens_in_update=True) for work in groups]
        return groups

    def metrics(self) -> dict[str, Any]:
        """Nothing beyond what the step's metrics read from the samples (``token_credit_metrics``)."""
        return {}
