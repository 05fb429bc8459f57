"""SIGTERM to ``teamplay train`` on a ``distributed:`` config (``make_trainer``'s Ray parts: a driver,
Ray rollout workers and a learner rank) stops it like a single-process run: at a step boundary,
with the checkpoint of its last logged step, one ``warning:`` line, exit status 75 and the run lock
released; ``--resume auto`` then finishes it to the numbers of a run never interrupted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from teamplay.envs.tasks.base import TASKS
from teamplay.training.store.checkpoint import list_checkpoints, load_checkpoint, verify_checkpoint
from teamplay.training.store.run_folder import RunLock
from tests.distributed.test_distributed import train_config
from tests.federated.fractional_task import FractionalArith
from tests.reliability.helpers import adapter_tensors, invoke, signal_when, slow_train_script, warning_line

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]
#: arith with a reward any text earns, so the tiny model's groups have unequal rewards and every
#: step updates; registered by name in the driver (its rollout workers unpickle the class by its
#: module path, tests.federated.fractional_task, which they import from the repo)
TASK = "fractional_arith_preemption"

#: ``teamplay train`` of this checkout with the task registered, each step starting a second late:
#: a signal sent once step 1 is logged arrives during step 2, rarely just before it
SLOW_START = slow_train_script(REPO, f"""
    from teamplay.envs.tasks.base import TASKS
    from tests.federated.fractional_task import FractionalArith
    TASKS.add({TASK!r}, FractionalArith)
""")


def _config(model: Path, run: Path, address: str) -> Path:
    # 3 steps, checkpointed only at the end: a checkpoint at step 1 or 2 was written by the stop
    cfg = train_config(model, run, address, checkpoint_every=3,
                       task={"name": TASK, "split": "train", "limit": 8})
    path = run.parent / f"{run.name}.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True)))
    return path


def _no_times(value):
    if isinstance(value, dict):
        return {k: _no_times(v) for k, v in value.items() if "seconds" not in k and "per_second" not in k}
    return [_no_times(v) for v in value] if isinstance(value, list) else value


def _close(a, b, tol: float = 1e-6) -> bool:
    """Equal, floats within ``tol`` (the kill -9 test's tolerance for the multi-process arithmetic)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= tol * max(1.0, abs(b))
    return a == b


def _metrics(run: Path) -> list[dict]:
    return [_no_times(json.loads(line)) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _train_steps(run: Path) -> list[int]:
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if '"reward_mean"' in line]


@pytest.mark.slow  # a `teamplay train` subprocess on the session's Ray cluster, then two in-process runs
def test_sigterm_stops_a_distributed_run_at_a_step_and_resume_matches(ray_cluster, tiny_model_dir, tmp_path,
                                                                       monkeypatch):
    # registered for this test only: later tests (the task list's doctest) see the built-in tasks
    monkeypatch.setitem(TASKS._entries, TASK, FractionalArith)
    run = tmp_path / "run"
    config = _config(tiny_model_dir, run, ray_cluster)
    proc = subprocess.Popen([sys.executable, "-c", SLOW_START, "train",
                             "--config", str(config)],
                            env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = signal_when(proc, lambda: 1 in _train_steps(run), "step 1 logged")
    assert proc.returncode == 75, stderr[-3000:]
    line = warning_line(stderr)  # exactly one, no traceback
    found = re.fullmatch(r"warning: preempted by SIGTERM after step ([12]); checkpoint (step-00000[12]) written; "
                         r"resume with --resume auto", line)
    assert found, line
    step = int(found[1])
    steps = _train_steps(run)
    assert steps == list(range(1, step + 1)), steps  # the checkpoint is of the last logged step
    [latest] = list_checkpoints(run)
    verify_checkpoint(latest)
    assert latest.name == found[2] == f"step-{step:06d}" and load_checkpoint(latest).state.step == step
    RunLock(run).acquire().release()  # raises while a trainer holds it

    resumed = invoke("train", "--config", config, "--resume", "auto")
    assert resumed.exit_code == 0, resumed.output
    assert not [x for x in resumed.output.splitlines() if x.startswith(("warning:", "error:"))], resumed.output

    straight_run = tmp_path / "straight"
    straight = invoke("train", "--config", _config(tiny_model_dir, straight_run, ray_cluster))
    assert straight.exit_code == 0, straight.output

    got, want = _metrics(run), _metrics(straight_run)
    assert _train_steps(run) == _train_steps(straight_run) == [1, 2, 3]
    assert _close(got, want), (got, want)
    a, b = adapter_tensors(list_checkpoints(run)[-1]), adapter_tensors(list_checkpoints(straight_run)[-1])
    assert list_checkpoints(run)[-1].name == list_checkpoints(straight_run)[-1].name == "step-000003"
    assert a.keys() == b.keys() and a
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    assert sum(m.get("optimizer_steps", 0) for m in want) > 0  # it learned: the comparison means something
    assert any(bool(v.any()) for k, v in b.items() if "lora_B" in k)
