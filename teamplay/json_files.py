"""Reading a JSON file whole, with one error line for every way the read can fail.

Floor 0: this module imports only ``teamplay.errors``, so every floor may use it.

:func:`read_json` returns the file's value. A file that is missing, cannot be read, is not UTF-8
or is not valid JSON raises the caller's error class with one line naming the file and what was
wrong (for a syntax error, where). What the value must hold (an object, certain fields) is the
caller's to check. JSON-lines files are not read here: their readers parse line by line, each
with its own rule for a bad line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from teamplay.errors import DataError


def read_json(path: str | os.PathLike[str], error: type[Exception] = DataError, *, context: str = "",
              fix: str = "") -> Any:
    """The JSON value held by the UTF-8 file at ``path``.

    A missing, unreadable, non-UTF-8 or invalid file raises ``error`` (called with the message
    alone) with one line ``[<context>: ]<path>: <what was wrong>[; <fix>]``, e.g.
    ``controllers: run/checkpoints/step-000004/extra_state.json: not valid JSON (Expecting value at
    line 1, column 1)``. ``context`` names who reads the file (a command or a setting) and ``fix``
    says what to do about it; either may be empty.
    """
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problem = "does not exist"
    except OSError as exc:  # a folder, no permission, an I/O error
        problem = f"cannot be read ({exc.strerror or exc})"
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text ({exc.reason} at offset {exc.start})"
    except json.JSONDecodeError as exc:
        problem = f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
    message = f"{path}: {problem}"
    if context:
        message = f"{context}: {message}"
    if fix:
        message = f"{message}; {fix}"
    raise error(message)
