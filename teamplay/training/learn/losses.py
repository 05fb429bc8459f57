"""Policy-gradient losses over padded token batches: GRPO (token ratio + k3 KL) and GSPO.

Formulas are docs/credit/specification.md#grpo-loss and #gspo-loss. All functions take padded ``[B, L]`` tensors (B
sequences, i.e. messages, of up to L completion tokens) and a ``mask`` of the same shape that is 1
on real tokens and 0 on padding; they return the loss to *minimise* (``-J``) and a ``LossStats``
the trainer logs. Padding never contributes to the loss, its gradient or the stats, whatever values
it holds: NaN or inf in padded log-probs or padded token advantages are replaced with
``torch.where`` before any arithmetic that could spread them (never by multiplying with the mask:
``NaN * 0`` is NaN, in the value and in the gradient).

``logp_old`` is the behaviour policy's with ``objective.old_logprobs: generation``: the log-probs
recorded when the message was generated. With asynchronous rollouts (``rollout.max_staleness: N``,
``teamplay.training.run.asynchronous.rollouts``) that policy may be up to N updates behind, and these
losses are the off-policy correction: the clipped ratio ``pi_theta / pi_behaviour`` (PPO's clip with
the generating snapshot as the old policy). AReaL's decoupled objective (Fu et al. 2025, "AReaL: A
Large-Scale Asynchronous Reinforcement Learning System for Language Reasoning") is the alternative
not taken here: clip against a recent proximal policy and weight by a truncated
``pi_prox / pi_behaviour``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

LossAgg = Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]
LOSS_AGGS: tuple[str, ...] = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")


@dataclass(frozen=True)
class LossStats:
    """What the trainer logs for one loss evaluation (plain floats, detached).

    Fields:
        clip_fraction: fraction of units (tokens for GRPO, sequences for GSPO) whose ratio lay
            outside the clip interval *and* whose clipped branch was the minimum (no gradient).
        ratio_mean: mean ratio over units (token ratios for GRPO, sequence ratios s_i for GSPO).
        kl_mean: mean k3 KL per token to the reference policy; ``None`` when the loss has no
            reference policy (GSPO, or GRPO called without ``logp_ref``).
    """

    clip_fraction: float
    ratio_mean: float
    kl_mean: float | None


def k3_kl(logp: torch.Tensor, logp_ref: torch.Tensor, clamp: float | None = None) -> torch.Tensor:
    """Elementwise k3 estimator of KL(pi_theta || pi_ref): ``exp(d) - d - 1`` with ``d = logp_ref - logp``.

    Always >= 0 and 0 exactly when the two log-probs are equal. Same shape as the inputs.

    ``clamp=c`` is verl's guard ("low_var_kl"): ``d`` is clamped to [-20, 20] before ``exp`` and the
    estimate to at most ``c`` (verl: 10), so one token the policy has moved far from the reference
    cannot dominate the loss; clamped tokens get no KL gradient.
    """
    d = logp_ref - logp  # [B, L]
    if clamp is None:
        return torch.exp(d) - d - 1.0
    if clamp <= 0:
        raise ValueError(f"k3 clamp must be > 0, got {clamp}")
    d = d.clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1.0).clamp(max=clamp)


def _check_batch(mask: torch.Tensor, **tensors: torch.Tensor) -> torch.Tensor:
    """Shapes must agree; every row needs at least one real token. Returns the boolean mask."""
    if mask.dim() != 2:
        raise ValueError(f"mask must be [B, L], got shape {tuple(mask.shape)}")
    for name, t in tensors.items():
        if t.shape != mask.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but mask has {tuple(mask.shape)}")
    keep = mask.bool()  # [B, L]
    empty = (~keep.any(dim=1)).nonzero().flatten()
    if empty.numel():
        raise ValueError(f"row {int(empty[0])} of mask has no tokens; drop empty sequences "
                         "(e.g. skipped turns) before computing the loss")
    return keep


def _seq_advantage(adv: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Advantages as [B, L], 0 on padding: a [B] vector is broadcast to every token of its sequence;
    a [B, L] one keeps its real tokens (padding may hold anything, NaN included)."""
    if adv.dim() == 1:
        if adv.shape[0] != keep.shape[0]:
            raise ValueError(f"adv has {adv.shape[0]} entries but the batch has {keep.shape[0]} rows")
        adv = adv[:, None].expand_as(keep)  # [B, L]
    elif adv.shape != keep.shape:
        raise ValueError(f"adv must be [B] or [B, L] = {tuple(keep.shape)}, got {tuple(adv.shape)}")
    # selected, not multiplied: the advantage multiplies the ratio, so a NaN left here would reach
    # the ratio's gradient as 0 * NaN even where the term itself is masked out
    return torch.where(keep, adv, torch.zeros_like(adv))  # [B, L]


