"""The speak/skip hook: skipped turns cost no call, are recorded, and keep the protocol's state."""

from __future__ import annotations

import pytest

from teamplay.envs.protocols import get_protocol
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from tests.envs.fakes import ITEMS, YAML_EXAMPLE, FakeTask, play, scripted, truthful

ITEM = ITEMS[3]  # reference "7"


def test_skipped_reviews_cost_nothing_and_are_recorded():
    decisions = []

    def skip_reviews(decision):
        decisions.append(decision)
        return decision.turn.stage != "review"

    protocol = get_protocol("proposer_reviewer", rounds=5, controller=skip_reviews)
    env = TeamEnv(FakeTask(), protocol)
    selected = []

    def policy(request):
        selected.append(request.agent)
        return truthful(request)

    ep = play(env, policy, item=ITEM)
    assert selected == ["proposer_0"] * 3  # the reviewer is never asked to act
    assert [m.spoke for m in ep.messages] == [True, False, True, False, True]
    assert all(m.text == "" and m.n_tokens == 0 for m in ep.messages if not m.spoke)
    assert ep.calls == 3 and ep.metadata["skipped"] == 2 and ep.reward == 1.0
    # round 0 has no pending answer: never skippable, so the controller is first asked in round 1
    assert [d.turn.round for d in decisions] == [1, 2, 3, 4]
    assert decisions[0].request.metadata["pending_answer"] == "7" and decisions[0].rounds == 5
    assert [v["spoke"] for v in ep.metadata["verdicts"]] == [False, False]


def test_skipped_proposal_keeps_the_pending_answer():
    protocol = get_protocol("proposer_reviewer", rounds=3,
                            controller=lambda d: d.turn.stage != "propose")
    ep = play(TeamEnv(FakeTask(), protocol), scripted({("proposer_0", 0): "7", ("reviewer_0", 1): "WRONG"}),
              item=ITEM)
    assert [p["action"] for p in ep.metadata["proposals"]] == ["refresh", "skip"]
    assert ep.final_answer == "7" and ep.reward == 1.0


def test_debate_skip_keeps_the_earlier_vote():
    # debater_2 skips round 1: its round-0 answer 7 still votes. Round 1: 8, 8 from the others.
    # Votes 8, 8, 7 -> 8.
    protocol = get_protocol("debate", rounds=1, controller=lambda d: d.turn.agent != "debater_2")
    texts = {("debater_0", 0): "7", ("debater_1", 0): "7", ("debater_2", 0): "7",
             ("debater_0", 1): "8", ("debater_1", 1): "8"}
    ep = play(TeamEnv(FakeTask(), protocol), scripted(texts), item=ITEM)
    assert ep.final_answer == "8" and ep.metadata["votes"]["debater_2"] == "7"
    assert ep.calls == 5 and not ep.messages[-1].spoke and ep.messages[-1].agent == "debater_2"


def test_yaml_skippable_entry():
    ep = play(TeamEnv(FakeTask(), get_protocol(YAML_EXAMPLE, controller=lambda d: False)), truthful, item=ITEM)
    assert [m.stage for m in ep.messages if not m.spoke] == ["check"]


def test_stochastic_controller_reproduces_under_seed():
    def coin(decision):
        return bool(decision.rng.random() < 0.5)

    def run(seed):
        env = TeamEnv(FakeTask(), get_protocol("proposer_reviewer", rounds=9, controller=coin), items=ITEMS)
        return [m.spoke for m in play(env, truthful, seed=seed).messages]

    assert run(5) == run(5)
    assert len({tuple(run(s)) for s in range(6)}) > 1  # the coin does depend on the seed


@pytest.mark.parametrize("name", ["single", "vote", "sequential"])
def test_controller_refused_where_nothing_is_skippable(name):
    with pytest.raises(ConfigError, match="unknown option 'controller'"):
        get_protocol(name, controller=lambda d: True)
