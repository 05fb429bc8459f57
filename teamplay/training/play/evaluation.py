"""Held-out evaluation: accuracy, cost and correction metrics of a team on a benchmark.

``evaluate`` produces episodes with the ``RolloutRunner`` (the only producer of episodes) and
summarises them with ``summarize``. Metrics, each averaged over episodes:

* ``team_accuracy``: mean team reward (verifier score of the final answer).
* ``role_accuracy[role]``: mean correctness of the last answer of each agent of that role, for
  roles that give answers (a reviewer that only says RIGHT/WRONG has no accuracy of its own).
* ``any_agent_right``: fraction of episodes where at least one agent's last answer was right.
* ``initial_accuracy``: accuracy of the answer the protocol would have given after its first
  round (``Episode.metadata["initial_answer"]``); ``wrong_to_right`` / ``right_to_wrong``:
  fraction of episodes whose answer review or debate turned from wrong to right / right to wrong.
* ``tokens_per_problem``, ``calls_per_problem``: completion tokens and model calls per episode.
* ``extra["cut_messages"]``: the share of the messages spoken that generation cut at
  ``max_new_tokens`` before they ended (``Message.cut``; unscored where
  ``protocol.score_cut_messages`` is false, the default of ``teamplay eval``); 0 when none spoke.
* ``lm_eval[key]`` (GSM8K, MATH, MATH-500 only): lm-evaluation-harness-compatible scores of the
  text of the message that gave the final answer (``teamplay.envs.tasks.answers.lm_eval_compat``: e.g.
  ``gsm8k/strict-match``, ``gsm8k/flexible-extract``, ``minerva_math500/math_verify``), averaged
  over the episodes where the metric applies. They read answers as lm-eval 0.4.13 does and are
  not teamplay's accuracy: compare them with published lm-eval numbers, ``team_accuracy`` with
  other teamplay runs.
* ``extra["cooperation"]``: corrections and harms per message that could change the answer, and
  the team against its best member alone (``teamplay.training.play.team_metrics.cooperation_metrics``);
  each transcript row carries its episode's counts under ``"cooperation"``. Opt-in (``evaluate``'s
  ``withhold`` and ``solo``; ``teamplay eval``'s ``withhold_messages`` and ``self_consistency``):
  ``extra["cooperation"]["withholding"]``, information use (how often withholding one message
  changes the team's final answer, per role and overall, with its extra tokens;
  ``teamplay.training.play.withholding``), and ``extra["cooperation"]["self_consistency"]``, the
  accuracy of the answering role alone sampled at the team's token cost with a majority vote
  (``teamplay.training.play.self_consistency``).
* ``extra["speak_rate"]`` (only when a speak/skip controller decided turns): per ``"agent/stage"``,
  the fraction of its decisions that spoke (``teamplay.training.play.controllers.speak_rates``).
* ``extra["team"]``: what each role learned: first-answer accuracy per role, review verdict
  accuracy split into wrong answers caught and right answers wrongly rejected, correction and harm
  rates, debate moves toward/away from the majority (``teamplay.training.play.team_metrics``).
* ``extra["samples"]`` (only when every problem was played at least twice, ``evaluate(samples=k)``
  with sampled decoding): pass@k and the distinct right solutions per problem (``sample_metrics``);
  ``team_accuracy`` is then the mean accuracy of the samples (sampled pass@1).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import EllipsisType
from typing import Any

from teamplay.atomic import write_atomically
from teamplay.envs.tasks.answers.lm_eval_compat import lm_eval_metrics
from teamplay.envs.tasks.base import Task
from teamplay.errors import TeamplayWarning
from teamplay.records import Episode, TaskItem
from teamplay.training.play.controllers import speak_rates
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.play.self_consistency import SoloBaseline, sample_at_budget, self_consistency_metrics
from teamplay.training.play.team_metrics import Correct, cooperation_metrics, episode_cooperation, team_metrics
from teamplay.training.play.withholding import withhold_messages, withholding_metrics


@dataclass(frozen=True)
class EvalMetrics:
    """Summary of a set of episodes (see the module docstring for each field)."""

    episodes: int
    team_accuracy: float
    role_accuracy: dict[str, float]
    any_agent_right: float
    initial_accuracy: float
    wrong_to_right: float
    right_to_wrong: float
    tokens_per_problem: float
    calls_per_problem: float
    seconds: float = 0.0
    tokens_per_second: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    lm_eval: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cut_share(episodes: Sequence[Episode]) -> float:
    """The share of the messages spoken in ``episodes`` that were cut at ``max_new_tokens``; 0 when none spoke."""
    spoken = [m for ep in episodes for m in ep.messages if m.spoke]
    return sum(m.cut for m in spoken) / len(spoken) if spoken else 0.0


def _role(agent: str) -> str:
    return agent.rpartition("_")[0] or agent


def final_text(episode: Episode) -> str:
    """The text of the message that gave the team's final answer: the last spoken message whose
    answer is the final answer, else the last spoken message with any answer, else the last
    message (``""`` for an empty transcript). For ``single`` it is the model's one completion."""
    spoken = [m for m in episode.messages if m.spoke]
    for pick in (lambda m: m.answer is not None and m.answer == episode.final_answer,
                 lambda m: m.answer is not None, lambda m: True):
        chosen = [m for m in spoken if pick(m)]
        if chosen:
            return chosen[-1].text
    return episode.messages[-1].text if episode.messages else ""


