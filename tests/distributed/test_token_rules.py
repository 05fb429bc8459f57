"""A per-message token method (``dgpo``, one with a ``row`` rule) in a distributed run: the learner
ranks apply it inside their update, as the single-process learner does, so the run's token
advantages, losses and adapters are the single-process run's (same seed, same episodes).

Several minibatches per step, each followed by an optimiser step, and two epochs: a sample's token
advantages come from the policy of its own minibatch (a statistics pass before the update would
see the step's first policy instead), and the second epoch may score a sample on another rank than
the first (which must reuse the first epoch's rows).
"""

from __future__ import annotations

import numpy as np
import pytest

from teamplay.config import TrainConfig
from tests.distributed.test_distributed import PRINTABLE, train_config
from tests.training.fixtures import FirstTokenTask

pytest.importorskip("ray")

STEPS = 2

#: How far rounding moves what a distributed run computes from the single process's, measured on one
#: machine under its native kernels (AMX), under ATEN_CPU_CAPABILITY=avx2 with ONEDNN_MAX_CPU_ISA=AVX2
#: and with OMP_NUM_THREADS=1 (the ranks sum in another order and another thread count than the
#: driver): token advantages (magnitude up to 2.04) at most 1.4e-6, the loss (1 rank) 5.4e-7, an
#: adapter entry 2.7e-5 (AdamW divides by sqrt(v), which magnifies the rounding of near-zero
#: gradient entries). Each bound is 7-18x the worst seen. Since the update shares each share's prompts
#: (one pass per distinct prompt, gradients through the shared cache), a rank's share runs other
#: products than the whole minibatch does, and AdamW magnifies that rounding more: an adapter entry
#: moved by up to 3.1e-4 (ddp, 2 ranks, native AVX512), 1.6e-4 (1 rank, under every kernel set and
#: OMP_NUM_THREADS=1), 6.5e-5 under AVX2; fsdp (lock step: the plain path) 0. ADAPTER_TOL is 6x the
#: worst. The seeded wrong variant lr x 1.01 (the distributed run only) moves step 1's token
#: advantages by 1.6e-2 (1,600x ROW_TOL), the loss by 6.4e-2 and an adapter entry by 0.48 (240x
#: ADAPTER_TOL).
ROW_TOL, LOSS_TOL, ADAPTER_TOL = 1e-5, 1e-5, 2e-3


def dgpo_config(model_dir, run_dir, address: str, learner_workers: int = 1, strategy: str = "ddp") -> TrainConfig:
    cfg = train_config(model_dir, run_dir, address, steps=STEPS, team={"roles": [{"name": "proposer"},
                                                                                  {"name": "reviewer"}]},
                       optim={"lr": 0.05, "minibatch_size": 6, "epochs": 2},
                       # all 6 problems x 4 a step: this peaked tiny model starts about 1 reply in 5 with
                       # a printable character, so with 2 groups of 4 a step can have no reward variance
                       # (no token rows to compare); with 6 groups that is about 1 step in 200
                       rollout={"problems_per_step": 6, "group_size": 4},
                       credit={"method": "grpo", "token": {"method": "dgpo", "options": {"mix": 1.0}}})
    # one rollout worker: its sampled episodes are the single-process runner's (same seeds, one batch)
    return cfg.model_copy(update={"distributed": cfg.distributed.model_copy(update={
        "rollout_workers": 1, "learner_workers": learner_workers, "learner_strategy": strategy})})


def run_steps(cfg: TrainConfig) -> tuple[list, list[dict], dict]:
    """``STEPS`` steps of a trainer for ``cfg``: per step its token rows and metrics, then the adapters."""
    from teamplay.distributed.compose import make_trainer

    task = FirstTokenTask(PRINTABLE)
    trainer = make_trainer(cfg, task=task, items=task.load("train", limit=6))
    try:
        results = [trainer.step() for _ in range(STEPS)]
        adapters = {n: p.detach().clone() for n, p in trainer.team_model.model.named_parameters() if "lora_" in n}
    finally:
        trainer.close()
    return [r.token_advantages for r in results], [r.metrics for r in results], adapters


@pytest.fixture(scope="module")
def single_process(ray_cluster, tiny_model_dir, tmp_path_factory):
    cfg = dgpo_config(tiny_model_dir, tmp_path_factory.mktemp("single") / "run", ray_cluster)
    return run_steps(cfg.model_copy(update={"distributed": None}))


@pytest.mark.parametrize(("strategy", "learners"), [("ddp", 1), ("ddp", 2), ("fsdp", 2)])
def test_a_distributed_run_applies_a_per_message_token_method_like_one_process(
        single_process, ray_cluster, tiny_model_dir, tmp_path, strategy, learners):
    """Bounds and their margins against rounding and against a wrong run: see ROW_TOL above."""
    rows, metrics, adapters = run_steps(dgpo_config(tiny_model_dir, tmp_path / "run", ray_cluster, learners, strategy))
    want_rows, want_metrics, want_adapters = single_process
    for step, (got, want) in enumerate(zip(rows, want_rows, strict=True)):
        assert got is not None and want is not None and len(got) == len(want) > 0
        flat = [(a, b) for ga, wa in zip(got, want, strict=True) for a, b in zip(ga, wa, strict=True)]
        assert all((a is None) == (b is None) for a, b in flat)
        pairs = [(a, b) for a, b in flat if a is not None]
        assert len(pairs) == metrics[step]["token_credit_messages"] > 0
        for a, b in pairs:
            np.testing.assert_allclose(a, b, atol=ROW_TOL, rtol=0)
    # not the uniform case: the rows moved with the adapters, minibatch by minibatch
    assert all(m["token_adv_relative_spread"] > 1e-3 for m in want_metrics)
    assert [m["optimizer_steps"] for m in metrics] == [m["optimizer_steps"] for m in want_metrics]
    assert min(m["optimizer_steps"] for m in metrics) >= 4  # several minibatches in each of 2 epochs
    if learners == 1:  # with more ranks the metrics are rank 0's share of each minibatch
        for got, want in zip(metrics, want_metrics, strict=True):
            assert got["loss"] == pytest.approx(want["loss"], abs=LOSS_TOL)
    assert adapters.keys() == want_adapters.keys()
    assert max(float((adapters[k] - want_adapters[k]).abs().max()) for k in adapters) <= ADAPTER_TOL
