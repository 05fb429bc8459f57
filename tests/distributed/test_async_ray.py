"""Asynchronous rollouts on the Ray pool (``rollout.max_staleness`` with ``distributed:``), on a
local cluster of 2 CPUs with the tiny model: 2 rollout workers (half a CPU each) and 1 learner rank.

Staleness 0 is the synchronous Ray run number for number (held-out evaluations included, which go
through the generator thread); beyond the bound groups are dropped and counted, and the workers
generate with the snapshot's version; a kill -9 and ``--resume auto`` lose no problem of the data
order.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
import torch

from teamplay.config import TrainConfig, build_config
from tests.distributed.test_distributed import PRINTABLE
from tests.training.fixtures import FirstTokenTask
from tests.training.test_async_rollouts import (
    TIMING_AND_ASYNC,
    _check_ledger,
    gate_learner_on_next_batch,
    kill_then_resume,
)

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]


def untimed(value):
    """``value`` (a metrics line, or part of one) without what measures time: keys ending in
    ``seconds`` or ``per_second``."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if not k.endswith(("seconds", "per_second"))}
    return value


@pytest.fixture(scope="module")
def cluster():
    """The session's cluster when one runs (the whole suite), else a local one of 2 CPUs for this
    module. Yields its GCS address, which subprocess drivers join."""
    ray = pytest.importorskip("ray")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    if ray.is_initialized():
        yield ray.get_runtime_context().gcs_address
        return
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def async_config(model_dir: Path, run_dir: Path, address: str, max_staleness: int | None, **extra) -> TrainConfig:
    data = {
        "steps": 4, "protocol": {"name": "proposer_reviewer", "options": {"rounds": 2}},
        "model": {"name": str(model_dir), "lora": {"r": 4, "alpha": 8}},
        "rollout": {"problems_per_step": 2, "group_size": 4, "max_staleness": max_staleness},
        "sampling": {"max_new_tokens": 2, "temperature": 1.0},
        "optim": {"lr": 0.01, "minibatch_size": 8},
        "output_dir": str(run_dir), "tensorboard": False, "checkpoint_every": 1, "keep_checkpoints": 5,
        "distributed": {"address": address, "rollout_workers": 2, "learner_workers": 1,
                        "resources": {"rollout": {"num_cpus": 0.5}, "learner": {"num_cpus": 1}}},
        **extra,
    }
    return build_config(TrainConfig, data)


def make(cfg: TrainConfig, eval_items: int = 0):
    from teamplay.distributed.compose import make_trainer

    task = FirstTokenTask(PRINTABLE)
    return make_trainer(cfg, task=task, items=task.load("train", limit=6),
                        eval_items=task.load("test", limit=eval_items) if eval_items else [])


def test_staleness_zero_on_the_pool_gives_the_synchronous_ray_run(cluster, tiny_model_dir, tmp_path):
    def trained(name: str, max_staleness: int | None):
        cfg = async_config(tiny_model_dir, tmp_path / name, cluster, max_staleness, eval_every=2)
        trainer = make(cfg, eval_items=3)
        history = trainer.train().history
        return history, [p.detach().clone() for p in trainer.team_model.trainable_parameters()]

    sync, sync_weights = trained("sync", None)
    async0, async_weights = trained("async", 0)
    assert len(sync) == len(async0) == 4
    # rollout_sync_bytes counts what a batch's workers loaded: after step 2 the synchronous run's
    # held-out evaluation loads version 2 before batch 2 does, while at staleness 0 the generator
    # begins batch 2 as soon as step 2's adapters exist, during that evaluation
    ignored = TIMING_AND_ASYNC | {"rollout_sync_bytes"}
    for a, b in zip(sync, async0, strict=True):
        assert untimed({k: v for k, v in a.items() if k not in ignored}) == \
               untimed({k: v for k, v in b.items() if k not in ignored})
        assert b["rollout_staleness"] == 0 and b["stale_groups_dropped"] == 0
    assert "heldout" in sync[1]  # the evaluation of step 2 ran, through the generator thread, and agreed
    assert [h["rollout_weights_version"] for h in async0] == [[0], [1], [2], [3]]  # every step updated
    # exact: the same weights, seeds and kernels give the same bits
    assert all(torch.equal(a, b) for a, b in zip(sync_weights, async_weights, strict=True))


