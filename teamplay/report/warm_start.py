"""A run's warm start in its report: ``RUN/warm_start/metrics.jsonl`` read back (the fine-tuning
set, the loss per step, the held-out evaluations before and after;
``teamplay.training.run.warm_start``) and its loss curve."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from teamplay.report.data import _eval_metrics, _read_jsonl
from teamplay.report.plots import FIGSIZE, PALETTE, Plot, _finished, _marker, mathtext_safe
from teamplay.training.play.evaluation import EvalMetrics
from teamplay.training.run.warm_start import WARM_DIR


@dataclass(frozen=True)
class WarmStartLog:
    """A run's warm start as logged.

    Fields:
        dataset: the step-0 line's description of the fine-tuning set (``episodes``, ``kept``,
            ``examples``, ``examples_by_role``, ``reward_played``, ``reward_kept``).
        losses: ``(step, mean NLL)`` of each step logged, in step order.
        before, after: the held-out evaluations (None where none was logged).
    """

    dataset: Mapping[str, Any]
    losses: tuple[tuple[int, float], ...]
    before: EvalMetrics | None
    after: EvalMetrics | None


def load_warm_start(run_dir: Path) -> WarmStartLog | None:
    """The warm start of the run folder ``run_dir``; None when it had none. A malformed line is a
    ``DataError`` naming the file and line (a torn last line is dropped with a warning)."""
    path = Path(run_dir) / WARM_DIR / "metrics.jsonl"
    if not path.is_file():
        return None
    dataset: dict[str, Any] = {}
    losses: list[tuple[int, float]] = []
    before = after = None
    for number, row in _read_jsonl(path):
        where = f"{path}:{number}"
        if row.get("step") == 0:
            dataset = {k: v for k, v in row.items() if k not in ("step", "heldout")}
            before = _eval_metrics(row["heldout"], where) if "heldout" in row else before
        if isinstance(row.get("loss"), (int, float)):
            losses.append((int(row["step"]), float(row["loss"])))
        if "heldout_final" in row:
            after = _eval_metrics(row["heldout_final"], where)
    return WarmStartLog(dataset, tuple(sorted(losses)), before, after)


def loss_plot(runs: Sequence[tuple[str, WarmStartLog]], out_dir: Path) -> Plot:
    """The warm start's loss (mean NLL per completion token of a message) by step, one curve per run."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    drawn = 0
    for i, (label, log) in enumerate(runs):
        if not log.losses:
            continue
        xs, ys = [s for s, _ in log.losses], [v for _, v in log.losses]
        ax.plot(xs, ys, color=PALETTE[i % len(PALETTE)], marker=_marker(len(xs)), markersize=3.5, linewidth=1.8,
                label=mathtext_safe(label))
        drawn += 1
    return _finished(fig, ax, drawn, "warm_start_loss", "Warm start: fine-tuning loss", out_dir,
                     ("warm-start step", "NLL per token"),
                     "Negative log-likelihood of each role's own completion tokens (prompt and other roles masked).",
                     "no warm-start step logged yet")
