"""A sweep's runs side by side: up to N at once, each a Ray task in a process of its own.

    teamplay sweep -c C --grid credit.method=grpo,shapley --seeds 0,1,2 --parallel 3 [--address HOST:PORT]

Same steps as the sequential ``teamplay.training.experiments.sweep.run_sweep``: the manifest is written (or
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
checkpoints let the next invocation resume them). A run whose worker process died (killed by the
kernel's out-of-memory killer or a signal, its node lost: not the run's own error) is started again
from its latest checkpoint, up to ``WORKER_LOSS_RETRIES`` times; after that the sweep stops with one
line naming the run, and the same command resumes it.

SIGTERM or SIGINT to the driver stops the sweep cleanly (``teamplay.training.run.preemption``): no run
is started after it, and the driver writes the file ``SWEEP/stop.request`` (the signal number),
which every task polls (``STOP_POLL_S``) and turns into its trainer's preemption flag: each run in
flight stops at its next safe point with the checkpoint of its last completed step, as a
``teamplay train`` would. The driver waits for them (at most ``STOP_WAIT_S``, then cancels the
rest), marks the runs that finished meanwhile done, and stops with ``Preempted``: one ``warning:``
line, exit status 75; the same command run again resumes them. A second signal stops the driver at
once (128 + N) and cancels the tasks (their previous checkpoints are intact).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from teamplay.config import DistributedConfig, TrainConfig, build_config
from teamplay.distributed.cluster import connect, import_ray
from teamplay.errors import ConfigError, TeamplayError
from teamplay.training.experiments.sweep import Sweep, SweepRun, finish_run, pending_runs, prepare_run
from teamplay.training.run.preemption import Preempted, Preemption, preemption_handlers

#: the file in the sweep folder by which the driver asks its tasks to stop (holds the signal number)
STOP_FILE = "stop.request"
#: how often a task looks for it (seconds)
STOP_POLL_S = 0.2
#: how long a stopping driver waits for the runs in flight to checkpoint and stop (seconds)
STOP_WAIT_S = 600.0
AGAIN = "run the same teamplay sweep command again to continue"
#: how many times a run whose worker died is started again from its latest checkpoint in one
#: invocation (a worker killed once, e.g. by the out-of-memory killer beside other work, is not the
#: run's fault; a run that kills its worker every time stops the sweep instead of looping)
WORKER_LOSS_RETRIES = 1
#: Ray's errors that mean the task's process or node is gone, not that the run raised
WORKER_LOST = ("WorkerCrashedError", "RayActorError", "NodeDiedError", "OutOfMemoryError", "ObjectLostError",
               "LocalRayletDiedError")


class WorkerLost(Exception):
    """A run's Ray task ended without a result because its worker process (or node) died."""

    def __init__(self, run: SweepRun, kind: str) -> None:
        super().__init__(f"{run.name}: its worker process died ({kind})")
        self.kind = kind


def _stop_requested(stop_file: Path) -> int | None:
    """The signal number the driver wrote to ``stop_file``, or None (no file, or not written yet)."""
    try:
        return int(stop_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _train_one(config: dict[str, Any], resume: str | None, threads: int, stop_file: str | None = None) -> str:
    """Body of one run's Ray task: train the run described by ``config`` (a dumped TrainConfig).

    A thread polls ``stop_file``; once the driver wrote it, the trainer's preemption flag is set as
    a signal would set it, so the run stops at its next safe point with its checkpoint
    (``Preempted``, which reaches the driver as the task's error)."""
    import torch

    from teamplay.distributed.compose import make_trainer

    torch.set_num_threads(threads)
    cfg = build_config(TrainConfig, config)
    done = threading.Event()
    holder: dict[str, Any] = {}

    def watch(preemption: Preemption) -> None:
        while not done.wait(STOP_POLL_S):
            signum = _stop_requested(Path(stop_file)) if stop_file else None
            if signum is None:
                continue
            for flag in (preemption, getattr(holder.get("trainer"), "preemption", None)):
                if flag is not None and flag.signum is None:
                    flag.signum = signum

    # handlers here too (a Ctrl-C that reaches the worker stops the run cleanly); the trainer's
    # ``train`` shares this flag, and the watcher also sets the trainer's own one
    with preemption_handlers() as preemption:
        watcher = threading.Thread(target=watch, args=(preemption,), daemon=True)
        watcher.start()
        try:
            holder["trainer"] = trainer = make_trainer(cfg)
            if preemption.requested:  # asked while the model loaded: nothing trained, nothing to save
                raise Preempted(preemption.signum, "before the first step finished; no checkpoint written yet")
            trainer.train(resume=resume)
        finally:
            done.set()
            watcher.join()
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
    stop_file = Path(sweep.folder) / STOP_FILE
    owned = connect(DistributedConfig(address=address, local_cpus=parallel if address == "local" else None))
    try:
        # after connecting: ray.init installs SIGTERM handlers of its own (which would end the driver)
        with preemption_handlers() as preemption:
            todo = list(pending_runs(sweep, on_run))
            stop_file.unlink(missing_ok=True)  # a request of an earlier, stopped invocation
            task = ray.remote(num_cpus=1, max_calls=1, max_retries=0)(_train_one)
            in_flight: dict[Any, SweepRun] = {}
            trained: list[SweepRun] = []
            losses: dict[str, int] = {}  # run name -> its workers that died in this invocation
            try:
                while todo or in_flight:
                    if preemption.requested:
                        _stop(ray, sweep, preemption.signum, in_flight, trained, stop_file, on_done, len(todo))
                    while todo and len(in_flight) < parallel:
                        run, resume = todo.pop(0)
                        config = sweep.config(run).model_dump(mode="json")
                        in_flight[task.remote(config, resume, threads, str(stop_file))] = run
                    ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=STOP_POLL_S)
                    if not ready:  # looks at the preemption flag again (the handler only sets it)
                        continue
                    run = in_flight.pop(ready[0])
                    try:
                        _result(ray, ready[0], run)
                    except Preempted as exc:  # the worker itself was signalled (a Ctrl-C to the group)
                        _stop(ray, sweep, preemption.signum or exc.signum, in_flight, trained, stop_file, on_done,
                              len(todo), [_where(run, exc)])
                    except WorkerLost as exc:
                        todo.insert(0, _again_after_loss(sweep, run, exc, losses, on_run))
                        continue
                    finish_run(sweep, run)
                    trained.append(run)
                    if on_done is not None:
                        on_done(run)
            finally:
                for ref in in_flight:  # only after a failure, a stop that timed out, or a second signal
                    ray.cancel(ref, force=True)
            return trained
    finally:
        if owned:
            ray.shutdown()


