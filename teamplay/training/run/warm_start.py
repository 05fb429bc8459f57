"""The warm start: supervised fine-tuning of each role's adapter on its own messages before RL
(``warm_start:``; ``teamplay sft`` runs it alone).

What it really does:

    1. evaluate the team on the held-out problems (greedy, as the trainer's evaluations);
    2. play one episode per problem on the first ``episodes`` training problems (a seeded order of
       its own): with ``source: teacher`` a team of the protocol's scripted teachers
       (``teamplay.envs.teachers``; ``play.warm_data.TeacherBackend`` records the token ids the model
       would have written their texts as), with ``source: rejection`` the team itself, sampled with
       the training decoding, keeping the episodes whose team reward reaches ``threshold``. Teachers
       always play with the channel on, also in a no-channel arm (``protocol.channel: false``): a
       teacher demonstrates the protocol (the relay's answerer sums the numbers it reads), and the arm
       withholds messages from its RL episodes and evaluations, so the channel arm and its control
       start from the same demonstrations;
    3. for ``steps`` steps, draw ``batch_size`` messages of the warm-started roles (a seeded order,
       reshuffled after each pass) and take one AdamW step on the negative log-likelihood of their
       completion tokens (``learn.losses.sft_loss``, through the trainer's ``PolicyUpdater``: each
       adapter scores only its own role's messages, the prompt and other roles' messages are
       context, never targets);
    4. evaluate again, and write the last checkpoint.

Everything lands in ``RUN/warm_start/``: ``episodes.jsonl`` (the fine-tuning set, written once, so a
resumed warm start trains on the episodes it started with even when they were sampled from the
team), ``metrics.jsonl`` (step 0: the evaluation before and the set's size; one line per step: the
loss; the last line: the evaluation after) and ``checkpoints/step-N`` in the trainer's format
(adapters, AdamW state, RNG states). A warm start continues its own latest checkpoint whenever
there is one, refusing one written with other settings; a finished one is not run again: its
adapters are loaded. So ``teamplay sft`` then ``teamplay train`` with the same config trains RL from
the saved adapters, and RL from those adapters (``model.checkpoint: RUN/warm_start``) is the same
run. The global random generators are left as the warm start found them, so the RL steps after it
draw what they would have drawn without it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from teamplay.atomic import write_atomically
from teamplay.config import OptimConfig
from teamplay.config.warm_start import WarmStartConfig, untaught_roles
from teamplay.envs.teachers import teacher_of
from teamplay.errors import ConfigError
from teamplay.records import Episode, TaskItem, derived_seed
from teamplay.training.learn.losses import SftObjective
from teamplay.training.learn.samples import PolicySample
from teamplay.training.learn.update import PolicyUpdater, UpdateSettings
from teamplay.training.play.evaluation import EvalMetrics
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.play.warm_data import TeacherBackend, passing, sft_samples, stop_token
from teamplay.training.run.parts import build_optimizer
from teamplay.training.run.preemption import Preempted, Preemption
from teamplay.training.store.checkpoint import (
    TrainerState,
    checkpoint_dir,
    load_checkpoint,
    newest_intact_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from teamplay.training.store.metrics import MetricsLogger
from teamplay.training.store.record import RunRecord

#: ``evaluate(label, items, check)``: the team as it is now on held-out ``items`` (the trainer's)
Evaluate = Callable[[str, Sequence[TaskItem], Callable[[], None]], EvalMetrics]
#: the warm start's folder inside the run folder
WARM_DIR = "warm_start"
EPISODES = "episodes.jsonl"


@dataclass(frozen=True)
class WarmStartResult:
    """What a warm start did.

    Fields:
        folder: ``RUN/warm_start``; its latest checkpoint holds the warm-started adapters.
        steps: optimiser steps done (``warm_start.steps`` once finished).
        examples: messages in the fine-tuning set.
        eval_before, eval_after: the held-out evaluations (None without held-out problems, with
            ``evaluate: false``, or when this call found the warm start finished).
        seconds: wall time of this call.
        ran: False when the warm start was finished already and only its adapters were loaded.
        cached: the finished warm start was copied from ``warm_start.cache`` (a run of the same
            fingerprint fine-tuned it); ``ran`` is then False.
    """

    folder: Path
    steps: int
    examples: int
    eval_before: EvalMetrics | None
    eval_after: EvalMetrics | None
    seconds: float
    ran: bool = True
    cached: bool = False


def warm_roles(ws: WarmStartConfig, team) -> list[str]:
    """The roles the warm start ``ws`` fine-tunes: ``ws.roles`` or every model-played role of
    ``team`` (the run's checks refused roles that are not the team's, scripted, untaught or frozen:
    ``wiring.checks.check_warm_start``)."""
    return list(ws.roles) if ws.roles is not None else [r.name for r in team.roles if not r.scripted]


class WarmStart:
    """The warm start of one run (see the module), on the trainer's own parts.

    Args:
        ws: the run's ``warm_start:`` section.
        update: the run's update sections (``UpdateSettings``): the warm start's own update takes them
            with the NLL objective, its learning rate and batch, and temperature 1; its seed orders
            the warm start's problems and batches.
        record: what the run's files record (its folder holds the warm start's; its config, the
            fingerprint a continued warm start must match).
        protocol: the run's protocol's name (each role's teacher is looked up under it).
        team_model: the team model whose adapters are fine-tuned in place.
        team: the run's team; ``trainable``: its adapters being trained (frozen ones never are).
        make_env: the training env factory.
        runner: the trainer's runner (``source: rejection`` samples the team's episodes with it).
        evaluate: ``evaluate(label, items, check) -> EvalMetrics``, the trainer's held-out evaluation.
        sync: called after the adapters changed (a vllm backend reloads them).
    """

    def __init__(self, ws: WarmStartConfig, update: UpdateSettings, record: RunRecord, protocol: str, team_model,
                 team, trainable: Sequence[str], make_env, runner, evaluate: Evaluate,
                 sync: Callable[[], None] = lambda: None) -> None:
        # a team over several bases was refused before (``wiring.checks.check_wired``)
        self.ws, self.record, self.protocol, self.seed = ws, record, protocol, update.seed
        self.max_prompt_tokens = update.backend.max_prompt_tokens
        self.team_model, self.team, self.make_env = team_model, team, make_env
        self.runner, self.evaluate, self.sync = runner, evaluate, sync
        self.folder = record.folder / WARM_DIR
        self.roles = warm_roles(self.ws, team)
        adapters = {r.adapter_name for r in team.roles if r.name in self.roles}
        self.adapters = [a for a in trainable if a in adapters]
        params = {a: team_model.adapter_parameters(a) for a in self.adapters}
        self.optimizer = build_optimizer(OptimConfig(lr=self.ws.lr, weight_decay=update.optim.weight_decay),
                                         [p for a in self.adapters for p in params[a]])
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda _step: 1.0)
        # the trainer's update with the NLL objective: one minibatch of batch_size messages per step
        sft = dataclasses.replace(
            update, objective=SftObjective(),
            optim=update.optim.model_copy(update={"lr": self.ws.lr, "epochs": 1, "minibatch_size": self.ws.batch_size,
                                                  "grad_accum": 1}),
            sampling=update.sampling.model_copy(update={"temperature": 1.0}))
        self.updater = PolicyUpdater(sft, team_model, params, self.optimizer)

    # ----------------------------------------------------------------------------- the loop
    def run(self, items: Sequence[TaskItem], eval_items: Sequence[TaskItem] = (),
            check: Callable[[], None] = lambda: None, preemption: Preemption | None = None,
            steps: int | None = None,
            on_step: Callable[[int, dict[str, Any]], None] | None = None) -> WarmStartResult:
        """Run the warm start on the training problems ``items`` to its end, or for at most ``steps``
        more steps in this call (a pause: the next call continues it exactly); see the module.
        ``eval_items``: the held-out problems. ``check`` is called at the evaluations'
        safe points, ``preemption`` (a SIGTERM or SIGINT) is read between steps: the last step is
        checkpointed and ``Preempted`` raised. The global RNG states are restored when it returns.
        ``on_step(step, metrics)`` is called after each step is logged (its metrics line plus
        ``seconds``, the step's wall time, which the file does not hold: a resumed run's lines equal
        a straight run's)."""
        start, outer = time.perf_counter(), rng_state()
        try:
            return self._run(list(items), eval_items, check, preemption, steps, start, on_step)
        finally:
            set_rng_state(outer)
            self.sync()

    def _run(self, items, eval_items, check, preemption, steps, start, on_step) -> WarmStartResult:
        self.folder.mkdir(parents=True, exist_ok=True)
        cached = self._take_cached()
        done = self._restore()
        if done >= self.ws.steps:
            self._store_cached()  # a warm start finished before the run named a cache is shared too
            return WarmStartResult(self.folder, done, self._set_size(), None, None, time.perf_counter() - start,
                                   ran=False, cached=cached)
        logger = MetricsLogger(self.folder, tensorboard=False)
        logger.truncate_after(done if done else -1)
        try:
            before = None
            if done == 0:
                before = self._evaluate("warm start: before", eval_items, check)
                line = self._build_set(items)
                if before is not None:
                    line["heldout"] = before.to_dict()
                logger.log(0, line)
            samples = self._samples()
            taken, after = 0, None
            while done < self.ws.steps and (steps is None or taken < steps):
                if preemption is not None and preemption.requested:
                    self._save(done)
                    written = checkpoint_dir(Path(WARM_DIR), done).as_posix()
                    raise Preempted(preemption.signum or 15,
                                    f"in the warm start after step {done}; checkpoint {written} written")
                t0 = time.perf_counter()
                metrics = self._step(samples, done)
                done, taken = done + 1, taken + 1
                if done == self.ws.steps:
                    after = self._evaluate("warm start: after", eval_items, check)
                    if after is not None:
                        metrics["heldout_final"] = after.to_dict()
                logger.log(done, metrics)
                if done == self.ws.steps or done % self.ws.checkpoint_every == 0 or taken == steps:
                    self._save(done)
                if on_step is not None:
                    on_step(done, {**metrics, "seconds": time.perf_counter() - t0})
        finally:
            logger.close()
        if done >= self.ws.steps:
            self._store_cached()
        return WarmStartResult(self.folder, done, len(samples), before, after, time.perf_counter() - start)

    def _step(self, samples: Sequence[PolicySample], step: int) -> dict[str, Any]:
        """One optimiser step on the batch of ``step`` (``batch_positions``); its metrics line."""
        batch = [samples[i] for i in batch_positions(len(samples), step, self.ws.batch_size, self.seed)]
        out = self.updater.update(batch, step)
        metrics = {"loss": out.get("loss"), "grad_norm": out.get("grad_norm"), "lr": self.ws.lr,
                   "optimizer_steps": out["optimizer_steps"], "tokens": sum(len(s.completion_ids) for s in batch)}
        if out.get("skipped_nonfinite_steps"):
            metrics["skipped_nonfinite_steps"] = out["skipped_nonfinite_steps"]
        self.sync()
        return metrics

    # ----------------------------------------------------------------------------- the set
    def _build_set(self, items: Sequence[TaskItem]) -> dict[str, Any]:
        """Play the episodes of step 2 (see the module), write ``episodes.jsonl``; the step-0 line."""
        jobs = [RolloutJob(item=item, group_id=f"warm:{k}:{item.id}") for k, item in enumerate(self._problems(items))]
        seed = derived_seed(self.seed, "warm_start") % (2**31)
        if self.ws.source == "teacher":
            with_channel = partial(self.make_env, channel=True)  # teachers demonstrate through it (module)
            played = RolloutRunner(with_channel, self._teachers(), self.runner.sampling).run(jobs, seed=seed)
            kept = played
        else:
            played = self.runner.run(jobs, seed=seed)
            kept = passing(played, self.ws.threshold)
        write_atomically(self.folder / EPISODES, "".join(json.dumps(ep.to_dict(), ensure_ascii=False) + "\n"
                                                         for ep in kept))
        samples = self._samples()
        by_role = {role: sum(s.role == role for s in samples) for role in self.roles}
        return {"episodes": len(played), "kept": len(kept), "examples": len(samples),
                         "examples_by_role": by_role,
                         "reward_played": float(np.mean([ep.reward for ep in played])),
                         "reward_kept": float(np.mean([ep.reward for ep in kept])) if kept else None}

    def _samples(self) -> list[PolicySample]:
        """The fine-tuning samples from ``episodes.jsonl`` (an empty set is a ConfigError)."""
        lines = (self.folder / EPISODES).read_text(encoding="utf-8").splitlines()
        episodes = [Episode.from_dict(json.loads(line)) for line in lines if line.strip()]
        samples = sft_samples(episodes, self.roles, self.adapters)
        if not samples:
            why = (f"none of the {self.ws.episodes} episodes reached team reward {self.ws.threshold:g}; lower "
                   f"warm_start.threshold or use source: teacher") if self.ws.source == "rejection" else \
                "the teacher team wrote no message of these roles"
            raise ConfigError(f"warm_start: nothing to fine-tune on: {why}")
        return samples

    def _set_size(self) -> int:
        return len(self._samples()) if (self.folder / EPISODES).is_file() else 0

    def _problems(self, items: Sequence[TaskItem]) -> list[TaskItem]:
        """The first ``episodes`` training problems in a seeded order of the warm start's own (cycled
        when there are fewer)."""
        order = np.random.default_rng([self.seed, 0x5EED]).permutation(len(items))
        return [items[int(order[k % len(order)])] for k in range(self.ws.episodes)]

    def _teachers(self) -> TeacherBackend:
        """The teacher team's backend: each model-played role's teacher, each scripted role's own policy."""
        policies = {}
        for role in self.team.roles:
            spec = role.scripted_spec if role.scripted else teacher_of(self.protocol, role.name, self.ws.teachers)
            if spec is None:  # the run's checks refused this team (``wiring.checks.check_warm_start``)
                raise ConfigError(untaught_roles(self.ws, self.protocol, [role.name]) or role.name)
            policies[role.name] = spec
        return TeacherBackend(self.team_model.tokenizer, policies, self.max_prompt_tokens,
                              stop_token(self.team_model), seed=self.seed, answer_format=self.ws.answer_format)

    # ----------------------------------------------------------------------------- evaluation and state
    def _evaluate(self, label: str, items: Sequence[TaskItem], check: Callable[[], None]) -> EvalMetrics | None:
        if not self.ws.evaluate or not items:
            return None
        return self.evaluate(label, items, check)

    def _fingerprint(self) -> dict[str, Any]:
        """What a warm start's checkpoints must have been written with to be continued (where a finished
        one is shared, ``cache``, is not part of it)."""
        dump = self.record.config
        found = {key: dump[key] for key in ("warm_start", "model", "team", "protocol", "task", "seed", "sampling",
                                            "backend")}
        found["warm_start"] = {k: v for k, v in found["warm_start"].items() if k != "cache"}
        return found

    # ----------------------------------------------------------------------------- the shared cache
    def _cache_entry(self) -> Path | None:
        """The folder of ``warm_start.cache`` that holds this warm start once finished (None without a cache)."""
        if self.ws.cache is None:
            return None
        key = hashlib.sha256(json.dumps(self._fingerprint(), sort_keys=True).encode()).hexdigest()[:20]
        return Path(self.ws.cache) / f"warm-{key}"

    def _take_cached(self) -> bool:
        """Copy a finished warm start with this fingerprint from the cache into the run's folder, when
        the folder holds no checkpoint of its own; whether it did. The copy is checked as any checkpoint
        is (``_restore``: its manifest and its fingerprint)."""
        entry = self._cache_entry()
        if entry is None or not entry.is_dir() or newest_intact_checkpoint(self.folder)[0] is not None:
            return False
        shutil.copytree(entry, self.folder, dirs_exist_ok=True)
        return True

    def _store_cached(self) -> None:
        """Put the finished warm start into the cache (once: a run that finds the entry there leaves it).
        Written beside the entry and renamed into place, so a reader never sees half of one."""
        entry = self._cache_entry()
        if entry is None or entry.is_dir():
            return
        entry.parent.mkdir(parents=True, exist_ok=True)
        partial = entry.parent / f".{entry.name}.{os.getpid()}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(self.folder, partial)
        try:
            partial.rename(entry)
        except OSError:  # another run stored it first: theirs is the same warm start
            shutil.rmtree(partial, ignore_errors=True)

    def _save(self, step: int) -> Path:
        state = TrainerState(step=step, data_order=(), data_cursor=0, data_epoch=0)
        return save_checkpoint(self.folder, state, self.team_model, self.optimizer, self.scheduler,
                               {"warm_start": self._fingerprint()}, dict(self.record.config),
                               keep=self.record.keep_checkpoints)

    def _restore(self) -> int:
        """Continue the latest intact checkpoint of the folder (its adapters, AdamW state and RNG
        states); the steps it holds (0: none). One written with other settings is a ConfigError."""
        path, _damaged = newest_intact_checkpoint(self.folder)
        if path is None:
            return 0
        data = load_checkpoint(path)
        mine, saved = self._fingerprint(), data.extra.get("warm_start", {})
        differ = sorted(k for k in mine if saved.get(k) != mine[k])
        if differ:
            raise ConfigError(f"{self.folder} holds a warm start with other settings ({', '.join(differ)} differ); "
                              f"use the config it was made with, another --output folder, or --overwrite")
        self.team_model.load_adapters(path / "adapters")
        self.optimizer.load_state_dict(data.optimizer)
        self.scheduler.load_state_dict(data.scheduler)
        set_rng_state(data.rng)
        return data.state.step


def batch_positions(n: int, step: int, batch_size: int, seed: int) -> list[int]:
    """The set positions of step ``step``'s batch: positions ``step * batch_size`` onwards of an
    endless stream that visits the ``n`` samples in a fresh seeded permutation per pass. A function
    of the step alone, so a resumed warm start draws what an uninterrupted one would.

    >>> batch_positions(5, 0, 3, seed=0) + batch_positions(5, 1, 3, seed=0)[:2] == \
            [int(i) for i in np.random.default_rng([0, 0x5F7, 0]).permutation(5)]
    True
    """
    out = []
    for p in range(step * batch_size, (step + 1) * batch_size):
        order = np.random.default_rng([seed, 0x5F7, p // n]).permutation(n)
        out.append(int(order[p % n]))
    return out


def warm_start_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The lines of ``RUN/warm_start/metrics.jsonl`` ([] when the run had no warm start)."""
    path = Path(run_dir) / WARM_DIR / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


