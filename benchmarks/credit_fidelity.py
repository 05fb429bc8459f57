"""Credit fidelity: does each method's credit agree with the true causal advantage? (no training)

For every utterance ``u_t`` of an episode the true advantage is ``A*(u_t) = E[R | h, u_t] - E[R | h]``
(``teamplay.credit.audit.fidelity``). This benchmark collects episodes with the untrained policies,
estimates ``A*`` with an oracle, runs every registered message-level credit method on the same
episodes (groups of G episodes per problem, as in training), and reports per method and setting:
Pearson and Spearman correlation with ``A*``, sign agreement on utterances with ``|A*| > 0.1``, the
variance of the advantages, the Pearson correlation of per-agent totals, the within-group Pearson
(both sides centred on their problem's mean: how a method orders one group's utterances, which is
all a group-normalised update uses), the paired differences of both correlations to ``grpo`` (on
the same bootstrap resamples), the generated tokens per episode (rollout plus the method's
counterfactual re-executions) and the method's wall time. Intervals are 95% cluster-bootstrap
intervals over problems.

As in training, every group is credited and an agent whose advantages in a group are all zero
gives that group no signal (the trainer's per-agent zero-variance rule): ``grpo`` gives 0 to a
group whose rewards are all equal, while ``A*`` need not be 0 there. That is part of what the table
measures: a teammate's noise can hide an agent's good answer from the team reward.

Settings (arith sums, answer-first replies "The answer is ...", temperature 1):

* ``noisy teammate q``: an LLM solver answers, then a scripted teammate replaces the team's answer
  with a wrong one with probability q (``scripted:noisy_teammate``), independently of what came
  before. ``A*`` is exact up to ``p = E[correct | problem]``, estimated from many fresh answers:
  ``A*(solver) = (1 - q)(c - p)``, ``A*(teammate) = R - (1 - q)c``.
* ``chain K``: a sequential chain of K LLM agents (one shared adapter), each seeing the earlier
  answers; ``vote 3``: three LLM voters and a majority; ``split K=4``: the additive team, four LLM
  solvers each on its own sum, team reward the fraction right (``A*(u_i) = (c_i - p_i) / 4``).
  ``A*`` by Monte Carlo re-execution from every prefix (``teamplay.training.play.prefix_values.PrefixValues``).
* ``helpful`` / ``harmful`` / ``free-riding reviewer``: scripted proposer/reviewer dialogues (a
  proposer right half the time that complies with the review; a reviewer right with probability
  0.8, right with probability 0.2, or approving everything), ``A*`` by re-execution.

    python -m benchmarks credit_fidelity            # every setting (under 15 minutes on 2 cores)
    python -m benchmarks credit_fidelity --quick    # a smoke run of the pipeline
    python -m benchmarks.credit_fidelity --jobs 1   # one process (the default spreads settings over 2)
    python -m benchmarks.credit_fidelity --settings "noisy teammate q=0.5" --output runs/cf

Each setting's measurement (every utterance's true advantage and every method's advantage on it)
is stored as it finishes: a full run's in ``benchmarks/results/credit_fidelity/`` (committed: the
table is computed from these files alone, ``--table-only`` rewrites it, and a test checks that
BENCHMARKS.md holds what they give), a quick run's in ``runs/credit_fidelity-quick/``. Running the
command again reuses the stored settings (delete a file to measure its setting afresh).

    python -m benchmarks.credit_fidelity --table-only   # the table again, from the stored files
    python -m benchmarks.credit_fidelity --influence    # influence, grpo and continuation on two settings
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import EMBEDDED_MODEL, Result, set_threads

#: the committed measurements of the full run (one JSON per setting, and ``run.json``)
RESULTS = Path(__file__).resolve().parent / "results" / "credit_fidelity"
#: the stored measurement's format: a stored file of another version is measured afresh
VERSION = 4
#: digits kept of every stored advantage (the statistics are computed from the stored values)
DIGITS = 6

SOLVER_PROMPT = "You solve arithmetic problems."
REPLY_PREFIX = "The answer is"
#: sums of two numbers up to 10: the untrained model's first answer is right on about a quarter of
#: them at temperature 1 (0.27 on 24 problems x 8 samples; 0.20 with numbers up to 20)
TASK_OPTIONS = {"level": 1, "max_operand": 10}
NEW_TOKENS = 6
THRESHOLD = 0.1
#: worker processes of the full run: the 2 cores of the reference machine, one torch thread each
DEFAULT_JOBS = 2

#: label -> (credit method, options); gspo is left out: its advantages are grpo's (same function)
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo": ("grpo", {}),
    "shapley (masking)": ("shapley", {"value": "masking"}),
    "shapley (replay)": ("shapley", {"value": "replay"}),
    "shapley_prm": ("shapley_prm", {}),
    "shape_max": ("shape_max", {}),
    "coverage": ("coverage", {}),
    "cosac": ("cosac", {}),
    "tracer_roles": ("tracer_roles", {}),
    "loto (masking)": ("loto", {"value": "masking"}),
    "loto (replay)": ("loto", {"value": "replay"}),
    "a2tgpo": ("a2tgpo", {}),
    "gigpo": ("gigpo", {}),
    "cal_grpo": ("cal_grpo", {}),
    "continuation": ("continuation", {}),
    # the ceilings where A* has a closed form: the additive team (split) and the spoiled first answer
    # (the noisy teammate); each is refused on the other protocols
    "oracle (additive)": ("oracle", {"form": "additive"}),
    "oracle (spoiler)": ("oracle", {"form": "spoiler"}),
}
#: methods registered after the committed full run: measured by ``--influence`` (not in its files)
LATER_METHODS: dict[str, tuple[str, dict[str, Any]]] = {"influence": ("influence", {})}
#: every label a run may name
LABELS = {**METHODS, **LATER_METHODS}


@dataclass(frozen=True)
class Setting:
    """One team to measure: its protocol, roles and how its oracle works.

    ``noisy_q``: the noisy-teammate closed form with this q (None: Monte Carlo oracle).
    ``sizes``: (problems, group size, oracle samples) at full size; ``quick`` sizes in ``quick_sizes``.
    """

    name: str
    protocol: dict[str, Any]
    roles: tuple[dict[str, Any], ...]
    sizes: tuple[int, int, int]
    quick_sizes: tuple[int, int, int]
    noisy_q: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def uses_model(self) -> bool:
        return any("policy" not in r for r in self.roles)


def _chain_protocol(k: int) -> dict[str, Any]:
    return {"name": "sequential", "options": {
        "n_agents": k, "reply_prefix": REPLY_PREFIX, "first_instruction": "Give the answer.",
        "next_instruction": "Teammates answered above. Give the final answer."}}


def _noisy(q: float) -> Setting:
    return Setting(f"noisy teammate q={q:g}", _chain_protocol(2),
                   ({"name": "solver", "prompt": SOLVER_PROMPT},
                    {"name": "teammate", "policy": f"scripted:noisy_teammate(q={q:g})"}),
                   sizes=(16, 4, 32), quick_sizes=(2, 4, 8), noisy_q=q)


def _review(name: str, reviewer: str) -> Setting:
    return Setting(name, {"name": "proposer_reviewer", "options": {"rounds": 3}},
                   ({"name": "proposer", "policy": "scripted:noisy_proposer(p_right=0.5)"},
                    {"name": "reviewer", "policy": f"scripted:{reviewer}"}),
                   sizes=(16, 4, 64), quick_sizes=(2, 4, 8))


SETTINGS: tuple[Setting, ...] = (
    *(_noisy(q) for q in (0.0, 0.25, 0.5, 0.75)),
    Setting("chain K=2", _chain_protocol(2), ({"name": "solver", "prompt": SOLVER_PROMPT, "count": 2},),
            sizes=(8, 4, 16), quick_sizes=(2, 4, 4)),
    Setting("chain K=4", _chain_protocol(4), ({"name": "solver", "prompt": SOLVER_PROMPT, "count": 4},),
            sizes=(6, 4, 8), quick_sizes=(1, 4, 2)),
    Setting("vote 3", {"name": "vote", "options": {"n_agents": 3, "reply_prefix": REPLY_PREFIX,
                                                   "instruction": "Give the answer."}},
            ({"name": "solver", "prompt": SOLVER_PROMPT, "count": 3},), sizes=(8, 4, 16), quick_sizes=(2, 4, 4)),
    Setting("split K=4", {"name": "split", "options": {"n_agents": 4, "reply_prefix": REPLY_PREFIX,
                                                      "instruction": "Give the answer."}},
            ({"name": "solver", "prompt": SOLVER_PROMPT, "count": 4},), sizes=(6, 4, 8), quick_sizes=(1, 4, 2),
            extra={"tuple": 4}),
    _review("helpful reviewer", "noisy_reviewer(p_right=0.8)"),
    _review("harmful reviewer", "noisy_reviewer(p_right=0.2)"),
    _review("free-riding reviewer", "approver"),
)


def setting_config(setting: Setting, model: str, quick: bool, seed: int) -> dict[str, Any]:
    """The training config whose rollouts this setting measures (no step is ever taken)."""
    problems = (setting.quick_sizes if quick else setting.sizes)[0]
    k = setting.extra.get("tuple")  # the additive team's problems: K sums per item
    task = {"name": "arith", "split": "train", "options": TASK_OPTIONS, "limit": problems, "distinct": True,
            "seed": seed} if k is None else \
        {"name": "tuples", "split": "train", "options": {"task": "arith", "k": k, "options": TASK_OPTIONS},
         "limit": problems, "seed": seed}
    return {
        "model": {"name": model, "lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}},
        "task": task,
        "protocol": setting.protocol,
        "team": {"roles": [dict(r) for r in setting.roles]},
        "rollout": {"problems_per_step": problems, "group_size": (setting.quick_sizes if quick else setting.sizes)[1]},
        "backend": {"max_prompt_tokens": 512},
        "sampling": {"max_new_tokens": NEW_TOKENS, "temperature": 1.0},
        "eval_sampling": {"max_new_tokens": NEW_TOKENS},
        "credit": {"method": "grpo"},
        "seed": seed, "tensorboard": False,
    }


# ------------------------------------------------------------------------------------- one setting
@dataclass
class Rollout:
    """A setting's episodes and what played them (``rollout``)."""

    cfg: Any
    task: Any
    items: list
    make_env: Any
    backend: Any
    team: Any
    team_model: Any
    sampling: Any
    runner: Any
    episodes: list
    seconds: float

    @property
    def by_id(self) -> dict[str, Any]:
        return {item.id: item for item in self.items}

    def spoken(self) -> list[tuple[int, int]]:
        """(episode, message) of every spoken utterance, in order."""
        return [(g, t) for g, ep in enumerate(self.episodes) for t, msg in enumerate(ep.messages) if msg.spoke]


