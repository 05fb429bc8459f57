"""The Ray path on a local cluster with a tiny model: rollout workers, gloo learner ranks, faults.

Actors take seconds each to start on a small machine, so they are built once per module: one
a distributed trainer (``make_trainer``: 2 rollout workers, 1 learner rank) and one 2-rank gloo learner group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from teamplay.config import TrainConfig, build_config
from teamplay.distributed.weights import AdapterWeights
from teamplay.training.learn.samples import PolicySample
from teamplay.training.learn.update import PolicyUpdater
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.run.sections import update_settings
from teamplay.training.wiring.model import build_team_model
from teamplay.training.wiring.sampling import sampling_params
from tests.distributed.conftest import RANKS_VS_ONE_PROCESS_TOL, random_samples
from tests.training.fixtures import FirstTokenTask, InProcessRank

pytest.importorskip("ray")

#: rewarded first characters: the 95 printable ASCII characters, about 37% of the 256 byte tokens,
#: so groups of 4 rarely have equal rewards and every step updates
PRINTABLE = "".join(chr(c) for c in range(32, 127))
REPO = Path(__file__).resolve().parents[2]


class PausingTask(FirstTokenTask):
    """FirstTokenTask whose scorer, while ``arm_file`` exists, pauses ``pause`` seconds the first
    time it runs in a rollout worker process, after writing that process id to ``arm_file.pids``:
    the test kills a worker in that pause, i.e. mid-step, after it generated some turns."""

    def __init__(self, chosen: str, arm_file: str, pause: float = 3.0) -> None:
        super().__init__(chosen)
        self.arm_file, self.pause, self.driver_pid = arm_file, pause, os.getpid()

    def score(self, completion, item):
        marker = Path(f"{self.arm_file}.{os.getpid()}")
        if os.getpid() != self.driver_pid and Path(self.arm_file).exists() and not marker.exists():
            marker.touch()
            time.sleep(self.pause)
        return super().score(completion, item)


def train_config(model_dir: Path, run_dir: Path, address: str, **extra) -> TrainConfig:
    data = {
        "steps": 3, "protocol": {"name": "proposer_reviewer", "options": {"rounds": 2}},
        "model": {"name": str(model_dir), "lora": {"r": 4, "alpha": 8}},
        "rollout": {"problems_per_step": 2, "group_size": 4},
        "sampling": {"max_new_tokens": 2, "temperature": 1.0},
        "optim": {"lr": 0.01, "minibatch_size": 8},
        "output_dir": str(run_dir), "tensorboard": False, "checkpoint_every": 1, "keep_checkpoints": 3,
        "distributed": {"address": address, "rollout_workers": 2, "learner_workers": 1},
        **extra,
    }
    return build_config(TrainConfig, data)


@pytest.fixture(scope="module")
def learner_pair(trainer):
    """2 gloo learner ranks built from the module trainer's config."""
    from teamplay.distributed.learner import LearnerGroup

    cfg = trainer.cfg.model_copy(update={"distributed": trainer.cfg.distributed.model_copy(
        update={"learner_workers": 2})})
    group = LearnerGroup(update_settings(cfg), cfg.model, cfg.distributed, trainer.team)
    yield group
    group.shutdown()


@pytest.fixture(scope="module")
def trainer(ray_cluster, tiny_model_dir, tmp_path_factory):
    from teamplay.distributed.compose import make_trainer

    folder = tmp_path_factory.mktemp("dist")
    cfg = train_config(tiny_model_dir, folder / "run", ray_cluster)
    task = PausingTask(PRINTABLE, arm_file=str(folder / "armed"))
    t = make_trainer(cfg, task=task, items=task.load("train", limit=6))
    t.arm_file = folder / "armed"
    yield t
    t.close()


def test_two_workers_greedy_equal_single_process(trainer):
    greedy = sampling_params(trainer.cfg.eval_sampling)  # temperature 0
    assert greedy.greedy
    jobs = [RolloutJob(item=item, group_id=f"g{k}") for k, item in enumerate(trainer.items[:3]) for _ in range(2)]
    local = RolloutRunner(trainer.make_env, trainer.backend, greedy).run(jobs, seed=11)
    remote = trainer.runner.pool.run(jobs, seed=11, sampling=greedy)
    assert len(remote) == len(local) == 6
    # both workers ran a shard (3 jobs each), and the shards came back in job order
    assert [ep.group_id for ep in remote] == [ep.group_id for ep in local]
    for a, b in zip(local, remote, strict=True):
        assert [m.text for m in a.messages] == [m.text for m in b.messages]
        assert [m.prompt_ids for m in a.messages] == [m.prompt_ids for m in b.messages]
        assert [m.completion_ids for m in a.messages] == [m.completion_ids for m in b.messages]
        assert b.metadata["weights_version"] == 0
    assert sum(len(m.completion_ids) for ep in remote for m in ep.messages) > 0


