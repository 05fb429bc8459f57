"""The data-parallel learner: one Ray actor per torch.distributed rank.

Choice: the ranks are launched by Ray (one actor per rank), not by torchrun, so one control plane
places, watches and tears down every process of a run, a dead rank surfaces as a Ray error in the
driver (which fails the run cleanly; ``--resume auto`` continues from the last checkpoint), and a
multi-node run needs no second launcher. Rank 0 reports its node address and a free port; every
rank then joins ``init_process_group`` over TCP (gloo on CPU, NCCL when the ranks have GPUs).

Each rank holds the base model and the team's adapters, built with the trainer's LoRA seed, and an
AdamW optimiser over the same parameters in the same order as the single-process trainer (so the
optimiser state dict is interchangeable with a checkpoint's). ``PolicyUpdater`` does the update
with this rank's share of every minibatch; gradients are summed with one all-reduce of the flat
LoRA gradient per optimiser step. That is DDP's arithmetic without DDP's wrapper: the wrapper's
per-bucket hooks assume one forward pass per step over the same parameters, while a team step
runs one pass per adapter and leaves the other adapters' parameters unused. A per-message token
rule is applied inside the update here too, from the forward pass of the rank that scores the
sample, as in one process; ``LearnerGroup.resolved_tokens`` joins the rows the ranks resolved.
The step's loss metrics are the mean over the ranks (``mean_over_ranks``), not one rank's.

``distributed.learner_strategy: fsdp`` is for a base that does not fit one device: each rank then
shards the frozen base and the LoRA parameters with torch's FSDP2 ``fully_shard`` (every decoder
layer, then the root), so a rank holds 1/world of the weights, optimiser moments included.
FSDP2's reduce-scatter averages the ranks' gradients in backward (times the world size, the sum the
all-reduce above gives) and the updater runs the ranks' passes in lock step (see
``teamplay.training.learn.update``). The checkpoint format does not change: adapters and AdamW moments
are gathered to full tensors for the driver (every rank joins the gather; rank 0's copy is used),
and a full optimiser state from a checkpoint is sharded again on load, so a run resumes with
either strategy, or single-process. With one learner rank there is nothing to shard over and
``fsdp`` is the ``ddp`` path.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from teamplay.agents.roles import Team
from teamplay.config import DistributedConfig, ModelConfig
from teamplay.distributed.actors import ActorGroup
from teamplay.distributed.cluster import import_ray
from teamplay.distributed.weights import AdapterWeights
from teamplay.errors import TeamplayError
from teamplay.training.learn.samples import PolicySample

if TYPE_CHECKING:  # imported where a rank builds its updater
    from teamplay.training.learn.update import UpdateSettings

#: what gloo / NCCL report when a peer process is gone
_LOST_PEER = re.compile(r"gloo|nccl|connection (closed|reset)|peer|broken pipe", re.IGNORECASE)


class TorchGroup:
    """The ``DataParallel`` hooks of ``PolicyUpdater`` over the default torch.distributed group."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    def all_finite(self, finite: bool) -> bool:
        import torch.distributed as dist

        flag = torch.tensor([0.0 if finite else 1.0], device=self._device())
        dist.all_reduce(flag, op=dist.ReduceOp.SUM)
        return float(flag) == 0.0

    def all_reduce_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        import torch.distributed as dist

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])  # [sum of numel]
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).clone()
            offset += n

    def share_resolved(self, resolved: dict[int, tuple[float, ...]]) -> dict[int, tuple[float, ...]]:
        import torch.distributed as dist

        parts: list[dict[int, tuple[float, ...]] | None] = [None] * self.world
        dist.all_gather_object(parts, resolved)
        return {i: row for part in parts for i, row in (part or {}).items()}

    def _device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device("cpu")


