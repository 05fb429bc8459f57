"""Episode records: tokens from Generations, calls, answers per agent, ids, round trip."""

from __future__ import annotations

import json

import pytest

from teamplay.envs.team_env import TeamEnv
from teamplay.records import ControllerDecision, Episode, Generation
from tests.envs.fakes import ITEMS, FakeTask, play, truthful

ITEM = ITEMS[3]  # reference "7"


def _generation(request):
    text = truthful(request)
    n = 2 + request.round  # 2, 3, 4, ... tokens per turn
    return Generation(text=text, prompt_ids=(1, 2, 3), completion_ids=tuple(range(10, 10 + n)),
                      logprobs=tuple(-0.5 for _ in range(n)), adapter=request.adapter)


def test_generation_tokens_calls_and_answers():
    env = TeamEnv(FakeTask(), "proposer_reviewer", protocol_options={"rounds": 3})
    ep = play(env, _generation, item=ITEM, group_id="step0/item3")
    # rounds 0, 1, 2 generate 2 + 3 + 4 = 9 completion tokens in 3 calls
    assert ep.tokens == 9 and ep.calls == 3
    first = ep.messages[0]
    assert first.prompt_ids == (1, 2, 3) and first.completion_ids == (10, 11)
    assert first.logprobs == (-0.5, -0.5) and first.adapter == "proposer"  # exact: the fake generation's constants
    assert ep.messages[1].adapter == "reviewer" and ep.messages[1].stage == "review"
    assert ep.problem_id == ITEM.id and ep.group_id == "step0/item3"
    assert ep.agents == ("proposer_0", "reviewer_0")
    assert dict(ep.agent_answers) == {"proposer_0": "7", "reviewer_0": "7"}
    assert dict(ep.agent_correct) == {"proposer_0": 1.0, "reviewer_0": 1.0}
    assert ep.metadata["protocol"] == "proposer_reviewer" and ep.metadata["truncated_turns"] == []
    assert Episode.from_dict(ep.to_dict()) == ep


def test_string_actions_have_no_tokens_and_group_defaults_to_item():
    ep = play(TeamEnv(FakeTask(), "vote"), truthful, item=ITEM)
    assert ep.tokens == 0 and ep.calls == 3 and ep.group_id == ITEM.id
    assert all(m.adapter is None and m.completion_ids == () for m in ep.messages)


def test_truncated_prompts_are_listed():
    def truncated(request):
        return Generation(text="7", truncated=request.agent == "solver_1")

    ep = play(TeamEnv(FakeTask(), "vote"), truncated, item=ITEM)
    assert ep.metadata["truncated_turns"] == [1]


def test_adapter_mismatch_is_an_error():
    env = TeamEnv(FakeTask(), "single")
    env.reset(options={"item": ITEM})
    with pytest.raises(ValueError, match="adapter 'reviewer'.*'solver'"):
        env.step(Generation(text="7", adapter="reviewer"))


def test_episode_before_the_end_raises_and_infos_at_the_end():
    env = TeamEnv(FakeTask(), "vote")
    env.reset(options={"item": ITEM})
    with pytest.raises(RuntimeError, match="before the episode finished"):
        env.episode()
    for text in ("7", "8", "7"):
        env.step(text)
    assert all(env.terminations.values()) and env.rewards == dict.fromkeys(env.agents, 1.0)
    assert env.infos["solver_1"] == {"final_answer": "7", "reward": 1.0, "answer": "8", "correct": 0.0}
    assert env.observe("solver_0") == ""


def test_reset_starts_a_fresh_episode():
    env = TeamEnv(FakeTask(), "single", items=ITEMS)
    first = play(env, truthful, item=ITEMS[0])
    second = play(env, truthful, item=ITEMS[1])
    assert len(first.messages) == len(second.messages) == 1
    assert second.problem_id == ITEMS[1].id


def test_controller_decision_is_typed_and_round_trips():
    d = ControllerDecision(agent="reviewer_0", stage="review", round=1, spoke=False,
                           state=("controller", "vote_0", "last"), mode="train",
                           pending_answer="8", counterfactual_text="RIGHT", counterfactual_tokens=2)
    assert ControllerDecision.from_dict(json.loads(json.dumps(d.to_dict()))) == d
    # a renamed field is an error at once, never a silently missing key
    with pytest.raises(ValueError, match="unknown fields"):
        ControllerDecision.from_dict({**d.to_dict(), "pending": "8"})
    with pytest.raises(TypeError):
        ControllerDecision(agent="a", stage="review", round=0, spoke=True, pending="8")  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        d.pending  # noqa: B018
    ep = Episode(problem_id="p", group_id="g", agents=("reviewer_0",), messages=(), final_answer=None, reward=0.0,
                 decisions=(d, d))
    assert ep.counterfactual_tokens == 4
    assert Episode.from_dict(json.loads(json.dumps(ep.to_dict()))).decisions == (d, d)


def test_recorded_entropies_reach_the_message_and_round_trip():
    def with_entropies(request):
        g = _generation(request)
        return Generation(text=g.text, prompt_ids=g.prompt_ids, completion_ids=g.completion_ids,
                          logprobs=g.logprobs, adapter=g.adapter,
                          entropies=tuple(0.25 * (k + 1) for k in range(len(g.completion_ids))))

    env = TeamEnv(FakeTask(), "proposer_reviewer", protocol_options={"rounds": 2})
    ep = play(env, with_entropies, item=ITEM, group_id="g")
    assert ep.messages[0].entropies == (0.25, 0.5)  # exact: 0.25 * (k + 1): exact
    again = Episode.from_dict(json.loads(json.dumps(ep.to_dict())))
    assert again == ep
    plain = play(TeamEnv(FakeTask(), "proposer_reviewer", protocol_options={"rounds": 2}), _generation,
                 item=ITEM, group_id="g")
    assert "entropies" not in plain.to_dict()["messages"][0]  # none recorded: nothing logged
    with pytest.raises(ValueError, match="1 entropies"):
        type(ep.messages[0])(agent="a", role="r", round=0, stage="s", text="x", completion_ids=(1, 2),
                             logprobs=(-1.0, -1.0), entropies=(0.5,))
