"""Exporting a trained team (adapters, team.yaml, model card) and loading it back as the run it came from.

The run folder is built by hand from a tiny random model: adapters with random (non-zero) LoRA B
matrices so that every role's adapter changes its logits, written by the trainer's own
``save_checkpoint`` with controller tables in which the reviewer learned to stay silent on the last
review of a 3-round dialogue, and a metrics.jsonl with a held-out evaluation before and after.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from teamplay.agents.roles import Role, Team
from teamplay.config import TrainConfig, build_config
from teamplay.errors import ConfigError
from teamplay.serving.export import load_team_config
from teamplay.training.checkpoint import TrainerState, save_checkpoint
from teamplay.training.controllers import TeamControllers
from teamplay.training.evaluation import EvalMetrics
from teamplay.training.setup import build_team_model
from tests.tiny import save_tiny

TEAM = Team(roles=(Role(name="proposer"), Role(name="reviewer")))
STEPS = 2


def _config(root: Path, model: Path) -> TrainConfig:
    return build_config(TrainConfig, {
        "model": {"name": str(model), "lora": {"r": 4, "alpha": 8}, "device": "cpu"},
        "backend": {"max_prompt_tokens": 1024},
        "task": {"name": "arith", "split": "train", "limit": 8},
        "eval_task": {"name": "arith", "split": "test", "limit": 3},
        "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
        "team": TEAM.model_dump(mode="json", exclude_none=True),
        "controllers": {"enabled": True},
        "sampling": {"max_new_tokens": 4, "temperature": 1.0},
        "eval_sampling": {"max_new_tokens": 4},
        "steps": STEPS, "tensorboard": False, "output_dir": str(root / "run"),
    })


def _heldout(accuracy: float) -> dict:
    return EvalMetrics(episodes=3, team_accuracy=accuracy, role_accuracy={"proposer": accuracy},
                       any_agent_right=accuracy, initial_accuracy=accuracy, wrong_to_right=0.0,
                       right_to_wrong=0.0, tokens_per_problem=9.0, calls_per_problem=2.5).to_dict()


def make_run(root: Path) -> Path:
    """A run folder of ``STEPS`` steps: config.yaml, metrics.jsonl, one verified checkpoint."""
    cfg = _config(root, save_tiny(root / "tiny"))
    team_model = build_team_model(cfg.model, TEAM)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in team_model.model.named_parameters():
            if ".lora_B." in name:  # B starts at zero: an untrained adapter is the base model
                param.copy_(0.5 * torch.randn(param.shape, generator=generator))
    controllers = TeamControllers(cfg.controllers)
    for _ in range(2):  # the reviewer learned silence on the last review (as in tests/controllers)
        controllers.matcher("reviewer_0", "review").update(("controller", "vote_0", "last"), [1.0, -1.0])
    optimizer = torch.optim.AdamW(team_model.trainable_parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    run = Path(cfg.output_dir)
    state = TrainerState(step=STEPS, data_order=tuple(range(8)), data_cursor=4, data_epoch=0)
    save_checkpoint(run, state, team_model, optimizer, scheduler, {"controllers": controllers.state_dict()},
                    cfg.model_dump(mode="json"), keep=1)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    rows = [{"step": 0, "heldout": _heldout(0.25)}, {"step": 1, "reward_mean": 0.5},
            {"step": 2, "reward_mean": 0.75}, {"step": STEPS, "heldout_final": _heldout(0.75)}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("export"))


# ----------------------------------------------------------------------------- load_team_config
def test_a_run_folder_loads_as_its_held_out_evaluation(run):
    cfg = load_team_config(run, ["task.limit=2"])
    checkpoint = run / "checkpoints" / f"step-{STEPS:06d}"
    assert cfg.model.checkpoint == str(checkpoint)
    assert (cfg.task.split, cfg.task.limit) == ("test", 2)  # eval_task, then the override
    assert cfg.sampling.temperature == 0 and cfg.sampling.max_new_tokens == 4  # eval_sampling
    assert cfg.controllers.enabled and cfg.protocol.options == {"rounds": 3}
    assert [r.name for r in cfg.team.roles] == ["proposer", "reviewer"]
    # one checkpoint folder of the run gives the same team
    assert load_team_config(checkpoint) == load_team_config(run)


@pytest.mark.parametrize("make, message", [
    (lambda p: p, "is not a run folder"),
    (lambda p: p / "missing", "no such folder"),
    (lambda p: (p / "config.yaml").write_text("steps: 1\n") and p, "has no checkpoint yet"),
])
def test_what_is_not_a_team_is_refused(tmp_path, make, message):
    with pytest.raises(ConfigError, match=message):
        load_team_config(make(tmp_path))
