"""S-trace: eligibility traces over entropy-selected tokens, with successor importance weights
clipped as in Retrace and a trace decay lambda.

For message t with advantage A and tokens j = 1..C (entropies e_j):

    S      = the ceil(select * C) tokens of highest entropy (the decision points), s_1 < ... < s_m
    c_l    = min(rho_l, clip),  rho_l = pi_current(y_l) / pi_behaviour(y_l)   (successor importance)
    tr_i   = lam^(m - i) * prod_{i < l <= m} c_{s_l}      (trace of decision s_i: the message's
                                                          outcome at the end flows back through
                                                          the later decisions, decaying by lam
                                                          and by how off-policy they are)
    w_j    = (1 - mix) + mix * C * tr_i / sum_l tr_l     for j = s_i in S
    w_j    = (1 - mix)                                   for j not in S
    a_j    = A * w_j                                     (sum_j a_j = C * A: conservation)

With on-policy rollouts ``rho = 1`` and the trace is ``lam^(m - i)``: the last decision carries
the most credit. Rollouts made by an older adapter (remote workers) have ``rho != 1`` and the
clip keeps one unlikely successor from inflating the trace.

No public text fixes these details for this setting; the selection rule, the trace direction
(backwards from the outcome at the end of the message), the Retrace-style clip and the mixing
with a uniform share are this module's choices, each an option.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CardText, CreditBatch, MethodOptions
from teamplay.credit.token.base import TOKEN_SPLIT, TokenAdvantages, per_message, register_token_credit


class STraceOptions(MethodOptions):
    """Options of the ``s_trace`` token method."""

    select: float = Field(0.2, gt=0.0, le=1.0, description="Share of tokens (highest entropy) that are decisions.")
    lam: float = Field(0.9, gt=0.0, le=1.0, description="Trace decay per later decision.")
    clip: float = Field(1.0, gt=0.0, description="Clip of the successor importance ratios.")
    mix: float = Field(0.5, ge=0.0, le=1.0, description="Share of the advantage the traces redistribute.")


def s_trace_weights(entropies: np.ndarray, log_rho: np.ndarray, select: float, lam: float, clip: float,
                    mix: float) -> np.ndarray:
    """Token weights [C] with mean 1 (module docstring); ``log_rho`` = current - behaviour log-probs."""
    e = np.asarray(entropies, dtype=np.float64)
    n = len(e)
    m = max(1, math.ceil(select * n))
    chosen = np.sort(np.argsort(-e, kind="stable")[:m])  # [m] positions, in order
    c = np.minimum(np.exp(np.asarray(log_rho, dtype=np.float64)[chosen]), clip)  # [m]
    trace = np.empty(m)
    running = 1.0
    for i in range(m - 1, -1, -1):  # backwards from the last decision
        trace[i] = running
        running *= lam * c[i]
    w = np.full(n, 1.0 - mix)
    total = trace.sum()
    if total > 0:
        w[chosen] += mix * n * trace / total
    else:  # every successor ratio 0: no trace, uniform
        w[:] = 1.0
    return w


S_TRACE_CARD = CardText(
    "The message advantage carried back over its highest-entropy tokens (decisions) by "
    "eligibility traces lam^(m-i) x the clipped importance ratios of later decisions; the other "
    "tokens keep (1 - mix) A; conserves C A.",
    (TOKEN_SPLIT,
     "high-entropy tokens are the decisions, and later decisions caused more of the message's "
     "outcome",
     "clipped importance ratios correct rollouts from an older adapter"),
    ("tests/credit/test_token_methods.py::test_s_trace_hand_worked",
     "tests/credit/test_token_methods.py::test_s_trace_conserves_each_message_total"),
    "none: entropies are recorded at generation (a scoring pass for vLLM rollouts)")


@register_token_credit("s_trace", STraceOptions, "S-trace: eligibility traces over high-entropy decision "
                       "tokens with clipped successor importance weights", needs=("entropies",), card=S_TRACE_CARD)
def s_trace_credit(batch: CreditBatch, message_adv: Sequence[np.ndarray], options: STraceOptions) -> TokenAdvantages:
    def row(g: int, t: int, a: float, st) -> np.ndarray:
        current = st.current_logprobs if st.current_logprobs is not None else st.logprobs
        return a * s_trace_weights(st.need("entropies", "s_trace"), current - st.logprobs, options.select,
                                   options.lam, options.clip, options.mix)

    return per_message(batch, message_adv, row)
