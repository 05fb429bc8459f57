"""``oracle``: train on the true advantage A* where it is known in closed form (a ceiling for credit).

``A*(a_i) = E[R | agent i's answer] - E[R]``, the expectation over every other agent, is known
exactly in six team structures, each a ``form`` (``c_{g,i}``: the score of agent i's own answer in
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

* ``majority`` (``vote`` with ``rule: majority``, a threshold game: ``R = [sum_j c_j >= m]`` with
  ``m = floor(K/2) + 1``, voters independent given the problem): ``E[R | c_i]`` is linear in the
  binary ``c_i``, ``E[R | c_i = 1] - E[R | c_i = 0] = piv_i = P(sum_{j != i} c_j = m - 1)`` (voter i
  decides the vote exactly when the others split one short of the threshold), so
  ``A*_i = (c_i - p_i) piv_i``. ``piv_i`` is the Poisson-binomial probability of the others' count,
  with ``p_j = mean_g c_{g,j}`` (``pivot_probabilities``): ``u_{g,i} = c_{g,i} piv_i``. Broadcast
  gives every voter of an episode ``R - mean R``; this credit is 0 for a voter that never decides
  (``piv_i = 0``) and largest for the voter most often pivotal.
* ``review`` (``review``: one proposal, one review whose WRONG verdict and corrected answer the team
  adopts; ``c_prop`` the proposal's score, ``R`` the team's). The reviewer's value is its difference
  reward against keeping the proposal, ``u_rev = R - c_prop``: the protocol keeps the proposal when
  the review says RIGHT or is malformed, so ``c_prop`` is the exact team reward of that
  counterfactual, with no estimate. It is *not* A* per episode: given the proposal x (the state the
  reviewer acts in), ``A*(review | x) = R - V(x)`` with ``V(x) = E[R | x]`` under the reviewer's
  policy, and ``R - c_prop = A*(review | x) + (V(x) - c_prop)``; the extra term is a function of the
  proposal alone, so its expected policy gradient is 0 (the same expected gradient as A*, another
  variance). After the group centring the reviewer's advantage is ``(R - c_prop) - (mean R - mean
  c_prop)``. The proposer's value: ``A*(x) = V(x) - E[R]`` is linear in its binary score, ``V(1) -
  V(0)`` estimated by ``dV`` = the group's mean R over right proposals minus over wrong ones (0 when
  one kind is missing: then ``c_prop`` is constant and its advantage 0 anyway), so ``u_prop =
  c_prop dV``, whose centred form is exactly ``V^(x) - mean R``. With a scripted proposer (the
  ``noisy_proposer`` setting) its messages carry no gradient and only the reviewer's credit trains;
  with both roles trained both do. Every episode whose review did not adopt an answer must have
  ``R = c_prop`` (the rule checked).

Controls (options, for any form): ``mode: mean_only`` is the centred A* with no division by a std
(``n (u - mean_g u)``: for ``additive`` exactly ``c_i - p_i``); ``push_down: false`` is its
positive part, every negative advantage set to 0 (a wrong answer is not pushed down; the advantages
no longer sum to 0). ``baseline_samples: M`` (``additive`` only; ``teamplay.credit.methods.oracle_baseline``)
estimates ``p_i`` from more samples than the group: the closed form holds for any estimate of
``p_i`` independent of the episode, so the group's G answers of agent i are pooled with M fresh
answers of agent i alone, re-run from the question by the replay engine (the ``replay`` resource,
needed only when M > 0; the replays are not trained on, and their tokens count as the step's extra
tokens). Agent i's value ``(c_{g,i} - p^_i) / K`` is scaled as ``u`` is below: times K
(``c_{g,i} - p^_i``, the advantage under ``mode: mean_only``) and, under ``mode: std``, divided by
the same pooled std as with M = 0 (that of the group-centred scores ``c_{g,i} - mean_g c_{g,i}``),
so only the baseline differs. The advantages no longer sum to 0 over the group (``p^_i`` is not the
group mean), and an agent right (or wrong) in every episode of the group is still credited when its
replays are not. M = 0 is the plain oracle exactly.

``u`` then goes through the group rule every Shapley-type method uses (``group_credit_advantage``:
each agent's value centred over the group, ``p_i`` estimated by that mean, scaled by the pooled
std), so the oracle's advantages are on the scale of ``shapley``'s and, with symmetric agents,
of ``grpo``'s. The oracle's advantage for agent i depends on agent i's own answers alone (additive,
spoiler): the others' noise, which broadcast credit carries, is gone.

Every episode is checked against its form's reward rule (``R = mean c``, ``R = prod c``, ``R <= c_first``,
``R = prod c_informants``, ``R = [sum c >= m]``, ``R = c_prop`` unless adopted)
and one that breaks it is a ``DataError`` naming it: the closed form is only the truth where its
structure holds.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from teamplay.credit.methods.group_baseline import GroupOptions, broadcast, same_team
from teamplay.credit.methods.oracle_baseline import baseline_advantages, pooled_baseline, solo_replay_scores
from teamplay.credit.registry import CardText, CreditBatch, register_credit
from teamplay.credit.values.group import group_credit_advantage
from teamplay.errors import DataError
from teamplay.records import Episode

#: a reward and the value its form predicts may differ by float rounding of a mean of K scores
#: (K <= 64 terms of size <= 1: under 64 ulp of 1.0, far below this)
_RULE_TOL = 1e-9


class OracleOptions(GroupOptions):
    """Options of the ``oracle`` method."""

    form: Literal["additive", "conjunctive", "spoiler", "relay", "majority", "review"] = Field(
        "additive", description="The team structure whose A* is known: 'additive' (split, fraction), "
                                "'conjunctive' (split, all right), 'spoiler' (a first answer that a "
                                "scripted teammate may spoil independently), 'relay' (relay with an "
                                "answerer that sums what it reads), 'majority' (vote with rule: majority, "
                                "a threshold game), 'review' (review: a corrected answer the team adopts).")
    push_down: bool = Field(True, description="False: the positive part of the advantages (every negative "
                                              "one set to 0; a control: no push-down of wrong answers).")
    baseline_samples: int = Field(
        0, ge=0, le=256, description="form additive: M more answers of each agent alone per group (replayed "
                                     "from the question, the replay resource) pooled with the group's own "
                                     "for its baseline p_i; 0: the group mean (a control of the baseline's "
                                     "noise).")

    @field_validator("baseline_samples")
    @classmethod
    def _only_additive(cls, value: int, info: ValidationInfo) -> int:
        form = info.data.get("form")
        if value > 0 and form != "additive":
            raise ValueError(f"baseline_samples > 0 needs form 'additive' (an agent alone scores c_i / K "
                             f"only there), got form {form!r}")
        return value


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


def pivot_probabilities(p: np.ndarray, threshold: int) -> np.ndarray:
    """piv [n]: ``P(sum_{j != i} c_j = threshold - 1)`` for independent ``c_j ~ Bernoulli(p_j)``.

    The Poisson-binomial distribution of the others' count, by the O(n^2) recursion over voters
    (``dist[k]``: probability that k of the voters seen so far are right); 0 when ``threshold - 1``
    is out of 0..n-1.
    """
    n = len(p)
    piv = np.zeros(n)
    for i in range(n):
        dist = np.zeros(n)  # [n]: counts 0..n-1 of the n - 1 others
        dist[0] = 1.0
        for j in np.delete(np.arange(n), i):
            dist[1:] = dist[1:] * (1 - p[j]) + dist[:-1] * p[j]
            dist[0] *= 1 - p[j]
        piv[i] = dist[threshold - 1] if 1 <= threshold <= n else 0.0
    return piv


def _check_binary(c: np.ndarray, form: str) -> None:
    """The ``majority`` and ``review`` closed forms are about right/wrong answers: scores 0 or 1."""
    partial = c[(c != 0.0) & (c != 1.0)]  # exact: a right answer scores 1.0 and a wrong one 0.0
    if partial.size:
        raise DataError(f"credit oracle: form {form!r} needs answers scored 0 or 1, got a score {partial[0]!r} "
                        f"(a task with partial credit has no closed form here)")


def _majority_values(batch: CreditBatch, c: np.ndarray) -> np.ndarray:
    """u [G, n] = c_{g,i} piv_i: the threshold game's A* up to centring (module docstring)."""
    _check_binary(c, "majority")
    threshold = c.shape[1] // 2 + 1
    for g, ep in enumerate(batch.episodes):
        _check_rule(ep, g, float(c[g].sum() >= threshold), f"R = [sum c >= {threshold}]")
    return c * pivot_probabilities(c.mean(axis=0), threshold)[None, :]


