"""Run reports: ``teamplay report RUN_DIR`` and ``teamplay report --compare A B``.

One self-contained HTML page (inline CSS/JS, figures as data URIs) per run or eval folder, with
training curves, credit per role, free riders, controller speak rates, evaluation metrics and a
transcript browser whose utterances are shaded by their advantage.

Modules: ``data`` (loading folders into typed records), ``analysis`` (free riders, shading),
``plots`` (matplotlib PNGs), ``transcripts`` and ``html`` (the page), ``command`` (the CLI entry).
"""

from teamplay.report.command import report_command
from teamplay.report.data import EvalData, LoggedEpisode, RunData, StepMetrics, load_folder

__all__ = ["EvalData", "LoggedEpisode", "RunData", "StepMetrics", "load_folder", "report_command"]
