"""The step's three stages after the rollout, built in one place (``build_stages``): credit, token
credit and the update, each handed the config sections it reads, and the generative judge the
credit method asks for built by the wiring and passed in."""

from __future__ import annotations

from dataclasses import dataclass

from teamplay.config import TrainConfig
from teamplay.training.learn.nonfinite import NonFiniteGuard
from teamplay.training.play.judge import BackendJudge
from teamplay.training.run.parts import Learner
from teamplay.training.run.update_stage import UpdateStage
from teamplay.training.step.credit_stage import CreditStage
from teamplay.training.step.token_stage import TokenStage
from teamplay.training.wiring.backend import build_judge_backend
from teamplay.training.wiring.checks import CheckedRun
from teamplay.training.wiring.wired_run import WiredRun


@dataclass(frozen=True)
class StepStages:
    """The stages of a step after its rollout, in order (``teamplay.training.step.stages.Stage``)."""

    credit: CreditStage
    tokens: TokenStage
    update: UpdateStage


def build_stages(cfg: TrainConfig, checked: CheckedRun, run: WiredRun, learner: Learner,
                 nonfinite: NonFiniteGuard) -> StepStages:
    """The step's stages of the run ``cfg`` describes (``checked``: what ``check_run`` parsed of it;
    ``run``: its wiring): the credit method's (with its judge when it needs one:
    ``wiring.backend.build_judge_backend``), the token stage, and ``learner``'s update (a non-finite
    one counts towards ``nonfinite``). The composition root of the stages: the one function here
    that reads the whole config."""
    judge = None
    if "judge" in checked.credit_needs:
        judge = BackendJudge(build_judge_backend(cfg.credit.judge_model, cfg.model, cfg.backend, cfg.distributed,
                                                 run.team_model, run.backend))
    return StepStages(credit=CreditStage(checked, run, cfg.sampling, cfg.backend, cfg.seed, judge),
                      tokens=TokenStage(cfg.credit.token, cfg.sampling, cfg.optim, checked, run.team_model),
                      update=UpdateStage(learner, nonfinite))
