"""Matplotlib figures of a report, written as PNG files.

Every function takes one or more labelled inputs (one for a report, two for ``--compare``) and
returns a ``Plot``: the PNG it wrote, or no file and a note saying why there was nothing to draw
(a run without KL, without held-out evaluation, ...). Inputs of a comparison share the axes, one
colour per input; with a single input, colours distinguish series (roles, metrics) instead.

Matplotlib is used headless (the Agg backend is selected explicitly, never from the environment).
Labels that come from user data (role and agent names) are escaped for mathtext, so a role named
``$x`` cannot make matplotlib fail to parse a legend. Every PNG is replaced atomically: a reader
(or a report built while a sweep rewrites its figures) never sees half a file.
"""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # never open a window; the report is built on servers and in CI

import matplotlib.pyplot as plt  # noqa: E402  (must follow the backend choice)
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from teamplay.atomic import write_atomically  # noqa: E402
from teamplay.report.analysis import FREE_RIDER_THRESHOLD, agent_credit  # noqa: E402
from teamplay.report.data import RunData, StepMetrics  # noqa: E402
from teamplay.training.experiments.sweep import t_quantile_975  # noqa: E402
from teamplay.training.play.evaluation import EvalMetrics  # noqa: E402

# Colour-blind-safe palette (Okabe-Ito), first two used for run A and run B of a comparison.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
LINESTYLES = ("-", "--", ":", "-.")
FIGSIZE = (6.4, 3.5)
DPI = 110

RunSeries = Sequence[tuple[str, RunData]]
#: a learning curve: [(step, value)] in increasing step order
Curve = Sequence[tuple[int, float]]


@dataclass(frozen=True)
class Plot:
    """One figure of the report.

    Fields:
        key: file stem, unique in a report (``reward`` -> ``reward.png``); also the HTML anchor.
        title: heading shown above the figure.
        path: the PNG written, or None when there was nothing to draw.
        note: a caption saying what is drawn, or why nothing was (shown instead of the image).
    """

    key: str
    title: str
    path: Path | None
    note: str


def mathtext_safe(label: str) -> str:
    """``label`` with ``$`` escaped so matplotlib shows it literally instead of parsing mathtext."""
    return label.replace("$", r"\$")


