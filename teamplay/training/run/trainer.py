"""The teamplay trainer: credit-driven GRPO/GSPO on per-role LoRA adapters of one base model.

What one step really does:

    1. take the next B problems of the (seeded, reshuffled each pass) training set;
    2. run G team episodes per problem through the RolloutRunner (sampled decoding); every
       generated message keeps the behaviour log-probs of the policy that generated it;
    3. score them (the env already did: team reward = verifier score of the final answer);
    4. the configured credit method turns each group's rewards into one advantage per message;
       a group is kept for an agent while that agent's advantages in it are not all zero, and a
       group where every agent's are is dropped (counted in metrics; ``stages.informative``);
       with `credit.token`, one batched no-grad pass computes the token statistics the token
       method declares (entropies, reference or teacher log-probs, ...) and the token method
       spreads each message's advantage over its tokens (for the listed roles; the others keep
       one advantage per message, in the same step); a per-message method (``dgpo``) is applied
       in step 5 instead, from the update's own forward pass (on every learner, distributed too);
    5. for `epochs` passes over shuffled minibatches of messages, each minibatch split by the
       adapter that wrote each message: log-probs under the current adapter, the reference
       log-probs with adapters disabled (only when the KL weight is > 0), the GRPO (token ratio)
       or GSPO (sequence ratio) clipped loss, backward; every `grad_accum` minibatches one AdamW
       step with gradient clipping. A non-finite loss or gradient skips that optimiser step so it
       never reaches the adapters (recorded in the metrics, one warning per step); after
       `optim.max_nonfinite_steps` such steps in a row the run stops with an error before it
       checkpoints (``teamplay.training.learn.nonfinite``);
    6. log metrics (with the step's reward and advantage ranges), evaluate on held-out problems
       every `eval_every` steps, checkpoint every `checkpoint_every` steps (atomically). A SIGTERM
       or SIGINT is read between steps (and abandons a held-out evaluation): the last completed
       step is checkpointed and the run stops, to resume exactly (``teamplay.training.run.preemption``).

With `controllers.enabled`, the rollouts of step 2 ask a learned speak/skip controller before each
skippable turn (sampling its current strategy; a skipped review or debate turn is generated anyway,
in the same batched call, to value the unchosen speak), and right after the rollouts, before the
credit and the LoRA update, the controller tables take one regret update per logged decision
(`teamplay.training.play.controllers`). The tables do not enter the loss, so the order only matters for
what the metrics of a step describe. They are saved in each checkpoint's `extra_state.json` under
"controllers" and restored exactly on resume.

The ratio in step 5 is between the current weights and the weights that generated the rollout,
so with several epochs it moves away from 1 and the clip is active (unlike implementations that
recompute "old" log-probs right before the step). Frozen roles' adapters and the base weights are
never in the optimiser.

In code, the step is a pipeline of named stages over one record per group (``GroupWork``, in
``teamplay.training.step.stages``): rollout -> credit (replays prefetched) -> token credit -> samples ->
update -> metrics. The trainer is composed of:

* a rollout source (``teamplay.training.run.rollout_source.RolloutSource``) the step takes its
  problems and episodes from, keeps or drops groups through, and tells of each update; one code
  path for both kinds. The synchronous source has the runner generate the step's episodes when the
  step asks. With ``rollout.max_staleness: N`` the asynchronous one (``teamplay.training.run.asynchronous``)
  has a generator thread make step 2 ahead with adapters of its own (a copy in one process, on hf
  or a vllm engine it owns; the Ray pool's workers), up to N steps ahead of the update; groups more
  than N adapter versions behind are not trained on (counted), and the data position moves past a
  batch only when the step takes it. Both seed a step's episodes alike (``data_order.step_seed``):
  N = 0 is the synchronous step, number for number;
* two parts (``teamplay.training.run.parts``): a ``Runner`` that produces the episodes and a
  ``Learner`` that applies the update and owns the optimiser and schedule; in-process parts by
  default (``local_parts``), a Ray pool and learner group for a ``distributed:`` run
  (``teamplay.distributed.compose.make_trainer`` picks them from the config);
* the step's stages (credit, token credit, update), built in one place from the sections each reads
  (``step_stages.build_stages``: the generative judge a credit method asks for is built there and
  passed in), the run's state (``run_state``), the held-out evaluations (``held_out``), the
  curriculum and the warm start.

Every refusal of an option combination runs before the parts start, in one place
(``teamplay.training.wiring.checks``: ``check_run`` before the model loads, ``check_wired`` for what
needs the model or backend).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import yaml

from teamplay.atomic import write_atomically
from teamplay.config import TrainConfig
from teamplay.envs.tasks.base import Task
from teamplay.records import Episode, TaskItem
from teamplay.training.learn.nonfinite import NonFiniteGuard
from teamplay.training.play.controllers import answer_check
from teamplay.training.play.evaluation import EvalMetrics
from teamplay.training.run.curriculum import Curriculum
from teamplay.training.run.held_out import HeldOutEvaluation, solo_baseline
from teamplay.training.run.local_parts import local_parts
from teamplay.training.run.parts import Learner, PartsFactory, Runner
from teamplay.training.run.preemption import Preemption, StopRequested, preemption_handlers
from teamplay.training.run.rollout_source import RolloutSource, rollout_source
from teamplay.training.run.run_state import RunState
from teamplay.training.run.sections import held_out_settings, run_record, update_settings
from teamplay.training.run.step_stages import build_stages
from teamplay.training.run.warm_start import WarmStart
from teamplay.training.step.episode_log import episode_lines
from teamplay.training.step.stages import (
    GroupWork,
    StepContext,
    TokenRows,
    active_adapters,
    all_credited,
    all_token_rows,
    make_groups,
    run_stages,
)
from teamplay.training.step.step_metrics import step_metrics
from teamplay.training.store.checkpoint import LoadedCheckpoint, TrainerState, latest_checkpoint
from teamplay.training.store.metrics import MetricsLogger, generated_tokens
from teamplay.training.store.run_folder import claim_run_folder
from teamplay.training.wiring.checks import CheckedRun, check_run, check_wired
from teamplay.training.wiring.wired_run import WiredRun, build_run, seed_everything


@dataclass(frozen=True)
class StepResult:
    """What one ``Trainer.step()`` did.

    Fields:
        step: the number of steps done after it (1 after the first).
        metrics: the step's metrics (JSON-ready), as logged to metrics.jsonl.
        groups: the stage records of the credited groups, in group order (``GroupWork``: the
            episodes, item, rewards, scale, advantages, token rows and samples of each group);
            groups where every agent is silent (``stages.informative``) are not among them.
            ``credited`` and ``token_advantages`` are flat views of them.
    """

    step: int
    metrics: dict[str, Any]
    groups: tuple[GroupWork, ...] = ()

    @property
    def credited(self) -> tuple[tuple[Episode, np.ndarray], ...]:
        """Every (episode, advantages [T]) pair that entered the update, in group order."""
        return all_credited(self.groups)

    @property
    def token_advantages(self) -> TokenRows | None:
        """With token-level credit, aligned with ``credited``: per episode, per message its token
        advantages [C] or ``None`` (the scalar on every token); else ``None``."""
        return all_token_rows(self.groups)


@dataclass(frozen=True)
class Cadence:
    """When one ``train`` call evaluates, checkpoints and stops: rules over step counts, each
    testable alone; the loop asks them after every step. A preemption and a non-finite streak stop
    the run outside them (they raise).

    Fields:
        eval_every: a held-out evaluation after every ``eval_every``-th step (None: none between steps).
        checkpoint_every: a checkpoint after every ``checkpoint_every``-th step (>= 1).
        limit: the most steps this call takes (None: until the run is finished).
        held_out: whether the run has held-out problems (without them nothing is evaluated).
    """

    eval_every: int | None
    checkpoint_every: int
    limit: int | None
    held_out: bool

    def another_step(self, taken: int, finished: bool) -> bool:
        """Whether the call takes one more step after ``taken``: not once the run is finished, nor
        once it took ``limit``."""
        return not finished and (self.limit is None or taken < self.limit)

    def evaluates(self, step: int, ends_run: bool) -> bool:
        """Whether step ``step`` (counted from 1) is evaluated: every ``eval_every``-th, but not one
        that ends the run (finished: the final evaluation covers it; or stopped for non-finite steps)."""
        return bool(self.held_out and self.eval_every and step % self.eval_every == 0 and not ends_run)

    def checkpoint(self, step: int, taken: int, finished: bool) -> Literal["call", "periodic"] | None:
        """Which checkpoint step ``step`` (the call's ``taken``-th) writes: ``"call"``, the one that ends
        the call (``train(save=...)``), on the run's last step or the call's; ``"periodic"`` every
        ``checkpoint_every``-th step before; else None."""
        if finished or taken == self.limit:
            return "call"
        return "periodic" if step % self.checkpoint_every == 0 else None


@dataclass
class TrainResult:
    """What a finished (or resumed and finished) run reports."""

    run_dir: Path
    steps: int
    eval_before: EvalMetrics | None
    eval_after: EvalMetrics | None
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    #: the steps this call took (``steps`` counts every step of the run, a resumed one's earlier steps too)
    steps_run: int = 0


class Trainer:
    """Trains a team from a ``TrainConfig``.

    ``team_model`` and ``backend`` may be passed in (tests pass a tiny model; a backend passed in
    stays open: the caller's); otherwise they are built from the config. ``task`` with ``items``
    (and ``eval_items``) replace the config's task sections, for a task defined in Python.
    ``on_step(step, metrics)`` is called after each step, ``on_eval(label)`` before each held-out
    evaluation, ``on_eval_batch()`` before each batch of one (a progress line where no bar is shown).
    ``on_start(trainer)`` is called by each ``train`` call once the run's state is in
    place (fresh, or restored by ``resume``), right before the call's first step: what it sets,
    every step of the call sees (a federated site loads the global adapters over its restored ones).
    ``group_hook(item, rewards [G]) -> scale`` sees every group of a step (signal or not) and scales
    its advantages (federated sites record reward statistics and calibrate with it).

    Two parts do the step's outside work, each behind a small interface
    (``teamplay.training.run.parts``): ``runner`` produces the episodes and ``learner`` applies the
    update and owns the optimiser and schedule. ``parts`` builds them: in-process by default; use
    ``teamplay.distributed.compose.make_trainer(cfg)`` to get the parts the config asks for. The
    step's stages are ``credit``, ``tokens`` and ``update`` (one calling convention:
    ``teamplay.training.step.stages.Stage``); ``held_out`` (``teamplay.training.run.held_out``) runs
    the held-out evaluations; ``run_state`` (``teamplay.training.run.run_state``) keeps what the run
    carries from step to step and into its checkpoints (``state``, ``extra_tensors``; ``checkpoint``,
    ``restore``).

    Public attributes read by callers beside the methods: ``cfg``, ``run_dir``, ``task``, ``items``,
    ``eval_items`` (a caller may replace them before ``train``), ``team``, ``team_model``,
    ``trainable``, ``controllers``, ``make_env`` and ``backend`` (for rollouts of the caller's own),
    ``runner`` and ``learner``; ``rollouts``, where each step's episodes come from
    (``teamplay.training.run.rollout_source.RolloutSource``: an ``AsyncSource`` with
    ``rollout.max_staleness`` set, else a ``SyncSource``); ``curriculum`` (``teamplay.training.run.curriculum``)
    with ``curriculum:`` set, else None: ``task``, ``items`` and ``make_env`` are then its current stage's.
    """

    def __init__(self, cfg: TrainConfig, team_model=None, backend=None, task: Task | None = None,
                 items: Sequence[TaskItem] | None = None, eval_items: Sequence[TaskItem] | None = None,
                 on_step: Callable[[int, dict[str, Any]], None] | None = None,
                 on_eval: Callable[[str], None] | None = None, parts: PartsFactory = local_parts,
                 group_hook: Callable[[TaskItem, np.ndarray], float] | None = None,
                 on_start: Callable[[Trainer], None] | None = None,
                 on_eval_batch: Callable[[], None] | None = None) -> None:
        self.cfg, self.run_dir = cfg, Path(cfg.output_dir)
        self.on_step, self.on_eval, self.group_hook = on_step, on_eval, group_hook
        self.on_eval_batch = on_eval_batch
        self.on_start = on_start
        # the config model checked its cross-field rules at load; what needs the registries (credit
        # method, its options, resources and protocol) is checked here, once, before data or model load
        checked = check_run(cfg, task_given=task is not None)
        seed_everything(cfg.seed)
        run = build_run(cfg, team_model=team_model, backend=backend, task=task, items=items, eval_items=eval_items,
                        backend_name=parts.driver_backend)
        with run.closed_on_error():  # a part that fails to build closes the backend the run built
            # what only the wired run shows (its model, its backend), before any part starts
            check_wired(cfg, checked, run.team_model, run.backend)
            self.task, self.items = run.task, run.items
            self.eval_task, self.eval_items = run.eval_task, run.eval_items
            self.controllers, self.team_model = run.controllers, run.team_model
            #: read by callers, not by the trainer (the parts take theirs from ``run``): the team, the
            #: training env factory and the driver's generation backend, for rollouts beside the run's
            self.team, self.make_env, self.backend = run.team, run.make_env, run.backend
            # TeamModel.from_team froze the adapters of frozen roles (and refused conflicting ones)
            self.trainable = [a for a in self.team_model.adapter_names if a not in self.team_model.frozen]
            # after every check: a run that cannot work is refused before a cluster starts
            self.runner: Runner
            self.learner: Learner
            self.runner, self.learner = parts(cfg, run, self.trainable)
            try:
                self._compose(cfg, checked, run)
            except BaseException:  # what the parts started (a cluster's actors) ends with the failed start
                self.learner.close()
                self.runner.close()
                raise

    def _compose(self, cfg: TrainConfig, checked: CheckedRun, run: WiredRun) -> None:
        """The rest of the trainer, once the parts exist: each piece gets the sections it reads."""
        #: consecutive steps with skipped non-finite updates; the loop stops the run at its limit
        self.nonfinite = NonFiniteGuard(cfg.optim.max_nonfinite_steps)
        # the step's stages, one calling convention (``stages.Stage``): credit, token credit, update
        stages = build_stages(cfg, checked, run, self.learner, self.nonfinite)
        self.credit, self.tokens, self.update = stages.credit, stages.tokens, stages.update
        #: the difficulty dial (``curriculum:``; ``teamplay.training.run.curriculum``), else None
        self.curriculum: Curriculum | None = None
        if cfg.curriculum is not None:
            self.curriculum = Curriculum(cfg.curriculum, cfg.task, cfg.protocol, cfg.team, run, self._play)
        record = run_record(cfg)
        self.run_state = RunState(record, cfg.seed, cfg.steps, cfg.token_budget, self.team_model, self.learner,
                                  self.controllers, len(self.items), self.curriculum)
        #: where each step's episodes come from: generated by the runner when the step asks, or ahead
        #: by a generator thread (``rollout.max_staleness``; ``rollout_source``)
        self.rollouts: RolloutSource = rollout_source(cfg.rollout, cfg.seed, cfg.steps, run, self.runner,
                                                      self.learner, self.run_state)
        # held-out episodes come from the runner, or through the generator thread where it alone may
        # generate (vllm, Ray: ``AsyncSource.evaluation_runner``)
        answer_roles = run.make_eval_env().protocol.answer_roles
        solo = (solo_baseline(cfg.sampling, cfg.backend.max_batch, run, answer_roles)
                if cfg.eval_self_consistency else None)
        self.held_out = HeldOutEvaluation(held_out_settings(cfg, record), self.rollouts.evaluation_runner(),
                                          self.eval_task, self._before_evaluation, answer_roles, solo)
        if self.curriculum is not None:  # the first stage's training episodes, from the first step
            self.curriculum.start()
        #: the supervised warm start a fresh run takes before its first step (``warm_start:``), else None
        self.warm_start = None if cfg.warm_start is None else WarmStart(
            cfg.warm_start, update_settings(cfg), record, cfg.protocol.name, self.team_model, self.team,
            self.trainable, self.make_env, self.runner, self.held_out.run, run.backend.sync_adapters)

    @property
    def state(self) -> TrainerState:
        """The steps done, the tokens generated and the data position (the ``run_state``'s)."""
        return self.run_state.state

    @property
    def extra_tensors(self) -> dict[str, torch.Tensor]:
        """Named tensors saved with every checkpoint and restored with it (``checkpoint(tensors=...)``:
        a federated site's error-feedback residual); read them in ``on_start`` after a resume."""
        return self.run_state.extra_tensors

    # ----------------------------------------------------------------------------- the loop
    def train(self, resume: str | None = None, overwrite: bool = False, steps: int | None = None,
              save: Callable[[Trainer], Path] | None = None, signals: bool = True) -> TrainResult:
        """Run until the run is finished (``cfg.steps`` steps or ``token_budget`` tokens), or for at
        most ``steps`` more steps in this call; ``resume`` = "auto" (latest intact checkpoint if
        any) or a checkpoint folder.

        The call checkpoints its last step (and every ``checkpoint_every`` steps before it). A call
        that ends before the run is finished is a pause: ``train(resume="auto")`` continues it to
        the same metrics lines and adapters as one call to the end. The held-out evaluation of the
        untrained team runs on a fresh start, the final one only when the run finishes
        (``eval_after`` is None after a pause). ``save(trainer)`` writes the checkpoint that ends the
        call, with ``checkpoint(...)`` (default: ``checkpoint()``): a federated site names it by
        round, adds its error-feedback residual computed from the trained adapters, and prunes by
        round itself. ``on_start`` (see the class) runs right before the call's first step.

        The run folder is locked for the whole call (a second trainer on it stops at once); a
        folder that already holds a run is refused unless ``resume`` continues it or
        ``overwrite`` deletes it first (``teamplay.training.store.run_folder``). SIGTERM or SIGINT stops
        the run at the next safe point, after checkpointing its last completed step (``Preempted``;
        a second signal stops at once: ``teamplay.training.run.preemption``); with ``signals=False``
        they are left to the caller (a federated site: its server abandons the round). The parts
        are closed when it returns.
        """
        if steps is not None and steps < 1:
            raise ValueError(f"train(steps={steps}): a call takes at least one step (None: to the end)")
        start = time.perf_counter()
        try:
            lock = claim_run_folder(self.run_dir, resume, overwrite)
            try:
                # the call's flag, set by SIGTERM/SIGINT; passed down, so nothing outlives the handlers
                with preemption_handlers() if signals else nullcontext(Preemption()) as preemption:
                    return self._train(resume, start, steps, save or type(self).checkpoint, preemption)
            finally:
                lock.release()
        finally:
            self.close()

    def close(self) -> None:
        """Free what the parts hold (a cluster's actors; the backend the run built, not one passed in).
        ``train`` calls it when it returns; call it yourself after driving ``step`` by hand. Idempotent."""
        self.rollouts.free()  # first: a generator must not outlive the backend or pool it uses
        self.learner.close()
        self.runner.close()  # last: a runner that started a cluster ends it, the in-process one the backend

    def _train(self, resume: str | None, start: float, steps: int | None,
               save: Callable[[Trainer], Path], preemption: Preemption) -> TrainResult:
        resumed = resume is not None and self.run_state.resume(resume)
        # written only once the resume checks passed: a refused resume leaves the run's config as it was
        write_atomically(self.run_dir / "config.yaml",
                         yaml.safe_dump(self.cfg.model_dump(mode="json"), sort_keys=False))
        logger = MetricsLogger(self.run_dir, self.cfg.tensorboard, self.cfg.wandb_project,
                               self.cfg.model_dump(mode="json"))
        # a fresh start (also --resume auto with no checkpoint yet) keeps no line of an earlier attempt;
        # a step preempted in its evaluation loses its lines too: they are written below, once
        logger.truncate_after(self.run_state.logged_through(resumed))
        eval_before = eval_after = None
        history: list[dict[str, Any]] = []

        def check() -> None:  # a safe point of a held-out evaluation: before each of its batches
            preemption.check()
            if self.on_eval_batch is not None:
                self.on_eval_batch()

        try:
            if not resumed and self.warm_start is not None:  # continued or skipped when it ran already
                self.warm_start.run(self.items, self.eval_items, preemption.check, preemption)
            if not resumed and self.eval_items:
                eval_before, first = self.held_out.before(self.eval_items, check)
                logger.log(0, first)
            unlogged = self.run_state.take_unlogged()
            if unlogged is not None:  # preempted during that step's evaluation: evaluate and log it now
                self._log_step(unlogged["step"], unlogged["metrics"], unlogged["episodes"], logger, history,
                               evaluate=bool(self.eval_items), check=check)
                if self.on_step is not None:
                    self.on_step(unlogged["step"], unlogged["metrics"])
            if self.on_start is not None:  # after the evaluations above: they describe the state as restored
                self.on_start(self)
            cadence = Cadence(self.cfg.eval_every, self.cfg.checkpoint_every, steps, bool(self.eval_items))
            taken = 0
            while self._go_on(cadence, taken, preemption):
                result = self.step()
                taken += 1
                metrics, step = result.metrics, result.step
                last, stop = self.run_state.finished, self.nonfinite.tripped  # stop: too many non-finite steps in a row
                self._log_step(step, metrics, self.episode_log(result), logger, history,
                               evaluate=cadence.evaluates(step, ends_run=last or stop), check=check)
                if stop:  # before the checkpoint: the last one written stays the last good one
                    last_good = latest_checkpoint(self.run_dir)
                    raise self.nonfinite.error(step, str(last_good) if last_good is not None else None)
                written = cadence.checkpoint(step, taken, last)
                if written == "call":  # the call ends here
                    save(self)
                elif written == "periodic":
                    self.checkpoint()
                if self.on_step is not None:
                    self.on_step(step, metrics)
            if self.eval_items and self.run_state.finished:
                eval_after, last_line = self.held_out.after(self.eval_items, check)
                logger.log(self.state.step, last_line)
        except StopRequested:  # an evaluation abandoned at a stop asked for by a signal
            raise self.run_state.preempted(preemption) from None
        finally:
            logger.close()
        return TrainResult(self.run_dir, self.state.step, eval_before, eval_after, time.perf_counter() - start, history,
                           steps_run=taken)

    def _go_on(self, cadence: Cadence, taken: int, preemption: Preemption) -> bool:
        """Whether the loop takes another step (``Cadence.another_step``); after a SIGTERM or SIGINT
        the last completed step is checkpointed and ``Preempted`` raised instead."""
        if preemption.requested:
            raise self.run_state.preempted(preemption)
        return cadence.another_step(taken, self.run_state.finished)

    def _log_step(self, step: int, metrics: dict[str, Any], episodes: list[dict[str, Any]], logger: MetricsLogger,
                  history: list[dict[str, Any]], evaluate: bool, check: Callable[[], None]) -> None:
        """The step's held-out evaluation (when ``evaluate``; ``check`` at its safe points: the
        call's ``Preemption.check``), then its lines in metrics.jsonl and
        episodes.jsonl. An evaluation abandoned for a preemption leaves the step unlogged, to be
        evaluated and logged first by the resumed run (``RunState.unlogged_on_stop``)."""
        if evaluate:
            with self.run_state.unlogged_on_stop(step, metrics, episodes):
                metrics.update(self.held_out.at_step(step, self.eval_items, check))
        logger.log(step, metrics)
        logger.log_episodes(step, episodes)
        history.append({"step": step, **metrics})

    def step(self) -> StepResult:
        """One training step, as a pipeline of stages over one ``GroupWork`` per group (see
        ``teamplay.training.step.stages``): rollout -> credit (replays prefetched) -> token credit ->
        samples -> update -> metrics. The three stages after the rollout share one calling
        convention, ``stage(groups, ctx)`` with the step's ``StepContext``: ``credit``
        (``CreditStage``), ``tokens`` (``TokenStage``: informative groups, token credit, samples)
        and ``update`` (``update_stage.UpdateStage``: the learner's update)."""
        self.run_state.share()
        step, t0 = self.state.step, time.perf_counter()
        # G sampled episodes per problem, seeded by the run's seed and the step (``data_order.step_seed``)
        problems, episodes = self.rollouts.take(step, self.items)
        t_rollout = time.perf_counter() - t0
        by_id = {item.id: item for item in problems}
        is_correct = answer_check(self.task, by_id)  # the controllers' regret updates value answers with it
        controller_metrics = self.controllers.learn_step(episodes, is_correct) if self.controllers else {}
        active = active_adapters(self.trainable, step, self.cfg.alternate_roles_every)
        groups = make_groups(episodes, by_id, self.group_hook)
        # an asynchronous source drops groups more than max_staleness versions behind; a synchronous one keeps all
        trained, stale = self.rollouts.keep(groups, active)
        dropped = {ep.group_id for g in stale for ep in g.episodes}
        ctx = StepContext(step, frozenset(active), tuple(ep for ep in episodes if ep.group_id not in dropped))
        work = run_stages((self.credit, self.tokens), trained, ctx)  # advantages, token credit, samples
        t_credit = time.perf_counter() - t0 - t_rollout
        work = self.update(work, ctx)
        metrics = step_metrics(episodes, groups, work, active, self.update.metrics(), self.credit.metrics())
        metrics.update({**controller_metrics, "seconds": time.perf_counter() - t0, "rollout_seconds": t_rollout,
                        "credit_seconds": t_credit, **self.task.counters()})
        metrics.update(self.rollouts.runner_metrics())
        metrics["generated_tokens_total"] = self.run_state.end_step(generated_tokens(metrics))
        self.rollouts.updated(active, metrics["optimizer_steps"])
        metrics.update(self.rollouts.metrics(trained, stale))
        if self.curriculum is not None:  # the difficulty of the next step: raised when the reward says so
            metrics["curriculum"] = self.curriculum.after_step(metrics)
        return StepResult(step=step + 1, metrics=metrics, groups=tuple(work))

    # ----------------------------------------------------------------------------- helpers
    def episode_log(self, result: StepResult) -> list[dict[str, Any]]:
        """The first ``log_episodes`` credited episodes of a step as episodes.jsonl lines
        (``teamplay.training.step.episode_log``)."""
        return episode_lines(result.credited, result.token_advantages, self.cfg.log_episodes, self.credit.record,
                             self.team_model)

    def _play(self, played: WiredRun, new_pass: bool) -> None:
        """Play the training episodes from the next step on as ``played`` wires them (a curriculum
        stage's: ``Curriculum``): its task, items and env factory, the runner's backend, and the
        credit stage built on them; ``new_pass``: the items are new, so the data order starts a pass
        over them. The team model, optimiser and held-out evaluation stay as they are."""
        self.task, self.items, self.make_env = played.task, played.items, played.make_env
        self.credit = self.credit.played(played)
        # the in-process runner (the config refuses a curriculum with `distributed:` or async rollouts)
        self.runner.play(played.make_env, played.backend)
        if new_pass:
            self.run_state.new_pass(len(played.items))

    def _before_evaluation(self, label: str) -> None:
        """Before each held-out evaluation (``held_out``): the learner's copies take this trainer's
        state, then ``on_eval(label)``."""
        self.run_state.share()
        if self.on_eval is not None:
            self.on_eval(label)

    # ------------------------------------------------------------------- the run's state
    def checkpoint(self, number: int | None = None, extra: dict[str, Any] | None = None,
                   tensors: dict[str, Any] | None = None, prune: bool = True) -> Path:
        """Write a checkpoint of the run as it is now; ``number`` names it (default: the step),
        ``extra`` joins its ``extra_state.json``, ``tensors`` its ``extra_tensors``; ``prune``: keep
        only the last ``keep_checkpoints`` (``RunState.save``)."""
        return self.run_state.save(number, extra, tensors, prune)

    def restore(self, data: LoadedCheckpoint) -> None:
        """Continue from a loaded checkpoint (``checkpoint.load_checkpoint``; ``RunState.restore``): a
        ``TeamplayError`` when it does not fit this team (``train(resume=...)`` checks the config first)."""
        self.rollouts.close()  # what it generated ahead belongs to the state left behind
        self.run_state.restore(data)
