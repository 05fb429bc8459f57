"""VPR (arXiv 2605.10325): oracle process rewards for the arithmetic claims inside messages.

An arithmetic claim ("12 + 7 = 19", "3 * 4 - 2 = 10") can be checked exactly, whatever the task,
so every such intermediate statement in any agent's message gets a verifiable step reward. For
message t of role rho, with claims k = 1..K_t found in its decoded text:

    r_k   = +1 if the left side evaluates exactly to the right side, else -1   (the oracle)
    Rhat  = (r_k - mean) / (std + eps)   over the k-th claims of the group's messages of role rho
                                         (turn-level normalisation across the group, as VPR does
                                         per turn; a position with one claim or all-equal rewards
                                         gives 0); ``normalise: none`` uses r_k itself
    a_j   = A + weight * Rhat_k          for the tokens of claim k's step
    a_j   = A                            for tokens after the last claim

A claim's step is the text from just after the previous claim (or the message start) to the end
of the claim: the tokens that led to it (a token belongs to the step in which it starts).
Messages without a claim keep A on every token.

What the paper fixes: oracle rewards per intermediate action, normalised across the group at each
step (its turn level), added to the outcome signal. What is chosen here: the step is one claim
inside a message rather than one environment turn; the +-1 rewards; the step span; ``weight``.
The evaluator knows integers and decimals, + - * / (and x, ×, ÷ as operators) with the usual
precedence, no parentheses; a claim it cannot parse is not a claim. Invariants: finite; the
message advantage is unchanged outside claim steps; with ``weight = 0`` every token carries A.
The method adds a process signal, so it does not conserve the message total.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction
from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CardText, CreditBatch, MethodOptions
from teamplay.credit.token.base import TokenAdvantages, group_token_stats, per_message, register_token_credit

_NUM = r"-?\d+(?:\.\d+)?"
_OP = r"[-+*/x×÷]"
CLAIM = re.compile(rf"(?<![\d.])({_NUM}(?:\s*{_OP}\s*{_NUM})+)\s*=\s*({_NUM})(?![\d.])")


class VPROptions(MethodOptions):
    """Options of the ``vpr`` token method."""

    weight: float = Field(0.5, ge=0.0, description="Scale of the step advantage added to the message's.")
    normalise: Literal["group", "none"] = Field("group", description="'group': per claim position across "
                                                                     "the group's messages of the role; 'none': +-1.")
    eps: float = Field(1e-6, gt=0.0, description="Added to the std of the group normalisation.")


def evaluate(expression: str) -> Fraction | None:
    """Exact value of ``a op b op c ...`` (+ - * /, precedence of * and / over + and -); ``None``
    when it does not parse or divides by zero."""
    parts = re.findall(rf"{_NUM}|{_OP}", expression.replace(" ", ""))
    if not parts or "".join(parts) != expression.replace(" ", ""):
        return None
    # the tokenizer above reads "3-2" as "3", "-2": restore a binary minus between two numbers
    tokens: list[str] = []
    for p in parts:
        if tokens and tokens[-1] not in "-+*/x×÷" and p.startswith("-") and len(p) > 1:
            tokens += ["-", p[1:]]
        else:
            tokens.append(p)
    try:
        values = [Fraction(tokens[0])]
        ops: list[str] = []
        for op, num in zip(tokens[1::2], tokens[2::2], strict=True):
            v = Fraction(num)
            if op in "*x×":
                values[-1] *= v
            elif op in "/÷":
                values[-1] /= v
            else:
                values.append(v if op == "+" else -v)
                ops.append(op)
        return sum(values, Fraction(0))
    except (ValueError, ZeroDivisionError):
        return None


def claims(text: str) -> list[tuple[int, int, float]]:
    """``(start, end, reward)`` of every checkable claim of ``text`` (reward +1 true, -1 false)."""
    found = []
    for m in CLAIM.finditer(text):
        left = evaluate(m.group(1))
        if left is None:
            continue
        found.append((m.start(), m.end(), 1.0 if left == Fraction(m.group(2)) else -1.0))
    return found


def step_advantages(rewards: Sequence[float], normalise: str, eps: float) -> np.ndarray:
    r = np.asarray(rewards, dtype=np.float64)
    if normalise == "none":
        return r
    if len(r) < 2 or np.all(r == r[0]):
        return np.zeros_like(r)
    return (r - r.mean()) / (r.std() + eps)


VPR_CARD = CardText(
    "The message advantage plus an oracle process reward: each arithmetic claim ('12 + 7 = 19') "
    "scores +1 if exact and -1 if not, normalised per (role, claim index) across the group and "
    "added (x weight) to the tokens of the claim's step; totals not conserved.",
    ("a claim's correctness is a verifiable step reward that bears on the outcome",
     "claims with the same index across the group's messages are comparable steps",
     "only claims the evaluator parses count (+ - * / on numbers, no parentheses)"),
    ("tests/credit/test_token_methods.py::test_vpr_hand_worked",
     "tests/credit/test_token_methods.py::test_vpr_never_raises_and_weight_zero_is_the_message_advantage"),
    "decoding only (tokenizer), no model pass")


@register_token_credit("vpr", VPROptions, "VPR: exact oracle rewards for arithmetic claims inside messages, "
                       "normalised per claim across the group", needs=("text_offsets",), conserves=False, card=VPR_CARD)
def vpr_credit(batch: CreditBatch, message_adv: Sequence[np.ndarray], options: VPROptions) -> TokenAdvantages:
    stats = group_token_stats(batch)
    found: dict[tuple[int, int], list[tuple[int, int, float]]] = {}
    by_position: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)  # (role, k) -> messages
    for g, ep in enumerate(batch.episodes):
        for t, msg in enumerate(ep.messages):
            st = stats.get(g, t)
            if st is None:
                continue
            if st.text is None or st.token_ends is None:
                raise ValueError("token method 'vpr' needs token statistic 'text_offsets'")
            found[(g, t)] = claims(st.text)
            for k in range(len(found[(g, t)])):
                by_position[(msg.role, k)].append((g, t))
    step_adv: dict[tuple[int, int, int], float] = {}
    for (_role, k), where in by_position.items():
        rewards = [found[w][k][2] for w in where]
        for (g, t), a in zip(where, step_advantages(rewards, options.normalise, options.eps), strict=True):
            step_adv[(g, t, k)] = float(a)

    def row_of(g: int, t: int, a: float, st) -> np.ndarray:
        row = np.full(len(st.logprobs), a)
        starts = np.concatenate([[0], st.token_ends[:-1]])  # [C] text offset where each token starts
        previous_end = 0
        for k, (_start, end, _r) in enumerate(found[(g, t)]):
            # a token belongs to the step of the claim during which it starts
            inside = (starts >= previous_end) & (starts < end)
            row[inside] += options.weight * step_adv[(g, t, k)]
            previous_end = end
        return row

    return per_message(batch, message_adv, row_of)
