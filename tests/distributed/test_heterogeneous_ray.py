"""A heterogeneous team (two roles on two different tiny bases) on the Ray path: one rollout worker
group per base, each worker holding only its base; greedy episodes equal the single-process
heterogeneous runner; training moves each adapter and no base weight.

One distributed trainer (``make_trainer``) for the module: 2 groups x 2 rollout workers + 1 learner rank.
"""

from __future__ import annotations

import os
import signal

import pytest
import torch

from teamplay.config import TrainConfig, build_config
from teamplay.distributed.rollout import RestartEvent
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.wiring.sampling import sampling_params
from tests.distributed.conftest import save_scaled_tiny
from tests.training.fixtures import FirstTokenTask
from tests.training.test_heterogeneous import hetero_settings

pytest.importorskip("ray")

PRINTABLE = "".join(chr(c) for c in range(32, 127))


def hetero_config(base_a, base_b, run_dir, address: str, **distributed) -> TrainConfig:
    return build_config(TrainConfig, {
        **hetero_settings(base_a, base_b, run_dir),
        "distributed": {"address": address, "rollout_workers": 2, "learner_workers": 1, **distributed}})


@pytest.fixture(scope="module")
def hetero(ray_cluster, tmp_path_factory):
    from teamplay.distributed.compose import make_trainer

    folder = tmp_path_factory.mktemp("hetero")
    # two different bases: other seeds and other widths (hidden 32 vs 48)
    base_a = save_scaled_tiny(folder / "base-a", seed=1, hidden=32)
    base_b = save_scaled_tiny(folder / "base-b", seed=2, hidden=48)
    task = FirstTokenTask(PRINTABLE)
    t = make_trainer(hetero_config(base_a, base_b, folder / "run", ray_cluster),
                           task=task, items=task.load("train", limit=6))
    t.bases = (str(base_a), str(base_b))
    yield t
    t.close()


def _in_actor(actor, fn):
    """``fn(instance)`` run inside a Ray actor (its live object, not a copy)."""
    import ray

    return ray.get(actor.__ray_call__.remote(fn))


def _loaded(worker) -> tuple[list[str], tuple[str, ...]]:
    """The base folders a rollout worker loaded and the adapters it serves."""
    tm = worker.team_model
    parts = getattr(tm, "parts", {"": tm}).values()
    return sorted(p.model.base_model.model.config._name_or_path for p in parts), tuple(tm.adapter_names)


def test_one_group_per_base_each_worker_loads_only_its_base(hetero):
    base_a, base_b = hetero.bases
    pool = hetero.runner.pool
    assert sorted(pool.groups) == sorted(hetero.bases)
    expected = {base_a: ("proposer",), base_b: ("reviewer",)}
    for base, group in pool.groups.items():
        assert len(group.workers) == 2  # rollout_workers applies per group
        for worker in group.workers:
            assert _in_actor(worker, _loaded) == ([base], expected[base])


def test_greedy_episodes_equal_single_process_heterogeneous_runner(hetero):
    greedy = sampling_params(hetero.cfg.eval_sampling)
    assert greedy.greedy
    jobs = [RolloutJob(item=item, group_id=f"g{k}") for k, item in enumerate(hetero.items[:3]) for _ in range(2)]
    # the driver's backend is the single-process heterogeneous one (a RoutingBackend over two hf backends)
    local = RolloutRunner(hetero.make_env, hetero.backend, greedy).run(jobs, seed=5)
    remote = hetero.runner.pool.run(jobs, seed=5, sampling=greedy)
    assert len(remote) == len(local) == 6
    agents = set()
    for a, b in zip(local, remote, strict=True):
        assert a.group_id == b.group_id
        assert [m.text for m in a.messages] == [m.text for m in b.messages]
        assert [m.prompt_ids for m in a.messages] == [m.prompt_ids for m in b.messages]
        assert [m.completion_ids for m in a.messages] == [m.completion_ids for m in b.messages]
        agents |= {m.agent for m in b.messages}
    assert {a.split("_")[0] for a in agents} == {"proposer", "reviewer"}  # both bases generated
    assert sum(len(m.completion_ids) for ep in remote for m in ep.messages) > 0


