"""EP-GRPO (arXiv 2605.04960): entropy-gated token weights, an implicit process signal from policy
divergence anchored to the outcome advantage, and progress-aligned credit for groups whose rewards
are all equal.

For message t with advantage A, tokens j = 1..C, entropies e_j, behaviour log-probs l_j and
reference log-probs r_j:

    gate        w_j = (1 - mix) + mix * e_j / mean(e)                          (mean 1)
    divergence  z_j = tanh((l_j - r_j) / tau),   zc_j = z_j - mean(z)           (sum 0)
    a_j = A * w_j + process * |A| * zc_j

so ``sum_j a_j = C * A`` (conservation). The divergence ``l - r`` is the implicit process reward
of a policy against its reference (PRIME); anchoring it to ``|A|`` keeps it on the outcome's
scale and lets a token's sign differ from the message's: in a failed message a token the policy
has learned to prefer over the reference is blamed less (or credited), in a successful one it is
credited more.

Zero reward variance: the message advantages of such a group are 0 and GRPO has no gradient.
With ``zero_variance > 0`` the trainer keeps these groups and every token gets the
progress-aligned signal

    P_j = sum_{k <= j} e_k / sum_k e_k          (cumulative entropy: the share of the message's
                                                 uncertainty resolved by token j, in (0, 1])
    a_j = zero_variance * (2 R - 1) * P_j       (R the group's common reward in [0, 1])

so an all-correct group is reinforced and an all-wrong one discouraged, more strongly the further
the reasoning has progressed; ``|a_j| <= zero_variance``. No conservation there (the message
total is 0 and the tokens are not).

What the public abstract fixes: the three components named above. What it does not, and is
chosen here: the linear gate mixed with a uniform share (``mix``), tanh with scale ``tau`` to bound
the divergence, centring it within the message (for conservation), the ``|A|`` anchor and the
``process`` weight, and the form of the progress signal (``zero_variance``, off by default).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CardText, CreditBatch, MethodOptions
from teamplay.credit.token.base import TOKEN_SPLIT, TokenAdvantages, conserve, per_message, register_token_credit


class EPGRPOOptions(MethodOptions):
    """Options of the ``ep_grpo`` token method."""

    mix: float = Field(0.5, ge=0.0, le=1.0, description="Share of the advantage spread by entropy (0 = uniform).")
    process: float = Field(0.5, ge=0.0, description="Weight of the divergence signal, in units of |A|.")
    tau: float = Field(1.0, gt=0.0, description="Scale of the log-ratio inside tanh.")
    zero_variance: float = Field(0.0, ge=0.0, description="Progress-aligned signal for groups whose rewards "
                                                          "are all equal (0 = such groups are skipped).")


def ep_grpo_tokens(adv: float, entropies: np.ndarray, logprobs: np.ndarray, ref_logprobs: np.ndarray,
                   mix: float, process: float, tau: float) -> np.ndarray:
    """Token advantages [C] of one message of a group with reward variance (module docstring)."""
    w = (1.0 - mix) + mix * conserve(entropies)  # [C]
    z = np.tanh((np.asarray(logprobs) - np.asarray(ref_logprobs)) / tau)  # [C]
    return adv * w + process * abs(adv) * (z - z.mean())


def progress_tokens(reward: float, entropies: np.ndarray, scale: float) -> np.ndarray:
    """Progress-aligned token advantages [C] for a zero-variance group with common ``reward``."""
    e = np.asarray(entropies, dtype=np.float64)
    total = e.sum()
    progress = np.cumsum(e) / total if total > 0 else np.arange(1, len(e) + 1) / len(e)  # [C]
    return scale * (2.0 * reward - 1.0) * progress


EP_GRPO_CARD = CardText(
    "The message advantage spread by an entropy gate plus a divergence process signal: a_j = A "
    "w_j + process |A| zc_j, zc_j the centred tanh((log pi - log pi_ref) / tau); conserves C A; "
    "optional progress credit for groups with equal rewards (zero_variance).",
    (TOKEN_SPLIT,
     "the log-ratio to the reference is an implicit process reward (PRIME): it holds only while "
     "the divergence tracks the value of the tokens",
     "high entropy marks the tokens that decide"),
    ("tests/credit/test_token_methods.py::test_ep_grpo_hand_worked",
     "tests/credit/test_token_methods.py::test_ep_grpo_conserves_and_zero_variance_is_bounded"),
    "one no-grad reference pass")


@register_token_credit("ep_grpo", EPGRPOOptions, "EP-GRPO: entropy gate + divergence process signal anchored "
                       "to the outcome; progress credit for equal-reward groups", needs=("entropies", "ref_logprobs"),
                       keeps_zero_variance=lambda options: options.zero_variance > 0, card=EP_GRPO_CARD)
def ep_grpo_credit(batch: CreditBatch, message_adv: Sequence[np.ndarray], options: EPGRPOOptions) -> TokenAdvantages:
    rewards = [ep.reward for ep in batch.episodes]
    zero_variance = len(set(rewards)) == 1

    def row(g: int, t: int, a: float, st) -> np.ndarray:
        if zero_variance:
            return progress_tokens(rewards[g], st.need("entropies", "ep_grpo"), options.zero_variance)
        return ep_grpo_tokens(a, st.need("entropies", "ep_grpo"), st.logprobs, st.need("ref_logprobs", "ep_grpo"),
                              options.mix, options.process, options.tau)

    return per_message(batch, message_adv, row)
