"""The self-consistency baseline: one agent alone, sampled at the team's token cost, majority vote.

The question every multi-agent skeptic asks: would one agent, given the tokens the team spent,
do as well by sampling itself several times and voting? For each evaluated team episode on
problem p, with ``B_p`` = the completion tokens the team generated on it (``Episode.tokens``):

* the agent is the team's *answering role* (the first of the protocol's ``answer_roles``; the first
  role when every role answers) with its own adapter as the evaluation loaded it (the trained
  adapter of a checkpoint, the fresh one, which equals the base model, without), playing the
  ``single`` protocol on the whole problem;
* it is sampled (the given decoding, normally the training temperature) one episode at a time
  until its samples' generated tokens reach ``B_p``: the number of samples ``n_p`` is the smallest
  n >= 1 with ``tokens_1 + ... + tokens_n >= B_p``, so it spends at least the team's tokens and at
  most one sample more (``max_samples`` caps ``n_p``, for an agent that writes nothing);
* its answer is the majority of its ``n_p`` answers (``teamplay.envs.voting.plurality``: no-answers
  do not vote, ties go to the earliest), scored like the team's.

Samples are drawn in rounds, each one batched ``run`` over every problem still under its budget,
seeded per round. Reported (``self_consistency_metrics``): ``accuracy``, ``single_sample_accuracy``
(its first sample alone), ``samples_per_problem``, ``tokens_per_problem`` (the agent's) beside
``team_tokens_per_problem``, and ``role`` / ``adapter`` / ``temperature``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from teamplay.envs.voting import plurality
from teamplay.records import Episode, TaskItem
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.play.team_metrics import Correct


@dataclass(frozen=True)
class SoloBaseline:
    """What ``evaluate`` needs to run the baseline.

    Fields:
        runner: plays the agent alone: a ``single``-protocol env factory whose solver writes with
            ``adapter``, on the evaluation's backend, with the sampled decoding.
        role: the team's answering role; adapter: its adapter (None: a scripted policy of the
            backend, which has no adapter).
        max_samples: most samples per problem (>= 1).
    """

    runner: RolloutRunner
    role: str
    adapter: str | None
    max_samples: int = 64


@dataclass(frozen=True)
class SoloVotes:
    """One problem's self-consistency draw.

    Fields:
        budget: the team's generated tokens on the problem, ``B_p`` >= 0.
        answers: the agent's answers, one per sample, in draw order (None: no answer), length n_p >= 1.
        tokens: the generated tokens of each sample, same length; their sum >= budget unless n_p hit
            the cap.
        vote: the majority of ``answers``.
    """

    budget: int
    answers: tuple[str | None, ...]
    tokens: tuple[int, ...]
    vote: str | None


def sample_at_budget(runner: RolloutRunner, episodes: Sequence[Episode], items: dict[str, TaskItem],
                     seed: int = 0, max_samples: int = 64) -> list[SoloVotes]:
    """Per team episode, the solo agent's samples at that episode's token cost (module docstring).

    ``runner`` plays the solo agent (a ``single``-protocol env factory, the answering role's
    adapter, the sampled decoding); ``seed`` seeds round j's run as ``(seed, j)``.
    """
    if max_samples < 1:
        raise ValueError(f"self-consistency max_samples must be >= 1, got {max_samples}")
    budgets = [ep.tokens for ep in episodes]
    answers: list[list[str | None]] = [[] for _ in episodes]
    tokens: list[list[int]] = [[] for _ in episodes]
    for j in range(max_samples):
        todo = [i for i in range(len(episodes))
                if not tokens[i] or sum(tokens[i]) < budgets[i]]
        if not todo:
            break
        jobs = [RolloutJob(item=items[episodes[i].problem_id], group_id=f"solo:{j}:{i}") for i in todo]
        round_seed = int(np.random.SeedSequence([seed, j]).generate_state(1)[0]) % (2 ** 31)
        for i, solo in zip(todo, runner.run(jobs, seed=round_seed), strict=True):
            answers[i].append(solo.final_answer)
            tokens[i].append(solo.tokens)
    return [SoloVotes(b, tuple(a), tuple(t), plurality(a)) for b, a, t in zip(budgets, answers, tokens, strict=True)]


def self_consistency_metrics(votes: Sequence[SoloVotes], episodes: Sequence[Episode], correct: Correct,
                             role: str, adapter: str | None, temperature: float) -> dict[str, Any]:
    """The reported figures of the module docstring (``votes[i]`` belongs to ``episodes[i]``)."""
    n = len(votes)
    if n == 0:
        return {}
    pids = [ep.problem_id for ep in episodes]
    return {
        "accuracy": sum(correct(v.vote, p) for v, p in zip(votes, pids, strict=True)) / n,
        "single_sample_accuracy": sum(correct(v.answers[0], p) for v, p in zip(votes, pids, strict=True)) / n,
        "samples_per_problem": sum(len(v.answers) for v in votes) / n,
        "tokens_per_problem": sum(sum(v.tokens) for v in votes) / n,
        "team_tokens_per_problem": sum(v.budget for v in votes) / n,
        "role": role, "adapter": adapter, "temperature": temperature,
    }
