"""``shapley``: per-agent Shapley credit, group-centred per agent (docs/credit/specification.md).

Also the Shapley machinery ``shapley_prm`` builds on: the characteristic function of an options
choice (``value``: vote, masking, replay or judge) and :func:`agent_shapley`, the [G, n] table of
agent values. Resources a ``value`` needs (fields of the typed ``batch.resources``, declared at
registration):

* ``transcript_scorer``: a :data:`~teamplay.credit.values.characteristic.TranscriptScorer` (e.g. an
  :class:`~teamplay.credit.values.characteristic.LLMJudge`), for ``value: masking``;
* ``replay``: a :class:`~teamplay.credit.values.replay_query.ReplayEngine` (batched, what the trainer gives), or
  ``replay(episode, kept_agents: frozenset[str]) -> list[float]``, for ``value: replay``;
* ``judge``: a :class:`~teamplay.credit.values.generative_judge.GenerativeJudge` (greedy completions of a
  batch of prompts), for ``value: judge``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from teamplay.credit.methods.assumptions import MASKING, REPLAY
from teamplay.credit.methods.group_baseline import GroupOptions, broadcast, same_team
from teamplay.credit.registry import CardText, CreditBatch, register_credit
from teamplay.credit.values.characteristic import (
    CharacteristicFunction,
    MaskingCharacteristic,
    ReplayCharacteristic,
    VoteCharacteristic,
    last_answer_scorer,
)
from teamplay.credit.values.generative_judge import (
    GenerativeJudge,
    GenerativeJudgeCharacteristic,
    check_judge_template,
)
from teamplay.credit.values.group import group_credit_advantage
from teamplay.credit.values.replay_query import ReplayEngine, ReplayQuery
from teamplay.credit.values.shapley import shapley_exact, shapley_permutation
from teamplay.records import Episode


class ShapleyOptions(GroupOptions):
    """Options of the ``shapley`` method."""

    value: Literal["vote", "masking", "replay", "judge"] = Field(
        "vote", description="Characteristic function: 'vote' (plurality of the coalition's answers, "
                            "exact), 'masking' (withhold other agents' messages, score with "
                            "the transcript_scorer resource), 'replay' (the replay resource), 'judge' "
                            "(withhold other agents' messages; the judge resource writes an answer, the "
                            "task scores it: Parallel Shapley's generative reward model).")
    removal: Literal["skip", "null_message", "base_policy"] = Field(
        "skip", description="value=replay: what a removed agent's turns become: 'skip' (they do not "
                            "happen; the protocol proceeds as if it had not spoken), 'null_message' (a "
                            "fixed neutral text) or 'base_policy' (the base model, adapters off).")
    samples: int = Field(1, ge=1, le=64, description="value=replay: samples k per coalition (common "
                                                     "random numbers: sample j uses one seed for all).")
    budget: float | None = Field(
        None, gt=0, description="value=replay: cap on the extra generated tokens of a training step, as "
                                "a multiple of its rollout tokens; above it fewer samples are used "
                                "(logged). None: no cap.")
    exact_max_agents: int = Field(8, ge=1, le=16,
                                  description="Exact Shapley (2^n coalitions) up to this many agents.")
    permutations: int = Field(64, ge=1, description="Monte Carlo permutations above exact_max_agents.")
    antithetic: bool = Field(False, description="Also use each sampled permutation reversed.")
    seed: int = Field(0, description="Seed of the Monte Carlo permutations (one generator per call).")
    judge_template: str | None = Field(
        None, description="value=judge: the judge's prompt, with the fields {question} and {transcript} "
                          "(literal braces doubled); None: DEFAULT_GENERATIVE_JUDGE_TEMPLATE (asks for "
                          "the final answer as \\boxed{...}).")
    judge_max_new_tokens: int = Field(256, ge=1, le=8192,
                                      description="value=judge: the most tokens the judge writes per coalition.")
    judge_empty: Literal["zero", "question_only"] = Field(
        "zero", description="value=judge: v(empty): 'zero' (no paths, no answer) or 'question_only' (the "
                            "judge answers with every message withheld; the agents then share only what "
                            "they add to the judge's own answer).")

    @field_validator("judge_template")
    @classmethod
    def _judge_template_formats(cls, value: str | None) -> str | None:
        return value if value is None else check_judge_template(value)


def score_answer(batch: CreditBatch) -> Callable[[str | None], float]:
    """``answer -> verifier score`` of the batch's item (None scores 0); a ValueError without a verifier."""
    if batch.score is None or batch.item is None:
        raise ValueError("this credit method re-scores answers: the CreditBatch needs score and item")
    score, item = batch.score, batch.item
    return lambda answer: 0.0 if answer is None else float(score(answer, item))


