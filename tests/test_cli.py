"""The `teamplay` command end to end: eval/play/list/train, and one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from tests.tiny import save_tiny, tiny_train_config

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
GSM8K_TEST = DATA / "gsm8k" / "test.jsonl"
PROTOCOLS = ["single", "vote", "proposer_reviewer", "debate", "sequential"]

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.skipif(not GSM8K_TEST.is_file(), reason="benchmark data folder ../shared/data is absent")
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_scripted_truthful_and_wrong_on_200_gsm8k_items(tmp_path, protocol):
    for policy, expected in (("truthful", 1.0), ("wrong", 0.0)):
        out = tmp_path / policy
        result = invoke("eval", "--task", "gsm8k", "--source", GSM8K_TEST, "--limit", 200, "--protocol", protocol,
                        "--backend", "scripted", "--policy", policy, "-o", out)
        assert result.exit_code == 0, result.output
        metrics = json.loads((out / "results.json").read_text())["metrics"]
        assert metrics["episodes"] == 200
        assert metrics["team_accuracy"] == expected
        assert len((out / "transcripts.jsonl").read_text().splitlines()) == 200
        assert "team accuracy" in result.output


def test_yaml_protocol_example_runs(tmp_path):
    example = Path(__file__).resolve().parents[1] / "configs" / "protocols" / "solver_checker.yaml"
    result = invoke("eval", "--task", "arith", "--limit", 5, "--protocol", example, "--backend", "scripted",
                    "-o", tmp_path)
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "results.json").read_text())["metrics"]["team_accuracy"] == 1.0


def test_play_prints_the_dialogue():
    result = invoke("play", "--task", "arith", "--protocol", "proposer_reviewer", "--backend", "scripted",
                    "--set", "protocol.options.rounds=3")
    assert result.exit_code == 0, result.output
    assert "proposer_0" in result.output and "reviewer_0" in result.output
    assert "reward 1.00" in result.output


def test_list_shows_tasks_protocols_and_credit_methods():
    result = invoke("list")
    assert result.exit_code == 0
    for name in ("gsm8k", "arith", "proposer_reviewer", "debate", "shapley", "cosac", "grpo"):
        assert name in result.output
    from teamplay.credit.token import token_methods
    assert "token credit methods" in result.output
    for name in token_methods():
        assert name in result.output


@pytest.mark.parametrize("args, message", [
    (["--protocol", "telepathy"], "unknown protocol 'telepathy'"),
    (["--set", "team.roles=[{name: critic}]", "--protocol", "proposer_reviewer"], "critic"),
    (["--backend", "hf", "--model", "/no/such/model/folder"], "/no/such/model/folder"),
    (["--task", "nosuchtask"], "unknown task 'nosuchtask'"),
    (["--set", "sampling.temperature=-1"], "sampling.temperature"),
    (["--set", "sampling.tempreature=1"], "sampling.tempreature: unknown field"),
])
def test_bad_input_is_one_clear_line(tmp_path, args, message):
    result = runner.invoke(app, ["eval", "--task", "arith", "--limit", "2", "--backend", "scripted",
                                 "-o", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_malformed_yaml_config_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task:\n  name: arith\n  limit: [1, 2\n")
    result = runner.invoke(app, ["eval", "--config", str(bad)])
    assert result.exit_code == 2
    assert "malformed YAML" in result.output and "bad.yaml" in result.output and "line" in result.output


def test_train_then_resume_then_eval_checkpoint(tmp_path):
    model = save_tiny(tmp_path / "tiny")
    config = tmp_path / "train.yaml"
    config.write_text(json.dumps(tiny_train_config(  # JSON is YAML
        model, tmp_path / "run", limit=16, max_prompt_tokens=1024, problems_per_step=2, group_size=4,
        max_new_tokens=4, eval_task={"name": "arith", "split": "test", "limit": 4},
        eval_sampling={"max_new_tokens": 4}, steps=2, checkpoint_every=1)))
    result = invoke("train", "--config", config)
    assert result.exit_code == 0, result.output
    assert "before" in result.output and "after" in result.output
    run = tmp_path / "run"
    assert [p.name for p in sorted((run / "checkpoints").iterdir())] == ["step-000001", "step-000002"]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 2]  # held-out before, two steps, held-out after
    # resume a finished run with more steps: continues from step 2
    result = invoke("train", "--config", config, "--resume", "auto", "--steps", 3)
    assert result.exit_code == 0, result.output
    assert "1 step (resumed at step 2, now at step 3) in " in result.output  # the steps it ran, not the run's
    assert (run / "checkpoints" / "step-000003").is_dir()
    result = invoke("eval", "--task", "arith", "--limit", 3, "--model", model, "--checkpoint", run,
                    "--max-new-tokens", 4, "--set", "backend.max_prompt_tokens=1024", "-o", tmp_path / "ev")
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert saved["config"]["model"]["checkpoint"] == str(run)


def test_play_uses_controllers_from_the_config():
    # always_speak needs no learned tables; a learned mode without a checkpoint is refused clearly
    ok = invoke("play", "--task", "arith", "--protocol", "proposer_reviewer", "--backend", "scripted",
                "--set", "protocol.options.rounds=3", "--set", "controllers.enabled=true",
                "--set", "controllers.mode=always_speak")
    assert ok.exit_code == 0, ok.output
    assert "reward 1.00" in ok.output
    refused = runner.invoke(app, ["play", "--task", "arith", "--protocol", "proposer_reviewer", "--backend",
                                  "scripted", "--set", "controllers.enabled=true"])
    assert refused.exit_code == 2
    assert "needs learned tables" in refused.output


def test_eval_refuses_a_folder_holding_an_evaluation_unless_overwrite(tmp_path):
    args = ["eval", "--task", "arith", "--limit", 2, "--backend", "scripted", "-o", tmp_path / "ev"]
    assert invoke(*args).exit_code == 0
    before = (tmp_path / "ev" / "results.json").read_text()
    refused = runner.invoke(app, [str(a) for a in args + ["--policy", "wrong"]])
    assert refused.exit_code == 2
    assert "already holds an evaluation" in refused.output and "--overwrite" in refused.output
    assert (tmp_path / "ev" / "results.json").read_text() == before  # untouched
    again = invoke(*args, "--policy", "wrong", "--overwrite")
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "ev" / "results.json").read_text())["metrics"]["team_accuracy"] == 0.0


def test_report_of_a_scripted_eval_names_the_backend_not_an_unused_model(tmp_path):
    evaluated = invoke("eval", "--task", "arith", "--limit", 2, "--backend", "scripted", "-o", tmp_path / "ev")
    assert evaluated.exit_code == 0, evaluated.output
    result = invoke("report", tmp_path / "ev")
    assert result.exit_code == 0, result.output
    page = (tmp_path / "ev" / "report" / "index.html").read_text()
    header = page[page.index('<header class="page">'):page.index("</header>")]
    assert "smollm2" not in header
    assert "scripted (truthful)" in header


def test_list_shows_a_plugin_credit_method_once(tmp_path):
    plugin = tmp_path / "mine.py"
    plugin.write_text(
        "import numpy as np\n"
        "from pydantic import BaseModel\n"
        "from teamplay.credit import register_credit\n\n"
        "class Options(BaseModel):\n"
        "    pass\n\n"
        "@register_credit('my_uniform', Options, 'flatcredit')\n"
        "def uniform(batch, options):\n"
        "    return [np.zeros(len(ep.messages)) for ep in batch.episodes]\n")
    result = invoke("list", "--plugin", f"{plugin}:uniform")
    assert result.exit_code == 0, result.output
    assert result.output.count("flatcredit") == 1  # was twice: by its registered name and by its path
    assert "my_uniform (mine.py:uniform)" in result.output


@pytest.mark.parametrize("samples, why", [
    (1, "each of the 2 groups holds one episode"),
    (3, "in every one of the 2 groups all episodes got the same reward"),
])
def test_credit_says_why_every_advantage_is_zero_and_how_many_rows_it_hid(tmp_path, samples, why):
    # the oracle is right every time: no episode differs from another of its problem
    out = tmp_path / "ev"
    assert invoke("eval", "--task", "arith", "--limit", 2, "--protocol", "vote", "--backend", "scripted",
                  "--samples", samples, "-o", out).exit_code == 0
    result = invoke("credit", out, "--method", "shapley", "--limit", 4)
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())
    rows = 2 * samples * 3  # 2 problems x samples episodes x 3 voters, one message each
    assert f"{rows - 4} more rows not shown (--limit {rows} prints them all" in shown
    assert f"every advantage is 0: {why}" in shown
    assert "--temperature" in shown and "--samples" in shown


def test_zero_credit_reason_by_the_groups_rewards():
    from teamplay.cli.inspection import zero_credit_reason
    from teamplay.training.experiments.saved_credit import UtteranceCredit

    def row(group: str, episode: int, reward: float, advantage: float = 0.0) -> UtteranceCredit:
        return UtteranceCredit(group, group, episode, 0, "solver_0", "solve", 0, True, advantage, reward, "4")

    differing = [row("a", 0, 1.0), row("a", 1, 0.0), row("b", 0, 1.0)]
    assert zero_credit_reason([row("a", 0, 1.0, advantage=0.5), row("a", 1, 0.0, -0.5)], "grpo") is None
    assert zero_credit_reason([], "grpo") is None
    assert "1 of the 2 groups have differing rewards: grpo gave" in zero_credit_reason(differing, "grpo")
    flat = zero_credit_reason([row("a", 0, 1.0), row("a", 1, 1.0), row("b", 0, 0.0)], "grpo")
    assert flat.startswith("every advantage is 0: in every one of the 2 groups (1 of one episode) all episodes")
