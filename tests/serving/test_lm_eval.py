"""lm-evaluation-harness 0.4.13 scores a served team: its ``local-chat-completions`` model against
the real server (uvicorn on 127.0.0.1), on the task ``teamplay.serving.files.lm_eval_task`` writes for a
local GSM8K file. lm-eval's ``exact_match`` must equal ``teamplay eval``'s team accuracy on the same
problems, problem by problem, for a team that is always right, one that is always wrong and one
that is right on half the problems."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="teamplay serve needs the serve extra: pip install 'teamplay[serve]'")
lm_eval = pytest.importorskip("lm_eval", reason="lm-evaluation-harness is not installed (make install installs it)")
if importlib.util.find_spec("aiohttp") is None or importlib.util.find_spec("tenacity") is None:
    pytest.skip("lm-eval's local-chat-completions model needs aiohttp and tenacity: pip install 'teamplay[lmeval]'",
                allow_module_level=True)
import datasets  # noqa: E402 - lm-eval reads the task's file with it
from lm_eval.tasks import TaskManager  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from teamplay.agents.backends.scripted import POLICIES, format_answer, wrong_answer  # noqa: E402
from teamplay.cli import app  # noqa: E402
from teamplay.config import EvalConfig, build_config  # noqa: E402
from teamplay.errors import DataError  # noqa: E402
from teamplay.serving.api.server import create_app, running  # noqa: E402
from teamplay.serving.episodes.engine import build_team_engine  # noqa: E402
from teamplay.serving.files.lm_eval_task import TASK_NAME, main, task_config, write_task  # noqa: E402

MODEL = "team"
#: six GSM8K-shaped rows: a reference with a thousands comma, a negative one, and a question with a
#: double space (lm-eval sends it as is; the server's look-up ignores whitespace runs)
ROWS = [
    {"question": "Tom has 3 apples and buys 4 more. How many apples does he have?",
     "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "A shop sells 250 pens a day.  How many pens does it sell in 4 days?",
     "answer": "250 * 4 = <<250*4=1000>>1000\n#### 1,000"},
    {"question": "It was 5 degrees and the temperature fell by 8 degrees. What is it now?",
     "answer": "5 - 8 = <<5-8=-3>>-3\n#### -3"},
    {"question": "Ann reads 12 pages an hour for 2 hours. How many pages does she read?",
     "answer": "12 * 2 = <<12*2=24>>24\n#### 24"},
    {"question": "A farm has 1,200 hens and sells 50 of them. How many hens are left?",
     "answer": "1,200 - 50 = <<1200-50=1150>>1,150\n#### 1,150"},
    {"question": "Sam saves $15 a week for 6 weeks. How many dollars does he save?",
     "answer": "15 * 6 = <<15*6=90>>90\n#### 90"},
]
PROPOSER_REVIEWER = {"name": "proposer_reviewer", "options": {"rounds": 3}}


def even_rows_right(_backend, request, _sampling) -> str:
    """A scripted policy right on the problems of even rows (``gsm8k/test/0``, 2, 4) and wrong
    (the reference plus one) on the others."""
    item = request.item
    row = int(item.id.rsplit("/", 1)[1])
    return format_answer(item.reference if row % 2 == 0 else wrong_answer(item.reference))


@pytest.fixture()
def data(tmp_path: Path, monkeypatch) -> Path:
    """The six rows as a local .jsonl; lm-eval's dataset cache kept under tmp_path, offline."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setitem(POLICIES, "even_rows_right", even_rows_right)
    path = tmp_path / "gsm8k_test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return path