def _review_values(batch: CreditBatch, agents: tuple[str, ...], c: np.ndarray) -> np.ndarray:
    """u [G, 2]: ``c_prop dV`` for the proposer, ``R - c_prop`` for the reviewer (module docstring)."""
    if set(agents) != {"proposer_0", "reviewer_0"}:
        raise DataError(f"credit oracle: form 'review' needs the team of protocol review (proposer_0, reviewer_0), "
                        f"got {', '.join(agents)}")
    _check_binary(c, "review")
    prop, rev = agents.index("proposer_0"), agents.index("reviewer_0")
    reward = np.array([ep.reward for ep in batch.episodes])  # [G]
    for g, ep in enumerate(batch.episodes):
        if ep.metadata.get("review", {}).get("outcome") != "adopted":
            _check_rule(ep, g, float(c[g, prop]), "R = c_prop (the review adopted no answer)")
    right = c[:, prop] == 1.0  # exact: binary scores (checked above)
    dv = float(reward[right].mean() - reward[~right].mean()) if right.any() and (~right).any() else 0.0
    u = np.zeros_like(c)
    u[:, prop] = c[:, prop] * dv
    u[:, rev] = reward - c[:, prop]
    return u


def oracle_values(batch: CreditBatch, options: OracleOptions) -> np.ndarray:
    """u [G, n]: the per-agent value whose group-centred form is A* (module docstring)."""
    agents = same_team(batch)
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
    if options.form == "majority":
        return _majority_values(batch, c)
    if options.form == "review":
        return _review_values(batch, agents, c)
    first = np.zeros_like(c)
    for g, ep in enumerate(batch.episodes):
        spoken = [m for m in ep.messages if m.spoke]
        if not spoken:
            continue
        i = agents.index(spoken[0].agent)
        _check_rule(ep, g, float(c[g, i]), "R <= c_first")
        first[g, i] = c[g, i]
    return first


