"""The FSDP2 learner (``distributed.learner_strategy: fsdp``): 2 gloo ranks that shard the base and
the LoRA parameters give the adapters and AdamW moments of 1 process, in the checkpoint's format."""

from __future__ import annotations

import pytest
import torch

from teamplay.config import TrainConfig, build_config
from teamplay.distributed.weights import AdapterWeights
from teamplay.errors import ConfigError
from teamplay.training.learn.update import PolicyUpdater
from teamplay.training.run.sections import update_settings
from teamplay.training.wiring.model import build_team_model
from tests.distributed.conftest import RANKS_VS_ONE_PROCESS_TOL, random_samples

pytest.importorskip("ray")


def fsdp_config(model_dir, run_dir, address: str) -> TrainConfig:
    return build_config(TrainConfig, {
        "protocol": {"name": "proposer_reviewer", "options": {"rounds": 2}},
        "model": {"name": str(model_dir), "lora": {"r": 4, "alpha": 8}},
        "team": {"roles": [{"name": "proposer"}, {"name": "reviewer"}]},
        "sampling": {"max_new_tokens": 2, "temperature": 1.0},
        "optim": {"lr": 0.01, "minibatch_size": 8},
        "output_dir": str(run_dir), "tensorboard": False,
        "distributed": {"address": address, "learner_workers": 2, "learner_strategy": "fsdp"}})


def _worst(a: AdapterWeights, b: AdapterWeights) -> float:
    assert a.tensors.keys() == b.tensors.keys()
    return max(float((a.tensors[n][k] - b.tensors[n][k]).abs().max()) for n in a.tensors for k in a.tensors[n])


def _local_rows(rank) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """A base weight of a rank: its type and its local and full shapes."""
    p = dict(rank.team_model.model.named_parameters())["base_model.model.model.layers.0.mlp.up_proj.base_layer.weight"]
    return type(p).__name__, tuple(p.to_local().shape), tuple(p.shape)


def test_two_fsdp_ranks_equal_one_process_and_share_its_checkpoint_format(ray_cluster, tiny_model_dir, tmp_path):
    import ray

    from teamplay.distributed.learner import LearnerGroup

    cfg = fsdp_config(tiny_model_dir, tmp_path / "run", ray_cluster)
    tm = build_team_model(cfg.model, cfg.team, cfg.seed)
    samples = random_samples(tm, seed=0)
    params = {a: tm.adapter_parameters(a) for a in tm.adapter_names}
    optimizer = torch.optim.AdamW([p for a in tm.adapter_names for p in params[a]], lr=cfg.optim.lr)
    fresh = optimizer.state_dict()
    before = AdapterWeights.of(tm, version=0)
    updater = PolicyUpdater(cfg, tm, params, optimizer)
    # 2 steps of one 8-sample minibatch: each rank's share has 2 messages of each adapter
    assert [updater.update(samples, step=s)["optimizer_steps"] for s in (0, 1)] == [1, 1]
    expected, expected_optim = AdapterWeights.of(tm, version=2), optimizer.state_dict()

    group = LearnerGroup(update_settings(cfg), cfg.model, cfg.distributed, cfg.team)
    try:
        # each rank holds half the rows of a base weight (tiny MLP 32 -> 64: rows 64 -> 32 per rank)
        shapes = ray.get([r.__ray_call__.remote(_local_rows) for r in group.ranks])
        assert shapes == [("DTensor", (32, 32), (64, 32))] * 2
        group.load_state(before, fresh)
        assert [group.update(samples, step=s, lr=cfg.optim.lr)["optimizer_steps"] for s in (0, 1)] == [1, 1]
        got = group.weights(version=2)
        assert _worst(before, expected) > 1e-3  # the update did something...
        assert _worst(expected, got) <= RANKS_VS_ONE_PROCESS_TOL  # ...and 2 sharded ranks did what 1 process did
        # the optimiser state comes back whole, in the single-process layout (same indices, shapes)
        state = group.optimizer_state()
        assert state["state"].keys() == expected_optim["state"].keys()
        for idx, s in expected_optim["state"].items():
            for key in ("exp_avg", "exp_avg_sq"):
                assert state["state"][idx][key].shape == s[key].shape
                assert float((state["state"][idx][key] - s[key]).abs().max()) <= 1e-6
            # exact: a step count stored as a float
            assert float(state["state"][idx]["step"]) == float(s["step"]) == 2.0

        # resuming across strategies: the single-process adapters and moments, loaded into the
        # sharded ranks, take the same third step as the single process (a fresh sample batch)
        more = random_samples(tm, seed=1)
        group.load_state(expected, expected_optim)
        assert group.update(more, step=2, lr=cfg.optim.lr)["optimizer_steps"] == 1
        assert updater.update(more, step=2)["optimizer_steps"] == 1
        resumed = group.weights(version=3)
        # 1e-5, not 1e-6: AdamW divides by sqrt(v), which magnifies the summation-order rounding of
        # near-zero gradient entries; a step that ignored the loaded moments is 100x further off
        assert _worst(AdapterWeights.of(tm, version=3), resumed) <= 1e-5
        other = build_team_model(cfg.model, cfg.team, cfg.seed)
        expected.apply(other)
        other_params = {a: other.adapter_parameters(a) for a in other.adapter_names}
        fresh_optimizer = torch.optim.AdamW([p for a in other.adapter_names for p in other_params[a]], lr=cfg.optim.lr)
        PolicyUpdater(cfg, other, other_params, fresh_optimizer).update(more, step=2)
        assert _worst(AdapterWeights.of(other, version=3), resumed) > 1e-3
    finally:
        group.shutdown()


