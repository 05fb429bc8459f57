"""Numbers that go bad: what teamplay does with a NaN or inf in training.

The promise: a non-finite loss or gradient never reaches the adapters, the optimiser state or a
checkpoint, and the user hears of it.

* The update (``PolicyUpdater``) skips every optimiser step whose loss or gradient norm is not
  finite (its gradients are dropped, AdamW never runs) and lists it as a ``SkippedUpdate`` in the
  step's metrics: ``skipped_nonfinite_steps`` (how many) and ``nonfinite_skips`` (which).
* The trainer's ``NonFiniteGuard`` turns a step with such skips into one ``NonFiniteWarning`` (one
  ``warning:`` line in the CLI) naming the step, the adapter and the quantity, and counts
  consecutive such steps; at ``optim.max_nonfinite_steps`` the run stops with a ``NonFiniteError``
  (one ``error:`` line) before that step is checkpointed, so the last checkpoint is the last one
  written from finite weights. ``check_finite_adapters`` refuses to checkpoint weights that are
  not finite, whatever made them so.

Credit methods that return non-finite advantages are refused where their output is checked
(``teamplay.credit.registry.assign``), and the credit stage refuses finite ones of absurd size
(``check_advantage_size``: beyond ``MAX_ADVANTAGE``) with the same ``CreditOutputError``; the
step's ranges (``reward_min``/``reward_max``, ``adv_min``/``adv_max``) are in metrics.jsonl so a
blow-up shows before it turns into NaN.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from teamplay.credit import CreditOutputError
from teamplay.errors import TeamplayError, TeamplayWarning

#: the largest advantage magnitude a credit method may return. Rewards are task scores (a 0/1
#: verdict, a count, a price) and every method's advantages are differences or normalised
#: differences of them, so even unnormalised methods stay many orders of magnitude below this. The
#: loss runs in float32 (or bf16, the same exponent range), whose largest finite value is 3.4e38:
#: the gradient norm squares each gradient, so it overflows once a term passes sqrt(3.4e38) =
#: 1.8e19, and an advantage cast to float32 above 3.4e38 is already inf. 1e18 sits just below the
#: first of those, so an absurd advantage stops the run naming its method instead of surfacing
#: later as a non-finite loss or gradient.
MAX_ADVANTAGE = 1e18


class NonFiniteWarning(TeamplayWarning):
    """A training step skipped an optimiser step whose loss or gradient norm was NaN or inf; the
    message names the step, the adapter and the quantity."""


class NonFiniteError(TeamplayError, ArithmeticError):
    """Training stopped: ``optim.max_nonfinite_steps`` consecutive steps had a non-finite loss or
    gradient, or the adapters hold non-finite weights; nothing non-finite was checkpointed."""


@dataclass(frozen=True)
class SkippedUpdate:
    """One optimiser step the update skipped because a number in it was not finite.

    Fields:
        epoch, minibatch: where in the step (1-based; the minibatch that would have stepped).
        quantity: ``"loss"``, ``"loss on another learner rank"`` (data parallel: that rank's loss
            was not finite, so every rank skipped) or ``"gradient norm"``.
        adapters: the adapters whose loss or gradients were not finite (empty when this rank
            cannot tell: another rank's loss, or a gradient shard held elsewhere).
    """

    epoch: int
    minibatch: int
    quantity: str
    adapters: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (a metrics.jsonl value)."""
        return {**asdict(self), "adapters": list(self.adapters)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SkippedUpdate:
        return cls(int(data["epoch"]), int(data["minibatch"]), str(data["quantity"]),
                   tuple(data.get("adapters", ())))

    def describe(self) -> str:
        """``non-finite loss of adapter 'proposer' (epoch 1, minibatch 2)``."""
        who = ""
        if self.adapters:
            names = ", ".join(repr(a) for a in self.adapters)
            who = f" of adapter{'s' if len(self.adapters) > 1 else ''} {names}"
        return f"non-finite {self.quantity}{who} (epoch {self.epoch}, minibatch {self.minibatch})"


def finite_gradient_flags(params: Mapping[str, Sequence[torch.nn.Parameter]]) -> dict[str, torch.Tensor]:
    """Per adapter a 0-dim bool tensor: all its gradients (this rank's shard of them) are finite.

    Computed before clipping (a non-finite norm makes the clip scale every gradient to NaN, and the
    culprit could no longer be told apart) and read only after a non-finite norm, so a good step
    pays a few small kernels and no device sync.
    """
    out = {}
    for adapter, ps in params.items():
        grads = [_local(p.grad) for p in ps if p.grad is not None]
        out[adapter] = (torch.stack([torch.isfinite(g).all() for g in grads]).all() if grads
                        else torch.tensor(True))
    return out


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) gradient's local shard; a plain tensor as it is."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if to_local is not None else tensor


def check_finite_adapters(params: Mapping[str, Sequence[torch.nn.Parameter]], what: str) -> None:
    """Raise ``NonFiniteError`` naming the first adapter whose weights hold NaN or inf (``what``:
    the action refused, e.g. "checkpoint step 4")."""
    for adapter, ps in params.items():
        if not all(bool(torch.isfinite(p.detach()).all()) for p in ps):
            raise NonFiniteError(f"refusing to {what}: adapter {adapter!r} holds non-finite weights; the "
                                 "last checkpoint written keeps the last finite ones")


def check_advantage_size(method: str, advantages: Sequence[np.ndarray]) -> None:
    """Raise ``CreditOutputError`` naming credit ``method`` when one of ``advantages`` (one finite
    array [T_g] per episode, as ``assign`` returns them) exceeds ``MAX_ADVANTAGE`` in magnitude."""
    for g, adv in enumerate(advantages):
        big = np.flatnonzero(np.abs(adv) > MAX_ADVANTAGE)
        if big.size:
            raise CreditOutputError(
                f"credit method {method!r} returned an advantage of absurd size ({adv[big[0]]:g} for message "
                f"{int(big[0])} of episode {g}); advantages must stay within +-{MAX_ADVANTAGE:g}, beyond which "
                "the float32 loss overflows")


class NonFiniteGuard:
    """Counts consecutive training steps with skipped non-finite updates (``streak``); warns once per
    such step and says when the run must stop (``limit``: ``optim.max_nonfinite_steps``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.streak = 0
        self.last: tuple[SkippedUpdate, ...] = ()

    def observe(self, step: int, update: Mapping[str, Any]) -> int:
        """Record the update of training step ``step`` (1-based, as in metrics.jsonl): a step with skips
        extends the streak and warns; one that applied its updates ends it; one with nothing to
        update (no credited group) leaves it as it was. Returns the streak."""
        skips = tuple(SkippedUpdate.from_dict(d) for d in update.get("nonfinite_skips", ()))
        done = int(update.get("optimizer_steps", 0))
        if not skips:
            if done:
                self.streak, self.last = 0, ()
            return self.streak
        self.streak, self.last = self.streak + 1, skips
        warnings.warn(NonFiniteWarning(
            f"step {step}: skipped {len(skips)} of {len(skips) + done} optimiser steps: {self._list(skips)}; "
            f"the skipped updates never reached the adapters ({self.streak} such step{'s' if self.streak > 1 else ''} "
            f"in a row; the run stops at optim.max_nonfinite_steps = {self.limit})"), stacklevel=3)
        return self.streak

    @property
    def tripped(self) -> bool:
        """True once ``limit`` consecutive steps had skips: the run must stop."""
        return self.streak >= self.limit

    def error(self, step: int, last_checkpoint: str | None) -> NonFiniteError:
        """The error that stops the run at training step ``step``."""
        kept = f"the last checkpoint is {last_checkpoint}" if last_checkpoint else "no checkpoint was written yet"
        return NonFiniteError(
            f"step {step}: {self.streak} consecutive steps had a non-finite loss or gradient "
            f"(optim.max_nonfinite_steps = {self.limit}); last: {self._list(self.last)}. Training stopped "
            f"before checkpointing this step; {kept}. adv_min/adv_max and reward_min/reward_max in "
            "metrics.jsonl show whether the credit or the rewards blew up; --resume auto continues from "
            "that checkpoint")

    @staticmethod
    def _list(skips: Sequence[SkippedUpdate]) -> str:
        shown = "; ".join(s.describe() for s in skips[:3])
        return shown + (f"; and {len(skips) - 3} more" if len(skips) > 3 else "")
