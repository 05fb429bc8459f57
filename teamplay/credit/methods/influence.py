"""``influence``: a message is worth how much it moved its listener toward the answer (social influence).

For spoken message ``t`` of episode ``g`` (author ``a``, round ``r``), the *listener* ``l(t)`` is the
last turn ``u > t`` of another agent, in a later round, that reads the message: its prompt changes
when ``t`` is withheld (in a relay or a chain: the final answer's author; for a reviewer: the proposer
who revises). The message's influence is the change in the listener's teacher-forced log-probability
of the answer ``y`` with the message against the message withheld:

    I_{g,t} = log p(y | prompt of l(t)) - log p(y | prompt of l(t), message t withheld)

one extra forward pass per message (the message-present row is shared by every message a listener
reads), nothing generated. The log-probabilities are per answer token (the mean over the tokens of
``y`` and the closing brace after ``"The answer is \\boxed{"``, ``teamplay.training.play.listener_logprob``),
and withholding is the protocol's: the message becomes the placeholder ``"(no message)"``. ``y`` is
the reference answer where the task's item has one (``target: reference``, the default), else, or
with ``target: final``, the team's final answer of that episode (an episode without one gets no
influence term).

Advantages, one rule for every message (the group centring of ``grpo`` plus A2TGPO's per-turn z
normalisation, GiGPO's ``A^E + omega A^S`` sum):

    A_{g,t} = group_advantage(R)_g + coef z_{g,t}
    z_{g,t} = (I_{g,t} - mean_{g'} I_{g',t}) / max(std_{g'} I_{g',t}, eps)   (normalise: turn)

the mean and std over the episodes of the group whose message ``t`` has an influence term (the same
turn index); fewer than two such episodes, or all equal, give ``z = 0``; ``normalise: none`` uses
``z = I``. A message without a listener (the final answerer's own message, a voter's in a
simultaneous vote, the last round of a debate) has no influence term: it gets the team reward
baseline ``group_advantage(R)_g`` alone. Skipped messages get 0. A group whose rewards are all equal
still gets the influence terms: that is the dense signal of a cold start.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit
from teamplay.credit.values.group import group_advantage
from teamplay.credit.values.listener_query import ListenerQuery, ListenerScorer
from teamplay.records import Episode


class InfluenceOptions(MethodOptions):
    """Options of the ``influence`` method."""

    target: Literal["reference", "final"] = Field(
        "reference", description="The answer whose log-probability the listener's prompt is scored on: "
                                 "'reference' (the item's reference where it has one, else the team's "
                                 "final answer) or 'final' (the team's final answer of the episode).")
    coef: float = Field(1.0, ge=0, description="Weight of the influence term beside the team advantage.")
    normalise: Literal["turn", "none"] = Field(
        "turn", description="'turn': z-normalise the influences of one turn index across the group; "
                            "'none': the raw influence (nats per answer token).")
    mode: Literal["std", "mean_only"] = Field(
        "std", description="The team advantage: 'std' divides the centred rewards by their std, "
                           "'mean_only' does not.")
    eps: float = Field(1e-8, gt=0, description="Floor of the stds.")


def listeners(ep: Episode, reads) -> list[int | None]:
    """[T]: per message, its listener's turn index (module docstring), None for a skipped message
    or one no later spoken turn of another agent reads (a skipped turn said nothing it read).
    ``reads(t, u) -> bool`` says whether turn ``u`` reads message ``t``; it is asked latest turn
    first and only until one reads."""
    out: list[int | None] = []
    for t, m in enumerate(ep.messages):
        found = None
        if m.spoke:
            later = [u for u in range(t + 1, len(ep.messages))
                     if ep.messages[u].spoke and ep.messages[u].agent != m.agent
                     and ep.messages[u].round > m.round]
            found = next((u for u in reversed(later) if reads(t, u)), None)
        out.append(found)
    return out


def target_answer(ep: Episode, reference: str | None, target: str) -> str | None:
    """The answer scored for ``ep``: the reference where ``target='reference'`` and it is known
    (non-empty), else the episode's final answer (None: none)."""
    if target == "reference" and reference:
        return reference
    return ep.final_answer


def influence_values(batch: CreditBatch, options: InfluenceOptions, scorer: ListenerScorer
                     ) -> list[np.ndarray]:
    """Per episode, [T] influences ``I_{g,t}`` (NaN where a message has no influence term), all
    queries of the group in one ``scorer.many`` call."""
    reference = batch.item.reference if batch.item is not None else None
    queries: list[ListenerQuery] = []
    where: list[tuple[int, int]] = []
    for g, ep in enumerate(batch.episodes):
        answer = target_answer(ep, reference, options.target)
        if answer is None:
            continue
        for t, u in enumerate(listeners(ep, lambda t, u, ep=ep: scorer.reads(ep, t, u))):
            if u is not None:
                queries += [ListenerQuery(ep, u, None, answer), ListenerQuery(ep, u, t, answer)]
                where.append((g, t))
    values = np.asarray(scorer.many(queries), dtype=np.float64) if queries else np.zeros(0)
    if values.shape != (len(queries),):
        raise ValueError(f"influence: the listener scorer returned shape {values.shape} for {len(queries)} queries")
    out = [np.full(len(ep.messages), np.nan) for ep in batch.episodes]
    for k, (g, t) in enumerate(where):
        out[g][t] = values[2 * k] - values[2 * k + 1]
    return out


