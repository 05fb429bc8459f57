"""``teamplay sft``: the warm start of ``teamplay train`` alone (the ``warm_start`` section,
``teamplay.training.run.warm_start``), into ``RUN/warm_start``.

A later ``teamplay train`` with the same config and run folder finds the warm start finished and
starts its RL steps from those adapters; ``model.checkpoint: RUN/warm_start`` starts any other run
from them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import typer

from teamplay.cli.app import ConfigOpt, RunFolderOpt, SetOpt, command, console, err_console, shortcut_overrides
from teamplay.cli.progress import TrainProgress
from teamplay.cli.tables import held_out_table
from teamplay.config import TrainConfig, build_config, read_yaml


@command("sft")
def sft_command(
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    output: str | None = RunFolderOpt,
    source: str | None = typer.Option(None, help="teacher (the protocol's scripted teachers) or rejection (the "
                                                 "team's own episodes that pass warm_start.threshold)."),
    steps: int | None = typer.Option(None, help="Optimiser steps (warm_start.steps)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete the run folder's warm start (its episodes, "
                                                              "metrics and checkpoints) and start anew."),
) -> None:
    """Warm-start a team before RL: fine-tune each role's adapter on its own messages.

    The messages are a teacher team's or the team's own rewarded episodes (the config's warm_start
    section); a warm start continues its own checkpoint, into RUN/warm_start."""
    from teamplay.distributed.compose import make_trainer
    from teamplay.training.run.preemption import preemption_handlers
    from teamplay.training.run.warm_start import WARM_DIR
    from teamplay.training.store.run_folder import RunLock

    data = read_yaml(config) if config else {}
    data.setdefault("warm_start", {})  # a config without the section: its defaults
    overrides = shortcut_overrides(**{"output_dir": output, "warm_start.source": source,
                                      "warm_start.steps": steps}) + list(set_)
    cfg = build_config(TrainConfig, data, overrides)
    run_dir = Path(cfg.output_dir)
    if run_dir.exists() and not run_dir.is_dir():
        from teamplay.training.store.run_folder import RunFolderError

        raise RunFolderError(f"output {run_dir} is a file, not a folder; pass a folder as --output")
    run_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(run_dir):  # one trainer at a time, a warm start's too
        if overwrite:
            shutil.rmtree(run_dir / WARM_DIR, ignore_errors=True)
        # a bar on a terminal, else a line per step and per held-out batch
        progress = TrainProgress(err_console, cfg.warm_start.steps, name="sft")
        trainer = make_trainer(cfg, on_eval=progress.evaluation, on_eval_batch=progress.eval_batch)
        try:
            assert trainer.warm_start is not None
            with preemption_handlers() as preemption, progress:
                result = trainer.warm_start.run(trainer.items, trainer.eval_items, preemption.check, preemption,
                                                on_step=progress.step)
        finally:
            trainer.close()
    if result.cached:
        console.print(f"the warm start was finished by a run with the same settings: copied from "
                      f"{cfg.warm_start.cache} into {result.folder} ({result.steps} steps)")
        return
    if not result.ran:
        console.print(f"the warm start in {result.folder} is finished ({result.steps} steps); nothing to do")
        return
    if result.eval_after is not None:
        console.print(held_out_table(cfg.eval_task.name if cfg.eval_task else "-", result.eval_before,
                                     result.eval_after))
    console.print(f"{result.steps} warm-start steps on {result.examples} messages in {result.seconds:.0f} s; "
                  f"adapters in {result.folder}/checkpoints (train from them with the same config and "
                  f"--output, or model.checkpoint={result.folder})")
