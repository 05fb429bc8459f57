"""One plugin path and early refusals, through the `teamplay` command as a user meets them.

* a credit method and a task written in the user's own file run through `teamplay train` and
  `teamplay eval` from a config, and show in `teamplay list --plugin`;
* `teamplay credit` prints per-utterance advantages of a saved eval folder;
* a run that cannot work (unknown method, a method without its resource, an objective field that
  does not apply) exits 2 with one `error:` line before any model loads: the config names a model
  folder that does not exist, so a refusal that came after the model load would name that folder.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.credit import CREDIT, credit_methods
from teamplay.envs.protocols import protocol_names
from teamplay.training.wiring.checks import TRAINER_RESOURCES
from tests.tiny import save_tiny, tiny_train_config

runner = CliRunner()

USER_CREDIT = textwrap.dedent('''
    """A user's credit method: the team reward minus the group mean, on the last spoken message only."""
    import numpy as np
    from pydantic import BaseModel, ConfigDict

    from teamplay.credit import register_credit


    class LastOptions(BaseModel):
        model_config = ConfigDict(extra="forbid")
        scale: float = 1.0


    @register_credit("user_last_message", LastOptions, "centred team reward on the last spoken message")
    def last_message(batch, options):
        rewards = np.array([ep.reward for ep in batch.episodes])
        out = []
        for ep, r in zip(batch.episodes, rewards - rewards.mean()):
            adv = np.zeros(len(ep.messages))
            spoken = [t for t, m in enumerate(ep.messages) if m.spoke]
            if spoken:
                adv[spoken[-1]] = options.scale * r
            out.append(adv)
        return out
''')

USER_TASK = textwrap.dedent('''
    """A user's task: start with a letter (the tiny random model does so about half the time, so
    groups have reward variance); items are made in code."""
    from teamplay.envs.tasks.base import Task
    from teamplay.records import TaskItem


    class LetterTask(Task):
        name = "letter"
        splits = ("train", "test")
        answer_instruction = "Answer with one letter."

        def load(self, split="test", source=None, limit=None, seed=0):
            return [TaskItem(id=f"letter/{split}/{i}", prompt=f"Say the letter {c}.", reference=c)
                    for i, c in enumerate("abcdefgh"[: limit or 8])]

        def extract(self, completion):
            return completion.strip()[:1] or None

        def score(self, completion, item):
            return float(completion[:1].isalpha())
