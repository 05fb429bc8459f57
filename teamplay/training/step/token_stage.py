"""The token level of a step's credit (``credit.token``): which groups it keeps, how the token
advantages reach the policy samples, and the rows an update resolved.

The token method alone picks the route, the same on every learner (in-process or a cluster's ranks):

- a per-message method (one with a ``row`` rule, e.g. ``dgpo``) is applied inside the update, from
  the update's own forward pass: the samples of the listed roles carry a ``TokenRule``, and after
  the update ``resolved`` writes the rows the learner computed (``Learner.resolved_tokens``) into
  the groups' token rows and samples;
- any other method gets the token statistics it declares in one batched no-grad pass before the
  update (``stages.token_credit``), and the samples carry its token advantages.

Every group enters the credit stage; after it, a group is kept for an agent when that agent's
advantages are not all zero (``stages.informative``).

Without ``credit.token`` every stage here leaves the groups as they are (samples with one
advantage per message).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from teamplay.config import TrainConfig
from teamplay.training.learn.samples import TokenRule
from teamplay.training.step.stages import GroupWork, informative, resolve_token_rows, token_credit, with_samples
from teamplay.training.wiring.setup import CheckedRun


class TokenStage:
    """The token credit of a run, built once from its checked config (see the module).

    Fields:
        rule: the per-message method the update applies (``None`` without token credit or with a
            method that takes the statistics pass).
        keeps_zero_variance: whether groups without reward variance still enter the step (the
            token method gives them a signal, e.g. ``ep_grpo``'s progress credit).
    """

    def __init__(self, cfg: TrainConfig, checked: CheckedRun) -> None:
        self.token = cfg.credit.token
        self.temperature = cfg.sampling.temperature
        self.chunk = max(1, min(8, cfg.optim.minibatch_size))  # messages per no-grad statistics pass
        token, method = self.token, checked.token_method
        self.roles = set(token.roles) if token is not None and token.roles is not None else None
        self.keeps_zero_variance = method is not None and method.wants_zero_variance_groups(checked.token_options)
        per_message = method is not None and method.row is not None
        self.rule = TokenRule(method.name, checked.token_options) if per_message else None

    def keeps(self, group: GroupWork) -> bool:
        """Whether a group enters the credit stage: every group does. Whether it carries a signal is
        decided per agent from its advantages after credit (``stages.informative``), not from its
        rewards: a per-agent method may credit the agents of an all-equal-rewards group differently."""
        return True

    def samples(self, groups: Sequence[GroupWork], team_model, active: Collection[str]) -> list[GroupWork]:
        """Each informative credited group's policy samples (``stages.informative``, then
        ``stages.with_samples``), after its token rows from the statistics pass when the method
        takes it; a rule goes to the listed roles' samples. A token method that gives all-equal
        groups a signal of its own (``keeps_zero_variance``) keeps every group and every agent."""
        if not self.keeps_zero_variance:
            groups = informative(groups)
        if self.token is not None and groups and self.rule is None:
            groups = token_credit(groups, team_model, self.token, active, self.temperature, chunk=self.chunk)
        return with_samples(groups, active, self.rule, self.roles)

    def resolved(self, groups: list[GroupWork], rows: dict[int, tuple[float, ...]],
                 active: Collection[str]) -> list[GroupWork]:
        """The groups with the token rows an update resolved (``rows``: by index into the step's
        samples), when a rule ran; else ``groups`` as they are."""
        return resolve_token_rows(groups, rows, active) if self.rule is not None and groups else groups
