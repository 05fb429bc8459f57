"""Bad data files: each is one clear error naming the file and line, or a counted skip when asked.

Every class of damage (malformed JSON, missing or empty fields, duplicate ids, non-UTF-8 bytes, a
line of tens of megabytes, an empty file) is written into ``tmp_path`` in each local format the
tasks read (.jsonl, .json, .csv, .parquet), loaded through the task as a user would, and the
message is checked for the file and the line. A few go through ``teamplay eval`` too: exit status
2, exactly one ``error:`` line, no traceback. ``on_bad_line: skip`` keeps the good rows and says
in one warning how many were left out.
"""

from __future__ import annotations

import csv
import json
import re
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.sources import MAX_ROW_BYTES
from teamplay.errors import ConfigError, DataError, TeamplayWarning

GOOD = {"question": "What is 1 + 1?", "answer": "1 + 1 = 2\n#### 2"}
GPQA_HEADER = ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
               "Incorrect Answer 3"]


def jsonl(path: Path, *lines: str | dict) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
                    encoding="utf-8")
    return path


def csv_file(path: Path, *records: list[str]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows(records)
    return path


def load_error(path: Path, task: str = "gsm8k", **options: object) -> str:
    with pytest.raises(DataError) as info:
        get_task(task, **options).load("test", source=path)
    return str(info.value)


def gpqa_row(record_id: str, question: str = "Which particle carries light?") -> list[str]:
    return [record_id, question, "Photon", "Gluon", "W boson", "Graviton"]


# -- one case per class of damage and format: (file name, writer, the start of the message) --

def _json_syntax(p: Path) -> Path:
    return jsonl(p / "g.jsonl", GOOD, "", GOOD, '{"question": "oops", "answer": ')


def _json_not_object(p: Path) -> Path:
    return jsonl(p / "g.jsonl", GOOD, "[1, 2]")


def _missing_field(p: Path) -> Path:
    return jsonl(p / "g.jsonl", GOOD, {"question": "2+2?", "solution": "#### 4"})


def _empty_answer(p: Path) -> Path:
    return jsonl(p / "g.jsonl", GOOD, GOOD, {"question": "2+2?", "answer": "  \n "})


def _null_answer(p: Path) -> Path:
    return jsonl(p / "g.jsonl", {"question": "2+2?", "answer": None})


def _list_question(p: Path) -> Path:
    return jsonl(p / "g.jsonl", GOOD, {"question": ["2+2?"], "answer": "#### 4"})


def _not_utf8(p: Path) -> Path:
    path = p / "g.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b'\n{"question": "caf\xe9?", "answer": "#### 1"}\n')
    return path


def _duplicate_id(p: Path) -> Path:
    return jsonl(p / "g.jsonl", {**GOOD, "id": "a"}, {**GOOD, "id": "b"}, {**GOOD, "id": "a"})


def _json_list_syntax(p: Path) -> Path:
    path = p / "g.json"
    path.write_text("[\n" + json.dumps(GOOD) + ",\n" + json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n]\n",
                    encoding="utf-8")  # the comma after item 2 is missing
    return path


def _json_list_missing_field(p: Path) -> Path:
    path = p / "g.json"
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in (GOOD, GOOD, {"question": "Q"})) + "\n]",
                    encoding="utf-8")
    return path


def _json_list_not_utf8(p: Path) -> Path:
    path = p / "g.json"
    path.write_bytes(b"[\n" + json.dumps(GOOD).encode() + b',\n{"question": "\xff", "answer": "#### 1"}\n]')
    return path


def _json_list_trailing(p: Path) -> Path:
    path = p / "g.json"
    path.write_text(json.dumps([GOOD]) + "\n\n[]", encoding="utf-8")
    return path


def _csv_missing_value(p: Path) -> Path:
    return csv_file(p / "gpqa.csv", GPQA_HEADER, gpqa_row("r1"), ["r2", "Q?", "", "b", "c", "d"])


def _csv_extra_value(p: Path) -> Path:
    return csv_file(p / "gpqa.csv", GPQA_HEADER, gpqa_row("r1"), [*gpqa_row("r2"), "spilled, unquoted"])


def _csv_not_utf8(p: Path) -> Path:
    path = csv_file(p / "gpqa.csv", GPQA_HEADER, gpqa_row("r1"))
    path.write_bytes(path.read_bytes() + "r2,Caf\u00e9?,a,b,c,d\n".encode("latin-1"))
    return path