#: the protocol trait each form's closed form needs (``teamplay.envs.protocols.traits``)
_FORM_TRAIT = {"additive": "scored_parts", "conjunctive": "scored_parts", "spoiler": "last_link_final",
               "relay": "informants", "majority": "independent_vote", "review": "adopting_review"}


ORACLE_CARD = CardText(
    "A*(a_i) = E[R | agent i's answer] - E[R], in closed form: (c_i - p_i) / K in an additive split "
    "team, (c_i - p_i) prod_{j != i} p_j in a conjunctive one (and a relay's informants), (1 - q)(c - p) "
    "for a first answer a scripted teammate spoils independently with probability q, (c_i - p_i) piv_i "
    "in a threshold vote (piv_i: the chance the others fall one short of a majority); in a review, the "
    "reviewer's difference reward R - c_prop (A* plus a term of the proposal alone) and the proposer's "
    "V(x) - E[R]; p estimated by the group's mean, scaled by the pooled std as shapley is (mode "
    "mean_only: not scaled; push_down false: negative advantages set to 0; additive with "
    "baseline_samples M: p_i the mean of the group's G answers of agent i and M more of it alone, "
    "replayed, over the same std, so the advantages no longer sum to 0), broadcast to the agent's "
    "messages.",
    ("the team has the declared form: its reward is the mean (additive) or product (conjunctive) of "
     "the agents' own answer scores, or the first answer kept or spoiled (checked on every "
     "episode: a reward that breaks the rule is an error)",
     "the agents answer independently given the problem (conjunctive, spoiler: the others' accuracy "
     "enters as a constant)",
     "the group's mean of an agent's scores is its accuracy on the problem (G draws: the baseline "
     "error is of order 1 / sqrt(G); G + M draws with baseline_samples M, the M from the current policy "
     "replayed alone, which on split plays as it does in the team)"),
    ("tests/credit/test_oracle.py::test_oracle_equals_masking_shapley_on_the_additive_team",
     "tests/credit/test_oracle.py::test_oracle_hand_worked_forms",
     "tests/credit/test_oracle.py::test_oracle_refuses_a_team_of_another_form",
     "tests/credit/test_oracle_vote.py::test_majority_a_star_equals_brute_force_enumeration",
     "tests/envs/test_review.py::test_oracle_review_form_is_a_star_up_to_a_term_of_the_proposal",
     "tests/credit/test_broadcast_controls.py::test_oracle_controls_worked_numbers",
     "tests/credit/test_oracle_baseline.py::test_replayed_baseline_worked_numbers",
     "tests/credit/test_oracle_baseline.py::test_baseline_is_the_pooled_mean_and_tends_to_the_true_accuracy",
     "tests/credit/test_oracle_baseline.py::test_the_real_engine_scores_an_agent_alone_c_over_k_on_split"),
    "arithmetic on the agents' scores; the replays of baseline_samples M generate about M / G times "
    "the rollout's tokens",
    fails_where=("only where its form holds: every episode is checked against the form's reward rule, and the "
                 "group mean stands for each agent's accuracy (G = 4 draws in the arena)",
                 "form review: the reviewer's credit R - c_prop is A* plus a term of the proposal alone (the same "
                 "expected gradient, another variance), and the proposer's V(1) - V(0) is estimated from the group",
                 "form majority: binary scores and one string for every right answer; a plurality vote whose right "
                 "answer wins with a minority breaks its rule (use the vote's rule: majority)"))


