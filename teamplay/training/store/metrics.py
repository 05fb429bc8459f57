"""Metrics of a run: one JSON line per step in ``metrics.jsonl``, mirrored to TensorBoard/wandb.

On resume, lines of steps after the checkpoint are dropped so the file never holds a step twice;
that rewrite replaces the file atomically, so a kill during it loses no history.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from teamplay.atomic import write_atomically

#: per-step counters of generated tokens: the episodes' own (``tokens``) and the counterfactual ones
#: that are not in them (controllers valuing an unchosen speak; the replay engine's re-executions,
#: which serve shapley's replay characteristic function and continuation credit; the generative
#: judge's replies, which serve shapley's judge characteristic function)
BUDGET_KEYS = ("tokens", "counterfactual_tokens", "replay_tokens", "judge_tokens")


def generated_tokens(metrics: dict[str, Any]) -> int:
    """Every token one step generated (the sum of its ``BUDGET_KEYS`` counters): the unit of
    ``token_budget`` and of the sweep table's ``budget/generated_tokens``."""
    return int(sum(int(metrics.get(key, 0) or 0) for key in BUDGET_KEYS))


class MetricsLogger:
    """Appends ``{"step": s, **metrics}`` lines; scalar metrics also go to TensorBoard/wandb."""

    def __init__(self, run_dir: Path, tensorboard: bool = True, wandb_project: str | None = None,
                 config: dict[str, Any] | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.episodes_path = run_dir / "episodes.jsonl"
        self._tb = None
        self._wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        if wandb_project:
            try:
                import wandb
            except ImportError:
                from teamplay.errors import ConfigError

                raise ConfigError("wandb_project is set but wandb is not installed: "
                                  "pip install 'teamplay[wandb]'") from None
            self._wandb = wandb.init(project=wandb_project, dir=str(run_dir), config=config, resume="allow")

    def truncate_after(self, step: int) -> None:
        """Drop lines of steps > ``step`` (their work was lost with the interrupted process)."""
        for path in (self.path, self.episodes_path):
            if not path.exists():
                continue
            kept = [line for line in path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and _step_of(line) <= step]
            write_atomically(path, "".join(line + "\n" for line in kept))

    def log_episodes(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Append credited episodes (``Episode.to_dict()`` plus ``advantages``) of ``step``."""
        with self.episodes_path.open("a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps({"step": step, **row}, ensure_ascii=False, default=float) + "\n")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, **metrics}, default=float) + "\n")
        for key, value in _flatten(metrics).items():
            if self._tb is not None:
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(_flatten(metrics), step=step)
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _step_of(line: str) -> float:
    try:
        return int(json.loads(line).get("step", 0))
    except (ValueError, AttributeError):
        return math.inf  # a torn last line from a killed process: never kept


def _flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    flat: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, prefix=f"{name}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            flat[name] = float(value)
    return flat


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