def rollout(setting: Setting, model: str = EMBEDDED_MODEL, quick: bool = False, seed: int = 0) -> Rollout:
    """The setting's team plays its problems, G episodes each, with the untrained policies."""
    from teamplay.agents.backends.mixed import MixedBackend
    from teamplay.agents.roles import Team
    from teamplay.config import ProtocolConfig, TrainConfig, build_config
    from teamplay.training.play.rollout import RolloutJob, RolloutRunner
    from teamplay.training.wiring.envs import env_factory, load_items
    from teamplay.training.wiring.sampling import sampling_params
    from teamplay.training.wiring.wired_run import build_run

    data = setting_config(setting, model, quick, seed)
    group = (setting.quick_sizes if quick else setting.sizes)[1]
    started = time.perf_counter()
    team_model = None
    if setting.uses_model:
        cfg = build_config(TrainConfig, data)
        parts = build_run(cfg)
        task, items, make_env, backend, team = parts.task, parts.items, parts.make_env, parts.backend, parts.team
        team_model = parts.team_model
    else:  # every role scripted: no model, no adapter (a training config would refuse such a team)
        # the config of the same team with one model-played role, read only for its sections
        cfg = build_config(TrainConfig, {**data, "team": {"roles": [{"name": "unused"}]},
                                         "protocol": {"name": "single"}})
        cfg = cfg.model_copy(update={"protocol": ProtocolConfig.model_validate(data["protocol"]),
                                     "team": Team.model_validate(data["team"])})
        task, items = load_items(cfg.task)
        make_env, team = env_factory(task, cfg.protocol, cfg.team)
        backend = MixedBackend(None, team.scripted_roles(), seed=seed)
    sampling = sampling_params(cfg.sampling)
    runner = RolloutRunner(make_env, backend, sampling, max_batch=cfg.backend.max_batch)
    jobs = [RolloutJob(item=item, group_id=f"fidelity:{k}:{item.id}") for k, item in enumerate(items)
            for _ in range(group)]
    episodes = runner.run(jobs, seed=seed)
    return Rollout(cfg, task, items, make_env, backend, team, team_model, sampling, runner, episodes,
                   time.perf_counter() - started)


