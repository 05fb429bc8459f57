"""Registered credit methods built on group baselines, Shapley values, PRM refinement and coverage.

Importing this module registers: ``grpo``, ``gspo``, ``shapley``, ``shapley_prm``, ``shape_max``,
``coverage``. Each is ``method(batch: CreditBatch, options) -> list[np.ndarray]`` with one float64
array of shape [T_g] per episode, one advantage per message. Skipped messages (``spoke=False``)
always get 0: they produced no tokens to train. Each docstring states the method's invariant; the
tests in tests/credit/test_methods*.py check them.

Resources a method may need (fields of the typed ``batch.resources``, declared at registration):

* ``transcript_scorer``: a :data:`~teamplay.credit.values.characteristic.TranscriptScorer` (e.g. an
  :class:`~teamplay.credit.values.characteristic.LLMJudge`), for ``value: masking`` and
  ``message_score: masking``;
* ``replay``: a :class:`~teamplay.credit.values.replay_query.ReplayEngine` (batched, what the trainer gives), or
  ``replay(episode, kept_agents: frozenset[str]) -> list[float]``, for ``value: replay``;
* ``judge``: a :class:`~teamplay.credit.values.generative_judge.GenerativeJudge` (greedy completions of a
  batch of prompts), for ``value: judge``;
* ``embedder``: an :class:`~teamplay.credit.values.coverage.Embedder` for ``coverage`` (default: the
  packaged MiniLM model, loaded once per process).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from teamplay.credit.methods.assumptions import BROADCAST, GROUP_BASELINE, MASKING, REPLAY
from teamplay.credit.registry import CardText, CreditBatch, register_credit
from teamplay.credit.values.characteristic import (
    CharacteristicFunction,
    MaskingCharacteristic,
    ReplayCharacteristic,
    VoteCharacteristic,
    last_answer_scorer,
)
from teamplay.credit.values.coverage import Embedder, TransformerEmbedder, coverage_advantages, coverage_shapley
from teamplay.credit.values.generative_judge import (
    GenerativeJudge,
    GenerativeJudgeCharacteristic,
    check_judge_template,
)
from teamplay.credit.values.group import batch_std, group_advantage, group_credit_advantage
from teamplay.credit.values.prm import leave_one_message_out_scores, refine_to_messages, verifier_message_scores
from teamplay.credit.values.replay_query import ReplayEngine, ReplayQuery
from teamplay.credit.values.shapley import shape_grpo_advantages, shapley_exact, shapley_permutation
from teamplay.records import Episode


class GroupOptions(BaseModel):
    """Options of the group baseline shared by every method here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ddof: Literal[0, 1] = Field(0, description="Std of the group: 0 population (TRACER), 1 unbiased.")
    mode: Literal["std", "mean_only"] = Field(
        "std", description="'std' divides by the group std; 'mean_only' only subtracts the mean.")
    eps: float = Field(1e-8, gt=0, description="Floor of the std.")


class GRPOOptions(GroupOptions):
    """Options of ``grpo`` and ``gspo``: the group baseline plus TRL's and verl's scaling choices.

    Defaults keep teamplay's convention (population std, std floored at eps, per-group scale);
    ``ddof=1, eps_rule="add", eps=1e-4`` is TRL's GRPO and ``eps=1e-6`` verl's.
    """

    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Divide by the group's std ('group'), by the std of every reward of the "
                             "step ('batch', TRL), or not at all ('none', Dr. GRPO).")
    eps_rule: Literal["floor", "add"] = Field(
        "floor", description="'floor': divide by max(std, eps) (scale-invariant); 'add': by std + eps "
                             "(TRL, verl: nearly equal rewards give nearly zero advantages).")

    @model_validator(mode="after")
    def _one_way_to_skip_scaling(self) -> GRPOOptions:
        if self.mode == "mean_only" and self.scale_rewards != "group":
            raise ValueError("mode 'mean_only' already skips the std; use scale_rewards: none alone")
        return self


