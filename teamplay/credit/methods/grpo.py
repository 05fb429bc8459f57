"""``grpo`` and its sibling ``gspo``: the group-normalised team reward on every message (GRPO).

``gspo`` gives the same advantages with the same options: GSPO differs from GRPO in the objective,
chosen on its own (``objective.name: gspo``). Each is ``method(batch: CreditBatch, options) ->
list[np.ndarray]`` with one float64 array of shape [T_g] per episode; skipped messages get 0.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from teamplay.credit.methods.assumptions import BROADCAST, GROUP_BASELINE
from teamplay.credit.methods.group_baseline import GroupOptions, broadcast
from teamplay.credit.registry import CardText, CreditBatch, register_credit
from teamplay.credit.values.group import batch_std, group_advantage


class GRPOOptions(GroupOptions):
    """Options of ``grpo`` and ``gspo``: the group baseline plus TRL's and verl's scaling choices.

    Defaults keep teamplay's convention (population std, std floored at eps, per-group scale);
    ``ddof=1, eps_rule="add", eps=1e-4`` is TRL's GRPO and ``eps=1e-6`` verl's.
    """

    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Divide by the group's std ('group'), by the std of every reward of the "
                             "step ('batch', TRL), or not at all ('none', Dr. GRPO).")
    eps_rule: Literal["floor", "add"] = Field(
        "floor", description="'floor': divide by max(std, eps) (scale-invariant); 'add': by std + eps "
                             "(TRL, verl: nearly equal rewards give nearly zero advantages).")

    @model_validator(mode="after")
    def _one_way_to_skip_scaling(self) -> GRPOOptions:
        if self.mode == "mean_only" and self.scale_rewards != "group":
            raise ValueError("mode 'mean_only' already skips the std; use scale_rewards: none alone")
        return self


def _scale_needs(options: GRPOOptions) -> frozenset[str]:
    return frozenset({"batch_rewards"}) if options.scale_rewards == "batch" else frozenset()


GRPO_CARD = CardText(
    "A_g = (R_g - mean R) / std R over the G episodes of one problem (the group-normalised team "
    "reward), broadcast to every spoken message of episode g; skipped turns get 0.",
    (GROUP_BASELINE, BROADCAST),
    ("tests/credit/test_methods.py::test_grpo_broadcast_skip_and_zero_sum",
     "tests/credit/test_loss_references.py::test_grpo_modes_match_trl_and_verl"),
    "no generation, no model pass: arithmetic on the G rewards",
    fails_where=("broadcast is unbiased for A* up to a term of the history alone (a per-problem baseline "
                 "changes no expected gradient): what it lacks is variance, each agent's advantage carrying "
                 "every other agent's noise (about K times its own in an additive team of K)",
                 "measured: Pearson r with the solver's A* 0.42 [0.14, 0.71] at teammate noise q = 0.5 against "
                 "0.77 at q = 0 (BENCHMARKS.md section 12)"))


@register_credit("grpo", GRPOOptions, "group-normalised team reward on every message (GRPO)",
                 requires=_scale_needs, card=GRPO_CARD)
def grpo_credit(batch: CreditBatch, options: GRPOOptions) -> list[np.ndarray]:
    """``A_g = group_advantage(rewards)[g]`` on every spoken message of episode g.

    ``scale_rewards="batch"`` divides by the std of every reward of the step, which the trainer
    passes as ``batch.resources.batch_rewards``; ``"none"`` only subtracts the group mean.

    Invariant: the episode advantages sum to 0 over the group; all spoken messages of an episode
    share one value; the advantage of an episode depends on the rewards only (never on messages).
    """
    rewards = [ep.reward for ep in batch.episodes]
    mode = "mean_only" if options.scale_rewards == "none" else options.mode
    std = None
    if options.scale_rewards == "batch":
        std = batch_std(batch.resources.need("batch_rewards", "option scale_rewards=batch"), options.ddof)
    adv = group_advantage(rewards, options.ddof, mode, options.eps, options.eps_rule, std)
    return [broadcast(ep, dict.fromkeys(ep.agents, float(a)))
            for ep, a in zip(batch.episodes, adv, strict=True)]


GSPO_CARD = CardText(
    "The same advantages as grpo (group-normalised team reward broadcast to every message); GSPO "
    "differs in the objective (one length-normalised ratio per message), chosen on its own with "
    "objective.name: gspo.",
    (GROUP_BASELINE, BROADCAST),
    ("tests/credit/test_methods.py::test_grpo_broadcast_skip_and_zero_sum",
     "tests/credit/test_loss_references.py::test_gspo_matches_trl_sequence_levels_and_verl"),
    "no generation, no model pass")


@register_credit("gspo", GRPOOptions, "GRPO advantages, for the sequence-level GSPO objective",
                 requires=_scale_needs, card=GSPO_CARD)
def gspo_credit(batch: CreditBatch, options: GRPOOptions) -> list[np.ndarray]:
    """Same advantages as ``grpo`` (same options, same invariant).

    GSPO differs from GRPO in the objective, not the advantage. The objective is chosen on its own
    (``objective.name: gspo`` selects ``teamplay.training.learn.losses.gspo_loss``, one ratio ``s_i`` per
    message); the trainer does not couple the two, so ``credit.method: gspo`` with
    ``objective.name: grpo`` trains exactly like ``grpo``. The name only lets a config say which
    objective its advantages are meant for.
    """
    return grpo_credit(batch, options)


__all__ = ["GRPOOptions", "grpo_credit", "gspo_credit"]
