"""The report in a real headless chromium: no console errors, figures decoded, the transcript
browser works, injected text never runs, and a screenshot for people to look at.

The browser is driven through the DevTools protocol over a pipe (see tests/report/cdp.py): console
errors, uncaught exceptions, CSP violations and alert() dialogs arrive as protocol events. The
tests skip when no chromium is installed; CI installs it with tests/report/install_chromium.sh.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from teamplay.report import report_command
from tests.report.cdp import Chromium, find_chromium
from tests.report.fake_folders import INJECTION, write_eval, write_run

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1400, 2000


@pytest.fixture
def browser(tmp_path: Path):
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (nor $TEAMPLAY_CHROMIUM); install it with "
                    "tests/report/install_chromium.sh")
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    with Chromium(binary, profile, WIDTH, HEIGHT) as chromium:
        yield chromium


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])  # IHDR width, height


def choose(browser: Chromium, select_id: str, value: str) -> None:
    """Pick ``value`` in a <select> as a user would: set it and fire its change event."""
    browser.evaluate(f"{{ const s = document.getElementById('{select_id}'); s.value = '{value}'; "
                     f"s.dispatchEvent(new Event('change')); }}")


VISIBLE = "Array.from(document.querySelectorAll('article.episode')).filter(e => !e.hidden)"


def test_detector_sees_console_errors_exceptions_and_dialogs(browser: Chromium, tmp_path: Path) -> None:
    """Control: the checks below could fail. A page that logs an error, throws and alerts is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>console.error('boom'); alert('hi'); "
                   "undefinedFunction();</script></body></html>", encoding="utf-8")
    browser.open(bad.as_uri())
    browser.settle()
    assert browser.problems.console_errors == ["boom"]
    assert browser.problems.dialogs == ["alert: hi"]
    assert len(browser.problems.exceptions) == 1 and "undefinedFunction" in browser.problems.exceptions[0]


def test_run_report_in_browser(browser: Chromium, tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", speak_rate=True)
    page = report_command([run], compare=False, output=None)
    browser.open(page.resolve().as_uri())
    browser.settle()
    assert browser.problems.all() == []

    # figures: every <img> is an embedded PNG that the browser decoded
    images = browser.evaluate("Array.from(document.images).map(i => [i.src.slice(0, 22), i.naturalWidth])")
    # reward, held-out, KL, clip, ranges, tokens, credit share, mean advantage, agent credit, speak rate,
    # eval bars
    assert len(images) == 11
    assert all(src == "data:image/png;base64," and width > 0 for src, width in images)

    # the transcript panel exists and shows one episode at a time
    assert browser.evaluate("document.querySelectorAll('#transcript-browser article.episode').length") == 10
    assert browser.evaluate(f"{VISIBLE}.map(e => e.id)") == ["episode-0"]
    assert browser.evaluate("document.getElementById('episode-counter').textContent") == "1 / 10"
    assert browser.evaluate("document.querySelectorAll('#episode-0 li.msg').length") == 3

    # injected model text is displayed as text, and never ran
    first_message = browser.evaluate("document.querySelector('#episode-0 li.msg pre.text').textContent")
    assert first_message == INJECTION
    assert browser.evaluate("document.scripts.length") == 1
    assert browser.evaluate("typeof window.__pwned") == "undefined"

    # switching: the next button, a real arrow-key press, and the outcome filter
    browser.evaluate("document.getElementById('episode-next').click()")
    assert browser.evaluate(f"{VISIBLE}.map(e => e.id)") == ["episode-1"]
    browser.press("ArrowRight", "ArrowRight", 39)
    assert browser.evaluate(f"{VISIBLE}.map(e => e.id)") == ["episode-2"]
    choose(browser, "episode-filter", "wrong")
    # the shown episode (2) is right, so the first wrong one (1) is shown; next skips to 3
    assert browser.evaluate(f"{VISIBLE}.map(e => [e.id, e.dataset.outcome])") == [["episode-1", "wrong"]]
    assert browser.evaluate("document.getElementById('episode-counter').textContent") == "1 / 5"
    browser.evaluate("document.getElementById('episode-next').click()")
    assert browser.evaluate(f"{VISIBLE}.map(e => e.id)") == ["episode-3"]
    assert browser.evaluate("document.getElementById('episode-counter').textContent") == "2 / 5"
    browser.evaluate("document.getElementById('episode-prev').click()")
    browser.evaluate("document.getElementById('episode-prev').click()")  # wraps around to the last wrong one
    assert browser.evaluate(f"{VISIBLE}.map(e => e.id)") == ["episode-9"]
    browser.settle()
    assert browser.problems.all() == []

    choose(browser, "episode-filter", "all")
    choose(browser, "episode-select", "0")
    assert browser.evaluate(f"{VISIBLE}.map(e => e.id)") == ["episode-0"]
    shot = browser.screenshot(tmp_path / "screenshot.png")
    assert png_size(shot) == (WIDTH, HEIGHT)
    (run / "report" / "screenshot.png").write_bytes(shot.read_bytes())


def test_eval_and_compare_reports_in_browser(browser: Chromium, tmp_path: Path) -> None:
    a = write_run(tmp_path / "a" / "run")
    b = write_run(tmp_path / "b" / "run", kl=False, heldout=False)
    ev = write_eval(tmp_path / "ev")
    pages = [report_command([ev], compare=False, output=None),
             report_command([a, b], compare=True, output=tmp_path / "cmp-runs"),
             report_command([ev, a], compare=True, output=tmp_path / "cmp-mixed")]
    for page in pages:
        browser.open(page.resolve().as_uri())
        browser.settle()
        assert browser.problems.all() == [], page
        assert browser.evaluate("Array.from(document.images).every(i => i.naturalWidth > 0)")
        assert browser.evaluate(f"{VISIBLE}.length") == 1
        assert browser.evaluate("typeof window.__pwned") == "undefined"
    # the eval transcripts are not shaded
    browser.open(pages[0].resolve().as_uri())
    assert browser.evaluate("document.querySelectorAll('#episode-0 .adv.none').length") == 3
    browser.screenshot(tmp_path / "eval.png")
