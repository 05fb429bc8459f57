"""Mixed teams: a scripted role plays beside LLM roles in evaluation and training, and never
becomes an adapter, an optimiser parameter or a checkpoint entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from teamplay.agents.backends.hf import HFBackend
from teamplay.agents.backends.scripted import ScriptedBackend, parse_policy
from teamplay.agents.roles import Role, Team
from teamplay.cli import app
from teamplay.config import TrainConfig, build_config
from teamplay.envs.tasks import get_task
from teamplay.errors import ConfigError
from teamplay.records import SamplingParams, TaskItem, TurnRequest
from teamplay.training.run.trainer import Trainer
from tests.training.fixtures import tiny_team_model

runner = CliRunner()
NOISY = "scripted:noisy_proposer(p_right=0.5)"


def proposal(backend: ScriptedBackend, item: TaskItem, sampling: SamplingParams, position: int,
             pending: str | None = None, verdict: str | None = None) -> str:
    request = TurnRequest(agent="proposer_0", role="proposer", stage="propose", round=0 if pending is None else 2,
                          chat=(), item=item, metadata={"pending_answer": pending, "last_verdict": verdict})
    return backend.generate([request], sampling, positions=[position])[0].text


def test_noisy_proposer_rate_and_compliance():
    item = TaskItem(id="t/0", prompt="2+3?", reference="5")
    right, wrong = "The answer is \\boxed{5}.", "The answer is \\boxed{6}."
    sampling = SamplingParams(temperature=1.0, seed=11)
    for p, expected in ((0.0, 0), (1.0, 400)):
        backend = ScriptedBackend(f"noisy_proposer(p_right={p})")
        assert sum(proposal(backend, item, sampling, i) == right for i in range(400)) == expected
    half = ScriptedBackend("noisy_proposer(p_right=0.5)")
    texts = [proposal(half, item, sampling, i) for i in range(400)]
    assert set(texts) == {right, wrong}
    # Binomial(400, 0.5): sd 10, so 200 +- 50 is a 5-sigma band
    assert 150 <= texts.count(right) <= 250
    assert texts == [proposal(half, item, sampling, i) for i in range(400)]  # deterministic
    # compliant: a WRONG verdict switches the answer, any other verdict keeps it
    assert proposal(half, item, sampling, 0, pending="5", verdict="WRONG") == wrong
    assert proposal(half, item, sampling, 0, pending="6", verdict="WRONG") == right
    assert proposal(half, item, sampling, 0, pending="6", verdict="RIGHT") == wrong
    assert proposal(half, item, sampling, 0, pending="5", verdict=None) == right


def test_policy_spec_errors_name_the_problem():
    with pytest.raises(ConfigError, match="unknown scripted policy 'nope'"):
        parse_policy("nope")
    with pytest.raises(ConfigError, match="unknown option 'q'"):
        parse_policy("noisy_proposer(q=1)")
    with pytest.raises(ConfigError, match="out of range"):
        parse_policy("noisy_proposer(p_right=1.5)")
    with pytest.raises(ValueError, match="expected 'scripted:NAME'"):
        Role(name="proposer", policy="noisy_proposer")
    with pytest.raises(ValueError, match="has no adapter"):
        Role(name="proposer", policy="scripted:truthful", adapter="shared")
    team = Team(roles=(Role(name="proposer", policy=NOISY), Role(name="reviewer")))
    assert team.adapter_names() == ("reviewer",)
    assert team.scripted_roles() == {"proposer": "noisy_proposer(p_right=0.5)"}


def test_eval_cli_controlled_team_accuracy_is_the_reviews_accuracy(tmp_path):
    # A compliant proposer follows the verdict, so with a truthful reviewer every final answer is
    # right whatever the first proposal was, and with a reviewer that always errs none is.
    team = json.dumps([{"name": "proposer", "policy": "scripted:noisy_proposer(p_right=0.3)"},
                       {"name": "reviewer"}])
    for policy, expected in (("truthful", 1.0), ("wrong", 0.0)):
        out = tmp_path / policy
        result = runner.invoke(app, ["eval", "--task", "arith", "--limit", "60", "--protocol", "proposer_reviewer",
                                     "--backend", "scripted", "--policy", policy, "--set", "protocol.options.rounds=3",
                                     "--set", f"team.roles={team}", "-o", str(out)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        metrics = json.loads((out / "results.json").read_text())["metrics"]
        assert metrics["team_accuracy"] == expected
        assert 0.1 <= metrics["initial_accuracy"] <= 0.5  # p_right = 0.3 over 60 problems
        team_metrics = metrics["extra"]["team"]
        good = policy == "truthful"
        assert team_metrics["verdict_accuracy"] == float(good)  # exact: counts over counts: 0 or 1
        # exact: counts over counts: 0 or 1
        assert team_metrics["wrong_caught"] == float(good) and team_metrics["right_rejected"] == float(not good)
        # exact: counts over counts: 0 or 1
        assert team_metrics["correction_rate"] == float(good) and team_metrics["harm_rate"] == float(not good)
    bad = runner.invoke(app, ["eval", "--task", "arith", "--limit", "2", "--protocol", "proposer_reviewer",
                              "--backend", "scripted", "--set",
                              'team.roles=[{"name": "proposer", "policy": "scripted:nope"}, {"name": "reviewer"}]'])
    assert bad.exit_code == 2
    assert "policy 'scripted:nope'" in bad.output and "unknown scripted policy 'nope'" in bad.output


@pytest.mark.slow  # about 20 s: 3 steps of 16 tiny-model episodes
def test_training_only_the_llm_reviewer_against_a_scripted_proposer(tmp_path: Path):
    team = Team(roles=(Role(name="proposer", policy=NOISY), Role(name="reviewer")))
    task = get_task("arith")
    cfg = build_config(TrainConfig, {
        "steps": 3, "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
        "team": team.model_dump(), "rollout": {"problems_per_step": 4, "group_size": 4},
        "sampling": {"max_new_tokens": 3, "temperature": 1.0}, "optim": {"lr": 0.01, "minibatch_size": 64},
        "output_dir": str(tmp_path / "run"), "tensorboard": False, "checkpoint_every": 3,
    })
    model = tiny_team_model(team)
    assert model.adapter_names == ("reviewer",)  # no adapter for the scripted proposer
    trainer = Trainer(cfg, team_model=model, backend=HFBackend(model, max_prompt_tokens=1024), task=task,
                      items=task.load("train", limit=8))
    optimised = {id(p) for group in trainer.learner.optimizer.param_groups for p in group["params"]}
    assert optimised == {id(p) for p in model.adapter_parameters("reviewer")}
    before = {n: p.detach().clone() for n, p in model.model.named_parameters()}
    history = trainer.train().history

    # the coin of the proposer makes rewards differ within groups, so the reviewer got gradients
    assert sum(h["samples"] for h in history) > 0
    # exact: a weight no update touches keeps its bits
    changed = {n for n, p in model.model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert changed and all(".lora_" in n and ".reviewer." in n for n in changed)
    adapters = tmp_path / "run" / "checkpoints" / "step-000003" / "adapters"
    assert sorted(p.name for p in adapters.iterdir() if p.is_dir()) == ["reviewer"]
    assert json.loads((adapters / "team_adapters.json").read_text())["adapters"] == ["reviewer"]
    # the logged episodes: proposer text is the script's (no tokens, no adapter), the reviewer's is the model's
    for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines():
        for msg in json.loads(line)["messages"]:
            if msg["role"] == "proposer":
                assert msg["adapter"] is None and msg["completion_ids"] == []
                assert msg["text"].startswith("The answer is \\boxed{")
            else:
                assert msg["adapter"] == "reviewer" and msg["completion_ids"]
