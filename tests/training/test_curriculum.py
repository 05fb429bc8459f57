"""The difficulty curriculum (``curriculum:``): the stage rises when the moving average of the
training reward reaches the threshold and never below it, each step logs its stage, a resumed run
continues at the stage (and with the window) of the uninterrupted one, held-out evaluations play the
run's own config, and a stage that cannot be played is refused when the config loads.

The real runs use the ``review`` protocol with a scripted ``noisy_proposer`` and the tiny model as
reviewer. A review of 3 new tokens after "Verdict:" cannot spell RIGHT or WRONG (5 letters each), so
every review is malformed and the proposal stands: the team reward is exactly the proposer's
correctness, 1 for ``p_right=1`` and 0 for ``p_right=0``. The stages' rewards are therefore known.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from teamplay.agents.backends.hf import HFBackend
from teamplay.agents.roles import Team
from teamplay.cli import app
from teamplay.config import CurriculumConfig, TrainConfig, build_config
from teamplay.errors import ConfigError
from teamplay.training.run.curriculum import CurriculumSchedule
from teamplay.training.run.trainer import Trainer
from teamplay.training.store.checkpoint import list_checkpoints, load_checkpoint
from tests.training.fixtures import FirstTokenTask, tiny_team_model
from tests.training.test_train_steps import lines

runner = CliRunner()


def schedule(threshold: float = 0.6, window: int = 2, stages: int = 3) -> CurriculumSchedule:
    return CurriculumSchedule(CurriculumConfig(stages=[{}] * stages, threshold=threshold, window=window))


# ------------------------------------------------------------------------------ the rule alone
def test_the_stage_rises_when_the_moving_average_reaches_the_threshold():
    s = schedule(threshold=0.6, window=2)
    # step 1: one value, the window of 2 is not full; step 2: (0.5 + 0.6) / 2 = 0.55 < 0.6;
    # step 3: (0.6 + 0.7) / 2 = 0.65 >= 0.6, so step 4 plays stage 1 and the window starts empty
    assert s.observe(0.5) == {"stage": 0, "moving_average": None, "next_stage": 0}
    average = pytest.approx(0.55, abs=1e-12)
    assert s.observe(0.6) == {"stage": 0, "moving_average": average, "next_stage": 0}  # exact: ints, and approx
    average = pytest.approx(0.65, abs=1e-12)
    assert s.observe(0.7) == {"stage": 0, "moving_average": average, "next_stage": 1}  # exact: ints, and approx
    # stage 1 is judged on its own steps only: 0.9 alone does not fill the window, though the last
    # two steps of the run (0.7, 0.9) average 0.8
    assert s.observe(0.9) == {"stage": 1, "moving_average": None, "next_stage": 1}
    assert s.observe(0.4)["next_stage"] == 2  # (0.9 + 0.4) / 2 = 0.65
    assert s.stage == 2 and s.values == []


def test_the_threshold_itself_raises_the_stage():
    s = schedule(threshold=0.5, window=2)
    s.observe(0.25)
    assert s.observe(0.75) == {"stage": 0, "moving_average": 0.5, "next_stage": 1}  # exact: (0.25 + 0.75) / 2


def test_no_rise_below_the_threshold_and_none_past_the_last_stage():
    s = schedule(threshold=0.6, window=3)
    # single steps above 0.6, but no 3 in a row average 0.6: the largest mean is (0.59 + 0.6 + 0.6) / 3 = 0.5967
    values = [0.59, 0.6, 0.6, 0.59, 0.2, 1.0, 0.55, 0.0, 0.9]
    assert all(s.observe(v)["next_stage"] == 0 for v in values)
    last = schedule(threshold=0.5, window=1, stages=2)
    assert last.observe(1.0)["next_stage"] == 1
    assert [last.observe(1.0)["next_stage"] for _ in range(3)] == [1, 1, 1]  # the last stage plays to the end


def test_a_state_from_another_curriculum_is_refused():
    s = schedule(window=2, stages=3)
    s.observe(0.1)
    copy = schedule(window=2, stages=3)
    copy.load_state_dict(s.state_dict())
    assert copy.state_dict() == {"stage": 0, "values": [0.1]}  # exact: the state holds the observed value as given
    for bad in ({"stage": 3, "values": []}, {"stage": 0, "values": [0.1, 0.2]}):
        with pytest.raises(ConfigError, match="does not fit this curriculum"):
            copy.load_state_dict(bad)


# ------------------------------------------------------------------------------ refused at load
def team(p_right: float, count: int = 1) -> dict:
    return {"roles": [{"name": "proposer", "policy": f"scripted:noisy_proposer(p_right={p_right})"},
                      {"name": "reviewer", "count": count}]}


def curriculum(*stages: dict, threshold: float = 0.9, window: int = 2) -> dict:
    return {"stages": list(stages), "threshold": threshold, "window": window}


@pytest.mark.parametrize(("extra", "message"), [
    ({"curriculum": curriculum({"task": {"options": {"max_operand": 10}}}, {"task": {"options": {"digits": 3}}})},
     "curriculum.stages[1]: task 'arith' does not take options ['digits']"),
    ({"curriculum": curriculum({}, {"task": {"options": {"max_operand": 1}}})},
     "curriculum.stages[1]: arith: max_operand must be an integer from 2"),
    ({"curriculum": curriculum({}, {"protocol": {"options": {"rounds": 2}}})},
     "curriculum.stages[1]: protocol 'review': unknown option 'rounds'"),
    ({"curriculum": curriculum({}, {"team": {"roles": [{"name": "proposer"}, {"name": "reviewer"}]}})},
     "curriculum.stages[1].team: a stage may change a role's count, prompt or scripted policy, not the roles"),
    ({"curriculum": curriculum({})}, "curriculum.stages: a curriculum needs at least two stages, got 1"),
    ({"curriculum": curriculum({}, {}, threshold=1.5)}, "curriculum.threshold"),
    ({"curriculum": {**curriculum({}, {}), "metric": "train/reward_mean"}}, "curriculum.metric"),
    ({"curriculum": curriculum({}, {}), "rollout": {"max_staleness": 0}},
     "curriculum: not supported with rollout.max_staleness yet"),
])
def test_a_stage_that_cannot_be_played_is_refused_in_one_line(tmp_path, extra, message):
    data = {"protocol": {"name": "review"}, "team": team(0.5), **extra}
    with pytest.raises(ConfigError) as refused:
        build_config(TrainConfig, data)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["train", "--config", str(path), "-o", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and message in result.output
    assert "Traceback" not in result.output and not (tmp_path / "run").exists()


def test_a_stage_may_change_k_and_the_policies():
    cfg = build_config(TrainConfig, {"protocol": {"name": "vote", "options": {"n_agents": 5}},
                                     "curriculum": curriculum({"protocol": {"options": {"n_agents": 3}}}, {})})
    assert [s.protocol.options for s in cfg.curriculum.stages] == [{"n_agents": 3}, {}]
    build_config(TrainConfig, {"protocol": {"name": "review"}, "team": team(0.0),
                               "curriculum": curriculum({"team": team(0.9)}, {"team": team(0.6)}, {})})


# ------------------------------------------------------------------------------ real runs
def review_config(folder: Path, stages: list[dict], steps: int, **extra) -> TrainConfig:
    """A review run whose own team has the proposer always wrong (the target difficulty)."""
    return build_config(TrainConfig, {
        "steps": steps, "protocol": {"name": "review"}, "team": team(0.0),
        "task": {"split": "train", "limit": 8}, "rollout": {"problems_per_step": 2, "group_size": 2},
        "sampling": {"max_new_tokens": 3, "temperature": 1.0}, "eval_sampling": {"max_new_tokens": 3},
        "output_dir": str(folder), "tensorboard": False, "checkpoint_every": 1, "log_episodes": 0,
        "curriculum": curriculum(*stages, threshold=0.9, window=2), **extra})


def review_trainer(cfg: TrainConfig) -> Trainer:
    model = tiny_team_model(Team.model_validate(team(0.0)))
    return Trainer(cfg, team_model=model, backend=HFBackend(model, max_prompt_tokens=1024))


#: stage 0: sums to 10 with a proposer always right; stage 1: to 40, still right; stage 2: the
#: run's own config (sums to 99, the proposer always wrong)
STAGES = [{"task": {"options": {"max_operand": 10}}, "team": team(1.0)},
          {"task": {"options": {"max_operand": 40}}, "team": team(1.0)}, {}]


def test_a_real_run_raises_the_stage_and_logs_it_every_step(tmp_path):
    cfg = review_config(tmp_path / "run", STAGES, steps=6, eval_task={"split": "test", "limit": 2})
    trainer = review_trainer(cfg)
    assert {item.metadata["max_operand"] for item in trainer.items} == {10}  # stage 0 from the first step
    result = trainer.train()
    logged = [line for line in lines(tmp_path / "run", "metrics.jsonl") if "reward_mean" in line]
    # steps 1-2 at stage 0 (reward 1): raised after step 2 on the average 1.0; steps 3-4 at stage 1
    # (reward 1): raised after step 4; steps 5-6 at stage 2, the proposer always wrong (reward 0)
    assert [line["reward_mean"] for line in logged] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert [line["curriculum"] for line in logged] == [
        {"stage": 0, "moving_average": None, "next_stage": 0}, {"stage": 0, "moving_average": 1.0, "next_stage": 1},
        {"stage": 1, "moving_average": None, "next_stage": 1}, {"stage": 1, "moving_average": 1.0, "next_stage": 2},
        {"stage": 2, "moving_average": None, "next_stage": 2}, {"stage": 2, "moving_average": 0.0, "next_stage": 2}]
    assert {item.metadata["max_operand"] for item in trainer.items} == {99}  # the last stage: the run's own task
    # held-out evaluations play the run's own team (proposer always wrong) whatever the stage
    assert result.eval_before.team_accuracy == 0.0 and result.eval_after.team_accuracy == 0.0


def test_a_run_whose_reward_stays_below_the_threshold_stays_at_stage_0(tmp_path):
    stages = [{"team": team(0.0)}, {"team": team(1.0)}]
    history = review_trainer(review_config(tmp_path / "run", stages, steps=3)).train().history
    assert [h["curriculum"]["next_stage"] for h in history] == [0, 0, 0]
    assert [h["reward_mean"] for h in history] == [0.0, 0.0, 0.0]


def test_a_resumed_run_continues_at_the_stage_and_window_of_the_straight_run(tmp_path):
    review_trainer(review_config(tmp_path / "straight", STAGES, steps=5)).train()
    # paused after step 3: stage 1 with one value in its window, so the resumed run must raise
    # after step 4 (not step 5, as a run that lost the window would)
    review_trainer(review_config(tmp_path / "paused", STAGES, steps=5)).train(steps=3)
    saved = load_checkpoint(list_checkpoints(tmp_path / "paused")[-1])
    assert saved.extra["curriculum"] == {"stage": 1, "values": [1.0]}
    resumed = review_trainer(review_config(tmp_path / "paused", STAGES, steps=5))
    resumed.train(resume="auto")
    assert lines(tmp_path / "paused", "metrics.jsonl") == lines(tmp_path / "straight", "metrics.jsonl")
    assert [line["curriculum"]["stage"] for line in lines(tmp_path / "paused", "metrics.jsonl")] == [0, 0, 1, 1, 2]


def test_a_run_without_curriculum_logs_no_stage(tmp_path):
    cfg = build_config(TrainConfig, {"steps": 1, "sampling": {"max_new_tokens": 2, "temperature": 1.0},
                                     "output_dir": str(tmp_path), "tensorboard": False,
                                     "rollout": {"problems_per_step": 1, "group_size": 2}})
    task = FirstTokenTask("ab")
    model = tiny_team_model(Team.model_validate({"roles": [{"name": "solver"}]}))
    trainer = Trainer(cfg, team_model=model, backend=HFBackend(model), task=task, items=task.load("train"))
    assert trainer.curriculum is None
    assert "curriculum" not in trainer.train().history[0]


def test_a_task_given_in_python_refuses_a_stage_that_changes_the_task(tmp_path):
    task = FirstTokenTask("ab")
    stages = [{"task": {"options": {"max_operand": 10}}}, {}]
    cfg = build_config(TrainConfig, {"output_dir": str(tmp_path), "tensorboard": False,
                                     "curriculum": curriculum(*stages)})
    model = tiny_team_model(Team.model_validate({"roles": [{"name": "solver"}]}))
    with pytest.raises(ConfigError, match=r"curriculum.stages\[0\].task: this run's task is given in Python"):
        Trainer(cfg, team_model=model, backend=HFBackend(model), task=task, items=task.load("train"))


def test_the_metrics_line_is_json_with_the_stage(tmp_path):
    review_trainer(review_config(tmp_path / "run", STAGES, steps=1)).train()
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["curriculum"] == {"stage": 0, "moving_average": None, "next_stage": 0}


def test_a_stage_that_changes_k_plays_its_episodes_with_k_agents(tmp_path):
    # threshold 0 with a window of 1: every step raises the stage, so step 1 plays K = 2, step 2 K = 3
    cfg = build_config(TrainConfig, {
        "steps": 2, "protocol": {"name": "vote", "options": {"n_agents": 3}},
        "task": {"split": "train", "limit": 4}, "rollout": {"problems_per_step": 1, "group_size": 2},
        "sampling": {"max_new_tokens": 2, "temperature": 1.0}, "output_dir": str(tmp_path), "tensorboard": False,
        "curriculum": curriculum({"protocol": {"options": {"n_agents": 2}}}, {}, threshold=0.0, window=1)})
    model = tiny_team_model(Team.model_validate({"roles": [{"name": "solver"}]}))
    trainer = Trainer(cfg, team_model=model, backend=HFBackend(model, max_prompt_tokens=1024))
    # before the first step: the training envs are stage 0's, the held-out ones the run's own
    assert len(trainer.make_env().possible_agents) == 2 and len(trainer.runner.make_eval_env().possible_agents) == 3
    played = []
    run = trainer.runner.run
    trainer.runner.run = lambda jobs, **kw: played.append(episodes := run(jobs, **kw)) or episodes
    for _ in range(2):
        trainer.step()
    trainer.close()
    assert [{len({m.agent for m in ep.messages}) for ep in episodes} for episodes in played] == [{2}, {3}]