class ShapleyOptions(GroupOptions):
    """Options of the ``shapley`` method."""

    value: Literal["vote", "masking", "replay", "judge"] = Field(
        "vote", description="Characteristic function: 'vote' (majority of the coalition's answers, "
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


class ShapleyPRMOptions(ShapleyOptions):
    """Options of the ``shapley_prm`` method."""

    message_score: Literal["verifier", "masking"] = Field(
        "verifier", description="Local message score q_t: 'verifier' (2*score(answer)-1, 0 without "
                                "answer) or 'masking' (leave-one-message-out with "
                                "the transcript_scorer resource).")
    refine_mode: Literal["signed", "proportional"] = Field("signed", description="See refine_to_messages.")
    beta0: float = Field(1.0, ge=0, description="Largest spread coefficient of the refinement.")
    bound: float | None = Field(
        None, gt=0, description="Bound B on |message advantage|; None = 1 + the largest |agent "
                                "advantage| of the group, i.e. refinement moves a message by <= 1.")
    temperature: float = Field(1.0, gt=0, description="Softmax temperature of refine_mode='proportional'.")


class ShapeMaxOptions(BaseModel):
    """Options of the ``shape_max`` method (ShapE-GRPO)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: float = Field(0.0, description="v(empty) of the max game; every agent score must be >= base.")
    ddof: Literal[0, 1] = Field(0, description="Std of the set rewards for non-candidate messages.")
    eps: float = Field(1e-8, gt=0, description="Added to the stds (spec: std + eps).")
    length_normalise: bool = Field(
        False, description="Scale a candidate's message advantages by mean length / its token count.")


class CoverageOptions(BaseModel):
    """Options of the ``coverage`` method (GCPO)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    alpha: float = Field(1.0, gt=0, description="Kernel scale in log det(I + alpha L_S).")
    exact_max: int = Field(12, ge=1, le=16, description="Exact Shapley up to this group size.")
    permutations: int = Field(256, ge=1, description="Monte Carlo permutations above exact_max.")
    seed: int = Field(0, description="Seed of the Monte Carlo permutations.")
    ddof: Literal[0, 1] = Field(0, description="Std used to normalise the Shapley credit.")
    eps: float = Field(1e-8, gt=0, description="Floor of that std.")
    text: Literal["transcript", "final_message"] = Field(
        "transcript", description="What is embedded: all spoken messages joined, or the last one.")
    embedding_model: str | None = Field(
        None, description="Model folder or hub id of the embedder; None = packaged MiniLM default. "
                          "Ignored when the embedder resource is given.")


# --------------------------------------------------------------------------------------- helpers

#: built-in protocols in which every agent gives an answer (shape_max treats agents as candidates,
#: so a reviewer that never answers would count as a failed candidate)
ANSWERING_PROTOCOLS = ("single", "vote", "debate", "sequential")

def _broadcast(ep: Episode, per_agent: Mapping[str, float]) -> np.ndarray:
    """[T]: each spoken message gets its author's value, skipped messages 0."""
    return np.array([per_agent[m.agent] if m.spoke else 0.0 for m in ep.messages], dtype=np.float64)


def _score_answer(batch: CreditBatch) -> Callable[[str | None], float]:
    if batch.score is None or batch.item is None:
        raise ValueError("this credit method re-scores answers: the CreditBatch needs score and item")
    score, item = batch.score, batch.item
    return lambda answer: 0.0 if answer is None else float(score(answer, item))


def _value_needs(options: ShapleyOptions) -> frozenset[str]:
    """Resources of a characteristic function choice (``value``)."""
    return frozenset({"masking": {"transcript_scorer"}, "replay": {"replay"}, "judge": {"judge"}}
                     .get(options.value, set()))


def _prm_needs(options: ShapleyPRMOptions) -> frozenset[str]:
    return _value_needs(options) | ({"transcript_scorer"} if options.message_score == "masking" else set())


def _same_team(batch: CreditBatch) -> tuple[str, ...]:
    agents = batch.episodes[0].agents
    for g, ep in enumerate(batch.episodes):
        if ep.agents != agents:
            raise ValueError(f"credit: episode {g} has agents {ep.agents}, episode 0 has {agents}; "
                             "a group must be played by one team")
    return agents


def _characteristic(batch: CreditBatch, ep: Episode, value: str,
                    options: ShapleyOptions) -> CharacteristicFunction:
    question = batch.item.prompt if batch.item is not None else ""
    if value == "vote":
        return VoteCharacteristic(ep, _score_answer(batch))
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
        ep, judge, batch.extract, _score_answer(batch), question, template=options.judge_template,
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
    agents = _same_team(batch)
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


# --------------------------------------------------------------------------------------- methods

def _scale_needs(options: GRPOOptions) -> frozenset[str]:
    return frozenset({"batch_rewards"}) if options.scale_rewards == "batch" else frozenset()


GRPO_CARD = CardText(
    "A_g = (R_g - mean R) / std R over the G episodes of one problem (the group-normalised team "
    "reward), broadcast to every spoken message of episode g; skipped turns get 0.",
    (GROUP_BASELINE, BROADCAST),
    ("tests/credit/test_methods.py::test_grpo_broadcast_skip_and_zero_sum",
     "tests/credit/test_loss_references.py::test_grpo_modes_match_trl_and_verl"),
    "no generation, no model pass: arithmetic on the G rewards",
    fails_where=("broadcast is unbiased for A* up to a term of the history alone (a per-problem baseline "
                 "changes no expected gradient): what it lacks is variance, each agent's advantage carrying "
                 "every other agent's noise (about K times its own in an additive team of K)",
                 "measured: Pearson r with the solver's A* 0.42 [0.14, 0.71] at teammate noise q = 0.5 against "
                 "0.77 at q = 0 (BENCHMARKS.md section 12)"))


@register_credit("grpo", GRPOOptions, "group-normalised team reward on every message (GRPO)",
                 requires=_scale_needs, card=GRPO_CARD)
def grpo_credit(batch: CreditBatch, options: GRPOOptions) -> list[np.ndarray]:
    """``A_g = group_advantage(rewards)[g]`` on every spoken message of episode g.

    ``scale_rewards="batch"`` divides by the std of every reward of the step, which the trainer
    passes as ``batch.resources.batch_rewards``; ``"none"`` only subtracts the group mean.

    Invariant: the episode advantages sum to 0 over the group; all spoken messages of an episode
    share one value; the advantage of an episode depends on the rewards only (never on messages).
    """
    rewards = [ep.reward for ep in batch.episodes]
    mode = "mean_only" if options.scale_rewards == "none" else options.mode
    std = None
    if options.scale_rewards == "batch":
        std = batch_std(batch.resources.need("batch_rewards", "option scale_rewards=batch"), options.ddof)
    adv = group_advantage(rewards, options.ddof, mode, options.eps, options.eps_rule, std)
    return [_broadcast(ep, dict.fromkeys(ep.agents, float(a)))
            for ep, a in zip(batch.episodes, adv, strict=True)]


GSPO_CARD = CardText(
    "The same advantages as grpo (group-normalised team reward broadcast to every message); GSPO "
    "differs in the objective (one length-normalised ratio per message), chosen on its own with "
    "objective.name: gspo.",
    (GROUP_BASELINE, BROADCAST),
    ("tests/credit/test_methods.py::test_grpo_broadcast_skip_and_zero_sum",
     "tests/credit/test_loss_references.py::test_gspo_matches_trl_sequence_levels_and_verl"),
    "no generation, no model pass")


@register_credit("gspo", GRPOOptions, "GRPO advantages, for the sequence-level GSPO objective",
                 requires=_scale_needs, card=GSPO_CARD)
def gspo_credit(batch: CreditBatch, options: GRPOOptions) -> list[np.ndarray]:
    """Same advantages as ``grpo`` (same options, same invariant).

    GSPO differs from GRPO in the objective, not the advantage. The objective is chosen on its own
    (``objective.name: gspo`` selects ``teamplay.training.learn.losses.gspo_loss``, one ratio ``s_i`` per
    message); the trainer does not couple the two, so ``credit.method: gspo`` with
    ``objective.name: grpo`` trains exactly like ``grpo``. The name only lets a config say which
    objective its advantages are meant for.
    """
    return grpo_credit(batch, options)


SHAPLEY_CARD = CardText(
    "phi_{g,i}: the Shapley value of agent i in the characteristic game v_g(S) of episode g, "
    "centred per agent across the group (A = n (phi - mean_g phi) / sigma) and broadcast to the "
    "agent's spoken messages. v is vote (verifier score of the majority answer of S, v(empty) = "
    "0), masking (transcript scorer on the transcript with other agents' messages withheld), "
    "replay (mean verifier score of k re-executions with only S playing) or judge (verifier score "
    "of the answer a generative judge writes after reading S's messages, v(empty) = 0 or the "
    "judge's question-only answer).",
    ("efficiency splits v(N) - v(empty) among the agents: a fair split of their interaction, an "
     "interventional effect only when v is additive",
     "vote assumes the team's answer is a majority of answers the agents gave independently",
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
                 requires=_value_needs, cost="2^n coalition values per episode (vote: no generation)",
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
    agents = _same_team(batch)
    adv = group_credit_advantage(agent_shapley(batch, options), options.ddof, options.mode, options.eps)
    return [_broadcast(ep, dict(zip(agents, a.tolist(), strict=True)))
            for ep, a in zip(batch.episodes, adv, strict=True)]


SHAPLEY_PRM_CARD = CardText(
    "shapley's agent advantage A_{g,i}, spread over agent i's messages by a local score q_t: a_t = "
    "A_{g,i} + beta_i (q_t - mean q), conserving n_i A_{g,i} per agent and bounded by B; q is "
    "the verifier on the message's answer (2 score - 1, 0 without one) or leave-one-message-out "
    "masking.",
    ("those of shapley for each agent's total",
     "within an agent, q_t ranks its messages' contributions: a message with a right answer (or "
     "whose removal lowers the masked score) did more; the masking score sees no influence "
     "through later turns",
     "beta0 and the bound are chosen constants ([INFERRED]), not identified"),
    ("tests/credit/test_methods.py::test_shapley_prm_conservation_and_agreement",
     "tests/credit/test_methods.py::test_shapley_prm_locality"),
    "message_score=verifier re-scores answers only; masking costs one scorer call per message")


@register_credit("shapley_prm", ShapleyPRMOptions, "Shapley agent credit refined per message by a scorer",
                 requires=_prm_needs, cost="shapley's, plus one score per message", card=SHAPLEY_PRM_CARD)
def shapley_prm_credit(batch: CreditBatch, options: ShapleyPRMOptions) -> list[np.ndarray]:
    """``shapley`` agent advantages, spread over the agent's messages by local scores
    (docs/credit/specification.md#prm-success).

    Agent i of episode g has advantage ``A_{g,i}`` (as in ``shapley``) and spoken messages ``M_i``
    (``n_i`` of them). ``refine_to_messages`` with ``phi = n_i A_{g,i}``, the local message scores
    ``q`` (``options.message_score``) and bound ``B`` gives message advantages
    ``a_t = A_{g,i} + beta_i (q_t - qbar_i)``.

    Invariants: conservation ``sum_{t in M_i} a_t = n_i A_{g,i}`` (the total ``shapley`` gives
    those messages; with equal q the two methods agree exactly); ``|a_t| <= B``; locality: the
    scores of other agents' messages never change this agent's message advantages. An agent with
    no spoken message and non-zero advantage raises ValueError (its credit would be lost).
    """
    agents = _same_team(batch)
    adv = group_credit_advantage(agent_shapley(batch, options), options.ddof, options.mode, options.eps)
    bound = options.bound if options.bound is not None else 1.0 + float(np.abs(adv).max())
    question = batch.item.prompt if batch.item is not None else ""
    out = []
    for ep, a in zip(batch.episodes, adv, strict=True):
        spoken = [t for t, m in enumerate(ep.messages) if m.spoke]
        msgs = [ep.messages[t] for t in spoken]
        if options.message_score == "verifier":
            q = verifier_message_scores(msgs, _score_answer(batch))
        else:
            scorer = batch.resources.need("transcript_scorer", "option message_score=masking")
            q = leave_one_message_out_scores(ep.messages, scorer, question)[spoken]
        index = {x: j for j, x in enumerate(agents)}
        authors = [index[m.agent] for m in msgs]
        counts = np.bincount(authors, minlength=len(agents)) if authors else np.zeros(len(agents), int)
        r = refine_to_messages(counts * a, authors, q, B=bound, beta0=options.beta0,
                               mode=options.refine_mode, temperature=options.temperature)
        full = np.zeros(len(ep.messages))
        full[spoken] = r
        out.append(full)
    return out


SHAPE_MAX_CARD = CardText(
    "ShapE-GRPO: the Shapley value of each answering agent in the max game v(S) = max_{i in S} "
    "u_i (u_i its scored answer, v(empty) = base); candidate messages get (K phi - mean R) / "
    "(pooled std(K phi) + eps) with R = max u, others (an aggregator) the set-level GRPO value.",
    ("the team is worth its best answer (a reader picks the best candidate): agents are "
     "candidates that each give an answer, and how one agent's text changed another's answer is "
     "not modelled",
     "the no-extra-bias argument assumes candidates of equal length (option length_normalise)"),
    ("tests/credit/test_methods.py::test_shape_max_spec_example_with_aggregator",),
    "closed form in O(K log K), no generation")


@register_credit("shape_max", ShapeMaxOptions, "ShapE-GRPO: Shapley credit of the best-answer (max) game",
                 protocols=ANSWERING_PROTOCOLS, card=SHAPE_MAX_CARD)
def shape_max_credit(batch: CreditBatch, options: ShapeMaxOptions) -> list[np.ndarray]:
    """ShapE-GRPO over agents as candidates (docs/credit/specification.md#shapley-max).

    Candidates of episode g are the agents listed in ``agent_correct`` (utility = that score); the
    set utility is the best candidate's, ``R_g = max_i u_{g,i}``. Messages of candidate i get
    ``(K_g phi_{g,i} - mean R) / (std_pool(K phi) + eps)`` (per-token factor ``Lbar / L_i`` with
    ``length_normalise``, ``L_i`` = the agent's completion tokens); messages of other agents (e.g. an
    aggregator) get the set-level ``(R_g - mean R) / (std R + eps)``.

    Invariants: per episode ``sum_i phi_{g,i} = R_g - base`` (efficiency); with ``base = 0`` and no
    length normalisation the candidate advantages sum to 0 over the group, and so do the set-level ones.
    """
    utilities, lengths, cands = [], [], []
    for g, ep in enumerate(batch.episodes):
        names = [a for a in ep.agents if a in ep.agent_correct]
        if not names:
            raise ValueError(f"shape_max: episode {g} has no agent_correct entries; candidates are the "
                             "agents whose answers were scored")
        cands.append(names)
        utilities.append([float(ep.agent_correct[a]) for a in names])
        lengths.append([sum(m.n_tokens for m in ep.messages if m.agent == a and m.spoke) for a in names])
    res = shape_grpo_advantages(utilities, base=options.base, eps=options.eps, ddof=options.ddof,
                                length_normalise=options.length_normalise,
                                lengths=lengths if options.length_normalise else None)
    out = []
    for ep, names, cand, expl in zip(batch.episodes, cands, res.candidate, res.explanation, strict=True):
        per_agent = dict.fromkeys(ep.agents, float(expl))
        per_agent.update(zip(names, cand.tolist(), strict=True))
        out.append(_broadcast(ep, per_agent))
    return out


@lru_cache(maxsize=4)
def _load_embedder(model: str | None) -> TransformerEmbedder:
    return TransformerEmbedder(model)


COVERAGE_CARD = CardText(
    "GCPO: the Shapley share phi_g of each episode of the group (the players are the G episodes, "
    "not agents) in v(S) = log det(I + alpha L_S), L = X X^T, x_g = R_g e_g (reward-weighted unit "
    "embeddings); A_g = (phi_g - mean phi) / std phi on every message of episode g.",
    ("the embedding's similarity stands for 'the same solution': correct and semantically "
     "distinct episodes earn more, a wrong episode is a null player (kernel and alpha are "
     "[INFERRED])",
     BROADCAST),
    ("tests/credit/test_coverage.py::test_duplicate_shares_credit_and_wrong_is_null",
     "tests/credit/test_methods.py::test_coverage_e44"),
    "no generation; the embedding model (packaged MiniLM by default) loads once per process")


@register_credit("coverage", CoverageOptions, "GCPO: Shapley share of the group's valid-solution volume",
                 cost="one embedding per episode", card=COVERAGE_CARD)
def coverage_credit(batch: CreditBatch, options: CoverageOptions) -> list[np.ndarray]:
    """GCPO over the G episodes of the group: each episode is a player of the coverage game
    (docs/credit/specification.md#coverage).

    ``phi = coverage_shapley(embed(texts), rewards, alpha)``; ``A_g = (phi_g - mean phi) / std phi``
    on every spoken message of episode g.

    Invariants: ``sum_g phi_g = v(all)`` (efficiency); an episode with reward 0 has ``phi = 0`` (null
    player); episode advantages sum to 0 over the group.
    """
    if batch.resources.embedder is not None:
        embedder: Embedder = batch.resources.embedder
    else:
        embedder = _load_embedder(options.embedding_model)
    texts = []
    for ep in batch.episodes:
        spoken = [m.text for m in ep.messages if m.spoke]
        texts.append("\n\n".join(spoken) if options.text == "transcript" else (spoken[-1] if spoken else ""))
    E = np.asarray(embedder.embed(texts), dtype=np.float64)
    rewards = [ep.reward for ep in batch.episodes]
    phi = coverage_shapley(E, rewards, options.alpha, options.exact_max, options.permutations,
                           np.random.default_rng(options.seed))
    adv = coverage_advantages(phi, options.ddof, options.eps)
    return [_broadcast(ep, dict.fromkeys(ep.agents, float(a)))
            for ep, a in zip(batch.episodes, adv, strict=True)]


__all__ = [
    "CoverageOptions", "GRPOOptions", "GroupOptions", "ShapeMaxOptions", "ShapleyOptions", "ShapleyPRMOptions",
    "agent_shapley", "last_answer_scorer",
]
