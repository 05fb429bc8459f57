"""The site: a Flower ClientApp that trains the team on its private shard.

One round at a site, for a ``train`` message from the server (see ``teamplay.federated.wire``):

    1. rebuild the site's Trainer (the same Trainer, credit and objective as `teamplay train`) on
       its shard, and restore the site's state saved at the end of its last completed round:
       AdamW moments, LR schedule, data position, RNG states, error-feedback residual;
    2. load the global adapters, run ``local_steps`` ordinary training steps; with calibration on,
       each group's advantages are scaled by ``calibration_weight`` of its problem type;
    3. upload ``delta = local - global`` (top-k with error feedback under a sparse budget, else
       dense) with scalar reward statistics; save the site state of this round.

The site state lives in ``<state dir>/site-<k>/round-<r>.pt``, written atomically; only the last
two are kept. A resumed run (the server restarts after its last completed round ``r``) restores the
latest state of round <= ``r``, so work of an unfinished round is never counted twice. Rebuilding the
Trainer each round costs a model load (under a second for the embedded model once cached) and makes
every round a resume, so the resume path is the path every round takes.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from teamplay.config import FederatedConfig, build_config
from teamplay.errors import ConfigError
from teamplay.federated.partition import partition, problem_type
from teamplay.federated.strategies import ErrorFeedback, SparseUpdate, calibration_weight, top_k
from teamplay.federated.wire import get_vector, param_layout, set_vector
from teamplay.records import TaskItem

_ROUND_FILE = re.compile(r"^round-(\d{6})\.pt$")


@dataclass(frozen=True)
class RoundOrder:
    """What the server asks of one site in one round (decoded from the message's config).

    Fields:
        round: this round (1-based).
        resume_round: the server's last completed round; the site restores its state of <= that.
        entries: how many update entries this site may upload (N = dense).
        calibration: global mean reward per problem type (empty: no calibration yet).
        aggregated: sites whose upload the server aggregated in ``round - 1``.
    """

    round: int
    resume_round: int
    entries: int
    calibration: dict[str, float]
    aggregated: tuple[int, ...]


def shard_of(cfg: FederatedConfig, site: int):
    """The task object and site ``site``'s training problems."""
    from teamplay.training.setup import load_items

    task, items = load_items(cfg.task)
    for extra in cfg.federated.extra_tasks:
        items = items + load_items(extra)[1]
    fed = cfg.federated
    return task, partition(items, fed.clients, fed.partition, fed.partition_key, cfg.seed)[site]


def site_config(cfg: FederatedConfig, site: int, state_dir: Path) -> FederatedConfig:
    """The site's Trainer config: its own folder and seed (rollouts and data order differ by site)."""
    return cfg.model_copy(update={"output_dir": str(state_dir / f"site-{site}"),
                                  "seed": cfg.seed + 1009 * (site + 1), "tensorboard": False})


def train_site(cfg: FederatedConfig, site: int, order: RoundOrder, global_vec: np.ndarray,
               state_dir: Path, team_model=None) -> tuple[SparseUpdate, dict[str, float]]:
    """One round at site ``site`` (steps 1-3 of the module doc); returns the upload and metrics."""
    from teamplay.training.checkpoint import TrainerState, rng_state, set_rng_state
    from teamplay.training.trainer import Trainer

    task, shard = shard_of(cfg, site)
    scfg = site_config(cfg, site, state_dir)
    trainer = Trainer(scfg, team_model=team_model, task=task, items=shard)
    trainable = list(trainer.trainable)
    layout = param_layout(trainer.team_model, trainable)
    folder = Path(scfg.output_dir)
    saved = _latest_state(folder, order.resume_round)
    feedback = ErrorFeedback(layout.size)
    if saved is not None:
        trainer.optimizer.load_state_dict(saved["optimizer"])
        trainer.scheduler.load_state_dict(saved["scheduler"])
        trainer.state = TrainerState(**{k: (tuple(v) if k == "data_order" else v)
                                        for k, v in saved["state"].items()})
        set_rng_state(saved["rng"])
        feedback = ErrorFeedback(layout.size, saved["residual"])
        if saved["round"] == order.round - 1 and site not in order.aggregated and saved["upload"] is not None:
            feedback.restore(SparseUpdate(**saved["upload"]))  # the server never used it: keep it
    set_vector(trainer.team_model, layout, trainable, global_vec)

    stats = _GroupStats(cfg.federated.partition_key)
    fg = cfg.federated.fedgrpo
    calibrate = cfg.federated.strategy == "fedgrpo" and fg.calibration and bool(order.calibration)

    def hook(item: TaskItem, rewards: np.ndarray) -> float:
        kind = stats.add(item, rewards)
        if not calibrate:
            return 1.0
        target = order.calibration.get(kind)
        if target is None:
            return 1.0  # a type the federation has not reported yet: nothing to compare with
        return calibration_weight(target, float(rewards.mean()), fg.calibration_strength, *fg.calibration_clip)

    trainer.group_hook = hook
    for _ in range(cfg.federated.local_steps):
        trainer.step()
    for drill in cfg.federated.failure_drills:
        if drill.site == site and drill.round == order.round:
            raise RuntimeError(f"failure drill: site {site} raises in round {order.round} (federated.failure_drills)")

    delta = get_vector(trainer.team_model, layout, trainable) - global_vec
    sparse = cfg.federated.strategy == "fedgrpo" and fg.sparse
    update = feedback.compress(delta, order.entries) if sparse else top_k(delta, layout.size)
    _save_state(folder, order.round, {
        "round": order.round, "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict(), "state": trainer.state.__dict__, "rng": rng_state(),
        "residual": feedback.residual,
        "upload": {"size": update.size, "indices": update.indices, "values": update.values, "dense": update.dense},
    })
    return update, {"site": site, "shard_size": len(shard), "steps": cfg.federated.local_steps,
                    "site_step": trainer.state.step, **stats.metrics()}


class _GroupStats:
    """Reward statistics of a site's round: the signal and per-type sums; nothing per problem."""

    def __init__(self, key: str | None) -> None:
        self.key = key
        self.stds: list[float] = []
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, item: TaskItem, rewards: np.ndarray) -> str:
        kind = problem_type(item, self.key)
        self.stds.append(float(np.std(rewards)))
        self.sums[kind] = self.sums.get(kind, 0.0) + float(rewards.sum())
        self.counts[kind] = self.counts.get(kind, 0) + int(rewards.size)
        return kind

    def metrics(self) -> dict[str, float]:
        n = sum(self.counts.values())
        out: dict[str, float] = {
            "signal": float(np.mean(self.stds)) if self.stds else 0.0,
            "reward_mean": sum(self.sums.values()) / n if n else 0.0,
            "groups": len(self.stds),
        }
        for kind in self.sums:
            out[f"type_sum/{kind}"] = self.sums[kind]
            out[f"type_count/{kind}"] = self.counts[kind]
        return out


