"""``teamplay report --compare SWEEP_DIR``: the grid points of a sweep side by side.

One self-contained page: the results table (mean ± 95% CI over seeds, the same numbers as the
sweep's ``results.md``), learning curves per grid point with a band over seeds, and role metrics
side by side (credit share per role over training, and the final held-out role and team metrics
with their intervals). Curves and bands: at each step, the mean over the seeds that logged it and
the 95% t interval of that mean (no band where only one seed logged the step).

When the runs were evaluated during training (``eval_every``), the held-out curve is the sweep's
learning curves instead (``sweep_learning_curves``, drawn over the steps all seeds share) with the
area under each curve: the mean held-out accuracy over training, which tells a method that learns
sooner from one that only ends at the same accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from teamplay.atomic import write_atomically
from teamplay.errors import DataError
from teamplay.report.data import RunData, load_run
from teamplay.report.html import CSS, figure
from teamplay.report.markup import esc, note, table
from teamplay.report.plots import (
    FIGSIZE,
    PALETTE,
    Curve,
    Plot,
    _legend,
    _save,
    _style,
    mathtext_safe,
    plot_learning_curves,
)
from teamplay.training.experiments.sweep import Cell, Results, Sweep, is_done, load_sweep, summarize
from teamplay.training.store.metrics import read_metrics

Groups = Sequence[tuple[str, Sequence[RunData]]]
#: final held-out metrics drawn as bars with intervals (prefixes of the results' metric names)
ROLE_METRIC_PREFIXES = ("heldout/role_accuracy/", "heldout/team/")


def is_sweep_folder(path: Path) -> bool:
    return (Path(path) / "sweep.json").is_file()


def _band(series: Sequence[dict[int, float]]) -> tuple[list[int], list[float], list[float]]:
    """Steps, mean and CI half-width (0 where fewer than 2 seeds) over per-seed {step: value}."""
    steps = sorted({s for one in series for s in one})
    means, widths = [], []
    for s in steps:
        cell = Cell(tuple(one[s] for one in series if s in one))
        means.append(cell.mean)
        widths.append(0.0 if math.isnan(cell.ci95) else cell.ci95)
    return steps, means, widths


def band_plot(groups: Groups, out_dir: Path, key: str, title: str, ylabel: str,
              values: Callable[[RunData], dict[int, float]], caption: str) -> Plot:
    """One line per grid point (mean over seeds) with a shaded 95% interval."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    drawn = 0
    for i, (label, runs) in enumerate(groups):
        series = [v for v in (values(r) for r in runs) if v]
        if not series:
            continue
        xs, ys, ws = _band(series)
        color = PALETTE[i % len(PALETTE)]
        ax.plot(xs, ys, color=color, marker="o" if len(xs) <= 30 else None, markersize=3.5, linewidth=1.8,
                label=mathtext_safe(f"{label} (n={len(series)})"))
        ax.fill_between(xs, [y - w for y, w in zip(ys, ws, strict=True)],
                        [y + w for y, w in zip(ys, ws, strict=True)], color=color, alpha=0.15, linewidth=0)
        drawn += 1
    if not drawn:
        plt.close(fig)
        return Plot(key, title, None, "no finished run logged this metric")
    _style(ax, "training step", ylabel)
    _legend(ax, max(drawn, 2))
    return Plot(key, title, _save(fig, out_dir / f"{key}.png"), caption)


def _step_scalar(name: str) -> Callable[[RunData], dict[int, float]]:
    return lambda run: {s.step: float(s.scalars[name]) for s in run.steps if name in s.scalars}


def _heldout(run: RunData) -> dict[int, float]:
    return {h.step: h.metrics.team_accuracy for h in run.heldout}


def _share(role: str) -> Callable[[RunData], dict[int, float]]:
    return lambda run: {s.step: s.credit_share[role] for s in run.steps if role in s.credit_share}


def sweep_learning_curves(folder: Path, metric: str = "team_accuracy") -> dict[str, list[list[tuple[int, float]]]]:
    """The held-out learning curves of the sweep in ``folder``: {grid-point label: one curve per seed}.

    A curve is ``[(step, value)]`` in step order, ``value`` being the field ``metric`` of each
    held-out evaluation of the run: the one before training (step 0), every intermediate one
    (each ``eval_every`` steps) and the final one (``heldout_final``) at the run's last step. Where
    a step has two evaluations the final one wins (a run extended by resume keeps only its last
    ``heldout_final``). Labels are the sweep table's, in the same order, each present even with no
    curve; seeds in run order. Left out: runs not finished (no ``done.json``, as in the table) and
    finished runs that logged no final held-out evaluation (no ``eval_task``). Runs with
    ``eval_curve_limit`` give their ``heldout_curve`` points instead (``run_learning_curve``). An evaluation
    without a numeric ``metric`` raises DataError naming the run and step.
    """
    sweep = load_sweep(folder)
    curves: dict[str, list[list[tuple[int, float]]]] = {run.label: [] for run in sweep.runs}
    for run in sweep.runs:
        curve = run_learning_curve(sweep.run_dir(run), metric) if is_done(sweep, run) else []
        if curve:
            curves[run.label].append(curve)
    return curves


