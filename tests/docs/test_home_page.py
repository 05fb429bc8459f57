"""The docs home page is a front door: an install line, a quick start of at most ten commands that
runs (with the tiny model, as every page's commands run in ``test_tutorials.py``) and whose credit
command shows advantages that are not all zero, and figure captions that claim what the stored
results give and no more.

A caption's intervals must be cells of the "where credit paid" table, which
``benchmarks.credit_paid`` computes from the committed per-seed results
(``benchmarks/results/``); the home page's caption is written from those cells
(``docs/captions.py``), and the README's figure caption is checked against the same table.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from benchmarks import credit_paid
from tests.docs.test_tutorials import blocks, commands

ROOT = Path(__file__).resolve().parents[2]
INDEX = ROOT / "docs" / "index.md"
INTERVAL = re.compile(r"[+-]\d\.\d{3} ± \d\.\d{3}")


@pytest.fixture(scope="module")
def captions():
    # the module docs/gen_reference.py imports (docs/ on sys.path), so its cached rows are shared
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    import captions

    return captions


@pytest.fixture(scope="module")
def stored_table() -> str:
    return credit_paid.table(links=False)


def in_section(heading: str):
    """The fenced blocks of the home page under ``## heading`` (up to the next ``##``)."""
    lines = INDEX.read_text(encoding="utf-8").splitlines()
    first = lines.index(f"## {heading}") + 1
    last = next((k for k in range(first, len(lines)) if lines[k].startswith("## ")), len(lines))
    return [b for b in blocks(INDEX) if first < b.line <= last]


def test_the_home_page_has_an_install_line_and_a_ten_line_quick_start():
    assert any("make install" in b.body for b in in_section("Install"))
    quick = [b for b in in_section("Quick start") if b.lang == "bash"]
    assert len(quick) == 1 and quick[0].not_run is None  # run below, as every page's commands are
    lines = commands(quick[0].body)
    assert 4 <= len(lines) <= 10
    assert [args[1] for args in lines[:2]] == ["list", "play"]
    assert lines[-1][1] == "train", "the quick start ends in training a team"


def test_the_quick_starts_credit_is_not_all_zero(tmp_path, monkeypatch):
    """The whole quick start runs in test_tutorials (``test_page_runs[index.md]``); here its
    scripted evaluation and credit command again, to read what the credit command prints."""
    from typer.testing import CliRunner

    from teamplay.cli import app

    quick = commands(next(b for b in in_section("Quick start") if b.lang == "bash").body)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for args in (a for a in quick if a[1] in ("eval", "credit") and "--card" not in a):
        result = runner.invoke(app, args[1:], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    # the voters are right half the time, so rewards differ within a problem's episodes and the
    # advantages the credit command prints are not all zero
    assert re.search(r"[+-]\d\.\d*[1-9]", result.output), result.output


def test_the_home_page_caption_is_the_one_the_stored_results_give(captions):
    text = INDEX.read_text(encoding="utf-8")
    assert captions.with_caption(text, captions.SPLIT_GAIN, captions.split_gain_caption()) == text, (
        "docs/index.md: the figure caption differs from the stored results; run python docs/gen_reference.py")


def test_the_caption_follows_the_readings_not_a_fixed_story(captions, monkeypatch):
    rows = captions.oracle_rows()
    rerun8 = captions.RERUNS[8]
    again8 = rerun8.removesuffix(".json") + "-replication.json"
    assert rows[rerun8]["reading"] == "floor fails"  # the clean K = 8 rerun's first sitting as stored
    assert rows[f"{again8}#pooled"]["reading"].startswith("paid")  # and pooled with its new seeds
    caption = captions.split_gain_caption()
    assert "settled at K = 4, 8" in caption and "costs much" not in caption
    # had the pooled K = 8 row not paid, the caption would say it is open
    unpaid = {**rows, f"{again8}#pooled": {**rows[f"{again8}#pooled"], "reading": "null"}}
    monkeypatch.setattr(captions, "oracle_rows", lambda: unpaid)
    assert "open at K = 8" in captions.split_gain_caption()


@pytest.mark.parametrize("page", ["docs/index.md", "README.md"])
def test_every_interval_in_a_figure_caption_is_a_cell_of_the_stored_table(page, stored_table):
    text = (ROOT / page).read_text(encoding="utf-8")
    cells = set(INTERVAL.findall(stored_table))
    figure = text.index("credit_arena_split_gain.png")
    caption = text[figure:text.index("*\n", text.index("*", figure + 1)) + 1]
    found = INTERVAL.findall(caption)
    assert found, f"{page}: no interval in the figure's caption"
    assert set(found) <= cells, f"{page}: {sorted(set(found) - cells)} is no stored comparison's interval"
