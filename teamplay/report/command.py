"""``teamplay report``: build the HTML report of a run or eval folder, or compare two of them.

    teamplay report RUN_DIR                  -> RUN_DIR/report/index.html (+ the PNGs beside it)
    teamplay report --compare RUN_A RUN_B    -> ./report-compare/index.html (or --output DIR)
    teamplay report --compare SWEEP_DIR      -> SWEEP_DIR/report/index.html: every grid point of a
                                                sweep, curves with bands over seeds (sweep_page)
    teamplay report FED_RUN [FED_RUN ...]    federated runs (`teamplay federate`): accuracy per
                                             round, bytes against accuracy (teamplay.report.federated)

The CLI wiring lives in ``teamplay/cli/inspection.py``; this module holds the whole behaviour so that it is
testable without a subprocess.
"""

from __future__ import annotations

from pathlib import Path

from teamplay.atomic import write_atomically
from teamplay.errors import TeamplayError
from teamplay.report.data import EvalData, RunData, folder_label, load_folder
from teamplay.report.federated import federated_page, is_federated
from teamplay.report.html import Figures, render_page
from teamplay.report.plots import credit_plots, eval_bars, run_plots, speak_rate_plot
from teamplay.report.sweep_page import is_sweep_folder, sweep_report
from teamplay.report.warm_start import load_warm_start, loss_plot

DEFAULT_COMPARE_DIR = Path("report-compare")
PAGE = "index.html"


def report_command(run_dirs: list[Path], compare: bool, output: Path | None) -> Path:
    """Write the report of ``run_dirs`` and return the path of its ``index.html``.

    Without ``compare``, ``run_dirs`` holds one run or eval folder and the report goes to
    ``output`` or, by default, ``RUN_DIR/report/``. With ``compare``, it holds exactly two folders
    (two runs, two evals, or one of each) shown side by side, written to ``output`` or, by default,
    ``./report-compare/`` (relative to the working directory). The output folder is created;
    files of an earlier report there are overwritten.

    Raises TeamplayError for a wrong number of folders or a folder that is neither a run nor an
    eval folder, and DataError for a malformed file (naming the file and line).
    """
    dirs = [Path(d) for d in run_dirs]
    if dirs and all(is_federated(d) for d in dirs):  # federated runs: one page, any number of runs
        default = dirs[0] / "report" if len(dirs) == 1 else DEFAULT_COMPARE_DIR
        return federated_page(dirs, Path(output) if output is not None else default)
    if compare and len(dirs) == 1 and is_sweep_folder(dirs[0]):
        return sweep_report(dirs[0], Path(output) if output is not None else dirs[0] / "report")
    if compare and len(dirs) != 2:
        raise TeamplayError(f"report --compare needs a sweep folder or exactly two run or eval folders, "
                            f"got {len(dirs)}")
    if not compare and len(dirs) == 1 and is_sweep_folder(dirs[0]):
        raise TeamplayError(f"report: {dirs[0]} is a sweep folder; use teamplay report --compare {dirs[0]} "
                            f"(or pass one of its runs/ folders)")
    if not compare and len(dirs) != 1:
        raise TeamplayError(f"report takes one run or eval folder (use --compare for two), got {len(dirs)}")
    loaded = [load_folder(d) for d in dirs]
    labels = [folder_label(d, loaded) for d in loaded]
    if compare and labels[0] == labels[1]:  # the same folder twice (or the same parent/name)
        labels = ["A: " + labels[0], "B: " + labels[1]]
    inputs = list(zip(labels, loaded, strict=True))
    if output is not None:
        out_dir = Path(output)
    elif compare:
        out_dir = DEFAULT_COMPARE_DIR
    else:
        out_dir = dirs[0] / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    if compare:
        title = f"teamplay comparison · {labels[0]} vs {labels[1]}"
    else:
        kind = "run" if isinstance(loaded[0], RunData) else "eval"
        title = f"teamplay {kind} report · {labels[0]}"
    page = render_page(title, inputs, build_figures(inputs, out_dir))
    path = out_dir / PAGE
    write_atomically(path, page)  # a browser reloading the page never sees half a file
    return path


def build_figures(inputs: list[tuple[str, RunData | EvalData]], out_dir: Path) -> Figures:
    """Draw every figure of the page into ``out_dir``."""
    runs = [(label, d) for label, d in inputs if isinstance(d, RunData)]
    evaluation = None
    if len(inputs) == 1 and isinstance(inputs[0][1], RunData):
        run = inputs[0][1]
        before, after = run.initial_heldout, run.final_heldout
        bars = [("before training", before)] if before is not None and before is not after else []
        bars += [("after training", after)] if after is not None else []
        if bars:
            evaluation = eval_bars(bars, out_dir, title="Held-out accuracy and correction")
    else:
        bars = [(label, d.metrics if isinstance(d, EvalData) else d.final_heldout) for label, d in inputs]
        if all(m is not None for _, m in bars):
            evaluation = eval_bars(bars, out_dir)
    warm = [(label, log) for label, d in runs if (log := load_warm_start(d.path)) is not None]
    return Figures(
        warm_start=loss_plot(warm, out_dir) if warm else None,
        training=run_plots(runs, out_dir) if runs else [],
        credit=credit_plots(runs, out_dir) if runs else [],
        controllers=speak_rate_plot(runs, out_dir) if runs else None,
        evaluation=evaluation,
    )
