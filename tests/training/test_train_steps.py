"""``Trainer.train(steps=k)``: a call takes at most k more steps and checkpoints its last one, so a
run paused and resumed gives the numbers of one continuous run; ``on_start`` runs once the state is
in place, and ``save`` writes the checkpoint that ends a call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from teamplay.training.run.trainer import Trainer
from teamplay.training.store.checkpoint import checkpoint_dir, list_checkpoints, load_checkpoint
from tests.training.fixtures import FirstTokenTask
from tests.training.test_trainer import LETTERS, make_trainer

#: a held-out evaluation at step 2, where the paused run stops, and a final one after step 4
CONFIG = {"steps": 4, "eval_every": 2, "eval_sampling": {"max_new_tokens": 2}, "log_episodes": 1}


def trainer_in(folder: Path, **kwargs) -> Trainer:
    task = FirstTokenTask(LETTERS)
    return make_trainer(folder, CONFIG, task=task, eval_items=task.load("test", limit=2), **kwargs)


def without_timing(data):
    """A logged line without the fields that measure time (they differ between any two runs)."""
    if isinstance(data, dict):
        return {k: without_timing(v) for k, v in data.items() if not k.endswith(("seconds", "per_second"))}
    return [without_timing(v) for v in data] if isinstance(data, list) else data


def lines(run: Path, name: str) -> list[dict]:
    return [without_timing(json.loads(line)) for line in (run / name).read_text().splitlines()]


def adapters(run: Path) -> dict[str, torch.Tensor]:
    folder = list_checkpoints(run)[-1] / "adapters"
    return {f"{sub.name}/{key}": value for sub in sorted(folder.iterdir()) if sub.is_dir()
            for key, value in load_file(sub / "adapter_model.safetensors").items()}


def test_two_calls_of_two_steps_give_the_numbers_of_one_call_of_four(tmp_path):
    whole = trainer_in(tmp_path / "whole").train()
    assert whole.steps == 4 and whole.eval_after is not None

    started: list[int] = []
    first = trainer_in(tmp_path / "paused", on_start=lambda t: started.append(t.state.step)).train(steps=2)
    paused = tmp_path / "paused" / "run"
    # a pause: its last step checkpointed, no final evaluation
    assert first.steps == 2 and first.eval_before is not None and first.eval_after is None
    assert [p.name for p in list_checkpoints(paused)] == ["step-000002"]
    second = trainer_in(tmp_path / "paused", on_start=lambda t: started.append(t.state.step)).train(
        resume="auto", steps=2)
    assert second.steps == 4 and second.eval_before is None and second.eval_after is not None
    assert started == [0, 2]  # each call's hook saw the state its first step starts from

    straight = tmp_path / "whole" / "run"
    assert [line["step"] for line in lines(paused, "metrics.jsonl")] == [0, 1, 2, 3, 4, 4]
    assert "heldout" in lines(paused, "metrics.jsonl")[2]  # step 2's evaluation, in the first call
    for name in ("metrics.jsonl", "episodes.jsonl"):
        assert lines(paused, name) == lines(straight, name), name
    want, got = adapters(straight), adapters(paused)
    assert want.keys() == got.keys() and want
    for key, value in want.items():
        # exact: paused and straight runs: the same ops, same kernels, one machine
        torch.testing.assert_close(got[key], value, rtol=0, atol=0, msg=key)


def test_a_call_past_the_end_takes_only_the_steps_left(tmp_path):
    trainer_in(tmp_path).train(steps=3)
    result = trainer_in(tmp_path).train(resume="auto", steps=5)
    assert result.steps == 4 and result.eval_after is not None
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["step-000003", "step-000004"]


def test_save_writes_the_closing_checkpoint_and_its_tensors_come_back(tmp_path):
    residual = torch.arange(3, dtype=torch.float32)

    def save(trainer: Trainer) -> Path:
        return trainer.checkpoint(number=7, extra={"round": 7}, tensors={"residual": residual}, prune=False)

    trainer_in(tmp_path).train(steps=1, save=save)
    run = tmp_path / "run"
    assert [p.name for p in list_checkpoints(run)] == ["step-000007"]  # written once, by save
    saved = load_checkpoint(checkpoint_dir(run, 7))
    assert saved.state.step == 1 and saved.extra["round"] == 7
    # exact: the tensor saved and read back
    torch.testing.assert_close(saved.tensors["residual"], residual, rtol=0, atol=0)

    seen: dict[str, torch.Tensor] = {}
    resumed = trainer_in(tmp_path, on_start=lambda t: seen.update(t.extra_tensors))
    resumed.train(resume=str(checkpoint_dir(run, 7)), steps=1)
    torch.testing.assert_close(seen["residual"], residual, rtol=0, atol=0)  # exact: the tensor saved and read back
    # the default save keeps them: an ordinary checkpoint of step 2 carries the residual on
    # exact: the tensor saved and read back
    torch.testing.assert_close(load_checkpoint(checkpoint_dir(run, 2)).tensors["residual"], residual, rtol=0, atol=0)


def test_a_call_takes_at_least_one_step(tmp_path):
    with pytest.raises(ValueError, match="at least one step"):
        trainer_in(tmp_path).train(steps=0)
