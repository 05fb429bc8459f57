"""Asynchronous rollouts (``rollout.max_staleness``): what overlapping the next step's rollouts with
the update buys in steps per hour, and what training on older rollouts costs in learning.

One run per ``max_staleness`` in (0, 1, 2) and per seed: the embedded model on arith sums (level
1, operands up to 12), the proposer/reviewer team of the demo (two rounds: propose, review; one
LoRA adapter per role, grpo credit), 4 problems x 4 episodes a step, answers of up to 24 tokens at
temperature 1, 4 steps, held-out accuracy (greedy, 12 problems) before and after training: sized
to about 20 minutes for all six runs on a shared 2-core machine. One rollout
worker (the generator thread) and one learner (the trainer's thread), one torch thread each, so the
two sides have a core each on a 2-core machine. ``max_staleness: 0`` is the synchronous run (the
same numbers, tested in ``tests/training/test_async_rollouts.py``), so every ratio is against it,
seed by seed (paired: same data order and seeds, only the staleness differs).

Measured per run: the wall time of the step loop (from the first step's start to the last step's
end: rollouts the learner waited for, credit, update, the final checkpoint) as steps per hour; the
overlap, the fraction of that wall time during which the generator and the learner were both busy
(``asynchronous.rollouts.overlap_fraction`` of their busy intervals); the learner's wait for rollouts;
the tokens generated; the staleness of the groups trained on and the groups dropped; the process's CPU seconds over the
loop (CPU cores used = CPU seconds / wall seconds: on a shared machine the second thread only pays
when the machine has a core to give it); held-out accuracy before and after, and the training
reward per step (its curve against tokens).

Every run is stored as it finishes (``benchmarks/results/async_overlap/``, one JSON per run, with
the key it was measured under), so an interrupted invocation resumes where it stopped; the table
is computed from the stored files.

    python -m benchmarks async_overlap
    python -m benchmarks.async_overlap --quick
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import EMBEDDED_MODEL, Result, fmt_ratio, markdown_table, set_threads

RESULTS = Path(__file__).resolve().parent / "results" / "async_overlap"
STALENESS = (0, 1, 2)
SEEDS = (0, 1)
VERSION = 2  # bump when what a run measures changes: stored runs of another version are measured again


def sizes(quick: bool) -> dict[str, Any]:
    """The run's sizes: ``quick`` is 2 steps of 1 problem x 2 episodes of 4 tokens (a smoke run)."""
    if quick:
        return {"steps": 2, "problems_per_step": 1, "group_size": 2, "max_new_tokens": 4, "eval_limit": 2,
                "seeds": (0,), "staleness": (0, 1)}
    return {"steps": 4, "problems_per_step": 4, "group_size": 4, "max_new_tokens": 24, "eval_limit": 12,
            "seeds": SEEDS, "staleness": STALENESS}


def run_config(model: str, max_staleness: int, seed: int, out: Path, quick: bool) -> dict[str, Any]:
    """The config of one run (see the module)."""
    s = sizes(quick)
    arith = {"name": "arith", "options": {"level": 1, "max_operand": 12}, "seed": 0}
    return {
        "model": {"name": model, "dtype": "float32", "lora": {"r": 8, "alpha": 16}},
        "backend": {"name": "hf", "max_prompt_tokens": 768, "micro_batch_size": 32},
        "task": {**arith, "split": "train", "limit": 400},
        "eval_task": {**arith, "split": "test", "limit": s["eval_limit"]},
        "protocol": {"name": "proposer_reviewer", "options": {"rounds": 2}},
        "credit": {"method": "grpo"},
        "objective": {"name": "grpo", "kl_beta": 0.0},
        "optim": {"lr": 5.0e-4, "epochs": 1, "minibatch_size": 16, "grad_clip": 1.0, "schedule": "constant"},
        "rollout": {"problems_per_step": s["problems_per_step"], "group_size": s["group_size"],
                    "max_staleness": max_staleness},
        "sampling": {"max_new_tokens": s["max_new_tokens"], "temperature": 1.0},
        "eval_sampling": {"max_new_tokens": s["max_new_tokens"], "temperature": 0.0},
        "steps": s["steps"], "checkpoint_every": 1000, "keep_checkpoints": 1, "log_episodes": 0,
        "tensorboard": False, "output_dir": str(out), "seed": seed,
    }


