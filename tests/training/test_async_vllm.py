"""Asynchronous rollouts on the vllm backend, wired against the fake ``vllm`` module
(tests/agents/fake_vllm.py): the generator thread is the only one that generates with the engine
(held-out evaluations included), each loaded snapshot is served as new LoRA requests (a fresh
adapter id per adapter and snapshot), and each batch is served with its own snapshot's ids. The
same run against a real engine is in tests/agents/test_vllm_real.py (``make test-vllm``)."""

from __future__ import annotations

import threading

import pytest

from teamplay.config import TrainConfig, build_config
from tests.agents import fake_vllm
from tests.agents.test_vllm import team_model
from tests.tiny import save_tiny
from tests.training.fixtures import FirstTokenTask

#: the rewarded first characters: the printable ASCII ones, so groups differ in reward and update
PRINTABLE = "".join(chr(c) for c in range(32, 127))


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model")


def seeded_script(prompt_ids, params, lora):
    """Tokens drawn from the request's seed, so the episodes of a group differ (and so do rewards)."""
    seed, n = params.kwargs["seed"] or 0, params.kwargs["max_tokens"]
    return [4 + (seed // 7 + 13 * j) % 250 for j in range(n)], "length"


def async_vllm_trainer(tmp_path, folder, max_staleness: int, evaluate: bool = True):
    """2 steps of 2 x 4 episodes of a proposer and a reviewer on the fake engine; with ``evaluate``,
    2 held-out problems evaluated before, after every step and at the end."""
    from teamplay.training.run.trainer import Trainer

    cfg = build_config(TrainConfig, {
        "backend": {"name": "vllm", "max_prompt_tokens": 512}, "model": {"dtype": "bfloat16"}, "steps": 2,
        "sampling": {"max_new_tokens": 2, "temperature": 1.0}, "eval_sampling": {"max_new_tokens": 2},
        "rollout": {"problems_per_step": 2, "group_size": 4, "max_staleness": max_staleness},
        "objective": {"old_logprobs": "generation"}, "optim": {"lr": 0.01, "minibatch_size": 64},
        "eval_every": 1 if evaluate else None,
        "protocol": {"name": "proposer_reviewer"}, "output_dir": str(tmp_path / "run"), "tensorboard": False})
    task = FirstTokenTask(PRINTABLE)
    return Trainer(cfg, team_model=team_model(folder), task=task, items=task.load("train", limit=6),
                   eval_items=task.load("test", limit=2) if evaluate else [])


def record_threads(engine) -> list[tuple[str, list]]:
    """Every ``generate`` call of ``engine`` from now on, as (calling thread's name, its LoRA requests)."""
    seen: list[tuple[str, list]] = []
    generate = engine.generate

    def recording(prompts, sampling_params, lora_request, **kwargs):
        seen.append((threading.current_thread().name, list(lora_request)))
        return generate(prompts, sampling_params, lora_request, **kwargs)

    engine.generate = recording
    return seen


def test_only_the_generator_thread_generates_once_it_runs(monkeypatch, tmp_path, tiny_folder):
    fake = fake_vllm.install(monkeypatch, script=seeded_script)
    trainer = async_vllm_trainer(tmp_path, tiny_folder, max_staleness=1)
    calls = record_threads(fake.engines[0])
    result = trainer.train()
    assert result.eval_after is not None and len(result.history) == 2
    threads = [name for name, _ in calls]
    # before the first step the untrained team is evaluated on this thread (no generator yet); from
    # the first step on, every call, training batches and the evaluations after each step and at
    # the end, is the generator's
    first = threads.index("teamplay-rollouts")
    assert first > 0 and set(threads[:first]) == {threading.current_thread().name}
    assert set(threads[first:]) == {"teamplay-rollouts"}
    assert fake.engines[0].shut_down  # the run's engine, stopped once the generator was


def test_each_snapshot_is_served_as_new_lora_ids_and_each_batch_with_its_own(monkeypatch, tmp_path, tiny_folder):
    fake = fake_vllm.install(monkeypatch, script=seeded_script)
    trainer = async_vllm_trainer(tmp_path, tiny_folder, max_staleness=0, evaluate=False)  # only batches generate
    calls = record_threads(fake.engines[0])
    history = trainer.train().history
    generation = trainer.rollouts.generation
    assert [h["optimizer_steps"] > 0 for h in history] == [True, True]  # the second snapshot is new
    # staleness 0: batch k is generated with snapshot k, loaded as new LoRA requests, one id per
    # adapter and snapshot, never given twice (vLLM caches an adapter by its id)
    assert sorted(generation.lora_ids) == [0, 1]
    ids = [i for snapshot in generation.lora_ids.values() for i in snapshot.values()]
    assert len(ids) == len(set(ids)) == 2 * 2
    # ... nor equal to an id of the run's own backend (the learner's adapters, for evaluations)
    assert not set(ids) & {r.lora_int_id for r in trainer.backend.served.values()}
    served = [{r.lora_int_id for r in loras if r is not None} for _, loras in calls]
    by_batch = [set(generation.lora_ids[h["rollout_snapshot_step"]].values()) for h in history]
    assert all(s and any(s <= b for b in by_batch) for s in served)  # each call: one snapshot's ids
    assert by_batch[0] != by_batch[1]
