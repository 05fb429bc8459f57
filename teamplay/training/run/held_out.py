"""A run's held-out evaluation: the untrained team before the first step, the team every
``eval_every`` steps, the trained team at the end.

Each evaluation plays every held-out problem once with the evaluation decoding
(``eval_sampling``) through the runner's held-out source (``Runner.held_out``), seeded by the
run's seed. With ``eval_curve_limit = N``, the learning curve (``heldout_curve`` in metrics.jsonl)
is measured on the first N held-out problems: before and after training on them in addition to all
problems, and every ``eval_every`` steps on them only (cheap enough to run often). The untrained
team's evaluations are read from ``eval_cache`` when a run of the same untrained team stored them
(``evaluation.cached_untrained_eval``).

With ``eval_samples = k`` the untrained and the trained team also play every held-out problem k
times with the training decoding (``sampling``): pass@k and the distinct right solutions
(``evaluation.sample_metrics``), logged as ``heldout_sampled`` in the step-0 line and
``heldout_sampled_final`` in the last one (not every ``eval_every`` steps: k times the cost).

With ``eval_withhold_messages`` / ``eval_self_consistency`` the evaluations of the whole held-out
set before and after training (not the curve's, not the ones every ``eval_every`` steps) also
measure information use by withholding and the self-consistency baseline
(``evaluation.evaluate``'s ``withhold`` and ``solo``).

The trainer decides when to evaluate and where the lines go; this part only evaluates. Before
each evaluation it calls ``prepare(label)`` (the trainer shares its state with the learner's copies
and calls ``on_eval``). Each call takes ``check``, called at each safe point of the rollouts: it
raises ``StopRequested`` to abandon the evaluation (a SIGTERM or SIGINT; the ``Preemption`` of the
``train`` call under way, so this part holds no flag of its own).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teamplay.config import SamplingConfig
from teamplay.envs.tasks.base import Task
from teamplay.records import TaskItem
from teamplay.training.play.evaluation import EvalMetrics, cached_untrained_eval, evaluate
from teamplay.training.play.rollout import RolloutRunner
from teamplay.training.play.self_consistency import SoloBaseline
from teamplay.training.run.parts import Runner
from teamplay.training.wiring.eval_team import solo_env_factory
from teamplay.training.wiring.sampling import sampling_params
from teamplay.training.wiring.wired_run import WiredRun


def solo_baseline(sampling: SamplingConfig, max_batch: int | None, run: WiredRun,
                  answer_roles: Sequence[str] | None) -> SoloBaseline:
    """The self-consistency baseline of a run's before/after evaluations (``eval_self_consistency``):
    the answering role alone on the held-out task, on the run's backend (its adapters as trained so
    far), with the training decoding (``sampling``) and the run's generate-call size (``max_batch``)."""
    make_env, role = solo_env_factory(run.eval_task, run.team, answer_roles)
    runner = RolloutRunner(make_env, run.backend, sampling_params(sampling), max_batch=max_batch)
    return SoloBaseline(runner, role.name, role.adapter_name)


@dataclass(frozen=True)
class HeldOutSettings:
    """What a run's held-out evaluations read of its config (the trainer's wiring builds it:
    ``teamplay.training.run.sections.held_out_settings``).

    Fields: eval_sampling (the evaluation decoding); sampling (the training decoding, for the
    sampled evaluations); seed (the run's); curve_limit (``eval_curve_limit``); samples
    (``eval_samples``); withhold_messages (``eval_withhold_messages``); cache (``eval_cache``'s folder,
    None without one or with ``model.checkpoint``: adapters that are not fresh are never cached);
    cache_key (the run's config as JSON: what a cached untrained evaluation is stored under).
    """

    eval_sampling: SamplingConfig
    sampling: SamplingConfig
    seed: int
    curve_limit: int | None
    samples: int | None
    withhold_messages: bool
    cache: Path | None
    cache_key: Mapping[str, Any]

    def key(self) -> dict[str, Any]:
        """A copy of ``cache_key`` for one cached evaluation to add its own fields to."""
        return copy.deepcopy(dict(self.cache_key))


