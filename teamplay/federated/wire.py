"""What crosses the wire, and how a team's adapters become one flat vector.

Server -> site (message type ``train``), a ``RecordDict`` with:
    "global"  ArrayRecord  {"vector": float32 [N]}: the global trainable LoRA entries;
    "config"  ConfigRecord round, the round each site restores its state of (the last round the
              server aggregated it in), this round's upload budget per site, the calibration
              table, the run's config as JSON.

Site -> server (the reply), exactly two records and nothing else:
    "update"  ArrayRecord  dense: {"values": float32 [N]}; sparse: {"indices": int32 [k],
              "values": float32 [k]}: the adapter update (``SparseUpdate``);
    "metrics" MetricRecord scalars only: site index, the round it answers, shard size, signal
              (mean within-group reward std), reward mean, groups, steps this round and in all
              (``site_step``), and per problem type the reward sum and count.
No problem text, transcript, answer or per-problem reward is ever put in the reply;
``check_reply`` enforces this shape and the wire test calls it on a real site's reply. What the
server checks beyond the shape (values, counts, norms) is ``teamplay.federated.screen``.

Layout: the trainable adapters' LoRA parameters sorted by name, each flattened in row-major order
(``param_layout``); every process builds the same layout from the same config.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from teamplay.federated.aggregation import SparseUpdate

#: metric names a site may send; "type_sum/<t>" and "type_count/<t>" carry per-type statistics
SITE_METRICS = frozenset({"site", "round", "shard_size", "signal", "reward_mean", "groups", "steps", "site_step"})
_TYPE_METRIC = re.compile(r"^type_(sum|count)/.+$")


@dataclass(frozen=True)
class ParamLayout:
    """Names, shapes and offsets of the flat vector's parts; ``size`` = N."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        return int(sum(int(np.prod(s)) for s in self.shapes))


def param_layout(team_model, trainable: list[str]) -> ParamLayout:
    """The layout of ``team_model``'s LoRA parameters of the ``trainable`` adapters."""
    params = _named(team_model, trainable)
    return ParamLayout(tuple(params), tuple(tuple(p.shape) for p in params.values()))


def get_vector(team_model, layout: ParamLayout, trainable: list[str]) -> np.ndarray:
    """The current adapter entries as float32 [N]."""
    params = _named(team_model, trainable)
    return np.concatenate([params[n].detach().cpu().float().reshape(-1).numpy() for n in layout.names])


def set_vector(team_model, layout: ParamLayout, trainable: list[str], vector: np.ndarray) -> None:
    """Copy ``vector`` [N] into the adapters in place (an optimizer holding them keeps working)."""
    if vector.shape != (layout.size,):
        raise ValueError(f"vector has shape {vector.shape}, the adapters have {layout.size} entries")
    params = _named(team_model, trainable)
    offset = 0
    with torch.no_grad():
        for name, shape in zip(layout.names, layout.shapes, strict=True):
            n = int(np.prod(shape))
            p = params[name]
            p.copy_(torch.from_numpy(vector[offset:offset + n].reshape(shape)).to(p.dtype))
            offset += n


def _named(team_model, trainable: list[str]) -> dict[str, torch.nn.Parameter]:
    from teamplay.agents.team_model import _adapter_of

    wanted = set(trainable)
    return dict(sorted((n, p) for n, p in team_model.model.named_parameters() if _adapter_of(n) in wanted))


def encode_update(update: SparseUpdate):
    """The ``update`` ArrayRecord of a reply."""
    from flwr.app import Array, ArrayRecord

    if update.dense:
        return ArrayRecord({"values": Array(update.values.astype(np.float32))})
    return ArrayRecord({"indices": Array(update.indices.astype(np.int32)),
                        "values": Array(update.values.astype(np.float32))})


def decode_update(record, size: int) -> SparseUpdate:
    """Inverse of ``encode_update`` (raises ValueError on a malformed record)."""
    arrays = {k: v.numpy() for k, v in record.items()}
    values = arrays.get("values")
    if values is None:
        raise ValueError(f"update record without 'values' (keys {sorted(arrays)})")
    if "indices" in arrays:
        idx = arrays["indices"]
        if idx.shape != values.shape:
            raise ValueError(f"sparse update: {idx.shape} indices for {values.shape} values of a size-{size} vector")
        if idx.size and (idx.min() < 0 or idx.max() >= size):
            bad = int(np.count_nonzero((idx < 0) | (idx >= size)))
            raise ValueError(f"sparse update: {bad} of {idx.size} indices out of range [0, {size}) (from "
                             f"{int(idx.min())} to {int(idx.max())})")
        return SparseUpdate(size, idx.astype(np.int32), values.astype(np.float32), dense=False)
    if values.shape != (size,):
        raise ValueError(f"dense update of shape {values.shape}, expected ({size},)")
    return SparseUpdate(size, np.zeros(0, dtype=np.int32), values.astype(np.float32), dense=True)


def record_bytes(record) -> int:
    """Payload bytes of an ArrayRecord (the arrays' raw data, as serialised by Flower)."""
    return int(sum(len(array.data) for array in record.values()))


def check_reply(content) -> None:
    """Refuse a reply that carries anything but the update and scalar metrics (see the module doc)."""
    keys = set(content.keys())
    if keys != {"update", "metrics"}:
        raise ValueError(f"a site's reply must hold exactly 'update' and 'metrics', got {sorted(keys)}")
    if set(content["update"].keys()) - {"indices", "values"}:
        raise ValueError(f"update record with unexpected arrays {sorted(content['update'].keys())}")
    for name, value in content["metrics"].items():
        if name not in SITE_METRICS and not _TYPE_METRIC.match(name):
            raise ValueError(f"metric {name!r} is not one a site may send")
        if not isinstance(value, int | float):
            raise ValueError(f"metric {name!r} is {type(value).__name__}, only scalars may leave a site")


def type_stats(metrics: Mapping[str, float]) -> dict[str, tuple[float, int]]:
    """``{type: (reward_sum, count)}`` from a site's metrics."""
    out: dict[str, tuple[float, int]] = {}
    for name, value in metrics.items():
        if name.startswith("type_sum/"):
            t = name[len("type_sum/"):]
            out[t] = (float(value), int(metrics.get(f"type_count/{t}", 0)))
    return out
