"""``teamplay train``, ``teamplay sweep`` and ``teamplay federate``: training a team in one
process, over a grid of configs and seeds, or across Flower sites."""

from __future__ import annotations

from pathlib import Path

import typer

from teamplay.cli.app import (
    ConfigOpt,
    RunFolderOpt,
    SetOpt,
    command,
    console,
    err_console,
    shortcut_overrides,
)
from teamplay.cli.progress import TrainProgress
from teamplay.cli.tables import held_out_table, sweep_table
from teamplay.config import load_config
from teamplay.errors import TeamplayError


@command("train")
def train_command(
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    resume: str | None = typer.Option(None, help="'auto' continues the latest checkpoint of the run "
                                                 "folder; or a checkpoint folder."),
    output: str | None = RunFolderOpt,
    steps: int | None = typer.Option(None, help="Training steps."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete the run already in the run folder "
                                                              "(its checkpoints and metrics) and start anew."),
) -> None:
    """Train a team: rollouts, credit, per-role LoRA updates, held-out eval, checkpoints."""
    from teamplay.config import TrainConfig

    overrides = shortcut_overrides(**{"output_dir": output, "steps": steps}) + list(set_)
    cfg = load_config(TrainConfig, config, overrides)
    # torch, transformers (and ray with `distributed:`) only once the config is valid: a config error
    # appears before seconds of imports
    from teamplay.distributed.compose import make_trainer
    from teamplay.training.store.run_folder import check_run_folder

    check_run_folder(Path(cfg.output_dir), resume, overwrite)  # before the model loads
    progress = TrainProgress(err_console, cfg.steps)  # a bar on a terminal, else a line per step
    # built before the progress bar shows: a run that cannot work is refused before anything is shown
    # (with `distributed:`, rollout workers and learner ranks on a Ray cluster)
    trainer = make_trainer(cfg, on_eval=progress.evaluation, on_step=progress.step,
                           on_eval_batch=progress.eval_batch)
    with progress:
        progress.start(trainer.state.step)
        result = trainer.train(resume=resume, overwrite=overwrite)
    if result.eval_after is not None:
        console.print(held_out_table(cfg.eval_task.name if cfg.eval_task else "-", result.eval_before,
                                     result.eval_after))
    console.print(f"{steps_run_line(result.steps_run, result.steps)} in {result.seconds:.0f} s; "
                  f"run folder {result.run_dir}")


def steps_run_line(ran: int, now: int) -> str:
    """What a ``train`` call did, by the steps it ran: ``"3 steps"``, or for a resumed run
    ``"1 step (resumed at step 2, now at step 3)"``.

    >>> steps_run_line(3, 3)
    '3 steps'
    >>> steps_run_line(1, 3)
    '1 step (resumed at step 2, now at step 3)'
    """
    shown = f"{ran} step{'s' if ran != 1 else ''}"
    return shown if ran == now else f"{shown} (resumed at step {now - ran}, now at step {now})"


