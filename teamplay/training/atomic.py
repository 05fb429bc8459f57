"""Replacing a file so that no reader and no crash ever sees half of it."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, content: str | bytes) -> None:
    """Replace ``path`` by ``content`` (text, written as UTF-8, or bytes) through a temporary
    sibling, fsync and a rename.

    A kill at any moment, or a full disk, leaves either the old content whole or the new content
    whole; a failed write removes its temporary file and re-raises the ``OSError``.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
