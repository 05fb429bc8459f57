"""Information use by withholding: scripted teams whose answer with and without each message is known
(``relay`` of adders, a single solver, a sequential chain), through ``evaluate``, its table, its
transcripts; and the best member restricted to the roles that answer."""

from __future__ import annotations

import json

import pytest

from teamplay.agents.backends.scripted import ScriptedBackend
from teamplay.cli.tables import cooperation_rows, metrics_table
from teamplay.envs.tasks.catalog.relay_sum import RelaySumTask
from teamplay.envs.team_env import TeamEnv
from teamplay.records import SamplingParams
from teamplay.training.play.evaluation import evaluate
from teamplay.training.play.rollout import RolloutRunner
from teamplay.training.play.withholding import WithheldMessage, withholding_metrics
from tests.envs.fakes import ITEMS, FakeTask, truthful


def relay_runner(k: int, n_items: int = 4):
    task = RelaySumTask(n_operands=k - 1)
    items = task.load("test", limit=n_items)
    runner = RolloutRunner(lambda: TeamEnv(task, "relay", items=items, protocol_options={"n_agents": k}),
                           ScriptedBackend("adder"), SamplingParams())
    return task, items, runner


@pytest.mark.parametrize("k", [2, 3, 5])
def test_relay_adders_need_every_informant(k, tmp_path):
    task, items, runner = relay_runner(k)
    episodes, metrics = evaluate(runner, task, items, transcripts_path=tmp_path / "t.jsonl", withhold=True)
    held = metrics.extra["cooperation"]["withholding"]
    n = len(items)
    # per episode K messages: K - 1 informants, each read by the answerer; the adder answerer sums what
    # it reads, so without any one operand its sum is wrong (the team was right: right -> wrong);
    # nobody reads the answerer's message, so withholding it changes nothing (no replay)
    assert held["messages"] == k * n and held["replayed"] == (k - 1) * n and held["changed"] == (k - 1) * n
    assert held["information_use"] == pytest.approx((k - 1) / k, abs=1e-12)
    assert held["right_to_wrong"] == pytest.approx((k - 1) / k, abs=1e-12)
    assert held["wrong_to_right"] == 0.0  # exact: 0 of k * n
    assert held["per_role"]["informant"]["information_use"] == 1.0  # exact: (k - 1) n of (k - 1) n
    assert held["per_role"]["answerer"] == {"messages": n, "replayed": 0, "changed": 0, "information_use": 0.0,
                                            "right_to_wrong": 0.0, "wrong_to_right": 0.0}
    assert held["extra_tokens"] == 0  # scripted policies generate no tokens
    rows = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(rows) == n
    for row, ep, item in zip(rows, episodes, items, strict=True):
        marks = row["withholding"]
        assert [m["message"] for m in marks] == list(range(k))
        assert [m["changed"] for m in marks] == [True] * (k - 1) + [False]
        operands = [int(x) for x in item.metadata["operands"]]
        for j, m in enumerate(marks[:-1]):
            # without informant j the answerer sums the others (no answer at all when it read none)
            rest = sum(operands) - operands[j]
            assert m["answer"] == (str(rest) if k > 2 else None)
            assert m["right_before"] and not m["right_after"]
        assert marks[-1]["answer"] == ep.final_answer == item.reference
    table = dict(cooperation_rows(metrics.extra["cooperation"]))
    assert table["information use (answer changes without a message)"] == (
        f"{(k - 1) / k:.3f} ({(k - 1) * n} of {k * n})")
    assert table["  informant"] == f"1.000 ({(k - 1) * n} of {(k - 1) * n})"


