"""Shared pieces of the reliability tests: the CLI, a tiny trained run, one-line error and warning
checks, a task with reward variance on a tiny model, a signal sent from inside a call."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import textwrap
import time
from pathlib import Path

import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from teamplay.cli import app
from tests.tiny import tiny_train_config

runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def error_line(result) -> str:
    """The single ``error:`` line of a refused command (exit 2, no traceback)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


def train_config(folder: Path, model: Path, run: Path) -> Path:
    """A two-step run of the tiny model on arith, one checkpoint per step (JSON is YAML)."""
    path = folder / "train.yaml"
    path.write_text(json.dumps(tiny_train_config(
        model, run, limit=8, lora_r=2, problems_per_step=2, max_new_tokens=2,
        optim={"lr": 0.05}, steps=2, checkpoint_every=1, keep_checkpoints=3)))
    return path


def copy_run(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    (to / "train.lock").unlink(missing_ok=True)
    return to


def adapter_tensors(checkpoint: Path) -> dict[str, torch.Tensor]:
    out = {}
    for sub in sorted(p for p in (checkpoint / "adapters").iterdir() if p.is_dir()):
        for key, value in load_file(sub / "adapter_model.safetensors").items():
            out[f"{sub.name}/{key}"] = value
    return out


class Payload:
    """Unpickling this object runs ``touch MARKER``: what a hostile checkpoint file would carry."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def hostile_pickle(path: Path, marker: Path) -> None:
    path.write_bytes(pickle.dumps({"state": Payload(marker)}))


#: a user's task with reward variance on the tiny random model: the parity of the first character
EVEN_TASK = textwrap.dedent('''
    from teamplay.envs.tasks.base import Task
    from teamplay.records import TaskItem


    class EvenTask(Task):
        name = "even"
        splits = ("train", "test")
        answer_instruction = "Say anything."

        def load(self, split="test", source=None, limit=None, seed=0):
            return [TaskItem(id=f"even/{split}/{i}", prompt=f"Problem {i}.", reference="") for i in range(limit or 4)]

        def extract(self, completion):
            return completion[:1] or None

        def score(self, completion, item):
            return float(bool(completion) and ord(completion[0]) % 2 == 0)
''')


def warning_line(output: str) -> str:
    """The one ``warning:`` line of a stopped run (and no traceback)."""
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1, output
    return lines[0]


def signal_on_call(monkeypatch, owner, name: str, call: int, *signals: int) -> None:
    """On the ``call``-th call of ``owner.name``, send ``signals`` to this process, then call it."""
    real = getattr(owner, name)
    calls = {"n": 0}

    def hooked(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == call:
            for sig in signals:
                os.kill(os.getpid(), sig)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, hooked)


def signal_when(proc, ready, what: str, sig: int = signal.SIGTERM, poll: float = 0.05, wait: float = 300,
                group: bool = False) -> str:
    """Send ``sig`` to the subprocess ``proc`` once ``ready()`` holds (``what`` names it for the
    timeout message), wait for it to end and return its stderr; a process still running after a
    failure is killed (its whole process group with ``group``)."""
    try:
        deadline = time.monotonic() + 300
        while not ready():
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, f"{what} not within 300 s"
            time.sleep(poll)
        proc.send_signal(sig)
        return proc.communicate(timeout=wait)[1]
    finally:
        if proc.poll() is None:
            if group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
            proc.wait()


def slow_train_script(repo: Path, setup: str = "") -> str:
    """``python -c`` source of ``teamplay`` from ``repo`` with each training step starting a second
    late (a signal sent once step 1 is logged arrives during step 2); ``setup`` runs first."""
    head = f"import sys, time\nsys.path.insert(0, {str(repo)!r})"
    return "\n".join([head, textwrap.dedent(setup), textwrap.dedent("""
        from teamplay.training.run.trainer import Trainer
        real_step = Trainer.step
        def slow_step(self):
            time.sleep(1.0)
            return real_step(self)
        Trainer.step = slow_step
        from teamplay.cli import app
        app(prog_name="teamplay")
    """)])