def _csv_duplicate_id(p: Path) -> Path:
    return csv_file(p / "gpqa.csv", GPQA_HEADER, gpqa_row("r1"), gpqa_row("r2", "Another?"),
                    gpqa_row("r1", "Copied?"))


def _csv_duplicate_column(p: Path) -> Path:
    return csv_file(p / "gpqa.csv", [*GPQA_HEADER, "Question"], [*gpqa_row("r1"), "again?"])


def _csv_field_over_csv_limit(p: Path) -> Path:
    return csv_file(p / "gpqa.csv", GPQA_HEADER, gpqa_row("r1"), gpqa_row("r2", "x" * 200_000))


def _parquet_missing(p: Path) -> Path:
    path = p / "g.parquet"
    pq.write_table(pa.table({"question": ["Q0", "Q1", None], "answer": ["#### 1", "#### 2", "#### 3"]}), path)
    return path


def _parquet_duplicate_id(p: Path) -> Path:
    path = p / "m.parquet"
    pq.write_table(pa.table({"problem": ["P0", "P1"], "answer": ["1", "2"], "unique_id": ["u", "u"]}), path)
    return path


def _parquet_damaged(p: Path) -> Path:
    path = p / "g.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 100 + b"not really parquet")
    return path


CASES: list[tuple[str, Callable[[Path], Path], str, str]] = [
    # (task, writer, where the message must point, what it must say)
    ("gsm8k", _json_syntax, "g.jsonl line 4: ", "not valid JSON (Expecting value at column 32)"),
    ("gsm8k", _json_not_object, "g.jsonl line 2: ", "expected a JSON object, got list"),
    ("gsm8k", _missing_field, "g.jsonl line 2: ", "missing field 'answer' (fields present: question, solution)"),
    ("gsm8k", _empty_answer, "g.jsonl line 3: ", "missing field 'answer'"),
    ("gsm8k", _null_answer, "g.jsonl line 1: ", "missing field 'answer'"),
    ("gsm8k", _list_question, "g.jsonl line 2: ", "field 'question' must be text, got list"),
    ("gsm8k", _not_utf8, "g.jsonl line 2 ", "is not UTF-8 text (byte 18 of the line is 0xe9)"),
    ("gsm8k", _duplicate_id, "g.jsonl line 3: ", "duplicate id 'a', already used by {path} line 1"),
    ("gsm8k", _json_list_syntax, "g.json line 4: ", "not valid JSON (expected ',' or ']' after item 2"),
    ("gsm8k", _json_list_missing_field, "g.json line 4 (item 3): ", "missing field 'answer'"),
    ("gsm8k", _json_list_not_utf8, "g.json line 3 ", "is not UTF-8 text (byte 0xff)"),
    ("gsm8k", _json_list_trailing, "g.json line 3: ", "not valid JSON (more data after the list)"),
    ("gpqa", _csv_missing_value, "gpqa.csv line 3: ", "missing field 'Correct Answer'"),
    ("gpqa", _csv_extra_value, "gpqa.csv line 3: ", "7 values, but the header (line 1) names 6 columns"),
    ("gpqa", _csv_not_utf8, "gpqa.csv line 3 ", "is not UTF-8 text"),
    ("gpqa", _csv_duplicate_id, "gpqa.csv line 4: ", "duplicate Record ID 'r1', already used by {path} line 2"),
    ("gpqa", _csv_duplicate_column, "gpqa.csv line 1: ", "the header repeats column(s) 'Question'"),
    ("gpqa", _csv_field_over_csv_limit, "gpqa.csv line 3: ", "not valid CSV (field larger than field limit"),
    ("gsm8k", _parquet_missing, "g.parquet row 3: ", "missing field 'question'"),
    ("math500", _parquet_duplicate_id, "m.parquet row 2: ", "duplicate unique_id 'u', already used by {path} row 1"),
    ("gsm8k", _parquet_damaged, "g.parquet: ", "not a readable parquet file"),
]


@pytest.mark.parametrize("task, write, where, says", CASES, ids=[c[1].__name__.strip("_") for c in CASES])
def test_a_bad_file_is_one_error_naming_file_and_line(tmp_path, task, write, where, says):
    path = write(tmp_path)
    message = load_error(path, task)
    assert f"{path.parent}/{where}" in message
    assert says.format(path=path) in message
    assert "\n" not in message.strip()


