"""The hand-written part of each credit method's page: when to use it, and the papers with the config
values that set their choices (the rest of the page comes from the registry and the card).

``docs/gen_reference.py`` writes one page per registered method from one template; a method without
an entry here (a method registered later) still gets its page, with its card, options and logs, and
a line saying that no notes were written yet. Links are relative to the docs root: ``{root}`` is
replaced by the way up from the method's page.

Each paper's ``config`` is a fragment of a training config (YAML keys): ``tests/docs`` loads it into
a ``TrainConfig`` and checks the method's options and protocol, so the values on a page cannot name
a field or value that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Paper:
    """A paper a method follows.

    Fields:
        cite: authors, year and title, as a reader would search for it.
        url: the paper's page (None where the method's module names no identifier).
        config: the config fragment that sets the paper's choices, as far as teamplay has them.
        setting: what the fragment reproduces and what it does not (scale, values not restated).
    """

    cite: str
    url: str | None
    config: dict[str, Any]
    setting: str


@dataclass(frozen=True)
class Note:
    """When to use a method, its papers, and where teamplay measured it.

    Fields:
        when: when to choose it, and when not, in a few sentences.
        papers: the papers it follows (empty: teamplay's own or a textbook construction).
        measured: where teamplay tested it against ``grpo`` or the true advantage (a docs link).
        origin: where a method without a paper comes from (shown when ``papers`` is empty).
    """

    when: str
    papers: tuple[Paper, ...] = ()
    measured: str = ""
    origin: str = "teamplay's own construction."


def arxiv(identifier: str) -> str:
    return f"https://arxiv.org/abs/{identifier}"


_ARENA = "[the credit arena]({root}results/arena.md)"
_FIDELITY = "[fidelity against the true advantage]({root}credit/fidelity.md)"
_PAID = "[where credit paid]({root}results/credit-paid.md)"

NOTES: dict[str, Note] = {
    "grpo": Note(
        "The default and the baseline every other method is measured against: one advantage per "
        "episode, the team reward centred (and scaled) within the problem's group, on every message. "
        "It needs nothing beyond the rollout. Use it first; choose another method only where a "
        "comparison with seeds shows it pays on your team.",
        (Paper("Shao et al. 2024, DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open "
               "Language Models", arxiv("2402.03300"),
               {"credit": {"method": "grpo", "options": {"scale_rewards": "group"}},
                "objective": {"name": "grpo", "loss_agg": "seq_mean_token_mean", "kl_beta": 0.04},
                "rollout": {"group_size": 64}},
               "GRPO as introduced: group-normalised outcome reward, per-sequence token mean, a k3 KL "
               "to the reference of weight 0.04, 64 samples per question (a GPU-sized group; the CPU "
               "configs use 4)."),
         Paper("Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective (Dr. GRPO)",
               arxiv("2503.20783"),
               {"credit": {"method": "grpo", "options": {"scale_rewards": "none"}},
                "objective": {"name": "grpo", "loss_agg": "seq_mean_token_sum_norm"}},
               "Dr. GRPO: no division by the group's std and a token sum over a constant "
               "(`objective.norm_tokens`, default `sampling.max_new_tokens`) instead of each "
               "sequence's mean."),
         Paper("Yu et al. 2025, DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
               arxiv("2503.14476"),
               {"credit": {"method": "grpo"},
                "objective": {"name": "grpo", "loss_agg": "token_mean", "clip_low": 0.2, "clip_high": 0.28}},
               "DAPO's token-level loss and clip-higher; its dynamic sampling and overlong shaping are "
               "not options here (groups whose rewards are all equal already carry no signal).")),
        f"{_FIDELITY} (section 12) and every row of {_PAID}: the floor of each comparison."),
    "gspo": Note(
        "`grpo`'s advantages, registered under the name of the sequence-level objective they are meant "
        "for: choose it with `objective.name: gspo` (one length-normalised ratio per message instead of "
        "one per token), as TRACER trains its roles.",
        (Paper("Zheng et al. 2025, Group Sequence Policy Optimization", arxiv("2507.18071"),
               {"credit": {"method": "gspo"},
                "objective": {"name": "gspo", "clip_low": 3.0e-4, "clip_high": 4.0e-4}},
               "GSPO's sequence-level ratio with the paper's clip range (3e-4 below, 4e-4 above)."),)),
    "dr_mas": Note(
        "Broadcast credit with a baseline per agent: where agents speak unequally often (skipped turns, "
        "several turns, agents absent from some episodes), each agent's messages are centred and scaled "
        "by its own statistics instead of the team's. Where every agent speaks once per episode it "
        "equals `grpo`.",
        (Paper("Feng et al. 2026, Dr. MAS: Stable Reinforcement Learning for Multi-Agent LLM Systems",
               None, {"credit": {"method": "dr_mas", "options": {"eps_rule": "floor"}}},
               "The agent-wise normalisation; the paper's training scale is not restated here."),)),
    "raft": Note(
        "A filter, not a credit: advantage 1 on the messages of selected episodes (a right team answer, "
        "or the best of each group), 0 elsewhere, so nothing is pushed down. A control that tells "
        "whether a method's gain comes from pushing wrong answers down. With `select: threshold` and a "
        "fractional team reward (the `split` team) no episode may be selected and nothing trains.",
        (Paper("Dong et al. 2023, RAFT: Reward rAnked FineTuning for Generative Foundation Model Alignment",
               arxiv("2304.06767"), {"credit": {"method": "raft", "options": {"select": "best"}}},
               "RAFT's reward ranking: the best-rewarded samples of each prompt are kept for the update."),),
        _PAID),
    "cal_grpo": Note(
        "For agents that make successive attempts after feedback (re-proposals, debate rounds), aiming "
        "at Verification@K: an attempt is credited against the episodes still live at that attempt, "
        "and attempts after a right one get 0. Works with the `proposer_reviewer` and `debate` protocols.",
        (Paper("CAL-GRPO: calibrated attempt-level credit", arxiv("2604.17912"),
               {"protocol": {"name": "proposer_reviewer"},
                "credit": {"method": "cal_grpo", "options": {"attempt_roles": ["proposer"]}}},
               "Attempt-level credit for the proposer's re-proposals; the paper's models and K are not "
               "restated here."),)),
    "shapley": Note(
        "Per-agent credit where agents contribute unequally: each agent's Shapley value over coalitions "
        "of agents, centred per agent across the group. The value of a coalition is chosen by `value`: "
        "`vote` (exact, free, for voting teams), `masking` (the transcript scored with the others' "
        "messages withheld; sees no influence through later turns), `replay` (the coalition re-run, the "
        "costliest and the only one that sees influence through later turns) or `judge` (a generative "
        "judge reads the coalition's messages). Exact up to `exact_max_agents`, sampled above.",
        (Paper("Parallel Shapley: a generative judge values coalitions of parallel reasoning paths",
               None, {"protocol": {"name": "paths"},
                      "credit": {"method": "shapley", "options": {"value": "judge", "judge_empty": "zero"}}},
               "The judge's Shapley values over parallel paths; teamplay's reading of its claim is the "
               "arena's `parallel_shapley` setting."),),
        f"{_ARENA} (the `parallel_shapley` and noisy-teammate settings) and {_FIDELITY}."),
    "shapley_prm": Note(
        "`shapley`'s agent credit, then refined down to each message by a local message score (the "
        "verifier on the message's own answer, or leave-one-message-out masking): for agents that speak "
        "several times, where one message earned what another lost. The refinement moves a message by "
        "at most `bound`.",
        (Paper("Yang et al. 2025, a Shapley and process-reward framework for multi-agent credit",
               arxiv("2511.10687"),
               {"credit": {"method": "shapley_prm", "options": {"value": "vote", "refine_mode": "signed"}}},
               "A conceptual framework without experiments or code: the refinement's formulas are "
               "teamplay's, chosen to have the properties the abstract states."),)),
    "shape_max": Note(
        "For teams whose result is their best answer (a vote, a debate, a chain that keeps the best): "
        "the Shapley value of the max game in closed form, O(K log K). Only for the `single`, "
        "`sequential`, `debate` and `vote` protocols.",
        (Paper("ShapE-GRPO: Shapley credit of the best-answer game", arxiv("2603.29871"),
               {"protocol": {"name": "vote"},
                "credit": {"method": "shape_max", "options": {"length_normalise": False}}},
               "The closed-form max-game Shapley values with GRPO's group scaling (the scaling is "
               "inferred from the paper's abstract)."),),
        _FIDELITY),
    "coverage": Note(
        "Treats the group as a team: each episode's credit is its Shapley share of the volume its "
        "right solutions cover (embedded and compared by a log-determinant), so a right solution "
        "unlike the others is worth more. For tasks with substantively different right solutions; "
        "on sums, right solutions differ only in wording.",
        (Paper("GCPO: Breaking Winner-Takes-All, coverage-volume Shapley over a group",
               arxiv("2605.11461"), {"credit": {"method": "coverage", "options": {"text": "transcript"}}},
               "The coverage game with the packaged MiniLM embedder; the paper's kernel and weighting "
               "are inferred from its abstract."),),
        f"{_ARENA} (the `gcpo` setting: not shown at that power)."),
    "oracle": Note(
        "The true advantage A* in closed form, for the team structures where it is known (additive or "
        "conjunctive split teams, a spoiled first answer, a relay, a threshold vote, a review). It is a "
        "ceiling for credit fidelity in benchmarks, not a method for a team of your own: it needs the "
        "structure's reward rule, and checks every episode against it.",
        (), f"{_ARENA} (team size: where credit must pay) and {_PAID}."),
    "continuation": Note(
        "Per-message credit from sampled continuations: a message is worth what it changed the team's "
        "expected outcome by, V(after) - V(before), each V the mean score of `samples` continuations "
        "from that prefix. Sees influence through later turns; costs `samples` partial episodes per "
        "message boundary (cap it with `budget`).",
        (Paper("Kazemnejad et al. 2024, VinePPO: Unlocking RL Potential For LLM Reasoning Through "
               "Refined Credit Assignment", arxiv("2410.01679"),
               {"credit": {"method": "continuation", "options": {"samples": 4, "baseline": "group_mean"}}},
               "Monte Carlo values of intermediate states, with messages as the steps; the paper's "
               "number of rollouts per state and its PPO update are not restated here."),),
        f"{_ARENA} and {_FIDELITY}."),
    "loto": Note(
        "Leave-one-turn-out: a message is worth the drop in the transcript's value when it is masked "
        "(or removed and the rest replayed). Cheap with masking; it gives zero credit to each of two "
        "redundant messages (Shapley splits it) and is not centred across the group.",
        (), f"{_PAID} (the split team at K = 8).",
        "leave-one-out is a textbook counterfactual; no single paper defines this per-turn masking form."),
    "cosac": Note(
        "For agents acting in a fixed order (`sequential`, `proposer_reviewer`): an additive surrogate "
        "of the team reward over answer labels, fitted by ridge regression on the group, gives each "
        "agent's counterfactual advantage without extra generation.",
        (Paper("COSAC: Counterfactual Credit Assignment in Sequential Cooperative Teams", arxiv("2604.17693"),
               {"protocol": {"name": "sequential"},
                "credit": {"method": "cosac", "options": {"lam": 0.01, "exact": True}}},
               "The ridge surrogate and exact continuations; the paper's ridge strength is not "
               "stated in its abstract (0.01 is teamplay's choice)."),),
        f"{_ARENA} (the chain settings)."),
    "tracer_roles": Note(
        "TRACER's role rewards for a proposer and a reviewer: the proposer +-1 on its answer, the "
        "reviewer +1/0/-1 on its verdict, normalised per (round, stage) across the group. Only for "
        "`proposer_reviewer`, with the GSPO objective and, usually, learned speak/skip controllers.",
        (Paper("TRACER: learned speak/skip controllers with role rewards", arxiv("2605.28699"),
               {"protocol": {"name": "proposer_reviewer"},
                "credit": {"method": "tracer_roles", "options": {"normalise": "turn_group", "min_reward_std": 0.05}},
                "objective": {"name": "gspo", "logratio_clamp": 2.0},
                "controllers": {"enabled": True}},
               "TRACER's role rewards, GSPO update with its log-ratio clamp and regret-matching "
               "controllers, as its released code sets them."),),
        f"{_ARENA} (the `tracer` setting)."),
    "a2tgpo": Note(
        "Per-turn credit from the change in the policy's probability of the gold answer after each "
        "message (information gain), normalised per turn index across the group. Needs a gold answer "
        "the policy can score and one teacher-forced pass per message prefix.",
        (Paper("A2TGPO: turn-group normalisation of information gain", arxiv("2605.06200"),
               {"credit": {"method": "a2tgpo", "options": {"gamma": 1.0, "outcome": False}}},
               "The per-turn information gain and its normalisation; the clip range is inferred."),)),
    "influence": Note(
        "Dense credit for a message a teammate reads: how much it raised the listener's teacher-forced "
        "log-probability of the answer, against the same prompt with the message withheld, added to the "
        "group-centred team reward. It gives a signal where every episode of a group has the same reward "
        "(a cold start), costs two forward rows per message and no generation, and gives nothing to a "
        "message no teammate reads; pair a result with the no-channel arm (`protocol.channel: false`).",
        (Paper("Jaques et al. 2019, Social Influence as Intrinsic Motivation for Multi-Agent Deep "
               "Reinforcement Learning", arxiv("1810.08647"),
               {"protocol": {"name": "relay"},
                "credit": {"method": "influence", "options": {"coef": 1.0, "normalise": "turn"}}},
               "The influence of a message on its listener, measured on the listener's belief in the "
               "answer (a language model's log-probability) rather than on its action distribution; "
               "the paper's intrinsic-reward weight is not restated."),),
        f"{_FIDELITY}."),
    "gigpo": Note(
        "For episodes that revisit the same state: an episode advantage plus a step advantage among "
        "messages of different episodes that start from the same anchor state (the same transcript so "
        "far). Useful with many turns and repeated states; with few turns it is close to `grpo`.",
        (Paper("Feng et al. 2025, Group-in-Group Policy Optimization for LLM Agent Training",
               arxiv("2505.10978"),
               {"credit": {"method": "gigpo", "options": {"gamma": 0.95, "omega": 1.0, "mode": "mean_norm"}}},
               "GiGPO's discount and step weight as its reference code sets them."),)),
    "dgpo": Note(
        "A token method: spreads a message's advantage over its tokens by their Hellinger deviation "
        "from the reference, gated by entropy, conserving the message total. For long messages where a "
        "few tokens decide the answer.",
        (Paper("DGPO: entropy-gated Hellinger deviation", arxiv("2605.03327"),
               {"credit": {"method": "grpo", "token": {"method": "dgpo", "options": {"mix": 0.5}}}},
               "The gated deviation over a GRPO message advantage."),)),
    "ep_grpo": Note(
        "A token method: entropy-gated token weights plus an implicit process signal from the policy's "
        "divergence from the reference, anchored to the outcome advantage; can give a signal to groups "
        "whose rewards are all equal (`zero_variance`).",
        (Paper("EP-GRPO: entropy-gated process credit", arxiv("2605.04960"),
               {"credit": {"method": "grpo", "token": {"method": "ep_grpo", "options": {"mix": 0.5, "process": 0.5}}}},
               "The entropy gate and the divergence signal over a GRPO message advantage."),)),
    "s_trace": Note(
        "A token method: eligibility traces over the highest-entropy tokens (the decision points), with "
        "successor importance weights clipped as in Retrace. For off-policy updates (several epochs, "
        "asynchronous rollouts) where later decisions were sampled by an older policy.",
        (Paper("Munos et al. 2016, Safe and Efficient Off-Policy Reinforcement Learning (Retrace)",
               arxiv("1606.02647"),
               {"credit": {"method": "grpo", "token": {"method": "s_trace", "options": {"clip": 1.0, "lam": 0.9}}}},
               "Retrace's clipped importance weights (c = min(1, ratio)) over selected tokens; the "
               "token selection by entropy is this method's."),)),
    "gear": Note(
        "A token method: the policy shown the reference answer is the teacher; where the student "
        "departs from it, a segment starts whose advantage is scaled by the departure's divergence. "
        "Needs a task with a reference answer (every built-in task has one).",
        (Paper("GEAR: answer-conditioned teacher segments", arxiv("2605.11853"),
               {"credit": {"method": "grpo", "token": {"method": "gear", "options": {"threshold": 1.0}}}},
               "Departure segments over a GRPO message advantage."),)),
    "vpr": Note(
        "A token method: every arithmetic claim inside a message ('12 + 7 = 19') is checked exactly and "
        "its step gets a verifiable process reward added to the message advantage. For arithmetic "
        "reasoning; a message without parsable claims keeps its advantage.",
        (Paper("VPR: verifiable process rewards", arxiv("2605.10325"),
               {"credit": {"method": "grpo",
                           "token": {"method": "vpr", "options": {"weight": 0.5, "normalise": "group"}}}},
               "Exact claim rewards, normalised per claim position across the group."),)),
    "aem": Note(
        "A token method: rescales message advantages by relative surprisal, favouring surprising "
        "messages while the group mostly fails (explore) and typical ones while it mostly succeeds "
        "(exploit). Changes the size of advantages, not their sign.",
        (Paper("AEM: surprisal-modulated advantages", arxiv("2605.00425"),
               {"credit": {"method": "grpo",
                           "token": {"method": "aem", "options": {"strength": 1.0, "max_scale": 2.0}}}},
               "The surprisal modulation over a GRPO message advantage."),)),
}

__all__ = ["NOTES", "Note", "Paper"]