class ShardedGroup(TorchGroup):
    """The hooks for FSDP2-sharded ranks: every rank must run the same passes (``lockstep``), and
    FSDP's reduce-scatter already reduced the gradients in backward, as a mean over ranks."""

    lockstep = True

    def all_reduce_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Each rank holds the mean gradient of its shard: times ``world``, the sum up to float
        rounding (a divide factor of 1 would need a pre-scaled sum, which gloo does not have)."""
        for p in params:
            if p.grad is not None:
                p.grad.mul_(self.world)


class LearnerRank:
    """One rank of the learner (the body of a Ray actor): rank ``rank`` of ``world``, updating as
    ``update`` says (its seed seeds the rank) a team model of ``team`` built from ``model``; its
    parameters sharded (FSDP2) when ``strategy`` is ``fsdp`` and there are several ranks."""

    def __init__(self, update: UpdateSettings, model: ModelConfig, strategy: str, team: Team, rank: int,
                 world: int) -> None:
        from teamplay.training.wiring.model import build_team_model
        from teamplay.training.wiring.placement import Placement, model_device

        torch.set_num_threads(1)
        torch.manual_seed(update.seed)
        self.settings = update
        self.rank, self.world = rank, world
        self.sharded = strategy == "fsdp" and world > 1
        self.team_model = build_team_model(model, team, update.seed, device=model_device(Placement.RAY_LEARNER, model))
        self.trainable = [a for a in self.team_model.adapter_names if a not in self.team_model.frozen]
        # the optimiser and updater are built in init_group, after FSDP2 (if any) replaced the parameters

    def _build_optimizer(self) -> None:
        from teamplay.training.learn.update import PolicyUpdater
        from teamplay.training.run.parts import build_optimizer

        trainable = self.trainable
        params = {a: self.team_model.adapter_parameters(a) for a in trainable}
        self.params = [p for a in trainable for p in params[a]]  # the single-process trainer's order
        self.optimizer = build_optimizer(self.settings.optim, self.params)
        self.group = ShardedGroup(self.rank, self.world) if self.sharded else TorchGroup(self.rank, self.world)
        self.updater = PolicyUpdater(self.settings, self.team_model, params, self.optimizer,
                                     group=self.group if self.world > 1 else None)

    def pid(self) -> int:
        return os.getpid()

    def rendezvous(self) -> tuple[str, int]:
        """This node's address and a free port (asked of rank 0)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return import_ray().util.get_node_ip_address(), port

    def init_group(self, host: str, port: int) -> None:
        import torch.distributed as dist

        if self.world > 1:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=self.rank,
                                    world_size=self.world)
        if self.sharded:
            from teamplay.distributed.sharding import shard_team_model

            shard_team_model(self.team_model)
        self._build_optimizer()

    def load_state(self, weights: AdapterWeights, optimizer_state: dict[str, Any] | None) -> None:
        """Adapters (and, when resuming, the optimiser state) from the driver."""
        if self.sharded:
            from teamplay.distributed.sharding import load_full_adapters, shard_optimizer_state

            load_full_adapters(self.team_model, weights)
            if optimizer_state is not None:
                self.optimizer.load_state_dict(optimizer_state)
                shard_optimizer_state(self.optimizer, self.params)
            return
        weights.apply(self.team_model)
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)

    def update(self, samples: Sequence[PolicySample], step: int,
               lr: float) -> tuple[dict[str, Any], dict[int, tuple[float, ...]]]:
        """One step's update at learning rate ``lr`` (the driver's schedule): this rank's metrics and
        the token rows its updater resolved, by index into ``samples`` (the whole step's list)."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        metrics = self.updater.update(samples, step)
        return metrics, self.updater.resolved_tokens

    def weights(self, version: int) -> AdapterWeights:
        """The full adapters (sharded: a collective, every rank must call it)."""
        if self.sharded:
            from teamplay.distributed.sharding import full_adapters

            return full_adapters(self.team_model, version)
        return AdapterWeights.of(self.team_model, version)

    def optimizer_state(self) -> dict[str, Any]:
        """The full optimiser state (sharded: a collective, every rank must call it)."""
        if self.sharded:
            from teamplay.distributed.sharding import full_optimizer_state

            return full_optimizer_state(self.optimizer)
        return self.optimizer.state_dict()


class LearnerGroup:
    """``world`` learner ranks as Ray actors, joined in one torch.distributed group: the
    ``distributed:`` section's ``learner_workers`` ranks with its strategy and resources, each a
    ``LearnerRank`` of ``update``, ``model`` and ``team``."""

    def __init__(self, update: UpdateSettings, model: ModelConfig, dist_cfg: DistributedConfig, team: Team) -> None:
        self.ray = import_ray()
        world = dist_cfg.learner_workers
        strategy = dist_cfg.learner_strategy
        self.sharded = strategy == "fsdp" and world > 1
        # ranks are never replaced: a dead one stops the run (``LearnerDied``)
        self.actors = ActorGroup(LearnerRank, lambda rank: (update, model, strategy, team, rank, world), world,
                                 dist_cfg.resources.learner)
        self.ranks, self.pids = self.actors.actors, self.actors.pids
        #: the token rows the ranks' last update resolved (per-message token rules), by sample index
        self.resolved_tokens: dict[int, tuple[float, ...]] = {}
        host, port = self._get(self.ranks[0].rendezvous.remote())
        self._get([r.init_group.remote(host, port) for r in self.ranks])

    def load_state(self, weights: AdapterWeights, optimizer_state: dict[str, Any] | None) -> None:
        w, o = self.ray.put(weights), self.ray.put(optimizer_state)
        self._get([r.load_state.remote(w, o) for r in self.ranks])

    def update(self, samples: Sequence[PolicySample], step: int, lr: float) -> dict[str, Any]:
        """Every rank updates on its shares; returns the ranks' metrics joined by ``mean_over_ranks``.
        The token rows each rank resolved in its shares join in ``resolved_tokens`` (by index into
        ``samples``)."""
        ref = self.ray.put(list(samples))
        results = self._get([r.update.remote(ref, step, lr) for r in self.ranks])
        self.resolved_tokens = {i: row for _, rows in results for i, row in rows.items()}
        return mean_over_ranks([metrics for metrics, _ in results])

    def weights(self, version: int) -> AdapterWeights:
        return self._first(self._get(self._gather("weights", version)))

    def optimizer_state(self) -> dict[str, Any]:
        return self._first(self._get(self._gather("optimizer_state")))

    def _first(self, values):
        return values[0] if self.sharded else values

    def _gather(self, method: str, *args):
        """Rank 0's answer; with sharded ranks every rank joins the gather and the rest is dropped."""
        if not self.sharded:
            return getattr(self.ranks[0], method).remote(*args)
        return [getattr(r, method).remote(*args) for r in self.ranks]

    def shutdown(self) -> None:
        self.actors.shutdown()
        self.ranks = []

    def _get(self, refs):
        """``ray.get`` that turns a dead rank into one clear error as soon as any rank fails (the
        surviving ranks may be blocked in a collective waiting for it; ``shutdown`` ends them)."""
        single = not isinstance(refs, list)
        refs = [refs] if single else refs
        waiting = list(refs)
        try:
            while waiting:
                ready, waiting = self.ray.wait(waiting, num_returns=1)
                self.ray.get(ready)  # raises at once if this rank failed
            values = self.ray.get(refs)
        except self.ray.exceptions.RayActorError as exc:
            raise LearnerDied(f"a learner rank died ({type(exc).__name__}); the run stopped at its last "
                              f"checkpoint: rerun with --resume auto to continue") from None
        except self.ray.exceptions.RayTaskError as exc:
            if not _LOST_PEER.search(str(exc)):
                raise  # a real error inside a rank: its traceback is the message
            raise LearnerDied("a learner rank lost its peers in a collective (another rank died); the run "
                              "stopped at its last checkpoint: rerun with --resume auto to continue") from None
        return values[0] if single else values


def mean_over_ranks(per_rank: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One step's metrics from each rank's (rank order): a float metric (``loss``, ``kl``,
    ``entropy``, ...: a mean over that rank's passes) is the mean over the ranks that report it (a
    rank with no pass that measures one, e.g. no finite loss in its shares, leaves it out); the
    rest (the counts and the skip list: the ranks take and skip every optimiser step together) is
    rank 0's. A metric named ``*_max`` (``old_logprob_gap_max``) is the maximum over the ranks.

    Joined at the driver, which receives every rank's metrics anyway, not by an all-reduce on the
    ranks: a collective would need the same keys on every rank."""
    out = dict(per_rank[0])
    for key in {k for m in per_rank for k, v in m.items() if isinstance(v, float)}:
        values = [m[key] for m in per_rank if key in m]
        out[key] = float(np.max(values) if key.endswith("_max") else np.mean(values))
    return out


class LearnerDied(TeamplayError):
    """A learner rank's process died; the run cannot continue this step."""
