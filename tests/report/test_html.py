"""The report page: self-contained, every run string escaped, sections present, command behaviour."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from teamplay.errors import TeamplayError
from teamplay.records import Episode
from teamplay.report import report_command
from teamplay.report.data import LoggedEpisode
from teamplay.report.markup import fmt, fmt_signed
from teamplay.report.transcripts import episode_panel
from tests.report.fake_folders import ATTRIBUTE_INJECTION, INJECTION, episode, write_eval, write_run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Tags(HTMLParser):
    """Start tags with their attributes, and the text inside <pre> elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.pre_texts: list[str] = []
        self._in_pre = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "pre":
            self._in_pre = True
            self.pre_texts.append("")

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_pre = False

    def handle_data(self, data):
        if self._in_pre:
            self.pre_texts[-1] += data


def parse(page: str) -> Tags:
    parser = Tags()
    parser.feed(page)
    parser.close()
    return parser


@pytest.fixture
def run_page(tmp_path: Path) -> tuple[Path, str]:
    run = write_run(tmp_path / "run")
    path = report_command([run], compare=False, output=None)
    return path, path.read_text(encoding="utf-8")


def test_report_is_written_into_the_run_folder_with_its_pngs(run_page) -> None:
    path, page = run_page
    assert path == path.parent.parent / "report" / "index.html"
    pngs = sorted(p.name for p in path.parent.glob("*.png"))
    # no speak rates in this run: every figure but the controllers one
    assert pngs == ["adv_mean.png", "agent_credit.png", "clip.png", "credit_share.png", "eval_accuracy.png",
                    "heldout.png", "kl.png", "ranges.png", "reward.png", "tokens.png"]
    for name in pngs:
        assert (path.parent / name).read_bytes().startswith(PNG_SIGNATURE)
    assert page.startswith("<!DOCTYPE html>")


def test_page_is_self_contained_with_figures_as_data_uris(run_page) -> None:
    path, page = run_page
    tags = parse(page).tags
    images = [attrs["src"] for tag, attrs in tags if tag == "img"]
    assert len(images) == len(list(path.parent.glob("*.png")))
    for src in images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        assert base64.b64decode(src[len(prefix):]).startswith(PNG_SIGNATURE)
    # nothing to fetch: no external scripts, stylesheets, links or sources
    assert not [attrs for tag, attrs in tags
                if tag in ("script", "link", "iframe") and ("src" in attrs or "href" in attrs)]
    assert not [attrs["href"] for tag, attrs in tags if tag == "a" and not attrs["href"].startswith("#")]
    assert "http://" not in page and "https://" not in page


def test_model_text_is_escaped_and_only_our_script_may_run(run_page) -> None:
    _, page = run_page
    assert INJECTION not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    parsed = parse(page)
    assert [tag for tag, _ in parsed.tags].count("script") == 1
    # the page's one script is allowed by its hash; nothing else (no inline handlers, no eval)
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    [csp] = [attrs["content"] for tag, attrs in parsed.tags if attrs.get("http-equiv") == "Content-Security-Policy"]
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp
    # the injected text is shown verbatim as the message body
    assert INJECTION in parsed.pre_texts


# arbitrary unicode mixed with the fragments an injection needs, so each example likely holds some
FRAGMENTS = ("<", ">", "&", '"', "'", "&amp;", "<script>", "</pre>", "<img src=x onerror=alert(1)>", "\n")
markup_text = st.lists(st.one_of(st.text(max_size=8), st.sampled_from(FRAGMENTS)), max_size=8).map("".join)


@settings(max_examples=60, deadline=None)
@given(text=markup_text, agent_suffix=markup_text.filter(bool), answer=markup_text)
def test_any_text_renders_as_text_never_as_markup(text: str, agent_suffix: str, answer: str) -> None:
    """Arbitrary message text, agent names, answers and problem ids: the panel's tags and their
    attributes are only ours (no injected element or event handler), and the text comes back."""
    data = episode(1, 0, True, text=text)
    agent = "proposer_" + agent_suffix
    data["agents"] = [agent, "reviewer_0"]
    for m in data["messages"]:
        if m["agent"] == "proposer_0":
            m["agent"], m["answer"] = agent, answer
    data["problem_id"] = text
    data["agent_answers"] = {agent: answer, "reviewer_0": None}
    panel = episode_panel(LoggedEpisode(Episode.from_dict(data), 1, (0.8, 0.0, -0.4)), index=0)
    parsed = parse(panel)
    allowed = {"article", "header", "span", "h3", "div", "aside", "dl", "dt", "dd", "code", "table", "thead",
               "tbody", "tr", "th", "td", "br", "ol", "li", "pre", "p"}
    assert {tag for tag, _ in parsed.tags} <= allowed
    assert not [name for _, attrs in parsed.tags for name in attrs if name.startswith("on")]
    assert {name for _, attrs in parsed.tags for name in attrs} <= {"class", "style", "id", "data-outcome", "hidden"}
    if text:
        assert parsed.pre_texts[0] == text  # escaping round-trips exactly


