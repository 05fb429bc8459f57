"""The site: a Flower ClientApp that trains the team on its private shard.

One round at a site, for a ``train`` message from the server (see ``teamplay.federated.wire``),
is one call of the site's ``Trainer.train`` (the same Trainer, credit and objective, run lock,
metrics log and checkpoints as `teamplay train`) on its shard, ``local_steps`` steps long:

    1. resume from the site's checkpoint of the last round the server aggregated this site in (the
       order names it; none: a fresh start): AdamW moments, LR schedule, data position, RNG
       states, error-feedback residual;
    2. once that state is in place (``on_start``), load the global adapters over the restored
       ones; run ``local_steps`` ordinary training steps; with calibration on, each group's
       advantages are scaled by ``calibration_weight`` of its problem type;
    3. when the call checkpoints its last step (``save``): compute the upload ``delta = local -
       global`` (top-k with error feedback under a sparse budget, else dense) and write the
       checkpoint of this round with the new residual; the reply carries the upload and scalar
       reward statistics.

The site state of round r is an ordinary trainer checkpoint, ``<state dir>/site-<k>/checkpoints/
step-<r>`` (numbered by round, since a site's step count depends on the rounds it was left out of;
written whole or not at all, with a manifest of SHA-256 sums, the error-feedback residual among
its tensors); the state a round restored and the newer ones are kept, the others deleted. The
site folder's ``metrics.jsonl`` holds a line per step of the rounds that state descends from (a
resume drops the lines past it). Why restore the last aggregated round rather than the latest
file: a round the server left this site out of (it raised, its reply came too late or failed the
server's checks) is undone, so the site's state is a function of the rounds the server used, which
its log records. A late site may or may not have written its state before the next round starts;
a killed server resumes from a round after which sites went on; a site folder may hold an earlier
run's states: none of that changes what a site restores. Two rounds never train in one site folder
at once: the run lock refuses the second, which fails (the server leaves the site out of that
round, so it is undone like any other). Rebuilding the Trainer each round costs a model load
(under a second for the embedded model once cached) and makes every round a resume, so the resume
path is the path every round takes.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from teamplay.config import FederatedConfig, TeamTrainingConfig, TrainConfig, build_config
from teamplay.errors import ConfigError
from teamplay.federated.aggregation import ErrorFeedback, SparseUpdate, calibration_weight, top_k
from teamplay.federated.partition import partition, problem_type
from teamplay.federated.wire import get_vector, param_layout, set_vector
from teamplay.records import TaskItem
from teamplay.training.store.checkpoint import checkpoint_dir, list_checkpoints, step_of


@dataclass(frozen=True)
class RoundOrder:
    """What the server asks of one site in one round (decoded from the message's config).

    Fields:
        round: this round (1-based).
        restore_round: the last round whose upload from this site the server aggregated (0: none);
            the site starts from its state of that round (0: a fresh Trainer).
        entries: how many update entries this site may upload (N = dense).
        calibration: global mean reward per problem type (empty: no calibration yet).
    """

    round: int
    restore_round: int
    entries: int
    calibration: dict[str, float]


def shards(cfg: FederatedConfig):
    """The task object and every site's training problems (``federated.clients`` shards)."""
    from teamplay.training.wiring.envs import load_items

    task, items = load_items(cfg.task)
    for extra in cfg.federated.extra_tasks:
        items = items + load_items(extra)[1]
    fed = cfg.federated
    return task, partition(items, fed.clients, fed.partition, fed.partition_key, cfg.seed)


def shard_of(cfg: FederatedConfig, site: int):
    """The task object and site ``site``'s training problems."""
    task, all_shards = shards(cfg)
    return task, all_shards[site]


def site_config(cfg: FederatedConfig, site: int, state_dir: Path) -> TrainConfig:
    """The site's Trainer config: the federated run's shared sections, ``rounds x local_steps``
    steps (the length of its LR schedule), its own folder and seed (rollouts and data order differ
    by site), no TensorBoard or wandb logs (the server logs the run), and no checkpoint but the one
    that ends each round (``checkpoint_every`` = the run's length: a periodic one, named by step
    and pruned by ``keep_checkpoints``, would delete the round states a later round restores)."""
    steps = cfg.federated.rounds * cfg.federated.local_steps
    # the shared sections as they are (validated already)
    shared = {name: getattr(cfg, name) for name in TeamTrainingConfig.model_fields}
    return TrainConfig(**{**shared, "steps": steps, "checkpoint_every": steps,
                          "output_dir": str(state_dir / f"site-{site}"), "seed": cfg.seed + 1009 * (site + 1),
                          "tensorboard": False, "wandb_project": None})


def train_site(cfg: FederatedConfig, site: int, order: RoundOrder, global_vec: np.ndarray,
               state_dir: Path, team_model=None) -> tuple[SparseUpdate, dict[str, float]]:
    """One round at site ``site`` (steps 1-3 of the module doc); returns the upload and metrics."""
    from teamplay.distributed.compose import make_trainer

    task, shard = shard_of(cfg, site)
    scfg = site_config(cfg, site, state_dir)
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

    drills = {d.kind for d in cfg.federated.failure_drills if d.site == site and d.round == order.round}
    sparse = cfg.federated.strategy == "fedgrpo" and fg.sparse
    uploads: list[SparseUpdate] = []

    def start_from_global(trainer) -> None:  # the site's state is restored: its adapters become the global ones
        set_vector(trainer.team_model, layout, trainable, global_vec)

    def save_round(trainer) -> Path:
        """The round's upload, and its checkpoint holding the residual that upload leaves."""
        if "raise" in drills:  # after training, before anything of the round is saved or sent
            raise RuntimeError(f"failure drill: site {site} raises in round {order.round} (federated.failure_drills)")
        residual = trainer.extra_tensors.get("residual")  # the restored round's (absent: a fresh site)
        feedback = ErrorFeedback(layout.size, None if residual is None else residual.numpy())
        delta = get_vector(trainer.team_model, layout, trainable) - global_vec
        uploads.append(feedback.compress(delta, order.entries) if sparse else top_k(delta, layout.size))
        return trainer.checkpoint(number=order.round, extra={"round": order.round},
                                  tensors={"residual": torch.from_numpy(feedback.residual)}, prune=False)

    trainer = make_trainer(scfg, team_model=team_model, task=task, items=shard, group_hook=hook,
                           on_start=start_from_global)
    trainable = list(trainer.trainable)
    layout = param_layout(trainer.team_model, trainable)
    folder = Path(scfg.output_dir)
    # a site the server never aggregated starts over: nothing in its folder is a state this run restores
    resume = str(_state_path(folder, order.restore_round)) if order.restore_round > 0 else None
    # the server owns SIGTERM/SIGINT: it abandons the round, and this site's state of it is never restored
    trainer.train(resume=resume, overwrite=resume is None, steps=cfg.federated.local_steps, save=save_round,
                  signals=False)
    _prune_states(folder, order.round, order.restore_round)
    [update] = uploads
    if "nan" in drills:  # the upload goes bad on its way out; the site's own state stays clean
        bad = update.values.astype(np.float32, copy=True)
        bad[::300] = np.nan
        update = SparseUpdate(update.size, update.indices, bad, update.dense)
    return update, {"site": site, "round": order.round, "shard_size": len(shard),
                    "steps": cfg.federated.local_steps, "site_step": trainer.state.step, **stats.metrics()}


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


def _state_path(folder: Path, round_: int) -> Path:
    """The site's checkpoint folder of round ``round_``; a missing one is a ``ConfigError`` (the
    resume verifies it against its manifest: a damaged one is a ``CheckpointError`` naming the file)."""
    path = checkpoint_dir(folder, round_)
    if not path.is_dir():
        raise ConfigError(f"{path}: missing; the server aggregated this site's round {round_} and the "
                          f"site must start from its state of that round (was the site's state-dir moved?)")
    return path


def _prune_states(folder: Path, round_: int, restored: int) -> None:
    """After writing the state of ``round_``: delete the states no later round can restore, those
    before ``restored`` (the server's last aggregated round only grows) and those between it and
    ``round_`` (rounds the server did not aggregate, else it would have named a later one). Newer
    ones stay: a late copy of an older round may finish after a newer round wrote its own."""
    for path in list_checkpoints(folder):
        number = step_of(path)
        if number < round_ and number != restored:
            shutil.rmtree(path, ignore_errors=True)


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
    order = RoundOrder(round=int(conf["round"]),
                       restore_round=int(json.loads(conf["restore"]).get(str(site), 0)),
                       entries=int(json.loads(conf["entries"])[str(site)]),
                       calibration=json.loads(conf["calibration"]))
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