def lm_eval_scores(episodes: Sequence[Episode], items: dict[str, TaskItem], task: Task) -> dict[str, float]:
    """Mean of each lm-eval-compatible metric of ``task`` over the episodes where it applies."""
    scores: dict[str, float] = {}
    for metric in lm_eval_metrics(task.name):
        values = [v for ep in episodes
                  if (v := metric.score(final_text(ep), items[ep.problem_id])) is not None]
        if values:
            scores[metric.key] = sum(values) / len(values)
    return scores


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one problem from ``n`` samples of which ``c`` are right (Chen et al.,
    2021): ``1 - C(n - c, k) / C(n, k)``, the chance that k of the n samples drawn without
    replacement hold a right one; with ``k == n`` it is 1 when any sample is right, else 0.

    >>> pass_at_k(4, 1, 4), pass_at_k(4, 0, 4), pass_at_k(4, 1, 2)
    (1.0, 0.0, 0.5)
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def solution_text(episode: Episode) -> str:
    """The team's written solution: ``final_text`` (for ``single``, the completion) with runs of
    whitespace made one space, so that two samples differ only by what they say."""
    return " ".join(final_text(episode).split())


def sample_metrics(episodes: Sequence[Episode]) -> dict[str, float | None] | None:
    """Per-problem statistics of several episodes per problem (``evaluate(samples=k)``, sampled), or
    ``None`` when some problem was played once. An episode is right when its reward is above 0.5.

    * ``k``: the fewest episodes of a problem (every problem's count with ``evaluate``);
    * ``pass_at_k``: the mean over problems of ``pass_at_k(n_p, right_p, k)``;
    * ``distinct_correct_texts``: the mean over problems of the number of distinct
      ``solution_text`` among its right episodes (0 for a problem with none). Distinct right
      *answers* would say nothing on a task with one reference (every right answer is the same
      number); the solutions are what can differ;
    * ``distinct_correct_share``: over the problems with a right episode, the mean of distinct right
      texts / right episodes (1: no two right samples wrote the same solution); ``None`` when no
      problem has a right episode.
    """
    by_problem: dict[str, list[Episode]] = defaultdict(list)
    for ep in episodes:
        by_problem[ep.problem_id].append(ep)
    k = min((len(eps) for eps in by_problem.values()), default=0)
    if k < 2:
        return None
    passes, distinct, shares = [], [], []
    for eps in by_problem.values():
        right = [solution_text(ep) for ep in eps if ep.reward > 0.5]
        passes.append(pass_at_k(len(eps), len(right), k))
        distinct.append(len(set(right)))
        if right:
            shares.append(len(set(right)) / len(right))
    return {"k": k, "pass_at_k": sum(passes) / len(passes), "distinct_correct_texts": sum(distinct) / len(distinct),
            "distinct_correct_share": sum(shares) / len(shares) if shares else None}


def answer_judge(task: Task, items: dict[str, TaskItem]) -> Correct:
    """``correct(answer, problem_id)``: the task scores ``answer`` above 0.5 on that problem (None
    is never right). Memoised: the summary's team and cooperation metrics and the transcript rows
    ask about the same answers, and a verifier (MATH's) can be costly."""
    @functools.cache
    def correct(answer: str | None, problem_id: str) -> bool:
        return answer is not None and task.score_answer(answer, items[problem_id]) > 0.5

    return correct