def _style(ax: Axes, xlabel: str, ylabel: str, integer_x: bool = True) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(True, color="#e5e7eb", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.set_xlabel(xlabel, color="#374151")
    ax.set_ylabel(ylabel, color="#374151")
    ax.tick_params(colors="#4b5563", labelsize=9)
    if integer_x:  # steps are integers: no 1.5 ticks on a 5-step run
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _save(fig, path: Path) -> Path:
    """Write ``fig`` to ``path`` as PNG (atomically) and close it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, dpi=DPI, format="png", metadata={"Software": None})
    plt.close(fig)
    write_atomically(path, buf.getvalue())
    return path


def _marker(n_points: int) -> str | None:
    """Markers make short series (one step, a few evaluations) visible; long ones stay clean."""
    return "o" if n_points <= 30 else None


def _legend(ax: Axes, n_series: int) -> None:
    """A legend above the axes (never over the data), for two series or more."""
    if n_series > 1:
        labels = ax.get_legend_handles_labels()[1]
        columns = 2 if max((len(text) for text in labels), default=0) > 18 else 4  # long labels: fewer columns
        ax.legend(frameon=False, fontsize=8, ncols=min(columns, n_series), loc="lower left",
                  bbox_to_anchor=(0.0, 1.0), borderaxespad=0.2, handlelength=1.8)


def _finished(fig, ax: Axes, drawn: int, key: str, title: str, out_dir: Path, axis_labels: tuple[str, str],
              note: str, empty: str, legend_at_least: int = 1) -> Plot:
    """The ``Plot`` of a figure of ``drawn`` series: no image and the ``empty`` note when nothing was
    drawn, else the figure styled (``axis_labels``: x and y), with a legend for two series or more
    (at least ``legend_at_least``), saved as ``out_dir/KEY.png`` and shown with ``note``."""
    if not drawn:
        plt.close(fig)
        return Plot(key, title, None, empty)
    _style(ax, *axis_labels)
    _legend(ax, max(drawn, legend_at_least))
    return Plot(key, title, _save(fig, out_dir / f"{key}.png"), note)


def _steps_with(run: RunData, name: str) -> tuple[list[int], list[float]]:
    xs = [s.step for s in run.steps if s.get(name) is not None]
    return xs, [float(s.scalars[name]) for s in run.steps if s.get(name) is not None]


def scalar_plot(runs: RunSeries, out_dir: Path, key: str, title: str, series: Sequence[tuple[str, str]],
                ylabel: str, missing: str, band: Callable[[StepMetrics], float | None] | None = None) -> Plot:
    """Step curves of the scalar metrics ``series`` ([(metric, legend label)]) of each run.

    ``band`` (optional) gives a half-width drawn around the first series (e.g. reward_std).
    With several runs, run i gets colour i and metric j gets linestyle j.
    """
    fig, ax = plt.subplots(figsize=FIGSIZE)
    drawn = 0
    for i, (label, run) in enumerate(runs):
        for j, (metric, metric_label) in enumerate(series):
            xs, ys = _steps_with(run, metric)
            if not xs:
                continue
            color = PALETTE[i] if len(runs) > 1 else PALETTE[j]
            name = metric_label if len(runs) == 1 else f"{label} · {metric_label}"
            ax.plot(xs, ys, color=color, linestyle=LINESTYLES[j % len(LINESTYLES)] if len(runs) > 1 else "-",
                    marker=_marker(len(xs)), markersize=3.5, linewidth=1.8, label=mathtext_safe(name))
            if band is not None and j == 0:
                widths = [band(s) for s in run.steps if s.get(metric) is not None]
                if all(w is not None for w in widths):
                    ax.fill_between(xs, [y - w for y, w in zip(ys, widths, strict=True)],
                                    [y + w for y, w in zip(ys, widths, strict=True)], color=color, alpha=0.12,
                                    linewidth=0)
            drawn += 1
    return _finished(fig, ax, drawn, key, title, out_dir, ("training step", ylabel), "", missing)


def reward_plot(runs: RunSeries, out_dir: Path) -> Plot:
    """Team reward per step (mean over the step's episodes, band = one std) and accuracy."""
    plot = scalar_plot(runs, out_dir, "reward", "Team reward", [("reward_mean", "reward mean"),
                                                                ("accuracy", "accuracy (reward > 0.5)")],
                       "reward", "no training step logged yet", band=lambda s: s.get("reward_std"))
    return _with_note(plot, "Mean team reward of the step's rollouts (band: ± one standard deviation) and "
                            "the fraction of episodes with reward > 0.5.")


def kl_plot(runs: RunSeries, out_dir: Path) -> Plot:
    plot = scalar_plot(runs, out_dir, "kl", "KL to the base model", [("kl", "KL")], "KL (per token)",
                       "KL was not computed in this run (objective.kl_beta = 0, or GSPO)")
    return _with_note(plot, "Mean per-token KL estimate between the adapters and the base model.")


def clip_plot(runs: RunSeries, out_dir: Path) -> Plot:
    """Clip fraction over all epochs; with one run, also each epoch's own clip fraction."""
    series = [("clip_fraction", "all epochs")]
    if len(runs) == 1:
        epochs = sorted({k for s in runs[0][1].steps for k in s.scalars if k.startswith("clip_fraction_epoch")},
                        key=lambda k: int(k.removeprefix("clip_fraction_epoch") or 0))
        if len(epochs) > 1:
            series += [(k, f"epoch {k.removeprefix('clip_fraction_epoch')}") for k in epochs]
    plot = scalar_plot(runs, out_dir, "clip", "Clip fraction", series, "fraction of tokens clipped",
                       "no optimiser update was logged (every group had equal rewards?)")
    return _with_note(plot, "Fraction of completion tokens whose ratio hit the clip range; it grows with "
                            "later epochs as the policy moves away from the one that sampled the rollouts.")


def ranges_plot(runs: RunSeries, out_dir: Path) -> Plot:
    """The smallest and largest team reward and advantage of each step."""
    plot = scalar_plot(runs, out_dir, "ranges", "Reward and advantage ranges",
                       [("reward_min", "reward min"), ("reward_max", "reward max"),
                        ("adv_min", "advantage min"), ("adv_max", "advantage max")], "value",
                       "no ranges were logged (a run from before teamplay logged them)")
    return _with_note(plot, "Smallest and largest team reward and per-message advantage of each step: a "
                            "blow-up shows here before it turns into NaN. Updates skipped for a non-finite "
                            "loss or gradient are counted in metrics.jsonl (skipped_nonfinite_steps).")


def tokens_plot(runs: RunSeries, out_dir: Path) -> Plot:
    plot = scalar_plot(runs, out_dir, "tokens", "Tokens per step", [("tokens", "completion tokens")],
                       "tokens", "no training step logged yet")
    return _with_note(plot, "Completion tokens generated by all agents in the step's rollouts (prompt "
                            "tokens excluded): the cost of a step.")


def heldout_plot(runs: RunSeries, out_dir: Path) -> Plot:
    """Held-out team accuracy at every evaluation (step 0 = before training; the final one is a
    larger marker) and the fraction of problems any agent got right."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    drawn = 0
    for i, (label, run) in enumerate(runs):
        if not run.heldout:
            continue
        xs = [h.step for h in run.heldout]
        for j, (name, metric_label) in enumerate((("team_accuracy", "team accuracy"),
                                                  ("any_agent_right", "any agent right"))):
            color = PALETTE[i] if len(runs) > 1 else PALETTE[j]
            ys = [getattr(h.metrics, name) for h in run.heldout]
            legend = metric_label if len(runs) == 1 else f"{label} · {metric_label}"
            ax.plot(xs, ys, color=color, linestyle=LINESTYLES[j], marker="o", markersize=4, linewidth=1.8,
                    label=mathtext_safe(legend))
            finals = [(h.step, getattr(h.metrics, name)) for h in run.heldout if h.final]
            if finals:
                ax.plot(*zip(*finals, strict=True), color=color, marker="*", markersize=11, linestyle="none")
            drawn += 1
    ax.set_ylim(-0.03, 1.03)
    return _finished(fig, ax, drawn, "heldout", "Held-out accuracy", out_dir,
                     ("training step (0 = before training, ★ = final)", "accuracy"),
                     "Greedy held-out evaluation: team accuracy and the fraction of problems where at least "
                     "one agent's last answer was right (the headroom a better final-answer rule could use).",
                     "no held-out evaluation in this run (eval_task is not set)")


def _role_plot(runs: RunSeries, out_dir: Path, key: str, title: str, field: str, ylabel: str,
               stacked: bool) -> Plot:
    """One line per role of ``field`` (credit_share or adv_mean); stacked areas for one run when
    ``stacked`` (credit shares sum to 1 per step)."""
    roles: dict[str, None] = {}
    for _, run in runs:
        roles.update(dict.fromkeys(run.roles))
    fig, ax = plt.subplots(figsize=FIGSIZE)
    drawn = 0
    if stacked and len(runs) == 1:
        run = runs[0][1]
        steps = [s for s in run.steps if getattr(s, field)]
        if steps:
            xs = [s.step for s in steps]
            ys = [[getattr(s, field).get(r, 0.0) for s in steps] for r in roles]
            if len(xs) == 1:  # an area needs two x values: draw the single step as a stacked bar
                bottom = 0.0
                for k, role in enumerate(roles):
                    ax.bar(xs, [ys[k][0]], bottom=bottom, color=PALETTE[k % len(PALETTE)], width=0.6,
                           label=mathtext_safe(role))
                    bottom += ys[k][0]
            else:
                ax.stackplot(xs, ys, labels=[mathtext_safe(r) for r in roles],
                             colors=[PALETTE[k % len(PALETTE)] for k in range(len(roles))], alpha=0.85)
            ax.set_ylim(0, 1)
            drawn = len(roles)
    else:
        for i, (label, run) in enumerate(runs):
            for k, role in enumerate(roles):
                steps = [s for s in run.steps if role in getattr(s, field)]
                if not steps:
                    continue
                xs = [s.step for s in steps]
                ys = [getattr(s, field)[role] for s in steps]
                name = role if len(runs) == 1 else f"{label} · {role}"
                ax.plot(xs, ys, color=PALETTE[k % len(PALETTE)], linestyle=LINESTYLES[i % len(LINESTYLES)],
                        marker=_marker(len(xs)), markersize=3.5, linewidth=1.8, label=mathtext_safe(name))
                drawn += 1
        if field == "adv_mean" and drawn:
            ax.axhline(0.0, color="#9ca3af", linewidth=0.8)
    return _finished(fig, ax, drawn, key, title, out_dir, ("training step", ylabel), "",
                     "no credited step yet (every group had equal rewards, or no step ran)", legend_at_least=2)


def credit_share_plot(runs: RunSeries, out_dir: Path) -> Plot:
    plot = _role_plot(runs, out_dir, "credit_share", "Credit share per role", "credit_share",
                      "share of Σ|advantage|", stacked=True)
    return _with_note(plot, "Part of the step's learning signal each role received: Σ|advantage| of the "
                            "role's messages / Σ|advantage| of all messages (shares sum to 1).")


def adv_mean_plot(runs: RunSeries, out_dir: Path) -> Plot:
    plot = _role_plot(runs, out_dir, "adv_mean", "Mean advantage per role", "adv_mean", "mean advantage",
                      stacked=False)
    return _with_note(plot, "Mean advantage of each role's messages in the credited groups of the step.")


def speak_rate_plot(runs: RunSeries, out_dir: Path) -> Plot:
    """Speak rate of each speak/skip controller over steps (lines per controller key)."""
    key, title = "speak_rate", "Controller speak rates"
    keys: dict[str, None] = {}
    for _, run in runs:
        for s in run.steps:
            keys.update(dict.fromkeys(s.speak_rate))
    if not keys:
        return Plot(key, title, None, "no controllers: this run logged no speak rates")
    fig, ax = plt.subplots(figsize=FIGSIZE)
    drawn = 0
    for i, (label, run) in enumerate(runs):
        for k, name in enumerate(keys):
            steps = [s for s in run.steps if name in s.speak_rate]
            if not steps:
                continue
            legend = name if len(runs) == 1 else f"{label} · {name}"
            ax.plot([s.step for s in steps], [s.speak_rate[name] for s in steps], color=PALETTE[k % len(PALETTE)],
                    linestyle=LINESTYLES[i % len(LINESTYLES)], marker=_marker(len(steps)), markersize=3.5,
                    linewidth=1.8, label=mathtext_safe(legend))
            drawn += 1
    ax.set_ylim(-0.03, 1.03)
    _style(ax, "training step", "fraction of turns spoken")
    _legend(ax, max(drawn, 2))
    return Plot(key, title, _save(fig, out_dir / f"{key}.png"),
                "Fraction of its turns each speak/skip controller chose to speak.")


def agent_credit_plot(runs: RunSeries, out_dir: Path) -> Plot:
    """Mean advantage of each agent's messages in logged episodes the team got right (green) and
    wrong (red), with the free-rider band |mean| < threshold shaded: a free rider's green bar
    stays inside the band."""
    key, title = "agent_credit", "Credit per agent: team right vs wrong"
    bars = [(agent if len(runs) == 1 else f"{label}\n{agent}", a)
            for label, run in runs for a in agent_credit(run.episodes) for agent in [a.agent]]
    if not bars:
        return Plot(key, title, None, "no credited episodes were logged")
    fig, ax = plt.subplots(figsize=FIGSIZE)
    xs = range(len(bars))
    ax.axhspan(-FREE_RIDER_THRESHOLD, FREE_RIDER_THRESHOLD, color="#fde68a", alpha=0.6, linewidth=0,
               label=f"|mean| < {FREE_RIDER_THRESHOLD} (free rider band)")
    for offset, name, color, attr in ((-0.2, "team right", "#16a34a", "mean_success"),
                                      (0.2, "team wrong", "#dc2626", "mean_failure")):
        values = [getattr(a, attr) for _, a in bars]
        ax.bar([x + offset for x, v in zip(xs, values, strict=True) if v is not None],
               [v for v in values if v is not None], width=0.38, color=color, label=name)
    ax.axhline(0.0, color="#6b7280", linewidth=0.8)
    ax.set_xticks(list(xs), [mathtext_safe(name) for name, _ in bars], fontsize=8)
    _style(ax, "", "mean advantage of its messages", integer_x=False)
    ax.grid(False, axis="x")
    _legend(ax, 3)
    return Plot(key, title, _save(fig, out_dir / f"{key}.png"),
                "Over the logged (credited) episodes. An agent whose green bar stays in the band got no "
                "credit while its team succeeded.")


RATE_METRICS = (("team_accuracy", "team\naccuracy"), ("any_agent_right", "any agent\nright"),
                ("initial_accuracy", "initial\naccuracy"), ("wrong_to_right", "wrong →\nright"),
                ("right_to_wrong", "right →\nwrong"))


def eval_bars(inputs: Sequence[tuple[str, EvalMetrics]], out_dir: Path, key: str = "eval_accuracy",
              title: str = "Accuracy and correction") -> Plot:
    """Grouped bars of the rate metrics (accuracy and correction) of each labelled evaluation."""
    if not inputs:
        return Plot(key, title, None, "no evaluation to show")
    fig, ax = plt.subplots(figsize=FIGSIZE)
    width = 0.8 / len(inputs)
    for i, (label, metrics) in enumerate(inputs):
        xs = [k + (i - (len(inputs) - 1) / 2) * width for k in range(len(RATE_METRICS))]
        ys = [getattr(metrics, name) for name, _ in RATE_METRICS]
        bars = ax.bar(xs, ys, width=width * 0.92, color=PALETTE[i % len(PALETTE)], label=mathtext_safe(label))
        ax.bar_label(bars, labels=[f"{y:.2f}" for y in ys], fontsize=7, padding=2, color="#374151")
    ax.set_xticks(range(len(RATE_METRICS)), [text for _, text in RATE_METRICS])
    ax.set_ylim(0, 1.12)
    _style(ax, "", "fraction of problems", integer_x=False)
    ax.grid(False, axis="x")
    _legend(ax, max(len(inputs), 2) if len(inputs) > 1 else 1)
    return Plot(key, title, _save(fig, out_dir / f"{key}.png"),
                "Team accuracy, the fraction where any agent was right, the accuracy after the first round, "
                "and how often review or debate turned a wrong answer right (or a right one wrong).")


def learning_curve_band(curves: Sequence[Curve]) -> tuple[list[int], list[float], list[float]]:
    """Steps, mean and 95% half-width over the seeds' ``curves`` (one curve per seed, n >= 1).

    Only the steps every curve has are kept (seeds evaluated on the same schedule share all their
    steps; a seed stopped early by ``token_budget`` ends the shared part). At each kept step the
    mean over the n seeds and the half-width ``t_{0.975, n-1} * sd / sqrt(n)`` of its two-sided
    95% Student-t interval (sample sd, ddof=1); the half-width is 0 with one seed (no interval).
    """
    tables = [dict(curve) for curve in curves]
    steps = sorted(set.intersection(*(set(t) for t in tables)))
    n = len(tables)
    quantile = t_quantile_975(n - 1) if n > 1 else 0.0  # once per band: the quantile is slow to compute
    means, widths = [], []
    for step in steps:
        values = [t[step] for t in tables]
        means.append(statistics.fmean(values))
        widths.append(quantile * statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0)
    return steps, means, widths


def plot_learning_curves(curves: Mapping[str, Sequence[Curve]], path: Path, title: str, ylabel: str) -> Path:
    """Draw one line per label of ``curves`` ({label: one curve per seed}) and write it to ``path``.

    Each line is the mean over the label's seeds at the steps they all share, shaded with the
    two-sided 95% Student-t interval of that mean (``learning_curve_band``; no band with one seed).
    Label i keeps colour i of ``PALETTE`` even when an earlier label has nothing to draw. Empty
    curves are ignored; a label left with none, or whose seeds share no step, is not drawn.
    Returns ``path`` (a PNG, replaced atomically); raises ValueError when no label can be drawn.
    """
    fig, ax = plt.subplots(figsize=FIGSIZE)
    drawn = 0
    for i, (label, seeds) in enumerate(curves.items()):
        seeds = [curve for curve in seeds if curve]
        xs, ys, ws = learning_curve_band(seeds) if seeds else ([], [], [])
        if not xs:
            continue
        color = PALETTE[i % len(PALETTE)]
        ax.plot(xs, ys, color=color, marker=_marker(len(xs)), markersize=3.5, linewidth=1.8,
                label=mathtext_safe(f"{label} (n={len(seeds)})"))
        if len(seeds) > 1:
            ax.fill_between(xs, [y - w for y, w in zip(ys, ws, strict=True)],
                            [y + w for y, w in zip(ys, ws, strict=True)], color=color, alpha=0.15, linewidth=0)
        drawn += 1
    if not drawn:
        plt.close(fig)
        raise ValueError(f"plot_learning_curves: nothing to draw for {path} (no label has a curve)")
    fig.suptitle(mathtext_safe(title), fontsize=11, color="#111827")
    _style(ax, "training step (0 = before training)", mathtext_safe(ylabel))
    _legend(ax, max(drawn, 2))  # a legend even for one label: it carries the seed count
    return _save(fig, Path(path))


def run_plots(runs: RunSeries, out_dir: Path) -> list[Plot]:
    """All training figures of one run (or of runs overlaid), in the order the report shows them."""
    return [reward_plot(runs, out_dir), heldout_plot(runs, out_dir), kl_plot(runs, out_dir),
            clip_plot(runs, out_dir), ranges_plot(runs, out_dir), tokens_plot(runs, out_dir)]


def credit_plots(runs: RunSeries, out_dir: Path) -> list[Plot]:
    """The credit figures: credit share and mean advantage per role over steps, credit per agent."""
    return [credit_share_plot(runs, out_dir), adv_mean_plot(runs, out_dir), agent_credit_plot(runs, out_dir)]


def _with_note(plot: Plot, note: str) -> Plot:
    """``plot`` with its caption set, unless it carries the reason nothing was drawn."""
    return Plot(plot.key, plot.title, plot.path, note) if plot.path is not None else plot