def aggregate(term: torch.Tensor, keep: torch.Tensor, loss_agg: LossAgg,
              norm_tokens: int | None = None) -> torch.Tensor:
    """Scalar objective from per-token terms [B, L] over the real tokens ``keep`` [B, L] (bool; see
    :func:`grpo_loss` for the three modes). Padded terms are dropped, whatever they hold."""
    real = torch.where(keep, term, torch.zeros_like(term))  # [B, L]
    if loss_agg == "seq_mean_token_mean":
        return (real.sum(dim=1) / keep.sum(dim=1)).mean()
    if loss_agg == "token_mean":
        return real.sum() / keep.sum()
    assert norm_tokens is not None
    return real.sum() / (term.shape[0] * float(norm_tokens))


def grpo_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor | None,
    adv: torch.Tensor,
    mask: torch.Tensor,
    eps: float = 0.2,
    eps_high: float | None = None,
    beta: float = 0.0,
    loss_agg: LossAgg = "seq_mean_token_mean",
    norm_tokens: int | None = None,
    dual_clip: float | None = None,
    kl_clamp: float | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """GRPO clipped-surrogate loss with an optional k3 KL penalty (docs/credit/specification.md#grpo-loss).

    Per token: ``rho = exp(logp - logp_old)``,
    ``term = min(rho * A, clip(rho, 1 - eps, 1 + eps_high) * A) - beta * k3(logp, logp_ref)``;
    with ``dual_clip = c`` the surrogate of a token with ``A < 0`` is ``max(min(...), c * A)``
    (verl's dual-clip: a huge ratio on a bad token cannot make the loss unbounded).

    Aggregation over the real tokens (``|y_i|`` tokens in row i, B rows):

    * ``seq_mean_token_mean`` (GRPO): ``1/B sum_i 1/|y_i| sum_t term`` (TRL ``grpo``, verl
      ``seq-mean-token-mean``);
    * ``token_mean`` (DAPO/BNPO): ``sum_{i,t} term / sum_i |y_i|`` (TRL ``bnpo`` and, on one
      process, ``dapo``; verl ``token-mean``);
    * ``seq_mean_token_sum_norm`` (Dr. GRPO): ``1/B sum_{i,t} term / N`` with a constant
      ``N = norm_tokens`` (the generation budget), so no length bias. TRL ``dr_grpo`` is the same
      with ``N = max_completion_length``; verl's ``seq-mean-token-sum-norm`` divides by ``N`` but
      not by ``B`` (a constant factor B larger; documented difference, tested).

    Args:
        logp: log-probs of the completion tokens under the current policy, [B, L] (requires grad).
        logp_old: behaviour log-probs (treated as constants), [B, L].
        logp_ref: reference log-probs (base model, adapters off), [B, L]; may be ``None`` only
            when ``beta == 0``.
        adv: advantage per sequence [B] (broadcast to its tokens) or per token [B, L].
        mask: 1 on real tokens, 0 on padding, [B, L]; each row needs at least one token.
        eps, eps_high: clip interval ``[1 - eps, 1 + eps_high]``; ``eps_high=None`` means ``eps``
            (symmetric); a larger ``eps_high`` is DAPO's "clip-higher".
        beta: KL coefficient (0 disables the KL term, the common modern setting).
        loss_agg: one of the three aggregations above.
        norm_tokens: the constant N of ``seq_mean_token_sum_norm`` (required there, unused otherwise).
        dual_clip: the constant c > 1 of dual-clip for negative advantages; ``None`` = off.
        kl_clamp: clamp of the k3 estimate (see :func:`k3_kl`); ``None`` = off.

    Returns:
        ``(loss, stats)``: scalar loss ``-J`` and ``LossStats`` (clip fraction over tokens).

    Gradient: zero on tokens where the clipped branch is the (strict) minimum.
    """
    if eps_high is None:
        eps_high = eps
    if not (0 <= eps < 1 and eps_high >= 0):
        raise ValueError(f"need 0 <= eps < 1 and eps_high >= 0, got eps={eps}, eps_high={eps_high}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if loss_agg not in LOSS_AGGS:
        raise ValueError(f"loss_agg must be one of {', '.join(LOSS_AGGS)}, got {loss_agg!r}")
    if loss_agg == "seq_mean_token_sum_norm" and not (norm_tokens and norm_tokens > 0):
        raise ValueError(f"loss_agg 'seq_mean_token_sum_norm' needs norm_tokens > 0, got {norm_tokens!r}")
    if dual_clip is not None and not dual_clip > 1:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    if logp_ref is None and beta > 0:
        raise ValueError("beta > 0 needs logp_ref (reference log-probs); pass them or set beta=0")
    tensors = {"logp": logp, "logp_old": logp_old}
    if logp_ref is not None:
        tensors["logp_ref"] = logp_ref
    keep = _check_batch(mask, **tensors)
    fmask = keep.to(logp.dtype)  # [B, L]
    zeros = torch.zeros_like(logp)
    # masked positions are replaced before exp so padding garbage cannot become NaN in the sum.
    log_ratio = torch.where(keep, logp - logp_old.detach(), zeros)  # [B, L]
    ratio = torch.exp(log_ratio)  # [B, L]
    A = _seq_advantage(adv.to(logp.dtype), keep).detach()  # [B, L]
    unclipped = ratio * A  # [B, L]
    clipped = torch.clamp(ratio, 1.0 - eps, 1.0 + eps_high) * A  # [B, L]
    term = torch.minimum(unclipped, clipped)  # [B, L]
    dual_active = None
    if dual_clip is not None:
        floor = dual_clip * A  # [B, L]
        dual_active = (A < 0) & (floor > term)  # [B, L]
        term = torch.where(A < 0, torch.maximum(term, floor), term)
    kl = None
    if logp_ref is not None:
        # mask the inputs, not only the output: torch.where passes 0 * (gradient of the unselected
        # branch), and 0 * NaN or 0 * inf from padding garbage would be a NaN gradient.
        kl = torch.where(keep, k3_kl(torch.where(keep, logp, zeros), torch.where(keep, logp_ref.detach(), zeros),
                                     kl_clamp), zeros)  # [B, L]
        if beta > 0:
            term = term - beta * kl
    objective = aggregate(term, keep, loss_agg, norm_tokens)
    n_tok = fmask.sum()
    with torch.no_grad():
        clip_active = (clipped < unclipped) & keep  # [B, L]
        if dual_active is not None:
            clip_active = clip_active | (dual_active & keep)
        stats = LossStats(
            clip_fraction=float(clip_active.sum() / n_tok),
            ratio_mean=float(torch.where(keep, ratio, zeros).sum() / n_tok),
            kl_mean=None if kl is None else float(torch.where(keep, kl, zeros).sum() / n_tok),
        )
    return -objective, stats


def gspo_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
    logratio_clamp: float | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """GSPO sequence-level clipped loss (docs/credit/specification.md#gspo-loss); no KL term.

    ``s_i = exp(mean_t (logp - logp_old))`` over the real tokens of sequence i (a geometric-mean
    ratio), ``J = mean_i min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i)``, loss ``-J``.

    Args:
        logp, logp_old, mask: as in :func:`grpo_loss`, [B, L].
        adv: one advantage per sequence, [B], or one per token, [B, L] (then GSPO-token: every
            token carries ``sg[s_i] pi(y_t) / sg[pi(y_t)]``; the same loss and gradient as GSPO
            when a sequence's tokens share one advantage and logratio_clamp is not active; clip fraction over tokens).
        eps_low, eps_high: clip interval; defaults are the GSPO paper's 3e-4 / 4e-4. TRACER uses
            a symmetric 0.1.
        logratio_clamp: TRACER's safety clamp ``c``: the per-sequence mean log-ratio is mapped
            NaN -> 0, +-inf -> +-c, then clamped to ``[-c, c]`` before ``exp`` (TRACER: 2.0).
            ``None`` = no clamp (a NaN then propagates: better loud than silently zero).

    Returns:
        ``(loss, stats)`` with the clip fraction over sequences and ``kl_mean=None``.

    Invariants: ``s_i = 1`` when ``logp == logp_old``; a sequence's term never exceeds
    ``(1 + eps_high) A_i`` for ``A_i > 0`` or ``(1 - eps_low) A_i`` for ``A_i < 0``; zero gradient
    for a sequence whose clipped branch is the strict minimum.
    """
    if not (0 <= eps_low < 1 and eps_high >= 0):
        raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low}, {eps_high}")
    if adv.dim() == 1 and adv.shape[0] != mask.shape[0]:
        raise ValueError(f"GSPO needs one advantage per sequence, shape [{mask.shape[0]}], "
                         f"or one per token {tuple(mask.shape)}, got {tuple(adv.shape)}")
    keep = _check_batch(mask, logp=logp, logp_old=logp_old)
    fmask = keep.to(logp.dtype)  # [B, L]
    log_ratio = torch.where(keep, logp - logp_old.detach(), torch.zeros_like(logp))  # [B, L]
    seq_log_ratio = log_ratio.sum(dim=1) / fmask.sum(dim=1)  # [B]
    if logratio_clamp is not None:
        if logratio_clamp <= 0:
            raise ValueError(f"logratio_clamp must be > 0, got {logratio_clamp}")
        c = float(logratio_clamp)
        seq_log_ratio = torch.nan_to_num(seq_log_ratio, nan=0.0, posinf=c, neginf=-c).clamp(-c, c)  # [B]
    if adv.dim() == 1:
        s = torch.exp(seq_log_ratio)  # [B]
        A = adv.to(logp.dtype).detach()  # [B]
        unclipped = s * A  # [B]
        clipped = torch.clamp(s, 1.0 - eps_low, 1.0 + eps_high) * A  # [B]
        objective = torch.minimum(unclipped, clipped).mean()
        clip_active = (clipped < unclipped).to(logp.dtype)  # [B]
    else:
        # GSPO-token: s_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)]; its value is s_i, its gradient
        # d s_{i,t} / d logp_t = s_i, so per-token advantages steer each token separately.
        A = _seq_advantage(adv.to(logp.dtype), keep).detach()  # [B, L]
        safe_logp = torch.where(keep, logp, torch.zeros_like(logp))  # [B, L]
        s_tok = torch.exp(safe_logp - safe_logp.detach() + seq_log_ratio.detach()[:, None])  # [B, L]
        unclipped = s_tok * A  # [B, L]
        clipped = torch.clamp(s_tok, 1.0 - eps_low, 1.0 + eps_high) * A  # [B, L]
        objective = aggregate(torch.minimum(unclipped, clipped), keep, "seq_mean_token_mean")
        clip_active = ((clipped < unclipped) & keep).to(logp.dtype).sum() / fmask.sum()
        s = torch.exp(seq_log_ratio)  # [B]
    with torch.no_grad():
        stats = LossStats(
            clip_fraction=float(clip_active.mean()),
            ratio_mean=float(s.mean()),
            kl_mean=None,
        )
    return -objective, stats


