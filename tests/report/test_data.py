"""Loading run and eval folders: typed records, and errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from teamplay.errors import DataError, TeamplayError
from teamplay.report.data import EvalData, RunData, folder_label, load_folder
from tests.report.fake_folders import INJECTION, STEPS, episode, training_line, write_eval, write_run


def test_run_folder_loads_steps_heldout_and_credited_episodes(tmp_path: Path) -> None:
    run = load_folder(write_run(tmp_path / "run"))
    assert isinstance(run, RunData)
    assert [s.step for s in run.steps] == [1, 2, 3, 4, 5]
    # training_line: reward_mean = 0.25 + 0.1 * step -> step 3: 0.55; kl = 0.001 * step
    assert run.steps[2].get("reward_mean") == pytest.approx(0.55)
    assert run.steps[2].get("kl") == pytest.approx(0.003)
    assert run.steps[2].get("trained_adapters") is None  # a list, not a scalar
    assert dict(run.steps[0].credit_share) == pytest.approx({"proposer": 0.74, "reviewer": 0.26})
    assert dict(run.steps[4].adv_mean) == pytest.approx({"proposer": 0.5, "reviewer": 0.01})
    assert dict(run.steps[0].speak_rate) == {}
    assert run.roles == ["proposer", "reviewer"]
    # step 0 line holds only the eval before training; the last line only the final eval
    assert [(h.step, h.final) for h in run.heldout] == [(0, False), (STEPS, True)]
    assert run.initial_heldout.team_accuracy == 0.25  # exact: values this test logged, read back
    assert run.final_heldout.team_accuracy == 0.5  # exact: values this test logged, read back
    assert run.final_heldout.role_accuracy == {"proposer": 0.375}  # exact: values this test logged, read back
    assert len(run.episodes) == 2 * STEPS
    first = run.episodes[0]
    assert first.step == 1 and first.advantages == (0.8, 0.01, 0.8)  # exact: values this test logged, read back
    assert first.episode.messages[0].text == INJECTION
    assert first.prompt is None and first.reference is None
    assert run.config["credit"]["method"] == "shapley"


def test_eval_folder_loads_metrics_and_uncredited_transcripts(tmp_path: Path) -> None:
    ev = load_folder(write_eval(tmp_path / "ev", accuracy=0.75))
    assert isinstance(ev, EvalData)
    assert ev.metrics.team_accuracy == 0.75 and ev.metrics.episodes == 8  # exact: values this test logged, read back
    assert len(ev.episodes) == 2
    assert all(e.advantages is None and e.step is None for e in ev.episodes)
    assert ev.episodes[0].reference == "42" and ev.episodes[0].prompt.startswith("What is 40 + 2?")
    assert ev.config["protocol"]["name"] == "proposer_reviewer"


def test_speak_rates_are_loaded_when_logged(tmp_path: Path) -> None:
    run = load_folder(write_run(tmp_path / "run", speak_rate=True))
    # training_line: speak rate of reviewer_0/review = 1 - 0.1 * step
    assert [s.speak_rate["reviewer_0/review"] for s in run.steps] == pytest.approx([0.9, 0.8, 0.7, 0.6, 0.5])


def test_empty_and_partial_runs_load(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.yaml").write_text("steps: 3\n", encoding="utf-8")
    run = load_folder(empty)
    assert isinstance(run, RunData)
    assert run.steps == () and run.heldout == () and run.episodes == ()
    assert run.final_heldout is None and run.initial_heldout is None and run.roles == []

    one = load_folder(write_run(tmp_path / "one", steps=1, heldout=False, kl=False))
    assert [s.step for s in one.steps] == [1] and one.heldout == ()
    assert one.steps[0].get("kl") is None


def test_a_folder_that_is_neither_names_what_was_expected(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(TeamplayError, match="neither a run folder") as info:
        load_folder(tmp_path)
    for expected in ("metrics.jsonl", "config.yaml", "results.json"):
        assert expected in str(info.value)
    with pytest.raises(TeamplayError, match="is not a folder"):
        load_folder(tmp_path / "missing")


def test_malformed_metrics_line_names_file_and_line(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    path = run / "metrics.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2][:40]  # a torn line
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"metrics\.jsonl line 3: not valid JSON"):
        load_folder(run)


@pytest.mark.parametrize(("line", "message"), [
    ("[1, 2]", "line 2: expected a JSON object, got list"),
    (json.dumps({**training_line(1), "step": "one"}), "line 2: field 'step' must be an integer"),
    (json.dumps({**training_line(1), "step": 1.5}), "line 2: field 'step' must be an integer"),
    (json.dumps({**training_line(1), "credit_share": {"proposer": "high"}}),
     "line 2: field 'credit_share' must be an object of numbers"),
    (json.dumps({"step": 0, "heldout": {"team_accuracy": 0.5}}), "line 2, field 'heldout': EvalMetrics fields missing"),
])
def test_invalid_metrics_lines_are_errors(tmp_path: Path, line: str, message: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps(training_line(1)) + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_folder(run)


def test_episode_with_wrong_number_of_advantages_is_an_error(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", steps=1)
    row = {"step": 1, **episode(1, 5, True), "advantages": [0.5, 0.5]}  # 3 messages, 2 advantages
    with (run / "episodes.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=r"episodes\.jsonl line 3: 2 advantages for 3 messages"):
        load_folder(run)


def test_episode_missing_a_field_is_an_error(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", steps=1)
    row = {"step": 1, **episode(1, 5, True), "advantages": [0.1, 0.2, 0.3]}
    del row["reward"]
    with (run / "episodes.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    with pytest.raises(DataError, match=r"episodes\.jsonl line 3: episode field 'reward' is missing"):
        load_folder(run)


def test_malformed_results_json_is_an_error(tmp_path: Path) -> None:
    ev = write_eval(tmp_path / "ev")
    (ev / "results.json").write_text('{"config": {}, "metrics": ', encoding="utf-8")
    with pytest.raises(DataError, match=r"results\.json: not valid JSON"):
        load_folder(ev)
    (ev / "results.json").write_text('{"config": {}}', encoding="utf-8")
    with pytest.raises(DataError, match="expected an object with 'config' and 'metrics'"):
        load_folder(ev)


def test_folder_labels_disambiguate_equal_names(tmp_path: Path) -> None:
    a = load_folder(write_run(tmp_path / "a" / "run"))
    b = load_folder(write_run(tmp_path / "b" / "run"))
    c = load_folder(write_eval(tmp_path / "ev"))
    assert folder_label(a, [a, b]) == "a/run" and folder_label(b, [a, b]) == "b/run"
    assert folder_label(a, [a, c]) == "run"