def value_needs(options: ShapleyOptions) -> frozenset[str]:
    """Resources of a characteristic function choice (``value``)."""
    return frozenset({"masking": {"transcript_scorer"}, "replay": {"replay"}, "judge": {"judge"}}
                     .get(options.value, set()))


def _characteristic(batch: CreditBatch, ep: Episode, value: str,
                    options: ShapleyOptions) -> CharacteristicFunction:
    question = batch.item.prompt if batch.item is not None else ""
    if value == "vote":
        return VoteCharacteristic(ep, score_answer(batch))
    if value == "masking":
        return MaskingCharacteristic(ep, batch.resources.need("transcript_scorer", "option value=masking"), question)
    if value == "judge":
        return judge_characteristic(batch, ep, batch.resources.need("judge", "option value=judge"), options)
    return replay_characteristic(batch, ep, batch.resources.need("replay", "option value=replay"), options)


def judge_characteristic(batch: CreditBatch, ep: Episode, judge: GenerativeJudge, options: ShapleyOptions
                         ) -> GenerativeJudgeCharacteristic:
    """``v(S)`` by a generative judge: the task's extractor reads the answer the judge writes after the
    question and S's messages (the others withheld), the task's verifier scores it (0 when the reply
    holds no answer); every uncached coalition of an episode in one judge call."""
    if batch.extract is None:
        raise ValueError("value=judge reads the judge's answer with the task's extractor: the CreditBatch "
                         "needs extract")
    question = batch.item.prompt if batch.item is not None else ""
    return GenerativeJudgeCharacteristic(
        ep, judge, batch.extract, score_answer(batch), question, template=options.judge_template,
        max_new_tokens=options.judge_max_new_tokens, item=batch.item,
        empty_value=0.0 if options.judge_empty == "zero" else None)


def replay_characteristic(batch: CreditBatch, ep: Episode, replay, options: ShapleyOptions
                          ) -> ReplayCharacteristic:
    """``v(S)`` by re-execution: a :class:`ReplayEngine` (batched: every coalition of a ``values``
    call in one ``scores`` call, k = ``options.samples``, removal ``options.removal``), or a plain
    callable ``replay(episode, kept) -> scores`` (one coalition per call)."""
    if not isinstance(replay, ReplayEngine):
        return ReplayCharacteristic(ep, replay)
    if batch.item is None:
        raise ValueError("value=replay re-runs the problem: the CreditBatch needs its item")
    item = batch.item

    def many(episode: Episode, kept: list[frozenset[str]]) -> list[np.ndarray]:
        queries = [ReplayQuery(episode, item, k, removal=options.removal) for k in kept]
        return replay.scores(queries, options.samples, options.budget)

    return ReplayCharacteristic(ep, replay_many=many)


def agent_shapley(batch: CreditBatch, options: ShapleyOptions) -> np.ndarray:
    """Shapley value of every agent in every episode, [G, n] (agents in ``episodes[0].agents`` order).

    Exact when ``n <= exact_max_agents`` (all coalitions in one batched ``values`` call), else
    permutation Monte Carlo with all coalitions of the M permutations in one batched call.
    """
    agents = same_team(batch)
    n = len(agents)
    rng = np.random.default_rng(options.seed)
    phi = np.empty((len(batch.episodes), n))
    for g, ep in enumerate(batch.episodes):
        cf = _characteristic(batch, ep, options.value, options)
        if n <= options.exact_max_agents:
            phi[g] = shapley_exact(n, cf.table())
        else:
            phi[g] = shapley_permutation(n, None, options.permutations, rng, antithetic=options.antithetic,
                                         batch_eval=cf.values)
    return phi