@pytest.mark.parametrize("name, content", [
    ("e.jsonl", b""), ("e.jsonl", b"\n\n  \n"), ("e.jsonl", b"\xef\xbb\xbf\n"), ("e.json", b"[]"),
    ("e.json", b" [ \n ] \n"), ("e.csv", b"question,answer\n"), ("e.csv", b""), ("e.csv", b"\n\n"),
])
def test_an_empty_file_is_an_error_naming_it(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    assert f"gsm8k: {path} is empty; it must hold at least one row" in load_error(path)


def test_an_empty_parquet_is_an_error_naming_it(tmp_path):
    path = tmp_path / "e.parquet"
    pq.write_table(pa.table({"question": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), path)
    assert f"{path} is empty" in load_error(path)


def test_a_line_of_tens_of_megabytes_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "huge.jsonl"
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps(GOOD) + "\n")
        f.write(json.dumps({"question": "x" * (30 << 20), "answer": "#### 1"}) + "\n")  # 30 MiB
    tracemalloc.start()
    try:
        message = load_error(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # 30 MiB of "x" (31,457,280 bytes) + '{"question": "' (14) + '", "answer": "#### 1"}' (22)
    assert f"{path} line 2: 31,457,316 bytes long, over the 1,048,576-byte limit of one row" in message
    assert peak < 4 * MAX_ROW_BYTES  # the line is 30 MiB: it was read in bounded pieces


def test_the_row_limit_is_exact(tmp_path):
    # a line of exactly MAX_ROW_BYTES bytes (its newline not counted) is read; one more byte is not
    fits = {"question": "", "answer": "#### 7"}
    fits["question"] = "q" * (MAX_ROW_BYTES - len(json.dumps(fits)))
    path = jsonl(tmp_path / "edge.jsonl", fits)
    assert get_task("gsm8k").load("test", source=path)[0].reference == "7"
    fits["question"] += "q"
    assert "line 1: 1,048,577 bytes long" in load_error(jsonl(path, fits))


@pytest.mark.parametrize("suffix", [".json", ".csv", ".parquet"])
def test_an_overlong_row_in_other_formats(tmp_path, suffix):
    big = {"question": "y" * (MAX_ROW_BYTES + 10), "answer": "#### 1"}
    path = tmp_path / f"big{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps([GOOD, big], indent=1), encoding="utf-8")
        where = "line 6 (item 2)"  # "[", then item 1 on lines 2-5: "{", two fields, "}"
    elif suffix == ".csv":
        csv_file(path, ["question", "answer"], list(GOOD.values()), list(big.values()))
        where = "line 4"  # the header, then GOOD on lines 2-3 (its answer holds a newline)
    else:
        pq.write_table(pa.Table.from_pylist([GOOD, big]), path)
        where = "row 2"
    message = load_error(path)
    assert f"{path} {where}: " in message and "over the 1,048,576-byte limit of one row" in message


def test_a_json_file_too_big_to_read_whole_names_jsonl(tmp_path, monkeypatch):
    import teamplay.envs.tasks.sources as sources

    monkeypatch.setattr(sources, "MAX_JSON_FILE_BYTES", 100)  # 100 bytes stand in for 256 MiB here
    path = tmp_path / "g.json"
    path.write_text(json.dumps([GOOD, GOOD]), encoding="utf-8")
    assert "read whole and may hold at most 100: save it as .jsonl" in load_error(path)


def test_a_json_file_that_is_not_a_list(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps(GOOD), encoding="utf-8")
    assert f"{path}: expected a JSON list of objects, got dict" in load_error(path)


def test_a_limit_stops_before_the_rows_after_it(tmp_path):
    path = jsonl(tmp_path / "g.jsonl", GOOD, "{ not json")
    assert [i.id for i in get_task("gsm8k").load("test", source=path, limit=1)] == ["gsm8k/test/0"]


def test_missing_ids_are_not_duplicates(tmp_path):
    # pandas writes a missing number as NaN: two rows without an id are not two rows with id "nan"
    path = tmp_path / "m.parquet"
    pq.write_table(pa.table({"problem": ["P0", "P1", "P2"], "answer": ["1", "2", "3"],
                             "idx": [float("nan"), float("nan"), 4.0]}), path)
    assert len(get_task("math").load("test", source=path)) == 3


def test_an_empty_hub_split_and_a_bad_hub_row_name_the_dataset(monkeypatch):
    import teamplay.envs.tasks.sources as sources

    monkeypatch.setattr(sources, "hub_rows", lambda task, hub, split: (row for row in ()))
    with pytest.raises(DataError, match=r"^gsm8k: hub dataset openai/gsm8k \(config main\) split test is empty"):
        get_task("gsm8k").load("test")
    name = sources.hub_name(get_task("gsm8k").hub, "test")
    bad = sources.Row(0, f"{name} row 1", {"question": "Q?", "answer": ""})
    monkeypatch.setattr(sources, "hub_rows", lambda task, hub, split: (row for row in [bad]))
    with pytest.raises(DataError, match=r"split test row 1: missing field 'answer'"):
        get_task("gsm8k").load("test")


# -- on_bad_line: skip --

def _skip_load(path: Path, task: str = "gsm8k", **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        items = get_task(task, on_bad_line="skip").load("test", source=path, **kwargs)
    return items, [str(w.message) for w in caught if issubclass(w.category, TeamplayWarning)]


def test_skip_keeps_the_good_rows_and_counts_the_others_in_one_warning(tmp_path):
    path = tmp_path / "g.jsonl"
    with path.open("wb") as f:
        f.write(json.dumps({**GOOD, "id": 1}).encode() + b"\n")                          # line 1: row 0
        f.write(b'{"question": "broken\n')                                               # line 2: row 1
        f.write(b"\n")                                                                   # line 3: blank
        f.write(json.dumps({"question": "Q?", "answer": "#### 3", "id": 2}).encode() + b"\n")  # 4: row 2
        f.write(b'{"question": "' + b"z" * (3 * MAX_ROW_BYTES) + b'"}\n')                # line 5: row 3
        f.write(b'{"question": "\xe9", "answer": "#### 4"}\n')                          # line 6: row 4
        f.write(json.dumps({**GOOD, "id": 1}).encode() + b"\n")                          # line 7: duplicate
        f.write(json.dumps({"question": "Last?", "answer": "#### 5"}).encode() + b"\n")  # line 8: row 6
    items, messages = _skip_load(path)
    # ids keep the source positions: skipping a row does not renumber the rows after it
    assert [(i.id, i.reference) for i in items] == [("gsm8k/test/0", "2"), ("gsm8k/test/2", "3"),
                                                    ("gsm8k/test/6", "5")]
    assert len(messages) == 1
    assert messages[0].startswith(f"gsm8k: skipped 4 bad row(s) of {path} (on_bad_line: skip), loaded 3; "
                                  f"first: {path} line 2: not valid JSON")


def test_skip_with_a_limit_reads_until_enough_good_rows(tmp_path):
    path = jsonl(tmp_path / "g.jsonl", GOOD, "{", GOOD, GOOD)
    items, messages = _skip_load(path, limit=2)
    assert [i.id for i in items] == ["gsm8k/test/0", "gsm8k/test/2"]
    assert len(messages) == 1 and "skipped 1 bad row(s)" in messages[0]


def test_skip_keeps_the_first_of_duplicate_ids(tmp_path):
    path = csv_file(tmp_path / "gpqa.csv", GPQA_HEADER, gpqa_row("r1", "First?"), gpqa_row("r1", "Copy?"))
    items, messages = _skip_load(path, "gpqa")
    assert [i.prompt.split("\n")[0] for i in items] == ["First?"]
    assert "duplicate Record ID 'r1', already used by" in messages[0]


def test_skip_of_every_row_is_still_an_error(tmp_path):
    path = jsonl(tmp_path / "g.jsonl", "{", "[1]")
    message = load_error(path, on_bad_line="skip")
    assert message.startswith(f"gsm8k: every row of {path} is bad (2 skipped); first: {path} line 1: ")


def test_skip_does_not_cover_a_file_that_cannot_be_parsed_past_a_point(tmp_path):
    assert "not valid JSON" in load_error(_json_list_syntax(tmp_path), on_bad_line="skip")
    path = csv_file(tmp_path / "g.csv", ["question", "answer"], ["w" * (2 * MAX_ROW_BYTES), "#### 1"])
    # 2 MiB of "w" (2,097,152) + ",#### 1" (7) + the "\r" of csv's "\r\n" (1); the "\n" is not counted
    assert "line 2: 2,097,160 bytes long" in load_error(path, on_bad_line="skip")


def test_without_skip_the_error_says_how_to_skip(tmp_path):
    assert "--set task.options.on_bad_line=skip" in load_error(_json_syntax(tmp_path))


@pytest.mark.parametrize("value", ["ignore", True, None])
def test_on_bad_line_takes_only_error_or_skip(value):
    with pytest.raises(ConfigError, match="on_bad_line must be one of error, skip"):
        get_task("math", on_bad_line=value)


# -- through the command line, as a user runs it --

runner = CliRunner()


def run_eval(source: Path, *extra: str, task: str = "gsm8k"):
    result = runner.invoke(app, ["eval", "--task", task, "--source", str(source), "--backend", "scripted",
                                 "--policy", "truthful", "-o", str(source.parent / "out"), *extra])
    lines = result.output.splitlines()
    return result, [line for line in lines if line.startswith("error:")], [
        line for line in lines if line.startswith("warning:")]


@pytest.mark.parametrize("write, where", [
    (_json_syntax, "g.jsonl line 4: not valid JSON"),
    (_not_utf8, "g.jsonl line 2 is not UTF-8"),
    (_duplicate_id, "g.jsonl line 3: duplicate id 'a', already used by"),
    (_json_list_missing_field, "g.json line 4 (item 3): missing field 'answer'"),
    (lambda p: jsonl(p / "g.jsonl", GOOD, {"question": "x" * (20 << 20), "answer": "#### 1"}),
     "g.jsonl line 2: 20,971,556 bytes long"),  # 20 MiB + 36 bytes of JSON around it
    (lambda p: jsonl(p / "g.jsonl", "", ""), "g.jsonl is empty"),
], ids=["bad-json", "not-utf8", "duplicate-id", "json-missing-field", "20MB-line", "empty"])
def test_cli_bad_file_is_one_error_line(tmp_path, write, where):
    path = write(tmp_path)
    result, errors, _ = run_eval(path)
    # status 2 is the handled error; an escaped exception would be status 1 with result.exception set
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    assert len(errors) == 1, result.output
    assert f"{tmp_path}/{where}" in errors[0]


def test_cli_gpqa_csv_duplicate_is_one_error_line(tmp_path):
    result, errors, _ = run_eval(_csv_duplicate_id(tmp_path), task="gpqa")
    assert result.exit_code == 2 and len(errors) == 1, result.output
    assert re.search(r"gpqa\.csv line 4: duplicate Record ID 'r1', already used by .*gpqa\.csv line 2", errors[0])


def test_cli_skip_runs_on_the_good_rows_with_one_warning_line(tmp_path):
    path = jsonl(tmp_path / "g.jsonl", GOOD, '{"question": ', {"question": "3 + 4?", "answer": "#### 7"})
    result, errors, warning_lines = run_eval(path, "--set", "task.options.on_bad_line=skip")
    assert result.exit_code == 0, result.output
    assert errors == [] and len(warning_lines) == 1, result.output
    assert f"skipped 1 bad row(s) of {path}" in warning_lines[0] and "line 2: not valid JSON" in warning_lines[0]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["metrics"]["episodes"] == 2


# -- any valid file round-trips --

texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(str.strip)
rows = st.lists(st.tuples(texts, st.integers(-10**6, 10**6)), min_size=1, max_size=8)


def _write_valid(path: Path, fmt: str, data: list[tuple[str, int]], bom: bool, loose: bool) -> Path:
    """``data`` in format ``fmt``; ``bom``: a UTF-8 byte-order mark first; ``loose``: blank lines
    between JSONL rows, an indented .json, raw (not escaped) non-ASCII characters."""
    records = [{"id": k, "question": q, "answer": f"work\n#### {a}"} for k, (q, a) in enumerate(data)]
    if fmt == ".parquet":
        pq.write_table(pa.Table.from_pylist(records), path)
        return path
    if fmt == ".jsonl":
        sep = "\n\n" if loose else "\n"
        text = sep.join(json.dumps(r, ensure_ascii=not loose) for r in records) + "\n"
    elif fmt == ".json":
        text = json.dumps(records, indent=1 if loose else None, ensure_ascii=not loose)
    else:
        with path.open("w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, ["id", "question", "answer"])
            writer.writeheader()
            writer.writerows(records)
        text = path.read_bytes().decode("utf-8")  # as written: read_text would turn a "\r" in a field into "\n"
    path.write_bytes(("\ufeff" if bom else "").encode() + text.encode("utf-8"))
    return path


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, fmt=st.sampled_from([".jsonl", ".json", ".csv", ".parquet"]), bom=st.booleans(),
       loose=st.booleans())
def test_any_valid_file_round_trips_its_items(tmp_path, data, fmt, bom, loose):
    path = _write_valid(tmp_path / f"valid{fmt}", fmt, data, bom and fmt != ".parquet", loose)
    items = get_task("gsm8k").load("test", source=path)
    assert len(items) == len(data)
    assert [(i.id, i.prompt, i.reference) for i in items] == [
        (f"gsm8k/test/{k}", q.strip(), str(a)) for k, (q, a) in enumerate(data)]
