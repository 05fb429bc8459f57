"""Protocol behaviour: rewards of scripted policies, chats, visibility, final and initial answers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from teamplay.agents.roles import Role, Team
from teamplay.envs.protocols import get_protocol, parse_verdict
from teamplay.envs.protocols.catalog.single import SOLVER_PROMPT
from teamplay.envs.team_env import TeamEnv
from tests.envs.fakes import (
    ALL_PROTOCOLS,
    ITEMS,
    PYTHON_EXAMPLE,
    YAML_EXAMPLE,
    FakeTask,
    always_wrong,
    play,
    scripted,
    truthful,
)

ITEM = ITEMS[3]  # "What is 3 + 4?", reference "7"


@pytest.mark.parametrize("name", ALL_PROTOCOLS)
def test_oracle_scores_one_and_always_wrong_zero(name):
    for seed in range(3):
        right = play(TeamEnv(FakeTask(), name, items=ITEMS), truthful, seed=seed)
        assert right.reward == 1.0 and right.final_answer == ITEMS_BY_ID[right.problem_id].reference
        wrong = play(TeamEnv(FakeTask(), name, items=ITEMS), always_wrong, seed=seed)
        assert wrong.reward == 0.0 and wrong.final_answer is not None


ITEMS_BY_ID = {it.id: it for it in ITEMS}


def test_reset_seed_picks_items_deterministically():
    env = TeamEnv(FakeTask(), "single", items=ITEMS)
    picks = [play(env, truthful, seed=s).problem_id for s in range(8)]
    assert picks == [play(env, truthful, seed=s).problem_id for s in range(8)]
    assert len(set(picks)) > 1  # 8 seeds over 6 items do not all land on one item


def test_single_chat_layout():
    env = TeamEnv(FakeTask(), "single")
    env.reset(options={"item": ITEM})
    request = env.infos["solver_0"]["turn"]
    assert [m.role for m in request.chat] == ["system", "user", "user"]
    assert request.chat[0].content == f"{SOLVER_PROMPT} {FakeTask.answer_instruction}"
    assert request.chat[1].content == ITEM.prompt
    assert request.adapter == "solver" and request.item == ITEM and request.transcript == ()
    assert env.observe("solver_0").startswith("[system]\n" + SOLVER_PROMPT)


def test_role_prompt_and_adapter_from_team():
    team = Team(roles=(Role(name="solver", prompt="Be brief.", adapter="shared"),))
    env = TeamEnv(FakeTask(), "single", team=team)
    env.reset(options={"item": ITEM})
    request = env.infos["solver_0"]["turn"]
    assert request.chat[0].content == f"Be brief. {FakeTask.answer_instruction}"
    assert request.adapter == "shared"


def test_vote_majority_and_tie_rule():
    env = TeamEnv(FakeTask(), "vote")
    # answers 7, 8, 8 -> majority 8 (wrong: reference is 7)
    ep = play(env, scripted({("solver_0", 0): "7", ("solver_1", 0): "8", ("solver_2", 0): "8"}), item=ITEM)
    assert ep.final_answer == "8" and ep.reward == 0.0
    assert dict(ep.agent_correct) == {"solver_0": 1.0, "solver_1": 0.0, "solver_2": 0.0}
    assert ep.metadata["votes"] == {"solver_0": "7", "solver_1": "8", "solver_2": "8"}
    # answers 7, none, 9 -> tie 1:1, the first voter (solver_0) wins -> 7, reward 1
    ep = play(env, scripted({("solver_0", 0): "7", ("solver_2", 0): "9"}), item=ITEM)
    assert ep.final_answer == "7" and ep.reward == 1.0 and ep.agent_answers["solver_1"] is None
    # solvers see nothing of each other
    env.reset(options={"item": ITEM})
    env.step("7")
    assert env.infos["solver_1"]["turn"].transcript == ()


def test_proposer_reviewer_round_robin_schedule():
    protocol = get_protocol("proposer_reviewer", n_agents=2, rounds=5)
    # round k is played by index k mod 2: P0, R1, P0, R1, P0 (TRACER's (k-1) mod N, 1-based k)
    assert [t.agent for t in protocol.schedule(protocol.default_team())] == [
        "proposer_0", "reviewer_1", "proposer_0", "reviewer_1", "proposer_0"]
    team = Team(roles=(Role(name="proposer", count=1), Role(name="reviewer", count=3)))
    protocol = get_protocol("proposer_reviewer", rounds=6)
    assert [t.agent for t in protocol.schedule(team)] == [
        "proposer_0", "reviewer_1", "proposer_0", "reviewer_0", "proposer_0", "reviewer_2"]


def test_proposer_reviewer_keep_revise_and_records():
    env = TeamEnv(FakeTask(), "proposer_reviewer", protocol_options={"rounds": 5})
    texts = {
        ("proposer_0", 0): "3 + 4 = 8. The answer is 8.",
        ("reviewer_0", 1): "**WRONG**\n3 + 4 is 7.",
        ("proposer_0", 2): "Let me think again.",            # no answer: the pending 8 stays
        ("reviewer_0", 3): "wrong",
        ("proposer_0", 4): "Fixed: the answer is 7.",
    }
    seen = []

    def policy(request):
        seen.append(request)
        return scripted(texts)(request)

    ep = play(env, policy, item=ITEM)
    assert ep.final_answer == "7" and ep.reward == 1.0
    assert ep.metadata["initial_answer"] == "8"  # after round 0: wrong -> right correction
    assert [p["action"] for p in ep.metadata["proposals"]] == ["refresh", "keep", "refresh"]
    assert [(v["verdict"], v["pending_answer"]) for v in ep.metadata["verdicts"]] == [
        ("WRONG", "8"), ("WRONG", "8")]
    assert ep.metadata["vote_score"] == 0  # two WRONGs (-2), then the refresh resets it
    review = seen[1]
    assert review.metadata["pending_answer"] == "8" and review.metadata["pending_agent"] == "proposer_0"
    assert review.chat[2].role == "user"
    assert review.chat[2].content == "[proposer_0, round 1]: 3 + 4 = 8. The answer is 8."
    assert "(its answer: 8)" in review.chat[-1].content
    revise = seen[2]
    assert "WRONG" in revise.chat[-1].content and revise.metadata["last_verdict"] == "WRONG"
    # the proposer's own proposal is an assistant message, the review a headed user message
    assert [(m.role, m.content[:12]) for m in revise.chat[2:-1]] == [
        ("assistant", "3 + 4 = 8. T"), ("user", "[reviewer_0,")]


def test_proposer_reviewer_history_window_keeps_pending_visible():
    env = TeamEnv(FakeTask(), "proposer_reviewer", protocol_options={"rounds": 5, "history": 1})
    seen = []

    def policy(request):
        seen.append(request)
        return {0: "The answer is 7.", 1: "RIGHT", 2: "hmm", 3: "RIGHT"}.get(request.round, "x")

    play(env, policy, item=ITEM)
    # round 3's reviewer: the window holds only round 2's message; the pending round-0 proposal is
    # still shown, first
    assert [(m.agent, m.round) for m in seen[3].transcript] == [("proposer_0", 0), ("proposer_0", 2)]


@pytest.mark.parametrize("text,verdict", [
    ("RIGHT", "RIGHT"), ("correct.", "RIGHT"), ("  \n**Right**", "RIGHT"), ("Verdict: WRONG", "WRONG"),
    ("INCORRECT", "WRONG"), ("Incorrect, it is 7", "WRONG"), ("# wrong", "WRONG"),
    ("The answer is right", None), ("RIGHTEOUS", None), ("", None), ("not correct", None),
])
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) == verdict


@given(st.text())
def test_parse_verdict_never_raises(text):
    assert parse_verdict(text) in ("RIGHT", "WRONG", None)


def test_debate_visibility_initial_and_final():
    env = TeamEnv(FakeTask(), "debate", protocol_options={"rounds": 1})
    # round 0 answers 1, 7, 7 -> initial majority 7; round 1 answers 1, 1, 7 -> final 1
    texts = {("debater_0", 0): "1", ("debater_1", 0): "7", ("debater_2", 0): "7",
             ("debater_0", 1): "1", ("debater_1", 1): "1", ("debater_2", 1): "7"}
    seen = []

    def policy(request):
        seen.append(request)
        return scripted(texts)(request)

    ep = play(env, policy, item=ITEM)
    assert ep.metadata["initial_answer"] == "7" and ep.final_answer == "1" and ep.reward == 0.0
    round1 = [r for r in seen if r.round == 1]
    assert [r.stage for r in round1] == ["debate"] * 3
    # debater_1 in round 1 sees the three round-0 messages; debater_0's round-1 message is not
    # visible to it (simultaneous round)
    chat = round1[1].chat
    assert [m.content for m in chat[2:-1]] == ["[debater_0, round 1]: 1", "7", "[debater_2, round 1]: 7"]
    assert [m.role for m in chat[2:-1]] == ["user", "assistant", "user"]


def test_sequential_sees_predecessors_and_last_agent_decides():
    env = TeamEnv(FakeTask(), "sequential")
    seen = []
    texts = {("solver_0", 0): "7", ("solver_1", 1): "7", ("solver_2", 2): "8"}

    def policy(request):
        seen.append(request)
        return scripted(texts)(request)

    ep = play(env, policy, item=ITEM)
    assert [len(r.transcript) for r in seen] == [0, 1, 2]
    assert ep.metadata["initial_answer"] == "7" and ep.final_answer == "8" and ep.reward == 0.0
    # a last agent without an answer leaves the team without one
    ep = play(env, scripted({("solver_0", 0): "7", ("solver_1", 1): "7"}), item=ITEM)
    assert ep.final_answer is None and ep.reward == 0.0 and ep.agent_correct["solver_0"] == 1.0


def test_sequential_accepts_any_roles_in_team_order():
    team = Team(roles=(Role(name="planner"), Role(name="solver", count=2, prompt="Solve it.")))
    env = TeamEnv(FakeTask(), "sequential", team=team)
    assert env.possible_agents == ["planner_0", "solver_0", "solver_1"]
    ep = play(env, truthful, item=ITEM)
    assert [m.stage for m in ep.messages] == ["solve", "refine", "refine"] and ep.reward == 1.0


def test_yaml_example_checker_sees_solver_and_solver_decides():
    env = TeamEnv(FakeTask(), YAML_EXAMPLE)
    assert env.possible_agents == ["solver_0", "checker_0"]
    seen = []
    texts = {("solver_0", 0): "8", ("checker_0", 1): "Wrong, it is 7", ("solver_0", 2): "7"}

    def policy(request):
        seen.append(request)
        return scripted(texts)(request)

    ep = play(env, policy, item=ITEM)
    assert [r.stage for r in seen] == ["solve", "check", "revise"]
    assert [m.agent for m in seen[2].transcript] == ["solver_0", "checker_0"]
    assert ep.metadata["initial_answer"] == "8" and ep.final_answer == "7" and ep.reward == 1.0


def test_python_example_solvers_see_only_the_plan():
    env = TeamEnv(FakeTask(), PYTHON_EXAMPLE, protocol_options={"n_solvers": 3})
    assert env.possible_agents == ["planner_0", "solver_0", "solver_1", "solver_2"]
    seen = []
    texts = {("planner_0", 0): "1. add", ("solver_0", 1): "7", ("solver_1", 1): "6", ("solver_2", 1): "7"}

    def policy(request):
        seen.append(request)
        return scripted(texts)(request)

    ep = play(env, policy, item=ITEM)
    assert all([m.agent for m in r.transcript] == ["planner_0"] for r in seen[1:])
    assert ep.final_answer == "7" and ep.metadata["initial_answer"] is None  # the plan has no answer
