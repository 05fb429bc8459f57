"""``read_json``: the value of a good file, one error line naming the file for each bad one."""

from __future__ import annotations

import pytest

from teamplay.errors import ConfigError, DataError
from teamplay.json_files import read_json


def test_a_good_file_gives_its_value(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"step": 3, "names": ["é", null]}', encoding="utf-8")
    assert read_json(path) == {"step": 3, "names": ["é", None]}


def _message(path, **kwargs) -> str:
    with pytest.raises(DataError) as info:
        read_json(path, **kwargs)
    assert "\n" not in str(info.value) and info.value.__cause__ is None
    return str(info.value)


def test_each_bad_file_is_one_line_naming_it_and_what_was_wrong(tmp_path):
    assert _message(tmp_path / "missing.json") == f"{tmp_path / 'missing.json'}: does not exist"
    assert _message(tmp_path).startswith(f"{tmp_path}: cannot be read (")  # a folder
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"a": "\xe9"}')  # Latin-1 e-acute at offset 7: a UTF-8 lead byte, no continuation after it
    assert _message(latin) == f"{latin}: not UTF-8 text (invalid continuation byte at offset 7)"
    torn = tmp_path / "torn.json"
    torn.write_text('{"a": 1,\n "b": ', encoding="utf-8")  # ends where line 2's value should start
    assert _message(torn) == f"{torn}: not valid JSON (Expecting value at line 2, column 7)"


def test_context_goes_in_front_fix_behind_and_the_error_class_is_the_callers(tmp_path):
    path = tmp_path / "results.json"
    path.write_text("", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_json(path, ConfigError, context="teamplay credit", fix="rerun teamplay eval")
    assert str(info.value) == (f"teamplay credit: {path}: not valid JSON (Expecting value at line 1, column 1); "
                               f"rerun teamplay eval")