def test_dead_group_worker_is_replaced_and_its_requests_rerun(hetero):
    base_b = hetero.bases[1]
    group = hetero.runner.pool.groups[base_b]
    victim = group.pids[0]
    os.kill(victim, signal.SIGKILL)  # the reviewer base's worker 0 dies between steps
    greedy = sampling_params(hetero.cfg.eval_sampling)
    jobs = [RolloutJob(item=item, group_id=f"g{k}") for k, item in enumerate(hetero.items[3:5]) for _ in range(2)]
    local = RolloutRunner(hetero.make_env, hetero.backend, greedy).run(jobs, seed=7)
    remote = hetero.runner.pool.run(jobs, seed=7, sampling=greedy)
    # the first reviewer call has the 4 episodes' requests: worker 0's chunk is 2 of them, re-sent
    # to its replacement; nothing else restarted
    assert hetero.runner.pool.last_events == [RestartEvent(worker=0, pid=victim, jobs=2, error="ActorDiedError",
                                                    base=base_b)]
    assert group.pids[0] != victim and len(group.workers) == 2
    assert [[m.completion_ids for m in ep.messages] for ep in remote] == \
        [[m.completion_ids for m in ep.messages] for ep in local]


def test_two_steps_move_each_adapter_and_no_base(hetero):
    tm = hetero.team_model
    owned = {a: tm.base_of(a) for a in tm.adapter_names}
    adapters_before = {a: [p.detach().clone() for p in tm.adapter_parameters(a)] for a in owned}
    learner = hetero.learner.group.ranks[0]

    def base_weights(rank):
        return {f"{b}::{n}": p.detach().clone() for b, part in rank.team_model.parts.items()
                for n, p in part.model.named_parameters() if ".lora_" not in n}

    bases_before = _in_actor(learner, base_weights)
    seen = {}

    def on_step(step, metrics):  # train() ends the actors when it returns: read the rank before
        if step == 2:
            seen["bases"] = _in_actor(learner, base_weights)

    hetero.on_step = on_step
    history = hetero.train().history
    assert [h["optimizer_steps"] >= 1 for h in history] == [True, True]
    assert [h["rollout_weights_version"] for h in history] == [[0], [1]]
    # each group got only its base's adapters: per step, 2 workers x (proposer + reviewer bytes);
    # every adapter to every worker would be 2 groups x 2 workers x (proposer + reviewer bytes)
    adapter_bytes = sum(p.numel() * p.element_size() for a in owned for p in tm.adapter_parameters(a))
    assert [h["rollout_sync_bytes"] for h in history] == [2 * adapter_bytes, 2 * adapter_bytes]
    # each adapter moved (in the learner, published to the driver's copy)...
    for a, before in adapters_before.items():
        after = tm.adapter_parameters(a)
        assert max(float((x - y.detach()).abs().max()) for x, y in zip(before, after, strict=True)) > 1e-4, a
    # ...and every base weight stayed bit-identical where the update ran
    bases_after = seen["bases"]
    assert bases_after.keys() == bases_before.keys() and {k.split("::")[0] for k in bases_after} >= set(owned.values())
    # exact: a weight no update touches keeps its bits
    assert all(torch.equal(bases_before[k], bases_after[k]) for k in bases_before)


def test_workers_per_group_beyond_the_cluster_is_one_config_error(ray_cluster, tmp_path):
    from teamplay.distributed.compose import make_trainer
    from teamplay.errors import ConfigError

    base_a = save_scaled_tiny(tmp_path / "base-a", seed=1, hidden=32)
    base_b = save_scaled_tiny(tmp_path / "base-b", seed=2, hidden=48)
    task = FirstTokenTask(PRINTABLE)
    # rollout_workers counts per base: 2 groups x 4 workers x 1 CPU + 1 learner x 1 CPU = 9 > the
    # session cluster's 8 CPUs (1 group would need 5 and fit)
    cfg = hetero_config(base_a, base_b, tmp_path / "run", ray_cluster, rollout_workers=4)
    with pytest.raises(ConfigError, match=r"need 9 CPUs .*2 base model group\(s\) x 4 rollout workers"):
        make_trainer(cfg, task=task, items=task.load("train", limit=2))
