"""Controllers through the Trainer (tiny model, tracer_roles + GSPO), checkpoints, resume, and eval."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from teamplay.agents.roles import Role, Team
from teamplay.cli import app
from teamplay.config import ControllerConfig
from teamplay.training.play.controllers import TeamControllers
from teamplay.training.store.checkpoint import list_checkpoints
from teamplay.training.wiring.controllers import load_controllers
from tests.training.test_trainer import make_trainer

TEAM = Team(roles=(Role(name="proposer"), Role(name="reviewer")))


def _trainer(tmp_path: Path, steps: int):
    return make_trainer(tmp_path, {
        "steps": steps, "checkpoint_every": 1, "protocol": {"options": {"rounds": 3}},
        "rollout": {"problems_per_step": 2, "group_size": 4},
        "credit": {"method": "tracer_roles"}, "objective": {"name": "gspo"},
        "controllers": {"enabled": True}}, team=TEAM, protocol="proposer_reviewer")


def test_tracer_roles_with_gspo_and_controllers_train_checkpoint_and_resume(tmp_path):
    trainer = _trainer(tmp_path, steps=2)
    model = trainer.team_model.model
    before = {n: p.detach().clone() for n, p in model.named_parameters() if ".lora_B." in n}
    history = trainer.train().history
    for h in history:
        # the tiny model's reviews never start with RIGHT/WRONG: reviewer reward 0, no signal
        assert h["adv_mean"].get("reviewer", 0.0) == 0.0
        assert set(h["speak_rate"]) <= {"proposer_0/propose", "reviewer_0/review"} and h["speak_rate"]
        assert sum(h["controller_updates"].values()) > 0
    assert any(h["samples"] > 0 and h["optimizer_steps"] > 0 for h in history)
    # the proposer's first token is scored (FirstTokenTask): ±1 role rewards move its adapter only
    # exact: a weight no update touches keeps its bits
    changed = {n for n, p in model.named_parameters() if n in before and not torch.equal(before[n], p)}
    assert any(".proposer." in n for n in changed) and not any(".reviewer." in n for n in changed)

    # every checkpoint holds the tables as they were at that step; the last one equals the live tables
    ckpts = list_checkpoints(tmp_path / "run")
    saved = [json.loads((c / "extra_state.json").read_text())["controllers"] for c in ckpts]
    assert saved[-1] == trainer.controllers.state_dict() and saved[0] != saved[-1]

    # resuming from step 1 restores its tables exactly, then step 2 rebuilds the same tables
    resumed = _trainer(tmp_path, steps=2)
    resumed.run_state.resume(str(ckpts[0]))
    assert resumed.controllers.state_dict() == saved[0]
    resumed.step()
    assert resumed.controllers.state_dict() == saved[-1]

    # `teamplay eval --checkpoint RUN` reads the same tables
    loaded = load_controllers(ControllerConfig(enabled=True), tmp_path / "run")
    assert loaded.state_dict() == saved[-1]


def test_eval_compares_the_controlled_team_with_always_speak(tmp_path):
    # tables of a reviewer that learned silence on the 3-round dialogue's review state
    ctrl = TeamControllers(ControllerConfig(enabled=True))
    for _ in range(2):
        ctrl.matcher("reviewer_0", "review").update(("controller", "vote_0", "last"), [1.0, -1.0])
    ckpt = tmp_path / "run" / "checkpoints" / "step-000003"
    ckpt.mkdir(parents=True)
    (ckpt / "extra_state.json").write_text(json.dumps({"controllers": ctrl.state_dict()}))
    out = tmp_path / "ev"
    result = CliRunner().invoke(app, [
        "eval", "--task", "arith", "--limit", "6", "--protocol", "proposer_reviewer", "--backend", "scripted",
        "--policy", "truthful", "--checkpoint", str(tmp_path / "run"), "--set", "protocol.options.rounds=3",
        "--set", "controllers.enabled=true", "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "results.json").read_text())
    controlled, always = saved["metrics"], saved["always_speak"]
    assert controlled["episodes"] == always["episodes"] == 6
    assert controlled["team_accuracy"] == always["team_accuracy"] == 1.0
    # propose, review, propose: the controlled reviewer is silent (2 calls), the baseline speaks (3)
    assert controlled["calls_per_problem"] == 2.0 and always["calls_per_problem"] == 3.0
    assert controlled["extra"]["speak_rate"] == {"proposer_0/propose": 1.0, "reviewer_0/review": 0.0}
    assert always["extra"]["speak_rate"] == {"proposer_0/propose": 1.0, "reviewer_0/review": 1.0}
    assert "vs always_speak" in result.output and "speak rate reviewer_0/review" in result.output
    assert "tokens saved / problem" in result.output
    assert (out / "always_speak_transcripts.jsonl").is_file()

    # learned controllers without tables would silently evaluate an always-speaking team: refused
    result = CliRunner().invoke(app, ["eval", "--task", "arith", "--limit", "2", "--protocol", "proposer_reviewer",
                                      "--backend", "scripted", "--set", "controllers.enabled=true",
                                      "-o", str(tmp_path / "ev2")])
    assert result.exit_code == 2 and "needs learned tables" in result.output
    result = CliRunner().invoke(app, ["eval", "--task", "arith", "--limit", "2", "--backend", "scripted",
                                      "--set", "controllers.enabled=true", "--set", "controllers.mode=always_speak",
                                      "-o", str(tmp_path / "ev3")])
    assert result.exit_code == 2 and "protocol 'single' has no skippable turns" in result.output