@command("sweep")
def sweep_command(
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    grid: list[str] = typer.Option([], "--grid", help="KEY=V1,V2 over a dotted config path, e.g. "
                                                      "--grid credit.method=grpo,shapley (repeatable: "
                                                      "the cartesian product)."),
    seeds: str = typer.Option("0", help="Comma-separated trainer seeds, e.g. 0,1,2."),
    output: str | None = typer.Option(None, "--output", "-o", help="Sweep folder (default: the config's "
                                                                   "output_dir)."),
    steps: int | None = typer.Option(None, help="Training steps of every run."),
    parallel: int = typer.Option(1, "--parallel", "-j", help="Runs at once, each a Ray task in its own "
                                                             "process (needs the ray extra); 1 = one after "
                                                             "another in this process."),
    address: str = typer.Option("local", help="With --parallel: 'local' (a Ray cluster in this process), "
                                              "'auto' or HOST:PORT of a running cluster."),
    threads: int = typer.Option(1, help="With --parallel: torch threads per run."),
) -> None:
    """Train every grid point x seed (resumable) and tabulate mean ± 95% CI over seeds."""
    from teamplay.config import TrainConfig, read_yaml
    from teamplay.errors import ConfigError

    if parallel < 1:
        raise ConfigError(f"--parallel: at least 1 run at a time, got {parallel}")
    if parallel == 1 and (address != "local" or threads != 1):
        raise ConfigError("--address and --threads apply to runs in parallel; add --parallel N (N >= 2)")
    base = read_yaml(config) if config else {}
    overrides = shortcut_overrides(**{"steps": steps}) + list(set_)
    # the base config checked (for its output_dir) before the heavy imports below: its error comes at once
    folder = Path(output) if output else Path(load_config(TrainConfig, config, overrides).output_dir)
    from teamplay.distributed.compose import make_trainer
    from teamplay.training.experiments.sweep import parse_grid, parse_seeds, plan, run_sweep, write_results

    sweep = plan(folder, base, parse_grid(grid), parse_seeds(seeds), overrides)

    def train(cfg, resume):
        progress = TrainProgress(err_console, cfg.steps, name=Path(cfg.output_dir).name)
        trainer = make_trainer(cfg, on_eval=progress.evaluation, on_step=progress.step,
                               on_eval_batch=progress.eval_batch)
        with progress:
            progress.start(trainer.state.step)
            trainer.train(resume=resume)

    def announce(run, status):
        shown = {"skip": "done, skipped", "resume": "resuming from its checkpoint", "start": "starting"}[status]
        err_console.print(f"[{sweep.runs.index(run) + 1}/{len(sweep.runs)}] {run.name}: {shown}")

    if parallel > 1:
        from teamplay.distributed.sweep import run_sweep_parallel

        run_sweep_parallel(sweep, parallel, address=address, threads=threads, on_run=announce,
                           on_done=lambda run: err_console.print(f"{run.name}: done"))
    else:
        run_sweep(sweep, train, on_run=announce)
    results = write_results(sweep)
    console.print(sweep_table(folder, results))
    console.print(f"wrote {folder / 'results.md'}, results.csv, results.json")


@command("federate")
def federate_command(
    config: Path | None = ConfigOpt,
    set_: list[str] = SetOpt,
    resume: str | None = typer.Option(None, help="'auto' continues after the last completed round of the "
                                                 "run folder; or a checkpoint folder."),
    output: str | None = RunFolderOpt,
    rounds: int | None = typer.Option(None, help="Federated rounds."),
) -> None:
    """Federated team training on Flower: K sites with private shards, FedAvg or Fed-GRPO."""
    from teamplay.config import FederatedConfig

    overrides = shortcut_overrides(**{"output_dir": output, "federated.rounds": rounds}) + list(set_)
    cfg = load_config(FederatedConfig, config, overrides)  # a config error before the heavy imports
    try:
        from teamplay.federated.run import run_federated
    except ImportError as exc:  # flwr missing: the federated extra is optional
        raise TeamplayError(f"teamplay federate needs Flower: pip install 'teamplay[federated]' ({exc})") from None

    def on_round(record: dict) -> None:
        acc = record.get("heldout", {}).get("team_accuracy")
        shown = f"held-out accuracy {acc:.3f}, " if acc is not None else ""
        out = len(record["failed"]) + len(record.get("refused", []))
        failed = f", {out} site(s) left out" if out else ""
        err_console.print(f"round {record['round']}/{cfg.federated.rounds}: {shown}"
                          f"{record['bytes_total']} bytes uploaded by {len(record['sites'])} site(s){failed}",
                          highlight=False)

    server = run_federated(cfg, resume=resume, on_round=on_round)
    console.print(f"{server.state.round} rounds; run folder {cfg.output_dir} (federated.jsonl, checkpoints/)")

