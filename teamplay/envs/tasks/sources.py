"""Reading benchmark rows from a local file or from the Hugging Face hub.

Every task loads the same way: ``source=None`` reads the task's hub dataset, ``source=PATH`` reads a
local ``.jsonl``, ``.json``, ``.parquet`` or ``.csv`` file. Either way the rows come as ``Row``s,
each remembering where it came from, so that a task can report a malformed row as
"path line 17: missing field 'answer'" and the user can open the file at that line (a ``.json``
item is named by its line and its position in the list, a parquet row by its number; all counted
from 1).

Nothing here falls back to other data or silently loads less: a missing file, an empty file or
split, an unreadable file and every bad row is a ``DataError`` that names the file and line and says
what to do. A bad row is one that is not valid JSON or CSV for its line, not UTF-8, longer than
``MAX_ROW_BYTES``, missing a field the task needs (or has it empty), or repeating an id (a field of
``ID_FIELDS``) of an earlier row. The task option ``on_bad_line: skip`` turns bad rows into one
``TeamplayWarning`` that counts them; what cannot be skipped because the rest of the file cannot be
trusted (a ``.json`` file that does not parse, a damaged parquet file, a CSV quoting error, an
overlong CSV line) stays an error.

Memory: JSONL and CSV files are read a line at a time and no line is held longer than
``MAX_ROW_BYTES`` (the rest of an overlong line is read in chunks and dropped); a ``.json`` file is
one document, read whole, so it is limited to ``MAX_JSON_FILE_BYTES``.
"""

from __future__ import annotations

import codecs
import csv
import itertools
import json
import math
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from teamplay.errors import ConfigError, DataError, TeamplayWarning
from teamplay.hub import hub_offline, probe_hub

#: file suffixes ``load_items`` understands
LOCAL_FORMATS = (".jsonl", ".json", ".parquet", ".csv")
#: what ``on_bad_line`` may be: stop at the first bad row, or skip bad rows and warn once with the count
ON_BAD_LINE = ("error", "skip")
#: the most bytes one row may take (a JSONL or CSV line; the characters of a .json item or of a
#: parquet row's text): the longest real problem with its worked solution is about 10 KB, so a
#: longer "row" is a concatenated or binary file, and is never read into memory whole
MAX_ROW_BYTES = 1 << 20
#: the largest ``.json`` file read (it is one document, read whole); larger sets belong in JSONL
MAX_JSON_FILE_BYTES = 256 << 20
#: fields that name a row (MATH-500 ``unique_id``, MATH ``idx``, GPQA ``Record ID``): two rows with
#: the same value of one of them are a duplicate, an error naming both lines
ID_FIELDS = ("id", "unique_id", "idx", "Record ID")

