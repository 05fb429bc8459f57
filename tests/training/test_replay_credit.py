"""Replay Shapley through the real trainer step on the issue's four proposer/reviewer episodes.

Problem "5 + 7" (reference 12), proposer_reviewer with 3 rounds (propose, review, propose), a
compliant scripted proposer and a reviewer that follows a fixed script per episode:

    e0: proposer 13, reviewer "WRONG" (no number), proposer revises to 12      R = 1
    e1: proposer 12, reviewer wrongly "WRONG", proposer flips to 13            R = 0
    e2: proposer 13, reviewer "The sum is 12" (no verdict), proposer keeps 13  R = 0
    e3: proposer 12, reviewer "Hmm." (nothing useful), proposer keeps 12       R = 1

Replay with removal=skip: without the reviewer the first proposal stands (v(P) = 0, 1, 0, 1);
without the proposer there is no answer (v(R) = 0 = v(empty)); v(PR) = R. Two players:
phi_R = 1/2 (v(R) - v(0)) + 1/2 (v(PR) - v(P)) = 1/2 (R - v(P)) = +1/2, -1/2, 0, 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from teamplay.config import TrainConfig, build_config
from teamplay.envs.tasks import get_task
from teamplay.records import TaskItem
from teamplay.training.run.trainer import Trainer
from tests.training.fixtures import tiny_team_model
from tests.training.scripted_team import TeamScript

ITEM = TaskItem(id="sum/0", prompt="What is 5 + 7?", reference="12")
FIRST = ["wrong", "right", "wrong", "right"]
REVIEWS = {0: "WRONG", 1: "WRONG", 2: "The sum is \\boxed{12}.", 3: "Hmm."}


def review(request, tag):
    return REVIEWS[tag] if tag is not None else "Nothing to review."


def table_trainer(tmp_path, credit: dict, first=FIRST) -> tuple[Trainer, TeamScript]:
    cfg = build_config(TrainConfig, {
        "steps": 1, "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
        "rollout": {"problems_per_step": 1, "group_size": len(first)},
        "sampling": {"max_new_tokens": 2, "temperature": 1.0}, "credit": credit,
        "output_dir": str(tmp_path / "run"), "tensorboard": False, "log_episodes": len(first),
    })
    task = get_task("arith")
    backend = TeamScript(first, review)
    from teamplay.training.wiring.envs import env_factory

    _, team = env_factory(task, cfg.protocol, cfg.team)
    return Trainer(cfg, team_model=tiny_team_model(team), backend=backend, task=task, items=[ITEM]), backend


def phi_reviewer(values: list[dict], reward: float) -> float:
    v = {tuple(d["kept"]): d["value"] for d in values}
    v[()] = 0.0
    v[("proposer_0", "reviewer_0")] = v.get(("proposer_0", "reviewer_0"), reward)
    return 0.5 * (v[("reviewer_0",)] - v[()]) + 0.5 * (v[("proposer_0", "reviewer_0")] - v[("proposer_0",)])


def test_replay_shapley_gives_the_table_through_the_trainer_step(tmp_path):
    trainer, backend = table_trainer(tmp_path, {"method": "shapley",
                                                "options": {"value": "replay", "removal": "skip"}})
    result = trainer.step()
    metrics, logged = result.metrics, trainer.episode_log(result)
    assert [ep["reward"] for ep in logged] == [1.0, 0.0, 0.0, 1.0]
    phis = [phi_reviewer(ep["credit"]["replay_values"], ep["reward"]) for ep in logged]
    assert phis == [0.5, -0.5, 0.0, 0.0]  # exact: two players, 0/1 values: halves
    # the reviewer's advantage has the sign of its Shapley value (group mean of phi_R is 0)
    reviewer_adv = [ep["advantages"][1] for ep in logged]
    assert reviewer_adv[0] > 0 and reviewer_adv[1] < 0 and reviewer_adv[2] == 0 and reviewer_adv[3] == 0
    # cost: 4 episodes x 3 coalitions; v(PR) is the recorded reward and v(R) is 0 (a reviewer
    # cannot give the team's answer), so only {P} is replayed: one proposal per episode
    assert metrics["replay_queries"] == 12 and metrics["replay_free_queries"] == 8
    # ... all replays of the step in one batch: one lock-step run of 3 turns -> at most 3 calls
    assert metrics["replay_generate_calls"] <= 3


def test_masking_cannot_see_the_review_but_replay_can(tmp_path):
    # the same four episodes under value=masking: the helpful and the harmful reviewer look alike
    trainer, _ = table_trainer(tmp_path, {"method": "shapley", "options": {"value": "masking"}})
    adv = [ep["advantages"][1] for ep in trainer.episode_log(trainer.step())]
    # masking: phi_R = 0, 0, +1/2, 0 (the visible "12" in e2's review); e0 and e1 get the same advantage
    assert adv[0] == pytest.approx(adv[1]) and adv[2] > adv[0]


@pytest.mark.parametrize("removal, expected", [
    # null_message: "(no message)" has no verdict, so the removed review changes nothing
    # -> same values as skip
    ("null_message", [0.5, -0.5, 0.0, 0.0]),
])
def test_other_removals(tmp_path, removal, expected):
    trainer, _ = table_trainer(tmp_path, {"method": "shapley", "options": {"value": "replay", "removal": removal}})
    logged = trainer.episode_log(trainer.step())
    phis = [phi_reviewer(ep["credit"]["replay_values"], ep["reward"]) for ep in logged]
    assert phis == expected


def test_continuation_advantages_telescope_in_the_trainer(tmp_path):
    trainer, _ = table_trainer(tmp_path, {"method": "continuation",
                                          "options": {"samples": 1, "mode": "mean_only"}})
    logged = trainer.episode_log(trainer.step())
    rewards = np.array([ep["reward"] for ep in logged])
    for ep in logged:
        # baseline group_mean: sum_t A_t = R - mean R = R - 1/2
        assert sum(ep["advantages"]) == pytest.approx(ep["reward"] - rewards.mean(), abs=1e-12)
    # e0: V(after the wrong proposal) = 1 (this reviewer always catches), so the proposal gets
    # 1 - 1/2, the review 1 - 1 = 0 ... deterministic scripts: V(1) = V(2) = R
    e0 = logged[0]["advantages"]
    assert e0 == pytest.approx([0.5, 0.0, 0.0], abs=1e-12)


def test_report_shows_the_method_and_the_coalition_values_behind_each_advantage(tmp_path):
    from teamplay.report.data import load_run
    from teamplay.report.transcripts import episode_panel

    trainer, _ = table_trainer(tmp_path, {"method": "shapley", "options": {"value": "replay"}})
    trainer.train()
    run = load_run(tmp_path / "run")
    e0 = next(ep for ep in run.episodes if ep.episode.reward == 1.0 and "[e0]" in ep.episode.messages[0].text)
    html = episode_panel(e0, 0)
    assert "adv +" in html and "· shapley" in html  # each utterance says which method valued it
    # the replay values behind e0's reviewer credit: without the reviewer the team scored 0
    rows = {tuple(v["kept"]): v["value"] for v in e0.credit["replay_values"]}
    assert rows[("proposer_0",)] == 0.0 and rows[("proposer_0", "reviewer_0")] == 1.0
    assert "replay-values" in html and "proposer_0, reviewer_0" in html
