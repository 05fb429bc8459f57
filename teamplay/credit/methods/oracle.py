"""``oracle``: train on the true advantage A* where it is known in closed form (a ceiling for credit).

``A*(a_i) = E[R | agent i's answer] - E[R]``, the expectation over every other agent, is known
exactly in four team structures, each a ``form`` (``c_{g,i}``: the score of agent i's own answer in
episode g, ``Episode.agent_correct``; ``p_j``: agent j's accuracy on the problem):

* ``additive`` (``split`` with ``reward: fraction``, ``R = (1/K) sum_j c_j``): ``A*_i = (c_i - p_i) / K``.
  The per-agent value is ``u_{g,i} = c_{g,i} / K``.
* ``conjunctive`` (``split`` with ``reward: all``, ``R = prod_j c_j``, agents independent):
  ``A*_i = (c_i - p_i) prod_{j != i} p_j``, with ``p_j`` estimated by the group's mean of ``c_j``:
  ``u_{g,i} = c_{g,i} prod_{j != i} mean_g c_{g,j}``.
* ``spoiler`` (``sequential`` with a scripted teammate that, independently of everything before,
  replaces the first agent's answer with a wrong one with probability q):
  ``A*_first = (1 - q)(c_first - p_first)``; the other agents' turns carry no gradient (scripted).
  ``u_{g,first} = c_{g,first}``, 0 for the others (the factor 1 - q is dropped: ``mode: std`` is
  invariant to it).
* ``relay`` (``relay`` with a faithful answerer, one that sums what it reads such as the scripted
  ``adder``: ``R = prod_j c_j`` over the informants, ``c_j`` = informant j's operand reached the
  answer): the informants form a conjunctive team, ``A*_i = (c_i - p_i) prod_{j != i} p_j``, so
  ``u_{g,i} = c_{g,i} prod_{j != i} mean_g c_{g,j}`` over informants; the answerer's turn carries no
  gradient (a faithful answerer is deterministic given what it reads): ``u = 0``.

``u`` then goes through the group rule every Shapley-type method uses (``group_credit_advantage``:
each agent's value centred over the group, ``p_i`` estimated by that mean, scaled by the pooled
std), so the oracle's advantages are on the scale of ``shapley``'s and, with symmetric agents,
of ``grpo``'s. The oracle's advantage for agent i depends on agent i's own answers alone (additive,
spoiler): the others' noise, which broadcast credit carries, is gone.

Every episode is checked against its form's reward rule (``R = mean c``, ``R = prod c``, ``R <= c_first``,
``R = prod c_informants``)
and one that breaks it is a ``DataError`` naming it: the closed form is only the truth where its
structure holds.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.methods.group_shapley import GroupOptions, _broadcast, _same_team
from teamplay.credit.registry import CreditBatch, register_credit
from teamplay.credit.values.group import group_credit_advantage
from teamplay.errors import DataError
from teamplay.records import Episode

#: a reward and the value its form predicts may differ by float rounding of a mean of K scores
#: (K <= 64 terms of size <= 1: under 64 ulp of 1.0, far below this)
_RULE_TOL = 1e-9


class OracleOptions(GroupOptions):
    """Options of the ``oracle`` method."""

    form: Literal["additive", "conjunctive", "spoiler", "relay"] = Field(
        "additive", description="The team structure whose A* is known: 'additive' (split, fraction), "
                                "'conjunctive' (split, all right), 'spoiler' (a first answer that a "
                                "scripted teammate may spoil independently), 'relay' (relay with an "
                                "answerer that sums what it reads).")


def _scores(batch: CreditBatch, agents: tuple[str, ...]) -> np.ndarray:
    """c [G, n]: each agent's own answer score per episode (a missing agent scores 0)."""
    return np.array([[float(ep.agent_correct.get(a, 0.0)) for a in agents] for ep in batch.episodes])