def test_fsdp_refuses_several_bases_but_takes_token_credit():
    with pytest.raises(ConfigError, match="distributed.learner_strategy: fsdp shards one base"):
        build_config(TrainConfig, {
            "model": {"name": "base-a"},
            "team": {"roles": [{"name": "proposer"}, {"name": "reviewer", "model": "base-b"}]},
            "distributed": {"learner_workers": 2, "learner_strategy": "fsdp"}})
    with pytest.raises(ConfigError, match="distributed.learner_strategy"):
        build_config(TrainConfig, {"distributed": {"learner_strategy": "zero3"}})
    # a per-message rule runs inside the ranks' update: they decide its reference pass together, so they keep in step
    cfg = build_config(TrainConfig, {"credit": {"token": {"method": "dgpo"}},
                                     "distributed": {"learner_workers": 2, "learner_strategy": "fsdp"}})
    assert cfg.distributed.learner_strategy == "fsdp" and cfg.credit.token.method == "dgpo"


def test_fsdp_ranks_take_the_reference_pass_of_a_kl_term_in_lock_step(ray_cluster, tiny_model_dir, tmp_path):
    # every prompt starts with one head (a team's system prompt) and completions have 1 to 3 tokens:
    # the shared-prompt reference path would run 1 to 3 forward passes depending on a rank's share,
    # and sharded ranks that gather a different number of times never meet; lock step takes the plain path
    import dataclasses

    from teamplay.distributed.learner import LearnerGroup

    cfg = fsdp_config(tiny_model_dir, tmp_path / "run", ray_cluster)
    cfg = cfg.model_copy(update={"objective": cfg.objective.model_copy(update={"kl_beta": 0.1})})
    tm = build_team_model(cfg.model, cfg.team, cfg.seed)
    head = tuple(range(40, 52))
    samples = [dataclasses.replace(s, prompt_ids=head + s.prompt_ids) for s in random_samples(tm, seed=2)]
    params = {a: tm.adapter_parameters(a) for a in tm.adapter_names}
    optimizer = torch.optim.AdamW([p for a in tm.adapter_names for p in params[a]], lr=cfg.optim.lr)
    fresh, before = optimizer.state_dict(), AdapterWeights.of(tm, version=0)
    one_process = PolicyUpdater(cfg, tm, params, optimizer)
    # the plain passes a lock-step group runs, so that the two differ by the ranks' sums alone (shared
    # prompts, one process's default, run other products: 1.03e-6 apart under AVX2 kernels at 1 thread)
    one_process.share_prompts = False
    assert one_process.update(samples, step=0)["optimizer_steps"] == 1
    group = LearnerGroup(update_settings(cfg), cfg.model, cfg.distributed, cfg.team)
    try:
        group.load_state(before, fresh)
        assert group.update(samples, step=0, lr=cfg.optim.lr)["optimizer_steps"] == 1
        assert _worst(before, AdapterWeights.of(tm, version=1)) > 1e-3
        assert _worst(AdapterWeights.of(tm, version=1), group.weights(version=1)) <= 1e-6
    finally:
        group.shutdown()
