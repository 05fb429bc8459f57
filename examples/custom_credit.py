"""A credit method of your own, with an option, run on a hand-made group of episodes.

What it shows: the one signature every credit method has,
``method(batch: CreditBatch, options) -> list[np.ndarray]`` (one float array per episode, one
advantage per message); how a method declares its options (a pydantic model) and registers
(``@register_credit``); and ``assign``, which runs it the way the trainer does and checks its
output (one finite advantage per message, or one ``error:`` line naming the method).

The method, ``role_weighted``: the group-centred team reward, scaled per role by
``options.weights`` (a role not listed gets 1.0), on every spoken message; skipped turns get 0.

Run it:
    python examples/custom_credit.py
Train with it (the function is named by path; nothing is registered inside teamplay):
    credit: {method: examples/custom_credit.py:role_weighted, options: {weights: {reviewer: 0.5}}}
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from teamplay.credit import CreditBatch, assign, register_credit
from teamplay.records import Episode, Message


class RoleWeightedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt option is an error, not ignored
    weights: dict[str, float] = Field(default_factory=dict, description="Scale per role name (default 1.0).")


@register_credit("example_role_weighted", RoleWeightedOptions,
                 "centred team reward on every spoken message, scaled per role")
def role_weighted(batch: CreditBatch, options: RoleWeightedOptions) -> list[np.ndarray]:
    rewards = np.array([ep.reward for ep in batch.episodes])  # [G]
    centred = rewards - rewards.mean()  # [G]; a group of one episode gets 0
    out = []
    for ep, r in zip(batch.episodes, centred, strict=True):
        adv = np.array([options.weights.get(m.role, 1.0) * r if m.spoke else 0.0 for m in ep.messages])  # [T]
        out.append(adv)
    return out


def episode(reward: float, review_spoke: bool = True) -> Episode:
    """A proposer/reviewer episode of problem p0 with the given team reward."""
    messages = (
        Message("proposer_0", "proposer", 0, "propose", "The answer is 7."),
        Message("reviewer_0", "reviewer", 1, "review", "RIGHT" if review_spoke else "", spoke=review_spoke),
    )
    return Episode("p0", "p0#0", ("proposer_0", "reviewer_0"), messages, final_answer="7", reward=reward)


def main() -> None:
    group = CreditBatch(episodes=(episode(1.0), episode(0.0), episode(1.0, review_spoke=False)))
    # rewards 1, 0, 1: mean 2/3, centred +1/3, -2/3, +1/3; the reviewer's share is halved
    advantages = assign("example_role_weighted", group, {"weights": {"reviewer": 0.5}})
    for g, adv in enumerate(advantages):
        print(f"episode {g}: reward {group.episodes[g].reward:.0f}, advantages {np.round(adv, 4).tolist()}")
    assert np.allclose(advantages[0], [1 / 3, 1 / 6])
    assert np.allclose(advantages[1], [-2 / 3, -1 / 3])
    assert np.allclose(advantages[2], [1 / 3, 0.0])  # a skipped turn gets 0


if __name__ == "__main__":
    main()
