"""The step's credit stage: the configured credit method's advantages for each group, with the
resources expensive methods ask for (a transcript scorer, the backend, counterfactual replays,
answer probabilities, a generative judge), every replay of a step prefetched in one batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from teamplay.config import BackendConfig, SamplingConfig
from teamplay.credit import CreditBatch, CreditResources, assign
from teamplay.credit.values.characteristic import Transcript, TranscriptScorer
from teamplay.envs.protocols.base import Protocol
from teamplay.envs.tasks.base import Task
from teamplay.records import Episode, TaskItem
from teamplay.training.learn.nonfinite import check_advantage_size
from teamplay.training.play.answer_probability import AnswerProbability
from teamplay.training.play.judge import BackendJudge
from teamplay.training.play.listener_logprob import ListenerLogProb
from teamplay.training.play.replay import RolloutReplayEngine
from teamplay.training.step.stages import GroupWork, StepContext
from teamplay.training.wiring.checks import CheckedRun
from teamplay.training.wiring.sampling import sampling_params
from teamplay.training.wiring.wired_run import WiredRun


def protocol_scorer(protocol: Protocol, task: Task, item: TaskItem) -> TranscriptScorer:
    """The transcript scorer of masking credit for ``item``: each masked transcript scores what
    ``protocol.score_visible`` says its team reward would be (for the built-in protocols but
    ``split``: the verifier on the last visible answer; for ``split``: the visible members' own
    answers, so masking Shapley is the exact difference reward there)."""

    def score(transcripts: Sequence[Transcript]) -> np.ndarray:
        return np.array([protocol.score_visible(task, item, t.messages, t.withheld) for t in transcripts],
                        dtype=np.float64)

    return score


class CreditStage:
    """Turns groups into credited groups (``__call__``) and says how an episode was valued
    (``record``). Built once per run from the checked config (``checked``: the method, its options
    and the resources it needs), the run's wiring (``run``), the training decoding (``sampling``:
    replays sample as the rollouts do), the ``backend`` section (its generate-call size and prompt
    bound) and the run's ``seed``. It owns the replay engine (``replay``, when the method
    re-executes), the answer-probability scorer and the listener scorer, each only when the method
    asks for it; the generative ``judge`` (``play.judge.BackendJudge`` on
    ``wiring.backend.build_judge_backend``'s backend) is the wiring's, passed in when the method asks
    for one. ``played(run)`` is the stage over a curriculum stage's wiring, with the same judge."""

    def __init__(self, checked: CheckedRun, run: WiredRun, sampling: SamplingConfig, backend: BackendConfig,
                 seed: int, judge: BackendJudge | None = None) -> None:
        if ("judge" in checked.credit_needs) != (judge is not None):
            raise ValueError(f"credit method {checked.credit_method!r}: pass a judge exactly when it needs one")
        self.checked, self.sampling, self.backend_cfg, self.seed = checked, sampling, backend, seed
        self.method, self.options = checked.credit_method, checked.credit_options
        #: the method ``check_run`` resolved ``method`` to (None: looked up by name in each ``assign``)
        self.resolved = checked.credit
        self.task: Task = run.task
        self.protocol: Protocol = run.make_env().protocol  # its rule scores masked transcripts
        self.backend = run.backend
        self.replay: RolloutReplayEngine | None = None
        if "replay" in checked.credit_needs:  # counterfactual re-executions with the current policies
            self.replay = RolloutReplayEngine(run.make_env, run.backend, sampling_params(sampling),
                                              max_batch=backend.max_batch, seed=seed)
        self.answer_probability: AnswerProbability | None = None
        if "answer_probability" in checked.credit_needs:
            self.answer_probability = AnswerProbability(
                run.team_model, run.team, {it.id: it for it in run.items}, run.task.answer_instruction,
                max_prompt_tokens=backend.max_prompt_tokens)
        self.listener: ListenerLogProb | None = None
        if "listener" in checked.credit_needs:  # influence: the listeners' teacher-forced answer log-probs
            self.listener = ListenerLogProb(run.team_model, run.make_env, {it.id: it for it in run.items},
                                            max_prompt_tokens=backend.max_prompt_tokens)
        self.judge = judge

    def played(self, run: WiredRun) -> CreditStage:
        """This stage over ``run``'s task, items and envs (a curriculum stage's wiring), with the same
        method, settings and judge."""
        return CreditStage(self.checked, run, self.sampling, self.backend_cfg, self.seed, self.judge)

    def __call__(self, groups: Sequence[GroupWork], ctx: StepContext) -> list[GroupWork]:
        """The method's advantages for each group, times the group's scale; an advantage beyond
        ``nonfinite.MAX_ADVANTAGE`` stops the run (``CreditOutputError``). Every group is credited,
        with signal or not (which groups carry a signal is decided per agent after credit, by the
        token stage). Every batch carries the step's rewards (``batch_rewards``: all of
        ``ctx.episodes``, for ``scale_rewards: batch``); with replay credit, every replay the method
        will ask for runs first, in one batch, budgeted against the step's generated tokens; with a
        judge, its counters restart."""
        episodes = ctx.episodes
        step_rewards = tuple(float(ep.reward) for ep in episodes)
        groups = [dataclasses.replace(g, batch=CreditBatch(
            episodes=g.episodes, item=g.item, score=self.task.score, extract=self.task.extract,
            resources=dataclasses.replace(self.resources(g.item), batch_rewards=step_rewards))) for g in groups]
        if self.replay is not None:
            self.replay.begin_step(ctx.step, sum(ep.tokens for ep in episodes))
            self.replay.prefetch(lambda batch: assign(self.method, batch, self.options, self.resolved),
                                 [g.batch for g in groups])
        if self.judge is not None:
            self.judge.begin_step()
        if self.listener is not None:
            self.listener.begin_step()
        out = []
        for g in groups:
            advantages = assign(self.method, g.batch, self.options, self.resolved)
            check_advantage_size(self.method, advantages)  # finite yet absurd: stop here, naming the method
            if g.scale != 1.0:
                advantages = [a * g.scale for a in advantages]
            out.append(dataclasses.replace(g, advantages=tuple(advantages)))
        return out

    def resources(self, item: TaskItem) -> CreditResources:
        """What expensive credit methods may ask for (``wiring.checks.TRAINER_RESOURCES``): a verifier scorer
        of masked transcripts (the protocol's ``score_visible``: by default the last answer still
        visible, scored against ``item``), the generation backend, the replay engine, the
        answer-probability scorer and the generative judge."""
        return CreditResources(
            transcript_scorer=protocol_scorer(self.protocol, self.task, item),
            backend=self.backend, replay=self.replay, answer_probability=self.answer_probability,
            listener=self.listener, judge=self.judge)

    def record(self, episode: Episode) -> dict[str, Any]:
        """How the episode's messages were valued, for reports: the method and, for replay-based
        methods, every counterfactual value behind the advantages (coalition, start, value, k)."""
        record: dict[str, Any] = {"method": self.method, "options": self.options.model_dump(mode="json")}
        if self.replay is not None:
            record["replay_values"] = self.replay.coalition_values(episode)
        return record

    def metrics(self) -> dict[str, Any]:
        """The step's statistics of the replay engine, of the judge (``judge_tokens``, ...) and of the
        listener scorer (``influence_rows``, ...), of those the method uses (empty when it uses none)."""
        out = self.replay.stats.to_dict() if self.replay is not None else {}
        if self.judge is not None:
            out.update(self.judge.stats.to_dict())
        if self.listener is not None:
            out.update(self.listener.stats.to_dict())
        return out
