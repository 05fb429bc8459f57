"""The credit arena's committed evidence: per-seed, per-method results as JSON, and the statistics a
reader recomputes from them (the minimal detectable difference, tokens to reach grpo's accuracy).

A result file (``benchmarks/results/credit_arena/<setting>.json``) holds one setting: its sizes, the
base config, the methods refused, and per method per seed the run's flat metrics
(``teamplay.training.experiments.sweep.run_metrics``), its held-out learning curve ``[(step, accuracy)]`` and the
generated tokens (counterfactual ones included) after each training step. Every table of the
arena's split settings is computed from these files alone (``--table-only``); a test checks that
BENCHMARKS.md holds what they give.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "credit_arena"

#: the fields of a result that are stored (the rest of a run_setting result is rebuilt or local)
STORED = ("setting", "size", "sizes", "config", "refused", "per_seed", "curves", "tokens", "runs_total",
          "command", "machine", "machines", "dtype")


def result_path(setting: str, size: str = "default", more: bool = False, folder: Path = RESULTS) -> Path:
    """The result file of a setting's comparison (``more``: a ``--methods`` comparison of its own)."""
    return folder / f"{setting}{'' if size == 'default' else '-' + size}{'-more' if more else ''}.json"


def save_result(result: Mapping[str, Any], path: Path) -> Path:
    """Write the stored fields of ``result`` as JSON (seeds as strings, curves as lists), atomically."""
    from teamplay.atomic import write_atomically

    data = {k: result[k] for k in STORED if k in result}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return path


def load_result(path: Path) -> dict[str, Any]:
    """A result file back as ``run_setting`` returns it: seeds as ints, curves as (step, accuracy)
    tuples, token counts by int step."""
    data = json.loads(path.read_text(encoding="utf-8"))
    data["sizes"] = tuple(data["sizes"])
    data["per_seed"] = {label: {int(s): m for s, m in seeds.items()} for label, seeds in data["per_seed"].items()}
    data["curves"] = {label: {int(s): [(int(step), float(acc)) for step, acc in c] for s, c in seeds.items()}
                      for label, seeds in data["curves"].items()}
    data["tokens"] = {label: {int(s): {int(step): float(n) for step, n in t.items()} for s, t in seeds.items()}
                      for label, seeds in data.get("tokens", {}).items()}
    if "machines" in data:
        data["machines"] = {int(s): line for s, line in data["machines"].items()}
    return data


def seeds_held(result: Mapping[str, Any]) -> set[int]:
    """The seeds every method of a result finished (a paired seed: all its methods ran on it)."""
    held = [set(seeds) for seeds in result["per_seed"].values()]
    return set.intersection(*held) if held else set()


def machines_of(result: Mapping[str, Any]) -> dict[int, str]:
    """Seed -> the machine line it ran on (a result stored before per-seed lines: its one line)."""
    if "machines" in result:
        return dict(result["machines"])
    return {s: result["machine"] for s in seeds_held(result)}


def merge_results(stored: Mapping[str, Any], new: Mapping[str, Any], machine: str) -> dict[str, Any]:
    """``stored`` with the seeds of ``new`` (run on ``machine``) added: the same setting, config and
    methods, no seed in both. A seed is a pair of runs made together, so its difference to grpo is
    paired whichever machine ran it; ``machines`` records which one did. The methods are compared as
    a set: a stored file lists them sorted, a run in the setting's order."""
    if stored["setting"] != new["setting"] or set(stored["per_seed"]) != set(new["per_seed"]):
        raise ValueError(
            f"cannot add seeds of {new['setting']} ({', '.join(new['per_seed'])}) to the stored "
            f"{stored['setting']} ({', '.join(stored['per_seed'])}): another comparison"
        )
    if json.loads(json.dumps(stored["config"])) != json.loads(json.dumps(new["config"])):
        raise ValueError(
            f"cannot add seeds to the stored {stored['setting']}: its config differs from this "
            "version's (the runs would not be comparable); run the comparison in a folder of its own"
        )
    added = seeds_held(new)  # a seed stopped part-way (not every method finished) waits for its rerun
    if seeds_held(stored) & added:
        raise ValueError(f"seeds {sorted(seeds_held(stored) & added)} are stored already")
    merged = dict(stored)
    for key in ("per_seed", "curves", "tokens"):
        merged[key] = {
            label: {**stored[key].get(label, {}), **{s: v for s, v in new[key].get(label, {}).items() if s in added}}
            for label in stored["per_seed"]
        }
    merged["machines"] = {**machines_of(stored), **{s: machine for s in added}}
    n_seeds = len(seeds_held(merged))
    merged["sizes"] = (*tuple(stored["sizes"])[:4], n_seeds, tuple(stored["sizes"])[5])
    merged["runs_total"] = len(merged["per_seed"]) * n_seeds
    return merged


def machine_summary(result: Mapping[str, Any]) -> str:
    """The machine line(s) of a result: its one line, or per machine the seeds it ran."""
    machines = machines_of(result)
    lines = sorted(set(machines.values()), key=lambda line: min(s for s, m in machines.items() if m == line))
    if len(lines) <= 1:
        return result["machine"]
    return "; ".join(
        f"seeds {', '.join(str(s) for s in sorted(s for s, m in machines.items() if m == line))}: {line}"
        for line in lines
    )


# ------------------------------------------------------------------------------------- statistics
@cache
def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with ``df`` degrees of freedom, by bisection
    on the CDF (the density integrated with Simpson's rule, 2000 panels: error far below 1e-6).
    Computed once per ``(p, df)`` and process: tables ask for the same few many times.

    >>> round(t_quantile(0.975, 2), 3), round(t_quantile(0.8, 2), 4), round(t_quantile(0.8, 30), 4)
    (4.303, 1.0607, 0.8538)
    """
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    nu = float(df)
    log_c = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi)

    def mass(x: float, n: int = 2000) -> float:  # P(0 < T < x)
        f = [math.exp(log_c - (nu + 1) / 2 * math.log1p((i * x / n) ** 2 / nu)) for i in range(n + 1)]
        return (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2])) * x / n / 3

    lo, hi = 0.0, 1.0
    while mass(hi) < p - 0.5:
        lo, hi = hi, hi * 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mass(mid) < p - 0.5 else (lo, mid)
    return (lo + hi) / 2


def mde(differences: Sequence[float], power: float = 0.8) -> float:
    """The minimal detectable paired difference at these seeds: ``(t_{0.975, n-1} + t_{power, n-1})
    sd / sqrt(n)`` (a two-sided 95% paired t test that finds a true difference of this size with
    probability ``power``), from the sample sd of the per-seed differences; NaN below 2 seeds."""
    n = len(differences)
    if n < 2:
        return math.nan
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    return (t_quantile(0.975, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def tokens_to_reach(curve: Sequence[tuple[int, float]], tokens: Mapping[int, float], target: float) -> float:
    """Generated tokens (counterfactual ones included) when the held-out curve first reaches
    ``target``: the tokens after the training step of the first curve point at or above it (0 for
    the untrained point); NaN when the curve never reaches it.

    >>> tokens_to_reach([(0, 0.1), (4, 0.3), (8, 0.5)], {4: 400.0, 8: 800.0}, 0.3)
    400.0
    """
    for step, accuracy in curve:
        if accuracy >= target:
            return 0.0 if step == 0 else float(tokens[step])
    return math.nan