def test_relay_best_member_is_among_the_roles_that_answer():
    task, items, runner = relay_runner(3)
    _, metrics = evaluate(runner, task, items)
    coop, team = metrics.extra["cooperation"], metrics.extra["team"]
    # the informants (scored 1.0 on their own operand) are not members: the answerer is, at the team's 1.0
    assert coop["best_member"] == "answerer_0" and set(coop["member_accuracy"]) == {"answerer_0"}
    assert coop["team_minus_best_member"] == 0.0  # exact: 1.0 - 1.0
    # the informants' answers are operands, scored on their piece: the table leaves out their first-answer
    # accuracy (an operand judged against the sum reads 0), the summary keeps it
    assert coop["piece_roles"] == ["informant"]
    assert team["first_answer_accuracy"] == {"informant": 0.0, "answerer": 1.0}  # exact: 0 of 8, 4 of 4
    shown = metrics_table("relay", metrics)
    labels = list(shown.columns[0].cells)
    assert "  answerer first-answer accuracy" in labels
    assert "  informant first-answer accuracy" not in labels
    assert "best member alone (answerer_0)" in labels


def test_a_single_solver_uses_no_information():
    task = FakeTask()
    runner = RolloutRunner(lambda: TeamEnv(task, "single", items=ITEMS[:3]), ScriptedBackend(truthful),
                           SamplingParams())
    _, metrics = evaluate(runner, task, ITEMS[:3], withhold=True)
    held = metrics.extra["cooperation"]["withholding"]
    # one message per episode, read by nobody: withheld, answer unchanged, nothing replayed
    assert (held["messages"], held["replayed"], held["changed"]) == (3, 0, 0)
    assert held["information_use"] == 0.0  # exact: 0 of 3


def test_a_chain_of_restaters_uses_what_it_reads():
    """``sequential`` with a first solver stating the reference and two ``approver``s restating the
    running answer: without message 1 (or 2) the next restater has nothing to restate."""
    task = FakeTask()
    policies = {"solver_0": truthful}
    approver = ScriptedBackend("approver")

    def policy(request):
        if request.agent in policies:
            return policies[request.agent](request)
        return approver.generate([request], SamplingParams())[0].text

    runner = RolloutRunner(lambda: TeamEnv(task, "sequential", items=ITEMS[:2]), ScriptedBackend(policy),
                           SamplingParams())
    episodes, metrics = evaluate(runner, task, ITEMS[:2], withhold=True)
    assert [len(ep.messages) for ep in episodes] == [3, 3] and all(ep.reward == 1.0 for ep in episodes)
    held = metrics.extra["cooperation"]["withholding"]
    # messages 0 and 1 are read by a later solver: withheld, the chain loses the answer; message 2 is
    # the last (nobody reads it): 4 of 6 change, each right -> wrong
    assert (held["messages"], held["replayed"], held["changed"]) == (6, 4, 4)
    assert held["right_to_wrong"] == pytest.approx(4 / 6, abs=1e-12)


def test_metrics_of_hand_made_effects():
    effects = [WithheldMessage(0, 0, "a_0", "a", True, "1", True, True, False, 10),
               WithheldMessage(0, 1, "b_0", "b", True, "5", True, False, True, 6),
               WithheldMessage(1, 0, "a_0", "a", True, "5", False, True, True, 4),
               WithheldMessage(1, 1, "b_0", "b", False, "5", False, True, True)]
    out = withholding_metrics(effects, episodes=2)
    # 2 of 4 change; one right -> wrong, one wrong -> right; 20 extra tokens over 2 problems
    assert (out["changed"], out["replayed"], out["extra_tokens"]) == (2, 3, 20)
    assert out["information_use"] == 0.5 and out["right_to_wrong"] == 0.25  # exact: 2/4, 1/4
    assert out["wrong_to_right"] == 0.25 and out["extra_tokens_per_problem"] == 10.0  # exact: 1/4, 20/2
    assert out["per_role"]["a"]["information_use"] == 0.5  # exact: 1 of 2
    assert out["per_role"]["b"]["wrong_to_right"] == 0.5  # exact: 1 of 2
    assert withholding_metrics([], episodes=2) == {}