def _stop(ray: Any, sweep: Sweep, signum: int, in_flight: dict[Any, SweepRun], trained: list[SweepRun],
          stop_file: Path, on_done: Callable[[SweepRun], None] | None, not_started: int,
          stopped: list[str] | None = None) -> None:
    """Ask the runs in flight to stop (``stop_file``), wait for them (at most ``STOP_WAIT_S``),
    mark those that finished meanwhile done, and raise ``Preempted`` saying where each stopped."""
    import time

    stop_file.write_text(f"{signum}\n")
    stopped = list(stopped or [])
    deadline = time.monotonic() + STOP_WAIT_S
    while in_flight:
        ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            break  # the rest is cancelled by the caller
        run = in_flight.pop(ready[0])
        try:
            _result(ray, ready[0], run)
        except Preempted as exc:
            stopped.append(_where(run, exc))
            continue
        except WorkerLost as exc:
            stopped.append(f"{exc} (its earlier checkpoints are kept)")
            continue
        finish_run(sweep, run)  # it finished before it saw the request
        trained.append(run)
        if on_done is not None:
            on_done(run)
    parts = [f"with {len(stopped)} run(s) stopping at a step boundary: " + "; ".join(stopped)] if stopped \
        else ["with no run in flight"]
    if in_flight:
        parts.append(f"{len(in_flight)} run(s) did not stop within {STOP_WAIT_S:.0f} s and were cancelled "
                     f"(their earlier checkpoints are kept): {', '.join(r.name for r in in_flight.values())}")
    if not_started:
        parts.append(f"{not_started} run(s) not started")
    raise Preempted(signum, "; ".join(parts), AGAIN)


def _again_after_loss(sweep: Sweep, run: SweepRun, exc: WorkerLost, losses: dict[str, int],
                      on_run: Callable[[SweepRun, str], None] | None) -> tuple[SweepRun, str | None]:
    """The run whose worker died, readied to start again (``(run, resume)`` as ``pending_runs``
    gives: from its latest checkpoint, or from the start if it had none); a ``TeamplayError`` (one
    line) once it has lost more than ``WORKER_LOSS_RETRIES`` workers in this invocation."""
    losses[run.name] = losses.get(run.name, 0) + 1
    if losses[run.name] > WORKER_LOSS_RETRIES:
        raise TeamplayError(f"sweep run {run.name}: its worker process died {losses[run.name]} times ({exc.kind}); "
                            f"its checkpoints and the finished runs are kept: {AGAIN} (if the kernel killed "
                            "it for memory, run fewer at once with --parallel)")
    status = prepare_run(sweep, run)
    if on_run is not None:
        on_run(run, status)
    return run, "auto" if status == "resume" else None


def _where(run: SweepRun, exc: Preempted) -> str:
    """``"NAME after step 1, checkpoint step-000001 written"``: where one run of the sweep stopped."""
    return f"{run.name} {exc.where.replace('; ', ', ')}"


def _result(ray: Any, ref: Any, run: SweepRun) -> Any:
    """The task's value, or the run's own error (a TeamplayError is re-raised as itself);
    ``WorkerLost`` when the task's process died under it."""
    lost = tuple(getattr(ray.exceptions, name) for name in WORKER_LOST if hasattr(ray.exceptions, name))
    try:
        return ray.get(ref)
    except lost as exc:
        raise WorkerLost(run, type(exc).__name__) from None
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Preempted):  # stopped at the driver's request: the caller says where
            raise cause from None
        if isinstance(cause, TeamplayError):  # the run's own one-line error, e.g. a missing data file
            raise TeamplayError(f"sweep run {run.name}: {cause}") from None
        raise
