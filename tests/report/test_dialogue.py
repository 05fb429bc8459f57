"""The dialogue picture: a run's last-step episodes with each message's credit, an evaluation's
episodes with each message's withholding mark (and the same marks in the transcript browser), and
the cooperation table's withholding and self-consistency rows."""

from __future__ import annotations

import json
import re
from pathlib import Path

from teamplay.report import report_command
from teamplay.report.data import load_eval
from teamplay.report.dialogue import DIALOGUES, pick_dialogues, withheld_mark
from teamplay.report.html import cooperation_table
from teamplay.training.play.evaluation import EvalMetrics
from tests.report.fake_folders import INJECTION, write_eval, write_run


def held(message: int, changed: bool, answer, before: bool = True, after: bool = True, replayed: bool = True) -> dict:
    return {"episode": 0, "message": message, "agent": "x_0", "role": "x", "replayed": replayed, "answer": answer,
            "changed": changed, "right_before": before, "right_after": after, "extra_tokens": 0}


def with_withholding(path: Path) -> Path:
    """``write_eval``'s folder with withholding rows: in the right episode the proposal is needed
    (without it the answer becomes an injection string and is wrong), the review changes nothing,
    the revision is read by nobody; in the wrong episode nothing changes."""
    rows = [json.loads(line) for line in (path / "transcripts.jsonl").read_text().splitlines()]
    rows[0]["withholding"] = [held(0, True, INJECTION, after=False), held(1, False, "42"),
                              held(2, False, "42", replayed=False)]
    rows[1]["withholding"] = [held(0, False, "41", False, False), held(1, False, "41", False, False),
                              held(2, False, "41", False, False, replayed=False)]
    (path / "transcripts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def section(page: str, anchor: str) -> str:
    return re.search(f'<section id="{anchor}">(.*?)</section>', page, re.S).group(1)


def test_eval_dialogue_marks_what_withholding_each_message_did(tmp_path):
    ev = with_withholding(write_eval(tmp_path / "ev"))
    page = report_command([ev], compare=False, output=tmp_path / "out").read_text(encoding="utf-8")
    picture = section(page, "dialogue")
    assert picture.count('<figure class="dialogue">') == 2
    # the right episode (its withholding changed the answer) comes first
    assert picture.index("arith/train/00") < picture.index("arith/train/01")
    assert picture.count('data-withheld="changed"') == 1 and picture.count('data-withheld="same"') == 3
    assert picture.count('data-withheld="unread"') == 2
    assert picture.count('class="held needed"') == 1 and 'class="held misled"' not in picture
    assert "withheld: answer → &lt;script&gt;alert(1)&lt;/script&gt;" in picture  # escaped
    assert "<script>alert(1)" not in picture
    # the transcript browser carries the same marks
    assert section(page, "transcripts").count('data-withheld="changed"') == 1


def test_run_dialogue_shows_the_credit_of_the_last_logged_step(tmp_path):
    page = report_command([write_run(tmp_path / "run")], compare=False, output=None).read_text(encoding="utf-8")
    picture = section(page, "dialogue")
    # two episodes were logged at the last step (5): the right one first, its messages +0.8, +0.01, +0.8
    assert picture.count('<figure class="dialogue">') == 2 and picture.count(" · step 5") == 2
    assert picture.index("arith/train/50") < picture.index("arith/train/51")
    assert picture.count("credit +0.800") == 2 and picture.count("credit −0.600") == 2
    assert "data-withheld" not in picture


def test_eval_without_withholding_says_how_to_switch_it_on(tmp_path):
    page = report_command([write_eval(tmp_path / "ev")], compare=False, output=tmp_path / "out").read_text(
        encoding="utf-8")
    picture = section(page, "dialogue")
    assert "withhold_messages=true" in picture and "data-withheld" not in picture


def test_pick_dialogues_prefers_changed_then_right(tmp_path):
    ev = with_withholding(write_eval(tmp_path / "ev"))
    episodes = load_eval(ev).episodes
    assert [e.episode.problem_id for e in pick_dialogues(episodes[::-1])] == ["arith/train/00", "arith/train/01"]
    assert len(pick_dialogues(list(episodes) * 3)) == DIALOGUES
    assert withheld_mark(None) == ""
    assert 'class="held misled"' in withheld_mark(held(0, True, "5", before=False, after=True))


def test_cooperation_table_rows_of_withholding_and_self_consistency():
    coop = {"withholding": {"information_use": 2 / 3, "right_to_wrong": 2 / 3, "wrong_to_right": 0.0, "messages": 9,
                            "extra_tokens_per_problem": 12.5,
                            "per_role": {"informant": {"information_use": 1.0}, "answerer": {"information_use": 0.0}}},
            "self_consistency": {"accuracy": 0.25, "samples_per_problem": 3.0}}
    metrics = EvalMetrics(episodes=3, team_accuracy=1.0, role_accuracy={}, any_agent_right=1.0, initial_accuracy=1.0,
                          wrong_to_right=0.0, right_to_wrong=0.0, tokens_per_problem=0.0, calls_per_problem=3.0,
                          extra={"cooperation": coop})
    html = cooperation_table([("eval", metrics), ("other", None)])
    assert "<td>information use (answer changes without a message)</td><td>0.667</td><td>—</td>" in html
    assert "<td>&nbsp;&nbsp;informant</td><td>1.000</td><td>—</td>" in html
    assert "<td>&nbsp;&nbsp;answerer</td><td>0.000</td>" in html
    assert "<td>self-consistency: one agent, same tokens, vote</td><td>0.250</td>" in html
    assert "self-consistency: one sample" not in html  # no column has it
