"""`teamplay federate` end to end in Flower's simulation engine: 3 sites, 2 rounds, a site that
raises mid-round and one whose upload holds a NaN, and a run killed with SIGKILL and resumed with
--resume auto.

Each simulation starts a local Ray cluster (tens of seconds on a small machine), so the sizes are
the least that shows each behaviour: the tiny random model, 1 problem x 2 episodes per step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from tests.tiny import save_tiny

ROOT = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, **federated) -> Path:
    model = tmp_path / "tiny"
    if not model.exists():
        save_tiny(model)
    path = tmp_path / "fed.yaml"
    path.write_text(json.dumps({  # JSON is YAML
        "model": {"name": str(model), "lora": {"r": 2, "alpha": 4}},
        "backend": {"max_prompt_tokens": 1024},
        "task": {"name": "arith", "split": "train", "limit": 9},
        "eval_task": {"name": "arith", "split": "test", "limit": 2},
        "protocol": {"name": "single"},
        "rollout": {"problems_per_step": 1, "group_size": 2},
        "sampling": {"max_new_tokens": 3, "temperature": 1.0},
        "eval_sampling": {"max_new_tokens": 3},
        "tensorboard": False, "output_dir": str(tmp_path / "run"),
        "federated": {"clients": 3, "rounds": 2, **federated},
    }))
    return path


def rounds_of(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "federated.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_three_sites_two_rounds_a_site_that_raises_and_one_that_sends_nan(tmp_path):
    config = write_config(tmp_path, fedgrpo={"budget": 0.1}, failure_drills=[
        {"site": 1, "round": 2}, {"site": 2, "round": 1, "kind": "nan"}])
    result = CliRunner().invoke(app, ["federate", "--config", str(config)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    log = rounds_of(run)
    assert [r["round"] for r in log] == [0, 1, 2]  # held-out before, then one line per round
    first, second = log[1], log[2]
    # round 1: site 2's upload held a NaN; the server refused it, said so in one line, and went on
    assert sorted(first["sites"]) == ["0", "1"] and first["failed"] == []
    assert first["counts"] == {"asked": 3, "aggregated": 2, "failed": 0, "refused": 1}
    assert first["refused"][0]["site"] == 2 and "values are NaN or inf" in first["refused"][0]["reason"]
    warned = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and warned[0].startswith("warning: round 1: site 2 (node ")
    assert "left out: update: 1 of " in warned[0]
    # round 2: site 1 raised; the round went on with sites 0 and 2, and said why
    assert sorted(second["sites"]) == ["0", "2"]
    assert len(second["failed"]) == 1 and "failure drill: site 1" in second["failed"][0]["error"]
    for record in (first, second):
        assert sum(s["weight"] for s in record["sites"].values()) == pytest.approx(1.0)
        assert record["bytes_total"] == sum(s["bytes"] for s in record["sites"].values())
        # B = 10%: each of the K sites of the round was given 10% of N entries (no signal yet:
        # equal split), sent as int32 index + float32 value
        n = (record["dense_bytes_per_site"] - 128) // 4  # minus the serialised array's header
        assert all(s["entries"] == int(0.1 * n) for s in record["sites"].values())
        assert record["compression"] == pytest.approx(
            record["dense_bytes_per_site"] * len(record["sites"]) / record["bytes_total"])
        assert record["compression"] > 4  # 10% of the entries at twice the bytes each, plus headers
        assert "team_accuracy" in record["heldout"]
    # the global team is a checkpoint `teamplay eval --checkpoint` reads
    assert (run / "checkpoints" / "step-000002" / "adapters" / "team_adapters.json").is_file()
    state = json.loads((run / "checkpoints" / "step-000002" / "server_state.json").read_text())
    assert state["round"] == 2 and state["aggregated"] == [0, 2]


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_completed_round(tmp_path):
    config = write_config(tmp_path, clients=2, rounds=2)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "teamplay.cli", "federate", "--config", str(config)]
    run = tmp_path / "run"
    # a new session: SIGKILL reaches the launcher and the Ray processes it started, all at once
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not (run / "checkpoints" / "step-000001").is_dir():
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "round 1 did not finish in 300 s"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = rounds_of(run)
    assert before[-1]["round"] in (1, 2)  # round 2 may have been logged but not checkpointed
    # the resumed run in this process (no second interpreter start-up)
    done = CliRunner().invoke(app, ["federate", "--config", str(config), "--resume", "auto"],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    log = rounds_of(run)
    assert [r["round"] for r in log] == [0, 1, 2]  # round 1 kept once, round 2 run after resume
    assert log[1] == before[1]
    # each site continued from its own saved state: its step counter went on from round 1's
    assert all(s["site_step"] == 2 for s in log[2]["sites"].values())
    assert (run / "checkpoints" / "step-000002" / "server_state.json").is_file()