def _latest_state(folder: Path, at_most: int) -> dict[str, Any] | None:
    if not folder.is_dir():
        return None
    rounds = sorted(int(m.group(1)) for p in folder.iterdir() if (m := _ROUND_FILE.match(p.name)))
    usable = [r for r in rounds if r <= at_most]
    if not usable:
        return None
    path = folder / f"round-{usable[-1]:06d}.pt"
    try:  # weights_only: tensors and plain types only, so a supplied state file cannot run code
        return _from_plain(torch.load(path, weights_only=True))
    except Exception as exc:  # a pickle with code, or a damaged file
        raise ConfigError(f"{path}: not a teamplay site state that loads without running code "
                          f"({type(exc).__name__}); remove it to restart this site") from None


def _to_plain(data: Any) -> Any:
    """``data`` with numpy arrays as tagged tensors, so ``torch.load(weights_only=True)`` reads it."""
    if isinstance(data, np.ndarray):
        return {"__ndarray__": torch.from_numpy(np.ascontiguousarray(data))}
    if isinstance(data, dict):
        return {k: _to_plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return type(data)(_to_plain(v) for v in data)
    return data


def _from_plain(data: Any) -> Any:
    """The inverse of ``_to_plain``."""
    if isinstance(data, dict):
        if set(data) == {"__ndarray__"}:
            return data["__ndarray__"].numpy()
        return {k: _from_plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return type(data)(_from_plain(v) for v in data)
    return data


def _save_state(folder: Path, round_: int, data: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"round-{round_:06d}.pt"
    tmp = folder / f".tmp-{final.name}-{os.getpid()}"
    torch.save(_to_plain(data), tmp)
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    rounds = sorted(int(m.group(1)) for p in folder.iterdir() if (m := _ROUND_FILE.match(p.name)))
    for old in rounds[:-2]:
        (folder / f"round-{old:06d}.pt").unlink(missing_ok=True)


# ------------------------------------------------------------------------------- Flower glue
def site_reply(content, node_config):
    """A site's answer (a RecordDict: "update" and "metrics") to the content of a ``train`` message.

    ``node_config`` is the SuperNode's: ``partition-id`` (this site's index) and optionally
    ``state-dir`` (where the site keeps its state; default ``<output_dir>/sites``).
    """
    from flwr.app import MetricRecord, RecordDict

    from teamplay.federated.wire import encode_update

    conf = content["config"]
    cfg = build_config(FederatedConfig, json.loads(conf["run_config"]))
    site = int(node_config["partition-id"])
    state_dir = Path(str(node_config.get("state-dir", Path(cfg.output_dir) / "sites")))
    order = RoundOrder(round=int(conf["round"]), resume_round=int(conf["resume_round"]),
                       entries=int(json.loads(conf["entries"])[str(site)]),
                       calibration=json.loads(conf["calibration"]),
                       aggregated=tuple(json.loads(conf["aggregated"])))
    global_vec = content["global"]["vector"].numpy()
    update, metrics = train_site(cfg, site, order, global_vec, state_dir)
    return RecordDict({"update": encode_update(update), "metrics": MetricRecord(metrics)})


def handle_train(msg, context):
    """The ClientApp's ``train`` function: ``site_reply`` sent back as the reply."""
    from flwr.app import Message

    return Message(site_reply(msg.content, context.node_config), reply_to=msg)


def make_client_app():
    """A Flower ClientApp whose ``train`` is ``handle_train``."""
    from flwr.clientapp import ClientApp

    app = ClientApp()
    app.train()(handle_train)
    return app