def _check_rule(ep: Episode, g: int, predicted: float, rule: str) -> None:
    if abs(ep.reward - predicted) > _RULE_TOL and not (rule == "R <= c_first" and ep.reward <= predicted):
        raise DataError(f"credit oracle: episode {g} ({ep.problem_id}) has reward {ep.reward!r} but its form's "
                        f"rule {rule} gives {predicted!r}; this team is not of that form (see credit.options.form)")


def _conjunctive(c: np.ndarray) -> np.ndarray:
    """u [G, n] = c_{g,i} prod_{j != i} p_j with p_j = mean_g c_{g,j}: conjunctive A* up to centring."""
    p = c.mean(axis=0)  # [n]
    others = np.array([np.prod(np.delete(p, i)) for i in range(c.shape[1])])  # [n]
    return c * others[None, :]


def _relay_values(batch: CreditBatch, agents: tuple[str, ...], c: np.ndarray) -> np.ndarray:
    """u [G, n]: the informants' conjunctive values, 0 for the answerer (module docstring)."""
    roles = {m.agent: m.role for ep in batch.episodes for m in ep.messages}
    informant = np.array([roles.get(a) == "informant" for a in agents])  # [n]
    if not informant.any():
        raise DataError("credit oracle: form 'relay' needs informant agents (protocol relay)")
    for g, ep in enumerate(batch.episodes):
        _check_rule(ep, g, float(np.prod(c[g, informant])), "R = prod c_informants")
    u = np.zeros_like(c)
    u[:, informant] = _conjunctive(c[:, informant])
    return u


def oracle_values(batch: CreditBatch, options: OracleOptions) -> np.ndarray:
    """u [G, n]: the per-agent value whose group-centred form is A* (module docstring)."""
    agents = _same_team(batch)
    c = _scores(batch, agents)  # [G, n]
    G, n = c.shape
    if options.form == "additive":
        for g, ep in enumerate(batch.episodes):
            _check_rule(ep, g, float(c[g].mean()), "R = mean c")
        return c / n
    if options.form == "conjunctive":
        for g, ep in enumerate(batch.episodes):
            _check_rule(ep, g, float(np.prod(c[g])), "R = prod c")
        return _conjunctive(c)
    if options.form == "relay":
        return _relay_values(batch, agents, c)
    first = np.zeros_like(c)
    for g, ep in enumerate(batch.episodes):
        spoken = [m for m in ep.messages if m.spoke]
        if not spoken:
            continue
        i = agents.index(spoken[0].agent)
        _check_rule(ep, g, float(c[g, i]), "R <= c_first")
        first[g, i] = c[g, i]
    return first


#: the protocol each form's closed form is about
_FORM_PROTOCOL = {"additive": "split", "conjunctive": "split", "spoiler": "sequential", "relay": "relay"}


@register_credit("oracle", OracleOptions, "the true advantage A* in closed form (additive or conjunctive split "
                 "teams, a spoiled first answer, a relay): a ceiling for credit",
                 protocols=("split", "sequential", "relay"), cost="no generation: the agents' own answer scores",
                 protocols_of=lambda options: frozenset({_FORM_PROTOCOL[options.form]}))
def oracle_credit(batch: CreditBatch, options: OracleOptions) -> list[np.ndarray]:
    """``group_credit_advantage(oracle_values)`` broadcast to each agent's spoken messages.

    Invariants: per agent ``sum_g A_{g,i} = 0``; under ``additive`` an agent's advantages depend only
    on its own scores up to the shared scale, and equal masking ``shapley``'s on ``split`` (both are
    ``c / K``); under ``relay`` the answerer's advantages are 0. Edge cases: a singleton group, or
    every agent's value constant over the group, gives zeros; an episode that breaks the form's
    reward rule is a DataError.
    """
    agents = _same_team(batch)
    adv = group_credit_advantage(oracle_values(batch, options), options.ddof, options.mode, options.eps)
    return [_broadcast(ep, dict(zip(agents, a.tolist(), strict=True)))
            for ep, a in zip(batch.episodes, adv, strict=True)]