def summarize(episodes: Sequence[Episode], items: dict[str, TaskItem], task: Task,
              seconds: float = 0.0, correct: Correct | None = None,
              answer_roles: Collection[str] | None = None) -> EvalMetrics:
    """Metrics of ``episodes``; ``items`` maps problem id to item (to score initial answers);
    ``correct``: an ``answer_judge`` of the same task and items to reuse (default: a new one);
    ``answer_roles``: the protocol's roles whose answers can be the team's (None: all), the only
    ones the best member is chosen from."""
    n = len(episodes)
    if n == 0:
        raise ValueError("summarize: no episodes")
    role_scores: dict[str, list[float]] = defaultdict(list)
    answering_roles: set[str] = set()
    any_right = initial_right = w2r = r2w = 0.0
    initial_flags: list[bool] = []
    correct = correct or answer_judge(task, items)

    for ep in episodes:
        for agent in ep.agents:
            role_scores[_role(agent)].append(float(ep.agent_correct.get(agent, 0.0)))
            if ep.agent_answers.get(agent) is not None:
                answering_roles.add(_role(agent))
        any_right += float(max(ep.agent_correct.values(), default=0.0) > 0.5)
        initial = ep.metadata.get("initial_answer", ep.final_answer)
        init_ok = task.score_answer(initial, items[ep.problem_id]) > 0.5
        initial_flags.append(init_ok)
        final_ok = ep.reward > 0.5
        initial_right += init_ok
        w2r += (not init_ok) and final_ok
        r2w += init_ok and not final_ok
    tokens = sum(ep.tokens for ep in episodes)
    return EvalMetrics(
        episodes=n,
        team_accuracy=sum(ep.reward for ep in episodes) / n,
        role_accuracy={r: sum(v) / len(v) for r, v in role_scores.items() if r in answering_roles},
        any_agent_right=any_right / n,
        initial_accuracy=initial_right / n,
        wrong_to_right=w2r / n,
        right_to_wrong=r2w / n,
        tokens_per_problem=tokens / n,
        calls_per_problem=sum(ep.calls for ep in episodes) / n,
        seconds=seconds,
        tokens_per_second=tokens / seconds if seconds > 0 else 0.0,
        extra={"team": team_metrics(episodes, correct, initial_flags), "cut_messages": cut_share(episodes),
               "cooperation": cooperation_metrics(episodes, correct, answer_roles),
               **({"speak_rate": rates} if (rates := speak_rates(episodes)) else {}),
               **({"samples": samples} if (samples := sample_metrics(episodes)) is not None else {})},
        lm_eval=lm_eval_scores(episodes, items, task),
    )


def evaluate(runner: RolloutRunner, task: Task, items: Sequence[TaskItem], samples: int = 1,
             seed: int = 0, transcripts_path: Path | None = None,
             on_episode: Callable[[Episode], None] | None = None, withhold: bool = False,
             solo: SoloBaseline | None = None,
             answer_roles: Collection[str] | None | EllipsisType = ...) -> tuple[list[Episode], EvalMetrics]:
    """Run ``samples`` episodes per item and summarise them.

    Transcripts are appended to ``transcripts_path`` (JSON lines, one episode each, with the
    problem and reference) as each episode finishes, so an interrupted evaluation keeps them.

    Opt-in cooperation measurements, after the episodes (their cost is not in ``seconds``):
    ``withhold`` replays every episode once per message with that message withheld
    (``teamplay.training.play.withholding``), into ``extra["cooperation"]["withholding"]``;
    ``solo`` samples one agent at the team's token cost and votes
    (``teamplay.training.play.self_consistency``), into ``extra["cooperation"]["self_consistency"]``.
    With either, the transcripts are written again at the end with, per episode, its withheld
    messages (``"withholding"``: one row per spoken message) and its solo votes (``"self_consistency"``).
    Withholding replays episodes, so it needs a ``RolloutRunner`` (an in-process one).

    ``answer_roles``: the protocol's roles whose answers can be the team's (``summarize``); ``...``
    (the default) reads them from the runner's env factory, so a source of episodes without one
    (a distributed pool) must pass them.
    """
    if not items:
        raise ValueError("evaluate: no items to evaluate")
    make_env = getattr(runner, "make_env", None)
    if answer_roles is ...:
        if make_env is None:
            raise ValueError(f"evaluate: {type(runner).__name__} has no env factory; pass answer_roles")
        answer_roles = make_env().protocol.answer_roles
    if withhold and not isinstance(runner, RolloutRunner):
        raise ValueError(f"evaluate: withholding messages replays episodes in process; {type(runner).__name__} "
                         f"cannot (use a RolloutRunner)")
    by_id = {item.id: item for item in items}
    correct = answer_judge(task, by_id)
    jobs = [RolloutJob(item=item, group_id=f"{item.id}#eval") for item in items for _ in range(samples)]
    sink = None
    if transcripts_path is not None:
        transcripts_path.parent.mkdir(parents=True, exist_ok=True)
        sink = transcripts_path.open("w", encoding="utf-8")

    def record(ep: Episode) -> None:
        if sink is not None:
            sink.write(json.dumps(_transcript_row(ep, by_id, correct), ensure_ascii=False) + "\n")
            sink.flush()
        if on_episode is not None:
            on_episode(ep)

    start = time.perf_counter()
    try:
        episodes = runner.run(jobs, seed=seed, on_episode=record)
    finally:
        if sink is not None:
            sink.close()
    seconds = time.perf_counter() - start
    metrics = summarize(episodes, by_id, task, seconds=seconds, correct=correct, answer_roles=answer_roles)
    if not withhold and solo is None:
        return episodes, metrics
    per_episode: list[dict[str, Any]] = [{} for _ in episodes]
    cooperation = metrics.extra["cooperation"]
    if withhold:
        # job i's env was reset with seed + i (RolloutRunner.run): the replays reuse those seeds
        effects = withhold_messages(runner, episodes, by_id, [seed + i for i in range(len(jobs))], seed=seed)
        cooperation["withholding"] = withholding_metrics(effects, len(episodes))
        for e in effects:
            per_episode[e.episode].setdefault("withholding", []).append(e.to_dict())
    if solo is not None:
        votes = sample_at_budget(solo.runner, episodes, by_id, seed=seed, max_samples=solo.max_samples)
        cooperation["self_consistency"] = self_consistency_metrics(
            votes, episodes, correct, solo.role, solo.adapter, solo.runner.sampling.temperature)
        for row, v in zip(per_episode, votes, strict=True):
            row["self_consistency"] = asdict(v)
    if transcripts_path is not None:
        lines = [json.dumps({**_transcript_row(ep, by_id, correct), **row}, ensure_ascii=False)
                 for ep, row in zip(episodes, per_episode, strict=True)]
        write_atomically(transcripts_path, "".join(line + "\n" for line in lines))
    return episodes, metrics


