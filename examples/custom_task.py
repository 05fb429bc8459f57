"""A task of your own: items made in code, an answer extractor and a verifier, played by a team.

What it shows: the three methods a ``Task`` implements (``load``, ``extract``, ``score``; the
verifier returns a score in [0, 1] and never raises, whatever the text), and the same task played
by a ``vote`` team in ``TeamEnv``, teamplay's PettingZoo environment, with a hand-written policy
in PettingZoo's agent loop.

Run it:
    python examples/custom_task.py
Evaluate it with a scripted team, or train on it (the class is named by path):
    teamplay eval --task examples/custom_task.py:LetterCount --backend scripted --policy truthful
    task: {name: examples/custom_task.py:LetterCount, split: train}
"""

from __future__ import annotations

import random
import re

from teamplay.envs.tasks.base import Task
from teamplay.envs.team_env import TeamEnv
from teamplay.records import TaskItem, TurnRequest

WORDS = ("banana", "teamplay", "credit", "protocol", "reviewer", "adapter", "episode", "verifier")


class LetterCount(Task):
    """How many times a letter occurs in a word; the reference is the count."""

    name = "letter_count"
    splits = ("train", "test")
    answer_instruction = "End with 'The answer is N.' where N is a number."

    def load(self, split="test", source=None, limit=None, seed=0):
        rng = random.Random(f"{split}/{seed}")  # the same items for the same split and seed
        items = []
        for i in range(limit or 32):
            word = rng.choice(WORDS)
            letter = rng.choice(sorted(set(word)))
            items.append(TaskItem(id=f"letter_count/{split}/{i}", prompt=f"How many times does '{letter}' "
                                  f"occur in the word '{word}'?", reference=str(word.count(letter))))
        return items

    def extract(self, completion):
        numbers = re.findall(r"-?\d+", completion[-2000:])  # bounded work on any text
        return numbers[-1] if numbers else None

    def score(self, completion, item):
        return float(self.extract(completion) == item.reference)


def counting_policy(request: TurnRequest) -> str:
    """Reads the word and the letter from the problem and counts (a stand-in for a model)."""
    letter, word = re.findall(r"'([^']+)'", request.item.prompt)
    return f"I count them. The answer is {word.count(letter)}."


def main() -> None:
    task = LetterCount()
    items = task.load("test", limit=4)
    assert task.score("The answer is 3.", TaskItem("x", "", "3")) == 1.0
    assert task.score("\u2203 no digits at all", TaskItem("x", "", "3")) == 0.0  # never raises
    env = TeamEnv(task, "vote", items=items, protocol_options={"n_agents": 3})
    for seed, item in enumerate(items):
        env.reset(seed=seed, options={"item": item})
        for _agent in env.agent_iter():
            _, _, terminated, truncated, info = env.last()
            env.step(None if terminated or truncated else counting_policy(info["turn"]))
        ep = env.episode()
        print(f"{ep.problem_id}: final answer {ep.final_answer}, team reward {ep.reward}")
        assert ep.reward == 1.0


if __name__ == "__main__":
    main()