_CHUNK = 1 << 16  # bytes read at a time while dropping the rest of an overlong line
_PARQUET_BATCH = 1024
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
T = TypeVar("T")


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
        index: 0-based position of the row among the data rows of its source, bad rows included
            (so skipping a bad row does not renumber the rows after it).
        where: human-readable location, e.g. ``"data/test.jsonl line 17"`` (1-based file lines).
        data: the row's fields as read (JSON values, CSV strings or parquet scalars).
    """

    index: int
    where: str
    data: Mapping[str, Any]

    def text(self, name: str) -> str:
        """Field ``name`` as a stripped string; ``DataError`` naming the row if absent or empty.

        A number is taken as its text; a list, object or boolean is an error (``str()`` of it would
        make a prompt or answer nobody wrote).
        """
        value = self.optional_text(name)
        if value is None:
            present = ", ".join(sorted(map(str, self.data))) or "none"
            raise DataError(
                f"{self.where}: missing field {name!r} (fields present: {present}); "
                f"every row needs a non-empty {name!r}"
            )
        return value

    def optional_text(self, name: str) -> str | None:
        """Field ``name`` as a stripped string, or ``None`` when absent, null, NaN or blank.

        ``DataError`` naming the row when the field holds something that is not text or a number.
        """
        value = self.data.get(name)
        if _blank(value):
            return None
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise DataError(f"{self.where}: field {name!r} must be text, got {type(value).__name__} "
                            f"{_clip(repr(value))}")
        return str(value).strip() or None


@dataclass(frozen=True)
class BadRow:
    """A row that could not be read (bad JSON, not UTF-8, too long); ``message`` names where."""

    message: str


def check_load_args(task: str, split: str, splits: tuple[str, ...], limit: int | None) -> None:
    """Reject a split the task does not have and a ``limit`` that is not a positive int."""
    if split not in splits:
        raise ConfigError(f"{task}: unknown split {split!r}; known splits: {', '.join(splits)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"{task}: limit must be a positive integer or None, got {limit!r}")


def check_on_bad_line(task: str, value: object) -> str:
    """``value`` if it is one of ``ON_BAD_LINE``, else a ``ConfigError`` naming the choices."""
    if value not in ON_BAD_LINE:
        raise ConfigError(f"{task}: option on_bad_line must be one of {', '.join(ON_BAD_LINE)}, got {value!r}")
    return str(value)


def load_items(task: str, split: str, source: str | Path | None, hub: HubSpec, make_item: Callable[[Row], T],
               limit: int | None = None, on_bad_line: str = "error") -> list[T]:
    """``make_item(row)`` for the rows of ``split`` from the hub (``source=None``) or the file ``source``.

    Local files carry one split each, so ``split`` only names the items there. At most ``limit``
    items are returned, the first good ones in source order (rows after them are not read). A bad
    row (see the module doc; ``make_item`` raises ``DataError`` for a row it cannot use) stops the
    load with that error when ``on_bad_line="error"``; with ``"skip"`` it is left out and one
    ``TeamplayWarning`` counts the skipped rows and quotes the first. A source without rows, or
    with only bad ones, is a ``DataError`` either way.
    """
    where = hub_name(hub, split) if source is None else str(source)
    rows = hub_rows(task, hub, split) if source is None else file_rows(task, Path(source))
    items: list[T] = []
    skipped: list[str] = []
    first_seen: dict[tuple[str, str], str] = {}
    with closing(rows):  # a limit stops early: close the file now, not when collected
        for entry in rows:
            try:
                items.append(_checked_item(entry, make_item, first_seen))
            except DataError as exc:
                if on_bad_line != "skip":
                    raise DataError(f"{exc} (to skip bad rows and count them instead: task option on_bad_line: "
                                    "skip, --set task.options.on_bad_line=skip)") from exc
                skipped.append(str(exc))
            if limit is not None and len(items) >= limit:
                break  # before the next row is read: rows after the limit are never looked at
    if not items:
        if skipped:
            raise DataError(f"{task}: every row of {where} is bad ({len(skipped)} skipped); first: {skipped[0]}")
        raise DataError(f"{task}: {where} is empty; it must hold at least one row")
    if skipped:
        warnings.warn(f"{task}: skipped {len(skipped)} bad row(s) of {where} (on_bad_line: skip), loaded "
                      f"{len(items)}; first: {skipped[0]}", TeamplayWarning, stacklevel=2)
    return items


def _checked_item(entry: Row | BadRow, make_item: Callable[[Row], T], first_seen: dict[tuple[str, str], str]) -> T:
    """The item of a good row; ``DataError`` for a bad one, one ``make_item`` refuses, or a repeated id."""
    if isinstance(entry, BadRow):
        raise DataError(entry.message)
    item = make_item(entry)
    _check_ids(entry, first_seen)
    return item


def _check_ids(row: Row, first_seen: dict[tuple[str, str], str]) -> None:
    """Record the row's ids (fields of ``ID_FIELDS``); ``DataError`` naming both rows on a repeat."""
    keys = [(name, str(row.data[name])) for name in ID_FIELDS if not _blank(row.data.get(name))]
    for key in keys:
        if key in first_seen:
            raise DataError(f"{row.where}: duplicate {key[0]} {key[1]!r}, already used by {first_seen[key]}; "
                            f"every row needs its own {key[0]} (remove the copy)")
    for key in keys:
        first_seen[key] = row.where