def _transcript_row(ep: Episode, items: dict[str, TaskItem], correct: Correct) -> dict[str, Any]:
    """One transcripts.jsonl row: the problem, its reference, the episode and its cooperation counts."""
    item = items[ep.problem_id]
    return {"prompt": item.prompt, "reference": item.reference, **ep.to_dict(),
            "cooperation": asdict(episode_cooperation(ep, correct))}


#: the config sections the held-out evaluation of an untrained team depends on: a fresh LoRA
#: adapter adds exactly 0 (lora_B starts at zero), so credit, loss, optimiser, rollout sizes and
#: training sampling cannot change it
UNTRAINED_EVAL_SECTIONS = ("model", "team", "protocol", "controllers", "task", "eval_task", "eval_sampling",
                           "backend", "seed")


#: opt-in measurements that add to the untrained team's evaluation, with the sections they also read:
#: in the key only when switched on, so the keys of evaluations without them stay as they were
UNTRAINED_EVAL_OPT_INS = {"eval_withhold_messages": (), "eval_self_consistency": ("sampling",),
                          # the "untrained" team of a warm-started run is the fine-tuned one: its evaluation
                          # depends on the warm start, and on what that samples and steps with
                          "warm_start": ("warm_start", "sampling", "optim")}


def untrained_eval_key(config: dict[str, Any]) -> str:
    """A hash of what the untrained team's held-out evaluation depends on (``config``: a
    ``TrainConfig.model_dump(mode="json")``); runs with equal keys get equal evaluations."""
    part = {name: config.get(name) for name in UNTRAINED_EVAL_SECTIONS}
    for name, reads in UNTRAINED_EVAL_OPT_INS.items():
        if config.get(name):
            part.update({name: True, **{section: config.get(section) for section in reads}})
    return hashlib.sha256(json.dumps(part, sort_keys=True).encode()).hexdigest()[:20]


def cached_untrained_eval(folder: Path, config: dict[str, Any], compute: Callable[[], EvalMetrics]) -> EvalMetrics:
    """The untrained team's evaluation from ``folder`` when a run with the same
    ``untrained_eval_key`` stored it, else ``compute()``, stored there (atomically: runs side by side
    may both compute it, never read half of it). An unreadable entry is computed again, with a warning."""
    path = Path(folder) / f"untrained-{untrained_eval_key(config)}.json"
    if path.is_file():
        try:
            return EvalMetrics(**json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, TypeError, OSError) as exc:
            warnings.warn(f"{path}: unreadable cached evaluation ({exc}); evaluating again", TeamplayWarning,
                          stacklevel=2)
    metrics = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(metrics.to_dict(), indent=1))
    return metrics