def run_learning_curve(run_dir: Path, metric: str = "team_accuracy") -> list[tuple[int, float]]:
    """(step, metric) of every held-out evaluation of one run; [] when it has no final one. A run
    with ``eval_curve_limit`` logs ``heldout_curve`` (the same first N problems before training, at
    every ``eval_every`` step and after training): its curve is those points, one fixed subset."""
    rows = read_metrics(run_dir)
    if not any("heldout_final" in row for row in rows):
        return []
    subset = {int(row["step"]): _metric_of(row["heldout_curve"], metric, run_dir, row["step"])
              for row in rows if "heldout_curve" in row}
    if subset:
        return sorted(subset.items())
    points: dict[int, float] = {}
    final: tuple[int, float] | None = None
    for row in rows:
        if "heldout" in row:
            points[int(row["step"])] = _metric_of(row["heldout"], metric, run_dir, row["step"])
        if "heldout_final" in row:
            final = int(row["step"]), _metric_of(row["heldout_final"], metric, run_dir, row["step"])
    if final is None:
        return []
    points[final[0]] = final[1]
    return sorted(points.items())


def _metric_of(evaluation: Mapping[str, Any], metric: str, run_dir: Path, step: Any) -> float:
    value = evaluation.get(metric)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise DataError(f"{run_dir / 'metrics.jsonl'}: the held-out evaluation of step {step} has no numeric "
                        f"{metric!r}; pick one of {', '.join(sorted(evaluation))}")
    return float(value)


def curve_area(curve: Curve) -> float:
    """The area under ``curve`` (trapezoid rule) divided by the steps it spans: its mean value over
    training. For a curve from step 0 (every sweep curve) the divisor is the last step. A one-point
    curve gives its value; an empty one, or steps not strictly increasing, raise ValueError.

    >>> round(curve_area([(0, 0.2), (4, 0.4), (8, 0.4)]), 12)  # (0.3 * 4 + 0.4 * 4) / 8
    0.35
    """
    if not curve:
        raise ValueError("curve_area: empty curve")
    steps = [step for step, _ in curve]
    if any(b <= a for a, b in pairwise(steps)):
        raise ValueError(f"curve_area: steps must strictly increase, got {steps}")
    if len(curve) == 1:
        return float(curve[0][1])
    area = sum((s1 - s0) * (v0 + v1) / 2 for (s0, v0), (s1, v1) in pairwise(curve))
    return area / (steps[-1] - steps[0])


def has_intermediate(curves: Mapping[str, Sequence[Curve]]) -> bool:
    """Whether any curve has an evaluation strictly between step 0 and its last step."""
    return any(0 < step < curve[-1][0] for seeds in curves.values() for curve in seeds for step, _ in curve)


def area_panel(curves: Mapping[str, Sequence[Curve]], metric: str) -> str:
    """A card with the area under each grid point's curves: mean over seeds ± 95% t interval."""
    name = metric.replace("_", " ")
    rows = [[esc(label), str(len(seeds)), esc(Cell(tuple(curve_area(c) for c in seeds)).text())]
            for label, seeds in curves.items() if seeds]
    explain = note(f"Area under each seed's held-out {name} curve (trapezoid rule) divided by its last step: the "
                   f"mean held-out {name} over training. Mean over seeds ± half-width of the 95% Student-t "
                   f"interval. At equal final {name}, a larger area means the grid point learned sooner.")
    return (f'<div class="figure" id="learning-curve-areas"><h3>Area under the learning curve</h3>'
            f'{table(["grid point", "seeds", f"mean held-out {name} over training"], rows, "areas")}'
            f"{explain}</div>")


def metric_bars(results: Results, metrics: Sequence[str], out_dir: Path) -> Plot:
    """Grouped bars of final held-out role/team metrics, one colour per grid point, 95% CI whiskers."""
    key, title = "role_metrics", "Role and team metrics after training"
    if not metrics:
        return Plot(key, title, None, "no role metrics in the finished runs")
    fig, ax = plt.subplots(figsize=(max(6.4, 1.1 * len(metrics) + 2), 3.8))
    width = 0.8 / max(1, len(results.labels))
    for i, label in enumerate(results.labels):
        cells = [results.cells[label].get(m) for m in metrics]
        xs = [k + (i - (len(results.labels) - 1) / 2) * width for k in range(len(metrics))]
        ys = [c.mean if c is not None else 0.0 for c in cells]
        err = [0.0 if c is None or math.isnan(c.ci95) else c.ci95 for c in cells]
        ax.bar(xs, ys, width=width * 0.92, yerr=err, capsize=2, color=PALETTE[i % len(PALETTE)],
               label=mathtext_safe(label), error_kw={"linewidth": 0.9})
    names = [m.split("/", 1)[1].replace("role_accuracy/", "acc: ").replace("team/", "").replace("_", " ")
             for m in metrics]
    ax.set_xticks(range(len(metrics)), [mathtext_safe(n) for n in names], rotation=30, ha="right", fontsize=8)
    _style(ax, "", "rate (mean over seeds)", integer_x=False)
    ax.grid(False, axis="x")
    _legend(ax, max(len(results.labels), 2))
    return Plot(key, title, _save(fig, out_dir / f"{key}.png"),
                "Final held-out evaluation of each grid point; whiskers: 95% t interval over seeds.")


