"""The self-consistency baseline: one agent at the team's token cost, majority vote. Budget matching
on a tiny model (each problem's samples reach the team's tokens, and one sample fewer would not),
the agent's adapter, scripted teams with a known answer, and ``teamplay eval`` end to end."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from teamplay.agents.backends.hf import HFBackend
from teamplay.agents.backends.scripted import ScriptedBackend
from teamplay.cli import app
from teamplay.cli.tables import cooperation_rows
from teamplay.config import ProtocolConfig
from teamplay.envs.tasks import get_task
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from teamplay.records import SamplingParams
from teamplay.training.play.evaluation import evaluate
from teamplay.training.play.rollout import RolloutRunner
from teamplay.training.play.self_consistency import SoloBaseline, sample_at_budget
from teamplay.training.wiring.envs import env_factory
from teamplay.training.wiring.eval_team import EvalTeam
from tests.envs.fakes import ITEMS, FakeTask, truthful
from tests.training.fixtures import tiny_team_model


class AdapterLog(HFBackend):
    """An ``HFBackend`` that records the adapter of every request it answers."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.adapters: list[str | None] = []

    def generate(self, requests, sampling):
        self.adapters.extend(r.adapter for r in requests)
        return super().generate(requests, sampling)


def eval_team(task, items, protocol: str, backend, team=None) -> EvalTeam:
    cfg = ProtocolConfig(name=protocol)
    make_env, team = env_factory(task, cfg, team)
    return EvalTeam(task, items, None, make_env, team, backend, cfg)


def test_budget_matching_on_a_tiny_model():
    task = get_task("arith", level=2)
    items = task.load("test", limit=3)
    team = TeamEnv(task, "proposer_reviewer").team
    backend = AdapterLog(tiny_team_model(team), max_prompt_tokens=2048)
    built = eval_team(task, items, "proposer_reviewer", backend, team)
    team_runner = RolloutRunner(built.make_env, backend, SamplingParams(max_new_tokens=8))
    make_solo, role = built.solo_env()
    assert role.name == "proposer"  # proposer_reviewer's answer_roles
    solo_runner = RolloutRunner(make_solo, backend, SamplingParams(max_new_tokens=3, temperature=1.0))
    episodes, _ = evaluate(team_runner, task, items)
    backend.adapters.clear()
    votes = sample_at_budget(solo_runner, episodes, {i.id: i for i in items}, seed=5)
    assert set(backend.adapters) == {"proposer"}  # the answering role's own adapter, never the reviewer's
    for ep, v in zip(episodes, votes, strict=True):
        assert v.budget == ep.tokens > 3  # the team wrote more than one solo sample can
        assert len(v.answers) == len(v.tokens) >= 2
        assert all(1 <= t <= 3 for t in v.tokens)
        # n_p is the smallest n whose tokens reach the budget
        assert sum(v.tokens) >= v.budget > sum(v.tokens[:-1])
    assert len(backend.adapters) == sum(len(v.answers) for v in votes)


def test_evaluate_reports_it_beside_the_team():
    task = FakeTask()
    items = ITEMS[:4]
    team_runner = RolloutRunner(lambda: TeamEnv(task, "sequential", items=items), ScriptedBackend(truthful),
                                SamplingParams())
    built = eval_team(task, items, "single", ScriptedBackend("wrong"))
    make_solo, role = built.solo_env()
    solo = SoloBaseline(RolloutRunner(make_solo, built.backend, SamplingParams(temperature=1.0)), role.name, None)
    _, metrics = evaluate(team_runner, task, items, solo=solo)
    sc = metrics.extra["cooperation"]["self_consistency"]
    # scripted policies write no tokens: a budget of 0 is reached by one sample, a wrong one
    assert sc["samples_per_problem"] == 1.0 and sc["tokens_per_problem"] == 0.0  # exact: counts
    assert sc["accuracy"] == 0.0 and sc["single_sample_accuracy"] == 0.0  # exact: 0 of 4
    assert sc["role"] == "solver" and sc["temperature"] == 1.0  # exact: the given temperature
    assert metrics.team_accuracy == 1.0  # exact: 4 of 4
    rows = dict(cooperation_rows(metrics.extra["cooperation"]))
    assert rows["self-consistency (solver, T=1)"] == "0.000"