def _blank(value: object) -> bool:
    """No value: absent, null, an empty string, or NaN (how pandas writes a missing number)."""
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def file_rows(task: str, path: Path) -> Iterator[Row | BadRow]:
    """Rows of one local file, lazily; the format follows the suffix (see ``LOCAL_FORMATS``).

    A problem with one row comes as a ``BadRow``; one with the whole file (missing, unknown suffix,
    unreadable, not parseable past a point) is a ``DataError`` raised while iterating.
    """
    if not path.is_file():
        hint = "it is a directory; name the file inside it" if path.is_dir() else "no such file"
        raise DataError(f"{task}: cannot read {path}: {hint}")
    suffix = path.suffix.lower()
    readers = {".jsonl": _jsonl_rows, ".json": _json_rows, ".parquet": _parquet_rows, ".csv": _csv_rows}
    if suffix not in readers:
        raise DataError(f"{task}: {path} has suffix {suffix!r}; use one of {', '.join(LOCAL_FORMATS)}")
    try:
        yield from readers[suffix](path)
    except OSError as exc:
        raise DataError(f"{task}: cannot read {path}: {exc}") from exc


def _lines(path: Path) -> Iterator[tuple[int, bytes | int]]:
    """(line number from 1, the line's bytes) for each line of ``path``, a leading UTF-8 byte-order
    mark dropped (some editors and spreadsheet exports write one). A line longer than
    ``MAX_ROW_BYTES`` comes as its length instead: its rest is read in chunks and dropped."""
    with path.open("rb") as f:
        for number in itertools.count(1):
            raw = f.readline(MAX_ROW_BYTES + 1)
            if not raw:
                return
            if len(raw) > MAX_ROW_BYTES and not raw.endswith(b"\n"):
                size = len(raw)
                while raw and not raw.endswith(b"\n"):
                    raw = f.readline(_CHUNK)
                    size += len(raw)
                yield number, size - raw.endswith(b"\n")
                continue
            yield number, raw[len(codecs.BOM_UTF8):] if number == 1 and raw.startswith(codecs.BOM_UTF8) else raw


def _too_long(where: str, size: int) -> str:
    return (f"{where}: {size:,} bytes long, over the {MAX_ROW_BYTES:,}-byte limit of one row; "
            "is this the right file? (one problem per line)")