@register_credit("oracle", OracleOptions, "the true advantage A* in closed form (additive or conjunctive split "
                 "teams, a spoiled first answer, a relay, a threshold vote, a review): a ceiling for credit",
                 cost="no generation: the agents' own answer scores (with baseline_samples M > 0: M "
                      "replays of each agent alone per group)",
                 requires=lambda options: frozenset({"replay"}) if options.baseline_samples > 0 else frozenset(),
                 traits_of=lambda options: frozenset({_FORM_TRAIT[options.form]}), card=ORACLE_CARD)
def oracle_credit(batch: CreditBatch, options: OracleOptions) -> list[np.ndarray]:
    """``group_credit_advantage(oracle_values)`` broadcast to each agent's spoken messages.

    Invariants: per agent ``sum_g A_{g,i} = 0`` (not with ``baseline_samples > 0``:
    ``sum_g A_{g,i} = G (mean_g c_{g,i} - p^_i) / sigma``); under ``additive`` an agent's advantages depend only
    on its own scores up to the shared scale, and equal masking ``shapley``'s on ``split`` (both are
    ``c / K``); under ``relay`` the answerer's advantages are 0. Edge cases: a singleton group, or
    every agent's value constant over the group, gives zeros; an episode that breaks the form's
    reward rule is a DataError.
    """
    agents = same_team(batch)
    values = oracle_values(batch, options)
    if options.baseline_samples > 0:
        c = _scores(batch, agents)  # [G, n]
        p_hat = pooled_baseline(c, solo_replay_scores(batch, agents, options.baseline_samples))  # [n]
        adv = baseline_advantages(c, p_hat, options.ddof, options.mode, options.eps)
    else:
        adv = group_credit_advantage(values, options.ddof, options.mode, options.eps)
    if not options.push_down:
        adv = np.maximum(adv, 0.0)
    return [broadcast(ep, dict(zip(agents, a.tolist(), strict=True)))
            for ep, a in zip(batch.episodes, adv, strict=True)]
