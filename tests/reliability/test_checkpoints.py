"""Classes 2 and 3: loading a checkpoint never runs code; damaged checkpoints and files."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from teamplay.training.store.checkpoint import (
    checkpoint_dir,
    remove_stale_temporaries,
    step_of,
    verify_checkpoint,
    write_manifest,
)
from teamplay.training.store.metrics import MetricsLogger
from tests.reliability.helpers import adapter_tensors, copy_run, error_line, hostile_pickle, invoke

STEP1, STEP2 = "checkpoints/step-000001", "checkpoints/step-000002"


def adapter_file(checkpoint) -> object:
    return next(checkpoint.glob("adapters/*/adapter_model.safetensors"))


def test_no_checkpoint_file_is_a_pickle(trained):
    _, run = trained
    for path in (run / STEP2).rglob("*"):
        if path.is_file():
            assert path.suffix in {".json", ".safetensors", ".yaml"}, path
            assert not path.read_bytes().startswith(b"\x80"), path  # pickle protocol 2+ header


def test_a_hostile_legacy_trainer_state_is_refused_and_never_run(tmp_path, trained):
    # an old-format checkpoint someone supplies: only a pickled trainer_state.pt next to the adapters
    config, run = trained
    run = copy_run(run, tmp_path / "run")
    marker = tmp_path / "payload-ran"
    ckpt = run / STEP2
    for name in ("manifest.json", "trainer_state.json", "trainer_tensors.safetensors"):
        (ckpt / name).unlink()
    hostile_pickle(ckpt / "trainer_state.pt", marker)
    line = error_line(invoke("train", "--config", config, "-o", run, "--resume", ckpt, "--steps", 3))
    assert "trainer_state.pt" in line and "not loaded" in line
    assert not marker.exists()


@pytest.mark.parametrize("name", ["trainer_tensors.safetensors", "trainer_state.json", "extra_state.json",
                                  "adapters/*/adapter_model.safetensors", "adapters/*/adapter_config.json"])
def test_a_pickle_in_any_checkpoint_file_never_runs(tmp_path, trained, name):
    # the attacker controls the whole folder, manifest included: the file must still not execute
    config, run = trained
    run = copy_run(run, tmp_path / "run")
    marker = tmp_path / "payload-ran"
    ckpt = run / STEP2
    hostile_pickle(next(ckpt.glob(name)), marker)
    (ckpt / "manifest.json").unlink()
    write_manifest(ckpt, 2)
    line = error_line(invoke("train", "--config", config, "-o", run, "--resume", ckpt, "--steps", 3))
    assert ckpt.name in line
    assert not marker.exists()


DAMAGES = {
    "truncated adapter": lambda c: _truncate(adapter_file(c)),
    "trainer tensors": lambda c: _truncate(c / "trainer_tensors.safetensors"),
    "trainer state": lambda c: (c / "trainer_state.json").write_text("{\"step\": 2, "),
    "extra state": lambda c: (c / "extra_state.json").write_text("{]"),
    "adapter config": lambda c: next(c.glob("adapters/*/adapter_config.json")).write_text("{\"r\": "),
    "missing file": lambda c: (c / "trainer_state.json").unlink(),
}


def _truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_resume_path_and_eval_of_a_damaged_checkpoint_exit_2_naming_the_file(tmp_path, trained, tiny_model,
                                                                           damage):
    config, run = trained
    run = copy_run(run, tmp_path / "run")
    ckpt = run / STEP2
    DAMAGES[damage](ckpt)
    line = error_line(invoke("train", "--config", config, "-o", run, "--resume", ckpt, "--steps", 3))
    assert str(ckpt) in line and ("damaged" in line or "missing" in line)
    line = error_line(invoke("eval", "--task", "arith", "--limit", 1, "--model", tiny_model, "--checkpoint", run,
                             "--max-new-tokens", 2, "-o", tmp_path / "ev"))
    assert str(ckpt) in line


def test_resume_auto_falls_back_to_the_newest_intact_checkpoint_exactly(tmp_path, trained):
    config, run = trained
    auto, direct = copy_run(run, tmp_path / "auto"), copy_run(run, tmp_path / "direct")
    for folder in (auto, direct):
        _truncate(adapter_file(folder / STEP2))
    bad = adapter_file(auto / STEP2)
    result = invoke("train", "--config", config, "-o", auto, "--resume", "auto", "--steps", 3)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and str(bad) in warnings[0]
    result = invoke("train", "--config", config, "-o", direct, "--resume", direct / STEP1, "--steps", 3)
    assert result.exit_code == 0, result.output
    a = adapter_tensors(auto / "checkpoints/step-000003")
    b = adapter_tensors(direct / "checkpoints/step-000003")
    assert a.keys() == b.keys() and a
    # exact: resumed and straight runs: the same ops, same kernels, one machine
    assert all(torch.equal(a[k], b[k]) for k in a)
    verify_checkpoint(auto / STEP2)  # the damaged step-2 was replaced by the resumed run's own
    steps = [json.loads(line)["step"] for line in (auto / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


@pytest.mark.parametrize("override, field", [
    ("optim.lr=0.5", "optim.lr"),
    ("protocol.name=vote", "protocol.name"),  # another team: other adapters, other optimiser groups
])
def test_resume_with_another_config_exits_2_and_keeps_config_yaml(tmp_path, trained, override, field):
    config, run = trained
    run = copy_run(run, tmp_path / "run")
    saved = (run / "config.yaml").read_bytes()
    line = error_line(invoke("train", "--config", config, "-o", run, "--resume", "auto", "--steps", 3,
                             "--set", override))
    assert field in line and "checkpoint" in line
    assert (run / "config.yaml").read_bytes() == saved
    assert not (run / "checkpoints/step-000003").exists()


def test_stale_temporary_checkpoint_folders_are_removed_on_start(tmp_path, trained):
    config, run = trained
    run = copy_run(run, tmp_path / "run")
    stale = run / "checkpoints" / ".tmp-step-000003-4242"
    shutil.copytree(run / STEP2, stale)  # a save killed before its rename
    result = invoke("train", "--config", config, "-o", run, "--resume", "auto", "--steps", 3)
    assert result.exit_code == 0, result.output
    assert not stale.exists()
    assert [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")] == []


def test_a_failed_metrics_rewrite_loses_no_history(tmp_path, monkeypatch):
    # the resume rewrite dies after writing part of the new file (kill, full disk): the old
    # metrics.jsonl must still be whole
    lines = "".join(json.dumps({"step": s, "reward_mean": s / 10}) + "\n" for s in range(1, 6))
    (tmp_path / "metrics.jsonl").write_text(lines)
    logger = MetricsLogger(tmp_path, tensorboard=False)

    def die(_fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("teamplay.atomic.os.fsync", die)
    with pytest.raises(OSError):
        logger.truncate_after(2)
    assert (tmp_path / "metrics.jsonl").read_text() == lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def test_a_checkpoint_folder_name_gives_back_its_step(tmp_path):
    # the one pair that spells the step-N folder name: what checkpoint_dir writes, step_of reads
    for step in (0, 12, 1_234_567):
        assert step_of(checkpoint_dir(tmp_path, step)) == step
    for name in ("step-12", "step-00001x", ".tmp-step-000012-77", "round-000012"):
        with pytest.raises(ValueError, match="not a checkpoint folder name"):
            step_of(tmp_path / name)


def _folder(path, text):
    path.mkdir(parents=True)
    (path / "marker.txt").write_text(text)


def test_a_checkpoint_moved_aside_by_a_killed_save_is_put_back_or_deleted(tmp_path):
    # a save replacing step-N moves the old folder to .old-step-N-PID first; killed before its
    # second rename, the aside folder is the only copy of step N and must come back; killed after
    # it, step-N is the new one and the aside folder is garbage
    root = tmp_path / "checkpoints"
    _folder(root / ".old-step-000002-4242", "only copy")
    _folder(root / "step-000003", "new")
    _folder(root / ".old-step-000003-4242", "replaced")
    _folder(root / ".tmp-step-000004-4242", "half written")
    removed = remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == [".old-step-000003-4242", ".tmp-step-000004-4242"]
    assert sorted(p.name for p in root.iterdir()) == ["step-000002", "step-000003"]
    assert (root / "step-000002" / "marker.txt").read_text() == "only copy"
    assert (root / "step-000003" / "marker.txt").read_text() == "new"
