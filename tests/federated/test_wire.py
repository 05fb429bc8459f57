"""What crosses the wire: a real site's reply holds the adapter update and scalar statistics only."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from teamplay.config import FederatedConfig, build_config
from teamplay.federated.client import shard_of, site_reply
from teamplay.federated.wire import check_reply, decode_update
from tests.tiny import save_tiny


def fed_config(tmp_path, **federated):
    model = save_tiny(tmp_path / "tiny")
    return build_config(FederatedConfig, {
        "model": {"name": str(model), "lora": {"r": 2, "alpha": 4}},
        "backend": {"max_prompt_tokens": 1024},
        "task": {"name": "arith", "split": "train", "limit": 6},
        "protocol": {"name": "single"},
        "rollout": {"problems_per_step": 1, "group_size": 2},
        "sampling": {"max_new_tokens": 3, "temperature": 1.0},
        "tensorboard": False, "output_dir": str(tmp_path / "run"),
        "federated": {"clients": 2, "rounds": 1, **federated},
    })


def order(cfg, entries: int, n: int) -> RecordDict:
    conf = ConfigRecord({"round": 1, "restore": json.dumps({}), "entries": json.dumps({"0": entries, "1": entries}),
                         "calibration": json.dumps({}), "run_config": json.dumps(cfg.model_dump(mode="json"))})
    return RecordDict({"global": ArrayRecord({"vector": Array(np.zeros(n, np.float32))}), "config": conf})


@pytest.mark.slow
def test_a_site_reply_carries_only_the_update_and_scalar_statistics(tmp_path):
    cfg = fed_config(tmp_path, fedgrpo={"budget": 0.1})
    n = 2048  # tiny model, r=2: 2 layers x 7 modules x (A + B) LoRA entries of the one adapter
    reply = site_reply(order(cfg, entries=20, n=n), {"partition-id": 0, "state-dir": str(tmp_path / "sites")})
    check_reply(reply)  # exactly "update" and "metrics"; metrics named and scalar
    assert set(reply.keys()) == {"update", "metrics"}
    update = decode_update(reply["update"], n)
    assert not update.dense and update.indices.size == 20  # the budget it was given
    metrics = dict(reply["metrics"])
    assert metrics["site"] == 0 and metrics["shard_size"] == 3
    # nothing of the shard's problems is in the reply: no prompt, no reference, no id
    _, shard = shard_of(cfg, 0)
    blob = b"".join(a.data for a in reply["update"].values()) + json.dumps(metrics).encode()
    for item in shard:
        for text in (item.prompt, item.id):
            assert text.encode() not in blob
    # the site kept its state for the next round (optimiser, data position, residual) as an
    # ordinary checkpoint numbered by round
    from teamplay.training.store.checkpoint import load_checkpoint

    saved = load_checkpoint(tmp_path / "sites" / "site-0" / "checkpoints" / "step-000001")
    assert saved.extra["round"] == 1 and saved.state.step == cfg.federated.local_steps
    # (the optimiser's moments exist only if a group had reward variance: its param groups always)
    assert tuple(saved.tensors["residual"].shape) == (update.size,) and saved.optimizer["param_groups"]


def test_check_reply_refuses_anything_else():
    update = ArrayRecord({"values": Array(np.zeros(3, np.float32))})
    check_reply(RecordDict({"update": update, "metrics": MetricRecord({"signal": 0.1})}))
    with pytest.raises(ValueError, match="exactly 'update' and 'metrics'"):
        check_reply(RecordDict({"update": update, "metrics": MetricRecord({"signal": 0.1}),
                                "transcripts": ConfigRecord({"text": "What is 2 + 2?"})}))
    with pytest.raises(ValueError, match="not one a site may send"):
        check_reply(RecordDict({"update": update, "metrics": MetricRecord({"reward_of_problem_17": 1.0})}))
