"""``benchmarks/credit_gradient.py``: the step gradient it measures is the trainer's own first-update
direction, its quick path runs on a tiny model, and BENCHMARKS.md holds the table its committed
per-step data give."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks import credit_gradient
from benchmarks.common import replace_region
from teamplay.training.learn.update import PolicyUpdater
from tests.tiny import save_tiny
from tests.training.test_old_logprobs import config
from tests.training.test_update_shared_prompts import samples, team

ROOT = Path(__file__).resolve().parents[2]
#: two float32 computations of one gradient on the same rows (the trainer's loss path and the
#: benchmark's): measured equal to 1e-7; 2e-5 as in the update tests, for other CPUs' kernels
TOL = 2e-5


def test_the_step_gradient_is_minus_the_trainers_loss_gradient_summed_over_answers():
    # the trainer at ratio 1 (old log-probs from its own pass): its loss per adapter's share of a
    # minibatch, weighted by the share's size, is what the benchmark differentiates
    cfg = config("trainer", minibatch=16)
    tm = team()
    batch = samples(tm, 16)
    params = [p for a in tm.adapter_names for p in tm.adapter_parameters(a)]
    mine = credit_gradient._step_gradient(tm, params, batch, cfg, torch)
    updater = PolicyUpdater(cfg, tm, {a: tm.adapter_parameters(a) for a in tm.adapter_names},
                            torch.optim.SGD(params, lr=0.0))
    for p in params:
        p.grad = None
    for adapter in tm.adapter_names:
        indices = [i for i, s in enumerate(batch) if s.adapter == adapter]
        loss, _, _ = updater.loss(adapter, [batch[i] for i in indices], cfg.sampling.temperature, indices)
        (-loss * len(indices)).backward()
    theirs = torch.cat([p.grad.detach().double().flatten() for p in params]).numpy()
    assert np.abs(theirs).max() > 1e-3  # a real gradient, on both adapters
    np.testing.assert_allclose(mine, theirs, rtol=TOL, atol=TOL * np.abs(theirs).max())
    # no kept answer: no movement
    assert not credit_gradient._step_gradient(tm, params, [], cfg, torch).any()


def test_the_cosine_of_a_vector_with_itself_is_one_and_with_nothing_zero():
    v = np.array([3.0, -4.0])
    assert credit_gradient._cos(v, 2 * v) == pytest.approx(1.0)
    assert credit_gradient._cos(v, -v) == pytest.approx(-1.0)
    assert credit_gradient._cos(v, np.zeros(2)) == 0.0  # exact: a zero norm returns the constant 0.0


def test_quick_measure_on_a_tiny_model_keeps_the_arenas_batch(tmp_path):
    model = str(save_tiny(tmp_path / "model"))
    entry = credit_gradient.measure(2, model, steps=2, seed=0)
    assert len(entry["steps"]) == 2
    # 32 answers a step, every one credited by both methods, in one order
    assert len(entry["answers"]["grpo"]) == len(entry["answers"]["oracle"]) == 64
    for row in entry["steps"]:
        assert all(-1.0 <= c <= 1.0 for c in row["cos"].values())
        assert all(0 <= n <= 32 for n in row["samples"].values())


def test_committed_table_is_the_one_the_committed_data_give():
    data = json.loads(credit_gradient.DATA.read_text(encoding="utf-8"))
    assert [entry["k"] for entry in data["sizes"]] == list(credit_gradient.TEAM_SIZES)
    body, headline, notes = credit_gradient.table(data)
    region = credit_gradient.Result("credit_gradient", body, headline, None, tuple(notes)).markdown(
        data["command"], data["machine"])
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert replace_region(text, "credit_gradient", region) == text
