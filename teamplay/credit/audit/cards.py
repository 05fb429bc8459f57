"""Identification cards of the credit methods: what each one estimates, when, at what cost, and
which test would catch it lying (``teamplay credit --card METHOD``).

A card answers four questions about a registered method (the "CA-ID card" the survey of credit
assignment in agentic RL proposes):

1. **estimand**: the quantity its advantage estimates;
2. **assumptions**: what must hold for that quantity to be the causal contrast a reader takes it
   for (or, for methods that are heuristics, that it is one);
3. **cost**: what it spends beyond the rollout (generated tokens, extra passes);
4. **falsified by**: the tests in this repository (``path::function``) that fail when the method
   does not compute its estimand; ``tests/credit/test_cards.py`` checks that every one exists.

The texts below are written from each method's module and ``docs/credit/specification.md``. For a message-level
method the cost is what it declares in the registry (``CreditMethod.cost``) followed by a note
here; token methods declare no cost, so the note is all of it. A method registered without a card
(a user's own) gets one built from its registry entry that says no estimand was declared.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from teamplay.credit.registry import CREDIT, CreditMethod, credit_methods
from teamplay.credit.token.base import TOKEN_CREDIT, TokenMethod, token_methods
from teamplay.errors import ConfigError
from teamplay.registry import is_plugin_spec

#: width of a rendered card (plain text, no terminal markup)
WIDTH = 100
_LABEL = 16  # column where a field's text starts


@dataclass(frozen=True)
class CreditCard:
    """One method's identification card.

    Fields:
        name: the method's name (or ``file.py:name`` for a user's file).
        level: ``"message"`` (``credit.method``) or ``"token"`` (``credit.token.method``).
        summary: the registry's one line.
        estimand: the quantity the advantage estimates.
        assumptions: what must hold for it to identify the causal contrast, one sentence each.
        cost: extra generated tokens and passes beyond the rollout.
        falsified_by: tests as ``path::function`` (paths relative to the repository root); empty
            for a method without a card.
        protocols: the protocols it works with (None: any).
        declared: False for a card built from a registry entry alone (no estimand declared).
        fails_where: what is wrong with it today and the measured cases where an assumption fails
            (BENCHMARKS.md section 12 is the fidelity table; section 11 the arena).
    """

    name: str
    level: str
    summary: str
    estimand: str
    assumptions: tuple[str, ...]
    cost: str
    falsified_by: tuple[str, ...]
    protocols: tuple[str, ...] | None = None
    declared: bool = True
    fails_where: tuple[str, ...] = ()

    def render(self) -> str:
        """The card as plain text, wrapped at :data:`WIDTH` columns."""
        field = "credit.method" if self.level == "message" else "credit.token.method"
        lines = [textwrap.fill(f"{self.name}  ({self.level}-level, {field}): {self.summary}", WIDTH,
                               subsequent_indent="    ", break_on_hyphens=False)]
        lines += _wrapped("estimand", [self.estimand])
        lines += _wrapped("assumptions", [f"- {a}" for a in self.assumptions] or ["none declared"])
        lines += _wrapped("cost", [self.cost])
        lines += _wrapped("protocols", [", ".join(self.protocols) if self.protocols else "any"])
        lines += _wrapped("falsified by", list(self.falsified_by) or ["no test named"])
        if self.fails_where:
            lines += _wrapped("fails where", [f"- {f}" for f in self.fails_where])
        return "\n".join(lines)


def _wrapped(label: str, paragraphs: list[str]) -> list[str]:
    """``label`` in the first column, each paragraph wrapped in the second (bullets hang)."""
    out = []
    for k, text in enumerate(paragraphs):
        first = f"  {label}".ljust(_LABEL) if k == 0 else " " * _LABEL
        hang = " " * (_LABEL + (2 if text.startswith("- ") else 0))
        out.append(textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=hang,
                                 break_on_hyphens=False, break_long_words=False))
    return out


@dataclass(frozen=True)
class _Text:
    """What a card says beyond the registry: ``cost`` is a note after ``CreditMethod.cost`` for a
    message method, the whole cost for a token method (they declare none)."""

    estimand: str
    assumptions: tuple[str, ...]
    falsified_by: tuple[str, ...]
    cost: str = ""
    fails_where: tuple[str, ...] = ()


_BROADCAST = ("every spoken message of an episode gets the same value: a message's own contribution is "
              "identified only if every agent and message contributed equally (broadcast)")
_MASKING = ("masking regenerates nothing: later messages stay as they were written, so influence through "
            "later turns is invisible (withholding a review leaves the revision it caused in place)")
_REPLAY = ("replay needs restorable state (the protocol re-runs from a recorded transcript prefix) and a "
           "fixed policy for the other agents (the current adapters, the same seed per sample index); "
           "the value depends on the removal rule (skip, null_message, base_policy)")
_GROUP_BASELINE = ("the G episodes are independent draws of the same team policy on the same problem, so the "
                   "group mean is a baseline for that problem")
_TOKEN_SPLIT = ("the message advantage comes from the message-level method; this method only decides which "
                "tokens carry it")

_TESTS_METHODS = "tests/credit/test_methods.py"
_TESTS_TOKEN = "tests/credit/test_token_methods.py"
_TESTS_TURN = "tests/credit/test_turn_baselines.py"
_TESTS_REPLAY = "tests/training/test_replay_credit.py"
_TESTS_BROADCAST = "tests/credit/test_broadcast_controls.py"

_CARDS: dict[str, _Text] = {
    "grpo": _Text(
        "A_g = (R_g - mean R) / std R over the G episodes of one problem (the group-normalised team "
        "reward), broadcast to every spoken message of episode g; skipped turns get 0.",
        (_GROUP_BASELINE, _BROADCAST),
        (f"{_TESTS_METHODS}::test_grpo_broadcast_skip_and_zero_sum",
         "tests/credit/test_loss_references.py::test_grpo_modes_match_trl_and_verl"),
        "no generation, no model pass: arithmetic on the G rewards"),
    "gspo": _Text(
        "The same advantages as grpo (group-normalised team reward broadcast to every message); GSPO "
        "differs in the objective (one length-normalised ratio per message), chosen on its own with "
        "objective.name: gspo.",
        (_GROUP_BASELINE, _BROADCAST),
        (f"{_TESTS_METHODS}::test_grpo_broadcast_skip_and_zero_sum",
         "tests/credit/test_loss_references.py::test_gspo_matches_trl_sequence_levels_and_verl"),
        "no generation, no model pass"),
    "shapley": _Text(
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
         _MASKING,
         _REPLAY,
         "judge: the judge's answer is a fair aggregate of the paths it reads; a bare copy of another "
         "path's answer is worth what the judge makes of it (an identical copy shares its original's "
         "credit: Shapley's symmetry)",
         "all of an agent's messages share its value (uniform within the agent)"),
        (f"{_TESTS_METHODS}::test_shapley_efficiency_exact_and_mc",
         f"{_TESTS_METHODS}::test_shapley_masking_and_replay_values",
         f"{_TESTS_REPLAY}::test_replay_shapley_gives_the_table_through_the_trainer_step",
         f"{_TESTS_REPLAY}::test_masking_cannot_see_the_review_but_replay_can",
         "tests/credit/test_generative_judge.py::test_free_riders_get_no_credit_from_an_evidence_judge"),
        "vote: verifier calls only; masking: one scorer call per coalition (batched); replay: one "
        "re-execution per coalition and sample after the shared prefix (at most budget x the step's "
        "rollout tokens when budget is set); judge: one greedy judge reply per coalition (one batched "
        "call per episode, judge_max_new_tokens each); Monte Carlo permutations above exact_max_agents"),
    "shapley_prm": _Text(
        "shapley's agent advantage A_{g,i}, spread over agent i's messages by a local score q_t: a_t = "
        "A_{g,i} + beta_i (q_t - mean q), conserving n_i A_{g,i} per agent and bounded by B; q is "
        "the verifier on the message's answer (2 score - 1, 0 without one) or leave-one-message-out "
        "masking.",
        ("those of shapley for each agent's total",
         "within an agent, q_t ranks its messages' contributions: a message with a right answer (or "
         "whose removal lowers the masked score) did more; the masking score sees no influence "
         "through later turns",
         "beta0 and the bound are chosen constants ([INFERRED]), not identified"),
        (f"{_TESTS_METHODS}::test_shapley_prm_conservation_and_agreement",
         f"{_TESTS_METHODS}::test_shapley_prm_locality"),
        "message_score=verifier re-scores answers only; masking costs one scorer call per message"),
    "shape_max": _Text(
        "ShapE-GRPO: the Shapley value of each answering agent in the max game v(S) = max_{i in S} "
        "u_i (u_i its scored answer, v(empty) = base); candidate messages get (K phi - mean R) / "
        "(pooled std(K phi) + eps) with R = max u, others (an aggregator) the set-level GRPO value.",
        ("the team is worth its best answer (a reader picks the best candidate): agents are "
         "candidates that each give an answer, and how one agent's text changed another's answer is "
         "not modelled",
         "the no-extra-bias argument assumes candidates of equal length (option length_normalise)"),
        (f"{_TESTS_METHODS}::test_shape_max_spec_example_with_aggregator",),
        "closed form in O(K log K), no generation"),
    "coverage": _Text(
        "GCPO: the Shapley share phi_g of each episode of the group (the players are the G episodes, "
        "not agents) in v(S) = log det(I + alpha L_S), L = X X^T, x_g = R_g e_g (reward-weighted unit "
        "embeddings); A_g = (phi_g - mean phi) / std phi on every message of episode g.",
        ("the embedding's similarity stands for 'the same solution': correct and semantically "
         "distinct episodes earn more, a wrong episode is a null player (kernel and alpha are "
         "[INFERRED])",
         _BROADCAST),
        ("tests/credit/test_coverage.py::test_duplicate_shares_credit_and_wrong_is_null",
         f"{_TESTS_METHODS}::test_coverage_e44"),
        "no generation; the embedding model (packaged MiniLM by default) loads once per process"),
    "cosac": _Text(
        "COSAC's estimate of the SeqAU advantage Q_k(a_<=k) - Q_{k-1}(a_<k) of the action at each "
        "position k (a message's extracted answer, or a review's verdict), under a ridge additive "
        "surrogate f(a) = sum_k phi_k(a_k) fitted to the group's team rewards (a decomposition over "
        "positions); expectations use the group's empirical label frequencies.",
        ("one fixed turn order: every episode of the group has the same author sequence",
         "a message acts only through its discrete label (answer or verdict); the rest of its text "
         "is invisible",
         "the reward is close to additive over positions (the bias grows with the non-additive "
         "residual)",
         "the group's empirical continuation frequencies stand for the downstream agents' behaviour "
         "policies, not the LLM's probabilities: the indirect term says how an answer shifted its "
         "successors' answers in this group"),
        ("tests/credit/test_cosac.py::test_e31_lambda_to_zero_recovers_exact_seqau",
         "tests/credit/test_cosac.py::test_registered_cosac_credits_the_review_that_decided_the_outcome"),
        "no generation: one ridge fit over one-hot labels and an enumeration of continuations "
        "(max_nodes caps it)"),
    "oracle": _Text(
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
        "the rollout's tokens"),
    "dr_mas": _Text(
        "Dr. MAS's agent-wise normalisation: per agent, (R_g - mean_i) / std_i over the agent's own samples "
        "(its spoken messages across the group, each with its episode's team reward); equals grpo when every "
        "agent speaks once in every episode.",
        (_GROUP_BASELINE, _BROADCAST,
         "an agent's own reward statistics are the right scale for its gradient (the method's premise: "
         "agents that act unequally often, or in different episodes, see different reward distributions)"),
        (f"{_TESTS_BROADCAST}::test_dr_mas_equals_grpo_when_every_agent_speaks_once",
         f"{_TESTS_BROADCAST}::test_dr_mas_worked_numbers_with_a_skipped_turn"),
        "arithmetic on the G rewards, per agent"),
    "raft": _Text(
        "RAFT (reward-ranked fine-tuning): 1 on every spoken message of an episode whose team reward is at "
        "least the threshold (a right team answer), 0 elsewhere: supervised fine-tuning on the right "
        "episodes, no baseline, no push-down.",
        (_BROADCAST,
         "a selected episode is worth imitating in every message, and an unselected one carries no "
         "information (wrong answers are never pushed down)"),
        (f"{_TESTS_BROADCAST}::test_raft_worked_numbers",
         f"{_TESTS_BROADCAST}::test_raft_selects_right_episodes_only"),
        "arithmetic on the G rewards"),
    "tracer_roles": _Text(
        "TRACER's role rewards, not a causal contrast: a proposal gets +1 if its answer is correct "
        "and -1 otherwise; a review +1 / -1 when its verdict matches / contradicts the correctness of "
        "the pending answer, 0 without one; by default normalised over the messages that share "
        "(round, stage) across the group (a group with std below min_reward_std gets 0).",
        ("a message is worth its local correctness, whatever it did to the team's final reward (a "
         "right verdict the proposer ignores still earns +1)",
         "the latest proposal is the answer under review",
         "messages with the same (round, stage) are comparable candidates for one context although "
         "their histories differ"),
        ("tests/credit/test_regret_roles.py::test_raw_role_rewards",
         "tests/credit/test_regret_roles.py::test_turn_group_normalisation"),
        "one verifier call per proposal"),
    "loto": _Text(
        "Leave-one-turn-out: c_t = V(all turns) - V(all turns but t), the drop in the transcript's "
        "value when message t is masked (value: masking) or removed and the rest replayed (value: "
        "replay); not centred across the group.",
        ("no efficiency: two redundant messages each get 0, and interaction effects are not split",
         _MASKING,
         "replay needs restorable state at turn t and a fixed policy for the turns after it"),
        (f"{_TESTS_TURN}::test_loto_equals_shapley_for_additive_value",
         f"{_TESTS_TURN}::test_loto_failure_mode_redundant_pair"),
        "value=masking generates nothing (one scorer call per value)"),
    "a2tgpo": _Text(
        "A2TGPO: the information gain IG_t = p(y* | h_t) - p(y* | h_{t-1}), the change in the "
        "policy's own probability of the gold answer after message t, z-normalised per turn index "
        "across the group, then a discounted suffix sum divided by sqrt(turns left).",
        ("the policy's teacher-forced probability of the reference answer is a calibrated value of "
         "the transcript so far (a proxy for E[R | h_t], not a sampled one)",
         "messages with the same turn index across episodes are comparable",
         "every problem has a reference answer"),
        (f"{_TESTS_TURN}::test_a2tgpo_worked_example",
         f"{_TESTS_TURN}::test_a2tgpo_and_loto_methods_need_their_resources"),
        "no generation"),
    "gigpo": _Text(
        "GiGPO: A = A^E + omega A^S, the episode's team reward centred over the group plus the "
        "discounted return G_t = gamma^(T-1-t) R centred within the messages of the group that share "
        "an anchor state (author, stage and the text of every earlier message, or the prompt ids).",
        ("messages with identical anchors are draws from one state, so their return difference is "
         "the effect of the action taken there",
         "in free-text dialogues most anchors after the first turn are unique: A^S is then 0 and the "
         "method is the group-centred team reward"),
        (f"{_TESTS_TURN}::test_gigpo_worked_example", f"{_TESTS_TURN}::test_gigpo_method_on_episodes"),
        "no generation: hashing the anchors (similarity clustering compares them pairwise)"),
    "cal_grpo": _Text(
        "CAL-GRPO: for agent i's k-th answer-bearing attempt, its Verification@K outcome V (some "
        "attempt right) against the episodes that reached attempt k still unsolved: (V - mean) / "
        "std over that live set; attempts after a right one get 0; other messages the team's GRPO "
        "value.",
        ("the target is the agent's own Verification@K outcome, not the team reward",
         "the episodes live at attempt k are a baseline for it (same problem, same attempt index, "
         "still unsolved)",
         "the paper's exact weights are not public: this construction is the module's choice"),
        ("tests/credit/test_cal_grpo.py::test_cal_grpo_hand_worked",
         "tests/credit/test_cal_grpo.py::test_zero_sum_per_attempt_index"),
        "no generation"),
    "continuation": _Text(
        "The difference of continuation values E[R | h_{t+1}] - E[R | h_t] for each spoken message, V "
        "estimated as the mean verifier score of k continuations sampled from the prefix (V(T) = R, "
        "V(0) the group's mean reward by default), divided by the group's reward std; an episode's "
        "advantages telescope to R - V(0).",
        ("restorable state at every message boundary (the protocol re-runs from a transcript prefix)",
         "the continuing policies are the current ones and held fixed: the value is relative to them",
         "k samples give an unbiased but noisy V (standard error of order 1 / sqrt(k))"),
        ("tests/training/test_replay_engine.py::test_continuation_value_matches_the_analytic_value",
         f"{_TESTS_REPLAY}::test_continuation_advantages_telescope_in_the_trainer"),
        "at most budget x the step's rollout tokens when budget is set"),
    "influence": _Text(
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
        "same prompt are scored once; the rows' prompt tokens are logged (influence_prompt_tokens)"),
    "dgpo": _Text(
        "No new contrast: the message advantage A redistributed over its tokens, a_j = A w_j with w_j "
        "= (1 - mix) + mix s_j / mean(s), s_j = (Hellinger distance to the reference - floor)^+ x "
        "entropy; conserves C A.",
        (_TOKEN_SPLIT,
         "tokens where the policy departed from the reference at an uncertain position are the ones "
         "responsible for the outcome (a heuristic, not identified)",
         "it replaces the KL term (refused with kl_beta > 0)"),
        (f"{_TESTS_TOKEN}::test_dgpo_hand_worked", f"{_TESTS_TOKEN}::test_dgpo_conserves_each_message_total"),
        "one no-grad reference pass (what a KL term costs); the policy's side comes from the "
        "update's own forward pass"),
    "ep_grpo": _Text(
        "The message advantage spread by an entropy gate plus a divergence process signal: a_j = A "
        "w_j + process |A| zc_j, zc_j the centred tanh((log pi - log pi_ref) / tau); conserves C A; "
        "optional progress credit for groups with equal rewards (zero_variance).",
        (_TOKEN_SPLIT,
         "the log-ratio to the reference is an implicit process reward (PRIME): it holds only while "
         "the divergence tracks the value of the tokens",
         "high entropy marks the tokens that decide"),
        (f"{_TESTS_TOKEN}::test_ep_grpo_hand_worked",
         f"{_TESTS_TOKEN}::test_ep_grpo_conserves_and_zero_variance_is_bounded"),
        "one no-grad reference pass"),
    "s_trace": _Text(
        "The message advantage carried back over its highest-entropy tokens (decisions) by "
        "eligibility traces lam^(m-i) x the clipped importance ratios of later decisions; the other "
        "tokens keep (1 - mix) A; conserves C A.",
        (_TOKEN_SPLIT,
         "high-entropy tokens are the decisions, and later decisions caused more of the message's "
         "outcome",
         "clipped importance ratios correct rollouts from an older adapter"),
        (f"{_TESTS_TOKEN}::test_s_trace_hand_worked", f"{_TESTS_TOKEN}::test_s_trace_conserves_each_message_total"),
        "none: entropies are recorded at generation (a scoring pass for vLLM rollouts)"),
    "gear": _Text(
        "The message advantage weighted by where the student departs from the same adapter shown the "
        "reference answer (the teacher): a segment starts at each divergence spike and its share "
        "grows with the divergence there; conserves C A.",
        (_TOKEN_SPLIT,
         "a token the answer-aware teacher finds unlikely is where the message went right or wrong",
         "every problem has a reference answer"),
        (f"{_TESTS_TOKEN}::test_gear_hand_worked", f"{_TESTS_TOKEN}::test_gear_conserves_each_message_total"),
        "one no-grad teacher pass (prompt + reference hint, each distinct prompt once)"),
    "aem": _Text(
        "Not a contrast: each message advantage rescaled by its relative response surprisal, c = "
        "clip(rho^(strength kappa)), kappa the balance of negative and positive messages of the role "
        "in the group; signs kept, totals not conserved.",
        ("the message advantage comes from the message-level method; rescaling it changes what it "
         "estimates by a factor between 1 / max_scale and max_scale",
         "the paper's entropy-drift argument holds for the proxy chosen here (power law, clip)"),
        (f"{_TESTS_TOKEN}::test_aem_hand_worked", f"{_TESTS_TOKEN}::test_aem_keeps_signs_and_bounds"),
        "none: behaviour log-probs are recorded at generation"),
    "vpr": _Text(
        "The message advantage plus an oracle process reward: each arithmetic claim ('12 + 7 = 19') "
        "scores +1 if exact and -1 if not, normalised per (role, claim index) across the group and "
        "added (x weight) to the tokens of the claim's step; totals not conserved.",
        ("a claim's correctness is a verifiable step reward that bears on the outcome",
         "claims with the same index across the group's messages are comparable steps",
         "only claims the evaluator parses count (+ - * / on numbers, no parentheses)"),
        (f"{_TESTS_TOKEN}::test_vpr_hand_worked",
         f"{_TESTS_TOKEN}::test_vpr_never_raises_and_weight_zero_is_the_message_advantage"),
        "decoding only (tokenizer), no model pass"),
}


#: per method, what is wrong with it today and where an assumption was measured to fail
_FAILS: dict[str, tuple[str, ...]] = {
    "grpo": ("broadcast is unbiased for A* up to a term of the history alone (a per-problem baseline "
             "changes no expected gradient): what it lacks is variance, each agent's advantage carrying "
             "every other agent's noise (about K times its own in an additive team of K)",
             "measured: Pearson r with the solver's A* 0.42 [0.14, 0.71] at teammate noise q = 0.5 against "
             "0.77 at q = 0 (BENCHMARKS.md section 12)"),
    "shapley": ("masking cannot see influence through a later turn: r -0.00 [-0.02, 0.01] with A* for a "
                "helpful reviewer, whose review changes the proposer's next answer (section 12)",
                "on split (additive) masking is exact: phi_i = c_i / K (tests/credit/test_oracle.py)"),
    "loto": ("masking sees no influence through later turns: r -0.01 [-0.03, 0.01] for a helpful reviewer "
             "(section 12); not centred across the group, so its advantages need not sum to 0",),
    "influence": ("a belief, not an outcome: the listener's log-probability of the answer can rise while its "
                  "sampled answer stays wrong, and influence through turns after the listener's is not seen; "
                  "its z-scored term adds variance to the team's advantage (1.05 and 1.69 against grpo's 0.31 "
                  "and 0.63, section 12's influence table)",
                  "measured: Pearson r with A* 0.74 [0.63, 0.85] in the chain of two (grpo 0.60, continuation "
                  "0.77), level with grpo for the solver read by a noisy teammate (0.60 against 0.58)"),
    "continuation": ("its advantage, divided by the group's reward std, is not unbiased for A*: the std is "
                     "estimated from the same episodes; a group with all-equal rewards gets 0 in mode std",
                     "k = 4 continuations per boundary are noisy: r 0.37 [0.02, 0.64] on the solver at q = "
                     "0.5, below grpo's 0.42 (section 12)"),
    "oracle": ("only where its form holds: every episode is checked against the form's reward rule, and the "
               "group mean stands for each agent's accuracy (G = 4 draws in the arena)",
               "form review: the reviewer's credit R - c_prop is A* plus a term of the proposal alone (the same "
               "expected gradient, another variance), and the proposer's V(1) - V(0) is estimated from the group",
               "form majority: binary scores and one string for every right answer; a plurality vote whose right "
               "answer wins with a minority breaks its rule (use the vote's rule: majority)"),
}


def card_names() -> list[str]:
    """Every registered method, message-level first, then token-level (each sorted)."""
    return list(credit_methods()) + list(token_methods())


def card_for(name: str) -> CreditCard:
    """The card of method ``name`` (a registered name or a user file ``path/to/file.py:name``).

    Raises ConfigError for a name no registry knows; never for a method without a card.
    """
    entry = _entry(name)
    label = Path(name).name if is_plugin_spec(name) else name
    text = None if is_plugin_spec(name) else _CARDS.get(name)
    if isinstance(entry, CreditMethod):
        return _message_card(label, entry, text)
    return _token_card(label, entry, text)


def render_cards(name: str) -> str:
    """``card_for(name).render()``, or every card separated by blank lines for ``"all"``."""
    names = card_names() if name == "all" else [name]
    return "\n\n".join(card_for(n).render() for n in names)


def _entry(name: str) -> CreditMethod | TokenMethod:
    if is_plugin_spec(name):
        try:
            return CREDIT.get(name)
        except ConfigError as exc:
            try:
                return TOKEN_CREDIT.get(name)
            except ConfigError:
                raise exc from None
    for registry in (CREDIT, TOKEN_CREDIT):
        if name in registry.names():
            return registry.get(name)
    raise ConfigError(f"credit --card: unknown credit method {name!r}; known: {', '.join(card_names())}, "
                      f"or all; or a user file as path/to/file.py:name")


def _message_card(name: str, method: CreditMethod, text: _Text | None) -> CreditCard:
    protocols = None if method.protocols is None else tuple(sorted(method.protocols))
    if text is None:
        return _undeclared(name, "message", method.summary, method.cost, protocols)
    cost = f"{method.cost}; {text.cost}" if text.cost else method.cost
    return CreditCard(name, "message", method.summary, text.estimand, text.assumptions, cost,
                      text.falsified_by, protocols, fails_where=_FAILS.get(name, ()))


def _token_card(name: str, method: TokenMethod, text: _Text | None) -> CreditCard:
    if text is None:
        needs = ", ".join(sorted(method.needs)) or "behaviour log-probs only"
        return _undeclared(name, "token", method.summary, f"not declared (needs: {needs})", None)
    return CreditCard(name, "token", method.summary, text.estimand, text.assumptions, text.cost,
                      text.falsified_by)


def _undeclared(name: str, level: str, summary: str, cost: str, protocols: tuple[str, ...] | None
                ) -> CreditCard:
    return CreditCard(name, level, summary,
                      "not declared: this method has no card, so what its advantage estimates is "
                      "unknown (only its registry summary is above)",
                      (), cost, (), protocols, declared=False)


__all__ = ["CreditCard", "card_for", "card_names", "render_cards"]