# ---- one signature for every objective ---------------------------------------------------------------

ObjectiveLoss = Callable[..., tuple[torch.Tensor, LossStats]]


def _grpo_objective(obj: Any, logp: torch.Tensor, old: torch.Tensor, ref: torch.Tensor | None,
                    adv: torch.Tensor, mask: torch.Tensor, norm_tokens: int) -> tuple[torch.Tensor, LossStats]:
    return grpo_loss(logp, old, ref, adv, mask, eps=obj.clip_low, eps_high=obj.clip_high, beta=obj.kl_beta,
                     loss_agg=obj.loss_agg, norm_tokens=obj.norm_tokens or norm_tokens,
                     dual_clip=obj.dual_clip, kl_clamp=obj.kl_clamp)


def _gspo_objective(obj: Any, logp: torch.Tensor, old: torch.Tensor, ref: torch.Tensor | None,
                    adv: torch.Tensor, mask: torch.Tensor, norm_tokens: int) -> tuple[torch.Tensor, LossStats]:
    # the config refuses kl_beta, loss_agg, norm_tokens, dual_clip and kl_clamp with gspo, so ref is None
    return gspo_loss(logp, old, adv, mask, eps_low=obj.clip_low, eps_high=obj.clip_high or obj.clip_low,
                     logratio_clamp=obj.logratio_clamp)


