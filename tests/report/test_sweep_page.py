"""The sweep comparison page (``teamplay report --compare SWEEP_DIR``): its table holds the
seeds' own numbers with their t intervals, and it renders in a real headless chromium."""

from __future__ import annotations

from pathlib import Path

import pytest

from teamplay.report import report_command
from tests.report.cdp import Chromium, find_chromium
from tests.report.fake_folders import INJECTION, write_sweep


def test_sweep_page_table_and_figures(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / "sweep")
    page = report_command([sweep], compare=True, output=None)
    assert page == sweep / "report" / "index.html"
    html = page.read_text(encoding="utf-8")
    # final accuracy of grpo: seeds 0.5 and 0.7 -> mean 0.6, sd 0.1414, half-width
    # 12.706 * 0.1414 / sqrt(2) = 1.271; the other point 0.6, 0.8 -> 0.700 ± 1.271
    assert "0.600 ± 1.271" in html and "0.700 ± 1.271" in html
    assert "heldout/team/verdict_accuracy" in html and "0.550 ± 0.635" in html  # 0.5, 0.6
    assert INJECTION not in html and "&lt;script&gt;" in html
    for key in ("sweep_reward", "sweep_heldout", "role_metrics", "sweep_share_0", "sweep_share_1"):
        assert (sweep / "report" / f"{key}.png").is_file()
    assert html.count("<img") == 5
    assert "4 of 4 runs finished" in html


@pytest.mark.browser
def test_sweep_page_in_browser(tmp_path: Path) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (nor $TEAMPLAY_CHROMIUM); install it with "
                    "tests/report/install_chromium.sh")
    sweep = write_sweep(tmp_path / "sweep")
    page = report_command([sweep], compare=True, output=tmp_path / "out")
    profile = tmp_path / "profile"
    profile.mkdir()
    with Chromium(binary, profile, 1400, 2000) as browser:
        browser.open(page.resolve().as_uri())
        browser.settle()
        assert browser.problems.all() == []
        images = browser.evaluate("Array.from(document.images).map(i => [i.src.slice(0, 22), i.naturalWidth])")
        assert len(images) == 5 and all(src == "data:image/png;base64," and w > 0 for src, w in images)
        headers = browser.evaluate("Array.from(document.querySelectorAll('table.results th')).map(t => t.textContent)")
        assert headers == ["metric", "credit.method=grpo (n=2)", f"credit.method={INJECTION} (n=2)"]
        assert browser.evaluate("typeof window.__pwned") == "undefined"
        assert browser.evaluate("document.scripts.length") == 0
        browser.screenshot(tmp_path / "sweep.png")
