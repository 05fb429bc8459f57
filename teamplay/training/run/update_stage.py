"""The step's last stage: the learner's update on every sample of the credited groups.

It keeps the stage convention of ``teamplay.training.step.stages`` (``stage(groups, ctx) ->
groups``; ``metrics()``) and lives here, beside the ``Learner`` it drives (``parts``), because the
learner is a part of the run shell (in-process or a cluster's learner group).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from teamplay.training.learn.nonfinite import NonFiniteGuard
from teamplay.training.run.parts import Learner
from teamplay.training.step.stages import GroupWork, StepContext, all_samples, resolve_token_rows


class UpdateStage:
    """Runs ``learner.update`` on the step's samples (in group order), counts a non-finite update
    towards the run's stop (``nonfinite``), writes the token rows a per-message token rule resolved
    in the update into the groups that carry one (``GroupWork.tokens_in_update``;
    ``stages.resolve_token_rows``) and advances the learning-rate schedule, also after a step
    without samples.

    ``metrics()`` is the last update's metrics: the learner's (at least ``optimizer_steps``),
    ``nonfinite_streak`` and ``lr``, the learning rate the update used (read before the schedule
    advances).
    """

    def __init__(self, learner: Learner, nonfinite: NonFiniteGuard) -> None:
        self.learner, self.nonfinite = learner, nonfinite
        self._metrics: dict[str, Any] = {}

    def __call__(self, groups: Sequence[GroupWork], ctx: StepContext) -> list[GroupWork]:
        samples = all_samples(groups)
        lr = self.learner.lr
        update = self.learner.update(samples, ctx.step) if samples else {"optimizer_steps": 0}
        # warns (one line) for a step whose loss or gradient was not finite; counts them in a row
        self._metrics = {**update, "nonfinite_streak": self.nonfinite.observe(ctx.step + 1, update), "lr": lr}
        # every group of a step alike: a token rule reaches the samples, or none does
        resolves = any(work.tokens_in_update for work in groups)
        out = resolve_token_rows(groups, self.learner.resolved_tokens, ctx.active) if resolves else list(groups)
        self.learner.end_step()
        return out

    def metrics(self) -> dict[str, Any]:
        return dict(self._metrics)