def sft_loss(logp: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, LossStats]:
    """Supervised fine-tuning's loss: the negative log-likelihood of the completion tokens, a mean
    over each sequence's real tokens, then over sequences (``seq_mean_token_mean``, so a long message
    weighs as much as a short one and an adapter's share splits over data-parallel ranks as GRPO's
    does; TRL's SFTTrainer averages over every token of the batch instead).

    ``logp`` [B, L] are the completion tokens' log-probs (the prompt is never a target: the caller
    scores completions only), ``mask`` [B, L] 1 on real tokens. Padding never reaches the loss or
    its gradient. The stats have no ratio (1) and no clip (0).
    """
    keep = _check_batch(mask, logp=logp)
    return -aggregate(logp, keep, "seq_mean_token_mean"), LossStats(clip_fraction=0.0, ratio_mean=1.0, kl_mean=None)


@dataclass(frozen=True)
class SftObjective:
    """The objective a warm start's update runs (``teamplay.training.run.warm_start``): ``sft_loss``,
    with the fields ``PolicyUpdater`` reads of an objective (no KL term, no old log-probs pass)."""

    name: str = "sft"
    kl_beta: float = 0.0
    old_logprobs: str = "generation"


def _sft_objective(obj: Any, logp: torch.Tensor, old: torch.Tensor, ref: torch.Tensor | None,
                   adv: torch.Tensor, mask: torch.Tensor, norm_tokens: int) -> tuple[torch.Tensor, LossStats]:
    # every warm-start sample is a target with advantage 1; the NLL needs no ratio, reference or norm
    return sft_loss(logp, mask)


#: objective name -> loss with the one signature of ``objective_loss`` (``sft``: a warm start's NLL,
#: not an RL objective, so ``objective.name`` cannot select it)
OBJECTIVES: dict[str, ObjectiveLoss] = {"grpo": _grpo_objective, "gspo": _gspo_objective, "sft": _sft_objective}


def objective_loss(obj: Any, logp: torch.Tensor, old: torch.Tensor, ref: torch.Tensor | None,
                   adv: torch.Tensor, mask: torch.Tensor, norm_tokens: int) -> tuple[torch.Tensor, LossStats]:
    """The loss of the objective ``obj`` (an ``ObjectiveConfig``) on one adapter's minibatch.

    Shapes: ``logp``, ``old``, ``ref`` (None without a KL term) and ``mask`` are [b, C]; ``adv`` is
    [b] (one advantage per message) or [b, C] (token-level credit). ``norm_tokens`` is the constant
    normaliser of ``seq_mean_token_sum_norm`` when the objective sets none (the trainer passes
    ``sampling.max_new_tokens``). The trainer calls only this: no objective is special-cased.
    """
    return OBJECTIVES[obj.name](obj, logp, old, ref, adv, mask, norm_tokens)