def _decode(raw: bytes, where: str) -> tuple[str, str | None]:
    """The line as text and ``None``, or as text with U+FFFD for the bad bytes and the message."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return raw.decode("utf-8", "replace"), (f"{where} is not UTF-8 text (byte {exc.start + 1} of the line "
                                                f"is {raw[exc.start]:#04x}); save the file as UTF-8")


def _jsonl_rows(path: Path) -> Iterator[Row | BadRow]:
    index = 0
    for number, raw in _lines(path):
        where = f"{path} line {number}"
        if isinstance(raw, int):
            yield BadRow(_too_long(where, raw))
        else:
            text, problem = _decode(raw, where)
            if problem is None and not text.strip():
                continue  # a trailing newline or a blank separator line is not a row
            yield BadRow(problem) if problem is not None else _json_object(text, index, where)
        index += 1


def _json_object(text: str, index: int, where: str) -> Row | BadRow:
    try:
        data = json.loads(text.rstrip("\r\n"))  # without the line end: an error's column is on this line
    except json.JSONDecodeError as exc:
        return BadRow(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); each line must be one JSON object")
    if not isinstance(data, dict):
        return BadRow(f"{where}: expected a JSON object, got {type(data).__name__}")
    return Row(index, where, data)


def _json_rows(path: Path) -> Iterator[Row | BadRow]:
    """The items of a ``.json`` list, each parsed on its own so that it is named by its line."""
    size = path.stat().st_size
    if size > MAX_JSON_FILE_BYTES:
        raise DataError(f"{path}: {size:,} bytes; a .json source is read whole and may hold at most "
                        f"{MAX_JSON_FILE_BYTES:,}: save it as .jsonl (one object per line), read a line at a time")
    raw = path.read_bytes().removeprefix(codecs.BOM_UTF8)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataError(f"{path} line {line} is not UTF-8 text (byte {raw[exc.start]:#04x}); "
                        "save the file as UTF-8") from exc
    decoder = json.JSONDecoder()
    pos = _JSON_SPACE.match(text).end()
    if not text.startswith("[", pos):
        value, _ = _json_value(path, decoder, text, pos)
        raise DataError(f"{path}: expected a JSON list of objects, got {type(value).__name__}")
    pos = _JSON_SPACE.match(text, pos + 1).end()
    line, counted, index = 1, 0, 0
    while not (index == 0 and text.startswith("]", pos)):
        line, counted = line + text.count("\n", counted, pos), pos
        value, end = _json_value(path, decoder, text, pos)
        where = f"{path} line {line} (item {index + 1})"
        if end - pos > MAX_ROW_BYTES:
            yield BadRow(_too_long(where, end - pos))
        elif not isinstance(value, dict):
            yield BadRow(f"{where}: expected a JSON object, got {type(value).__name__}")
        else:
            yield Row(index, where, value)
        index += 1
        pos = _JSON_SPACE.match(text, end).end()
        if not text.startswith(",", pos):
            break
        pos = _JSON_SPACE.match(text, pos + 1).end()
    if not text.startswith("]", pos):
        raise DataError(f"{path} line {text.count(chr(10), 0, pos) + 1}: not valid JSON (expected ',' or ']' "
                        f"after item {index}); a .json source must hold one list of objects")
    pos = _JSON_SPACE.match(text, pos + 1).end()
    if pos != len(text):
        raise DataError(f"{path} line {text.count(chr(10), 0, pos) + 1}: not valid JSON (more data after the "
                        "list); a .json source must hold one list of objects")


def _json_value(path: Path, decoder: json.JSONDecoder, text: str, pos: int) -> tuple[Any, int]:
    try:
        return decoder.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno}); "
                        "a .json source must hold one list of objects") from exc


def _csv_rows(path: Path) -> Iterator[Row | BadRow]:
    """Records of a CSV file with a header line; a record may span lines (a quoted newline)."""
    problems: dict[int, str] = {}  # line number -> why that line is bad (not UTF-8)

    def lines() -> Iterator[str]:
        for number, raw in _lines(path):
            if isinstance(raw, int):  # the quoting state after a dropped line is unknown: stop
                raise DataError(_too_long(f"{path} line {number}", raw) + " (CSV cannot skip such a line)")
            text, problem = _decode(raw, f"{path} line {number}")
            if problem is not None:
                problems[number] = problem
            yield text

    reader = csv.reader(lines())
    header, first, last = _csv_record(path, reader, 0)
    while header == [] and _problem(problems, first, last) is None:  # blank lines before the header
        header, first, last = _csv_record(path, reader, last)
    if header is None:
        return
    problem = _problem(problems, first, last)
    if problem is not None:
        raise DataError(f"{problem} (in the header)")
    names = [name for name in header if name]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise DataError(f"{path} line {first}: the header repeats column(s) {', '.join(map(repr, repeated))}; "
                        "every column needs its own name")
    header_line, index = first, 0
    while True:
        record, first, last = _csv_record(path, reader, last)
        if record is None:
            return
        where = f"{path} line {first}" if first == last else f"{path} lines {first}-{last}"
        problem = _problem(problems, first, last)
        if problem is None and not record:
            continue  # a blank line
        if problem is not None:
            yield BadRow(problem)
        elif len(record) != len(header):
            yield BadRow(f"{where}: {len(record)} values, but the header (line {header_line}) names "
                         f"{len(header)} columns; quote a value that holds a comma")
        else:
            yield Row(index, where, {name: value for name, value in zip(header, record, strict=True) if name})
        index += 1


def _problem(problems: Mapping[int, str], first: int, last: int) -> str | None:
    return next((problems[n] for n in range(first, last + 1) if n in problems), None)


def _csv_record(path: Path, reader: Any, last: int) -> tuple[list[str] | None, int, int]:
    """The next record (``None`` at the end) and its first and last line numbers."""
    try:
        record = next(reader, None)
    except csv.Error as exc:
        raise DataError(f"{path} line {reader.line_num}: not valid CSV ({exc}); check the quoting "
                        "around this line") from exc
    return record, last + 1, reader.line_num


def _parquet_rows(path: Path) -> Iterator[Row | BadRow]:
    import pyarrow.parquet as pq  # a dependency of `datasets`; imported here to keep startup light

    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid & co. for damaged files
        raise DataError(f"{path}: not a readable parquet file ({exc})") from exc
    index = 0
    while True:
        try:
            batch = next(batches, None)
        except Exception as exc:  # a damaged page past the footer
            raise DataError(f"{path} after row {index}: damaged parquet data ({exc})") from exc
        if batch is None:
            return
        for data in batch.to_pylist():
            where = f"{path} row {index + 1}"
            size = sum(len(v) for v in data.values() if isinstance(v, str | bytes))
            yield BadRow(_too_long(where, size)) if size > MAX_ROW_BYTES else Row(index, where, data)
            index += 1


def hub_name(hub: HubSpec, split: str) -> str:
    """``"openai/gsm8k (config main) split test"``: the dataset as messages name it."""
    return (f"hub dataset {hub.path}" + (f" (config {hub.config})" if hub.config else "")
            + f" split {hub.hub_split(split)}")


def hub_rows(task: str, hub: HubSpec, split: str) -> Iterator[Row]:
    """Rows of a hub dataset through ``datasets.load_dataset``, lazily.

    Any failure (no network, ``HF_HUB_OFFLINE=1``, a gated dataset without a token, a missing
    split) becomes a ``DataError`` that names the dataset and suggests ``source=PATH``; the
    original exception is chained for the details.
    """
    name = hub_name(hub, split)
    # one quick probe first: load_dataset retries an unreachable hub for about a minute
    reason = None if hub_offline() else probe_hub(hub.path, "dataset")
    if reason is not None:
        raise DataError(f"{task}: cannot load {name} from the Hugging Face hub: {reason}. Pass "
                        f"source=PATH (--source, a local {', '.join(LOCAL_FORMATS)} file), or set "
                        f"HF_HUB_OFFLINE=1 to read a copy already in the local cache")
    import datasets  # heavy import, only needed for hub loading

    try:
        dataset = datasets.load_dataset(hub.path, hub.config, split=hub.hub_split(split))
    except Exception as exc:  # datasets/huggingface_hub raise many unrelated types for "unreachable"
        raise DataError(
            f"{task}: could not load {name} from the Hugging Face hub ({type(exc).__name__}: {exc}). "
            + offline_advice(hub_offline())
        ) from exc
    for i in range(len(dataset)):
        yield Row(i, f"{name} row {i + 1}", dataset[i])


def offline_advice(offline: bool) -> str:
    """What to do when loading a hub dataset failed: with ``HF_HUB_OFFLINE`` set (``offline``) the
    copy is not in the local cache, and advising to set the variable would send the user in a circle.

    >>> offline_advice(True).startswith("HF_HUB_OFFLINE is set and no copy is in the local cache")
    True
    >>> "set HF_HUB_OFFLINE=1" in offline_advice(False)
    True
    """
    local = f"pass source=PATH (a local {', '.join(LOCAL_FORMATS)} file)"
    if offline:
        return (f"HF_HUB_OFFLINE is set and no copy is in the local cache: {local}, or unset HF_HUB_OFFLINE "
                f"once to download it into the cache")
    return (f"The hub may be unreachable or the dataset gated; download it and {local}, or set "
            f"HF_HUB_OFFLINE=1 to fail fast")


def _clip(text: str, size: int = 60) -> str:
    return text if len(text) <= size else text[:size] + "..."