def turn_normalised(influence: list[np.ndarray], eps: float) -> list[np.ndarray]:
    """``z`` of the module docstring: per turn index, the influences of the episodes that have one,
    centred and divided by ``max(std, eps)``; 0 where fewer than two, all equal, or none."""
    out = [np.zeros(len(x)) for x in influence]
    for t in range(max((len(x) for x in influence), default=0)):
        members = [g for g, x in enumerate(influence) if t < len(x) and np.isfinite(x[t])]
        if len(members) < 2:
            continue
        col = np.array([influence[g][t] for g in members])
        if np.all(col == col[0]):
            continue
        z = (col - col.mean()) / max(float(col.std()), eps)
        for g, v in zip(members, z, strict=True):
            out[g][t] = v
    return out


INFLUENCE_CARD = CardText(
    "I_{g,t} = log p(y | listener's prompt) - log p(y | listener's prompt, message t withheld): the "
    "change in the teacher-forced log-probability per token of the answer y (the reference where "
    "known, else the team's final answer) of the last later turn of another agent that reads message "
    "t, z-normalised per turn index across the group and added to the group-centred team reward; a "
    "message no teammate reads gets the team reward's advantage alone.",
    ("the listener's teacher-forced belief in y is a value of what it read: a message that raises it "
     "moves the team toward the answer (a proxy for E[R | message] - E[R | message withheld], not a "
     "sampled outcome: influence through later turns than the listener's is not seen)",
     "withholding by the placeholder '(no message)' is the counterfactual of not having sent the "
     "message, and the listener's prompt is rebuilt by the protocol from the recorded transcript",
     "messages with the same turn index across the group are comparable (the z-normalisation)",
     "the policy is calibrated enough that a higher probability of the reference goes with a right "
     "answer; a channel the listener ignores gives no credit, which the no-channel arm checks"),
    ("tests/credit/test_influence.py::test_worked_number_on_a_tiny_model",
     "tests/credit/test_influence.py::test_invariants",
     "tests/credit/test_influence.py::test_without_a_channel_no_message_has_a_listener",
     "tests/credit/test_influence.py::test_runs_in_a_training_step"),
    "the message-present row of a listener is shared by every message it reads, and rows with the "
    "same prompt are scored once; the rows' prompt tokens are logged (influence_prompt_tokens)",
    fails_where=("a belief, not an outcome: the listener's log-probability of the answer can rise while its "
                 "sampled answer stays wrong, and influence through turns after the listener's is not seen; "
                 "its z-scored term adds variance to the team's advantage (1.05 and 1.69 against grpo's 0.31 "
                 "and 0.63, section 12's influence table)",
                 "measured: Pearson r with A* 0.74 [0.63, 0.85] in the chain of two (grpo 0.60, continuation "
                 "0.77), level with grpo for the solver read by a noisy teammate (0.60 against 0.58)"))


@register_credit("influence", InfluenceOptions,
                 "social influence: the team advantage plus how much the message raised its listener's "
                 "log-probability of the answer (against the message withheld), z-normalised per turn",
                 requires=lambda options: frozenset({"listener"}),
                 cost="one teacher-forced row per message a teammate reads, plus one per listener turn (no generation)",
                 card=INFLUENCE_CARD)
def influence_credit(batch: CreditBatch, options: InfluenceOptions) -> list[np.ndarray]:
    """``A_{g,t} = group_advantage(R)_g + coef z_{g,t}`` (module docstring). Needs the ``listener``
    resource, a :class:`~teamplay.credit.values.listener_query.ListenerScorer`.

    Invariants: a message without an influence term gets the team advantage exactly; with
    ``normalise='turn'`` the influence terms of one turn index sum to 0 over the group, so every
    turn's advantages sum to the sum of the team advantages of the episodes holding it (0 when all
    do); skipped messages get 0. Edge cases: ``G = 1`` gives 0 team advantage and ``z = 0``
    (nothing to compare with); all-equal rewards give a 0 team advantage, the influence terms stay.
    """
    scorer = batch.resources.need("listener", "method 'influence'")
    team = group_advantage([ep.reward for ep in batch.episodes], mode=options.mode, eps=options.eps)
    influence = influence_values(batch, options, scorer)
    terms = turn_normalised(influence, options.eps) if options.normalise == "turn" else \
        [np.nan_to_num(x, nan=0.0) for x in influence]
    out = []
    for ep, a, z in zip(batch.episodes, team, terms, strict=True):
        spoke = np.array([m.spoke for m in ep.messages], dtype=bool)
        out.append(np.where(spoke, a + options.coef * z, 0.0))
    return out
