"""Class 3 (report of a crashed run) and class 6 (PettingZoo misuse): what a user meets afterwards."""

from __future__ import annotations

import json
import warnings

import pytest

from teamplay.envs.team_env import TeamEnv
from tests.envs.fakes import ITEMS, FakeTask
from tests.reliability.helpers import invoke
from tests.report.fake_folders import training_line, write_run


def test_report_of_a_crashed_run_keeps_every_whole_step_and_names_the_torn_line(tmp_path):
    run = write_run(tmp_path / "run", steps=4, heldout=False)
    metrics = run / "metrics.jsonl"
    whole = metrics.read_text()
    metrics.write_text(whole + json.dumps(training_line(5))[:57])  # killed while appending step 5
    result = invoke("report", run)
    assert result.exit_code == 0, result.output
    warned = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "line 5" in warned[0] and "torn" in warned[0] and "4 whole lines" in warned[0]
    page = (run / "report" / "index.html").read_text()
    assert "last step 4" in page


def _finished_env() -> TeamEnv:
    env = TeamEnv(FakeTask(), "single", items=ITEMS)
    env.reset(seed=0)
    env.step("3")
    return env


def test_step_before_reset_is_a_clear_error():
    env = TeamEnv(FakeTask(), "single", items=ITEMS)
    with pytest.raises(RuntimeError, match=r"step\(\) called before reset\(\)"):
        env.step("3")


def test_last_before_reset_is_a_clear_error_and_works_after():
    env = TeamEnv(FakeTask(), "single", items=ITEMS)
    with pytest.raises(RuntimeError, match=r"last\(\) called before reset\(\)"):
        env.last()
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.last()
    assert observation and reward == 0.0 and not terminated and not truncated and "turn" in info


def test_steps_after_the_end_are_dead_steps_as_in_pettingzoo():
    env = _finished_env()
    agent = env.agent_selection
    assert env.terminations[agent]
    with pytest.raises(ValueError, match="only valid action is None"):  # PettingZoo's own rule
        env.step("4")
    env.step(None)  # the terminated agent leaves
    assert env.agents == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.step(None)
        env.step("anything")
    assert env.agents == [] and len(caught) == 2 and "call reset()" in str(caught[0].message)
    env.reset(seed=1)  # and the env plays again
    assert env.agents == env.possible_agents
