"""DGPO (arXiv 2605.03327): bounded Hellinger deviation, gated by entropy, redistributes a
message's advantage over its tokens, conserving the total.

For message t with advantage A and tokens j = 1..C:

    H_j = H(pi_theta(.|y_<j), pi_ref(.|y_<j)) = sqrt(1 - sum_v sqrt(p_v q_v))   in [0, 1]
    d_j = max(H_j - floor, 0)           (floor: float noise of two forward passes, 1e-4)
    s_j = d_j * e_j                     (e_j: the policy's entropy at j, the gate)
    w_j = (1 - mix) + mix * s_j / mean(s)                                       (mean 1)
    a_j = A * w_j

so ``sum_j a_j = C * A`` (conservation) and ``w_j`` lies in ``[1 - mix, 1 - mix + mix * C]``:
every token keeps at least ``(1 - mix)`` of the message's advantage, with its sign. A message
whose scores are all zero (no deviation from the reference yet, e.g. the first step of a fresh
adapter) keeps its scalar on every token. The floor makes that hold in floats: the policy and the
reference are two forward passes (the reference one shares each prompt's cache across its
samples), whose distributions for identical weights differ by rounding, a Hellinger distance of
about 1e-6 that would otherwise set the weights at random.

A message's tokens depend on its own statistics only, so the method registers its per-message
rule (``dgpo_row``) and the single-process trainer applies it inside the update: ``d`` and ``e``
come from the update's own forward pass (the policy as it is when the message's minibatch is
first scored: the behaviour policy for the first minibatch of a step) and one reference pass; no
statistics pass of their own.

What the public abstract fixes: Hellinger distance (bounded) to the reference, an entropy gate,
redistribution of the sequence advantage to tokens, no token-level KL penalty (so a run with
DGPO and ``objective.kl_beta > 0`` is refused at load). What it does not, and is chosen here: the
gate is the raw entropy (the normalisation by mean(s) makes its scale irrelevant); the mixing
with a uniform share (``mix``, default 0.5) so no token loses its gradient; linear rather than
softmax normalisation (``temperature`` switches to ``w = C softmax(s / temperature)`` mixed the
same way).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CardText, CreditBatch, MethodOptions
from teamplay.credit.token.base import (
    TOKEN_SPLIT,
    TokenAdvantages,
    TokenStats,
    conserve,
    per_message,
    register_token_credit,
)


class DGPOOptions(MethodOptions):
    """Options of the ``dgpo`` token method."""

    mix: float = Field(0.5, ge=0.0, le=1.0, description="Share of the advantage redistributed by the "
                                                        "gated deviation (0 = GRPO's uniform tokens).")
    temperature: float | None = Field(None, gt=0.0, description="None: linear weights s / mean(s); "
                                                                "a value: C * softmax(s / temperature).")
    floor: float = Field(1e-4, ge=0.0, lt=1.0, description="Hellinger distances are reduced by this and "
                                                           "clipped at 0: below it they are rounding noise.")


def dgpo_weights(hellinger: np.ndarray, entropies: np.ndarray, mix: float,
                 temperature: float | None = None, floor: float = 0.0) -> np.ndarray:
    """Token weights [C] with mean 1 from the Hellinger deviations and entropies [C]."""
    d = np.maximum(np.asarray(hellinger, dtype=np.float64) - floor, 0.0)  # [C]
    s = d * np.asarray(entropies, dtype=np.float64)  # [C]
    if temperature is None:
        shaped = conserve(s)
    else:
        z = np.exp((s - s.max()) / temperature)
        shaped = conserve(z)
    return (1.0 - mix) + mix * shaped


def dgpo_row(advantage: float, stats: TokenStats, options: DGPOOptions) -> np.ndarray:
    """One message's token advantages ``a_j = A * w_j`` [C] (see the module docstring)."""
    return advantage * dgpo_weights(stats.need("hellinger", "dgpo"), stats.need("entropies", "dgpo"),
                                    options.mix, options.temperature, options.floor)


DGPO_CARD = CardText(
    "No new contrast: the message advantage A redistributed over its tokens, a_j = A w_j with w_j "
    "= (1 - mix) + mix s_j / mean(s), s_j = (Hellinger distance to the reference - floor)^+ x "
    "entropy; conserves C A.",
    (TOKEN_SPLIT,
     "tokens where the policy departed from the reference at an uncertain position are the ones "
     "responsible for the outcome (a heuristic, not identified)",
     "it replaces the KL term (refused with kl_beta > 0)"),
    ("tests/credit/test_token_methods.py::test_dgpo_hand_worked",
     "tests/credit/test_token_methods.py::test_dgpo_conserves_each_message_total"),
    "one no-grad reference pass (what a KL term costs); the policy's side comes from the "
    "update's own forward pass")


@register_token_credit("dgpo", DGPOOptions, "DGPO: entropy-gated Hellinger deviation spreads the message "
                       "advantage over its tokens", needs=("entropies", "hellinger"), excludes_kl=True,
                       row=dgpo_row, card=DGPO_CARD)
def dgpo_credit(batch: CreditBatch, message_adv: Sequence[np.ndarray], options: DGPOOptions) -> TokenAdvantages:
    """Token advantages ``a_j = A * w_j`` (see the module docstring); conserves each message total."""
    return per_message(batch, message_adv, lambda g, t, a, st: dgpo_row(a, st, options))
