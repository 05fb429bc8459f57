"""Federated team training: centralized vs FedAvg vs Fed-GRPO (ablations, budgets), same local steps.

The embedded model learns arith on non-IID shards: the pool is arith level 1 (sums) and level 2
(three terms with + and -), operands up to 12, sorted by level and cut into K shards (site 0 holds
sums only, the last site mostly level-2 problems). Every variant trains the same total number of
local steps, ``K * rounds * local_steps``, with the same batch (problems per step x group size):

    centralized      one Trainer on the pooled data for K * rounds * local_steps steps
    fedavg           FedAvg, data-size weights, dense upload
    fedgrpo          all three mechanisms, B = 100%
    -signal          Fed-GRPO without signal weighting (data-size weights)
    -calibration     Fed-GRPO without global reward calibration
    -sparse          Fed-GRPO with dense upload (B = 100% is the same update; the row checks it)
    B=10%, B=1%      Fed-GRPO with a sparse upload budget of 10% and 1% of dense entries

Measures: held-out accuracy of the final global team (greedy, the same held-out arith level-1
items for every variant: the level the embedded model has a learning signal on) and bytes
uploaded by all sites over the run; mean ± 95% CI (t) over seeds.

    python -m benchmarks federated
    python -m benchmarks federated --quick
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import EMBEDDED_MODEL, Result, markdown_table, script_main

VARIANTS: dict[str, dict[str, Any]] = {
    "centralized": {},
    "fedavg": {"strategy": "fedavg"},
    "fedgrpo": {"strategy": "fedgrpo"},
    "fedgrpo -signal": {"strategy": "fedgrpo", "fedgrpo": {"signal_weighting": False}},
    "fedgrpo -calibration": {"strategy": "fedgrpo", "fedgrpo": {"calibration": False}},
    "fedgrpo -sparse": {"strategy": "fedgrpo", "fedgrpo": {"sparse": False}},
    "fedgrpo B=10%": {"strategy": "fedgrpo", "fedgrpo": {"budget": 0.10}},
    "fedgrpo B=1%": {"strategy": "fedgrpo", "fedgrpo": {"budget": 0.01}},
}

#: two-sided 95% t quantiles by degrees of freedom
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def sizes(quick: bool) -> dict[str, int]:
    if quick:
        return {"clients": 2, "rounds": 2, "local_steps": 1, "seeds": 2, "eval": 8, "tokens": 16, "problems": 2}
    return {"clients": 3, "rounds": 3, "local_steps": 2, "seeds": 3, "eval": 32, "tokens": 32, "problems": 4}


def base_config(model: str, size: dict[str, int], seed: int, out: Path) -> dict[str, Any]:
    level = {"name": "arith", "split": "train", "options": {"level": 1, "max_operand": 12}, "seed": 0,
             "limit": 64}
    return {
        "model": {"name": model, "lora": {"r": 8, "alpha": 16}},
        "backend": {"name": "hf", "max_prompt_tokens": 512},
        "task": level,
        "eval_task": {"name": "arith", "split": "test", "options": {"level": 1, "max_operand": 12}, "seed": 0,
                      "limit": size["eval"]},
        "protocol": {"name": "single"},
        "credit": {"method": "grpo"},
        "objective": {"name": "grpo", "clip_low": 0.2},
        "optim": {"lr": 5e-4, "minibatch_size": 16},
        "rollout": {"problems_per_step": size["problems"], "group_size": 4},
        "sampling": {"max_new_tokens": size["tokens"], "temperature": 1.0},
        "eval_sampling": {"max_new_tokens": size["tokens"], "temperature": 0.0},
        "tensorboard": False, "log_episodes": 0, "seed": seed, "output_dir": str(out),
    }


def run_variant(name: str, model: str, size: dict[str, int], seed: int, root: Path) -> dict[str, float]:
    """Final held-out accuracy and bytes uploaded of one variant and seed."""
    from teamplay.config import FederatedConfig, TrainConfig, build_config

    out = root / f"{name.replace(' ', '_')}-s{seed}"
    data = base_config(model, size, seed, out)
    level2 = {**data["task"], "options": {"level": 2, "max_operand": 12}}
    if name == "centralized":
        from teamplay.distributed.compose import make_trainer
        from teamplay.training.wiring.envs import load_items

        steps = size["clients"] * size["rounds"] * size["local_steps"]
        cfg = build_config(TrainConfig, {**data, "steps": steps, "checkpoint_every": steps})
        task, items = load_items(cfg.task)
        items += load_items(build_config(TrainConfig, {"task": level2}).task)[1]
        _, eval_items = load_items(cfg.eval_task)
        result = make_trainer(cfg, task=task, items=items, eval_items=eval_items).train()
        return {"accuracy": result.eval_after.team_accuracy, "bytes": 0.0}
    from teamplay.federated.run import run_federated

    fed = {"clients": size["clients"], "rounds": size["rounds"], "local_steps": size["local_steps"],
           "partition": "by_key", "partition_key": "level", "extra_tasks": [level2], "client_cpus": 1.0,
           **VARIANTS[name]}
    cfg = build_config(FederatedConfig, {**data, "federated": fed})
    records = []
    run_federated(cfg, on_round=records.append)
    return {"accuracy": records[-1]["heldout"]["team_accuracy"],
            "bytes": float(sum(r["bytes_total"] for r in records))}


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t confidence interval (0 for one value)."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return float(x.mean()), 0.0
    half = _T95.get(x.size - 1, 1.96) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean()), float(half)


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    size = sizes(quick)
    root = Path(tempfile.mkdtemp(prefix="teamplay-bench-fed-"))
    results: dict[str, list[dict[str, float]]] = {}
    try:
        for seed in range(size["seeds"]):
            for name in VARIANTS:
                results.setdefault(name, []).append(run_variant(name, model, size, seed, root))
                print(f"  {name} seed {seed}: {results[name][-1]}", flush=True)
                # kept as it goes: a run cut short still leaves the figures it measured
                (Path(tempfile.gettempdir()) / "teamplay-bench-federated-partial.json").write_text(
                    json.dumps({"sizes": size, "results": results}), encoding="utf-8")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return summarize(results, size)


def _compare(a: float, b: float) -> str:
    return "higher" if a > b else "equal" if a == b else "lower"


def summarize(results: dict[str, list[dict[str, float]]], size: dict[str, int]) -> Result:
    """The table and headline of ``results`` (variant -> one dict per seed run); variants may have
    fewer seeds than ``size["seeds"]`` (a run cut short), and the table says how many each has."""
    rows, summary = [], {}
    for name, runs in results.items():
        acc, acc_ci = mean_ci([r["accuracy"] for r in runs])
        mb, mb_ci = mean_ci([r["bytes"] / 1e6 for r in runs])
        summary[name] = {"accuracy": acc, "accuracy_ci": acc_ci, "mbytes": mb, "mbytes_ci": mb_ci, "runs": runs}
        rows.append([name, len(runs), f"{acc:.3f} ± {acc_ci:.3f}",
                     "-" if name == "centralized" else f"{mb:.3f} ± {mb_ci:.3f}"])
    table = markdown_table(["variant", "seeds", "held-out accuracy", "MB uploaded (all sites)"], rows)
    s = summary
    parts = []
    if {"fedgrpo", "fedavg", "centralized"} <= s.keys():
        parts.append(f"held-out accuracy: Fed-GRPO {s['fedgrpo']['accuracy']:.3f}, FedAvg "
                     f"{s['fedavg']['accuracy']:.3f}, centralized {s['centralized']['accuracy']:.3f}; "
                     f"Fed-GRPO vs FedAvg: {_compare(s['fedgrpo']['accuracy'], s['fedavg']['accuracy'])}")
    if {"fedgrpo", "fedgrpo -sparse"} <= s.keys():
        pairs = list(zip(s["fedgrpo"]["runs"], s["fedgrpo -sparse"]["runs"], strict=False))
        same = all(a == b for a, b in pairs)
        parts.append(f"B=100% sparse path identical to dense upload in accuracy and bytes: "
                     f"{'yes' if same else 'no'} ({len(pairs)} seed pairs)")
    for budget in ("fedgrpo B=10%", "fedgrpo B=1%"):
        if {"fedgrpo", budget} <= s.keys() and s[budget]["mbytes"] > 0:
            parts.append(f"{budget.split()[1]} uploads {s['fedgrpo']['mbytes'] / s[budget]['mbytes']:.1f}x less")
    headline = "; ".join(parts) + "." if parts else "no variant finished."
    done = min(len(r) for r in results.values()) if results else 0
    notes = (f"Sizes: {size['clients']} sites x {size['rounds']} rounds x {size['local_steps']} local steps "
             f"(centralized: {size['clients'] * size['rounds'] * size['local_steps']} steps), {size['problems']} "
             f"problems x 4 episodes per step, {size['eval']} held-out arith level-1 problems; planned "
             f"{size['seeds']} seeds, at least {done} finished per variant listed. ± is the half-width of a 95% "
             f"t interval over seeds (0 with one seed).",)
    return Result("federated", table, headline, None, notes, {"sizes": size, "summary": summary})

if __name__ == "__main__":
    script_main(run, __doc__.splitlines()[0])
