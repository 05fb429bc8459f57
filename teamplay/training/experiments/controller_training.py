"""Training the speak/skip controllers alone: rollouts and regret updates, no gradient.

The full ``Trainer`` learns the controller tables alongside the LoRA adapters. This loop learns
only the tables, with any backend (a scripted team included): useful to study when a fixed team
should talk, and what the tests use to check that the controllers learn the right thing.

Per step: the next ``problems_per_step`` items (cycling through ``items`` in order), each played
``group_size`` times through the ``RolloutRunner`` with the controllers in training mode, then one
:meth:`TeamControllers.learn` over the episodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.roles import Team
from teamplay.config import ProtocolConfig
from teamplay.envs.tasks.base import Task
from teamplay.records import SamplingParams, TaskItem
from teamplay.training.play.controllers import TeamControllers, answer_check, speak_rates
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.wiring.envs import env_factory


def train_controllers(controllers: TeamControllers, task: Task, protocol: ProtocolConfig,
                      backend: GenerationBackend, items: Sequence[TaskItem], steps: int,
                      problems_per_step: int = 4, group_size: int = 1, team: Team | None = None,
                      sampling: SamplingParams | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Run ``steps`` steps; returns one metrics dict per step (``speak_rate``, ``updates``,
    ``accuracy``, ``tokens``, ``counterfactual_tokens``). The tables of ``controllers`` change in place.
    A correct answer is one the task scores >= 0.5."""
    if not items:
        raise ValueError("train_controllers: no items")
    if steps < 1 or problems_per_step < 1 or group_size < 1:
        raise ValueError(f"train_controllers: steps, problems_per_step and group_size must be >= 1, got "
                         f"{steps}, {problems_per_step}, {group_size}")
    make_env, _ = env_factory(task, protocol, team, controller=controllers.controller("train"))
    runner = RolloutRunner(make_env, backend, sampling or SamplingParams())
    is_correct = answer_check(task, {item.id: item for item in items})
    history = []
    for step in range(steps):
        picked = [items[(step * problems_per_step + k) % len(items)] for k in range(problems_per_step)]
        jobs = [RolloutJob(item=item, group_id=f"c{step}:{k}:{item.id}")
                for k, item in enumerate(picked) for _ in range(group_size)]
        # env i of the step resets with seed + i: consecutive steps must not share env seeds
        episodes = runner.run(jobs, seed=seed * 1_000_003 + step * len(jobs))
        stats = controllers.learn(episodes, is_correct)
        history.append({"step": step + 1, "speak_rate": speak_rates(episodes), "updates": stats.updates,
                        "accuracy": sum(ep.reward > 0.5 for ep in episodes) / len(episodes),
                        "tokens": sum(ep.tokens for ep in episodes),
                        "counterfactual_tokens": stats.counterfactual_tokens})
    return history
