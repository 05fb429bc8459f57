"""Test doubles for env tests: an exact-match integer task, a few items, scripted policies.

``FakeTask`` reads the last integer of a text as its answer, so ``"RIGHT\\nThe answer is 8."`` has
answer ``"8"`` and ``"no idea"`` has none.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from teamplay.envs.protocols import protocol_names
from teamplay.envs.protocols.registry import PROTOCOLS
from teamplay.envs.tasks.base import Task
from teamplay.records import Episode, Generation, TaskItem, TurnRequest

REPO = Path(__file__).resolve().parents[2]
YAML_EXAMPLE = str(REPO / "configs" / "protocols" / "solver_checker.yaml")
PYTHON_EXAMPLE = str(REPO / "configs" / "protocols" / "example_protocol.py")
#: the registered protocols any task fits (``relay`` and ``split`` need items of their own shape: their
#: ``example_task``); a new registered protocol joins the tests that use these without a list to edit
BUILTINS = [name for name in protocol_names() if PROTOCOLS.get(name).example_task is None]
ALL_PROTOCOLS = [*BUILTINS, YAML_EXAMPLE, PYTHON_EXAMPLE]

_INT = re.compile(r"-?\d+")


class FakeTask(Task):
    """Exact match of the last integer in the text against ``item.reference``."""

    name = "fake"
    answer_instruction = "End with 'The answer is X.'"

    def load(self, split: str = "test", source: str | None = None, limit: int | None = None,
             seed: int = 0) -> list[TaskItem]:
        return list(ITEMS[:limit])

    def extract(self, completion: str) -> str | None:
        found = _INT.findall(completion)
        return found[-1] if found else None

    def score(self, completion: str, item: TaskItem) -> float:
        return float(self.extract(completion) == item.reference)


# references 2*i + 1 so that no item's answer is 0 (a wrong answer is reference + 1)
ITEMS = [TaskItem(id=f"fake/{i}", prompt=f"What is {i} + {i + 1}?", reference=str(2 * i + 1))
         for i in range(6)]

Policy = Callable[[TurnRequest], "str | Generation"]


def truthful(request: TurnRequest) -> str:
    """Always the right answer; a reviewer judges the pending answer truthfully."""
    ref = request.item.reference
    if request.stage == "review":
        verdict = "RIGHT" if request.metadata["pending_answer"] == ref else "WRONG"
        return f"{verdict}\nThe answer is {ref}."
    return f"Adding the numbers gives {ref}. The answer is {ref}."


def always_wrong(request: TurnRequest) -> str:
    """Always reference + 1; a reviewer approves everything."""
    wrong = int(request.item.reference) + 1
    if request.stage == "review":
        return f"RIGHT\nThe answer is {wrong}."
    return f"The answer is {wrong}."


def play(env, policy: Policy, seed: int | None = 0, item: TaskItem | None = None,
         group_id: str | None = None) -> Episode:
    """Run one episode of an AEC ``env`` with ``policy``; returns ``env.episode()``."""
    options = {}
    if item is not None:
        options["item"] = item
    if group_id is not None:
        options["group_id"] = group_id
    env.reset(seed=seed, options=options or None)
    for _agent in env.agent_iter():
        _, _, terminated, truncated, info = env.last()
        env.step(None if terminated or truncated else policy(info["turn"]))
    return env.episode()


def scripted(texts: dict[tuple[str, int], str], default: str = "no idea") -> Policy:
    """A policy answering ``texts[(agent, round)]`` (``default`` for unlisted turns)."""
    return lambda request: texts.get((request.agent, request.round), default)