def test_the_pool_drops_and_counts_groups_beyond_the_bound(cluster, tiny_model_dir, tmp_path):
    trainer = make(async_config(tiny_model_dir, tmp_path, cluster, 0))
    trainer.rollouts.lead = 1  # one step ahead of a bound of 0
    gate_learner_on_next_batch(trainer)
    history = trainer.train().history
    # batch k + 1 is begun during step k's update, with the adapters of before it: stale at step k + 1
    # when step k updated, which drops all its groups, so step k + 2 is fresh again
    assert [h["stale_groups_dropped"] for h in history] == [0, 2, 0, 2]
    # both workers generated each batch with the snapshot's version (every updating step publishes
    # version step + 1: steps 0 and 2 updated, 1 and 3 had nothing to train on)
    assert [h["rollout_weights_version"] for h in history] == [[0], [0], [1], [1]]
    assert [h["optimizer_steps"] > 0 for h in history] == [True, False, True, False]
    _check_ledger(history, seed=0, size=6, problems_per_step=2, task=FirstTokenTask(PRINTABLE))


RUN_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from tests.distributed.test_async_ray import async_config, make
    from tests.training.test_async_rollouts import gate_learner_on_next_batch
    trainer = make(async_config(Path({model!r}), Path(sys.argv[1]), {address!r}, 0, steps=5))
    trainer.rollouts.lead = 1
    gate_learner_on_next_batch(trainer)  # the batch after the kill's step was begun: it is in flight
    kill_after = int(os.environ.get("KILL_AFTER", "0"))
    def on_step(step, metrics):
        if step == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)   # the driver dies: no cleanup, no final checkpoint
    trainer.on_step = on_step
    trainer.train(resume="auto")
""")


@pytest.mark.slow
def test_kill_and_resume_on_the_pool_trains_every_problem_once_or_counts_it_dropped(cluster, tiny_model_dir,
                                                                                     tmp_path):
    script = tmp_path / "run_script.py"
    script.write_text(RUN_SCRIPT.format(repo=str(REPO), model=str(tiny_model_dir), address=cluster))

    lines = kill_then_resume(script, tmp_path / "run", tmp_path / "run", timeout=600)
    _check_ledger(lines, seed=0, size=6, problems_per_step=2, task=FirstTokenTask(PRINTABLE))


def test_a_worker_holding_newer_adapters_than_the_published_ones_loads_them():
    # an asynchronous run publishes its generator's snapshot after a held-out evaluation published
    # the learner's newer adapters: the workers must go back to the snapshot's
    from types import SimpleNamespace

    from teamplay.distributed.actors import ActorGroup
    from teamplay.distributed.weights import AdapterWeights

    loads: list[tuple[int, int]] = []

    def actor(k: int) -> SimpleNamespace:
        return SimpleNamespace(load_weights=SimpleNamespace(remote=lambda ref: loads.append((k, ref.version))))

    group = ActorGroup.__new__(ActorGroup)  # its __init__ starts Ray actors: not needed here
    group.ray = SimpleNamespace(put=lambda weights: weights)
    group.actors, group.max_staleness, group.load_first = [actor(0), actor(1)], 0, False
    group.versions, group.loaded, group.latest = [0, 0], [False, False], None
    group.publish(AdapterWeights(version=3, tensors={}))
    assert [group.sync(k) for k in (0, 1)] == [0, 0] and loads == [(0, 3), (1, 3)]  # lagging: loaded
    group.publish(AdapterWeights(version=2, tensors={}))
    group.sync(0)
    assert loads[-1] == (0, 2) and group.versions == [2, 3]  # ahead of the published version: loaded too
    group.sync(0)
    assert len(loads) == 3  # holding the published version: nothing sent