def _teamplay_eval(team: dict, folder: Path) -> tuple[float, dict[str, float]]:
    """``teamplay eval`` on ``team`` (a config): team accuracy and each question's reward."""
    config = folder / "team.yaml"
    config.write_text(json.dumps(team), encoding="utf-8")  # JSON is YAML
    result = CliRunner().invoke(app, ["eval", "--config", str(config), "-o", str(folder / "eval")],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    accuracy = json.loads((folder / "eval" / "results.json").read_text(encoding="utf-8"))["metrics"]["team_accuracy"]
    lines = (folder / "eval" / "transcripts.jsonl").read_text(encoding="utf-8").splitlines()
    return accuracy, {row["prompt"]: row["reward"] for row in map(json.loads, lines)}


def _lm_eval(team: dict, data: Path, folder: Path) -> tuple[dict, dict[str, float], int]:
    """lm-eval's ``local-chat-completions`` on the written task against ``team`` served: the task's
    results, each question's exact_match, and the requests the server answered."""
    tasks = write_task(data, folder / "lm_eval_tasks").parent
    engine = build_team_engine(build_config(EvalConfig, team))
    app = create_app(engine, MODEL)
    with running(app) as url:
        out = lm_eval.simple_evaluate(
            model="local-chat-completions",
            model_args=f"model={MODEL},base_url={url}/v1/chat/completions,num_concurrent=8,max_retries=1,"
                       f"tokenized_requests=False",
            tasks=[TASK_NAME], task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
            apply_chat_template=True, log_samples=True, bootstrap_iters=0)
    per_question = {s["doc"]["question"]: s["exact_match"] for s in out["samples"][TASK_NAME]}
    return out["results"][TASK_NAME], per_question, app.state.batcher.stats.requests


@pytest.mark.parametrize(("protocol", "policy", "accuracy"), [
    (PROPOSER_REVIEWER, "truthful", 1.0),
    # the proposer states reference + 1 and the reviewer calls that RIGHT: every final answer wrong
    (PROPOSER_REVIEWER, "wrong", 0.0),
    # rows 0, 2, 4 right (7, -3 and 1150: the comma and the sign), rows 1, 3, 5 wrong: 3 / 6
    ({"name": "single"}, "even_rows_right", 0.5),
], ids=["truthful", "wrong", "half"])
def test_lm_evals_exact_match_is_teamplays_team_accuracy(data, tmp_path, protocol, policy, accuracy):
    team = {"task": {"name": "gsm8k", "split": "test", "source": str(data)}, "protocol": protocol,
            "backend": {"name": "scripted", "policy": policy}}
    team_accuracy, rewards = _teamplay_eval(team, tmp_path)
    results, matches, requests = _lm_eval(team, data, tmp_path)
    # exact: the mean of six 0/1 rewards is 0, 1/2 or 1, as the parametrised value is
    assert team_accuracy == accuracy
    assert results["sample_len"] == requests == len(ROWS)  # every problem went through the server once
    assert results["exact_match,boxed"] == pytest.approx(accuracy, abs=1e-12)
    assert matches == rewards  # problem by problem, not only on average


def test_the_task_names_an_absolute_file_of_a_kind_lm_eval_reads(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    Path("test.parquet").write_bytes(b"")
    config = task_config(Path("test.parquet"))
    assert config["dataset_path"] == "parquet"
    assert config["dataset_kwargs"] == {"data_files": {"test": str(tmp_path / "test.parquet")}}
    with pytest.raises(DataError, match="no such file"):
        task_config(tmp_path / "missing.jsonl")
    Path("test.txt").write_text("x", encoding="utf-8")
    with pytest.raises(DataError, match=r"lm-eval reads \.jsonl, \.json, \.csv, \.parquet files"):
        task_config(Path("test.txt"))
    main(["test.parquet", "tasks", "--name", "mine"])
    assert capsys.readouterr().out.strip() == "tasks/mine.yaml"
    assert Path("tasks/mine.yaml").read_text(encoding="utf-8").startswith("# lm-evaluation-harness 0.4.13 task")
    with pytest.raises(SystemExit) as refused:
        main(["missing.jsonl", "tasks"])
    assert refused.value.code == 2 and "error: missing.jsonl: no such file" in capsys.readouterr().err