def method_rows(played: Rollout, labels: Sequence[str], seed: int) -> dict[str, dict[str, Any]]:
    """Each labelled method's row (``_method_row``) on the rollout's spoken utterances."""
    return {label: _method_row(*LABELS[label], played.episodes, played.by_id, played.spoken(), played.task,
                               played.make_env, played.backend, played.sampling, played.cfg, played.team,
                               played.team_model, seed) for label in labels}


def measure(setting: Setting, model: str = EMBEDDED_MODEL, quick: bool = False, seed: int = 0,
            methods: Sequence[str] | None = None) -> dict[str, Any]:
    """Episodes, oracle and every method's advantages, for one setting (JSON-ready): per spoken
    utterance (``utterances``: its problem, episode, agent, whether a model played it and ``A*``)
    and per method the advantage of each of those utterances, in the same order. The statistics
    are :func:`summarise`'s, from this alone."""
    from teamplay.training.play.prefix_values import PrefixValues

    problems, group, oracle_samples = setting.quick_sizes if quick else setting.sizes
    played = rollout(setting, model, quick, seed)
    cfg, task, items, make_env, backend, team = (played.cfg, played.task, played.items, played.make_env,
                                                 played.backend, played.team)
    sampling, runner, episodes, by_id = played.sampling, played.runner, played.episodes, played.by_id
    load_rollout = played.seconds

    t0 = time.perf_counter()
    oracle_tokens = 0
    if setting.noisy_q is not None:
        values, p_hat, mismatches = _noisy_oracle(setting.noisy_q, episodes, items, runner, task, oracle_samples, seed)
        oracle_kind = f"closed form, p from {oracle_samples} fresh answers per problem"
    else:
        oracle = PrefixValues(make_env, backend, sampling, samples=oracle_samples, max_batch=cfg.backend.max_batch,
                              seed=seed + 7919)
        values = oracle.values(episodes, by_id)
        oracle_tokens, p_hat, mismatches = oracle.generated_tokens, None, 0
        oracle_kind = f"Monte Carlo, {oracle_samples} re-executions per prefix"
    oracle_seconds = time.perf_counter() - t0
    true_adv = [np.diff(v) for v in values]
    scripted = set(team.scripted_roles())
    spoken = [(g, t) for g, ep in enumerate(episodes) for t, msg in enumerate(ep.messages) if msg.spoke]
    utterances = {
        "problem": [episodes[g].problem_id for g, _ in spoken],
        "episode": [g for g, _ in spoken],
        "agent": [episodes[g].messages[t].agent for g, t in spoken],
        "model_played": [episodes[g].messages[t].role not in scripted for g, t in spoken],
        "oracle": [round(float(true_adv[g][t]), DIGITS) for g, t in spoken],
    }

    rows = method_rows(played, list(methods or METHODS), seed)
    rewards = np.array([ep.reward for ep in episodes])
    return {
        "setting": setting.name, "problems": problems, "group": group, "episodes": len(episodes),
        "oracle": oracle_kind, "oracle_seconds": oracle_seconds, "oracle_tokens": oracle_tokens,
        "reward_mean": float(rewards.mean()),
        "p_hat_mean": None if p_hat is None else float(np.mean(list(p_hat.values()))),
        "keep_mismatches": mismatches,
        "rollout_tokens_per_episode": float(np.mean([ep.tokens for ep in episodes])),
        "varied_groups": _varied_groups(episodes), "groups": len(items),
        "load_and_rollout_seconds": load_rollout, "methods": rows, "utterances": utterances,
        "true_advantage_mean_abs": float(np.mean(np.abs(np.concatenate(true_adv)))),
    }


