"""The policy update of one training step: minibatches of samples -> GRPO/GSPO loss -> AdamW steps.

``PolicyUpdater.update(samples, step)`` runs ``optim.epochs`` passes over seeded, shuffled
minibatches of messages. Each minibatch is split by the adapter that wrote each message; each
adapter's share is scored under that adapter (and, with a KL weight, under the base model), its
loss is weighted by its share of the minibatch, and every ``grad_accum`` minibatches one clipped
AdamW step is taken. A non-finite loss or gradient norm skips that optimiser step: its gradients are
dropped, AdamW never sees them, and the step's metrics list it (``nonfinite_skips``, one
``nonfinite.SkippedUpdate`` each, naming the adapter and the quantity).

Data parallelism: with a ``DataParallel`` group (``teamplay.distributed``), every rank sees the
whole sample list, draws the same permutation, and works on ``minibatch[rank::world]``. Each
adapter's loss is a mean over sequences (GRPO ``seq_mean_token_mean`` and ``seq_mean_token_sum_norm``,
GSPO), so a rank's share,
weighted by ``len(local share) / len(minibatch)``, contributes exactly its samples' part of the
single-process gradient; summing the ranks' gradients (one all-reduce of the flat LoRA gradient
per optimiser step) gives the single-process gradient up to float summation order. The ranks then
clip and step identically, so their adapters stay equal. ``token_mean`` aggregation normalises
by the token count of the whole share and is refused for more than one rank (see the config).

A group with ``lockstep`` set (an FSDP-sharded learner) needs every rank to run the same forward
and backward passes in the same order, since each pass gathers and reduces the sharded parameters
collectively. There each rank runs one pass per adapter of the whole minibatch; an adapter with
no sample in the rank's share runs one of the minibatch's samples of that adapter with weight 0
(it adds nothing to the gradient and nothing to the metrics), and a non-finite loss does not
stop the passes (the step is then skipped on every rank).

Per-message token rules (``PolicySample.token_rule``) take the same route on every learner: a
sample's token advantages come from the forward pass that first scores it (epoch 1, on the rank
whose share holds it), are kept for the later epochs and left in ``resolved_tokens`` keyed by the
sample's index in the update's list. With several ranks, the ranks share what they resolved before
the next epoch (it may hand a sample to another rank), and a lock-step group decides whether an
adapter's pass needs the reference over the whole minibatch, so every rank runs it or none does
(on the plain path, one forward pass whatever the prompts of its share: the KL term's too).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from teamplay.config import BackendConfig, ObjectiveConfig, OptimConfig, SamplingConfig
from teamplay.credit.token import TokenStats, get_token_credit
from teamplay.credit.token.base import message_tokens
from teamplay.training.learn.losses import SftObjective, objective_loss
from teamplay.training.learn.nonfinite import SkippedUpdate, finite_gradient_flags
from teamplay.training.learn.samples import PolicySample
from teamplay.training.learn.token_stats import stats_from_distributions

#: the token statistics read from the reference policy's pass
REFERENCE_NEEDS = frozenset({"ref_logprobs", "hellinger"})


class DataParallel(Protocol):
    """What the updater needs of a data-parallel group (``world == 1``: a no-op group)."""

    rank: int
    world: int
    #: optional attribute: True when every rank must run the same passes (see the module docstring)
    # lockstep: bool

    def all_finite(self, finite: bool) -> bool:
        """True when every rank's minibatch loss was finite."""

    def all_reduce_gradients(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Replace each parameter's gradient by the sum over ranks (a missing gradient counts as 0)."""

    def share_resolved(self, resolved: dict[int, tuple[float, ...]]) -> dict[int, tuple[float, ...]]:
        """The union of every rank's ``resolved`` token rows (by sample index; a sample is resolved
        by one rank, or by each with equal rows)."""


@dataclass
class _UpdateLog:
    """What one ``PolicyUpdater.update`` records as it goes; its metrics are read from it at the end.

    Fields:
        stats: per metric name, one value per adapter share (``loss``, ``kl``, ``ratio_mean``,
            ``entropy``, the clip fractions) or per optimiser step (``grad_norm``).
        skips: the optimiser steps skipped for a non-finite loss or gradient norm, in order.
        optimizer_steps: the optimiser steps taken.
    """

    stats: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    skips: list[SkippedUpdate] = field(default_factory=list)
    optimizer_steps: int = 0


@dataclass(frozen=True)
class UpdateSettings:
    """The config sections an update reads, and nothing else of the run's config.

    Fields: optim (epochs, minibatch size, gradient accumulation and clipping); objective (the loss,
    its KL weight, where the old log-probs come from; a warm start's ``SftObjective``); sampling (the
    temperature the log-probs are scored at, ``max_new_tokens`` for the token-sum normalisation);
    backend (its ``name``: a vllm backend's log-probs are never the trainer's); seed (the minibatch
    shuffles). A ``TrainConfig`` has the same five fields, so a test may pass one where these are
    asked for; the trainer's wiring passes this (``teamplay.training.run.sections``).
    """

    optim: OptimConfig
    objective: ObjectiveConfig | SftObjective
    sampling: SamplingConfig
    backend: BackendConfig
    seed: int


class PolicyUpdater:
    """Holds what an update needs: the update's sections (``UpdateSettings``), the team model, the
    trainable parameters by adapter, the optimizer, and an optional data-parallel group."""

    #: score each adapter's share with its prompts shared (``TeamModel.completion_logprobs``
    #: ``share_prompts``): a group's samples of one question run their prompt once, and the prompts'
    #: common prefix (a role's system prompt) runs once for the share, gradients flowing through the
    #: shared key/value cache. The loss and gradients equal the plain path's up to float summation
    #: order (tested); on the demo's step the update took half the time (BENCHMARKS.md §4). A
    #: lock-step group keeps the plain path (one pass per adapter on every rank).
    share_prompts: bool = True

    def __init__(self, settings: UpdateSettings, team_model, params: dict[str, list[torch.nn.Parameter]],
                 optimizer: torch.optim.Optimizer, group: DataParallel | None = None) -> None:
        self.settings = settings
        self.team_model = team_model
        self.params = params
        self.optimizer = optimizer
        self.group = group
        #: token advantages the last update computed for samples with a ``token_rule``, by index
        self.resolved_tokens: dict[int, tuple[float, ...]] = {}
        #: where the ratio's old log-probs come from (``objective.old_logprobs``, ``auto`` resolved)
        self.old_source = old_logprob_source(settings.objective, settings.backend, team_model)
        #: the trainer's old log-probs of the current update, by sample index (``old_source`` trainer)
        self._old: dict[int, torch.Tensor] = {}

    def update(self, samples: Sequence[PolicySample], step: int) -> dict[str, Any]:
        """Every epoch and minibatch of one step; returns the update's metrics (means over the
        minibatches of this rank, ``optimizer_steps``, ``skipped_nonfinite_steps`` and, when that is
        not 0, ``nonfinite_skips``: each skipped optimiser step as a ``SkippedUpdate.to_dict()``).

        A sample with a ``token_rule`` gets its token advantages the first time the update scores
        it (epoch 1, its minibatch), from that forward pass's distributions; they are kept for the
        later epochs and left in ``resolved_tokens`` for the trainer's logs."""
        optim = self.settings.optim
        self.resolved_tokens = {}
        epochs = [self._minibatches(len(samples), step, epoch) for epoch in range(optim.epochs)]
        self._old = {}
        if self.old_source == "trainer":
            rank, world = self._rank_world()
            self._trainer_old(samples, epochs, self.settings.sampling.temperature, rank, world, self._lockstep())
        rules = any(s.token_rule is not None for s in samples)
        log = _UpdateLog()
        for epoch, minibatches in enumerate(epochs):
            clip_epoch: list[float] = []  # the clip fractions of this epoch's adapter shares
            for mb_index, mb in enumerate(minibatches):
                steps = (mb_index + 1) % optim.grad_accum == 0 or mb_index == len(minibatches) - 1
                self._minibatch_step(samples, mb, (epoch + 1, mb_index + 1), steps, log, clip_epoch)
            if rules and self.group is not None and epoch + 1 < optim.epochs:
                # the next epoch may score a sample on another rank: it must use the rows of the
                # sample's first scoring, as one process would, not resolve them again
                self.resolved_tokens = self.group.share_resolved(self.resolved_tokens)
            log.stats[f"clip_fraction_epoch{epoch + 1}"].append(float(np.mean(clip_epoch)) if clip_epoch else 0.0)
            log.stats["clip_fraction"].extend(clip_epoch)
        return self._update_metrics(samples, log)

    def _minibatch_step(self, samples: Sequence[PolicySample], mb: np.ndarray, where: tuple[int, int],
                        steps: bool, log: _UpdateLog, clip_epoch: list[float]) -> None:
        """One minibatch ``mb`` (indices into ``samples``; ``where``: its 1-based epoch and number):
        the backward passes of its adapter shares, then, when every rank's loss was finite and
        ``steps`` (the last minibatch of a ``grad_accum`` run, or of the epoch), one optimiser step.
        A non-finite loss drops the accumulated gradients and is logged as a skip."""
        finite, bad_loss = self._backward(samples, mb, log, clip_epoch)
        if self.group is not None:
            finite = self.group.all_finite(finite)  # one rank's NaN skips the step everywhere
        if not finite:
            self.optimizer.zero_grad(set_to_none=True)
            log.skips.append(SkippedUpdate(*where, "loss" if bad_loss else "loss on another learner rank",
                                           tuple(bad_loss)))
            return
        if steps:
            self._optimizer_step(where, log)

    def _backward(self, samples: Sequence[PolicySample], mb: np.ndarray, log: _UpdateLog,
                  clip_epoch: list[float]) -> tuple[bool, list[str]]:
        """The loss and backward pass of each adapter's share of minibatch ``mb`` on this rank,
        weighted by the share's size in the minibatch; the shares' statistics go to ``log`` and
        ``clip_epoch``. Returns whether every loss was finite and the adapters whose loss was not
        (off lock step the passes stop at the first such loss)."""
        rank, world = self._rank_world()
        lockstep = self._lockstep()
        finite = True
        bad_loss: list[str] = []  # adapters whose loss was not finite
        by_adapter, placeholders = self._shares(samples, mb, rank, world, lockstep)
        for adapter, indices in sorted({**by_adapter, **placeholders}.items()):
            share = [samples[i] for i in indices]
            # lock step: the whole minibatch's share of this adapter decides the reference pass
            reference = self._needs_reference(samples, [int(i) for i in mb if samples[i].adapter == adapter]) \
                if lockstep else None
            loss, loss_stats, entropy = self.loss(adapter, share, self.settings.sampling.temperature, indices,
                                                  resolve=adapter not in placeholders, reference=reference)
            # len(mb): the whole minibatch; a placeholder pass only keeps the ranks in step
            weight = 0.0 if adapter in placeholders else len(share) / len(mb) / self.settings.optim.grad_accum
            if not torch.isfinite(loss):
                finite = False
                bad_loss.append(adapter)
                if not lockstep:
                    break
            (loss * weight).backward()
            if adapter in placeholders or not finite:
                continue
            log.stats["loss"].append(float(loss.detach()))
            if loss_stats.kl_mean is not None:
                log.stats["kl"].append(loss_stats.kl_mean)
            log.stats["ratio_mean"].append(loss_stats.ratio_mean)
            log.stats["entropy"].append(entropy)
            clip_epoch.append(loss_stats.clip_fraction)
        return finite, bad_loss

    def _optimizer_step(self, where: tuple[int, int], log: _UpdateLog) -> None:
        """One clipped AdamW step on the accumulated gradients (summed over the ranks first); a
        non-finite gradient norm drops them instead and is logged as a skip naming the adapters."""
        params = [p for ps in self.params.values() for p in ps]
        if self.group is not None:
            self.group.all_reduce_gradients(params)
        flags = finite_gradient_flags(self.params)  # read only if the norm is not finite
        norm = torch.nn.utils.clip_grad_norm_(params, self.settings.optim.grad_clip or float("inf"))
        if not torch.isfinite(norm):
            self.optimizer.zero_grad(set_to_none=True)
            bad = tuple(a for a, ok in flags.items() if not bool(ok))
            log.skips.append(SkippedUpdate(*where, "gradient norm", bad))
            return
        log.stats["grad_norm"].append(float(norm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        log.optimizer_steps += 1

    def _update_metrics(self, samples: Sequence[PolicySample], log: _UpdateLog) -> dict[str, Any]:
        """The update's metrics from its ``log`` (see ``update``)."""
        out: dict[str, Any] = {k: float(np.mean(v)) for k, v in log.stats.items() if v}
        if self._old:
            out.update(self._generation_gap(samples))
        out["optimizer_steps"] = log.optimizer_steps
        out["skipped_nonfinite_steps"] = len(log.skips)
        if log.skips:
            out["nonfinite_skips"] = [s.to_dict() for s in log.skips]
        return out

    def _rank_world(self) -> tuple[int, int]:
        """This learner's rank and the group's size (0, 1 without a data-parallel group)."""
        return (self.group.rank, self.group.world) if self.group is not None else (0, 1)

    def _lockstep(self) -> bool:
        """Whether every rank must run the same passes (an FSDP-sharded group; see the module)."""
        return bool(getattr(self.group, "lockstep", False))

    def _minibatches(self, n: int, step: int, epoch: int) -> list[np.ndarray]:
        """The seeded minibatches of one epoch: a permutation of the ``n`` samples, cut in ``minibatch_size``."""
        order = np.random.default_rng([self.settings.seed, step, epoch]).permutation(n)
        size = self.settings.optim.minibatch_size
        return [order[i:i + size] for i in range(0, n, size)]

    @staticmethod
    def _shares(samples: Sequence[PolicySample], mb: np.ndarray, rank: int, world: int,
               lockstep: bool) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """This rank's share of minibatch ``mb`` by adapter, and (lock step) a placeholder sample of
        each adapter of the minibatch the share lacks: a lock-step group runs a pass per adapter of
        the whole minibatch on every rank."""
        by_adapter: dict[str, list[int]] = defaultdict(list)
        for i in mb[rank::world]:
            by_adapter[samples[i].adapter].append(int(i))
        placeholders: dict[str, list[int]] = {}
        if lockstep:
            for i in mb:
                if samples[i].adapter not in by_adapter:
                    placeholders.setdefault(samples[i].adapter, [int(i)])
        return dict(by_adapter), placeholders

    def _trainer_old(self, samples: Sequence[PolicySample], epochs: Sequence[Sequence[np.ndarray]],
                     temperature: float, rank: int, world: int, lockstep: bool) -> None:
        """The trainer's old log-probs (``old_source`` trainer) into ``_old``: a no-grad pass on the
        update's starting weights for every sample this rank scores after the first optimiser step.

        The passes before the first optimiser step (the first ``grad_accum`` minibatches of epoch 1)
        run on the starting weights themselves, so their samples take their own detached log-probs
        there (``loss``) and cost no pass here. The others are scored in the shares epoch 1 scores them
        in (the same rows, so the same float rounding as the pass that would score them unchanged),
        then any sample a later epoch hands this rank, by adapter. A lock-step group runs the same
        passes on every rank: every sample, by adapter, in minibatch-sized chunks."""
        size = self.settings.optim.minibatch_size
        if lockstep:
            chunks = _adapter_chunks(samples, range(len(samples)), size)
        else:
            def rank_share(mb: np.ndarray) -> dict[str, list[int]]:
                return self._shares(samples, mb, rank, world, False)[0]

            first_step = min(self.settings.optim.grad_accum, len(epochs[0]))
            chunks = [chunk for mb in epochs[0][first_step:] for chunk in sorted(rank_share(mb).items())]
            # epoch 1 scores these itself: the first minibatches for free, the others in ``chunks``
            scored = {i for mb in epochs[0] for ix in rank_share(mb).values() for i in ix}
            later = dict.fromkeys(int(i) for mbs in epochs[1:] for mb in mbs for i in mb[rank::world])
            chunks += _adapter_chunks(samples, [i for i in later if i not in scored], size)
        with torch.no_grad():
            for adapter, indices in chunks:
                logp, _ = self.team_model.completion_logprobs(
                    [list(samples[i].prompt_ids) for i in indices], [list(samples[i].completion_ids) for i in indices],
                    adapter=adapter, temperature=temperature, share_prompts=self.share_prompts and not lockstep)
                for row, i in enumerate(indices):
                    self._old[i] = logp[row, :len(samples[i].completion_ids)].detach()

    def _old_rows(self, share: Sequence[PolicySample], indices: Sequence[int], logp: torch.Tensor) -> torch.Tensor:
        """The old log-probs [b, C] of ``share`` (``logp`` [b, C]: this pass's): the generation's, or the
        trainer's (``_old``; a sample first scored before the first optimiser step takes this pass's,
        detached, and keeps them for the later epochs)."""
        if self.old_source != "trainer":
            return _pad([s.old_logprobs for s in share], logp.shape[1], logp.dtype, logp.device)
        for k, (s, i) in enumerate(zip(share, indices, strict=True)):
            if i not in self._old:
                self._old[i] = logp[k, :len(s.completion_ids)].detach().clone()
        rows = torch.zeros(len(share), logp.shape[1], dtype=logp.dtype, device=logp.device)
        for k, i in enumerate(indices):
            rows[k, :len(self._old[i])] = self._old[i].to(logp.dtype)
        return rows

    def _generation_gap(self, samples: Sequence[PolicySample]) -> dict[str, float]:
        """How far the generation's log-probs are from the trainer's old ones, over the tokens this
        rank scored: ``old_logprob_gap_mean`` and ``old_logprob_gap_max`` (|difference|, nats)."""
        gaps = np.concatenate([np.abs(np.asarray(samples[i].old_logprobs, dtype=np.float64)
                                      - self._old[i].double().cpu().numpy()) for i in sorted(self._old)])
        return {"old_logprob_gap_mean": float(gaps.mean()), "old_logprob_gap_max": float(gaps.max())}

    def loss(self, adapter: str, share: Sequence[PolicySample], temperature: float,
             indices: Sequence[int] | None = None, resolve: bool = True, reference: bool | None = None):
        """Loss of one adapter's share of a minibatch, its stats, and the sampled-token entropy.

        The entropy is estimated as the mean of -log p of the sampled tokens (an unbiased estimate
        of the policy's per-token entropy under its own samples; no full-vocabulary pass needed).
        ``indices`` (the samples' positions in the update's list) key ``resolved_tokens``.
        ``resolve``: apply the token rules of the samples not resolved yet (False for a lock-step
        placeholder pass: another rank resolves its sample). ``reference``: whether to run the
        reference pass; ``None`` decides from this share (the KL term, the rules' needs); a bool is
        a lock-step group's decision over the whole minibatch, and the reference then takes the
        plain path (one forward pass, where the shared-prompt path's count depends on the prompts).
        """
        obj = self.settings.objective
        indices = list(indices) if indices is not None else list(range(len(share)))
        prompts = [list(s.prompt_ids) for s in share]
        completions = [list(s.completion_ids) for s in share]
        pending = self._pending(share, indices) if resolve else []
        # a lock-step group needs one pass per adapter on every rank, whatever its share's prompts
        shared = self.share_prompts and reference is None
        if pending:  # token rules read this pass's full distributions (and the reference's)
            logp_all, targets, mask = self.team_model.completion_logprobs(
                prompts, completions, adapter=adapter, temperature=temperature, return_distributions=True,
                share_prompts=shared)  # [b, C, V]
            logp = _masked(logp_all.gather(-1, targets[..., None]).squeeze(-1), mask)  # [b, C]
        else:
            logp, mask = self.team_model.completion_logprobs(prompts, completions, adapter=adapter,
                                                             temperature=temperature, share_prompts=shared)  # [b, C]
        lq = ref = None  # the reference's distributions [b, C, V] (for rules) and token log-probs [b, C]
        if self._wants_reference([share[k] for k in pending]) if reference is None else reference:
            lq, ref = self._reference(adapter, prompts, completions, temperature, distributions=bool(pending),
                                      share_prompts=reference is None)
        if pending:
            self._resolve_tokens(share, indices, pending, logp_all.detach(), lq, targets)
        # built where the log-probs live (the learner's GPU when there is one)
        old = self._old_rows(share, indices, logp)  # [b, C]
        if any(s.token_advantages is not None or s.token_rule is not None for s in share):
            # token-level credit: [b, C]; messages without token credit broadcast their scalar
            adv = _pad([self._tokens_of(s, i) for s, i in zip(share, indices, strict=True)], logp.shape[1], logp.dtype,
                       logp.device)
        else:
            adv = torch.tensor([s.advantage for s in share], dtype=logp.dtype, device=logp.device)  # [b]
        with torch.no_grad():
            fmask = mask.to(logp.dtype)
            entropy = float(-(torch.where(mask.bool(), logp, 0.0) * fmask).sum() / fmask.sum())
        loss, stats = objective_loss(obj, logp, old, ref if obj.kl_beta > 0 else None, adv, mask,
                                     norm_tokens=self.settings.sampling.max_new_tokens)
        return loss, stats, entropy

    def _pending(self, share: Sequence[PolicySample], indices: Sequence[int]) -> list[int]:
        """Positions in ``share`` of the samples with a token rule not resolved yet."""
        return [k for k, s in enumerate(share) if s.token_rule is not None and indices[k] not in self.resolved_tokens]

    def _wants_reference(self, pending: Sequence[PolicySample]) -> bool:
        """Whether a pass runs the reference policy: for the KL term, or for a rule of ``pending`` that reads it."""
        needs = set().union(*(get_token_credit(s.token_rule.method).needs for s in pending if s.token_rule))
        return self.settings.objective.kl_beta > 0 or bool(needs & REFERENCE_NEEDS)

    def _needs_reference(self, samples: Sequence[PolicySample], indices: Sequence[int]) -> bool:
        """A lock-step group's reference decision for one adapter's pass: over ``samples[indices]``,
        that adapter's samples of the whole minibatch, the same on every rank (the ranks share their
        resolved rows before each epoch, so they agree on which are pending)."""
        share = [samples[i] for i in indices]
        return self._wants_reference([share[k] for k in self._pending(share, indices)])

    def _reference(self, adapter: str, prompts: list[list[int]], completions: list[list[int]], temperature: float,
                   distributions: bool, share_prompts: bool) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The reference pass (adapters disabled, no grad): its full distributions [b, C, V] when
        ``distributions`` (else ``None``) and the sampled tokens' log-probs [b, C] (0 on padding)."""
        if not distributions:
            ref, _ = self.team_model.reference_logprobs(prompts, completions, adapter, temperature=temperature,
                                                        share_prompts=share_prompts)  # [b, C]
            return None, ref
        lq, targets, mask = self.team_model.reference_logprobs(prompts, completions, adapter, temperature=temperature,
                                                               return_distributions=True,
                                                               share_prompts=share_prompts)  # [b, C, V]
        return lq, _masked(lq.gather(-1, targets[..., None]).squeeze(-1), mask)  # [b, C]

    def _tokens_of(self, sample: PolicySample, index: int) -> Sequence[float]:
        if sample.token_advantages is not None:
            return sample.token_advantages
        if sample.token_rule is not None and index in self.resolved_tokens:
            return self.resolved_tokens[index]
        return (sample.advantage,) * len(sample.completion_ids)

    def _resolve_tokens(self, share: Sequence[PolicySample], indices: Sequence[int], pending: Sequence[int],
                        logp_all: torch.Tensor, lq: torch.Tensor | None, targets: torch.Tensor) -> None:
        """Token advantages of the ``pending`` samples of ``share`` into ``resolved_tokens``, from this
        pass's distributions ``logp_all`` [b, C, V] (detached) and the reference's ``lq`` [b, C, V]
        (``None`` when no rule reads it)."""
        methods = {share[k].token_rule.method: get_token_credit(share[k].token_rule.method) for k in pending}
        needs = set().union(*(m.needs for m in methods.values()))
        fields = stats_from_distributions(logp_all, lq, targets, [len(s.completion_ids) for s in share], needs)
        for k in pending:
            rule = share[k].token_rule
            stats = TokenStats(logprobs=np.asarray(share[k].old_logprobs, dtype=np.float64), **fields[k])
            row = message_tokens(methods[rule.method], share[k].advantage, stats, rule.options)
            self.resolved_tokens[indices[k]] = tuple(float(x) for x in row)


def old_logprob_source(objective: ObjectiveConfig | SftObjective, backend: BackendConfig, team_model) -> str:
    """``objective.old_logprobs`` with ``auto`` resolved: ``trainer`` where the generation's log-probs
    cannot equal the trainer's (a half-precision base: cached bfloat16 decoding and one forward pass
    round differently, by up to 0.5 nats on a token of the embedded model; the vllm backend's own
    kernels), ``generation`` elsewhere (a float32 hf model: equal to 1e-5, so a pass would buy nothing)."""
    chosen = objective.old_logprobs
    if chosen != "auto":
        return chosen
    parts = getattr(team_model, "parts", None)  # a multi-base team: one TeamModel per base
    models = [part.model for part in parts.values()] if parts else [team_model.model]
    half = any(p.dtype in (torch.bfloat16, torch.float16) for m in models for p in m.parameters())
    return "trainer" if half or backend.name == "vllm" else "generation"


def _adapter_chunks(samples: Sequence[PolicySample], indices: Iterable[int], size: int) -> list[tuple[str, list[int]]]:
    """``indices`` grouped by the adapter of their sample (adapters sorted, order kept within one),
    each group cut in chunks of at most ``size``: the passes of a no-grad scoring."""
    by_adapter: dict[str, list[int]] = defaultdict(list)
    for i in indices:
        by_adapter[samples[i].adapter].append(i)
    return [(a, ix[k:k + size]) for a, ix in sorted(by_adapter.items()) for k in range(0, len(ix), size)]


def _pad(rows: Sequence[Sequence[float]], width: int, dtype: torch.dtype,
         device: torch.device | str = "cpu") -> torch.Tensor:
    """``rows`` right-padded with 0 to [len(rows), width], on ``device``."""
    out = torch.zeros(len(rows), width, dtype=dtype)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row, dtype=dtype)
    return out.to(device)


def _masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` [b, C] with 0 on padding (``mask`` 0), selected rather than multiplied: a -inf
    log-prob at a padded position times 0 would be NaN."""
    return torch.where(mask.bool(), values, torch.zeros_like(values))
