"""Class 1: a run folder is never silently destroyed or shared."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.reliability.helpers import copy_run, error_line, invoke

REPO = Path(__file__).resolve().parents[2]


def test_training_into_an_existing_run_is_refused_and_changes_nothing(tmp_path, trained):
    config, run = trained
    run = copy_run(run, tmp_path / "run")
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    line = error_line(invoke("train", "--config", config, "-o", run))
    assert "already holds a run" in line and "--resume auto" in line and "--overwrite" in line
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before


def test_overwrite_starts_anew_without_the_old_runs_checkpoints(tmp_path, trained):
    config, run = trained
    run = copy_run(run, tmp_path / "run")
    (run / "checkpoints" / "step-000009").mkdir()  # a checkpoint only the old run has
    result = invoke("train", "--config", config, "-o", run, "--overwrite", "--steps", 1)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000001"]
    assert [line for line in (run / "metrics.jsonl").read_text().splitlines()][0].startswith('{"step": 1')


def test_overwrite_and_resume_together_are_refused(tmp_path, trained):
    config, run = trained
    line = error_line(invoke("train", "--config", config, "-o", tmp_path / "x", "--overwrite", "--resume", "auto"))
    assert "--overwrite" in line and "--resume" in line


HOLDER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r})
    from teamplay.training.store.run_folder import RunLock
    with RunLock(sys.argv[1]):
        print("locked", flush=True)
        sys.stdin.readline()        # hold the lock until the test closes stdin
""")


def test_a_second_trainer_on_the_same_folder_exits_2_naming_the_holder(tmp_path, trained):
    config, _ = trained
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(repo=str(REPO)), str(run)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        line = error_line(invoke("train", "--config", config, "-o", run))
        assert f"pid {holder.pid}" in line and "in use by another trainer" in line
        assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    # the holder is gone: the lock went with it, and the folder trains
    result = invoke("train", "--config", config, "-o", run, "--steps", 1)
    assert result.exit_code == 0, result.output
