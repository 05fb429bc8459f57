"""Replacing a file so that no reader and no crash ever sees half of it.

Floor 0: this module imports nothing from ``teamplay``, so every floor may use it.

- :func:`write_atomically` replaces a file by text or bytes held in memory;
- :func:`atomic_file` hands a temporary path to a writer that wants a path of its own (``torch.save``,
  ``save_file``, a ``json.dump`` into ``path.open(...)``) and puts the file in place when it is done;
- :func:`replace_folder` puts a fully written staging folder in place of a folder (a checkpoint).

A temporary file is a hidden sibling of its target (``.tmp-<name>-<pid>``), so the rename never
crosses a file system; one process writes one path at a time.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _temporary_sibling(path: Path) -> Path:
    # ``torch.save`` names the archive inside its file after this name up to its last dot: for
    # ``round-000001.pt`` that is ``.tmp-round-000001``, the same for every process id
    return path.with_name(f".tmp-{path.name}-{os.getpid()}")


def _fsync(path: Path) -> None:
    with path.open("rb") as f:
        os.fsync(f.fileno())


@contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling path of ``path`` to write; on a clean exit fsync it and rename it
    over ``path``.

    An exception inside the ``with`` (or in the fsync or the rename) removes the temporary file and
    re-raises: ``path`` keeps its old content whole, or stays missing. The folder must exist::

        with atomic_file(folder / "state.pt") as tmp:
            torch.save(state, tmp)
    """
    path = Path(path)
    tmp = _temporary_sibling(path)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, content: str | bytes) -> None:
    """Replace ``path`` by ``content`` (text, written as UTF-8, or bytes) through a temporary
    sibling, fsync and a rename.

    A kill at any moment, or a full disk, leaves either the old content whole or the new content
    whole; a failed write removes its temporary file and re-raises the ``OSError``.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    with atomic_file(path) as tmp:
        tmp.write_bytes(data)


def replace_folder(staged: Path, final: Path) -> None:
    """Put the fully written folder ``staged`` in place of ``final``: fsync every file under
    ``staged``, delete ``final`` if it exists, rename ``staged`` to ``final``.

    The rename is atomic, so a new ``final`` is never seen half written. Replacing an old ``final``
    is not: it is deleted first, and a kill during the deletion leaves part of it (callers replace
    an old folder only when it holds the same thing, e.g. the checkpoint of a step a killed run
    already wrote). On failure ``staged`` is left for the caller to remove.
    """
    for path in staged.rglob("*"):
        if path.is_file():
            _fsync(path)
    if final.exists():
        shutil.rmtree(final)
    os.replace(staged, final)
