"""Sweeps: grid parsing, the t interval, the results table, resume after a crash and a kill -9,
and a tiny 2 methods x 2 seeds sweep end to end through the CLI with its compare report."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.errors import ConfigError
from teamplay.report import report_command
from teamplay.training.experiments.sweep import (
    Cell,
    load_sweep,
    parse_grid,
    parse_seeds,
    plan,
    run_metrics,
    summarize,
    t_quantile_975,
)
from teamplay.training.store.checkpoint import latest_checkpoint
from tests.tiny import save_tiny

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_t_quantiles_match_the_printed_table():
    # two-sided 95% critical values of Student's t, from any statistics table
    for df, value in ((1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622), (30, 2.0423)):
        assert t_quantile_975(df) == pytest.approx(value, abs=2e-4)
    assert t_quantile_975(10_000) == pytest.approx(1.9600, abs=1e-3)  # the normal limit


def test_cell_mean_and_interval_worked_by_hand():
    # values 0.5, 0.7, 0.9: mean 0.7, sd = sqrt(((-.2)^2 + 0 + .2^2) / 2) = 0.2,
    # half-width = t(0.975, 2) * 0.2 / sqrt(3) = 4.3027 * 0.11547 = 0.49683
    cell = Cell((0.5, 0.7, 0.9))
    assert cell.mean == pytest.approx(0.7, abs=1e-12)
    assert cell.ci95 == pytest.approx(0.49683, abs=1e-4)
    assert cell.text() == "0.700 ± 0.497"
    assert math.isnan(Cell((0.3,)).ci95) and Cell((0.3,)).text() == "0.300 n=1"
    assert Cell((0.4, 0.4)).ci95 == 0.0  # exact: equal values: deviations 0, std 0; no spread, no interval


def test_grid_and_seed_parsing_and_errors(tmp_path):
    grid = parse_grid(["credit.method=grpo,shapley", "optim.lr=0.001,0.003"])
    assert grid == {"credit.method": ("grpo", "shapley"), "optim.lr": (0.001, 0.003)}  # exact: parsed literals
    sweep = plan(tmp_path, {"steps": 1}, grid, parse_seeds("0,1"))
    assert len(sweep.runs) == 8  # 2 x 2 points x 2 seeds
    assert sweep.runs[0].name == "credit.method=grpo,optim.lr=0.001__seed0"
    cfg = sweep.config(sweep.runs[3])  # grpo, lr 3e-4, seed 1
    assert (cfg.credit.method, cfg.optim.lr, cfg.seed) == ("grpo", 0.003, 1)  # exact: parsed literals
    assert cfg.output_dir == str(tmp_path / "runs" / sweep.runs[3].name)
    for bad, words in ((["credit.method"], "KEY=V1,V2"), (["seed=1,2"], "--seeds"),
                       (["optim.lr=0.1,,2"], "empty value"), (["optim.lr=-1,1"], "optim.lr"),
                       (["credit.method=grpo,nosuch"], "credit.method=nosuch")):
        with pytest.raises(ConfigError, match=words):
            plan(tmp_path, {}, parse_grid(bad), (0,))
    with pytest.raises(ConfigError, match="repeated seed"):
        parse_seeds("0,0")


def test_a_long_grid_value_gets_a_short_distinct_folder_name(tmp_path):
    # a judge's prompt as a grid value: its label is longer than a file name may be (255 bytes)
    prompts = ["Q: {question} " + "x" * 300 + " {transcript} A", "Q: {question} " + "x" * 300 + " {transcript} B"]
    grid = {"credit": tuple({"method": "shapley", "options": {"value": "judge", "judge_template": p}} for p in prompts)}
    sweep = plan(tmp_path, {"steps": 1}, grid, parse_seeds("0,11"))
    names = [r.name for r in sweep.runs]
    assert len(set(names)) == 4 and all(len(n) <= 255 for n in names)  # cut, yet distinct (the ends differ)
    assert names[0].startswith("credit.method=shapley,credit.options.value=judge,credit.options.judge_template=Q")
    assert names[0].endswith("__seed0") and names[1].endswith("__seed11")
    for run in sweep.runs:  # the folder exists and holds the run's config
        path = Path(sweep.config(run).output_dir)
        path.mkdir(parents=True)
        assert path.name == run.name
    assert sweep.config(sweep.runs[2]).credit.options["judge_template"] == prompts[1]


def test_seeds_first_pairs_seeds_and_resumes_the_grid_order_folder(tmp_path):
    from teamplay.training.experiments.sweep import pending_runs

    grid = parse_grid(["credit.method=grpo,shapley,gigpo"])
    sweep = plan(tmp_path, {"steps": 1}, grid, parse_seeds("0,1"))
    first = sweep.seeds_first()
    assert [(r.label, r.seed) for r in first.runs] == [
        ("credit.method=grpo", 0), ("credit.method=shapley", 0), ("credit.method=gigpo", 0),
        ("credit.method=grpo", 1), ("credit.method=shapley", 1), ("credit.method=gigpo", 1)]
    assert sorted(r.name for r in first.runs) == sorted(r.name for r in sweep.runs)  # the same runs
    # a folder planned in grid order resumes in seed order (and back): same manifest, other order
    assert [r.name for r, _ in pending_runs(sweep)] == [r.name for r in sweep.runs]
    assert [r.name for r, _ in pending_runs(first)] == [r.name for r in first.runs]
    # a folder written before a config field existed (stored without it) is the same sweep
    manifest = tmp_path / "sweep.json"
    stored = json.loads(manifest.read_text())
    del stored["base_config"]["optim"]["max_nonfinite_steps"]
    manifest.write_text(json.dumps(stored))
    assert [r.name for r, _ in pending_runs(sweep)] == [r.name for r in sweep.runs]
    # another grid is still refused
    other = plan(tmp_path, {"steps": 1}, parse_grid(["credit.method=grpo,shapley"]), parse_seeds("0,1"))
    with pytest.raises(ConfigError, match="another config, grid or seeds"):
        list(pending_runs(other))


def test_run_budget_sums_rollout_and_counterfactual_tokens(tmp_path):
    rows = [{"step": 0, "heldout": {"team_accuracy": 0.25}},
            {"step": 1, "reward_mean": 0.5, "tokens": 10, "replay_tokens": 5, "groups": 2, "zero_variance_groups": 2,
             "optimizer_steps": 0},
            {"step": 2, "reward_mean": 0.75, "tokens": 12, "replay_tokens": 0, "counterfactual_tokens": 3,
             "groups": 2, "zero_variance_groups": 1, "optimizer_steps": 3},
            {"step": 2, "heldout_final": {"team_accuracy": 0.5, "seconds": 9.0}}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    m = run_metrics(tmp_path)
    # tokens 10 + 12 = 22; replay 5 + 0 = 5; counterfactual (speak/skip) 3; all generated: 30
    assert (m["budget/tokens"], m["budget/replay_tokens"], m["budget/counterfactual_tokens"]) == (22, 5, 3)
    assert m["budget/generated_tokens"] == 30 and m["budget/steps"] == 2
    # exact: 0.5 - 0.25 and copied 0.75
    assert m["heldout_gain/team_accuracy"] == 0.25 and m["train/reward_last"] == 0.75
    assert "heldout/seconds" not in m  # wall time is not a result
    # one group of four had rewards that differed; three optimiser steps, all in step 2
    assert m["train/varied_groups"] == 0.25 and m["train/updates"] == 3  # exact: 1 of 4 groups


def sigkill_when(cmd: list[str], ready: Callable[[], bool], timeout: float = 300.0) -> None:
    """Start ``cmd`` (a teamplay command, this checkout on its path) and kill it with SIGKILL as soon
    as ``ready()``; fails when it exits first or ``ready()`` stays false for ``timeout`` seconds."""
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, f"not ready within {timeout:.0f} s"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()


def sweep_config(tmp_path: Path) -> Path:
    model = save_tiny(tmp_path / "tiny")
    config = tmp_path / "sweep.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "model": {"name": str(model), "lora": {"r": 4, "alpha": 8}},
        "backend": {"max_prompt_tokens": 1024},
        "task": {"name": "arith", "split": "train", "limit": 8},
        "eval_task": {"name": "arith", "split": "test", "limit": 2},
        "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
        "rollout": {"problems_per_step": 2, "group_size": 2},
        "sampling": {"max_new_tokens": 3, "temperature": 1.0},
        "eval_sampling": {"max_new_tokens": 3},
        "steps": 2, "checkpoint_every": 1, "tensorboard": False,
        "output_dir": str(tmp_path / "unused"),
    }))
    return config


@pytest.mark.slow  # about 40 s on two shared cores: four tiny runs of 2 steps plus held-out evaluations
def test_tiny_sweep_end_to_end_table_and_compare_report(tmp_path):
    config = sweep_config(tmp_path)
    out = tmp_path / "sweep"
    args = ["sweep", "--config", str(config), "--grid", "credit.method=grpo,tracer_roles",
            "--seeds", "0,1", "-o", str(out)]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    sweep = load_sweep(out)
    assert [r.name for r in sweep.runs] == ["credit.method=grpo__seed0", "credit.method=grpo__seed1",
                                            "credit.method=tracer_roles__seed0",
                                            "credit.method=tracer_roles__seed1"]
    for run in sweep.runs:  # each a normal run folder
        folder = out / "runs" / run.name
        assert (folder / "done.json").is_file() and (folder / "config.yaml").is_file()
        lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        assert [line["step"] for line in lines if "reward_mean" in line] == [1, 2]
        assert any("heldout_final" in line for line in lines)
    # the untrained team was evaluated once per seed, and both methods of a seed start from it
    assert len(list((out / "eval_cache").iterdir())) == 2
    for seed in (0, 1):
        befores = [next(json.loads(line)["heldout"] for line in
                        (out / "runs" / f"credit.method={m}__seed{seed}" / "metrics.jsonl").read_text().splitlines()
                        if json.loads(line)["step"] == 0) for m in ("grpo", "tracer_roles")]
        assert befores[0] == befores[1]

    # the table holds, per method, the mean and the t interval of the two seeds' own numbers
    table = json.loads((out / "results.json").read_text())
    assert [p["label"] for p in table["points"]] == ["credit.method=grpo", "credit.method=tracer_roles"]
    for point in table["points"]:
        acc = point["metrics"]["heldout/team_accuracy"]
        runs = [r for r in sweep.runs if r.label == point["label"]]
        finals = [next(json.loads(line)["heldout_final"]["team_accuracy"]
                       for line in (out / "runs" / r.name / "metrics.jsonl").read_text().splitlines()
                       if "heldout_final" in line) for r in runs]
        assert acc["values"] == finals and acc["n"] == 2
        assert acc["mean"] == pytest.approx(sum(finals) / 2, abs=1e-12)
        # n = 2: half-width = 12.706 * |a - b| / sqrt(2) / sqrt(2) = 6.353 * |a - b|
        assert acc["ci95"] == pytest.approx(6.3531 * abs(finals[0] - finals[1]), abs=1e-3)
        assert point["metrics"]["budget/tokens"]["mean"] > 0
    assert "heldout/team_accuracy" in (out / "results.md").read_text()
    assert (out / "results.csv").read_text().startswith("point,metric,n,mean,ci95,values\n")
    assert "heldout/team_accuracy" in result.output  # the printed table

    # running it again trains nothing
    again = runner.invoke(app, args, catch_exceptions=False)
    assert again.exit_code == 0
    assert again.output.count("done, skipped") == 4 and "starting" not in again.output

    page = report_command([out], compare=True, output=tmp_path / "cmp")
    html = page.read_text(encoding="utf-8")
    assert "credit.method=grpo" in html and "credit.method=tracer_roles" in html
    assert html.count("<img") >= 2


def test_sweep_refuses_a_folder_of_another_sweep(tmp_path):
    config = sweep_config(tmp_path)
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"base_config": {}, "grid": {}, "seeds": [0], "runs": []}))
    result = runner.invoke(app, ["sweep", "-c", str(config), "--grid", "credit.method=grpo", "-o", str(out)])
    assert result.exit_code == 2
    assert "another config, grid or seeds" in result.output


@pytest.mark.slow  # about 60 s: a sweep killed with SIGKILL after its first run, then run again
def test_kill_9_then_rerun_finishes_the_missing_runs_only(tmp_path):
    config = sweep_config(tmp_path)
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "teamplay.cli", "sweep", "-c", str(config), "--grid",
           "credit.method=grpo,tracer_roles", "--seeds", "0", "-o", str(out), "--steps", "3"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first_done = out / "runs" / "credit.method=grpo__seed0" / "done.json"
    second = out / "runs" / "credit.method=tracer_roles__seed0"
    # killed once the second run has a finished checkpoint
    sigkill_when(cmd, lambda: latest_checkpoint(second) is not None)
    assert first_done.is_file() and not (second / "done.json").is_file()
    first_metrics = (first_done.parent / "metrics.jsonl").read_bytes()
    stamp = first_done.stat().st_mtime_ns

    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert "credit.method=grpo__seed0: done, skipped" in rerun.stderr
    assert "credit.method=tracer_roles__seed0: resuming from its checkpoint" in rerun.stderr
    assert first_done.stat().st_mtime_ns == stamp  # the finished run was not touched
    assert (first_done.parent / "metrics.jsonl").read_bytes() == first_metrics
    steps = [json.loads(line)["step"] for line in (second / "metrics.jsonl").read_text().splitlines()
             if "reward_mean" in json.loads(line)]
    assert steps == [1, 2, 3]  # resumed, each step logged once
    results = summarize(load_sweep(out))
    assert all(len(results.seeds_done[label]) == 1 for label in results.labels)
