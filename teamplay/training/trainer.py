"""The teamplay trainer: credit-driven GRPO/GSPO on per-role LoRA adapters of one base model.

What one step really does:

    1. take the next B problems of the (seeded, reshuffled each pass) training set;
    2. run G team episodes per problem through the RolloutRunner (sampled decoding); every
       generated message keeps the behaviour log-probs of the policy that generated it;
    3. score them (the env already did: team reward = verifier score of the final answer);
    4. the configured credit method turns each group's rewards into one advantage per message;
       groups whose rewards are all equal carry no signal and are dropped (counted in metrics);
       with `credit.token`, one batched no-grad pass computes the token statistics the token
       method declares (entropies, reference or teacher log-probs, ...) and the token method
       spreads each message's advantage over its tokens (for the listed roles; the others keep
       one advantage per message, in the same step);
    5. for `epochs` passes over shuffled minibatches of messages, each minibatch split by the
       adapter that wrote each message: log-probs under the current adapter, the reference
       log-probs with adapters disabled (only when the KL weight is > 0), the GRPO (token ratio)
       or GSPO (sequence ratio) clipped loss, backward; every `grad_accum` minibatches one AdamW
       step with gradient clipping. A non-finite loss or gradient skips that optimiser step so it
       never reaches the adapters (recorded in the metrics, one warning per step); after
       `optim.max_nonfinite_steps` such steps in a row the run stops with an error before it
       checkpoints (``teamplay.training.nonfinite``);
    6. log metrics (with the step's reward and advantage ranges), evaluate on held-out problems
       every `eval_every` steps, checkpoint every `checkpoint_every` steps (atomically). A SIGTERM
       or SIGINT is read between steps (and abandons a held-out evaluation): the last completed
       step is checkpointed and the run stops, to resume exactly (``teamplay.training.preemption``).

With `controllers.enabled`, the rollouts of step 2 ask a learned speak/skip controller before each
skippable turn (sampling its current strategy; a skipped review or debate turn is generated anyway,
in the same batched call, to value the unchosen speak), and right after the rollouts, before the
credit and the LoRA update, the controller tables take one regret update per logged decision
(`teamplay.training.controllers`). The tables do not enter the loss, so the order only matters for
what the metrics of a step describe. They are saved in each checkpoint's `extra_state.json` under
"controllers" and restored exactly on resume.

The ratio in step 5 is between the current weights and the weights that generated the rollout,
so with several epochs it moves away from 1 and the clip is active (unlike implementations that
recompute "old" log-probs right before the step). Frozen roles' adapters and the base weights are
never in the optimiser.

In code, the step is a pipeline of named stages over one record per group (``GroupWork``, in
``teamplay.training.stages``): rollout -> credit (replays prefetched) -> token credit -> samples ->
update -> metrics; the update goes through the trainer's ``updater`` (a ``stages.Learner``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from teamplay.config import TrainConfig
from teamplay.credit import CreditBatch, CreditResources, assign, check_credit, get_credit
from teamplay.credit.characteristic import last_answer_scorer
from teamplay.credit.token import get_token_credit
from teamplay.credit.token.base import parse_token_options
from teamplay.envs.tasks.base import Task
from teamplay.errors import ConfigError, TeamplayWarning
from teamplay.records import Episode, TaskItem
from teamplay.training.answer_probability import AnswerProbability
from teamplay.training.atomic import write_atomically
from teamplay.training.checkpoint import (
    CheckpointError,
    LoadedCheckpoint,
    TrainerState,
    checkpoint_dir,
    latest_checkpoint,
    load_checkpoint,
    newest_intact_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from teamplay.training.controllers import speak_rates
from teamplay.training.evaluation import EvalMetrics, cached_untrained_eval, evaluate
from teamplay.training.metrics import MetricsLogger, generated_tokens
from teamplay.training.nonfinite import NonFiniteGuard, check_finite_adapters
from teamplay.training.preemption import UNLOGGED_STEP, Preempted, Preemption, StopRequested, preemption_handlers
from teamplay.training.replay import RolloutReplayEngine
from teamplay.training.rollout import RolloutJob, RolloutRunner
from teamplay.training.run_folder import claim_run_folder
from teamplay.training.samples import PolicySample, TokenRule
from teamplay.training.setup import (
    build_run,
    sampling_params,
    validate_run,
)
from teamplay.training.stages import (
    GroupWork,
    Learner,
    all_credited,
    all_samples,
    all_token_rows,
    make_groups,
    resolve_token_rows,
    token_credit,
    with_samples,
)
from teamplay.training.stages import (
    group_episodes as group_episodes,  # re-exported: benchmarks group episodes as the step does
)
from teamplay.training.token_stats import text_offsets
from teamplay.training.update import PolicyUpdater


@dataclass(frozen=True)
class StepResult:
    """What one ``Trainer.step()`` did.

    Fields:
        step: the number of steps done after it (1 after the first).
        metrics: the step's metrics (JSON-ready), as logged to metrics.jsonl.
        credited: every (episode, advantages [T]) pair that entered the update, in group order;
            groups without reward variance are not credited.
        token_advantages: with token-level credit, aligned with ``credited``: per episode, per
            message its token advantages [C] or ``None`` (the scalar on every token); else ``None``.
        groups: the stage records of the credited groups, in the same order (``GroupWork``: the
            episodes, item, rewards, scale, advantages, token rows and samples of each group).
    """

    step: int
    metrics: dict[str, Any]
    credited: tuple[tuple[Episode, np.ndarray], ...]
    token_advantages: tuple[tuple[np.ndarray | None, ...], ...] | None = None
    groups: tuple[GroupWork, ...] = ()


@dataclass
class TrainResult:
    """What a finished (or resumed and finished) run reports."""

    run_dir: Path
    steps: int
    eval_before: EvalMetrics | None
    eval_after: EvalMetrics | None
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)


class Trainer:
    """Trains a team from a ``TrainConfig``.

    ``team_model`` and ``backend`` may be passed in (tests pass a tiny model); otherwise they are
    built from the config. ``task`` with ``items`` (and ``eval_items``) replace the config's task
    sections, for a task defined in Python. ``on_step(step, metrics)`` is called after each step.

    Two parts do the step's outside work, each behind a small interface: ``runner`` produces the
    episodes (``run(jobs, seed=...)``: the in-process lock-step runner, or a pool of workers) and
    ``updater`` applies the update (a ``stages.Learner``: ``PolicyUpdater`` in-process, or a
    distributed learner group). The step's stages are the methods under "the step's stages".
    """

    #: per-message token methods (``row``) are applied inside the update, from its own forward pass;
    #: a trainer whose update runs elsewhere (learner ranks) computes token statistics up front
    resolves_token_rules = True

    def __init__(self, cfg: TrainConfig, team_model=None, backend=None, task: Task | None = None,
                 items: Sequence[TaskItem] | None = None, eval_items: Sequence[TaskItem] | None = None,
                 on_step: Callable[[int, dict[str, Any]], None] | None = None,
                 on_eval: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg
        # the config model checked its cross-field rules at load; what needs the registries (credit
        # method, its options, resources and protocol) is checked here, before data or model load
        validate_run(cfg)
        seed_everything(cfg.seed)
        parts = build_run(cfg, team_model=team_model, backend=backend, task=task, items=items,
                          eval_items=eval_items, rules_in_update=self.resolves_token_rules)
        self.task, self.items = parts.task, parts.items
        self.eval_task, self.eval_items = parts.eval_task, parts.eval_items
        self.controllers, self.team, self.team_model = parts.controllers, parts.team, parts.team_model
        self.make_env, self.make_eval_env = parts.make_env, parts.make_eval_env
        self.backend, self.runner = parts.backend, parts.runner
        self._token_keeps_zero_variance = False
        self._token_rule: TokenRule | None = None
        if cfg.credit.token is not None:
            method = get_token_credit(cfg.credit.token.method)
            token_options = parse_token_options(method, cfg.credit.token.options)
            self._token_keeps_zero_variance = method.wants_zero_variance_groups(token_options)
            if method.row is not None and self.resolves_token_rules:
                # a per-message method: the update applies it from its own forward pass, no extra pass
                self._token_rule = TokenRule(method.name, token_options)
        # TeamModel.from_team froze the adapters of frozen roles (and refused conflicting ones)
        self.trainable = [a for a in self.team_model.adapter_names if a not in self.team_model.frozen]
        self.credit_options = check_credit(cfg.credit.method, cfg.credit.options, None, None)  # parsed
        self.credit_needs = get_credit(cfg.credit.method).requires(self.credit_options)
        self.replay = None
        if "replay" in self.credit_needs:  # counterfactual re-executions with the current policies
            self.replay = RolloutReplayEngine(self.make_env, self.backend, sampling_params(cfg.sampling),
                                              max_batch=cfg.backend.max_batch, seed=cfg.seed)
        self.answer_probability = None
        if "answer_probability" in self.credit_needs:
            self.answer_probability = AnswerProbability(
                self.team_model, self.team, {it.id: it for it in self.items}, self.task.answer_instruction,
                max_prompt_tokens=cfg.backend.max_prompt_tokens)
        self.params = {a: self.team_model.adapter_parameters(a) for a in self.trainable}
        self.optimizer = torch.optim.AdamW(
            [p for a in self.trainable for p in self.params[a]], lr=cfg.optim.lr,
            weight_decay=cfg.optim.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.updater: Learner = PolicyUpdater(cfg, self.team_model, self.params, self.optimizer)
        #: consecutive steps with skipped non-finite updates; the loop stops the run at its limit
        self.nonfinite = NonFiniteGuard(cfg.optim.max_nonfinite_steps)
        self.run_dir = Path(cfg.output_dir)
        self.on_step = on_step
        self.on_eval = on_eval
        self.state = TrainerState(step=0, data_order=self._data_order(0), data_cursor=0, data_epoch=0)
        self.extra_state: dict[str, Any] = {}
        #: the step of the checkpoint written or restored last (a preempted run writes one if it is behind)
        self._saved_step: int | None = None
        #: set by SIGTERM/SIGINT while ``train`` runs (``teamplay.training.preemption``)
        self.preemption = Preemption()
        # group_hook(item, rewards [G]) -> scale: sees every group of a step (signal or not) and
        # scales its advantages; federated sites record reward statistics and calibrate with it
        self.group_hook: Callable[[TaskItem, np.ndarray], float] | None = None

    # ----------------------------------------------------------------------------- the loop
    def train(self, resume: str | None = None, overwrite: bool = False) -> TrainResult:
        """Run until ``cfg.steps``; ``resume`` = "auto" (latest intact checkpoint if any) or a folder.

        The run folder is locked for the whole call (a second trainer on it stops at once); a
        folder that already holds a run is refused unless ``resume`` continues it or
        ``overwrite`` deletes it first (``teamplay.training.run_folder``). SIGTERM or SIGINT stops
        the run at the next safe point, after checkpointing its last completed step (``Preempted``;
        a second signal stops at once: ``teamplay.training.preemption``).
        """
        start = time.perf_counter()
        lock = claim_run_folder(self.run_dir, resume, overwrite)
        try:
            with preemption_handlers() as self.preemption:
                return self._train(resume, start)
        finally:
            self.preemption = Preemption()  # the handlers are gone: nothing sets this one
            lock.release()

    def _train(self, resume: str | None, start: float) -> TrainResult:
        resumed_from = self._resume(resume) if resume else None
        # written only once the resume checks passed: a refused resume leaves the run's config as it was
        write_atomically(self.run_dir / "config.yaml",
                         yaml.safe_dump(self.cfg.model_dump(mode="json"), sort_keys=False))
        logger = MetricsLogger(self.run_dir, self.cfg.tensorboard, self.cfg.wandb_project,
                               self.cfg.model_dump(mode="json"))
        # a fresh start (also --resume auto with no checkpoint yet) keeps no line of an earlier attempt
        kept = self.state.step if resumed_from is not None else -1
        if UNLOGGED_STEP in self.extra_state:
            kept -= 1  # a step preempted in its evaluation: its lines are written below, once
        logger.truncate_after(kept)
        eval_before = eval_after = None
        curve = self._curve_items()
        history: list[dict[str, Any]] = []
        try:
            if resumed_from is None and self.eval_items:
                eval_before = self._evaluate_untrained()
                first = {"heldout": eval_before.to_dict()}
                if curve is not None:
                    first["heldout_curve"] = self._evaluate_untrained(curve).to_dict()
                logger.log(0, first)
            unlogged = self.extra_state.pop(UNLOGGED_STEP, None)
            if unlogged is not None:  # preempted during that step's evaluation: evaluate and log it now
                self._log_step(unlogged["step"], unlogged["metrics"], unlogged["episodes"], logger, history,
                               curve, evaluate=bool(self.eval_items))
                if self.on_step is not None:
                    self.on_step(unlogged["step"], unlogged["metrics"])
            while self._go_on():
                result = self.step()
                metrics, step = result.metrics, result.step
                last = self.finished
                stop = self.nonfinite.tripped  # too many non-finite steps in a row: log, then stop
                due = bool(self.eval_items and self.cfg.eval_every and step % self.cfg.eval_every == 0)
                self._log_step(step, metrics, self.episode_log(result), logger, history, curve,
                               evaluate=due and not (last or stop))
                if stop:  # before the checkpoint: the last one written stays the last good one
                    last_good = latest_checkpoint(self.run_dir)
                    raise self.nonfinite.error(step, str(last_good) if last_good is not None else None)
                if step % self.cfg.checkpoint_every == 0 or last:
                    self._checkpoint()
                if self.on_step is not None:
                    self.on_step(step, metrics)
            if self.eval_items:
                eval_after = self._evaluate("after")
                last_line = {"heldout_final": eval_after.to_dict()}
                if curve is not None:
                    last_line["heldout_curve"] = self._evaluate("after (curve)", curve).to_dict()
                logger.log(self.state.step, last_line)
        except StopRequested:  # an evaluation abandoned at a stop asked for by a signal
            raise self._preempted() from None
        finally:
            logger.close()
        return TrainResult(self.run_dir, self.state.step, eval_before, eval_after,
                           time.perf_counter() - start, history)

    def _go_on(self) -> bool:
        """Whether the loop takes another step: not once ``finished``, and not after a SIGTERM or
        SIGINT (then the last completed step is checkpointed and ``Preempted`` raised)."""
        if self.preemption.requested:
            raise self._preempted()
        return not self.finished

    def _log_step(self, step: int, metrics: dict[str, Any], episodes: list[dict[str, Any]], logger: MetricsLogger,
                  history: list[dict[str, Any]], curve: Sequence[TaskItem] | None, evaluate: bool) -> None:
        """The step's held-out evaluation (when ``evaluate``), then its lines in metrics.jsonl and
        episodes.jsonl. An evaluation abandoned for a preemption leaves the step unlogged: its lines
        wait in ``extra_state`` (saved with the checkpoint), with the RNG as before the evaluation,
        and the resumed run evaluates and logs them first, as this run would have."""
        if evaluate:
            rng = rng_state()
            try:
                heldout = self._evaluate(f"step {step}", curve).to_dict()
            except StopRequested:
                set_rng_state(rng)
                self.extra_state[UNLOGGED_STEP] = json.loads(json.dumps(
                    {"step": step, "metrics": metrics, "episodes": episodes}, default=float))
                raise
            metrics["heldout"] = heldout
            if curve is not None:
                metrics["heldout_curve"] = heldout
        logger.log(step, metrics)
        logger.log_episodes(step, episodes)
        history.append({"step": step, **metrics})

    def _preempted(self) -> Preempted:
        """Checkpoint the last completed step (unless written already) and say where the run stopped."""
        assert self.preemption.signum is not None
        step = self.state.step
        if step == 0:
            return Preempted(self.preemption.signum, "before the first step finished; no checkpoint written yet")
        if self._saved_step != step:
            self._checkpoint()
        return Preempted(self.preemption.signum,
                         f"after step {step}; checkpoint {checkpoint_dir(self.run_dir, step).name} written")

    @property
    def finished(self) -> bool:
        """True once ``steps`` steps ran or the generated tokens reached ``token_budget``."""
        budget = self.cfg.token_budget
        return self.state.step >= self.cfg.steps or (budget is not None and self.state.generated_tokens >= budget)

    def step(self) -> StepResult:
        """One training step, as a pipeline of stages over one ``GroupWork`` per group (see
        ``teamplay.training.stages``): rollout -> credit (replays prefetched) -> token credit ->
        samples -> update -> metrics. Each stage is a method or function that can be read alone."""
        step, t0 = self.state.step, time.perf_counter()
        problems = self._next_problems(self.cfg.rollout.problems_per_step)
        episodes = self._rollout(problems, step)
        t_rollout = time.perf_counter() - t0
        by_id = {item.id: item for item in problems}
        controller_metrics = self._learn_controllers(episodes, by_id) if self.controllers else {}
        active = self._active_adapters(step)
        groups = make_groups(episodes, by_id, self.group_hook)
        work = self._credit([g for g in groups if g.has_signal or self._token_keeps_zero_variance], episodes, step)
        work = self._samples(self._token_credit(work, active), active)
        t_credit = time.perf_counter() - t0 - t_rollout
        work, update = self._update(work, step, active)
        metrics = self._metrics(episodes, groups, work, active, update)
        metrics.update({**controller_metrics, "seconds": time.perf_counter() - t0, "rollout_seconds": t_rollout,
                        "credit_seconds": t_credit})
        spent = self.state.generated_tokens + generated_tokens(metrics)
        metrics["generated_tokens_total"] = spent
        self.state = dataclasses.replace(self.state, step=step + 1, generated_tokens=spent)
        return StepResult(step=step + 1, metrics=metrics, credited=all_credited(work),
                          token_advantages=all_token_rows(work), groups=tuple(work))

    # ------------------------------------------------------------------ the step's stages
    def _rollout(self, problems: Sequence[TaskItem], step: int) -> list[Episode]:
        """G team episodes per problem (sampled decoding), seeded by the run's seed and the step."""
        # the problem's position is in the group id: a problem drawn twice in one step (a small
        # training set) makes two groups, not one group of 2G
        jobs = [RolloutJob(item=item, group_id=f"s{step}:{k}:{item.id}")
                for k, item in enumerate(problems) for _ in range(self.cfg.rollout.group_size)]
        return self.runner.run(jobs, seed=self.cfg.seed * 1_000_003 + step)

    def _credit(self, groups: Sequence[GroupWork], episodes: Sequence[Episode], step: int) -> list[GroupWork]:
        """The credit method's advantages for each group, times the group's scale. Every batch
        carries the step's rewards (``batch_rewards``, for ``scale_rewards: batch``); with replay
        credit, every replay the method will ask for runs first, in one batch."""
        step_rewards = tuple(float(ep.reward) for ep in episodes)
        groups = [dataclasses.replace(g, batch=CreditBatch(
            episodes=g.episodes, item=g.item, score=self.task.score, extract=self.task.extract,
            resources=dataclasses.replace(self._credit_resources(g.item), batch_rewards=step_rewards)))
            for g in groups]
        if self.replay is not None:
            self._prefetch_replays([g.batch for g in groups], step, sum(ep.tokens for ep in episodes))
        out = []
        for g in groups:
            advantages = assign(self.cfg.credit.method, g.batch, self.credit_options)
            if g.scale != 1.0:
                advantages = [a * g.scale for a in advantages]
            out.append(dataclasses.replace(g, advantages=tuple(advantages)))
        return out

    def _token_credit(self, groups: list[GroupWork], active: set[str]) -> list[GroupWork]:
        """With ``credit.token`` (and no token rule the update applies itself): token statistics in
        one batched pass, then the token method per group (``stages.token_credit``)."""
        token = self.cfg.credit.token
        if token is None or not groups or self._token_rule is not None:
            return groups
        return token_credit(groups, self.team_model, token, active, self.cfg.sampling.temperature,
                            chunk=max(1, min(8, self.cfg.optim.minibatch_size)))

    def _samples(self, groups: list[GroupWork], active: set[str]) -> list[GroupWork]:
        """Each group's policy samples; a token rule goes to the listed roles' samples."""
        token = self.cfg.credit.token
        rule_roles = set(token.roles) if token is not None and token.roles is not None else None
        return with_samples(groups, active, self._token_rule, rule_roles)

    def _update(self, groups: list[GroupWork], step: int, active: set[str]) -> tuple[list[GroupWork], dict[str, Any]]:
        """The learner's update on the step's samples (``updater``, a ``stages.Learner``), the token
        rows a token rule resolved in it, the backend's adapters synced, the schedule advanced."""
        samples = all_samples(groups)
        update = self.updater.update(samples, step) if samples else {"optimizer_steps": 0}
        # warns (one line) for a step whose loss or gradient was not finite; counts them in a row
        update = {**update, "nonfinite_streak": self.nonfinite.observe(step + 1, update)}
        if self._token_rule is not None and groups:
            groups = resolve_token_rows(groups, self.updater.resolved_tokens, active)
        if update["optimizer_steps"]:
            self.backend.sync_adapters()  # a vLLM backend reloads the adapters it generates with
        with warnings.catch_warnings():
            # the schedule advances per trainer step, also when a step made no optimiser update
            # (all groups without signal): torch warns about that order, which is intended here.
            warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
            self.scheduler.step()
        return groups, update

    def _metrics(self, episodes: Sequence[Episode], groups: Sequence[GroupWork], work: Sequence[GroupWork],
                 active: set[str], update: dict[str, Any]) -> dict[str, Any]:
        """The step's metrics (JSON-ready) over all ``groups`` and the credited ``work``."""
        rewards = [ep.reward for ep in episodes]
        samples = all_samples(work)
        return {
            "reward_mean": float(np.mean(rewards)),
            "reward_std": float(np.std(rewards)),
            "reward_min": float(np.min(rewards)),
            "reward_max": float(np.max(rewards)),
            "accuracy": float(np.mean([r > 0.5 for r in rewards])),
            "groups": len(groups),
            "zero_variance_groups": sum(not g.has_signal for g in groups),
            "samples": len(samples),
            "trained_adapters": sorted(active),
            **role_credit_metrics(all_credited(work)),
            **advantage_range(all_credited(work)),
            **token_credit_metrics(samples),
            **update,
            "lr": self.scheduler.get_last_lr()[0],
            "tokens": sum(ep.tokens for ep in episodes),
            **(self.replay.stats.to_dict() if self.replay is not None else {}),
        }

    def episode_log(self, result: StepResult) -> list[dict[str, Any]]:
        """The first ``log_episodes`` credited episodes of a step as episodes.jsonl lines (with their
        token advantages and token text pieces under token-level credit)."""
        lines = []
        for i, (ep, adv) in enumerate(result.credited[:self.cfg.log_episodes]):
            line = {**ep.to_dict(), "advantages": [float(a) for a in adv], "credit": self._credit_record(ep)}
            if result.token_advantages is not None:
                line.update(self._token_log(ep, result.token_advantages[i]))
            lines.append(line)
        return lines

    def _token_log(self, ep: Episode, rows: Sequence[np.ndarray | None]) -> dict[str, Any]:
        """Token advantages and the text piece of each token (for the report's token shading)."""
        pieces: list[list[str] | None] = []
        for msg, row in zip(ep.messages, rows, strict=True):
            if row is None:
                pieces.append(None)
                continue
            _, ends = text_offsets(self.team_model.tokenizer, msg.completion_ids)
            text = self.team_model.tokenizer.decode(list(msg.completion_ids), skip_special_tokens=True)
            starts = np.concatenate([[0], ends[:-1]])
            pieces.append([text[a:b] for a, b in zip(starts, ends, strict=True)])
        return {"token_advantages": [None if r is None else [round(float(x), 6) for x in r] for r in rows],
                "token_pieces": pieces}

    def _learn_controllers(self, episodes: Sequence[Episode], by_id: dict[str, TaskItem]) -> dict[str, Any]:
        """Regret updates from this step's decision logs; the step's controller metrics."""
        assert self.controllers is not None
        task = self.task

        def judge(answer: str, problem_id: str) -> bool:
            return task.score_answer(answer, by_id[problem_id]) >= 0.5

        stats = self.controllers.learn(episodes, judge)
        return {"speak_rate": speak_rates(episodes),
                "speak_prob_average": self.controllers.summary(),
                "controller_updates": stats.updates,
                "counterfactual_tokens": stats.counterfactual_tokens}

    # ----------------------------------------------------------------------------- helpers
    def _lr_factor(self, step: int) -> float:
        cfg = self.cfg.optim
        if cfg.warmup_steps and step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.schedule == "constant":
            return 1.0
        span = max(1, self.cfg.steps - cfg.warmup_steps)
        progress = min(1.0, (step - cfg.warmup_steps) / span)
        if cfg.schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    def _active_adapters(self, step: int) -> set[str]:
        k = self.cfg.alternate_roles_every
        if not k:
            return set(self.trainable)
        return {self.trainable[(step // k) % len(self.trainable)]}

    def _data_order(self, epoch: int) -> tuple[int, ...]:
        return tuple(int(i) for i in np.random.default_rng([self.cfg.seed, epoch]).permutation(len(self.items)))

    def _next_problems(self, n: int) -> list[TaskItem]:
        order, cursor, epoch = self.state.data_order, self.state.data_cursor, self.state.data_epoch
        picked = []
        while len(picked) < n:
            if cursor >= len(order):
                epoch += 1
                order, cursor = self._data_order(epoch), 0
            picked.append(self.items[order[cursor]])
            cursor += 1
        self.state = dataclasses.replace(self.state, data_order=order, data_cursor=cursor, data_epoch=epoch)
        return picked

    def _curve_items(self) -> list[TaskItem] | None:
        """The held-out problems of the learning curve (``eval_curve_limit``), or None."""
        limit = self.cfg.eval_curve_limit
        return None if limit is None or not self.eval_items else list(self.eval_items[:limit])

    def _evaluate_untrained(self, items: Sequence[TaskItem] | None = None) -> EvalMetrics:
        """The held-out evaluation before training, read from ``eval_cache`` when a run with the same
        untrained team stored it (not with ``model.checkpoint``: its adapters are not fresh). ``items``:
        the learning curve's first problems instead of all (cached under their own key)."""
        label = "before" if items is None else "before (curve)"
        if self.cfg.eval_cache is None or self.cfg.model.checkpoint is not None:
            return self._evaluate(label, items)
        config = self.cfg.model_dump(mode="json")
        if items is not None:  # the first N distinct problems: the same evaluation as eval_task.limit = N
            config["eval_task"] = {**(config.get("eval_task") or {}), "limit": len(items), "curve": True}
        return cached_untrained_eval(Path(self.cfg.eval_cache), config, lambda: self._evaluate(label, items))

    def _evaluate(self, label: str, items: Sequence[TaskItem] | None = None) -> EvalMetrics:
        """The held-out evaluation of the current team on ``items`` (default: every held-out problem)."""
        if self.on_eval is not None:
            self.on_eval(label)
        runner = RolloutRunner(self.make_eval_env, self.backend, sampling_params(self.cfg.eval_sampling),
                               max_batch=self.cfg.backend.max_batch, before_generate=self.preemption.check)
        _, metrics = evaluate(runner, self.eval_task, self.eval_items if items is None else items,
                              seed=self.cfg.seed)
        return metrics

    def _prefetch_replays(self, batches: Sequence[CreditBatch], step: int, rollout_tokens: int) -> None:
        """Every replay the step's credit will ask for, in one batch (``RolloutReplayEngine.prefetch``)."""
        assert self.replay is not None
        self.replay.begin_step(step, rollout_tokens)
        self.replay.prefetch(lambda batch: assign(self.cfg.credit.method, batch, self.credit_options), batches)

    def _credit_record(self, episode: Episode) -> dict[str, Any]:
        """How the episode's messages were valued, for reports: the method and, for replay-based
        methods, every counterfactual value behind the advantages (coalition, start, value, k)."""
        record: dict[str, Any] = {"method": self.cfg.credit.method,
                                  "options": self.credit_options.model_dump(mode="json")}
        if self.replay is not None:
            record["replay_values"] = self.replay.coalition_values(episode)
        return record

    def _credit_resources(self, item: TaskItem) -> CreditResources:
        """What expensive credit methods may ask for (``setup.TRAINER_RESOURCES``): a verifier scorer of
        masked transcripts (the last answer still visible, scored against this item) and the
        generation backend."""
        task = self.task
        return CreditResources(
            transcript_scorer=last_answer_scorer(lambda answer: task.score_answer(answer, item)),
            backend=self.backend, replay=self.replay, answer_probability=self.answer_probability)

    def _checkpoint(self) -> Path:
        check_finite_adapters(self.params, f"checkpoint step {self.state.step}")
        if self.controllers is not None:
            self.extra_state["controllers"] = self.controllers.state_dict()
        path = save_checkpoint(self.run_dir, self.state, self.team_model, self.optimizer, self.scheduler,
                               self.extra_state, self.cfg.model_dump(mode="json"), self.cfg.keep_checkpoints)
        self._saved_step = self.state.step
        return path

    def _resume(self, resume: str) -> Path | None:
        """Restore the newest intact checkpoint (``resume="auto"``) or the one at ``resume``.

        ``auto`` skips damaged checkpoints with a ``CheckpointWarning`` naming the bad file and
        continues the newest intact one; a damaged explicit path, a config that differs from the
        checkpoint's in a field that shapes the run, or state that does not fit this team is a
        ``TeamplayError``. Returns None when ``auto`` finds no checkpoint (a fresh run).
        """
        if resume == "auto":
            path, damaged = newest_intact_checkpoint(self.run_dir)
            for exc in damaged:
                warnings.warn(CheckpointWarning(f"skipping damaged checkpoint: {exc}"), stacklevel=2)
            if path is None:
                if damaged:
                    raise CheckpointError(f"--resume auto: every checkpoint of {self.run_dir} is damaged "
                                          f"({damaged[-1]}); start over with --overwrite")
                return None
        else:
            path = Path(resume)
            if not path.is_dir():
                raise ConfigError(f"--resume {resume}: no such checkpoint folder")
        data = load_checkpoint(path)
        check_resumable(self.cfg.model_dump(mode="json"), with_defaults(type(self.cfg), data.config), path)
        self._restore(data)
        return path

    def _restore(self, data: LoadedCheckpoint) -> None:
        path = data.path
        if self.controllers is not None and "controllers" not in data.extra:
            raise ConfigError(f"--resume: checkpoint {path} has no controller tables but "
                              f"controllers.enabled is true; resume with the run's own config")
        self.team_model.load_adapters(path / "adapters")
        try:
            self.optimizer.load_state_dict(data.optimizer)
            self.scheduler.load_state_dict(data.scheduler)
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"--resume: the optimizer state of {path} does not fit this team's "
                                  f"adapters ({exc}); resume with the run's own config") from None
        set_rng_state(data.rng)
        self.state = data.state
        self._saved_step = data.state.step
        self.extra_state = dict(data.extra)
        if self.controllers is not None:
            self.controllers.load_state_dict(self.extra_state["controllers"])


class CheckpointWarning(TeamplayWarning):
    """A checkpoint was skipped on ``--resume auto`` because it is damaged; the message names the file."""


#: config fields a resumed run may change: how long it runs and what it logs, never what it learns
RESUMABLE_CHANGES = ("steps", "token_budget", "output_dir", "eval_cache", "eval_task", "eval_sampling", "eval_every",
                     "eval_curve_limit",
                     "checkpoint_every", "keep_checkpoints", "log_episodes", "tensorboard", "wandb_project",
                     # when a run gives up on non-finite steps, not what it learns
                     "optim.max_nonfinite_steps",
                     # the checkpoint format is the same with or without Ray
                     "backend.max_batch", "model.checkpoint", "model.device", "distributed")


def with_defaults(config_class: type[TrainConfig], saved: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's config with the fields added since it was written at their defaults (a new
    field's default keeps the old behaviour), so a newer version resumes an older run; a config that
    no longer validates is returned as it is, and ``check_resumable`` names what differs."""
    try:
        return config_class.model_validate(saved).model_dump(mode="json")
    except (ValueError, TypeError):
        return saved


def check_resumable(current: dict[str, Any], saved: dict[str, Any], path: Path) -> None:
    """Raise ``ConfigError`` when ``current`` differs from the checkpoint's config in a field
    outside ``RESUMABLE_CHANGES`` (the team, model, LoRA, data, credit, loss, optimiser, seed...):
    the saved state would then mean something else, or not fit at all."""
    mine, theirs = _flatten_config(current), _flatten_config(saved)
    for key in sorted(set(mine) | set(theirs)):
        if any(key == f or key.startswith(f + ".") for f in RESUMABLE_CHANGES):
            continue
        if mine.get(key, "(absent)") != theirs.get(key, "(absent)"):
            raise ConfigError(f"--resume: {key} is {mine.get(key, '(absent)')!r} but checkpoint {path} was "
                              f"trained with {theirs.get(key, '(absent)')!r}; resume with the run's own config "
                              f"(its config.yaml) or train into a new --output folder")


def _flatten_config(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten_config(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch's global generators (torch picks a random seed per process
    otherwise). Rollouts and minibatch orders use their own seeded generators; this covers
    everything else, e.g. a user's task code."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def role_credit_metrics(credited: Sequence[tuple[Episode, np.ndarray]]) -> dict[str, Any]:
    """Per-role mean advantage and credit share.

    credit share of a role = sum of |advantage| of its messages / sum over all messages: the part
    of the learning signal that role received this step.
    """
    total: dict[str, float] = defaultdict(float)
    absolute: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for ep, adv in credited:
        for msg, a in zip(ep.messages, adv, strict=True):
            total[msg.role] += float(a)
            absolute[msg.role] += abs(float(a))
            count[msg.role] += 1
    norm = sum(absolute.values())
    return {
        "adv_mean": {r: total[r] / count[r] for r in count},
        "credit_share": {r: (absolute[r] / norm if norm > 0 else 0.0) for r in count},
    }


def advantage_range(credited: Sequence[tuple[Episode, np.ndarray]]) -> dict[str, float | None]:
    """``adv_min``/``adv_max``: the smallest and largest message advantage of the step's credited
    episodes (group scale included; ``None`` when no group was credited), so that credit which
    blows up shows in metrics.jsonl before it turns into a non-finite loss."""
    values = np.concatenate([np.asarray(adv, dtype=np.float64) for _, adv in credited] or [np.empty(0)])
    if not values.size:
        return {"adv_min": None, "adv_max": None}
    return {"adv_min": float(values.min()), "adv_max": float(values.max())}


def token_credit_metrics(samples: Sequence[PolicySample]) -> dict[str, Any]:
    """How much token credit moved: the number of messages with token advantages and the mean,
    over them, of the within-message std of the token advantages divided by |message advantage|
    (0 = uniform tokens, as message-level credit), and the range of the token advantages
    (``token_adv_min``/``token_adv_max``). Empty when no sample has token advantages."""
    spread = [float(np.std(s.token_advantages)) / abs(s.advantage)
              for s in samples if s.token_advantages is not None and s.advantage != 0]
    rows = [np.asarray(s.token_advantages, dtype=np.float64) for s in samples if s.token_advantages is not None]
    if not rows:
        return {}
    tokens = np.concatenate(rows)
    return {"token_credit_messages": len(rows), "token_adv_relative_spread": float(np.mean(spread)) if spread else 0.0,
            "token_adv_min": float(tokens.min()) if tokens.size else None,
            "token_adv_max": float(tokens.max()) if tokens.size else None}

