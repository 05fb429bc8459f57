"""The report of federated runs (`teamplay federate`): accuracy per round, bytes against accuracy.

    teamplay report RUN [RUN ...]    each RUN a federated run folder (one per strategy, say)

Reads each run's ``federated.jsonl`` and ``config.yaml``; labels a run by its folder name and
strategy. Two figures (one line or point series per run) and a table per round: held-out accuracy
of the global team, bytes uploaded (per round and cumulative), compression ratio, aggregation
weights per site and sites left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape as esc
from pathlib import Path
from typing import Any

from teamplay.atomic import write_atomically
from teamplay.errors import DataError
from teamplay.report.plots import DPI, FIGSIZE, PALETTE, Plot, _legend, _save, _style, mathtext_safe, plt

LOG = "federated.jsonl"


@dataclass(frozen=True)
class FederatedRun:
    """One federated run: its label and round records (round 0 = held-out before training)."""

    label: str
    rounds: list[dict[str, Any]]


def is_federated(folder: Path) -> bool:
    return (Path(folder) / LOG).is_file()


def load_federated(folder: Path) -> FederatedRun:
    """Read a federated run folder; a malformed line is a DataError naming file and line."""
    from teamplay.config import read_yaml

    folder = Path(folder)
    records = []
    for number, line in enumerate((folder / LOG).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            int(record["round"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise DataError(f"{folder / LOG} line {number}: not a federated round record") from None
        records.append(record)
    strategy = ""
    if (folder / "config.yaml").is_file():
        fed = read_yaml(folder / "config.yaml").get("federated") or {}
        strategy = str(fed.get("strategy", ""))
        if strategy == "fedgrpo":
            budget = (fed.get("fedgrpo") or {}).get("budget", 1.0)
            sparse = (fed.get("fedgrpo") or {}).get("sparse", True)
            strategy += f" B={budget:.0%}" if sparse and budget < 1 else ""
    label = f"{folder.resolve().name} ({strategy})" if strategy else folder.resolve().name
    return FederatedRun(label, sorted(records, key=lambda r: r["round"]))


def _accuracy(record: dict[str, Any]) -> float | None:
    return (record.get("heldout") or {}).get("team_accuracy")


def accuracy_plot(runs: list[FederatedRun], out_dir: Path) -> Plot:
    title = "Held-out accuracy of the global team per round"
    fig, ax, drawn = _curves(runs, lambda run: [(r["round"], _accuracy(r)) for r in run.rounds
                                                 if _accuracy(r) is not None])
    if not drawn:
        plt.close(fig)
        return Plot("fed_accuracy", title, None, "no held-out evaluation in these runs (no eval_task)")
    _style(ax, "round", "team accuracy")
    _legend(ax, drawn)
    return Plot("fed_accuracy", title, _save(fig, out_dir / "fed_accuracy.png"), "Round 0: before training.")


def _curves(runs: list[FederatedRun], points_of):
    """One line per run through ``points_of(run)`` [(x, y)]; returns the figure, axes and how many
    runs had points."""
    fig, ax = plt.subplots(figsize=FIGSIZE, dpi=DPI)
    drawn = 0
    for i, run in enumerate(runs):
        points = points_of(run)
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", color=PALETTE[i % len(PALETTE)], label=mathtext_safe(run.label))
            drawn += 1
    return fig, ax, drawn


def bytes_plot(runs: list[FederatedRun], out_dir: Path) -> Plot:
    title = "Held-out accuracy against bytes uploaded (cumulative)"

    def points(run: FederatedRun) -> list[tuple[float, float]]:
        total, out = 0, []
        for r in run.rounds:
            total += r.get("bytes_total", 0)
            if _accuracy(r) is not None:
                out.append((total / 1e6, _accuracy(r)))
        return out

    fig, ax, drawn = _curves(runs, points)
    if not drawn:
        plt.close(fig)
        return Plot("fed_bytes", title, None, "no held-out evaluation in these runs (no eval_task)")
    _style(ax, "MB uploaded by all sites so far", "team accuracy", integer_x=False)
    _legend(ax, drawn)
    return Plot("fed_bytes", title, _save(fig, out_dir / "fed_bytes.png"), "One point per round.")


def round_table(run: FederatedRun) -> str:
    head = ("<tr><th>round</th><th>accuracy</th><th>bytes</th><th>compression</th>"
            "<th>weights (site: w)</th><th>failed</th><th>refused</th></tr>")
    rows = []
    for r in run.rounds:
        acc = _accuracy(r)
        weights = ", ".join(f"{s}: {v['weight']:.2f}" for s, v in sorted(r.get("sites", {}).items()))
        comp = r.get("compression")
        rows.append(f"<tr><td>{r['round']}</td><td>{'-' if acc is None else f'{acc:.3f}'}</td>"
                    f"<td>{r.get('bytes_total', 0):,}</td><td>{'-' if comp is None else f'{comp:.1f}x'}</td>"
                    f"<td>{esc(weights)}</td><td>{len(r.get('failed', []))}</td>"
                    f"<td>{len(r.get('refused', []))}</td></tr>")
    return f"<h3>{esc(run.label)}</h3><table>{head}{''.join(rows)}</table>"


def federated_page(run_dirs: list[Path], out_dir: Path) -> Path:
    """Write ``out_dir/index.html`` for federated runs; returns its path."""
    from teamplay.report.html import figure

    runs = [load_federated(d) for d in run_dirs]
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = [accuracy_plot(runs, out_dir), bytes_plot(runs, out_dir)]
    title = "teamplay federated report · " + ", ".join(run.label for run in runs)
    style = ("body{font-family:system-ui,sans-serif;margin:24px;color:#111827} table{border-collapse:collapse;"
             "margin-bottom:18px} td,th{border:1px solid #e5e7eb;padding:4px 10px;text-align:right} "
             "figure{display:inline-block;margin:0 18px 18px 0} img{max-width:100%}")
    body = "".join(figure(p) for p in plots) + "".join(round_table(run) for run in runs)
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; "
            f"style-src 'unsafe-inline'\"><style>{style}</style></head><body><h1>{esc(title)}</h1>{body}"
            f"</body></html>")
    path = out_dir / "index.html"
    write_atomically(path, page)
    return path