def test_two_gloo_ranks_equal_one_process(trainer, learner_pair):
    cfg = trainer.cfg
    tm = build_team_model(cfg.model, trainer.team, cfg.seed)
    samples = random_samples(tm, seed=0, n=8)  # 2 minibatches of 4 -> 2 optimiser steps; both adapters in each
    trainable = [a for a in tm.adapter_names if a not in tm.frozen]
    params = {a: tm.adapter_parameters(a) for a in trainable}
    optimizer = torch.optim.AdamW([p for a in trainable for p in params[a]], lr=cfg.optim.lr)
    fresh = optimizer.state_dict()  # no moments yet
    before = AdapterWeights.of(tm, version=0)
    updater = PolicyUpdater(cfg, tm, params, optimizer)
    # 2 steps of one 8-sample minibatch each: each rank sees 4 samples of each minibatch
    assert [updater.update(samples, step=s)["optimizer_steps"] for s in (0, 1)] == [1, 1]
    expected = AdapterWeights.of(tm, version=2)

    learner = learner_pair
    assert len(learner.ranks) == 2
    learner.load_state(before, fresh)
    assert [learner.update(samples, step=s, lr=cfg.optim.lr)["optimizer_steps"] for s in (0, 1)] == [1, 1]
    got = learner.weights(version=2)
    worst = moved = 0.0
    for name, state in expected.tensors.items():
        for key, value in state.items():
            worst = max(worst, float((value - got.tensors[name][key]).abs().max()))
            moved = max(moved, float((value - before.tensors[name][key]).abs().max()))
    assert moved > 1e-3  # the update did something...
    assert worst <= RANKS_VS_ONE_PROCESS_TOL  # ...and 2 ranks did the same as 1 process


#: the largest difference allowed between the ranks' mean step-0 loss from their actors and the same
#: mean from this process: the same forward passes on the same weights, in other processes with
#: another thread count, so summation order at most (float32 rounding of losses of order 1 is about
#: 1e-7; measured 0.0). The two ranks' losses differ by 1.5.
SAME_PASS_TOL = 1e-5


def test_two_ranks_report_the_mean_loss_over_ranks(trainer, learner_pair):
    cfg = trainer.cfg
    tm = build_team_model(cfg.model, trainer.team, cfg.seed)
    samples = random_samples(tm, seed=0, n=8)  # one minibatch of 8: each rank scores 4 of it
    before = AdapterWeights.of(tm, version=0)
    trainable = [a for a in tm.adapter_names if a not in tm.frozen]
    rank_loss = []
    for rank in (0, 1):
        before.apply(tm)
        params = {a: tm.adapter_parameters(a) for a in trainable}
        optimizer = torch.optim.AdamW([p for a in trainable for p in params[a]], lr=cfg.optim.lr)
        fresh = optimizer.state_dict()  # no moments yet
        updater = PolicyUpdater(cfg, tm, params, optimizer, group=InProcessRank(rank, world=2))
        rank_loss.append(updater.update(samples, step=0)["loss"])
    # the ranks' shares give losses far apart: reporting rank 0's would miss the mean by far more
    # than the tolerance
    assert abs(rank_loss[0] - rank_loss[1]) > 100 * SAME_PASS_TOL

    learner_pair.load_state(before, fresh)
    metrics = learner_pair.update(samples, step=0, lr=cfg.optim.lr)
    assert metrics["optimizer_steps"] == 1
    assert abs(metrics["loss"] - (rank_loss[0] + rank_loss[1]) / 2) <= SAME_PASS_TOL


def test_dead_learner_rank_fails_cleanly(learner_pair):
    from teamplay.distributed.learner import LearnerDied

    os.kill(learner_pair.pids[1], signal.SIGKILL)
    sample = PolicySample(adapter="proposer", role="proposer", prompt_ids=(5, 6, 7), completion_ids=(8,),
                          old_logprobs=(-5.0,), advantage=1.0, group_id="g")
    # rank 0 would wait for rank 1 in the all-reduce: the group must fail at once, with one message
    with pytest.raises(LearnerDied, match="--resume auto"):
        learner_pair.update([sample, sample], step=0, lr=0.01)


def resumable_trainer(model: Path, run: Path, address: str):
    """The distributed trainer of the kill-and-resume run in ``run`` (its task never pauses)."""
    from teamplay.distributed.compose import make_trainer

    task = PausingTask(PRINTABLE, arm_file=f"{run}.never")
    return make_trainer(train_config(model, run, address), task=task, items=task.load("train", limit=6))


