"""Tiny tasks and a tiny team model for trainer tests (CPU, seconds)."""

from __future__ import annotations

import torch

from teamplay.agents.roles import Team
from teamplay.agents.team_model import TeamModel
from teamplay.envs.tasks.base import Task
from teamplay.records import TaskItem
from tests.tiny import tiny_model_and_tokenizer


class FirstTokenTask(Task):
    """Reward 1 when the completion starts with one of ``chosen`` characters (one byte = one token
    for the tiny byte-level tokenizer, so "starts with" means "the first generated token is")."""

    name = "first_token"
    splits = ("train", "test")
    answer_instruction = "Say anything."

    def __init__(self, chosen: str) -> None:
        self.chosen = chosen

    def load(self, split="test", source=None, limit=None, seed=0):
        n = limit or 8
        return [TaskItem(id=f"ft/{split}/{i}", prompt=f"Problem {i}: speak.", reference=self.chosen)
                for i in range(n)]

    def extract(self, completion: str) -> str | None:
        return completion[:1] or None

    def score(self, completion: str, item: TaskItem) -> float:
        return float(completion[:1] != "" and completion[:1] in item.reference)


class ConstantTask(FirstTokenTask):
    """Every completion scores 1: groups have zero reward variance."""

    def score(self, completion: str, item: TaskItem) -> float:
        return 1.0


def tiny_team_model(team: Team, seed: int = 0, r: int = 4, alpha: int = 8, logit_scale: float = 20.0) -> TeamModel:
    """A tiny random model with one LoRA adapter per adapter of ``team``.

    A randomly initialised head (std 0.02) after RMSNorm bounds every logit to about +-0.6, so no
    change of the hidden states could make any token likely; ``logit_scale`` widens the head so
    that a policy-gradient signal can show within a few steps.
    """
    model, tokenizer = tiny_model_and_tokenizer(seed=seed)
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    return TeamModel.from_team(model, tokenizer, team, r=r, alpha=alpha, target_modules="all-linear")


class InProcessRank:
    """The ``DataParallel`` hooks of one rank of a ``world``-rank learner group, in this process: it
    updates on its own shares and sums nothing (so its loss is that rank's). ``lockstep``: the calling
    pattern of an FSDP learner (every rank runs the same passes)."""

    def __init__(self, rank: int = 0, world: int = 1, lockstep: bool = False) -> None:
        self.rank, self.world, self.lockstep = rank, world, lockstep

    def all_finite(self, finite: bool) -> bool:
        return finite

    def all_reduce_gradients(self, params) -> None:
        pass

    def share_resolved(self, resolved):
        return resolved
