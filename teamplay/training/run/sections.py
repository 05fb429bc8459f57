"""The run's config cut into what each part reads: the one place that turns a whole ``TrainConfig``
into the settings of the parts that outlive the wiring (the update, the run's record, the held-out
evaluations). Each part's constructor takes only these, so what a part depends on is in its
signature."""

from __future__ import annotations

from pathlib import Path

from teamplay.config import TrainConfig
from teamplay.training.learn.update import UpdateSettings
from teamplay.training.run.held_out import HeldOutSettings
from teamplay.training.store.record import RunRecord


def update_settings(cfg: TrainConfig) -> UpdateSettings:
    """The sections a policy update reads (``PolicyUpdater``)."""
    return UpdateSettings(optim=cfg.optim, objective=cfg.objective, sampling=cfg.sampling, backend=cfg.backend,
                          seed=cfg.seed)


def run_record(cfg: TrainConfig) -> RunRecord:
    """What the run's checkpoints record and a resume compares: its folder and its config as JSON."""
    return RunRecord(folder=Path(cfg.output_dir), config=cfg.model_dump(mode="json"), schema=type(cfg),
                     keep_checkpoints=cfg.keep_checkpoints)


def held_out_settings(cfg: TrainConfig, record: RunRecord) -> HeldOutSettings:
    """What the run's held-out evaluations read (``HeldOutEvaluation``), keyed by the run's ``record``
    of its config; no cache with ``model.checkpoint`` (adapters that are not fresh are not the
    untrained team)."""
    cache = None if cfg.eval_cache is None or cfg.model.checkpoint is not None else Path(cfg.eval_cache)
    return HeldOutSettings(eval_sampling=cfg.eval_sampling, sampling=cfg.sampling, seed=cfg.seed,
                           curve_limit=cfg.eval_curve_limit, samples=cfg.eval_samples,
                           withhold_messages=cfg.eval_withhold_messages, cache=cache,
                           cache_key=record.config)