RUN_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from tests.distributed.test_distributed import resumable_trainer
    trainer = resumable_trainer(Path({model!r}), Path(sys.argv[1]), {address!r})
    def on_step(step, metrics):
        if step == {kill_after}:
            os.kill(os.getpid(), signal.SIGKILL)   # the driver dies: no cleanup, no final checkpoint
    trainer.on_step = on_step
    trainer.train(resume="auto")
""")


def _adapters(run: Path, step: int) -> dict[str, torch.Tensor]:
    folder = run / "checkpoints" / f"step-{step:06d}" / "adapters"
    return {f"{sub.name}/{k}": v for sub in sorted(p for p in folder.iterdir() if p.is_dir())
            for k, v in load_file(sub / "adapter_model.safetensors").items()}


@pytest.mark.slow
def test_worker_killed_mid_step_then_whole_run_killed_and_resumed(trainer, ray_cluster, tiny_model_dir, tmp_path):
    # 1. An uninterrupted distributed run of 3 steps, in which rollout worker 0 is killed by pid in
    #    the middle of step 2 (while it pauses in its first scoring call of that step).
    victim = trainer.runner.pool.pids[0]
    killed: list[int] = []

    def killer() -> None:
        marker = Path(f"{trainer.arm_file}.{victim}")
        deadline = time.monotonic() + 300
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if marker.exists():
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    def on_step(step, metrics):
        if step == 1:
            trainer.arm_file.touch()  # from now on each worker pauses once

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    trainer.on_step = on_step
    history = trainer.train().history
    thread.join(timeout=5)
    assert killed == [victim]
    restarts = [h["rollout_restarts"] for h in history]
    assert restarts == [0, 1, 0]
    [event] = history[1]["rollout_restart_events"]
    assert event["pid"] == victim and event["worker"] == 0 and event["jobs"] == 4  # 8 jobs / 2 workers
    # the step completed with every episode once: 2 problems x 4 samples, 2 groups
    assert [h["rollout_episodes"] for h in history] == [8, 8, 8]
    assert [h["groups"] for h in history] == [2, 2, 2]
    # every step updated, and each step's rollouts used the adapters published by the step before
    assert all(h["optimizer_steps"] >= 1 for h in history)
    assert [h["weights_version"] for h in history] == [1, 2, 3]
    assert [h["rollout_weights_version"] for h in history] == [[0], [1], [2]]
    reference = trainer.run_dir

    # 2. The same run as a subprocess, killed with SIGKILL after step 2's checkpoint, then resumed
    #    (in this process: another one than the killed driver, without a second interpreter start-up).
    script = tmp_path / "run.py"
    script.write_text(RUN_SCRIPT.format(repo=str(REPO), model=str(tiny_model_dir), address=ray_cluster,
                                        kill_after=2))
    run = tmp_path / "run"
    first = subprocess.run([sys.executable, str(script), str(run)], env={**os.environ, "PYTHONWARNINGS": "ignore"},
                           capture_output=True, text=True, timeout=400)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000001", "step-000002"]
    resumed = resumable_trainer(tiny_model_dir, run, ray_cluster)
    try:
        assert [h["step"] for h in resumed.train(resume="auto").history] == [3]
    finally:
        resumed.close()
    a, b = _adapters(reference, 3), _adapters(run, 3)
    assert a.keys() == b.keys() and a
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    assert max(float((a[k] - _adapters(run, 1)[k]).abs().max()) for k in a) > 1e-4  # training moved them
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_teamplay_train_runs_a_distributed_config_and_overwrites(ray_cluster, tiny_model_dir, tmp_path):
    # the README's `teamplay train --config configs/demo_ray.yaml`, at tiny size, through the CLI
    # (which hands --overwrite / --resume to the distributed trainer as to the single-process one)
    import yaml
    from typer.testing import CliRunner

    from teamplay.cli import app

    run_dir = tmp_path / "run"
    # one rollout worker: what is checked is the command's handling of the run folder, and each
    # worker is a process that imports torch and loads the model (seconds, twice here)
    cfg = train_config(tiny_model_dir, run_dir, ray_cluster, steps=1,
                       task={"name": "arith", "split": "train", "limit": 8},
                       distributed={"address": ray_cluster, "rollout_workers": 1, "learner_workers": 1})
    path = tmp_path / "ray.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True)))
    runner = CliRunner()
    first = runner.invoke(app, ["train", "-c", str(path)])
    assert first.exit_code == 0, first.output
    assert (run_dir / "checkpoints").is_dir()
    logged = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert logged
    refused = runner.invoke(app, ["train", "-c", str(path)])  # the folder holds a finished run
    assert refused.exit_code == 2 and "error:" in refused.output
    again = runner.invoke(app, ["train", "-c", str(path), "--overwrite"])
    assert again.exit_code == 0, again.output
    # a fresh run's log replaced the first one (not appended to it)
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == len(logged)
