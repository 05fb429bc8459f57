"""AEM (arXiv 2605.00425): response-level surprisal rescales advantages, moving from exploration
to exploitation as a group's positive and negative messages balance.

For the messages of one role in a group (those with tokens), with advantages A_i:

    u_i   = mean_j (-log pi_old(y_ij))              response surprisal per token (recorded at generation)
    rho_i = u_i / mean_k u_k                         relative surprisal (1 = the role's average)
    kappa = (N_neg - N_pos) / (N_neg + N_pos)        in [-1, 1]; N_pos/N_neg: messages with A > 0 / A < 0
    c_i   = clip(rho_i ** (strength * kappa), 1 / max_scale, max_scale)
    a_ij  = c_i * A_i                                on every token j of message i

Mostly failing (kappa > 0): surprising messages get larger advantages, so a rare success is
reinforced more and a confident failure pushed down less (exploration). Mostly succeeding
(kappa < 0): confident messages get the larger share (exploitation). Balanced: kappa = 0, c = 1.

The paper proves that entropy drift under natural gradients is governed by the product of the
advantage and the relative response surprisal, and derives "a practical proxy"; its exact form
is not in the public abstract. The power law in rho, the balance coefficient kappa and the
clip are this module's choices (``strength``, ``max_scale``).

Invariants: the sign of every advantage is kept; |a| <= max_scale |A|; ``strength = 0`` gives the
message advantages unchanged. The method rescales, so it does not conserve message totals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CardText, CreditBatch, MethodOptions
from teamplay.credit.token.base import TokenAdvantages, group_token_stats, register_token_credit


class AEMOptions(MethodOptions):
    """Options of the ``aem`` token method."""

    strength: float = Field(1.0, ge=0.0, description="Exponent scale of the relative surprisal (0 = off).")
    max_scale: float = Field(2.0, ge=1.0, description="Clip of the modulation to [1/max_scale, max_scale].")


def aem_scales(surprisal: np.ndarray, adv: np.ndarray, strength: float, max_scale: float) -> np.ndarray:
    """Modulation c [n] of n messages of one role from their surprisals [n] and advantages [n]."""
    u = np.asarray(surprisal, dtype=np.float64)
    a = np.asarray(adv, dtype=np.float64)
    n_pos, n_neg = int((a > 0).sum()), int((a < 0).sum())
    if n_pos + n_neg == 0 or not u.mean() > 0:
        return np.ones_like(u)
    kappa = (n_neg - n_pos) / (n_neg + n_pos)
    rho = np.maximum(u / u.mean(), 1e-12)  # a zero-surprisal message would make rho**negative blow up
    return np.clip(rho ** (strength * kappa), 1.0 / max_scale, max_scale)


AEM_CARD = CardText(
    "Not a contrast: each message advantage rescaled by its relative response surprisal, c = "
    "clip(rho^(strength kappa)), kappa the balance of negative and positive messages of the role "
    "in the group; signs kept, totals not conserved.",
    ("the message advantage comes from the message-level method; rescaling it changes what it "
     "estimates by a factor between 1 / max_scale and max_scale",
     "the paper's entropy-drift argument holds for the proxy chosen here (power law, clip)"),
    ("tests/credit/test_token_methods.py::test_aem_hand_worked",
     "tests/credit/test_token_methods.py::test_aem_keeps_signs_and_bounds"),
    "none: behaviour log-probs are recorded at generation")


@register_token_credit("aem", AEMOptions, "AEM: relative response surprisal rescales advantages "
                       "(explore while failing, exploit while succeeding)", needs=(), conserves=False, card=AEM_CARD)
def aem_credit(batch: CreditBatch, message_adv: Sequence[np.ndarray], options: AEMOptions) -> TokenAdvantages:
    """``a_ij = c_i A_i`` per role of the group (module docstring); needs only behaviour log-probs."""
    stats = group_token_stats(batch)
    by_role: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for g, ep in enumerate(batch.episodes):
        for t, msg in enumerate(ep.messages):
            if stats.get(g, t) is not None:
                by_role[msg.role].append((g, t))
    out: TokenAdvantages = [[None] * len(ep.messages) for ep in batch.episodes]
    for where in by_role.values():
        u = np.array([-float(np.mean(stats.get(g, t).logprobs)) for g, t in where])
        a = np.array([float(message_adv[g][t]) for g, t in where])
        for (g, t), c, adv in zip(where, aem_scales(u, a, options.strength, options.max_scale), a, strict=True):
            out[g][t] = np.full(len(stats.get(g, t).logprobs), c * adv)
    return out
