"""The transcript browser shades tokens of messages that got token-level credit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from teamplay.errors import DataError
from teamplay.report.data import load_folder
from teamplay.report.transcripts import episode_panel
from tests.report.fake_folders import episode, write_run


def _append(run: Path, row: dict) -> None:
    with (run / "episodes.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def test_token_credited_message_is_shaded_per_token(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", steps=1)
    ep = episode(1, 7, True, text="a<b>c")  # 3 tokens: "a", "<b>", "c"; the HTML must be escaped
    _append(run, {"step": 1, **ep, "advantages": [0.8, 0.01, 0.8],
                  "token_advantages": [[0.4, 1.6, 0.0], None, None],
                  "token_pieces": [["a", "<b>", "c"], None, None]})
    logged = [e for e in load_folder(run).episodes if e.tokens is not None]
    # exact: values this test logged, read back
    assert len(logged) == 1 and logged[0].tokens[0] == (("a", 0.4), ("<b>", 1.6), ("c", 0.0))
    html = episode_panel(logged[0], 0)
    spans = re.findall(r'<span class="tok" style="background: ([^"]+)" title="([^"]+)">([^<]*)</span>', html)
    assert [s[2] for s in spans] == ["a", "&lt;b&gt;", "c"]
    # scale = max |token advantage| = 1.6: "<b>" at full strength (alpha 0.06 + 0.36 = 0.42),
    # "a" at 0.4 / 1.6 = 0.25 (alpha 0.06 + 0.09 = 0.15), "c" (0) neutral grey
    assert spans[1][0].endswith("0.420)") and spans[0][0].endswith("0.150)") and "148, 163, 184" in spans[2][0]
    assert html.count('class="tok"') == 3  # the other two messages are shaded as whole messages
    assert "token credit" in html


def test_malformed_token_fields_are_errors(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", steps=1)
    _append(run, {"step": 1, **episode(1, 7, True), "advantages": [0.8, 0.01, 0.8],
                  "token_advantages": [[0.4, 1.6], None, None], "token_pieces": [["a"], None, None]})
    with pytest.raises(DataError, match="message 0: token_advantages and token_pieces"):
        load_folder(run)
