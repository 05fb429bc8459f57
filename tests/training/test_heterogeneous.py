"""A team whose roles use two different base models: training, checkpoints, routing."""

from __future__ import annotations

import torch

from teamplay.agents.multi_base import MultiBaseTeamModel
from teamplay.config import TrainConfig, build_config
from teamplay.training.run.trainer import Trainer
from teamplay.training.wiring.model import build_team_model
from tests.tiny import save_tiny
from tests.training.fixtures import FirstTokenTask

PRINTABLE = "".join(chr(c) for c in range(32, 127))


def hetero_settings(base_a, base_b, run_dir) -> dict:
    """A 2-step proposer/reviewer run whose reviewer uses ``base_b`` and proposer ``base_a``."""
    return {
        "steps": 2, "protocol": {"name": "proposer_reviewer", "options": {"rounds": 2}},
        "model": {"name": str(base_a), "lora": {"r": 4, "alpha": 8}},
        "team": {"roles": [{"name": "proposer"}, {"name": "reviewer", "model": str(base_b)}]},
        "rollout": {"problems_per_step": 2, "group_size": 4},
        "sampling": {"max_new_tokens": 2, "temperature": 1.0},
        "optim": {"lr": 0.01, "minibatch_size": 64},
        "output_dir": str(run_dir), "tensorboard": False, "checkpoint_every": 2}


def test_two_bases_each_adapter_trains_each_base_stays(tmp_path):
    # two different tiny bases: other seeds and other widths (hidden 32 vs 48)
    base_a = save_tiny(tmp_path / "base-a", seed=1, hidden=32)
    base_b = save_tiny(tmp_path / "base-b", seed=2, hidden=48)
    cfg = build_config(TrainConfig, hetero_settings(base_a, base_b, tmp_path / "run"))
    task = FirstTokenTask(PRINTABLE)
    trainer = Trainer(cfg, task=task, items=task.load("train", limit=4))
    tm = trainer.team_model
    assert isinstance(tm, MultiBaseTeamModel)
    assert {tm.base_of("proposer"), tm.base_of("reviewer")} == {str(base_a), str(base_b)}
    snapshot = {base: {n: p.detach().clone() for n, p in part.model.named_parameters()}
                for base, part in tm.parts.items()}
    history = trainer.train().history
    assert all(h["optimizer_steps"] >= 1 for h in history)
    for base, part in tm.parts.items():
        before = snapshot[base]
        after = dict(part.model.named_parameters())
        lora = {n for n in before if ".lora_" in n}
        base_params = set(before) - lora
        assert lora and base_params
        # every base weight bit-identical; this base's adapter (its LoRA B matrices at least) moved
        # exact: a weight no update touches keeps its bits
        assert all(torch.equal(before[n], after[n].detach()) for n in base_params)
        # exact: a weight no update touches keeps its bits
        moved = [n for n in lora if not torch.equal(before[n], after[n].detach())]
        assert any(".lora_B." in n for n in moved), base
    # the checkpoint is one adapters folder in the usual format; a fresh team loads it exactly
    folder = tmp_path / "run" / "checkpoints" / "step-000002" / "adapters"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["proposer", "reviewer"]
    fresh = build_team_model(cfg.model, trainer.team, seed=99)
    fresh.load_adapters(folder)
    for name in ("proposer", "reviewer"):
        for a, b in zip(fresh.adapter_parameters(name), tm.adapter_parameters(name), strict=True):
            assert torch.equal(a, b)  # exact: loaded weights are the saved bits
