"""Asynchronous rollouts (``rollout.max_staleness``) on the tiny model: staleness 0 is the
synchronous run, the bound drops (and counts) stale groups per adapter, and the data-order ledger
holds every problem once across a kill -9 and ``--resume auto``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from teamplay.agents.roles import Role, Team
from teamplay.config import TrainConfig, build_config
from teamplay.errors import ConfigError
from teamplay.training.run.asynchronous.rollouts import AsyncRollouts, Snapshot, group_staleness, overlap_fraction
from teamplay.training.run.data_order import first_state, next_problems
from teamplay.training.run.preemption import Preempted
from teamplay.training.run.trainer import Trainer
from tests.reliability.helpers import signal_on_call
from tests.training.fixtures import FirstTokenTask
from tests.training.test_trainer import LETTERS, REPO, make_trainer

#: keys of a step's line that measure time, or that only an asynchronous run writes
TIMING_AND_ASYNC = {"seconds", "rollout_seconds", "credit_seconds", "rollout_staleness", "stale_groups_dropped",
                    "problem_ids", "stale_problem_ids", "rollout_wait_seconds", "rollout_generate_seconds",
                    "rollout_snapshot_step"}
TWO_ROLES = Team(roles=(Role(name="proposer"), Role(name="reviewer")))


def _trained(tmp_path: Path, overrides: dict, **kwargs):
    trainer = make_trainer(tmp_path, overrides, **kwargs)
    history = trainer.train(overwrite=True).history
    weights = [p.detach().clone() for p in trainer.team_model.trainable_parameters()]
    return history, weights


@pytest.mark.parametrize("team", [None, TWO_ROLES], ids=["one_role", "alternating_roles"])
def test_staleness_zero_gives_the_synchronous_numbers(tmp_path, team):
    overrides = {"steps": 3}
    kwargs = {}
    if team is not None:
        overrides.update({"alternate_roles_every": 1, "protocol": {"options": {"rounds": 2}}})
        kwargs = {"team": team, "protocol": "proposer_reviewer"}
    sync, sync_weights = _trained(tmp_path / "sync", overrides, **kwargs)
    async0, async_weights = _trained(tmp_path / "async", {**overrides, "rollout": {"max_staleness": 0}}, **kwargs)
    assert len(sync) == len(async0) == 3
    for a, b in zip(sync, async0, strict=True):
        assert {k: v for k, v in a.items() if k not in TIMING_AND_ASYNC} == \
               {k: v for k, v in b.items() if k not in TIMING_AND_ASYNC}
        assert b["rollout_staleness"] == 0 and b["stale_groups_dropped"] == 0
    # exact: the same weights, seeds and kernels give the same bits
    assert all(torch.equal(a, b) for a, b in zip(sync_weights, async_weights, strict=True))


def test_staleness_one_trains_on_rollouts_of_the_previous_adapters(tmp_path):
    history, _ = _trained(tmp_path, {"steps": 4, "rollout": {"max_staleness": 1}})
    for step, line in enumerate(history):
        # batch k is begun once the adapters of step k - 1 exist, with the newest there are
        assert max(0, step - 1) <= line["rollout_snapshot_step"] <= step
        assert line["rollout_staleness"] == step - line["rollout_snapshot_step"] <= 1
        assert line["stale_groups_dropped"] == 0


def gate_learner_on_next_batch(trainer) -> None:
    """The learner's update of step ``k`` starts only once the generator has begun batch ``k + 1``
    (the one step it may run ahead): so that batch is always generated with the adapters of before
    step ``k``'s update, by an event, not by timing. The generator begins a batch by calling its
    runner, whose seed names the batch (``cfg.seed * 1_000_003 + k``)."""
    begun: dict[int, threading.Event] = {}
    lock = threading.Lock()

    def event(k: int) -> threading.Event:
        with lock:
            return begun.setdefault(k, threading.Event())

    generation = trainer.rollouts.generation
    make_runner, update = generation.runner, trainer.learner.update
    first_seed = trainer.cfg.seed * 1_000_003

    class Announcing:
        def __init__(self, inner) -> None:
            self.inner = inner

        def run(self, jobs, seed=0):
            event(seed - first_seed).set()
            return self.inner.run(jobs, seed=seed)

    def gated_update(samples, step):
        if step + 1 < trainer.cfg.steps:
            # a safety net against a hang, never reached when the generator runs: it begins batch
            # step + 1 as soon as batch step is taken
            assert event(step + 1).wait(timeout=300), f"the generator never began batch {step + 1}"
        return update(samples, step)

    generation.runner = lambda before_generate: Announcing(make_runner(before_generate))
    trainer.learner.update = gated_update


def test_groups_beyond_the_bound_are_dropped_counted_and_their_problems_consumed(tmp_path):
    trainer = make_trainer(tmp_path, {"steps": 4, "rollout": {"max_staleness": 0}})
    trainer.rollouts.lead = 1  # the generator may run one step ahead of a bound of 0
    gate_learner_on_next_batch(trainer)
    history = trainer.train().history
    dropped = [h["stale_groups_dropped"] for h in history]
    # step 0 is fresh; each step trained after it had to begin its batch with the adapters of one
    # update before, so the next step drops all its groups (no update: the version stays) and the
    # one after that is fresh again
    assert dropped == [0, 4, 0, 4], [(h["rollout_snapshot_step"], h["stale_groups_dropped"]) for h in history]
    assert [h["samples"] == 0 for h in history] == [False, True, False, True]
    _check_ledger(history, trainer.cfg.seed, len(trainer.items), problems_per_step=4)


def test_a_role_that_is_not_trained_does_not_age(tmp_path):
    # alternating roles, one step ahead, bound 0: the role a step trains was not updated since its
    # batch was generated (the other role was), so no group is stale
    trainer = make_trainer(tmp_path, {"steps": 4, "alternate_roles_every": 1, "rollout": {"max_staleness": 0},
                                      "protocol": {"options": {"rounds": 2}}},
                           team=TWO_ROLES, protocol="proposer_reviewer")
    trainer.rollouts.lead = 1
    gate_learner_on_next_batch(trainer)
    history = trainer.train().history
    assert [h["rollout_snapshot_step"] for h in history][1:] == [0, 1, 2]  # one step behind
    assert [h["stale_groups_dropped"] for h in history] == [0, 0, 0, 0]
    assert trainer.rollouts.versions() == {"proposer": 2, "reviewer": 2}


def test_group_staleness_counts_trained_adapters_only():
    def episode(*adapters: str) -> SimpleNamespace:  # what group_staleness reads of an Episode
        return SimpleNamespace(messages=[SimpleNamespace(adapter=a) for a in adapters])

    eps = [episode("proposer", "reviewer")]
    batch, now = {"proposer": 1, "reviewer": 3}, {"proposer": 4, "reviewer": 3}
    assert group_staleness(eps, batch, now, {"proposer", "reviewer"}) == 3
    assert group_staleness(eps, batch, now, {"reviewer"}) == 0
    assert group_staleness([episode("reviewer")], batch, now, {"proposer"}) == 0


def test_overlap_is_the_shared_busy_time_over_the_wall():
    # generator busy [0, 4] and [5, 9], learner [3, 6]: both busy during [3, 4] and [5, 6], 2 of 10 s
    assert overlap_fraction([(0, 4), (5, 9)], [(3, 6)], 10.0) == pytest.approx(0.2, abs=1e-12)


class RecordingGeneration:
    """A ``Generation`` that generates no episodes and records which thread did what; its runner
    raises ``fail`` from batch ``fail_at`` on."""

    evaluates_here = True

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at, self.loaded = fail_at, []

    def weights(self):
        return "weights"

    def runner(self, before_generate):
        return self

    def run(self, jobs, seed=0):
        if self.fail_at is not None and seed >= self.fail_at:
            raise RuntimeError("the engine died")
        return []

    def load(self, snapshot) -> None:
        self.loaded.append(snapshot.step)

    def batch_metrics(self) -> dict:
        return {"thread": threading.current_thread().name}


def rollouts_of(generation, steps: int = 3) -> AsyncRollouts:
    items = FirstTokenTask(LETTERS).load("train", limit=4)
    rollouts = AsyncRollouts(generation, lead=0, items=items, seed=0, problems_per_step=1, group_size=1, steps=steps)
    rollouts.start(first_state(0, len(items)), Snapshot(0, {}, "weights"))
    return rollouts


def test_a_call_runs_on_the_generator_thread_between_batches_and_its_error_is_the_callers():
    def refused():
        raise ValueError("the caller's")

    generation = RecordingGeneration()
    rollouts = rollouts_of(generation)
    try:
        assert rollouts.take(0).runner_metrics == {"thread": "teamplay-rollouts"}  # taken by the generator
        assert rollouts.call(lambda: threading.current_thread().name) == "teamplay-rollouts"
        with pytest.raises(ValueError, match="the caller's"):
            rollouts.call(refused)
        rollouts.publish(Snapshot(1, {}, "weights"))  # the generator went on after the failed call
        assert rollouts.take(1).snapshot_step == 1 and generation.loaded == [0, 1]
    finally:
        rollouts.close()
    assert rollouts.call(lambda: threading.current_thread().name) == threading.current_thread().name  # stopped


def test_a_generator_that_dies_fails_the_next_take_and_call():
    rollouts = rollouts_of(RecordingGeneration(fail_at=0))
    try:
        with pytest.raises(RuntimeError, match="the engine died"):
            rollouts.take(0)
        with pytest.raises(RuntimeError, match="the engine died"):
            rollouts.call(lambda: "never run")
    finally:
        rollouts.close()


def test_asynchronous_rollouts_refuse_what_they_cannot_do(tmp_path):
    base = {"rollout": {"max_staleness": 1}, "output_dir": str(tmp_path)}
    vllm = {"backend": {"name": "vllm"}, "model": {"dtype": "bfloat16"}, "objective": {"old_logprobs": "generation"}}
    with pytest.raises(ConfigError, match="set distributed.max_worker_lag: 0"):
        build_config(TrainConfig, {**base, "distributed": {"max_worker_lag": 1}})
    with pytest.raises(ConfigError, match="controllers"):
        build_config(TrainConfig, {**base, "controllers": {"enabled": True}})
    with pytest.raises(ConfigError, match="need old_logprobs: generation"):
        build_config(TrainConfig, {**base, "objective": {"old_logprobs": "trainer"}})
    with pytest.raises(ConfigError, match="sampler"):
        build_config(TrainConfig, {**base, "backend": {"sampler": "multinomial"}})
    with pytest.raises(ConfigError, match="eval_self_consistency: generates with the vllm engine"):
        build_config(TrainConfig, {**base, **vllm, "eval_self_consistency": True})
    # what is no longer refused: the Ray pool, the vllm backend
    assert build_config(TrainConfig, {**base, "distributed": {}}).distributed.max_worker_lag == 0
    assert build_config(TrainConfig, {**base, **vllm}).backend.name == "vllm"


def test_vllm_in_one_process_refuses_credit_that_regenerates_on_the_learners_thread(tmp_path):
    from teamplay.training.wiring.checks import check_run

    data = {"rollout": {"max_staleness": 1}, "output_dir": str(tmp_path), "backend": {"name": "vllm"},
            "model": {"dtype": "bfloat16"}, "objective": {"old_logprobs": "generation"},
            "credit": {"method": "continuation"}}
    with pytest.raises(ConfigError, match="'continuation' generates with the run's vllm engine"):
        check_run(build_config(TrainConfig, data))
    check_run(build_config(TrainConfig, {**data, "backend": {"name": "hf"}, "model": {}}))  # hf: both threads generate
    check_run(build_config(TrainConfig, {**data, "credit": {"method": "grpo"}}))  # no re-generation


def _check_ledger(lines: list[dict], seed: int, size: int, problems_per_step: int, task=None) -> None:
    """Each step's trained and dropped problems are, together, the next problems of the data
    order (of ``task``'s first ``size`` training items): every problem once, none lost, none twice."""
    state = first_state(seed, size)
    items = (task or FirstTokenTask(LETTERS)).load("train", limit=size)
    for line in lines:
        expected, state = next_problems(state, items, seed, problems_per_step)
        assert sorted(line["problem_ids"] + line["stale_problem_ids"]) == sorted(i.id for i in expected)


RESUME_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    from pathlib import Path
    from tests.training.test_async_rollouts import gate_learner_on_next_batch
    from tests.training.test_trainer import make_trainer
    kill_after = int(os.environ.get("KILL_AFTER", "0"))
    trainer = make_trainer(Path(sys.argv[1]), {{"steps": 5, "checkpoint_every": 1,
                                               "rollout": {{"max_staleness": 0}}}})
    trainer.rollouts.lead = 1
    gate_learner_on_next_batch(trainer)  # so the batch after the kill's step was begun: it is in flight
    def on_step(step, metrics):
        if step == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)   # no cleanup, no final checkpoint
    trainer.on_step = on_step
    trainer.train(resume="auto")