def _noisy_oracle(q, episodes, items, runner, task, samples, seed):
    """Closed-form prefix values of the noisy-teammate episodes; ``p`` per problem from ``samples``
    fresh episodes (only their first answers are read). Also counts recorded episodes whose
    reward disagrees with the model (the teammate kept the answer but the reward differs)."""
    from teamplay.agents.backends.scripted import format_answer
    from teamplay.credit.audit.fidelity import noisy_teammate_values
    from teamplay.training.play.prefix_values import first_answer_accuracy

    def correct(ep, item) -> float:
        first = ep.messages[0]
        return 0.0 if first.answer is None else float(task.score(format_answer(first.answer), item))

    # the first answer does not depend on q: every noisy-teammate setting of one run shares it
    key = (tuple(item.id for item in items), samples, seed)
    if key not in _P_HAT:
        _P_HAT[key] = first_answer_accuracy(runner, items, samples, seed + 104729, correct)
    p_hat = _P_HAT[key]
    by_id = {item.id: item for item in items}
    values, mismatches = [], 0
    for ep in episodes:
        c = correct(ep, by_id[ep.problem_id])
        kept = ep.messages[1].answer == ep.messages[0].answer and ep.messages[0].answer is not None
        if kept and float(ep.reward) != c:
            mismatches += 1
        values.append(noisy_teammate_values(c, p_hat[ep.problem_id], q, float(ep.reward)))
    return values, p_hat, mismatches


#: per-problem first-answer accuracy, shared by the noisy-teammate settings of one process
_P_HAT: dict[tuple, dict[str, float]] = {}


def _varied_groups(episodes) -> int:
    rewards: dict[str, list[float]] = {}
    for ep in episodes:
        rewards.setdefault(ep.problem_id, []).append(float(ep.reward))
    return sum(1 for r in rewards.values() if np.ptp(r) > 0)


def _method_row(name, options, episodes, by_id, spoken, task, make_env, backend, sampling, cfg, team,
                team_model, seed) -> dict[str, Any]:
    """One method's advantage on each spoken utterance ``spoken`` ([(episode, message)]), its
    counterfactual tokens and wall time; ``{"skipped": why}`` where it does not apply."""
    from teamplay.credit import CreditBatch, CreditResources, assign, check_credit, get_credit
    from teamplay.errors import ConfigError
    from teamplay.training.play.answer_probability import AnswerProbability
    from teamplay.training.play.listener_logprob import ListenerLogProb
    from teamplay.training.play.replay import RolloutReplayEngine
    from teamplay.training.step.credit_stage import protocol_scorer

    try:
        parsed = check_credit(name, options, cfg.protocol.name, None)
    except ConfigError as exc:
        return {"skipped": str(exc).split(": ", 1)[-1]}
    needs = get_credit(name).requires(parsed)
    if "answer_probability" in needs and team_model is None:
        return {"skipped": "needs the policy's answer probability: no model plays this team"}
    if "listener" in needs and team_model is None:
        return {"skipped": "needs the listener's answer log-probability: no model plays this team"}
    started = time.perf_counter()
    engine = RolloutReplayEngine(make_env, backend, sampling, max_batch=cfg.backend.max_batch, seed=seed) \
        if "replay" in needs else None
    rollout_tokens = sum(ep.tokens for ep in episodes)
    if engine is not None:
        engine.begin_step(0, rollout_tokens)
    answer_probability = AnswerProbability(team_model, team, by_id, task.answer_instruction,
                                           max_prompt_tokens=cfg.backend.max_prompt_tokens) \
        if "answer_probability" in needs else None
    listener = ListenerLogProb(team_model, make_env, by_id, max_prompt_tokens=cfg.backend.max_prompt_tokens) \
        if "listener" in needs else None
    step_rewards = tuple(float(ep.reward) for ep in episodes)
    groups: dict[str, list] = {}
    for ep in episodes:
        groups.setdefault(ep.problem_id, []).append(ep)
    protocol = make_env().protocol  # its rule scores masked transcripts, as in training
    batches = []
    for pid, group in groups.items():
        # every group is credited, as the trainer does: an agent whose advantages in a group are all
        # zero gets no signal from it (for grpo: a group whose rewards are all equal)
        item = by_id[pid]
        resources = CreditResources(
            transcript_scorer=protocol_scorer(protocol, task, item),
            backend=backend, replay=engine, answer_probability=answer_probability, listener=listener,
            batch_rewards=step_rewards)
        batches.append(CreditBatch(episodes=tuple(group), item=item, score=task.score, extract=task.extract,
                                   resources=resources))
    try:
        if engine is not None:  # as the trainer does: every replay of the method in one batch
            engine.prefetch(lambda batch: assign(name, batch, parsed), batches)
        credited = {}
        for batch in batches:
            for ep, adv in zip(batch.episodes, assign(name, batch, parsed), strict=True):
                credited[id(ep)] = adv
    except (ValueError, RuntimeError, ArithmeticError) as exc:
        return {"skipped": f"failed on these episodes: {exc}"}
    seconds = time.perf_counter() - started
    extra = engine.stats.extra_tokens if engine is not None else 0
    advantages = [round(float(credited[id(episodes[g])][t]), DIGITS) for g, t in spoken]
    return {"advantages": advantages, "counterfactual_tokens": extra,
            "tokens_per_episode": (rollout_tokens + extra) / len(episodes), "seconds": seconds}


