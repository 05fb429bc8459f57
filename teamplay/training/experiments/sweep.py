"""Sweeps: the same training run over a grid of config values and several seeds, with a results
table of mean ± 95% confidence interval over seeds.

    teamplay sweep --config C --grid credit.method=grpo,shapley --seeds 0,1,2 -o runs/arena

Layout of a sweep folder::

    SWEEP/sweep.json                    what was asked: base config, grid, seeds, the run list
    SWEEP/runs/<point>__seed<s>/        one normal run folder per grid point and seed
    SWEEP/runs/<point>__seed<s>/done.json   written (atomically) when that run finished
    SWEEP/results.{csv,md,json}         the table, rewritten after every finished run
    SWEEP/eval_cache/                   the untrained team's held-out evaluation, once per distinct
                                        setting (usually per seed), reused by every run it equals

Grid keys are dotted config paths (``credit.method``, ``optim.lr``, ``credit.options.mode``); the
values after ``=`` are comma-separated YAML values (a value may be a flow mapping, so one grid
axis can vary a whole section: ``--grid 'credit={method: grpo},{method: shapley, options: {value:
masking}}'``). Several ``--grid`` flags make the cartesian
product. Every run shares the base config (team, task, budget, held-out set); only the grid
values and the trainer ``seed`` differ, so differences between points come from the grid alone.

Resuming: running the same command again skips runs with ``done.json``, resumes an interrupted run
from its latest checkpoint (the trainer's exact resume) and starts a run that has no checkpoint
yet from scratch. A sweep folder started with a different grid, seeds or config is refused.

The table (``summarize``): for each grid point and each metric, the mean over seeds and the
half-width of the two-sided 95% Student-t interval, ``t_{0.975, n-1} * sd / sqrt(n)`` with the
sample standard deviation (``ddof=1``); with one seed the interval is undefined (NaN, shown as
"n=1"). Metrics come from each run's final held-out evaluation (accuracy, correction and team
metrics, cost), its gain over the evaluation before training, and the run's training budget
(generated tokens, counterfactual tokens included).
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from teamplay.atomic import write_atomically
from teamplay.config import TrainConfig, build_config, parse_overrides
from teamplay.errors import ConfigError, DataError
from teamplay.json_files import read_json
from teamplay.training.run.preemption import Preempted, preemption_handlers
from teamplay.training.store.checkpoint import latest_checkpoint
from teamplay.training.store.metrics import BUDGET_KEYS, read_metrics
from teamplay.training.wiring.checks import check_run

MANIFEST = "sweep.json"
DONE = "done.json"
RUNS = "runs"
EVAL_CACHE = "eval_cache"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+,-]")
#: the longest file name most file systems allow (NAME_MAX); a grid value may be a long text
MAX_NAME = 255


def run_name(label: str, seed: int) -> str:
    """The folder name of a run: its label with characters unsafe in file names made ``_``, then
    ``__seed<seed>``. A name longer than ``MAX_NAME`` (a grid value such as a judge's prompt) is cut,
    the label ending in ``~`` and 12 hex digits of its sha256 so that names stay distinct.

    >>> run_name("credit.method=grpo", 3)
    'credit.method=grpo__seed3'
    >>> name = run_name("credit.options.prompt=" + "x" * 300, 0)
    >>> len(name), name[-20:]
    (255, '~4033abc0cc0f__seed0')
    """
    safe, tail = _UNSAFE.sub("_", label), f"__seed{seed}"
    if len(safe) + len(tail) <= MAX_NAME:
        return safe + tail
    digest = hashlib.sha256(label.encode()).hexdigest()[:12]
    return f"{safe[:MAX_NAME - len(tail) - 13]}~{digest}{tail}"


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep.

    Fields:
        name: folder name under ``SWEEP/runs`` (``credit.method=grpo__seed0``).
        point: the grid values of this run, {dotted key: value}, in grid order.
        label: the point as text (``credit.method=grpo``), shared by the point's seeds.
        seed: the trainer seed.
        overrides: ``--set`` style overrides that turn the base config into this run's.
    """

    name: str
    point: Mapping[str, Any]
    label: str
    seed: int
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Sweep:
    """A whole sweep: base config data, grid, seeds and the runs they make, in run order
    (grid points outer, seeds inner)."""

    folder: Path
    base: Mapping[str, Any]
    grid: Mapping[str, tuple[Any, ...]]
    seeds: tuple[int, ...]
    runs: tuple[SweepRun, ...] = field(default=())

    def run_dir(self, run: SweepRun) -> Path:
        return self.folder / RUNS / run.name

    def config(self, run: SweepRun) -> TrainConfig:
        """The validated config of ``run``: its output folder is its run folder, and the untrained
        team's held-out evaluation is shared through ``SWEEP/eval_cache`` (the grid points of one
        seed usually share it) unless the base config names a folder of its own in ``eval_cache``."""
        # JSON strings are YAML strings: a folder name with ': ' stays a string
        folder = json.dumps(str(self.run_dir(run)))
        own = self.base.get("eval_cache") is not None
        cache = [] if own else [f"eval_cache={json.dumps(str(self.folder / EVAL_CACHE))}"]
        return build_config(TrainConfig, self.base, [*run.overrides, f"output_dir={folder}", *cache])

    def manifest(self) -> dict[str, Any]:
        return {"base_config": dict(self.base), "grid": {k: list(v) for k, v in self.grid.items()},
                "seeds": list(self.seeds),
                "runs": [{"name": r.name, "label": r.label, "point": dict(r.point), "seed": r.seed}
                         for r in self.runs]}

    def seeds_first(self) -> Sweep:
        """The same sweep run seed by seed (every grid point of the first seed, then of the next):
        a sweep stopped part-way then holds whole seeds, paired across grid points. The manifest
        compares runs regardless of order, so either order resumes the other's folder."""
        points = {r.label: k for k, r in enumerate(self.runs)}
        order = {seed: k for k, seed in enumerate(self.seeds)}
        return replace(self, runs=tuple(sorted(self.runs, key=lambda r: (order[r.seed], points[r.label]))))


def parse_grid(specs: Sequence[str]) -> dict[str, tuple[Any, ...]]:
    """``["credit.method=grpo,shapley", "optim.lr=1e-4,3e-4"]`` -> {key: (values...)}.

    Values are YAML values (``0.001`` is a float, ``true`` a bool, ``{method: grpo}`` a mapping);
    commas inside brackets or braces do not split values.
    """
    grid: dict[str, tuple[Any, ...]] = {}
    for spec in specs:
        key, sep, raw = spec.partition("=")
        key = key.strip()
        if not sep or not key or not raw.strip():
            raise ConfigError(f"--grid {spec!r}: expected KEY=V1,V2,..., e.g. --grid credit.method=grpo,shapley")
        if key in ("seed", "output_dir"):
            raise ConfigError(f"--grid {key}: use --seeds for seeds and --output for the sweep folder")
        if key in grid:
            raise ConfigError(f"--grid {key}: given twice; put all its values in one --grid")
        texts = [v.strip() for v in split_top_level(raw)]
        if any(not t for t in texts):
            raise ConfigError(f"--grid {spec!r}: empty value between commas")
        if len(set(texts)) != len(texts):
            raise ConfigError(f"--grid {key}: repeated value in {raw!r}")
        values = tuple(value for _, value in parse_overrides([f"{key}={t}" for t in texts]))
        grid[key] = values
    return grid


def split_top_level(text: str) -> list[str]:
    """Split at commas outside brackets and braces, so a value may be a YAML flow collection.

    >>> split_top_level("grpo,{method: shapley, options: {value: masking}}")
    ['grpo', '{method: shapley, options: {value: masking}}']
    """
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0,1,2"`` -> (0, 1, 2); seeds must be distinct integers."""
    try:
        seeds = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: expected comma-separated integers, e.g. --seeds 0,1,2") from None
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {text!r}: repeated seed")
    return seeds


def _label(key: str, value: Any) -> list[str]:
    """``key=value`` parts of a label; a mapping value gives one part per leaf
    (``credit={method: shapley, options: {value: masking}}`` -> ``credit.method=shapley``,
    ``credit.options.value=masking``)."""
    if isinstance(value, dict) and value:
        return [part for k, v in value.items() for part in _label(f"{key}.{k}", v)]
    return [f"{key}={value if isinstance(value, str) else json.dumps(value)}"]


def plan(folder: Path, base: Mapping[str, Any], grid: Mapping[str, Sequence[Any]],
         seeds: Sequence[int], overrides: Sequence[str] = ()) -> Sweep:
    """The sweep's runs: the cartesian product of the grid values, times the seeds.

    ``overrides`` (``--set``) are applied to ``base`` first, for every run. Every run's config is
    validated here (fields, then what the trainer checks before loading anything: task, protocol,
    credit method with its options and resources), so a bad grid value stops the sweep before any
    run trains.
    """
    if not seeds:
        raise ConfigError("--seeds: give at least one seed")
    merged = build_config(TrainConfig, base, overrides).model_dump(mode="json")
    sweep = Sweep(folder=Path(folder), base=merged, grid={k: tuple(v) for k, v in grid.items()},
                  seeds=tuple(seeds))
    runs = []
    keys = list(grid)
    for values in itertools.product(*(grid[k] for k in keys)) if keys else [()]:
        point = dict(zip(keys, values, strict=True))
        label = ",".join(part for k, v in point.items() for part in _label(k, v)) or "base"
        for seed in seeds:
            sets = tuple(f"{k}={json.dumps(v)}" for k, v in point.items()) + (f"seed={seed}",)
            name = run_name(label, seed)
            runs.append(SweepRun(name=name, point=point, label=label, seed=seed, overrides=sets))
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ConfigError("--grid: two grid values map to the same folder name; use values that differ "
                          "in letters or digits")
    sweep = Sweep(sweep.folder, sweep.base, sweep.grid, sweep.seeds, tuple(runs))
    for run in runs:
        try:
            check_run(sweep.config(run))
        except ConfigError as exc:
            raise ConfigError(f"--grid {run.label}, seed {run.seed}: {exc}") from None
    return sweep


def write_manifest(sweep: Sweep) -> None:
    """Write ``sweep.json``, or check that an existing one describes the same sweep."""
    sweep.folder.mkdir(parents=True, exist_ok=True)
    path = sweep.folder / MANIFEST
    wanted = sweep.manifest()
    if path.is_file():
        found = read_json(path, DataError, fix="delete the sweep folder or pick another --output")
        if _comparable(found) != _comparable(json.loads(json.dumps(wanted))):
            raise ConfigError(f"{sweep.folder} holds a sweep with another config, grid or seeds; resume it with "
                              f"the same command, or give a new --output folder")
        return
    _write_atomic(path, json.dumps(wanted, indent=2))


def _comparable(manifest: Any) -> Any:
    """A manifest as the sweep it describes: the run list in name order (the order runs are
    trained in is not the sweep's), the base config validated (a field a later teamplay added
    with its default is the same sweep)."""
    if not isinstance(manifest, dict):
        return manifest
    out = dict(manifest)
    if isinstance(out.get("runs"), list):
        out["runs"] = sorted(out["runs"], key=lambda r: json.dumps(r, sort_keys=True))
    if isinstance(out.get("base_config"), dict):
        try:
            out["base_config"] = build_config(TrainConfig, out["base_config"]).model_dump(mode="json")
        except (ConfigError, ValueError):
            pass  # compared as written: an invalid stored config differs from any valid one
    return out


def is_done(sweep: Sweep, run: SweepRun) -> bool:
    return (sweep.run_dir(run) / DONE).is_file()


def prepare_run(sweep: Sweep, run: SweepRun) -> str:
    """Ready ``run`` to train and say how: "skip" (``done.json`` exists), "resume" (its folder has
    a checkpoint) or "start" (a folder killed before its first checkpoint is deleted first)."""
    run_dir = sweep.run_dir(run)
    if is_done(sweep, run):
        return "skip"
    if run_dir.is_dir() and latest_checkpoint(run_dir) is not None:
        return "resume"
    if run_dir.exists():
        shutil.rmtree(run_dir)  # killed before its first checkpoint: nothing to resume
    return "start"


def finish_run(sweep: Sweep, run: SweepRun) -> None:
    """Mark ``run`` done (``done.json``, atomically) and rewrite the results table."""
    _write_atomic(sweep.run_dir(run) / DONE, json.dumps({"name": run.name, "label": run.label, "seed": run.seed,
                                                         "point": dict(run.point)}, indent=2))
    write_results(sweep)


def pending_runs(sweep: Sweep, on_run: Callable[[SweepRun, str], None] | None = None
                 ) -> Iterator[tuple[SweepRun, str | None]]:
    """The runs still to train, as ``(run, resume)`` (``"auto"`` for a run with a checkpoint, else
    ``None``), each prepared (``prepare_run``) only when the iteration reaches it; ``on_run(run,
    status)`` sees every run, skipped ones too. Writes the sweep's manifest first."""
    write_manifest(sweep)
    for run in sweep.runs:
        status = prepare_run(sweep, run)
        if on_run is not None:
            on_run(run, status)
        if status != "skip":
            yield run, "auto" if status == "resume" else None


def run_sweep(sweep: Sweep, train: Callable[[TrainConfig, str | None], Any],
              on_run: Callable[[SweepRun, str], None] | None = None) -> list[SweepRun]:
    """Train every unfinished run of ``sweep``, one after another; returns the runs trained now.

    ``train(cfg, resume)`` trains one run (``resume`` is "auto" when the run folder has a
    checkpoint, else None after the folder was cleared). ``on_run(run, status)`` is called with
    status "skip" (already done), "resume" or "start" before each run. After each run its
    ``done.json`` and the results table are written. (``teamplay.distributed.sweep`` runs them
    side by side on Ray, with the same steps.)

    SIGTERM or SIGINT stops the sweep cleanly: the run in progress stops as ``teamplay train`` does
    (``teamplay.training.run.preemption``), or the sweep stops before its next run (the signal also
    counts while a run's model loads); ``Preempted`` says to run the same sweep again.
    """
    again = "run the same teamplay sweep command again to continue"
    trained = []
    with preemption_handlers() as preemption:
        for run, resume in pending_runs(sweep, on_run):
            if preemption.requested:
                raise Preempted(preemption.signum, f"before run {run.name} started", again)
            try:
                train(sweep.config(run), resume)
            except Preempted as exc:
                raise exc.with_hint(f"run {run.name} stops there; {again}") from None
            finish_run(sweep, run)
            trained.append(run)
    return trained


# ------------------------------------------------------------------------------------ the table
def run_metrics(run_dir: Path) -> dict[str, float]:
    """The metrics of one finished run, flattened to ``name -> number``.

    * ``heldout/<field>``: the final held-out evaluation (``heldout_final``; nested fields such as
      ``role_accuracy`` and ``extra.team`` become ``heldout/role_accuracy/proposer``);
    * ``heldout_gain/team_accuracy``: final minus before-training held-out accuracy (when both exist);
    * ``heldout_sampled/<field>`` (runs with ``eval_samples``): the final sampled evaluation
      (``heldout_sampled_final``: ``heldout_sampled/samples/pass_at_k``, ...), and
      ``heldout_sampled_gain/pass_at_k``: its pass@k minus the one before training;
    * ``train/reward_last``: mean team reward of the last step;
    * ``train/updates``: optimiser steps taken over the run (a step whose groups all had equal rewards
      may take none);
    * ``train/varied_groups``: the share of training groups whose team rewards were not all equal
      (the groups where a broadcast reward gives any signal);
    * ``budget/steps``: training steps run (fewer than ``steps`` when ``token_budget`` stopped the run);
    * ``budget/<counter>``: generated tokens and other counters summed over the training steps;
      ``budget/generated_tokens``: the sum of them all (rollout + counterfactual tokens), the budget
      by which methods are compared.
    """
    rows = read_metrics(run_dir)
    out: dict[str, float] = {}
    final = next((r["heldout_final"] for r in reversed(rows) if "heldout_final" in r), None)
    before = next((r["heldout"] for r in rows if r.get("step") == 0 and "heldout" in r), None)
    if final is not None:
        out.update(flatten_evaluation(final, "heldout/"))
        if before is not None:
            out["heldout_gain/team_accuracy"] = float(final["team_accuracy"]) - float(before["team_accuracy"])
    sampled = next((r["heldout_sampled_final"] for r in reversed(rows) if "heldout_sampled_final" in r), None)
    sampled_before = next((r["heldout_sampled"] for r in rows if r.get("step") == 0 and "heldout_sampled" in r), None)
    if sampled is not None:
        out.update(flatten_evaluation(sampled, "heldout_sampled/"))
        if sampled_before is not None:
            out["heldout_sampled_gain/pass_at_k"] = (float(sampled["extra"]["samples"]["pass_at_k"])
                                                     - float(sampled_before["extra"]["samples"]["pass_at_k"]))
    steps = [r for r in rows if "reward_mean" in r]
    if steps:
        out["train/reward_last"] = float(steps[-1]["reward_mean"])
        def total(key: str) -> float:
            return float(sum(float(r.get(key, 0) or 0) for r in steps))

        out["train/updates"] = total("optimizer_steps")
        if groups := total("groups"):
            out["train/varied_groups"] = 1.0 - total("zero_variance_groups") / groups
        out["budget/steps"] = float(len(steps))
        for key in BUDGET_KEYS:
            if any(key in r for r in steps):
                out[f"budget/{key}"] = total(key)
        # every token the run generated: its episodes' plus counterfactual ones (not in ``tokens``)
        out["budget/generated_tokens"] = sum(out.get(f"budget/{key}", 0.0) for key in BUDGET_KEYS)
    for key in (f"{part}/{name}" for part in ("heldout", "heldout_sampled")
                for name in ("seconds", "tokens_per_second", "episodes")):
        out.pop(key, None)  # wall time and episode counts are not results
    return out


def flatten_evaluation(data: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """An evaluation's numbers as ``prefix + path -> float`` (nested keys joined by "/", an ``extra``
    level dropped, non-numbers and non-finite values left out): how ``run_metrics`` names them."""
    flat: dict[str, float] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            inner = key if key != "extra" else ""
            flat.update(flatten_evaluation(value, f"{prefix}{inner}/" if inner else prefix))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            flat[f"{prefix}{key}"] = float(value)
    return flat


@cache
def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (two-sided 95%).

    Found by bisection on the CDF, which is integrated with Simpson's rule from the density
    ``Γ((ν+1)/2) / (sqrt(νπ) Γ(ν/2)) (1 + x²/ν)^(-(ν+1)/2)``; accurate to 1e-6. About 0.2 s of pure
    Python a call, so each ``df`` is computed once per process (a sweep's tables ask for the same few
    thousands of times: uncached, writing a small sweep's results took minutes).

    >>> round(t_quantile_975(1), 3), round(t_quantile_975(2), 3), round(t_quantile_975(30), 3)
    (12.706, 4.303, 2.042)
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    nu = float(df)
    log_c = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi)

    def density(x: float) -> float:
        return math.exp(log_c - (nu + 1) / 2 * math.log1p(x * x / nu))

    def mass(x: float, n: int = 4000) -> float:  # P(0 < T < x)
        h = x / n
        s = density(0.0) + density(x)
        s += sum((4 if i % 2 else 2) * density(i * h) for i in range(1, n))
        return s * h / 3

    lo, hi = 0.0, 1.0
    while mass(hi) < 0.475:
        lo, hi = hi, hi * 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mass(mid) < 0.475 else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Cell:
    """One metric of one grid point over its seeds: ``mean ± ci95`` from ``values`` (one per seed)."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / self.n

    @property
    def ci95(self) -> float:
        """Half-width of the 95% t interval of the mean; NaN with fewer than 2 values."""
        if self.n < 2:
            return math.nan
        var = sum((v - self.mean) ** 2 for v in self.values) / (self.n - 1)
        return t_quantile_975(self.n - 1) * math.sqrt(var / self.n)

    def text(self, digits: int = 3) -> str:
        if self.n == 0:
            return "—"
        ci = "n=1" if self.n < 2 else f"± {self.ci95:.{digits}f}"
        return f"{self.mean:.{digits}f} {ci}"


@dataclass(frozen=True)
class Results:
    """The sweep table: ``cells[label][metric]`` over the seeds that finished."""

    labels: tuple[str, ...]
    metrics: tuple[str, ...]
    cells: Mapping[str, Mapping[str, Cell]]
    seeds_done: Mapping[str, tuple[int, ...]]

    def to_json(self) -> dict[str, Any]:
        return {"points": [{"label": label, "seeds": list(self.seeds_done[label]),
                            "metrics": {m: {"mean": c.mean, "ci95": None if math.isnan(c.ci95) else c.ci95,
                                            "n": c.n, "values": list(c.values)}
                                        for m, c in self.cells[label].items()}}
                           for label in self.labels]}

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["point", "metric", "n", "mean", "ci95", "values"])
        for label in self.labels:
            for metric in self.metrics:
                cell = self.cells[label].get(metric)
                if cell is None:
                    continue
                ci = "" if math.isnan(cell.ci95) else f"{cell.ci95:.6g}"
                writer.writerow([label, metric, cell.n, f"{cell.mean:.6g}", ci,
                                 " ".join(f"{v:.6g}" for v in cell.values)])
        return buf.getvalue()

    def to_markdown(self) -> str:
        head = "| metric | " + " | ".join(f"{label} (n={len(self.seeds_done[label])})" for label in self.labels) + " |"
        rule = "|---|" + "---:|" * len(self.labels)
        rows = [f"| {m} | " + " | ".join(self.cells[label][m].text() if m in self.cells[label] else "—"
                                         for label in self.labels) + " |" for m in self.metrics]
        return "\n".join([head, rule, *rows]) + "\n"


#: metrics shown first in the table, in this order (the rest follow alphabetically)
LEADING = ("heldout/team_accuracy", "heldout_gain/team_accuracy", "heldout/initial_accuracy",
           "heldout/wrong_to_right", "heldout/right_to_wrong")


def summarize(sweep: Sweep) -> Results:
    """Mean ± 95% CI per grid point and metric over the point's finished runs."""
    per_label: dict[str, list[dict[str, float]]] = {}
    seeds: dict[str, list[int]] = {}
    for run in sweep.runs:
        per_label.setdefault(run.label, [])
        seeds.setdefault(run.label, [])
        if is_done(sweep, run):
            per_label[run.label].append(run_metrics(sweep.run_dir(run)))
            seeds[run.label].append(run.seed)
    names: set[str] = set()
    for runs in per_label.values():
        for m in runs:
            names.update(m)
    metrics = tuple([m for m in LEADING if m in names] + sorted(names - set(LEADING)))
    cells = {label: {m: Cell(tuple(r[m] for r in runs if m in r)) for m in metrics
                     if any(m in r for r in runs)} for label, runs in per_label.items()}
    return Results(labels=tuple(per_label), metrics=metrics, cells=cells,
                   seeds_done={k: tuple(v) for k, v in seeds.items()})


def write_results(sweep: Sweep) -> Results:
    """Write ``results.csv``, ``results.md`` and ``results.json`` into the sweep folder."""
    results = summarize(sweep)
    _write_atomic(sweep.folder / "results.json", json.dumps(results.to_json(), indent=2))
    _write_atomic(sweep.folder / "results.csv", results.to_csv())
    _write_atomic(sweep.folder / "results.md", results.to_markdown())
    return results


def load_sweep(folder: Path) -> Sweep:
    """The sweep described by ``folder/sweep.json`` (for reports and ``results``)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise DataError(f"{folder} is not a sweep folder (no {MANIFEST}; written by teamplay sweep)")
    data = read_json(path, DataError)
    try:
        runs = tuple(SweepRun(name=r["name"], point=r["point"], label=r["label"], seed=int(r["seed"]),
                              overrides=()) for r in data["runs"])
        return Sweep(Path(folder), data["base_config"], {k: tuple(v) for k, v in data["grid"].items()},
                     tuple(data["seeds"]), runs)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{path}: not a valid sweep manifest ({exc})") from None


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, text)