""")


def kill_then_resume(script: Path, folder: Path, run_dir: Path, timeout: int) -> list[dict]:
    """Run ``script folder`` until it kills itself with SIGKILL after step 3 (``KILL_AFTER``), run it
    again to the end (``--resume auto`` inside the script), and return ``run_dir``'s metrics lines,
    having checked that five steps were logged and that some groups were dropped for staleness (so
    the ledger is checked on dropped problems too)."""

    def run(kill_after: int) -> subprocess.CompletedProcess:
        env = {**os.environ, "KILL_AFTER": str(kill_after), "PYTHONWARNINGS": "ignore"}
        return subprocess.run([sys.executable, str(script), str(folder)], env=env, capture_output=True,
                              text=True, timeout=timeout)

    killed = run(kill_after=3)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = run(kill_after=0)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5]
    assert sum(line["stale_groups_dropped"] for line in lines) > 0
    return lines


def test_kill_and_resume_trains_every_problem_once_or_counts_it_dropped(tmp_path):
    script = tmp_path / "train_script.py"
    script.write_text(RESUME_SCRIPT.format(repo=str(REPO)))
    lines = kill_then_resume(script, tmp_path, tmp_path / "run", timeout=300)
    _check_ledger(lines, seed=0, size=8, problems_per_step=4)


def test_sigterm_stops_as_today_and_resume_continues_the_ledger(tmp_path, monkeypatch):
    overrides = {"steps": 4, "checkpoint_every": 100, "rollout": {"max_staleness": 1}}
    signal_on_call(monkeypatch, Trainer, "step", 2, signal.SIGTERM)  # during step 2: it finishes, then the stop
    with pytest.raises(Preempted, match="after step 2; checkpoint step-000002 written"):
        make_trainer(tmp_path, overrides).train()
    assert not [t for t in threading.enumerate() if t.name == "teamplay-rollouts"]  # the generator stopped
    monkeypatch.undo()
    make_trainer(tmp_path, overrides).train(resume="auto")
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3, 4]
    _check_ledger(lines, seed=0, size=8, problems_per_step=4)
