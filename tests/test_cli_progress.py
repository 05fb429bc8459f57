"""What a person sees while a command runs with its output going to a file: one line per training
step and per evaluation batch, the first Ctrl-C acknowledged at once, and a config error before the
heavy imports (torch) that a run needs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tiny import save_tiny, tiny_train_config

ROOT = Path(__file__).resolve().parents[1]


def teamplay(args: list[str], log: Path, cwd: Path) -> subprocess.Popen:
    """``teamplay ARGS`` in a subprocess, stdout and stderr into ``log`` (not a terminal)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "teamplay.cli", *map(str, args)], stdout=out,
                                stderr=subprocess.STDOUT, cwd=cwd, env=env)


def wait_for(log: Path, text: str, proc: subprocess.Popen, timeout_s: float = 300.0) -> str:
    """The log once it holds ``text`` (polled; a bounded wait, never a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = log.read_text(errors="replace")
        if text in shown:
            return shown
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    shown = log.read_text(errors="replace")
    assert text in shown, f"{text!r} never appeared (exit {proc.poll()}):\n{shown}"
    return shown


def train_config(tmp_path: Path, steps: int) -> Path:
    model = save_tiny(tmp_path / "tiny")
    config = tmp_path / "train.yaml"
    config.write_text(json.dumps(tiny_train_config(  # JSON is YAML
        model, tmp_path / "run", limit=16, max_prompt_tokens=1024, problems_per_step=1, group_size=2,
        max_new_tokens=3, eval_task={"name": "arith", "split": "test", "limit": 2},
        eval_sampling={"max_new_tokens": 3}, steps=steps, checkpoint_every=1, backend={"max_batch": 1,
                                                                                         "max_prompt_tokens": 1024})))
    return config


@pytest.mark.slow
def test_train_to_a_file_prints_one_line_per_step_and_per_held_out_batch(tmp_path):
    log = tmp_path / "train.log"
    proc = teamplay(["train", "--config", train_config(tmp_path, steps=3)], log, tmp_path)
    assert proc.wait(timeout=600) == 0, log.read_text()
    lines = log.read_text().splitlines()
    for step in (1, 2, 3):
        assert sum(line.startswith(f"train step {step}/3: reward ") for line in lines) == 1, lines
    # the held-out evaluation before and after: announced, then a line per batch (max_batch 1:
    # one per held-out problem at least)
    for label in ("before", "after"):
        assert f"held-out evaluation ({label}) ..." in lines
        batches = [line for line in lines if line.startswith(f"held-out evaluation ({label}): batch ")]
        assert len(batches) >= 2, lines
    assert not any(" eta " in line for line in lines)  # no bar drawn into a file (its "eta" column)
    assert lines[-1].startswith("3 steps in ")


@pytest.mark.slow
def test_eval_to_a_file_prints_a_line_per_batch(tmp_path):
    log = tmp_path / "eval.log"
    proc = teamplay(["eval", "--task", "arith", "--limit", 3, "--backend", "scripted", "--set", "backend.max_batch=1",
                     "-o", tmp_path / "ev"], log, tmp_path)
    assert proc.wait(timeout=300) == 0, log.read_text()
    lines = log.read_text().splitlines()
    batches = [line for line in lines if line.startswith("eval arith/single: batch ")]
    assert len(batches) >= 3, lines  # one generate call per problem at least, with max_batch 1
    assert "eval arith/single: 3 of 3 episodes done in " in log.read_text()


@pytest.mark.slow
def test_the_first_sigint_is_acknowledged_at_once_and_the_run_stops_after_its_step(tmp_path):
    log = tmp_path / "train.log"
    proc = teamplay(["train", "--config", train_config(tmp_path, steps=200)], log, tmp_path)
    try:
        wait_for(log, "train step 1/200", proc)  # training under way: the handlers are in place
        proc.send_signal(signal.SIGINT)
        shown = wait_for(log, "SIGINT: stopping after this step", proc, timeout_s=60)
        assert "press Ctrl-C again to stop now" in shown
        assert proc.wait(timeout=300) == 75, log.read_text()  # a clean stop, as preemption promises
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = log.read_text().splitlines()
    ack = next(i for i, line in enumerate(lines) if line.startswith("SIGINT: stopping"))
    stopped = next(i for i, line in enumerate(lines) if "preempted by SIGINT" in line)
    assert ack < stopped
    assert sum(line.startswith("SIGINT: stopping") for line in lines) == 1
    assert (tmp_path / "run" / "checkpoints").is_dir()


@pytest.mark.parametrize("command", ["train", "sweep", "federate", "eval", "play"])
def test_a_config_error_comes_before_torch_is_imported(tmp_path, command):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  group_size: many\n")
    script = ("import sys\n"
              "from teamplay.cli import app\n"
              "try:\n"
              f"    app([{command!r}, '--config', {str(bad)!r}])\n"
              "except SystemExit as exc:\n"
              "    print('exit', exc.code)\n"
              "print('heavy', sorted(m for m in ('torch', 'transformers', 'ray', 'flwr') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert "exit 2" in done.stdout, done.stdout + done.stderr
    assert "error:" in done.stderr and "Traceback" not in done.stderr
    assert "heavy []" in done.stdout


@pytest.mark.slow
def test_sft_to_a_file_prints_one_line_per_warm_start_step(tmp_path):
    model = save_tiny(tmp_path / "tiny")
    config = tmp_path / "sft.yaml"
    config.write_text(json.dumps(tiny_train_config(  # JSON is YAML
        model, tmp_path / "run", task_name="relay_sum", protocol={"name": "relay"}, steps=1,
        warm_start={"steps": 2, "episodes": 2, "batch_size": 2, "lr": 0.01, "evaluate": False})))
    log = tmp_path / "sft.log"
    proc = teamplay(["sft", "--config", config], log, tmp_path)
    assert proc.wait(timeout=600) == 0, log.read_text()
    lines = [line for line in log.read_text().splitlines() if line.startswith("sft step ")]
    assert [line.split(":")[0] for line in lines] == ["sft step 1/2", "sft step 2/2"]
    assert all(", loss " not in line and " loss " in line and line.endswith(" s") for line in lines), lines
