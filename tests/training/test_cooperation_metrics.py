"""Cooperation metrics (per-message corrections and harms, the team against its best member) on
hand-built episodes, each number worked out in the comments; then through ``teamplay eval``'s
summary, its table and the report."""

from __future__ import annotations

import json

import pytest

from teamplay.agents.backends.scripted import ScriptedBackend
from teamplay.cli.tables import cooperation_rows
from teamplay.envs.team_env import TeamEnv
from teamplay.records import Episode, Message, SamplingParams, TaskItem
from teamplay.report.html import cooperation_table
from teamplay.training.play.evaluation import EvalMetrics, evaluate, summarize
from teamplay.training.play.rollout import RolloutRunner
from teamplay.training.play.team_metrics import cooperation_metrics, episode_cooperation
from tests.envs.fakes import ITEMS, FakeTask, truthful


def correct(answer, _problem_id):
    return answer == "5"


AGENTS = ("solver_0", "solver_1")


def chain(i: int, answers: list[str | None], skipped: tuple[int, ...] = ()) -> Episode:
    """A sequential episode: message r is round r, alternating solver_0 / solver_1; reference 5;
    final answer the last one given; each agent's score its own last answer's."""
    messages = tuple(Message(AGENTS[r % 2], "solver", r, "solve", "" if r in skipped else f"\\boxed{{{a}}}",
                             answer=None if r in skipped else a, spoke=r not in skipped)
                     for r, a in enumerate(answers))
    given = [m.answer for m in messages if m.answer is not None]
    final = given[-1] if given else None
    last = {m.agent: m.answer for m in messages if m.answer is not None}
    return Episode(f"p{i}", f"g{i}", AGENTS, messages, final, float(final == "5"),
                   agent_correct={a: float(last.get(a) == "5") for a in AGENTS})


# four episodes, reference 5 (chances: messages after the first answered round)
EPISODES = [
    chain(0, ["6", "5", "5"]),    # 6 -> 5 correction, 5 -> 5 nothing: 2 chances, 1 correction
    chain(1, ["5", "6", "5"]),    # 5 -> 6 harm, 6 -> 5 correction: 2 chances, 1 correction, 1 harm
    chain(2, ["5", None, "5"], skipped=(1,)),  # the skipped turn is no chance; 5 -> 5: 1 chance
    chain(3, ["6", "7"]),         # 6 -> 7 wrong to wrong: 1 chance, nothing
]


def test_per_episode_counts_worked_by_hand():
    counts = [episode_cooperation(ep, correct) for ep in EPISODES]
    assert [(c.chances, c.corrections, c.harms) for c in counts] == [(2, 1, 0), (2, 1, 1), (1, 0, 0), (1, 0, 0)]
    # solver_0's last answers: 5, 5, 5, 6; solver_1's: 5, 6, none, 7
    assert [dict(c.member_correct) for c in counts] == [
        {"solver_0": 1.0, "solver_1": 1.0}, {"solver_0": 1.0, "solver_1": 0.0},
        {"solver_0": 1.0, "solver_1": 0.0}, {"solver_0": 0.0, "solver_1": 0.0}]


def test_aggregate_rates_worked_by_hand():
    out = cooperation_metrics(EPISODES, correct)
    # 6 chances in all; corrections in episodes 0 and 1 (2), one harm in episode 1
    assert (out["chances"], out["corrections"], out["harms"]) == (6, 2, 1)
    assert out["corrections_per_message"] == 2 / 6 and out["harms_per_message"] == 1 / 6
    # members alone: solver_0 3/4, solver_1 1/4; the team (finals 5, 5, 5, 7) 3/4: a margin of 0
    # exact: means of 0/1 scores over 2 or 4 episodes
    assert out["member_accuracy"] == {"solver_0": 0.75, "solver_1": 0.25}
    # exact: means of 0/1 scores over 2 or 4 episodes
    assert out["best_member"] == "solver_0" and out["best_member_accuracy"] == 0.75
    assert out["team_minus_best_member"] == 0.0  # exact: means of 0/1 scores over 2 or 4 episodes