class HeldOutEvaluation:
    """Evaluates the team on held-out problems of ``task`` through ``runner`` (see the module), as
    ``settings`` says.

    ``items`` are given to each call (the trainer's ``eval_items``, which a caller may replace);
    the learning curve's problems are their first ``settings.curve_limit``.
    """

    def __init__(self, settings: HeldOutSettings, runner: Runner, task: Task, prepare: Callable[[str], None],
                 answer_roles: Sequence[str] | None = None, solo: SoloBaseline | None = None) -> None:
        self.settings, self.runner, self.task, self.prepare = settings, runner, task, prepare
        #: the protocol's roles whose answers can be the team's (``evaluate``'s ``answer_roles``)
        self.answer_roles = answer_roles
        #: the self-consistency baseline of the before/after evaluations (``eval_self_consistency``)
        self.solo = solo

    def curve(self, items: Sequence[TaskItem]) -> list[TaskItem] | None:
        """The learning curve's problems: the first ``eval_curve_limit`` of ``items`` (``None``
        without a limit or without items)."""
        limit = self.settings.curve_limit
        return None if limit is None or not items else list(items[:limit])

    def before(self, items: Sequence[TaskItem], check: Callable[[], None]) -> tuple[EvalMetrics, dict[str, Any]]:
        """The untrained team on every problem, and the step-0 line of metrics.jsonl (``heldout``,
        ``heldout_curve`` on the curve's problems, ``heldout_sampled`` with ``eval_samples``)."""
        metrics = self.untrained(items, check)
        line = {"heldout": metrics.to_dict()}
        curve = self.curve(items)
        if curve is not None:
            line["heldout_curve"] = self.untrained(items, check, curve).to_dict()
        if self.settings.samples is not None:
            line["heldout_sampled"] = self.untrained_sampled(items, check).to_dict()
        return metrics, line

    def at_step(self, step: int, items: Sequence[TaskItem], check: Callable[[], None]) -> dict[str, Any]:
        """The fields of a step's metrics line: ``heldout`` on the curve's problems (all problems
        without a curve), also as ``heldout_curve`` with a curve."""
        curve = self.curve(items)
        heldout = self.run(f"step {step}", items if curve is None else curve, check).to_dict()
        return {"heldout": heldout} if curve is None else {"heldout": heldout, "heldout_curve": heldout}

    def after(self, items: Sequence[TaskItem], check: Callable[[], None]) -> tuple[EvalMetrics, dict[str, Any]]:
        """The trained team on every problem, and the last line of metrics.jsonl (``heldout_final``,
        ``heldout_curve`` on the curve's problems, ``heldout_sampled_final`` with ``eval_samples``)."""
        metrics = self.run("after", items, check, cooperation=True)
        line = {"heldout_final": metrics.to_dict()}
        curve = self.curve(items)
        if curve is not None:
            line["heldout_curve"] = self.run("after (curve)", curve, check).to_dict()
        if self.settings.samples is not None:
            line["heldout_sampled_final"] = self.sampled("after (sampled)", items, check).to_dict()
        return metrics, line

    def untrained(self, items: Sequence[TaskItem], check: Callable[[], None],
                  curve: Sequence[TaskItem] | None = None) -> EvalMetrics:
        """The untrained team on ``items`` (on ``curve`` when given), read from ``eval_cache`` when a
        run with the same untrained team stored it (not with ``model.checkpoint``: its adapters are
        not fresh); a curve is cached under its own key."""
        label = "before" if curve is None else "before (curve)"
        problems = items if curve is None else curve
        whole = curve is None  # the cooperation measurements are of the whole held-out set only
        if self.settings.cache is None:
            return self.run(label, problems, check, cooperation=whole)
        config = self.settings.key()
        if curve is not None:  # the first N distinct problems: the same evaluation as eval_task.limit = N
            config["eval_task"] = {**(config.get("eval_task") or {}), "limit": len(curve), "curve": True}
            config["eval_withhold_messages"] = config["eval_self_consistency"] = False
        return cached_untrained_eval(self.settings.cache, config,
                                     lambda: self.run(label, problems, check, cooperation=whole))

    def untrained_sampled(self, items: Sequence[TaskItem], check: Callable[[], None]) -> EvalMetrics:
        """The untrained team's sampled evaluation (``eval_samples``), read from ``eval_cache`` as
        ``untrained`` is, under a key of its own (the training decoding, k episodes per problem)."""
        if self.settings.cache is None:
            return self.sampled("before (sampled)", items, check)
        config = self.settings.key()
        config["eval_sampling"] = config["sampling"]
        config["eval_withhold_messages"] = config["eval_self_consistency"] = False  # sampled: never measured
        config["eval_task"] = {**(config.get("eval_task") or {}), "samples": self.settings.samples}
        return cached_untrained_eval(self.settings.cache, config,
                                     lambda: self.sampled("before (sampled)", items, check))

    def sampled(self, label: str, items: Sequence[TaskItem], check: Callable[[], None]) -> EvalMetrics:
        """``eval_samples`` episodes of every problem of ``items`` with the training decoding, as
        ``run`` plays one greedy episode each."""
        self.prepare(label)
        runner = self.runner.held_out(sampling_params(self.settings.sampling), check)
        return evaluate(runner, self.task, items, samples=self.settings.samples, seed=self.settings.seed,
                        answer_roles=self.answer_roles)[1]

    def run(self, label: str, items: Sequence[TaskItem], check: Callable[[], None],
            cooperation: bool = False) -> EvalMetrics:
        """One evaluation of the team as it is now on ``items``, announced as ``label``; ``check``
        at each safe point (see the module). ``cooperation``: also withhold messages and run the
        self-consistency baseline where the config asks for them (the before/after evaluations)."""
        self.prepare(label)
        runner = self.runner.held_out(sampling_params(self.settings.eval_sampling), check)
        return evaluate(runner, self.task, items, seed=self.settings.seed, answer_roles=self.answer_roles,
                        withhold=cooperation and self.settings.withhold_messages,
                        solo=self.solo if cooperation else None)[1]
