"""A run folder belongs to one run and to one trainer at a time.

``claim_run_folder`` is what every training start goes through:

* it creates the folder (an output path that is a file, or a folder that cannot be written, is a
  ``RunFolderError`` naming it);
* it takes an exclusive lock on ``RUN/train.lock`` for as long as the trainer runs, so a second
  trainer on the same folder stops at once, naming the process that holds it. The lock is an OS
  file lock (``flock``): the kernel releases it when its holder dies, even by ``kill -9``, so a
  crashed run never leaves the folder locked;
* it refuses a folder that already holds a run unless the caller resumes it or asked to
  ``overwrite`` it: training into an old run's folder would mix two runs' metrics and checkpoints;
* it removes temporary checkpoint folders of saves that never finished.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import IO

from teamplay.errors import TeamplayError
from teamplay.training.store.checkpoint import list_checkpoints, remove_stale_temporaries

LOCK_FILE = "train.lock"
#: what a training run writes into its folder: the marks of an existing run (the first four), and what
#: --overwrite deletes (a warm start's folder too: ``teamplay.training.run.warm_start``, continued
#: rather than refused, since ``teamplay sft`` writes it before ``teamplay train`` starts the run)
RUN_FILES = ("config.yaml", "metrics.jsonl", "episodes.jsonl", "checkpoints", "tensorboard", "wandb", "report",
             "warm_start")


class RunFolderError(TeamplayError):
    """The run folder cannot be used: in use, holds another run, or cannot be written."""


class RunLock:
    """An exclusive lock on ``RUN/train.lock`` (context manager); the file names its holder."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._file: IO[str] | None = None

    def acquire(self) -> RunLock:
        handle = self.path.open("a+", encoding="utf-8")
        if not _try_lock(handle):
            handle.seek(0)
            holder = _describe_holder(handle.read())
            handle.close()
            raise RunFolderError(f"run folder {self.path.parent} is in use by another trainer ({holder}); "
                                 f"wait for it to finish or train into another --output folder")
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S %Z")}))
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor releases the lock
            self._file = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def holds_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` already holds (part of) a training run."""
    return any((Path(run_dir) / name).exists() for name in RUN_FILES[:4])


def check_run_folder(run_dir: Path, resume: str | None, overwrite: bool) -> None:
    """Refuse, before anything loads, a start that would mix two runs in one folder."""
    run_dir = Path(run_dir)
    if overwrite and resume:
        raise RunFolderError("--overwrite deletes the run that --resume would continue; pass only one")
    if run_dir.exists() and not run_dir.is_dir():
        raise RunFolderError(f"output {run_dir} is a file, not a folder; pass a folder as --output")
    if resume or overwrite or not holds_run(run_dir):
        return
    latest = list_checkpoints(run_dir)
    at = f" (latest checkpoint {latest[-1].name})" if latest else ""
    raise RunFolderError(f"run folder {run_dir} already holds a run{at}; continue it with --resume auto, "
                         f"train into a new --output folder, or pass --overwrite to delete it")


def claim_run_folder(run_dir: Path, resume: str | None, overwrite: bool) -> RunLock:
    """Create and lock ``run_dir`` for one training run; the caller releases the returned lock.

    Under the lock: refuse an existing run (see ``check_run_folder``), delete it with
    ``overwrite``, and remove unfinished checkpoint saves.
    """
    run_dir = Path(run_dir)
    check_run_folder(run_dir, resume, overwrite)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = RunLock(run_dir).acquire()
    except OSError as exc:
        raise RunFolderError(f"cannot use run folder {run_dir}: {exc.strerror or exc}"
                             f"{f' ({exc.filename})' if exc.filename else ''}") from None
    try:
        check_run_folder(run_dir, resume, overwrite)  # again: another process may have started meanwhile
        if overwrite:
            for name in RUN_FILES:
                target = run_dir / name
                if target.is_dir():
                    shutil.rmtree(target)
                elif target.exists():
                    target.unlink()
        remove_stale_temporaries(run_dir)
    except BaseException:
        lock.release()
        raise
    return lock


def _try_lock(handle: IO[str]) -> bool:
    try:
        import fcntl
    except ImportError:  # Windows: msvcrt locks a byte range instead of the whole file
        import msvcrt

        try:
            handle.seek(0)
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _describe_holder(text: str) -> str:
    try:
        info = json.loads(text)
        return f"pid {info['pid']} on {info['host']}, since {info['since']}"
    except (ValueError, KeyError, TypeError):
        return f"lock file {LOCK_FILE} held by a process that has not written its name yet"