def results_table(results: Results) -> str:
    headers = ["metric", *(f"{label} (n={len(results.seeds_done[label])})" for label in results.labels)]
    rows = [[f"<code>{esc(m)}</code>", *(esc(results.cells[label][m].text()) if m in results.cells[label]
                                          else "—" for label in results.labels)] for m in results.metrics]
    return table(headers, rows, "results")


def render_sweep_page(sweep: Sweep, out_dir: Path) -> str:
    """The whole HTML page of ``sweep``, its figures drawn into ``out_dir``."""
    results = summarize(sweep)
    groups: list[tuple[str, list[RunData]]] = []
    for label in results.labels:
        runs = [load_run(sweep.run_dir(r)) for r in sweep.runs if r.label == label and is_done(sweep, r)]
        groups.append((label, runs))
    roles = list(dict.fromkeys(role for _, runs in groups for run in runs for role in run.roles))
    learning = sweep_learning_curves(sweep.folder)
    intermediate = has_intermediate(learning)
    curves = [
        band_plot(groups, out_dir, "sweep_reward", "Team reward during training", "mean team reward",
                  _step_scalar("reward_mean"), "Mean team reward of each step's rollouts; band: 95% CI over seeds."),
        learning_plot(learning, out_dir) if intermediate else
        band_plot(groups, out_dir, "sweep_heldout", "Held-out team accuracy", "accuracy", _heldout,
                  "Greedy held-out evaluations (step 0 = before training); band: 95% CI over seeds."),
    ]
    shares = [band_plot(groups, out_dir, f"sweep_share_{i}", f"Credit share of {role}", "share of Σ|advantage|",
                        _share(role), "Part of each step's learning signal this role received; band: 95% CI.")
              for i, role in enumerate(roles)]
    role_metrics = [m for m in results.metrics if m.startswith(ROLE_METRIC_PREFIXES)]
    bars = metric_bars(results, role_metrics, out_dir)
    missing = [r.name for r in sweep.runs if not is_done(sweep, r)]
    intro = note(f"{len(sweep.runs) - len(missing)} of {len(sweep.runs)} runs finished"
                 + (f"; not finished yet: {', '.join(missing)}" if missing else "")
                 + ". Each cell: mean over seeds ± half-width of the 95% Student-t interval. Two grid points "
                   "differ beyond their intervals when the intervals do not overlap.")
    grid = ", ".join(f"{k} ∈ {{{', '.join(map(str, v))}}}" for k, v in sweep.grid.items())
    sections = [
        ("results", "Results", f'<div class="panel">{intro}{results_table(results)}</div>'),
        ("curves", "Learning curves", _grid(curves, area_panel(learning, "team_accuracy") if intermediate else "")),
        ("roles", "Role metrics", _grid([bars, *shares])),
    ]
    nav = "<nav>" + "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t, _ in sections) + "</nav>"
    body = "".join(f'<section id="{a}"><h2>{esc(t)}</h2>{html}</section>' for a, t, html in sections)
    title = f"teamplay sweep · {sweep.folder.name}"
    csp = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
            f'content="{esc(csp)}"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            f'<header class="page"><h1>{esc(title)}</h1><div class="sources"><div class="source">grid '
            f"<b>{esc(grid or 'none')}</b> · seeds <b>{esc(', '.join(map(str, sweep.seeds)))}</b></div></div>"
            f"</header>{nav}<main>{body}</main></body></html>\n")


def learning_plot(curves: Mapping[str, Sequence[Curve]], out_dir: Path) -> Plot:
    """The held-out learning curves (``sweep_learning_curves``) as a figure of the page."""
    key, title = "sweep_learning_curves", "Held-out team accuracy during training"
    path = plot_learning_curves(curves, out_dir / f"{key}.png", title, "team accuracy")
    return Plot(key, title, path, "Greedy held-out evaluations before training (step 0), every eval_every steps "
                                  "and after the last step; line: mean over seeds at the steps all seeds share; "
                                  "band: 95% t interval over seeds.")


def _grid(plots: Sequence[Plot], extra: str = "") -> str:
    """Figures side by side; ``extra`` (markup built here) is one more grid item after them."""
    return f'<div class="grid">{"".join(figure(p) for p in plots)}{extra}</div>'


def sweep_report(folder: Path, out_dir: Path) -> Path:
    """Write ``out_dir/index.html`` for the sweep in ``folder``; returns its path."""
    sweep = load_sweep(folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    page = render_sweep_page(sweep, out_dir)
    path = out_dir / "index.html"
    write_atomically(path, page)
    return path
