"""A sweep's runs side by side: up to N at once, each a Ray task in a process of its own.

    teamplay sweep -c C --grid credit.method=grpo,shapley --seeds 0,1,2 --parallel 3 [--address HOST:PORT]

Same steps as the sequential ``teamplay.training.sweep.run_sweep``: the manifest is written (or
checked) first; every run is readied in run order (finished runs skipped, a run with a checkpoint
resumed, a run killed before its first checkpoint started again); each finished run gets its
``done.json`` and the results table is rewritten. Only the order in which runs finish changes, and
the table does not depend on it (it is computed from the run folders, in run order). So a parallel
sweep killed with -9 resumes like a sequential one, with either command.

Each run is one Ray task (``num_cpus=1``) whose worker process exits after it (``max_calls=1``):
no model, torch state or RNG leaks from one run into the next, and each process uses ``threads``
torch threads (1 by default: N runs on N cores without oversubscription). The driver keeps at
most N tasks in flight, so N bounds the runs at once even on a bigger cluster. ``address`` is
``local`` (a cluster in this process with N CPUs), ``auto`` or ``HOST:PORT``
(``teamplay.distributed.cluster.connect``); an open connection (a Ray job, a test session) is used
as is. Run folders must be on storage every node sees.

A run that fails stops the sweep with its own error; the runs still in flight are cancelled (their
checkpoints let the next invocation resume them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from teamplay.config import DistributedConfig, TrainConfig, build_config
from teamplay.distributed.cluster import connect, import_ray
from teamplay.errors import ConfigError, TeamplayError
from teamplay.training.sweep import Sweep, SweepRun, finish_run, pending_runs


def _train_one(config: dict[str, Any], resume: str | None, threads: int) -> str:
    """Body of one run's Ray task: train the run described by ``config`` (a dumped TrainConfig)."""
    import torch

    from teamplay.training.trainer import Trainer

    torch.set_num_threads(threads)
    cfg = build_config(TrainConfig, config)
    Trainer(cfg).train(resume=resume)
    return cfg.output_dir


def run_sweep_parallel(sweep: Sweep, parallel: int, address: str = "local", threads: int = 1,
                       on_run: Callable[[SweepRun, str], None] | None = None,
                       on_done: Callable[[SweepRun], None] | None = None) -> list[SweepRun]:
    """Train the unfinished runs of ``sweep``, up to ``parallel`` at once; returns the runs trained now
    (in the order they finished). ``on_run(run, status)`` as in ``run_sweep``; ``on_done(run)``
    after each finished run."""
    if parallel < 1:
        raise ConfigError(f"--parallel: at least 1 run at a time, got {parallel}")
    if threads < 1:
        raise ConfigError(f"--threads: at least 1 torch thread per run, got {threads}")
    ray = import_ray()
    owned = connect(DistributedConfig(address=address, local_cpus=parallel if address == "local" else None))
    try:
        todo = list(pending_runs(sweep, on_run))
        task = ray.remote(num_cpus=1, max_calls=1, max_retries=0)(_train_one)
        in_flight: dict[Any, SweepRun] = {}
        trained: list[SweepRun] = []
        try:
            while todo or in_flight:
                while todo and len(in_flight) < parallel:
                    run, resume = todo.pop(0)
                    config = sweep.config(run).model_dump(mode="json")
                    in_flight[task.remote(config, resume, threads)] = run
                (ready,), _ = ray.wait(list(in_flight), num_returns=1)
                run = in_flight.pop(ready)
                _result(ray, ready, run)
                finish_run(sweep, run)
                trained.append(run)
                if on_done is not None:
                    on_done(run)
        finally:
            for ref in in_flight:  # only after a failure or an interrupt
                ray.cancel(ref, force=True)
        return trained
    finally:
        if owned:
            ray.shutdown()


def _result(ray: Any, ref: Any, run: SweepRun) -> Any:
    """The task's value, or the run's own error (a TeamplayError is re-raised as itself)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, TeamplayError):  # the run's own one-line error, e.g. a missing data file
            raise TeamplayError(f"sweep run {run.name}: {cause}") from None
        raise
