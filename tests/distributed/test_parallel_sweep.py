"""``teamplay sweep --parallel N``: the runs as Ray tasks side by side give the table of the same
sweep run one after another, and resuming skips finished runs."""

from __future__ import annotations

import fcntl
import json
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.training.experiments.sweep import load_sweep
from tests.training.test_sweep import sigkill_when, sweep_config

runner = CliRunner()
#: two runs (one per grid point): the least that can finish out of run order; each parallel run is a
#: Ray worker process of its own that imports torch (seconds on a small machine)
GRID = ["--grid", "credit.method=grpo,tracer_roles", "--seeds", "0", "--steps", "1"]


def values(folder: Path) -> dict[str, dict[str, list[float]]]:
    """{point: {metric: per-seed values}} of a sweep's results.json."""
    table = json.loads((folder / "results.json").read_text())
    return {p["label"]: {m: c["values"] for m, c in p["metrics"].items()} for p in table["points"]}


@pytest.mark.slow  # 2 tiny one-step runs here, then in 2 Ray workers
def test_parallel_sweep_table_equals_the_sequential_one_and_resumes(ray_cluster, tmp_path):
    config = sweep_config(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what each Ray task uses (--threads 1): same kernels, same numbers
    try:
        sequential = runner.invoke(app, ["sweep", "-c", str(config), *GRID, "-o", str(tmp_path / "seq")],
                                   catch_exceptions=False)
    finally:
        torch.set_num_threads(threads)
    assert sequential.exit_code == 0, sequential.output

    out = tmp_path / "par"
    parallel = runner.invoke(app, ["sweep", "-c", str(config), *GRID, "-o", str(out), "--parallel", "2"],
                             catch_exceptions=False)
    assert parallel.exit_code == 0, parallel.output
    assert parallel.output.count(": done") == 2 and "credit.method=grpo__seed0: starting" in parallel.output
    expected = values(tmp_path / "seq")
    assert set(expected) == {"credit.method=grpo", "credit.method=tracer_roles"}
    assert values(out) == expected  # every metric of every seed, bit for bit
    assert (out / "results.md").read_text() == (tmp_path / "seq" / "results.md").read_text()

    # a run whose done.json is gone (killed after its last checkpoint) resumes, the others are
    # skipped, whichever command continues the sweep (the sequential one here: no process to start)
    sweep = load_sweep(out)
    (out / "runs" / sweep.runs[0].name / "done.json").unlink()
    again = runner.invoke(app, ["sweep", "-c", str(config), *GRID, "-o", str(out)], catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert again.output.count("done, skipped") == 1
    assert f"{sweep.runs[0].name}: resuming from its checkpoint" in again.output
    assert values(out) == expected


def _lock_is_free(run_dir: Path) -> bool:
    """True when no live process holds the run folder's trainer lock (a dead one's lock is released)."""
    lock = run_dir / "train.lock"
    if not lock.exists():
        return True
    with lock.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
    return True


@pytest.mark.slow  # about 60-90 s: a parallel sweep's driver killed with SIGKILL mid-sweep, then run again
def test_parallel_sweep_killed_with_sigkill_then_rerun_finishes_the_missing_runs_only(ray_cluster, tmp_path):
    config = sweep_config(tmp_path)
    out = tmp_path / "sweep"
    args = ["sweep", "-c", str(config), "--grid", "credit.method=grpo,tracer_roles", "--seeds", "0,1",
            "--steps", "3", "-o", str(out), "--parallel", "2"]
    # killed once the first run finished, while others are in flight
    sigkill_when([sys.executable, "-m", "teamplay.cli", *args, "--address", ray_cluster],
                 lambda: bool(list(out.glob("runs/*/done.json"))))
    done = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("runs/*/done.json")}
    assert 1 <= len(done) < 4
    # Ray ends the dead driver's tasks: every unfinished run folder's lock is released soon after
    deadline = time.monotonic() + 60
    while not all(_lock_is_free(d) for d in (out / "runs").iterdir()):
        assert time.monotonic() < deadline, "a killed sweep's task still holds a run folder after 60 s"
        time.sleep(0.2)

    again = runner.invoke(app, args, catch_exceptions=False)  # the test session's connection
    assert again.exit_code == 0, again.output
    assert again.output.count("done, skipped") == len(done)
    for name, stamp in done.items():  # the finished runs were not touched
        assert (out / "runs" / name / "done.json").stat().st_mtime_ns == stamp
    sweep = load_sweep(out)
    assert all((out / "runs" / r.name / "done.json").is_file() for r in sweep.runs)
    for run in sweep.runs:  # each run's steps logged once, in order, resumed or not
        lines = (out / "runs" / run.name / "metrics.jsonl").read_text().splitlines()
        steps = [json.loads(line)["step"] for line in lines if "reward_mean" in json.loads(line)]
        assert steps == [1, 2, 3], (run.name, steps)


def test_parallel_options_are_checked_before_anything_runs(tmp_path):
    config = sweep_config(tmp_path)
    for extra, words in ((["--parallel", "0"], "--parallel: at least 1"),
                         (["--address", "auto"], "add --parallel N")):
        result = runner.invoke(app, ["sweep", "-c", str(config), *GRID, "-o", str(tmp_path / "s"), *extra])
        assert result.exit_code == 2 and "error:" in result.output and words in result.output, result.output
        assert not (tmp_path / "s").exists()