def test_a_scripted_answering_role_of_a_mixed_team_is_refused():
    task = FakeTask()
    team = TeamEnv(task, "proposer_reviewer").team
    scripted = team.model_copy(update={"roles": (team.roles[0].model_copy(
        update={"policy": "scripted:truthful", "adapter": None}), *team.roles[1:])})
    built = eval_team(task, ITEMS[:1], "proposer_reviewer", ScriptedBackend(truthful), scripted)
    with pytest.raises(ConfigError, match="answering role 'proposer' is played by 'scripted:truthful'"):
        built.solo_env()


def test_teamplay_eval_with_both_measurements(tmp_path):
    result = CliRunner().invoke(app, [
        "eval", "--task", "relay_sum", "--limit", "3", "--protocol", "relay", "--backend", "scripted",
        "--policy", "adder", "-o", str(tmp_path), "--set", "withhold_messages=true",
        "--set", "self_consistency=true"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "information use" in result.output and "self-consistency (answerer" in result.output
    coop = json.loads((tmp_path / "results.json").read_text())["metrics"]["extra"]["cooperation"]
    # default relay team: 2 informants + answerer; both informants needed, the answerer read by nobody
    assert coop["withholding"]["information_use"] == pytest.approx(2 / 3, abs=1e-12)
    # the adder alone sees the whole problem but no teammate: it answers nothing
    assert coop["self_consistency"]["accuracy"] == 0.0  # exact: 0 of 3
    rows = [json.loads(line) for line in (tmp_path / "transcripts.jsonl").read_text().splitlines()]
    assert [len(r["withholding"]) for r in rows] == [3, 3, 3]
    assert all(r["self_consistency"]["answers"] == [None] for r in rows)


def test_a_training_run_measures_both_before_and_after(tmp_path):
    from tests.training.test_trainer import make_trainer

    overrides = {"steps": 1, "protocol": {"name": "sequential"}, "eval_withhold_messages": True,
                 "eval_self_consistency": True, "eval_cache": str(tmp_path / "cache"),
                 "rollout": {"problems_per_step": 1, "group_size": 2}, "eval_sampling": {"max_new_tokens": 2}}
    trainer = make_trainer(tmp_path / "a", overrides, protocol="sequential")
    trainer.eval_items = trainer.items[:2]
    trainer.train()
    rows = [json.loads(line) for line in (tmp_path / "a" / "run" / "metrics.jsonl").read_text().splitlines()]
    for line in (rows[0]["heldout"], rows[-1]["heldout_final"]):
        coop = line["extra"]["cooperation"]
        # sequential's default team: 3 solvers in a chain, 2 problems: 6 messages, the first two of each
        # read by a later solver (replayed), the last read by nobody
        assert coop["withholding"]["messages"] == 6 and coop["withholding"]["replayed"] == 4
        sc = coop["self_consistency"]
        assert sc["role"] == "solver" and sc["adapter"] == "solver" and sc["temperature"] == 1.0  # exact: config
        # each solo sample writes 1 or 2 tokens (sampling.max_new_tokens = 2); the team wrote 3 messages
        assert sc["team_tokens_per_problem"] >= 3 and sc["tokens_per_problem"] >= sc["team_tokens_per_problem"]
    # a cached untrained evaluation is keyed with the measurements on: a run without them does not read it
    assert len(list((tmp_path / "cache").iterdir())) == 1
    plain = make_trainer(tmp_path / "b", {k: v for k, v in overrides.items() if not k.startswith("eval_w")
                                           and k != "eval_self_consistency"}, protocol="sequential")
    plain.eval_items = plain.items[:2]
    plain.train()
    assert len(list((tmp_path / "cache").iterdir())) == 2
    first = json.loads((tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert "withholding" not in first["heldout"]["extra"]["cooperation"]


@pytest.mark.parametrize("field", ["eval_withhold_messages", "eval_self_consistency"])
def test_a_distributed_run_refuses_them_in_one_line(tmp_path, field):
    from teamplay.config import TrainConfig, build_config

    data = {"output_dir": str(tmp_path / "run"), "distributed": {"rollout_workers": 1}, field: True}
    with pytest.raises(ConfigError, match=f"{field}: replays and solo samples run in process") as info:
        build_config(TrainConfig, data)
    assert "\n" not in str(info.value)
