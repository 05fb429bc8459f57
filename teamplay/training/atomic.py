"""Replacing a file so that no reader and no crash ever sees half of it."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` through a temporary sibling, fsync and a rename.

    A kill at any moment, or a full disk, leaves either the old content whole or the new content
    whole; a failed write removes its temporary file and re-raises the ``OSError``.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