def test_attribute_injection_in_names_is_escaped(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", steps=1, episode_text=ATTRIBUTE_INJECTION)
    page = report_command([run], compare=False, output=None).read_text(encoding="utf-8")
    assert ATTRIBUTE_INJECTION not in page
    assert not [a for _, attrs in parse(page).tags for a in attrs if a.startswith("on")]


def test_run_report_sections(run_page) -> None:
    _, page = run_page
    for anchor in ("summary", "credit", "controllers", "transcripts", "training", "evaluation", "config"):
        assert f'<section id="{anchor}">' in page
    # the reviewer is flagged as a free rider (mean advantage 0.01 when the team is right)
    flagged = re.findall(r'<tr class="flag"><td><span class="agent">([^<]*)</span>', page)
    assert flagged == ["reviewer_0"]
    assert "No controllers" in page
    assert page.count('<article class="episode"') == 10
    assert page.count('<article class="episode" data-outcome="right" id="episode-0">') == 1  # first shown
    assert page.count(" hidden>") == 9  # the others hidden until selected
    # shading: proposer +0.8 is the episode maximum -> full green; reviewer +0.01 -> faint green
    # (0.06 + 0.36 * 0.01 / 0.8 = 0.0645); wrong episode -0.6 -> full red
    assert "background: rgba(22, 163, 74, 0.420)" in page
    assert "background: rgba(22, 163, 74, 0.065)" in page
    assert "background: rgba(220, 38, 38, 0.420)" in page
    # held-out before/after columns: 0.25 -> 0.5
    assert "<th>before training</th><th>after training</th><th>difference</th>" in page
    assert '<td>team accuracy</td><td>0.250</td><td>0.500</td><td><span class="better">+0.250</span></td>' in page


def test_controller_speak_rates_render_when_logged(tmp_path: Path) -> None:
    path = report_command([write_run(tmp_path / "run", speak_rate=True)], compare=False, output=None)
    page = path.read_text(encoding="utf-8")
    assert (path.parent / "speak_rate.png").is_file()
    assert "No controllers" not in page
    assert "<td><code>reviewer_0/review</code></td><td>0.500</td>" in page  # 1 - 0.1 * 5


def test_empty_and_partial_runs_render(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("", encoding="utf-8")
    page = report_command([empty], compare=False, output=None).read_text(encoding="utf-8")
    assert "no training step logged yet" in page and "No transcripts" in page
    assert "No held-out evaluation" in page and "<img" not in page

    one = write_run(tmp_path / "one", steps=1, heldout=False, kl=False)
    page = report_command([one], compare=False, output=None).read_text(encoding="utf-8")
    assert "KL was not computed in this run" in page
    assert "No held-out evaluation" in page
    assert page.count('<article class="episode"') == 2


def test_eval_report_shows_metrics_prompt_and_unshaded_transcripts(tmp_path: Path) -> None:
    ev = write_eval(tmp_path / "ev")
    path = report_command([ev], compare=False, output=tmp_path / "out")
    page = path.read_text(encoding="utf-8")
    assert path == tmp_path / "out" / "index.html"
    assert "not credited" in page and "rgba(22, 163, 74" not in page
    assert "What is 40 + 2? &lt;script&gt;" in page  # the problem, escaped
    assert "<dt>reference</dt>" in page
    assert "<th>metric</th><th>ev (proposer_reviewer)</th>" in page
    assert '<section id="credit">' not in page and '<section id="training">' not in page


def test_compare_two_runs_defaults_to_report_compare_in_cwd(tmp_path: Path, monkeypatch) -> None:
    a = write_run(tmp_path / "a" / "run")
    b = write_run(tmp_path / "b" / "run", kl=False)
    monkeypatch.chdir(tmp_path)
    path = report_command([a, b], compare=True, output=None)
    assert path == Path("report-compare") / "index.html"
    page = path.read_text(encoding="utf-8")
    assert "a/run vs b/run" in page
    assert "<th>a/run (last)</th><th>b/run (last)</th><th>difference</th>" in page
    assert page.count('<article class="episode"') == 20
    assert '<optgroup label="a/run">' in page and '<optgroup label="b/run">' in page


def test_compare_two_evals_side_by_side(tmp_path: Path) -> None:
    a = write_eval(tmp_path / "vote", accuracy=0.5, protocol="vote")
    b = write_eval(tmp_path / "debate", accuracy=0.75, protocol="debate")
    page = report_command([a, b], compare=True, output=tmp_path / "cmp").read_text(encoding="utf-8")
    assert "<th>vote (vote)</th><th>debate (debate)</th><th>difference</th>" in page
    # team accuracy 0.5 -> 0.75: +0.25, better
    assert '<td>team accuracy</td><td>0.500</td><td>0.750</td><td><span class="better">+0.250</span></td>' in page


def test_wrong_number_of_folders_is_an_error(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", steps=1)
    with pytest.raises(TeamplayError, match="exactly two"):
        report_command([run], compare=True, output=None)
    with pytest.raises(TeamplayError, match="use --compare for two"):
        report_command([run, run], compare=False, output=None)


def test_number_formatting() -> None:
    assert fmt(None) == "—" and fmt(float("nan")) == "—"
    assert fmt(12345) == "12,345" and fmt(0.12345) == "0.123" and fmt(120.0) == "120.0" and fmt(2500.4) == "2,500"
    assert fmt_signed(-0.25) == "\u22120.250" and fmt_signed(0.25) == "+0.250"


def test_stale_groups_show_only_for_a_run_with_asynchronous_rollouts(tmp_path: Path, run_page) -> None:
    assert "dropped as stale" not in run_page[1]
    run = write_run(tmp_path / "async")
    metrics = run / "metrics.jsonl"
    lines = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines()]
    metrics.write_text("".join(json.dumps({**line, "stale_groups_dropped": 1} if "groups" in line else line) + "\n"
                               for line in lines), encoding="utf-8")
    page = report_command([run], compare=False, output=None).read_text(encoding="utf-8")
    # 5 steps of 4 groups, one dropped in each
    assert "<td>groups dropped as stale (rollout.max_staleness)</td><td></td><td></td><td>0.250 (5 of 20)</td>" in page
