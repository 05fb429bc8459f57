"""``token_budget``: a run stops at the step whose generated tokens (episodes' plus counterfactual)
reach the budget; the count survives a checkpoint and a resume; federated runs refuse it."""

from __future__ import annotations

import json

import pytest

from teamplay.config import FederatedConfig, build_config
from teamplay.errors import ConfigError
from teamplay.training.store.checkpoint import latest_checkpoint, load_checkpoint
from teamplay.training.store.metrics import generated_tokens
from tests.training.test_trainer import make_trainer


def test_generated_tokens_add_the_counterfactual_counters():
    assert generated_tokens({"tokens": 40, "replay_tokens": 7, "counterfactual_tokens": 3, "samples": 99}) == 50
    assert generated_tokens({"tokens": 12}) == 12


def _steps(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if "reward_mean" in json.loads(line)]


def test_a_run_stops_at_the_step_that_spends_its_budget_and_resumes_with_the_count(tmp_path):
    # 4 problems x 8 episodes x at most 2 tokens: at most 64 tokens per step
    first = make_trainer(tmp_path, {"steps": 2})
    first.train()
    rows = _steps(tmp_path / "run")
    per_step = [generated_tokens(r) for r in rows]
    assert all(0 < n <= 64 for n in per_step)
    assert [r["generated_tokens_total"] for r in rows] == [per_step[0], sum(per_step)]
    saved = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    assert saved.state.generated_tokens == sum(per_step)
    # resumed with a budget one token past what is spent: exactly one more step, of the 10 allowed
    budget = sum(per_step) + 1
    again = make_trainer(tmp_path, {"steps": 10, "token_budget": budget})
    result = again.train(resume="auto")
    rows = _steps(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2, 3] and result.steps == 3
    assert rows[-1]["generated_tokens_total"] >= budget > rows[-2]["generated_tokens_total"]
    assert latest_checkpoint(tmp_path / "run").name == "step-000003"  # the stop is checkpointed
    assert load_checkpoint(latest_checkpoint(tmp_path / "run")).state.generated_tokens == \
        rows[-1]["generated_tokens_total"]
    # a budget already spent trains nothing more
    assert make_trainer(tmp_path, {"steps": 10, "token_budget": budget}).train(resume="auto").steps == 3


def test_a_fresh_run_with_a_budget_stops_before_its_steps(tmp_path):
    trainer = make_trainer(tmp_path, {"steps": 50, "token_budget": 100})
    result = trainer.train()
    rows = _steps(tmp_path / "run")
    assert 2 <= result.steps == len(rows) < 50  # at most 64 tokens per step: at least 2 steps
    assert rows[-1]["generated_tokens_total"] >= 100 > rows[-2]["generated_tokens_total"]


def test_federated_runs_refuse_a_token_budget():
    with pytest.raises(ConfigError, match="token_budget"):
        build_config(FederatedConfig, {"token_budget": 1000})
