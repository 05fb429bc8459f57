"""Replacing a file so that no reader and no crash ever sees half of it.

Floor 0: this module imports nothing from ``teamplay``, so every floor may use it.

- :func:`write_atomically` replaces a file by text or bytes held in memory;
- :func:`atomic_file` hands a temporary path to a writer that wants a path of its own (``torch.save``,
  ``save_file``, a ``json.dump`` into ``path.open(...)``) and puts the file in place when it is done;
- :func:`replace_folder` puts a fully written staging folder in place of a folder (a checkpoint);
- :func:`staged_folder` hands an empty staging folder to a writer that fills a whole folder
  (``save_pretrained``, a set of adapters) and puts it in place with :func:`replace_folder`.

A temporary file is a hidden sibling of its target (``.tmp-<name>-<pid>``), so the rename never
crosses a file system; one process writes one path at a time. A staging folder is a hidden sibling
too (``.tmp-<name>-<random>``): writers of the same folder in several processes or threads never
share one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
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


def replace_folder(staged: Path, final: Path, *, sync: bool = True) -> None:
    """Put the fully written folder ``staged`` in place of ``final``: fsync every file under
    ``staged`` (``sync``; off where the caller fsyncs the whole tree itself, e.g. a folder written
    inside a checkpoint's staging folder, or for a scratch copy), move an existing ``final`` aside
    (``.old-<name>-<pid>``), rename ``staged`` to ``final``, then delete the old folder.

    The renames are atomic and the old folder is deleted only once the new one is in place, so a
    reader never sees a half-written ``final`` and a kill at any moment leaves one folder whole: the
    new ``final``, the old ``final``, or (killed between the two renames) the old one under its
    aside name. If the second rename fails, the old folder is moved back. On failure ``staged`` is
    left for the caller to remove.
    """
    if sync:
        for path in staged.rglob("*"):
            if path.is_file():
                _fsync(path)
    if not final.exists():
        os.replace(staged, final)
        return
    old = final.with_name(f".old-{final.name}-{os.getpid()}")
    if old.exists():  # left by a killed process of the same id: one process writes one path at a time
        shutil.rmtree(old)
    os.replace(final, old)
    try:
        os.replace(staged, final)
    except BaseException:
        os.replace(old, final)
        raise
    shutil.rmtree(old)


@contextmanager
def staged_folder(final: str | os.PathLike[str], *, sync: bool = True) -> Iterator[Path]:
    """Yield a new empty staging folder next to ``final`` to fill; on a clean exit put it in place of
    ``final`` with :func:`replace_folder` (an existing ``final`` is replaced whole; ``sync`` as there).

    The staging folder is removed however the ``with`` ends; an exception inside it (or in
    :func:`replace_folder`) re-raises with ``final`` keeping its old content whole, or staying
    missing. The parent folder must exist::

        with staged_folder(cache / "model") as tmp:
            model.save_pretrained(tmp)
    """
    final = Path(final)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        yield staging
        replace_folder(staging, final, sync=sync)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
