"""SIGTERM to the driver of ``teamplay sweep --parallel N`` stops it cleanly
(``teamplay.distributed.sweep``): every run in flight stops at a step boundary with its checkpoint,
the driver prints one ``warning:`` line and exits 75, and the same command run again finishes the
sweep to the table of a sweep never interrupted."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from teamplay.cli import app
from teamplay.training.experiments.sweep import load_sweep
from teamplay.training.store.checkpoint import list_checkpoints, load_checkpoint, verify_checkpoint
from teamplay.training.store.run_folder import RunLock
from tests.distributed.test_parallel_sweep import runner, values
from tests.training.test_sweep import sweep_config

REPO = Path(__file__).resolve().parents[2]


#: steps of each run of the sweep
STEPS = 3

def train_steps(run: Path) -> list[int]:
    """The training steps logged in a run's metrics.jsonl (lines with a reward), in order."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [line["step"] for line in lines if "reward_mean" in line]


def signal_driver(args: list[str], out: Path, address: str, *signals: int) -> tuple[int, str]:
    """Start ``teamplay ARGS -o OUT --address ADDRESS`` as a subprocess, send it ``signals`` once a
    run logged its first step; returns its exit status and its one ``warning:`` line."""
    proc = subprocess.Popen([sys.executable, "-m", "teamplay.cli", *args, "-o", str(out), "--address", address],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not any(train_steps(run) for run in out.glob("runs/*")):
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no step logged within 120 s"
            time.sleep(0.05)
        for sig in signals:
            proc.send_signal(sig)
            # handled before the next one (two signals while the driver waits in Ray's C code would
            # reach its Python handler as one): the driver wrote its stop request
            while not (out / "stop.request").exists() and proc.poll() is None:
                time.sleep(0.01)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in stderr, stderr
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, stderr
    return proc.returncode, warnings[0]


@pytest.mark.slow  # about 60-90 s on two shared cores (busy): 2 tiny 4-step runs in Ray workers, twice and a half
def test_sigterm_to_a_parallel_sweep_stops_its_runs_at_a_step_and_rerun_matches(ray_cluster, tmp_path):
    config = sweep_config(tmp_path)
    # checkpoints only at the last step: a checkpoint found before it was written by the stop. Three
    # steps, so that a run that logged its first step still has two to go when the signal lands (with
    # two, both runs could finish first on a loaded machine, and the sweep then had no run to stop)
    args = ["sweep", "-c", str(config), "--grid", "credit.method=grpo", "--seeds", "0,1", "--steps", str(STEPS),
            "--set", f"checkpoint_every={STEPS}", "--parallel", "2"]
    out = tmp_path / "stopped"
    returncode, warning = signal_driver(args, out, ray_cluster, signal.SIGTERM)
    assert returncode == 75
    warnings = [warning]
    assert re.fullmatch(r"warning: preempted by SIGTERM with [12] run\(s\) stopping at a step boundary: .*; "
                        r"run the same teamplay sweep command again to continue", warnings[0]), warnings[0]

    sweep = load_sweep(out)
    stopped = 0
    for run in sweep.runs:
        folder = out / "runs" / run.name
        if (folder / "train.lock").exists():
            RunLock(folder).acquire().release()  # no task holds it any more
        if (folder / "done.json").is_file():  # finished before it saw the request
            assert train_steps(folder) == list(range(1, STEPS + 1))
            continue
        stopped += 1
        steps = train_steps(folder)
        if not steps:  # stopped while its model loaded or before training's held-out evaluation finished
            assert not list_checkpoints(folder)
            assert f"{run.name} before the first step finished, no checkpoint written yet" in warnings[0]
            continue
        # the checkpoint of its last logged step, written by the stop (or, at the last step, by the loop,
        # the stop then abandoning the held-out evaluation after training)
        latest = list_checkpoints(folder)[-1]
        verify_checkpoint(latest)
        assert steps == list(range(1, len(steps) + 1)) and load_checkpoint(latest).state.step == steps[-1], steps
        assert f"{run.name} after step {steps[-1]}, checkpoint {latest.name} written" in warnings[0]
    assert stopped >= 1

    again = runner.invoke(app, [*args, "-o", str(out)], catch_exceptions=False)  # the session's connection
    assert again.exit_code == 0, again.output
    assert again.output.count("resuming from its checkpoint") + again.output.count("starting") == stopped
    assert not (out / "stop.request").exists()
    for run in sweep.runs:  # each step logged once, in order
        assert train_steps(out / "runs" / run.name) == list(range(1, STEPS + 1))

    straight = runner.invoke(app, [*args, "-o", str(tmp_path / "straight")], catch_exceptions=False)
    assert straight.exit_code == 0, straight.output
    assert values(out) == values(tmp_path / "straight")  # every metric of every seed, bit for bit
    assert (out / "results.md").read_text() == (tmp_path / "straight" / "results.md").read_text()
