"""lm-eval-compatible metrics in held-out evaluation: which text is scored, how they are averaged,
and that ``teamplay eval`` prints them next to teamplay's accuracy, saves them, and the report shows
them."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.envs.tasks import get_task
from teamplay.records import Episode, Message, TaskItem
from teamplay.report import report_command
from teamplay.training.play.evaluation import final_text, summarize

SOLUTION = "She sells 16 - 3 - 4 = <<16-3-4=9>>9 eggs.\nShe makes 9 * 2 = $<<9*2=18>>18.\n#### 18"
ITEM = TaskItem(id="gsm8k/test/0", prompt="Janet's ducks ...", reference="18", metadata={"solution": SOLUTION})


def _message(agent: str, text: str, answer: str | None, spoke: bool = True) -> Message:
    return Message(agent=agent, role=agent.rpartition("_")[0], round=0, stage="solve", text=text, answer=answer,
                   spoke=spoke)


def _episode(messages: list[Message], final: str | None, reward: float) -> Episode:
    agents = tuple(dict.fromkeys(m.agent for m in messages))
    return Episode(problem_id=ITEM.id, group_id="g", agents=agents, messages=tuple(messages), final_answer=final,
                   reward=reward, agent_answers={a: final for a in agents}, agent_correct={a: reward for a in agents})


def test_the_scored_text_is_the_message_that_gave_the_final_answer() -> None:
    proposal = _message("proposer_0", "9 * 2 = 18.\nThe answer is 18.", "18")
    review = _message("reviewer_0", "RIGHT", None)
    assert final_text(_episode([proposal, review], "18", 1.0)) == proposal.text
    # a later message with another answer does not count; a skipped turn never does
    other = _message("solver_1", "The answer is 17.", "17")
    skipped = _message("proposer_0", "", "18", spoke=False)
    assert final_text(_episode([proposal, other, skipped], "18", 1.0)) == proposal.text
    # no message gave the final answer: the last spoken message with any answer
    assert final_text(_episode([proposal, other], None, 0.0)) == other.text


def test_summarize_averages_each_lm_eval_metric_over_episodes() -> None:
    hashes = _episode([_message("solver_0", "9 * 2 = 18\n#### 18", "18")], "18", 1.0)
    stated = _episode([_message("solver_0", "9 * 2 = 18.\nThe answer is 18.", "18")], "18", 1.0)
    dollars = _episode([_message("solver_0", "She makes 9 * 2 = 18 dollars.\nThe answer is $18.00.", "18")], "18", 1.0)
    metrics = summarize([hashes, stated, dollars], {ITEM.id: ITEM}, get_task("gsm8k"))
    assert metrics.team_accuracy == 1.0
    assert metrics.lm_eval == {
        "gsm8k/strict-match": 1 / 3,                 # only "#### 18"
        "gsm8k_cot_zeroshot/strict-match": 1 / 3,    # only "The answer is 18." ("$18.00" has a "$")
        "gsm8k/flexible-extract": 2 / 3,             # last runs "18", "18.", "18.00." -> 18, 18, 18.00
    }
    assert summarize([hashes], {ITEM.id: ITEM}, get_task("arith")).lm_eval == {}  # arith: no lm-eval task


def _gsm8k_file(folder: Path) -> Path:
    rows = [{"question": "Q0", "answer": SOLUTION},
            {"question": "Q1", "answer": "He has 1,000 + 250 = <<1000+250=1250>>1,250.\n#### 1,250"}]
    data = folder / "test.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return data


def test_eval_prints_saves_and_reports_lm_eval_metrics_next_to_accuracy(tmp_path: Path) -> None:
    data = _gsm8k_file(tmp_path)
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["eval", "--task", "gsm8k", "--source", str(data), "--backend", "scripted",
                                      "--policy", "truthful", "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "results.json").read_text(encoding="utf-8"))["metrics"]
    # the truthful policy writes "The answer is \boxed{18}." / "...\boxed{1250}.": teamplay reads the box;
    # lm-eval's strict-matches find no "#### N" and no "The answer is N"; flexible-extract takes the
    # last run "18" and "1250", equal to the references once ',' is dropped
    assert metrics["team_accuracy"] == 1.0
    assert metrics["lm_eval"] == {"gsm8k/strict-match": 0.0, "gsm8k_cot_zeroshot/strict-match": 0.0,
                                  "gsm8k/flexible-extract": 1.0}
    lines = result.output.splitlines()
    accuracy = next(i for i, line in enumerate(lines) if "team accuracy (teamplay verifier)" in line)
    assert "lm-eval 0.4.13 gsm8k/strict-match" in lines[accuracy + 1]  # right under teamplay's accuracy
    assert "lm-eval 0.4.13 gsm8k/flexible-extract" in result.output
    page = report_command([out], compare=False, output=tmp_path / "report").read_text(encoding="utf-8")
    assert "<td>lm-eval 0.4.13 compatible: gsm8k/flexible-extract</td><td>1.000</td>" in page
    assert "<td>lm-eval 0.4.13 compatible: gsm8k/strict-match</td><td>0.000</td>" in page


def test_the_gsm8k_cot_zeroshot_config_sends_lm_evals_prompt_as_one_user_turn(tmp_path: Path) -> None:
    from teamplay.config import EvalConfig, load_config
    from teamplay.envs.protocols import get_protocol

    root = Path(__file__).resolve().parents[2]
    config = root / "configs" / "eval" / "gsm8k_cot_zeroshot.yaml"
    cfg = load_config(EvalConfig, config, [])
    assert (cfg.task.name, cfg.task.split, cfg.samples, cfg.sampling.temperature, cfg.sampling.max_new_tokens) == (
        "gsm8k", "test", 1, 0.0, 256)
    protocol_file = str(root / cfg.protocol.name)
    protocol = get_protocol(protocol_file)
    team = protocol.default_team()
    state = protocol.new_state(ITEM, team, get_task("gsm8k").answer_instruction)
    (turn,) = protocol.schedule(team)
    # lm-eval's doc_to_text as the one user turn: no system prompt, no teamplay answer instruction
    assert [(m.role, m.content) for m in protocol.build_request(state, turn).chat] == [
        ("user", "Q: Janet's ducks ...\nA: Let's think step by step.")]
    # the config runs end to end (a scripted model stands in for the hub model)
    result = CliRunner().invoke(app, ["eval", "--config", str(config), "--backend", "scripted", "--source",
                                      str(_gsm8k_file(tmp_path)), "-o", str(tmp_path / "out"),
                                      "--protocol", protocol_file], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "lm-eval 0.4.13 gsm8k_cot_zeroshot/strict-match" in result.output