''')


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def error_lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model")


def train_config(tmp_path: Path, model: str | Path, **sections) -> Path:
    data = tiny_train_config(model, tmp_path / "run", **{"steps": 1, "checkpoint_every": 1, "log_episodes": 4,
                                                        **sections})
    path = tmp_path / "train.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


def test_user_credit_method_and_task_train_and_eval_from_a_config(tmp_path, tiny):
    (tmp_path / "my_credit.py").write_text(USER_CREDIT)
    (tmp_path / "my_task.py").write_text(USER_TASK)
    credit = f"{tmp_path / 'my_credit.py'}:last_message"
    task = f"{tmp_path / 'my_task.py'}:LetterTask"
    config = train_config(tmp_path, tiny, task={"name": task, "split": "train", "limit": 4},
                          eval_task={"name": task, "split": "test", "limit": 2},
                          credit={"method": credit, "options": {"scale": 2.0}},
                          rollout={"problems_per_step": 2, "group_size": 4}, steps=2)
    result = invoke("train", "--config", config)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert rows and all(r["problem_id"].startswith("letter/train/") for r in rows)
    for r in rows:  # the user's rule: only the last spoken message carries credit
        assert all(a == 0 for a in r["advantages"][:-1])
    result = invoke("eval", "--task", task, "--limit", 3, "--model", tiny, "--max-new-tokens", 3,
                    "--set", "backend.max_prompt_tokens=512", "-o", tmp_path / "ev")
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert saved["metrics"]["episodes"] == 3  # one episode per problem
    listed = invoke("list", "--plugin", credit, "--plugin", task)
    assert listed.exit_code == 0, listed.output
    assert "my_credit.py:last_message" in listed.output and "my_task.py:LetterTask" in listed.output


def test_teamplay_credit_prints_advantages_of_a_saved_eval(tmp_path):
    out = tmp_path / "ev"
    result = invoke("eval", "--task", "arith", "--limit", 3, "--protocol", "proposer_reviewer", "--backend",
                    "scripted", "--policy", "random", "--samples", 4, "-o", out)
    assert result.exit_code == 0, result.output
    result = invoke("credit", out, "--method", "shapley", "-o", tmp_path / "credit.jsonl")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "credit.jsonl").read_text().splitlines()]
    episodes = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    assert len(rows) == sum(len(ep["messages"]) for ep in episodes)
    assert {"agent", "stage", "advantage"} <= set(rows[0])
    # shapley is centred per agent within each group of 4 episodes of one problem
    for group in {r["group_id"] for r in rows}:
        for agent in {r["agent"] for r in rows}:
            first = {}
            for r in rows:
                if r["group_id"] == group and r["agent"] == agent and r["spoke"]:
                    first.setdefault(r["episode"], r["advantage"])
            assert abs(sum(first.values())) < 1e-9
    assert "advantage" in result.output
    bad = invoke("credit", out, "--method", "nope")
    assert bad.exit_code == 2 and len(error_lines(bad)) == 1 and "unknown credit method 'nope'" in bad.output


@pytest.mark.parametrize("sections, message", [
    ({"credit": {"method": "nope"}}, "credit.method: unknown credit method 'nope'"),
    ({"credit": {"method": "continuation", "options": {"samples": 0}}}, "credit.options.samples"),
    ({"objective": {"name": "gspo", "kl_beta": 0.5}}, "objective.kl_beta: the gspo objective has no KL term"),
    ({"objective": {"name": "gspo", "loss_agg": "token_mean"}}, "objective.loss_agg"),
    ({"credit": {"method": "tracer_roles"}}, "(trait 'verdicts'); protocol 'single' does not declare it"),
    ({"credit": {"method": "shapley", "options": {"value": "bogus"}}}, "credit.options.value"),
])
def test_refused_at_start_with_one_line_before_the_model_loads(tmp_path, sections, message):
    # the model folder does not exist: a refusal after the model load would be about that folder
    config = train_config(tmp_path, tmp_path / "no-such-model", **sections)
    result = invoke("train", "--config", config)
    assert result.exit_code == 2, result.output
    lines = error_lines(result)
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert message in lines[0]
    assert "no-such-model" not in result.output
    assert not (tmp_path / "run").exists()  # nothing was written either


#: protocols whose items must be split into pieces: split gives each agent its own problem (pairs of
#: the same task's), relay each of its 2 informants one operand of a sum
OWN_TASK = {"split": {"task": {"name": "tuples", "split": "train", "limit": 4, "options": {"task": "arith", "k": 2}}},
            "relay": {"task": {"name": "relay_sum", "split": "train", "limit": 4, "options": {"n_operands": 2}}}}


def test_every_method_and_protocol_pair_trains_or_is_refused_at_start(tmp_path, tiny):
    """The registry walk: each (method, protocol) pair trains one tiny step, or is refused at start
    with one line naming what is missing; a failure after the start is a bug."""
    outcomes = {}
    # the built-in methods: a plugin another test registered in this process (user_nan) is that test's
    built_in = [name for name, m in credit_methods().items() if m.fn.__module__.startswith("teamplay.")]
    for method in built_in:
        for protocol in protocol_names():
            folder = tmp_path / f"{method}-{protocol}"
            folder.mkdir()
            own = OWN_TASK.get(protocol, {})
            config = train_config(folder, tiny, credit={"method": method}, protocol={"name": protocol}, **own,
                                  rollout={"problems_per_step": 1, "group_size": 2},
                                  sampling={"max_new_tokens": 2, "temperature": 1.0}, steps=1)
            result = invoke("train", "--config", config)
            if result.exit_code == 2:
                lines = error_lines(result)
                assert len(lines) == 1 and lines[0].startswith("error: credit.method:"), (method, protocol,
                                                                                          result.output)
                assert not (folder / "run").exists(), (method, protocol)
                outcomes[method, protocol] = "refused"
            else:
                assert result.exit_code == 0, (method, protocol, result.output)
                assert (folder / "run" / "checkpoints").is_dir()
                outcomes[method, protocol] = "trained"
    loto = CREDIT.get("loto")
    loto_runs = loto.requires(loto.options()) <= TRAINER_RESOURCES
    assert outcomes["loto", "single"] == ("trained" if loto_runs else "refused")
    for method in ("loto", "a2tgpo", "continuation"):  # the trainer supplies what they need
        assert outcomes[method, "proposer_reviewer"] == "trained", method
    assert outcomes["grpo", "debate"] == "trained"
    assert outcomes["tracer_roles", "proposer_reviewer"] == "trained"
    assert outcomes["cosac", "vote"] == "refused" and outcomes["cosac", "sequential"] == "trained"
    assert outcomes["cosac", "proposer_reviewer"] == "trained"  # one fixed turn order, reviews by verdict
    assert outcomes["shape_max", "proposer_reviewer"] == "refused"
    assert outcomes["oracle", "split"] == "trained" and outcomes["oracle", "sequential"] == "refused"
    assert outcomes["shapley", "split"] == "trained"
