"""The in-process ``Runner`` and ``Learner`` (``parts`` defines the two interfaces): the lock-step
``RolloutRunner`` over the run's own backend, and ``PolicyUpdater`` on the trainer's own team model;
``local_parts`` builds the pair (``teamplay.distributed.compose.parts_for`` picks it without
``distributed:``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from teamplay.config import TrainConfig
from teamplay.envs.team_env import TeamEnv
from teamplay.records import SamplingParams
from teamplay.training.learn.samples import PolicySample
from teamplay.training.learn.update import PolicyUpdater, UpdateSettings
from teamplay.training.play.rollout import RolloutRunner
from teamplay.training.run.asynchronous.generation import CopyGeneration
from teamplay.training.run.parts import Learner, OptimizerOwner
from teamplay.training.run.sections import update_settings


class LocalRunner(RolloutRunner):
    """The in-process runner: the lock-step ``RolloutRunner`` over the training envs, and a fresh
    one over the evaluation envs for each held-out evaluation. With ``owns_backend`` (the run built
    the backend: ``WiredRun.owns_backend``), ``close`` closes the backend too. ``play`` switches the
    training episodes to a curriculum stage's envs and backend; held-out episodes keep the run's."""

    def __init__(self, make_env: Callable[[], TeamEnv], make_eval_env: Callable[[], TeamEnv], backend,
                 sampling: SamplingParams, max_batch: int | None = None, owns_backend: bool = False) -> None:
        super().__init__(make_env, backend, sampling, max_batch=max_batch)
        self.make_eval_env = make_eval_env
        self.eval_backend = backend  # the run's own, whatever stage the training episodes play
        self.owns_backend = owns_backend

    def play(self, make_env: Callable[[], TeamEnv], backend) -> None:
        """Generate the training episodes from now on with ``make_env`` and ``backend`` (a curriculum
        stage's: ``teamplay.training.run.curriculum``); the held-out episodes keep the run's own."""
        self.make_env, self.backend = make_env, backend

    def held_out(self, sampling: SamplingParams, before_generate: Callable[[], None] | None) -> RolloutRunner:
        return RolloutRunner(self.make_eval_env, self.eval_backend, sampling, max_batch=self.max_batch,
                             before_generate=before_generate)

    def step_metrics(self) -> dict[str, Any]:
        return {}

    def generation(self, run: Any, learner: Learner) -> CopyGeneration:
        """The generator's copy of the adapters and a backend over it (``asynchronous.generation``)."""
        return CopyGeneration(run.team_model, self.backend, self.make_env, self.sampling, self.max_batch)

    def close(self) -> None:
        """Close the backend when the run built it: a vLLM engine's processes and KV cache would
        otherwise live until the interpreter exits, and a sweep's next run would start its own beside
        them. A backend passed in by the caller stays open."""
        if self.owns_backend:
            self.eval_backend.close()  # a stage's backend wraps the same model backend


class LocalLearner(OptimizerOwner):
    """The in-process learner: ``PolicyUpdater`` on the trainable adapters of the trainer's own team
    model. A vLLM backend reloads the adapters after each update."""

    def __init__(self, settings: UpdateSettings, steps: int, team_model, trainable: Sequence[str], backend) -> None:
        super().__init__(settings.optim, steps, team_model, trainable)
        self.updater = PolicyUpdater(settings, team_model, self.params, self.optimizer)
        self.backend = backend

    @property
    def resolved_tokens(self) -> dict[int, tuple[float, ...]]:
        return self.updater.resolved_tokens

    def update(self, samples: Sequence[PolicySample], step: int) -> dict[str, Any]:
        out = self.updater.update(samples, step)
        if out["optimizer_steps"]:
            self.backend.sync_adapters()  # a vLLM backend reloads the adapters it generates with
        return out

    def share_state(self, version: int) -> None:
        """Nothing to share: the updater trains the trainer's own team model."""

    def close(self) -> None:
        """Nothing to free."""


class LocalParts:
    """The in-process ``PartsFactory``: ``LocalRunner`` and ``LocalLearner``."""

    driver_backend = None

    def __call__(self, cfg: TrainConfig, run: Any, trainable: Sequence[str]) -> tuple[LocalRunner, LocalLearner]:
        runner = LocalRunner(run.make_env, run.make_eval_env, run.backend, run.sampling,
                             max_batch=cfg.backend.max_batch, owns_backend=run.owns_backend)
        return runner, LocalLearner(update_settings(cfg), cfg.steps, run.team_model, trainable, run.backend)


local_parts = LocalParts()