def test_simultaneous_first_round_and_ties():
    # vote-like: one round only, nobody could read an answer: no chances, so no rates (not 0)
    ep = Episode("p", "g", AGENTS, (Message("solver_0", "solver", 0, "solve", "5", answer="5"),
                                    Message("solver_1", "solver", 0, "solve", "6", answer="6")),
                 "5", 1.0, agent_correct={"solver_0": 1.0, "solver_1": 0.0})
    twin = Episode("q", "g", AGENTS, ep.messages, "6", 0.0, agent_correct={"solver_0": 0.0, "solver_1": 1.0})
    out = cooperation_metrics([ep, twin], correct)
    assert out["chances"] == 0 and "corrections_per_message" not in out and "harms_per_message" not in out
    # both members 1/2: the tie goes to the first in team order; the team's 1/2 ties it
    # exact: means of 0/1 scores over 2 or 4 episodes
    assert out["best_member"] == "solver_0" and out["team_minus_best_member"] == 0.0


def test_the_team_beats_its_best_member():
    # a split-like team: each agent is scored on its own piece, both pieces wrong in episode 0 yet
    # the team right (agent_correct is what the protocol says, not the final answer's score)
    ep = chain(0, ["6", "5"])
    odd = Episode("p9", "g9", AGENTS, ep.messages, "5", 1.0, agent_correct={"solver_0": 0.0, "solver_1": 0.0})
    out = cooperation_metrics([odd, chain(1, ["6", "7"])], correct)
    # team (1 + 0) / 2 = 1/2; both members 0: best solver_0 (first of equals) at 0, margin +1/2
    # exact: means of 0/1 scores over 2 or 4 episodes
    assert out["best_member"] == "solver_0" and out["best_member_accuracy"] == 0.0
    assert out["team_minus_best_member"] == 0.5  # exact: means of 0/1 scores over 2 or 4 episodes


def metrics_with(coop: dict) -> EvalMetrics:
    return EvalMetrics(episodes=4, team_accuracy=0.75, role_accuracy={}, any_agent_right=1.0, initial_accuracy=0.5,
                       wrong_to_right=0.25, right_to_wrong=0.0, tokens_per_problem=0.0, calls_per_problem=3.0,
                       extra={"cooperation": coop})


def test_eval_summary_table_and_report_show_them():
    task = FakeTask()
    items = {f"p{i}": TaskItem(id=f"p{i}", prompt="2 + 3?", reference="5") for i in range(4)}
    summary = summarize(EPISODES, items, task)
    coop = summary.extra["cooperation"]
    assert coop["corrections_per_message"] == 2 / 6 and coop["best_member"] == "solver_0"
    json.dumps(summary.to_dict())  # JSON-ready, as results.json needs
    rows = dict(cooperation_rows(coop))
    assert rows["corrections / message"] == "0.333 (2 of 6)" and rows["harms / message"] == "0.167 (1 of 6)"
    assert rows["team - best member"] == "+0.000"
    html = cooperation_table([("eval", metrics_with(coop)), ("other", None)])
    assert "<td>corrections / message</td><td>0.333</td><td>—</td>" in html
    assert "<td>best member</td><td>solver_0</td><td>—</td>" in html
    assert "<td>team − best member</td><td>+0.000</td>" in html


def test_evaluate_writes_each_episodes_counts_into_its_transcript(tmp_path):
    task = FakeTask()
    runner = RolloutRunner(lambda: TeamEnv(task, "sequential", items=ITEMS[:2]), ScriptedBackend(truthful),
                           SamplingParams())
    _, metrics = evaluate(runner, task, ITEMS[:2], transcripts_path=tmp_path / "t.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    # 3 agents in a chain all right: rounds 1 and 2 could change the answer, neither does
    assert [r["cooperation"]["chances"] for r in rows] == [2, 2]
    assert metrics.extra["cooperation"]["corrections_per_message"] == 0.0
    assert metrics.extra["cooperation"]["team_minus_best_member"] == pytest.approx(0.0)