def measure(model: str, max_staleness: int, seed: int, quick: bool) -> dict[str, Any]:
    """One run's figures (see the module)."""
    from teamplay.config import TrainConfig, build_config
    from teamplay.training.run.asynchronous.rollouts import overlap_fraction
    from teamplay.training.run.trainer import Trainer

    marks: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = build_config(TrainConfig, run_config(model, max_staleness, seed, Path(tmp) / "run", quick))

        def started(_trainer) -> None:
            marks["start"], marks["cpu_start"] = time.perf_counter(), time.process_time()

        def stepped(_step, _metrics) -> None:
            marks["end"], marks["cpu_end"] = time.perf_counter(), time.process_time()

        trainer = Trainer(cfg, on_start=started, on_step=stepped)
        side = trainer.rollouts
        result = trainer.train()
    wall, cpu = marks["end"] - marks["start"], marks["cpu_end"] - marks["cpu_start"]
    steps = result.history
    return {
        "max_staleness": max_staleness, "seed": seed, "steps": len(steps), "wall_seconds": wall,
        "steps_per_hour": 3600 * len(steps) / wall, "cpu_seconds": cpu, "cores_used": cpu / wall,
        "overlap": overlap_fraction(side.generator_busy, side.learner_busy, wall),
        "generate_seconds": sum(h["rollout_generate_seconds"] for h in steps),
        "wait_seconds": sum(h["rollout_wait_seconds"] for h in steps),
        "learner_seconds": sum(b - a for a, b in side.learner_busy),
        "generated_tokens": steps[-1]["generated_tokens_total"],
        "staleness": [h["rollout_staleness"] for h in steps],
        "stale_groups_dropped": sum(h["stale_groups_dropped"] for h in steps),
        "reward": [h["reward_mean"] for h in steps],
        "tokens": [h["generated_tokens_total"] for h in steps],
        "heldout_before": result.eval_before.team_accuracy if result.eval_before else None,
        "heldout_after": result.eval_after.team_accuracy if result.eval_after else None,
    }


def stored_key(model: str, max_staleness: int, seed: int, quick: bool) -> dict[str, Any]:
    """What a stored run must match to be reused."""
    return {"model": model, "max_staleness": max_staleness, "seed": seed, "quick": quick, "version": VERSION,
            "sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in sizes(quick).items()
                      if k not in ("seeds", "staleness")}}


def run_file(folder: Path, max_staleness: int, seed: int) -> Path:
    return folder / f"staleness{max_staleness}_seed{seed}.json"


def run(quick: bool = False, model: str = EMBEDDED_MODEL, output: Path | None = None) -> Result:
    """Every (staleness, seed) run, each reused from ``output`` when stored under the same key (the
    committed ``RESULTS`` for the full run; a folder under runs/ for ``quick``)."""
    from teamplay.atomic import write_atomically

    folder = output or (Path("runs") / "async_overlap-quick" if quick else RESULTS)
    folder.mkdir(parents=True, exist_ok=True)
    s = sizes(quick)
    runs = []
    for seed in s["seeds"]:  # seed by seed: a stopped invocation leaves complete pairs behind
        for staleness in s["staleness"]:
            path, key = run_file(folder, staleness, seed), stored_key(model, staleness, seed, quick)
            if path.is_file():
                stored = json.loads(path.read_text(encoding="utf-8"))
                if stored.get("key") == key:
                    runs.append(stored["result"])
                    print(f"# staleness {staleness}, seed {seed}: reused {path}", flush=True)
                    continue
            figures = measure(model, staleness, seed, quick)
            write_atomically(path, json.dumps({"key": key, "result": figures}, default=float) + "\n")
            print(f"# staleness {staleness}, seed {seed}: {figures['wall_seconds']:.0f} s", flush=True)
            runs.append(figures)
    if not quick and folder == RESULTS:
        from benchmarks.common import machine_info, machine_line

        write_atomically(RESULTS / "run.json", json.dumps(
            {"command": "python -m benchmarks async_overlap", "machine": machine_line(machine_info()),
             "model": model}, indent=1) + "\n")
    return summary(runs, model, quick)


def _paired(runs: Sequence[dict[str, Any]], staleness: int, field: str, ratio: bool) -> list[float]:
    """Per seed, run ``staleness``'s ``field`` over (``ratio``) or minus the staleness-0 run's."""
    base = {r["seed"]: r for r in runs if r["max_staleness"] == 0}
    out = []
    for r in runs:
        if r["max_staleness"] == staleness and r["seed"] in base and base[r["seed"]][field] is not None:
            b = base[r["seed"]][field]
            out.append(r[field] / b if ratio else r[field] - b)
    return out


