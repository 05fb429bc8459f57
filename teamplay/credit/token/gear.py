"""GEAR (arXiv 2605.11853): the policy shown the reference answer is the teacher; where the
student departs from it, the continuation becomes a segment whose advantage is modulated by the
divergence at the departure.

For message t with advantage A, tokens j = 1..C, student log-probs l_j (behaviour) and teacher
log-probs q_j (the same adapter scoring the same tokens after the prompt plus
``TEACHER_HINT`` with the task's reference answer, so the teacher is free in every task here):

    D_j   = l_j - q_j                     divergence at the sampled token (> 0: the teacher, who
                                          knows the answer, finds the student's choice less likely)
    spike = { j : D_j > threshold }       departure points
    seg(j)= the last spike at or before j (none: j is still aligned with the teacher)
    m_j   = 1 + strength * tanh(D_j^+)            aligned token (token resolution kept)
    m_j   = 1 + strength * tanh(D_seg(j))          token of the segment that starts at seg(j)
    a_j   = A * C * m_j / sum_k m_k               (conservation: sum_j a_j = C * A)

so a departure and everything generated after it carry a larger share of the message's credit
or blame, in proportion to how sharply the student left the teacher there; a message that never
departs and has no divergence keeps A on every token.

What the abstract fixes: a ground-truth-conditioned teacher from self-distillation, segments
anchored at divergence spikes, token resolution where the student stays aligned, the divergence
at the departure modulating the segment's advantage. Chosen here: the sampled-token log-ratio as
the divergence, a fixed spike threshold (``threshold``), tanh-bounded modulation (``strength``),
renormalisation for conservation, and the hint text. The paper also lets token entropy extend
segments; that is not done here (segments run to the next spike).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CardText, CreditBatch, MethodOptions
from teamplay.credit.token.base import TOKEN_SPLIT, TokenAdvantages, conserve, per_message, register_token_credit


class GEAROptions(MethodOptions):
    """Options of the ``gear`` token method."""

    threshold: float = Field(1.0, gt=0.0, description="Divergence (nats) above which a token starts a segment.")
    strength: float = Field(1.0, ge=0.0, description="Modulation scale (0 = GRPO's uniform tokens).")


def gear_weights(logprobs: np.ndarray, teacher_logprobs: np.ndarray, threshold: float,
                 strength: float) -> np.ndarray:
    """Token weights [C] with mean 1 (module docstring)."""
    d = np.asarray(logprobs, dtype=np.float64) - np.asarray(teacher_logprobs, dtype=np.float64)  # [C]
    anchor = np.maximum(d, 0.0)  # aligned tokens: their own (positive) divergence
    start = None
    for j in range(len(d)):
        if d[j] > threshold:
            start = j
        if start is not None:
            anchor[j] = d[start]
    return conserve(1.0 + strength * np.tanh(anchor))


GEAR_CARD = CardText(
    "The message advantage weighted by where the student departs from the same adapter shown the "
    "reference answer (the teacher): a segment starts at each divergence spike and its share "
    "grows with the divergence there; conserves C A.",
    (TOKEN_SPLIT,
     "a token the answer-aware teacher finds unlikely is where the message went right or wrong",
     "every problem has a reference answer"),
    ("tests/credit/test_token_methods.py::test_gear_hand_worked",
     "tests/credit/test_token_methods.py::test_gear_conserves_each_message_total"),
    "one no-grad teacher pass (prompt + reference hint, each distinct prompt once)")


@register_token_credit("gear", GEAROptions, "GEAR: segments start where the student departs from the "
                       "answer-conditioned teacher; the departure's divergence modulates them",
                       needs=("teacher_logprobs",), card=GEAR_CARD)
def gear_credit(batch: CreditBatch, message_adv: Sequence[np.ndarray], options: GEAROptions) -> TokenAdvantages:
    return per_message(batch, message_adv, lambda g, t, a, st: a * gear_weights(
        st.logprobs, st.need("teacher_logprobs", "gear"), options.threshold, options.strength))