SHAPLEY_CARD = CardText(
    "phi_{g,i}: the Shapley value of agent i in the characteristic game v_g(S) of episode g, "
    "centred per agent across the group (A = n (phi - mean_g phi) / sigma) and broadcast to the "
    "agent's spoken messages. v is vote (verifier score of the plurality answer of S, v(empty) = "
    "0), masking (transcript scorer on the transcript with other agents' messages withheld), "
    "replay (mean verifier score of k re-executions with only S playing) or judge (verifier score "
    "of the answer a generative judge writes after reading S's messages, v(empty) = 0 or the "
    "judge's question-only answer).",
    ("efficiency splits v(N) - v(empty) among the agents: a fair split of their interaction, an "
     "interventional effect only when v is additive",
     "vote assumes the team's answer is a plurality of answers the agents gave independently",
     MASKING,
     REPLAY,
     "judge: the judge's answer is a fair aggregate of the paths it reads; a bare copy of another "
     "path's answer is worth what the judge makes of it (an identical copy shares its original's "
     "credit: Shapley's symmetry)",
     "all of an agent's messages share its value (uniform within the agent)"),
    ("tests/credit/test_methods.py::test_shapley_efficiency_exact_and_mc",
     "tests/credit/test_methods.py::test_shapley_masking_and_replay_values",
     "tests/training/test_replay_credit.py::test_replay_shapley_gives_the_table_through_the_trainer_step",
     "tests/training/test_replay_credit.py::test_masking_cannot_see_the_review_but_replay_can",
     "tests/credit/test_generative_judge.py::test_free_riders_get_no_credit_from_an_evidence_judge"),
    "vote: verifier calls only; masking: one scorer call per coalition (batched); replay: one "
    "re-execution per coalition and sample after the shared prefix (at most budget x the step's "
    "rollout tokens when budget is set); judge: one greedy judge reply per coalition (one batched "
    "call per episode, judge_max_new_tokens each); Monte Carlo permutations above exact_max_agents",
    fails_where=("masking cannot see influence through a later turn: r -0.00 [-0.02, 0.01] with A* for a "
                 "helpful reviewer, whose review changes the proposer's next answer (section 12)",
                 "on split (additive) masking is exact: phi_i = c_i / K (tests/credit/test_oracle.py)"))


@register_credit("shapley", ShapleyOptions, "per-agent Shapley credit, group-centred per agent",
                 requires=value_needs, cost="2^n coalition values per episode (vote: no generation)",
                 card=SHAPLEY_CARD)
def shapley_credit(batch: CreditBatch, options: ShapleyOptions) -> list[np.ndarray]:
    """Agent Shapley values -> ``group_credit_advantage`` -> every spoken message of the agent.

    Per episode, ``phi_{g,i}`` is agent i's Shapley value for the characteristic function
    ``options.value`` (efficiency: ``sum_i phi_{g,i} = v_g(N) - v_g(empty)``). Across the group,
    ``A_{g,i} = n (phi_{g,i} - mean_g phi_{g,i}) / sigma`` (see ``group_credit_advantage``).

    Invariants: for each agent, ``sum_g A_{g,i} = 0`` (zero-sum group advantages); a null player
    (e.g. an agent with no answer under ``vote``) gets 0 in every episode; with ``mode="mean_only"``
    an agent's advantages depend only on its own Shapley values (locality).
    """
    agents = same_team(batch)
    adv = group_credit_advantage(agent_shapley(batch, options), options.ddof, options.mode, options.eps)
    return [broadcast(ep, dict(zip(agents, a.tolist(), strict=True)))
            for ep, a in zip(batch.episodes, adv, strict=True)]


__all__ = ["ShapleyOptions", "agent_shapley", "judge_characteristic", "last_answer_scorer", "replay_characteristic",
           "score_answer", "shapley_credit", "value_needs"]
