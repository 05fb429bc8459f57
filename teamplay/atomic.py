"""Replacing a file so that no reader and no crash ever sees half of it.

Floor 0: this module imports nothing from ``teamplay``, so every floor may use it.

- :func:`write_atomically` replaces a file by text or bytes held in memory;
- :func:`atomic_file` hands a temporary path to a writer that wants a path of its own (``torch.save``,
  ``save_file``, a ``json.dump`` into ``path.open(...)``) and puts the file in place when it is done;
- :func:`replace_folder` puts a fully written staging folder in place of a folder (a checkpoint);
- :func:`staged_folder` hands an empty staging folder to a writer that fills a whole folder
  (``save_pretrained``, a set of adapters, a checkpoint) and puts it in place with
  :func:`replace_folder`;
- :func:`recover_folders` cleans up after those two when a process was killed midway (it alone
  knows the names they give their staging and aside folders).

A temporary file is a hidden sibling of its target (``.tmp-<name>-<pid>``), so the rename never
crosses a file system; one process writes one path at a time. A staging folder is a hidden sibling
too (``.tmp-<name>-<random>``): writers of the same folder in several processes or threads never
share one.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: a staging folder of :func:`staged_folder`: ``.tmp-<name>-<random, no hyphen>``
_STAGING = re.compile(r"^\.tmp-(.+)-[^-]+$")
#: a folder :func:`replace_folder` moved aside: ``.old-<name>-<pid>``
_ASIDE = re.compile(r"^\.old-(.+)-\d+$")


def _aside(final: Path) -> Path:
    return final.with_name(f".old-{final.name}-{os.getpid()}")


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
    old = _aside(final)
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


def recover_folders(parent: str | os.PathLike[str], is_target: Callable[[str], bool]) -> list[Path]:
    """Clean up ``parent`` after :func:`staged_folder` or :func:`replace_folder` calls that never
    finished (a kill, a full disk), for the folders whose names ``is_target`` accepts; returns the
    folders it deleted.

    - a staging folder ``.tmp-<name>-*`` (killed while it was being written) is deleted;
    - a folder moved aside, ``.old-<name>-<pid>``, is deleted when ``<name>`` is in place, and
      renamed back to ``<name>`` when it is not (killed between the two renames: the aside folder is
      then the only copy, so nothing is lost).

    Call it only while no writer of ``parent`` runs (a running save owns its staging folder).
    """
    root = Path(parent)
    if not root.is_dir():
        return []
    deleted = []
    for path in sorted(p for p in root.iterdir() if p.is_dir()):
        aside, staging = _ASIDE.match(path.name), _STAGING.match(path.name)
        if aside is not None and is_target(aside.group(1)):
            if not (root / aside.group(1)).exists():
                os.replace(path, root / aside.group(1))
                continue
        elif staging is None or not is_target(staging.group(1)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        deleted.append(path)
    return deleted
