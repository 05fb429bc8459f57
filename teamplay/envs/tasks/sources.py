"""Reading benchmark rows from a local file or from the Hugging Face hub.

Every task loads the same way: ``source=None`` reads the task's hub dataset, ``source=PATH`` reads a
local ``.jsonl``, ``.json``, ``.parquet`` or ``.csv`` file. Either way the result is a list of
``Row``s, each remembering where it came from, so that a task can report a malformed row as
"path line 17: missing field 'answer'" and the user can open the file at that line.

Nothing here falls back to other data: a missing file, an empty file, a bad line or an unreachable
hub is a ``DataError`` that says what was tried and what to do.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teamplay.errors import ConfigError, DataError
from teamplay.hub import hub_offline, probe_hub

#: file suffixes ``read_rows`` understands
LOCAL_FORMATS = (".jsonl", ".json", ".parquet", ".csv")


@dataclass(frozen=True)
class HubSpec:
    """Where a task's data lives on the hub: ``load_dataset(path, config, split=split_map[split])``.

    ``split_map`` maps the task's split names to the dataset's (GPQA has only ``train``).
    """

    path: str
    config: str | None = None
    split_map: Mapping[str, str] | None = None

    def hub_split(self, split: str) -> str:
        return (self.split_map or {}).get(split, split)


@dataclass(frozen=True)
class Row:
    """One source row and where it came from.

    Fields:
        index: 0-based position of the row among the data rows of its source.
        where: human-readable location, e.g. ``"data/test.jsonl line 17"`` (1-based file lines).
        data: the row's fields as read (JSON values, CSV strings or parquet scalars).
    """

    index: int
    where: str
    data: Mapping[str, Any]

    def text(self, name: str) -> str:
        """Field ``name`` as a stripped string; ``DataError`` naming the row if absent or empty."""
        value = self.data.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            present = ", ".join(sorted(map(str, self.data))) or "none"
            raise DataError(
                f"{self.where}: missing field {name!r} (fields present: {present}); "
                f"every row needs a non-empty {name!r}"
            )
        return str(value).strip()


def check_load_args(task: str, split: str, splits: tuple[str, ...], limit: int | None) -> None:
    """Reject a split the task does not have and a ``limit`` that is not a positive int."""
    if split not in splits:
        raise ConfigError(f"{task}: unknown split {split!r}; known splits: {', '.join(splits)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"{task}: limit must be a positive integer or None, got {limit!r}")


def load_rows(task: str, split: str, source: str | Path | None, hub: HubSpec,
              limit: int | None = None) -> list[Row]:
    """Rows of ``split`` from the hub (``source=None``) or the local file ``source``.

    Local files carry one split each, so ``split`` only names the items there. At most ``limit``
    rows are returned, the first ones in source order. Raises ``DataError`` when the source is
    missing, unreadable, empty or has a malformed line.
    """
    rows = read_hub(task, hub, split, limit) if source is None else read_file(task, Path(source), limit)
    if not rows:
        where = f"hub dataset {hub.path}" if source is None else str(source)
        raise DataError(f"{task}: {where} has no rows; point source= at a file with data")
    return rows


def read_file(task: str, path: Path, limit: int | None = None) -> list[Row]:
    """Rows of one local file; the format follows the suffix (see ``LOCAL_FORMATS``)."""
    if not path.is_file():
        hint = "it is a directory; name the file inside it" if path.is_dir() else "no such file"
        raise DataError(f"{task}: cannot read {path}: {hint}")
    suffix = path.suffix.lower()
    readers = {".jsonl": _jsonl_rows, ".json": _json_rows, ".parquet": _parquet_rows, ".csv": _csv_rows}
    if suffix not in readers:
        raise DataError(f"{task}: {path} has suffix {suffix!r}; use one of {', '.join(LOCAL_FORMATS)}")
    rows: list[Row] = []
    try:
        for row in readers[suffix](path):
            if limit is not None and len(rows) >= limit:
                break
            rows.append(row)
    except UnicodeDecodeError as exc:
        raise DataError(f"{task}: {path} is not UTF-8 text ({exc}); save it as UTF-8") from exc
    except OSError as exc:
        raise DataError(f"{task}: cannot read {path}: {exc}") from exc
    if not rows:
        raise DataError(f"{task}: {path} is empty; it must hold at least one row")
    return rows


# Files are read as "utf-8-sig": identical to UTF-8 except that a byte-order mark some editors and
# spreadsheet exports put at the start is dropped instead of becoming part of the first field name.


def _jsonl_rows(path: Path) -> Iterator[Row]:
    with path.open(encoding="utf-8-sig") as f:
        index = 0
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue  # a trailing newline or a blank separator line is not a row
            where = f"{path} line {line_no}"
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); "
                                "each line must be one JSON object") from exc
            if not isinstance(data, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(data).__name__}")
            yield Row(index, where, data)
            index += 1


def _json_rows(path: Path) -> Iterator[Row]:
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} line {exc.lineno}: not valid JSON ({exc.msg}); "
                        "a .json source must hold one list of objects") from exc
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of objects, got {type(data).__name__}")
    for index, item in enumerate(data):
        where = f"{path} item {index}"
        if not isinstance(item, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(item).__name__}")
        yield Row(index, where, item)


def _csv_rows(path: Path) -> Iterator[Row]:
    with path.open(encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f)
        for index, data in enumerate(reader):
            # line_num is the file line where this record ends (records may span lines)
            yield Row(index, f"{path} line {reader.line_num}", {k: v for k, v in data.items() if k})


def _parquet_rows(path: Path) -> Iterator[Row]:
    import pyarrow.parquet as pq  # a dependency of `datasets`; imported here to keep startup light

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid & co. for damaged files
        raise DataError(f"{path}: not a readable parquet file ({exc})") from exc
    for index, data in enumerate(table.to_pylist()):
        yield Row(index, f"{path} row {index}", data)


def read_hub(task: str, hub: HubSpec, split: str, limit: int | None = None) -> list[Row]:
    """Rows of a hub dataset through ``datasets.load_dataset``.

    Any failure (no network, ``HF_HUB_OFFLINE=1``, a gated dataset without a token, a missing
    split) becomes a ``DataError`` that names the dataset and suggests ``source=PATH``; the
    original exception is chained for the details.
    """
    hub_split = hub.hub_split(split)
    name = hub.path + (f" (config {hub.config})" if hub.config else "") + f" split {hub_split}"
    # one quick probe first: load_dataset retries an unreachable hub for about a minute
    reason = None if hub_offline() else probe_hub(hub.path, "dataset")
    if reason is not None:
        raise DataError(f"{task}: cannot load {name} from the Hugging Face hub: {reason}. Pass "
                        f"source=PATH (--source, a local {', '.join(LOCAL_FORMATS)} file), or set "
                        f"HF_HUB_OFFLINE=1 to read a copy already in the local cache")
    import datasets  # heavy import, only needed for hub loading

    try:
        dataset = datasets.load_dataset(hub.path, hub.config, split=hub_split)
    except Exception as exc:  # datasets/huggingface_hub raise many unrelated types for "unreachable"
        raise DataError(
            f"{task}: could not load {name} from the Hugging Face hub ({type(exc).__name__}: {exc}). "
            f"The hub may be unreachable or the dataset gated; download it and pass source=PATH "
            f"(a local {', '.join(LOCAL_FORMATS)} file), or set HF_HUB_OFFLINE=1 to fail fast"
        ) from exc
    count = len(dataset) if limit is None else min(limit, len(dataset))
    return [Row(i, f"hub {name} row {i}", dataset[i]) for i in range(count)]
