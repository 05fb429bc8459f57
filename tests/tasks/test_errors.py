"""Errors a user can act on: each names what was tried, where, and what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from teamplay.envs.tasks import get_task, task_names
from teamplay.errors import ConfigError, DataError, TeamplayError


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_unknown_task_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        get_task("gsm9k")
    message = str(info.value)
    assert "'gsm9k'" in message
    for name in task_names():
        assert name in message
    assert isinstance(info.value, TeamplayError)


def test_unknown_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="does not take options \\['level'\\]"):
        get_task("gsm8k", level=2)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "test.jsonl"
    with pytest.raises(DataError, match="cannot read .*nope/test.jsonl: no such file"):
        get_task("gsm8k").load("test", source=str(missing))


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="it is a directory"):
        get_task("math500").load("test", source=tmp_path)


def test_unknown_suffix(tmp_path: Path) -> None:
    path = _write(tmp_path / "data.txt", ["hello"])
    with pytest.raises(DataError, match=r"suffix '.txt'; use one of .jsonl, .json, .parquet, .csv"):
        get_task("gsm8k").load("test", source=path)


def test_bad_json_names_file_and_line(tmp_path: Path) -> None:
    good = json.dumps({"question": "1+1?", "answer": "2\n#### 2"})
    path = _write(tmp_path / "g.jsonl", [good, "", good, '{"question": "oops",'])
    with pytest.raises(DataError) as info:
        get_task("gsm8k").load("test", source=path)
    # line 4 of the file (the blank line 2 is skipped but still counted)
    assert f"{path} line 4: not valid JSON" in str(info.value)


def test_missing_field_names_file_line_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path / "g.jsonl", [json.dumps({"question": "1+1?", "answer": "#### 2"}),
                                         json.dumps({"question": "2+2?", "solution": "#### 4"})])
    with pytest.raises(DataError) as info:
        get_task("gsm8k").load("test", source=path)
    assert str(info.value).startswith(f"{path} line 2: missing field 'answer' (fields present: question, "
                                      "solution)")


def test_gsm8k_answer_without_marker(tmp_path: Path) -> None:
    path = _write(tmp_path / "g.jsonl", [json.dumps({"question": "1+1?", "answer": "It is two."})])
    with pytest.raises(DataError, match="line 1: field 'answer' must end with '#### N'"):
        get_task("gsm8k").load("test", source=path)


def test_math_row_without_answer_or_box(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.jsonl", [json.dumps({"problem": "1+1?", "solution": "It is 2."})])
    with pytest.raises(DataError, match=r"line 1: needs a non-empty 'answer' field or a 'solution'"):
        get_task("math").load("test", source=path)


def test_gpqa_csv_missing_column_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "gpqa.csv"
    path.write_text("Question,Correct Answer,Incorrect Answer 1,Incorrect Answer 2\n"
                    "Q?,a,b,c\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"gpqa.csv line 2: missing field 'Incorrect Answer 3'"):
        get_task("gpqa").load("test", source=path)


def test_a_non_object_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "g.jsonl", ["[1, 2]"])
    with pytest.raises(DataError, match="line 1: expected a JSON object, got list"):
        get_task("gsm8k").load("test", source=path)


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_empty_file_is_an_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match="empty.jsonl is empty"):
        get_task("gsm8k").load("test", source=path)


def test_empty_csv_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "gpqa.csv"
    path.write_text("Question,Correct Answer\n", encoding="utf-8")  # a header and no rows
    with pytest.raises(DataError, match="is empty"):
        get_task("gpqa").load("test", source=path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"question": "caf\xe9", "answer": "#### 1"}\n')
    with pytest.raises(DataError, match="is not UTF-8"):
        get_task("gsm8k").load("test", source=path)


def test_unknown_split_and_bad_limit() -> None:
    with pytest.raises(ConfigError, match="unknown split 'dev'; known splits: train, test"):
        get_task("gsm8k").load("dev")
    with pytest.raises(ConfigError, match="limit must be a positive integer"):
        get_task("arith").load("test", limit=0)


@pytest.mark.parametrize("name", ["gsm8k", "math", "math500", "gpqa"])
def test_unreachable_hub_says_so_and_suggests_source(name: str, monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    # offline mode is how the hub libraries report "unreachable" without waiting on the network
    datasets = pytest.importorskip("datasets")
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    # empty caches, so that a copy downloaded earlier on this machine cannot answer
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(DataError) as info:
        get_task(name).load("test")
    message = str(info.value)
    assert "Hugging Face hub" in message and "source=PATH" in message
    assert get_task(name).hub.path in message  # type: ignore[attr-defined]
    # the variable is already set: advising to set it would send the user in a circle
    assert "HF_HUB_OFFLINE is set" in message and "set HF_HUB_OFFLINE=1" not in message