def summary(runs: Sequence[dict[str, Any]], model: str, quick: bool) -> Result:
    """The table, notes and headline of stored runs."""
    levels = sorted({r["max_staleness"] for r in runs})
    seeds = sorted({r["seed"] for r in runs})
    rows = []
    for n in levels:
        mine = [r for r in runs if r["max_staleness"] == n]
        speed = _paired(runs, n, "steps_per_hour", ratio=True)
        learn = _paired(runs, n, "heldout_after", ratio=False)
        rows.append([
            f"`max_staleness: {n}`",
            f"{statistics.mean(r['steps_per_hour'] for r in mine):.0f}",
            fmt_ratio(statistics.mean(speed)) + f" ({', '.join(f'{x:.2f}' for x in speed)})",
            f"{statistics.mean(r['overlap'] for r in mine):.0%}",
            f"{statistics.mean(r['wait_seconds'] / r['wall_seconds'] for r in mine):.0%}",
            f"{statistics.mean(r['cores_used'] for r in mine):.2f}",
            fmt_ratio(statistics.mean(_paired(runs, n, "cpu_seconds", ratio=True))),
            f"{statistics.mean(r['generated_tokens'] for r in mine):.0f}",
            f"{statistics.mean(max(r['staleness']) for r in mine):.1f}",
            f"{sum(r['stale_groups_dropped'] for r in mine)}",
            f"{statistics.mean(r['heldout_before'] for r in mine):.3f} → "
            f"{statistics.mean(r['heldout_after'] for r in mine):.3f}",
            f"{statistics.mean(learn):+.3f} ({', '.join(f'{x:+.3f}' for x in learn)})" if n else "–",
        ])
    table = markdown_table(
        ["rollouts", "steps / hour", "speed vs 0 (per seed)", "overlap", "learner waiting", "CPU cores used",
         "CPU time vs 0", "tokens generated",
         "max staleness seen", "groups dropped", "held-out before → after", "held-out vs 0 (per seed)"], rows)
    s = sizes(quick)
    sync = [r for r in runs if r["max_staleness"] == 0]
    # with a free core for each side a step would take max(generate, update) instead of their sum
    ceiling = statistics.mean((r["generate_seconds"] + r["learner_seconds"])
                              / max(r["generate_seconds"], r["learner_seconds"]) for r in sync)
    notes = (
        f"Model {model} in float32, proposer/reviewer (propose, review), grpo credit, {s['problems_per_step']} "
        f"problems x {s['group_size']} episodes a step, up to {s['max_new_tokens']} new tokens at temperature 1, "
        f"{s['steps']} steps, held-out accuracy on {s['eval_limit']} arith problems (greedy) before and after; "
        f"seeds {seeds}, every ratio and difference paired by seed against `max_staleness: 0` (the synchronous "
        "run). One rollout worker (the generator thread) and one learner (the trainer's thread), one torch "
        "thread each. 'overlap': fraction of the step loop's wall time during which both were busy; 'learner "
        "waiting': the fraction the learner spent waiting for rollouts; 'CPU cores used': the process's CPU "
        "seconds over the loop's wall seconds (what the machine gave the run: 1 is one whole core); 'CPU time "
        "vs 0': the CPU seconds of the loop against the synchronous run's (the work asynchrony adds). The "
        "machine is shared with other jobs, so the absolute steps per hour are noisy; the ratios, measured "
        "run after run on the same machine, are what count. Every run's figures (reward and tokens per step "
        "included) are in `benchmarks/results/async_overlap/`.",
        f"The ceiling: in the synchronous runs generation took "
        f"{statistics.mean(r['generate_seconds'] for r in sync):.0f} s "
        f"and the learner {statistics.mean(r['learner_seconds'] for r in sync):.0f} s of the loop (mean over seeds), "
        f"so "
        f"with a free core for each side a step would take the longer of the two instead of their sum: at most "
        f"{fmt_ratio(ceiling)} the synchronous steps per hour.",
    )
    speed1 = statistics.mean(_paired(runs, 1, "steps_per_hour", ratio=True)) if 1 in levels else None
    learn1 = _paired(runs, 1, "heldout_after", ratio=False) if 1 in levels else []
    cores1 = statistics.mean(r["cores_used"] for r in runs if r["max_staleness"] == 1) if 1 in levels else 0.0
    headline = (f"`max_staleness: 1` runs {fmt_ratio(speed1)} the steps per hour of the synchronous run "
                f"(overlap {statistics.mean(r['overlap'] for r in runs if r['max_staleness'] == 1):.0%}, "
                f"{cores1:.2f} CPU cores used; the ceiling with a free core per side: {fmt_ratio(ceiling)}); "
                f"held-out accuracy after training {statistics.mean(learn1):+.3f} against it "
                f"(mean over {len(learn1)} paired seeds)." if speed1 is not None else "no asynchronous run")
    return Result("async_overlap", table, headline, None, notes, {"runs": list(runs)})


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.async_overlap", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes (stored under runs/)")
    parser.add_argument("--model", default=EMBEDDED_MODEL, help="model alias, folder or hub id")
    parser.add_argument("--output", type=Path, default=None, help="folder of the stored per-run results")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    result = run(quick=args.quick, model=args.model, output=args.output)
    print(result.table, *result.notes, result.headline, sep="\n\n")


if __name__ == "__main__":
    main()
