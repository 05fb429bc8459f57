"""Class 4: output and disk errors are one line, and every earlier checkpoint stays intact."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from teamplay.training.store import checkpoint
from teamplay.training.store.checkpoint import list_checkpoints, verify_checkpoint
from tests.reliability.helpers import copy_run, error_line, invoke


def test_an_output_path_that_is_a_file_is_one_line(tmp_path, trained):
    config, _ = trained
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    line = error_line(invoke("train", "--config", config, "-o", taken))
    assert str(taken) in line and "is a file" in line
    line = error_line(invoke("eval", "--task", "arith", "--limit", 1, "--backend", "scripted", "-o", taken))
    assert str(taken) in line and "is a file" in line
    assert taken.read_text() == "mine"


def test_a_read_only_folder_is_one_line(tmp_path, trained, monkeypatch):
    # chmod does not stop root (tests may run as root), so the file system's answer is simulated
    # where the trainer first writes into the folder
    config, _ = trained
    run = tmp_path / "run"
    real_open = Path.open

    def read_only(self, mode="r", *args, **kwargs):
        if str(self).startswith(str(run)) and any(c in mode for c in "wa+"):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", read_only)
    line = error_line(invoke("train", "--config", config, "-o", run))
    assert "Read-only file system" in line and str(run) in line


def _disk_full_on_call(monkeypatch, owner, name: str, n: int) -> None:
    """Make the ``n``-th and later calls of ``owner.name`` fail with ENOSPC."""
    real = getattr(owner, name)
    calls = {"n": 0}

    def full(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] >= n:
            raise OSError(errno.ENOSPC, "No space left on device", str(args[-1]) if args else None)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, full)


def test_a_full_disk_during_a_checkpoint_keeps_the_earlier_ones(tmp_path, trained, monkeypatch):
    config, run = trained
    run = copy_run(run, tmp_path / "run")
    _disk_full_on_call(monkeypatch, checkpoint, "save_file", 1)
    line = error_line(invoke("train", "--config", config, "-o", run, "--resume", "auto", "--steps", 3))
    assert "No space left on device" in line and "step-000003" in line and "intact" in line
    assert [p.name for p in list_checkpoints(run)] == ["step-000001", "step-000002"]
    for ckpt in list_checkpoints(run):
        verify_checkpoint(ckpt)
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]


def test_a_full_disk_at_resume_keeps_config_metrics_and_checkpoints(tmp_path, trained, monkeypatch):
    config, run = trained
    run = copy_run(run, tmp_path / "run")
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    _disk_full_on_call(monkeypatch, os, "fsync", 1)  # the first write at resume
    line = error_line(invoke("train", "--config", config, "-o", run, "--resume", "auto", "--steps", 3))
    assert "No space left on device" in line
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if k.name != "train.lock"} == \
        {k: v for k, v in before.items() if k.name != "train.lock"}


def _gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


@pytest.mark.parametrize("header", [
    b"GGUF" + struct.pack("<I", 3) + b"\x01\x00",  # ends inside the tensor count
    # two key-value pairs announced, the file ends inside the first one's string value
    b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + _gguf_string("general.architecture") + struct.pack("<I", 8)
    + struct.pack("<Q", 1000) + b"lla",
])
def test_a_gguf_file_with_a_truncated_header_is_one_line(tmp_path, header):
    model = tmp_path / "model.gguf"
    model.write_bytes(header)
    line = error_line(invoke("eval", "--task", "arith", "--limit", 1, "--backend", "hf", "--model", model,
                             "-o", tmp_path / "ev"))
    assert str(model) in line and "truncated" in line