def summarise(measured: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """A setting's stored measurement with each method's statistics in place of its advantages:
    agreement with ``A*`` (pooled, within-group, Spearman, sign; on every utterance and on the
    model-played ones), the Pearson of per-agent totals, and the paired differences to ``grpo``."""
    from teamplay.credit.audit.fidelity import agreement, paired_difference, pearson

    u = measured["utterances"]
    oracle = np.array(u["oracle"], dtype=np.float64)
    clusters = np.array(u["problem"])
    model = np.array(u["model_played"], dtype=bool)
    agent_of = [f"{g}/{a}" for g, a in zip(u["episode"], u["agent"], strict=True)]
    base = measured["methods"].get("grpo", {}).get("advantages")
    rows = {}
    for label, raw in measured["methods"].items():
        if "skipped" in raw:
            rows[label] = dict(raw)
            continue
        adv = np.array(raw["advantages"], dtype=np.float64)
        fit = agreement(adv, oracle, clusters, threshold=THRESHOLD, seed=seed)
        totals: dict[str, list[float]] = {}
        for key, m, o in zip(agent_of, adv, oracle, strict=True):
            pair = totals.setdefault(key, [0.0, 0.0])
            pair[0] += m
            pair[1] += o
        model_fit = None
        if model.any() and not model.all():  # the trained roles' utterances alone
            model_fit = agreement(adv[model], oracle[model], clusters[model], threshold=THRESHOLD, seed=seed)
        diff = None if base is None or label == "grpo" else \
            paired_difference(adv, np.array(base, dtype=np.float64), oracle, clusters, seed=seed).to_dict()
        rows[label] = {**fit.to_dict(),
                       "agent_pearson": pearson(np.array([t[0] for t in totals.values()]),
                                                np.array([t[1] for t in totals.values()])),
                       "model_pearson": None if model_fit is None else model_fit.pearson,
                       "model_pearson_ci": None if model_fit is None else model_fit.pearson_ci,
                       "vs_grpo": diff, **{k: raw[k] for k in ("counterfactual_tokens", "tokens_per_episode",
                                                               "seconds")}}
    return {**{k: v for k, v in measured.items() if k != "utterances"}, "methods": rows}


# ------------------------------------------------------------------------------------- the table
def _fmt(x: float | None, ci: Sequence[float] | None = None) -> str:
    if x is None or not np.isfinite(x):
        return "–"
    if ci is None or not all(np.isfinite(c) for c in ci):
        return f"{x:.2f}"
    return f"{x:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def _signed(x: float | None, ci: Sequence[float] | None) -> str:
    if x is None or not np.isfinite(x):
        return "–"
    if ci is None or not all(np.isfinite(c) for c in ci):
        return f"{x:+.2f}"
    return f"{x:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"


def markdown_table(results: Sequence[dict[str, Any]]) -> str:
    lines = ["| setting | method | Pearson r [95% CI] | Δr vs grpo [95% CI] | within-group r [95% CI] "
             "| Δ within-group r vs grpo [95% CI] | Spearman ρ [95% CI] | sign agreement, abs(A*) > 0.1 [95% CI] "
             "| variance | agent-total r | LLM utterances r [95% CI] | tokens / episode | seconds |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for label, row in res["methods"].items():
            if "skipped" in row:
                continue
            diff = row.get("vs_grpo") or {}
            lines.append(f"| {res['setting']} | {label} | {_fmt(row['pearson'], row['pearson_ci'])} | "
                         f"{_signed(diff.get('pearson'), diff.get('pearson_ci')) if diff else '—'} | "
                         f"{_fmt(row['within'], row['within_ci'])} | "
                         f"{_signed(diff.get('within'), diff.get('within_ci')) if diff else '—'} | "
                         f"{_fmt(row['spearman'], row['spearman_ci'])} | {_fmt(row['sign'], row['sign_ci'])} "
                         f"({row['clear']}) | {row['variance']:.3f} | {_fmt(row['agent_pearson'])} | "
                         f"{_fmt(row.get('model_pearson'), row.get('model_pearson_ci'))} | "
                         f"{row['tokens_per_episode']:.1f} | {row['seconds']:.1f} |")
    return "\n".join(lines)


def settings_table(results: Sequence[dict[str, Any]]) -> str:
    lines = ["| setting | problems x group | team reward | groups with varied rewards | mean abs(A*) | oracle | "
             "oracle tokens | oracle seconds | methods not applicable |",
             "|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        skipped = sorted(label for label, row in res["methods"].items() if "skipped" in row)
        p = f" (p = {res['p_hat_mean']:.2f})" if res.get("p_hat_mean") is not None else ""
        lines.append(f"| {res['setting']} | {res['problems']} x {res['group']} | {res['reward_mean']:.2f}{p} | "
                     f"{res['varied_groups']}/{res['groups']} | {res['true_advantage_mean_abs']:.3f} | "
                     f"{res['oracle']} | {res['oracle_tokens']} | {res['oracle_seconds']:.0f} | "
                     f"{', '.join(skipped) or 'none'} |")
    return "\n".join(lines)


def headline(results: Sequence[dict[str, Any]]) -> str:
    """Pearson r on the LLM solver's utterances of grpo, continuation and shapley (replay), noisy teammate."""
    parts = []
    for res in results:
        if not res["setting"].startswith("noisy teammate"):
            continue
        cells = [f"{m} {_fmt(res['methods'][m].get('model_pearson'))}"
                 for m in ("grpo", "continuation", "shapley (replay)") if m in res["methods"]]
        parts.append(f"{res['setting'].removeprefix('noisy teammate ')}: {', '.join(cells)}")
    return ("Pearson r with the true advantage on the LLM solver's utterances, noisy teammate, "
            + "; ".join(parts) + ".") if parts else \
        "credit fidelity measured (see the table)."


#: the settings' relative cost at the default sizes (measured on 2 idle cores, one setting per core:
#: chain K=4 699 s, chain K=2 209 s, the four noisy-teammate settings 161 s; a noisy-teammate setting
#: is 1, a scripted one 0.1), by which ``share_out`` balances the workers
COST = {"chain K=4": 17.0, "chain K=2": 5.0, "vote 3": 4.0}


def share_out(chosen: Sequence[Setting], jobs: int) -> list[list[str]]:
    """Setting names split over ``jobs`` worker processes, most expensive first onto the least loaded
    worker. The noisy-teammate settings stay together: they share one estimate of ``p`` per process."""
    units: list[list[Setting]] = []
    noisy = [s for s in chosen if s.noisy_q is not None]
    if noisy:
        units.append(noisy)
    units += [[s] for s in chosen if s.noisy_q is None]
    cost = {s.name: COST.get(s.name, 1.0 if s.uses_model else 0.1) for s in chosen}
    units.sort(key=lambda u: -sum(cost[s.name] for s in u))
    workers: list[list[str]] = [[] for _ in range(max(1, min(jobs, len(units))))]
    for unit in units:
        lightest = min(workers, key=lambda w: sum(cost[n] for n in w))
        lightest += [s.name for s in unit]
    return [w for w in workers if w]


def _measure_in_worker(names: list[str], quick: bool, model: str, methods: Sequence[str] | None,
                       folder: Path, seed: int, threads: int) -> None:
    set_threads(threads)
    run(quick, model, names, methods, folder, seed, jobs=1)


def setting_file(folder: Path, setting: Setting) -> Path:
    """Where a setting's measurement is stored in ``folder``."""
    return folder / (setting.name.replace(" ", "_").replace("=", "") + ".json")


def stored_key(setting: Setting, model: str, quick: bool, seed: int, methods: Sequence[str] | None) -> dict:
    """What a stored measurement must match to be reused (else the setting is measured afresh)."""
    return {"model": model, "quick": quick, "seed": seed, "methods": list(methods or METHODS), "version": VERSION,
            "sizes": list(setting.quick_sizes if quick else setting.sizes)}


def run(quick: bool = False, model: str = EMBEDDED_MODEL, settings: Sequence[str] | None = None,
        methods: Sequence[str] | None = None, output: Path | None = None, seed: int = 0,
        jobs: int | None = None, threads: int = 1) -> Result:
    """Measure every setting (stored per setting under ``output``; stored ones are reused).

    ``jobs`` > 1 measures the settings in that many worker processes (``threads`` torch threads
    each), then reads their stored results; the numbers are the same as with one process (every
    setting has its own seeds). None: ``DEFAULT_JOBS`` for the full run, 1 for ``quick``. The
    default ``output`` of a full run is the committed ``RESULTS``."""
    chosen = [s for s in SETTINGS if settings is None or s.name in settings]
    unknown = sorted(set(settings or ()) - {s.name for s in SETTINGS})
    if unknown:
        raise SystemExit(f"error: unknown setting(s) {unknown}; choose from {[s.name for s in SETTINGS]}")
    bad = sorted(set(methods or ()) - set(LABELS))
    if bad:
        raise SystemExit(f"error: unknown method label(s) {bad}; choose from {list(LABELS)}")
    from teamplay.atomic import write_atomically

    jobs = (1 if quick else DEFAULT_JOBS) if jobs is None else jobs
    if jobs < 1:
        raise SystemExit(f"error: jobs must be >= 1, got {jobs}")
    folder = output or (Path("runs") / "credit_fidelity-quick" if quick else RESULTS)
    folder.mkdir(parents=True, exist_ok=True)
    # the committed run: every setting and method at full size into RESULTS, recorded in run.json
    committed = folder == RESULTS and settings is None and methods is None and not quick
    if committed:
        from benchmarks.common import machine_info, machine_line

        line = machine_line(machine_info())
    wall = time.perf_counter()
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        groups = share_out(chosen, jobs)
        # spawn: a forked child would inherit the parent's torch thread pool and any loaded model
        with ProcessPoolExecutor(len(groups), mp_context=multiprocessing.get_context("spawn")) as pool:
            for done in [pool.submit(_measure_in_worker, g, quick, model, methods, folder, seed, threads)
                         for g in groups]:
                done.result()
    measured = []
    for setting in chosen:
        path = setting_file(folder, setting)
        key = stored_key(setting, model, quick, seed, methods)
        if path.exists():
            stored = json.loads(path.read_text(encoding="utf-8"))
            if stored.get("key") == key:
                measured.append(stored["result"])
                print(f"# {setting.name}: reused {path}", flush=True)
                continue
        t0 = time.perf_counter()
        result = measure(setting, model=model, quick=quick, seed=seed, methods=methods)
        result["seconds"] = time.perf_counter() - t0
        text = json.dumps({"key": key, "result": result}, indent=None, separators=(",", ":"), default=float)
        write_atomically(path, text + "\n")
        print(f"# {setting.name}: {result['seconds']:.0f} s", flush=True)
        # the statistics are always computed from what was stored (rounded advantages included)
        measured.append(json.loads(text)["result"])
    result = fidelity_result(measured, model, seed, jobs, time.perf_counter() - wall)
    if committed:
        info = {"command": "python -m benchmarks credit_fidelity", "machine": line, "model": model, "seed": seed,
                "jobs": jobs, "wall_seconds": result.data["wall_seconds"]}
        write_atomically(RESULTS / "run.json", json.dumps(info, indent=1) + "\n")
        result.data["region"] = stored_region()  # what --table-only writes, from the committed files
    return result


def fidelity_result(measured: Sequence[dict[str, Any]], model: str, seed: int, jobs: int,
                    wall_seconds: float | None, stored: tuple[str, str] | None = None) -> Result:
    """The tables, notes and headline of stored measurements (``--table-only`` gives the same).
    ``wall_seconds`` None: the wall time is not stated; ``stored``: (folder, command that rewrites the
    table) when not the committed run's."""
    results = [summarise(m, seed) for m in measured]
    table = settings_table(results) + "\n\n" + markdown_table(results)
    total = sum(r.get("seconds", 0.0) for r in results)
    folder, command = stored or ("benchmarks/results/credit_fidelity/",
                                 "python -m benchmarks.credit_fidelity --table-only")
    wall = "" if wall_seconds is None else (
        f"; the last invocation took {wall_seconds / 60:.1f} minutes of wall time with {jobs} "
        "process(es) (less where it reused stored settings)")
    notes = (
        f"Model {model}, arith sums of two numbers up to {TASK_OPTIONS['max_operand']}, answer-first replies "
        f"('{REPLY_PREFIX}', {NEW_TOKENS} new tokens), temperature 1, seed {seed}; {total / 60:.1f} minutes of "
        f"measurement in all{wall}. A* = E[R | h, u] - E[R | h] per spoken "
        "utterance; every method runs on the same "
        "episodes with its default options and its own replay seed (independent of the oracle's); every group "
        "is credited (the trainer's per-agent zero-variance rule: grpo gives 0 to a group whose rewards are "
        "all equal). 'within-group r': Pearson after centring the method's and the oracle's advantages on "
        "their problem's mean. 'Δ ... vs grpo': the method's statistic minus grpo's on the same utterances, "
        "its interval from the same resamples. Intervals: 95% bootstrap over "
        "problems (1000 resamples); '–': undefined (constant advantages). The number after a sign "
        "agreement is how many utterances have |A*| > 0.1. gspo gives grpo's advantages and is not repeated. "
        f"Every utterance's A* and every method's advantage are committed (`{folder}`); "
        f"`{command}` recomputes this table from them.",
    )
    return Result("credit_fidelity", table, headline(results), None, notes,
                  {"results": results, "wall_seconds": wall_seconds})


def stored_measurements(folder: Path = RESULTS) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every setting's committed measurement, in ``SETTINGS`` order, and the full run's ``run.json``
    (command, machine, model, seed, jobs, wall seconds)."""
    info_path = folder / "run.json"
    if not info_path.is_file():
        raise SystemExit(f"error: no stored credit fidelity run in {folder} (run.json missing); "
                         "run `python -m benchmarks credit_fidelity` first")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    measured = []
    for setting in SETTINGS:
        path = setting_file(folder, setting)
        if not path.is_file():
            raise SystemExit(f"error: the stored run lacks setting {setting.name!r} ({path.name})")
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored.get("key") != stored_key(setting, info["model"], False, info["seed"], None):
            raise SystemExit(f"error: {path.name} was measured with other settings than run.json's; "
                             "measure it again")
        measured.append(stored["result"])
    return measured, info


def stored_region(folder: Path = RESULTS) -> str:
    """BENCHMARKS.md's credit_fidelity region, from the stored measurements alone."""
    measured, info = stored_measurements(folder)
    result = fidelity_result(measured, info["model"], info["seed"], info["jobs"], info["wall_seconds"])
    return result.markdown(info["command"], info["machine"])


#: influence, registered after the committed run (whose episodes this machine does not reproduce:
#: another CPU samples other tokens), measured beside grpo and continuation on fresh episodes of two
#: settings with an oracle: the solver read by a noisy teammate (closed form) and a chain of two
#: (Monte Carlo), at the full run's sizes, into ``INFLUENCE_RESULTS``
INFLUENCE_RESULTS = RESULTS.parent / "credit_fidelity_influence"
INFLUENCE_SETTINGS = ("noisy teammate q=0.5", "chain K=2")
INFLUENCE_METHODS = ("grpo", "continuation", "influence")
INFLUENCE_COMMAND = "python -m benchmarks.credit_fidelity --influence"


def influence_run(model: str = EMBEDDED_MODEL, seed: int = 0) -> str:
    """Measure (or reuse) ``INFLUENCE_SETTINGS`` x ``INFLUENCE_METHODS`` into ``INFLUENCE_RESULTS``, record
    ``run.json`` (command, machine, model, seed) and return the region (``influence_region``)."""
    from benchmarks.common import machine_info, machine_line
    from teamplay.atomic import write_atomically

    run(False, model, INFLUENCE_SETTINGS, INFLUENCE_METHODS, INFLUENCE_RESULTS, seed, jobs=1)
    info = {"command": INFLUENCE_COMMAND, "machine": machine_line(machine_info()), "model": model, "seed": seed}
    write_atomically(INFLUENCE_RESULTS / "run.json", json.dumps(info, indent=1) + "\n")
    return influence_region()


def influence_region(folder: Path = INFLUENCE_RESULTS) -> str:
    """BENCHMARKS.md's credit_fidelity_influence region, from the stored measurements alone."""
    info = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    measured = []
    for setting in (s for s in SETTINGS if s.name in INFLUENCE_SETTINGS):
        stored = json.loads(setting_file(folder, setting).read_text(encoding="utf-8"))
        if stored.get("key") != stored_key(setting, info["model"], False, info["seed"], INFLUENCE_METHODS):
            raise SystemExit(f"error: {setting_file(folder, setting).name} was measured with other settings; "
                             f"run {INFLUENCE_COMMAND} again")
        measured.append(stored["result"])
    result = fidelity_result(measured, info["model"], info["seed"], 1, None,
                             (f"benchmarks/results/{folder.name}/", INFLUENCE_COMMAND))
    result = dataclasses.replace(result, name="credit_fidelity_influence",
                                 headline=influence_headline(result.data["results"]))
    return result.markdown(info["command"], info["machine"])


def influence_headline(results: Sequence[dict[str, Any]]) -> str:
    """Pearson r with A* of influence against grpo's, per setting, with the paired difference."""
    parts = []
    for res in results:
        row = res["methods"]["influence"]
        diff = row["vs_grpo"]
        parts.append(f"{res['setting']}: {_fmt(row['pearson'], row['pearson_ci'])} against grpo's "
                     f"{_fmt(res['methods']['grpo']['pearson'])} (Δ {_signed(diff['pearson'], diff['pearson_ci'])})")
    return "Pearson r of influence with the true advantage, " + "; ".join(parts) + "."


def main(argv: Sequence[str] | None = None) -> None:
    from benchmarks.common import DEFAULT_OUTPUT, write_regions

    parser = argparse.ArgumentParser(prog="python -m benchmarks.credit_fidelity", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke sizes; writes no BENCHMARKS.md region")
    parser.add_argument("--settings", nargs="*", default=None, help="setting names (default: all)")
    parser.add_argument("--methods", nargs="*", default=None,
                        help=f"method labels (default: all but {list(LATER_METHODS)}): {list(LABELS)}")
    parser.add_argument("--model", default=EMBEDDED_MODEL)
    parser.add_argument("--output", type=Path, default=None, help="folder of the stored per-setting results")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--jobs", type=int, default=None,
                        help=f"worker processes measuring settings in parallel (default {DEFAULT_JOBS}; "
                             "1 with --quick)")
    parser.add_argument("--table-only", action="store_true",
                        help="measure nothing: write the table of the committed measurements")
    parser.add_argument("--influence", action="store_true",
                        help="influence beside grpo and continuation on two settings (INFLUENCE_SETTINGS), "
                             "stored in benchmarks/results/credit_fidelity_influence/")
    args = parser.parse_args(argv)
    if args.influence:
        set_threads(args.threads)
        region = influence_run(args.model)
        print(region)
        write_regions(DEFAULT_OUTPUT, {"credit_fidelity_influence": region})
        return
    if args.table_only:
        region = stored_region()
        print(region)
        write_regions(DEFAULT_OUTPUT, {"credit_fidelity": region})
        return
    set_threads(args.threads)
    result = run(args.quick, args.model, args.settings, args.methods, args.output, jobs=args.jobs,
                 threads=args.threads)
    print(result.table, *result.notes, result.headline, sep="\n\n")
    if "region" in result.data:
        write_regions(DEFAULT_OUTPUT, {"credit_fidelity": result.data["region"]})


if __name__ == "__main__":
    main()
