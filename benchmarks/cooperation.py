"""Where credit paid: credit methods compared in settings where a team must cooperate, and the
additive team's result rerun with the controls an audit asked for.

Settings (the embedded model, arith-sized sums with operands up to 40, answer-first replies "The
answer is ..." of 6 new tokens, temperature 0.7 in training, greedy held-out evaluation, LoRA r 8
on q and v, lr 5e-4: the credit arena's fixed setting, ``benchmarks.credit_arena``):

* ``relay_k3``: hidden information. Two informants (one shared adapter) each see one operand of a
  sum, the answerer (its own adapter) sees none and must read their messages; the team reward is
  the answerer's correctness. ``grpo`` (floor) against masking ``shapley`` (its characteristic
  function reads the relay as the conjunctive game a faithful answerer plays: an informant that
  states its operand gets a share of a right answer, a silent one none) and ``continuation`` (C3's
  class: each message valued by replaying the rest of the episode from it). No closed-form ceiling:
  the ``oracle``'s ``relay`` form holds only for a faithful (scripted) answerer, and a trained
  answerer that misreads right messages breaks it (the oracle refuses such an episode).
* ``split_k4_fair`` / ``split_k8_fair``: the additive team of the credit arena (K solvers of one
  shared adapter, each on its own sum, team reward the fraction right), rerun with a held-out set an
  audit can trust: the problem space is split by the sum's unordered operands, so no held-out sum
  has its commuted twin (``b + a``) in the training pool, and the held-out sub-problems are all
  distinct (160 answers at every K); and every method takes one optimiser step per training step
  (the minibatch holds the step's 32 answers), so methods that drop groups do not take fewer steps.

What differs from the arena's tables: next to each paired t interval stands an exact paired test
(the sign-flip permutation test of the mean difference: with n seeds its smallest two-sided p is
2 / 2^n, 0.0625 at 5 seeds), the MDE, and the seeds themselves (``benchmarks/results/cooperation/``).
Predictions are written in ``benchmarks/results/cooperation/PREDICTIONS.md`` before a setting
runs (git dates them).

    python -m benchmarks.cooperation --setting relay_k3 --parallel 2     # train (resumable), store, table
    python -m benchmarks.cooperation --setting relay_k3 --table-only    # the table from the stored seeds
    python -m benchmarks.cooperation --quick --model PATH               # a smoke run: writes nothing
    python -m benchmarks.cooperation --setting chain_k4 --seeds 8 --parallel 2  # the seeds it lacks, added

Runs are a ``teamplay sweep`` per setting (``runs/cooperation-<setting>``): the same command again
skips finished runs and resumes an interrupted one, seed by seed (a stopped comparison holds whole
seeds, every method paired on them). ``--collect`` stores the seeds a stopped sitting finished, and
``--seeds N`` in a later sitting trains only the seeds below N the stored comparison lacks and adds
them to it, so a comparison longer than one sitting is split over several.
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.arena_results import load_result, machine_summary, mde, merge_results, save_result, seeds_held
from benchmarks.common import EMBEDDED_MODEL, Result, set_threads
from benchmarks.credit_arena import (
    ARENA_METHODS,
    CHAIN,
    LR,
    NEW_TOKENS,
    REPLY_PREFIX,
    SOLVER_PROMPT,
    TASK,
    TEMPERATURE,
    _cell,
    _values,
    labels_of,
    mean_ci,
    paired_difference,
    step_tokens,
    train_sweep,
)
from teamplay.report.sweep_page import run_learning_curve

RESULTS = Path(__file__).resolve().parent / "results" / "cooperation"

#: method label -> credit section (the arena's labels)
METHODS: dict[str, dict[str, Any]] = dict(ARENA_METHODS)

#: the split settings' task with twins kept in one split (``ArithTask(twins_together=True)``)
FAIR_TASK = {**TASK, "twins_together": True}
#: held-out answers of the split settings: the test split holds 164 distinct sums at these operands
#: with twins together, so 160 is every K's largest multiple of 4 and 8 that fits
FAIR_HELDOUT_ANSWERS = 160
#: answers (split) or episodes x messages per training step; one minibatch holds them all, so every
#: method takes one optimiser step per training step (none when it drops every group)
ANSWERS_PER_STEP = 32

#: the chain's first sitting: the methods without replays (one forward pass of credit or none).
#: ``dr_mas`` is not among them: every solver speaks once in every episode of a chain, so its
#: per-agent statistics are the group's and it equals ``grpo`` message for message
CHAIN_METHODS = ("grpo", "shapley (masking)", "loto (masking)")
#: the warm relay's first sitting: every method without replays that takes the relay (``dr_mas``
#: differs from grpo here: the two informants share an adapter, the answerer has its own)
RELAY_WARM_METHODS = ("grpo", "dr_mas", "shapley (masking)", "loto (masking)", "influence")
#: setting -> (team size K, method labels run by default)
SETTINGS: dict[str, tuple[int, tuple[str, ...]]] = {
    "relay_k2": (2, ("grpo", "shapley (masking)", "continuation")),
    "relay_k3": (3, ("grpo", "shapley (masking)", "continuation")),
    "split_k4_fair": (4, ("grpo", "oracle")),
    "split_k8_fair": (8, ("grpo", "oracle")),
    # COSAC's sequential chain, compared with every method that needs no replay first (the replay
    # methods, whose runs cost 2-4x the tokens, in a sitting of their own); no closed-form oracle
    "chain_k4": (4, CHAIN_METHODS),
    "chain_k8": (8, CHAIN_METHODS),
    # the relay of three after a teacher warm start (WARM_START), first sitting: the methods with one
    # forward pass of credit or none (the replay methods, continuation and shapley (replay), in a
    # sitting of their own, as the chain's); and its no-channel arm, grpo alone: is the channel needed?
    "relay_k3_warm": (3, RELAY_WARM_METHODS),
    "relay_k3_warm_nochannel": (3, ("grpo",)),
}
#: the warm start of the warm relay settings (calibrated: benchmarks/results/cooperation/probes/
#: relay_k3_warm.yaml): 64 teacher episodes with plain answers (a boxed two-digit sum does not fit 6
#: tokens), 24 steps of 8 messages; the methods of one seed share it (``warm_start.cache``)
WARM_START = {"source": "teacher", "episodes": 64, "steps": 24, "batch_size": 8, "lr": LR,
              "checkpoint_every": 12, "answer_format": "plain"}
#: settings trained after WARM_START, and those of them whose messages are all withheld (the
#: no-channel arm: the same warm start, since teachers demonstrate through the channel)
WARM_SETTINGS = frozenset({"relay_k3_warm", "relay_k3_warm_nochannel"})
NO_CHANNEL = frozenset({"relay_k3_warm_nochannel"})

#: held-out sums of the chain settings: distinct test sums (operands up to 40), none in the training pool
CHAIN_HELDOUT = 200
#: (steps, problems per step, group, held-out problems, seeds, eval_every) by size; relay problems are
#: whole sums, split problems are tuples of K (the sizes divide by K)
SIZES = {
    "relay_k2": {"quick": (2, 2, 2, 4, 2, 1), "default": (12, 4, 4, 100, 6, 4)},
    "relay_k3": {"quick": (2, 2, 2, 4, 2, 1), "default": (12, 4, 4, 100, 6, 4)},
    # the relay_k3 sizes at 8 paired seeds
    "relay_k3_warm": {"quick": (2, 2, 2, 4, 2, 1), "default": (12, 4, 4, 100, 8, 4)},
    "relay_k3_warm_nochannel": {"quick": (2, 2, 2, 4, 2, 1), "default": (12, 4, 4, 100, 8, 4)},
    "split_k4_fair": {"quick": (2, 1, 2, 2, 2, 1), "default": (12, 2, 4, FAIR_HELDOUT_ANSWERS // 4, 6, 4)},
    "split_k8_fair": {"quick": (2, 1, 2, 1, 2, 1), "default": (12, 1, 4, FAIR_HELDOUT_ANSWERS // 8, 6, 4)},
    # the arena's chain sizes (one sum for the whole chain), at 8 paired seeds: the exact test's
    # smallest two-sided p is then 2 / 2^8 = 0.008
    "chain_k4": {"quick": (2, 1, 2, 2, 2, 1), "default": (12, 4, 4, CHAIN_HELDOUT, 8, 4)},
    "chain_k8": {"quick": (2, 1, 2, 2, 2, 1), "default": (12, 2, 4, CHAIN_HELDOUT, 8, 4)},
}
#: the relay's largest operand: at K = 2 the one informant's number is the answer, so the problem space
#: is the operands themselves; 999 leaves about 200 test numbers (40 would leave 8)
RELAY_MAX_OPERAND = {"relay_k2": 999, "relay_k3": TASK["max_operand"], "relay_k3_warm": TASK["max_operand"],
                     "relay_k3_warm_nochannel": TASK["max_operand"]}
#: settings whose held-out evaluation samples at the training temperature instead of greedy decoding:
#: greedy, the untrained K = 2 relay is already right on all 100 held-out numbers (the informant
#: states its number, the answerer copies it), sampled at 0.7 on 37.5% of training numbers, so only
#: the sampled team has room to learn to inform
SAMPLED_EVAL = frozenset({"relay_k2"})
#: the information-use measure of the relay tables: withholding an informant's message turns a right
#: team answer wrong (the message was needed), a share of the informants' held-out messages
NEEDED = "cooperation/withholding/per_role/informant/right_to_wrong"

#: the chain's cooperation measures, before and after training: what a later solver does with the
#: running answer it reads (they do not restate team accuracy: each is a share of the messages that
#: read a right, or a wrong, running answer), and what withholding one solver's answer changes
CHAIN_COOPERATION = {
    "cooperation/corrections_per_message": "Corrections per message (a solver's answer right where the running "
                                           "answer it read was wrong, per message that could change it)",
    "cooperation/harms_per_message": "Harms per message (a solver's answer wrong where the running answer it read "
                                     "was right)",
    "cooperation/team_minus_best_member": "The team against its best member (team accuracy minus the best solver's "
                                          "own accuracy)",
    "cooperation/withholding/information_use": "Information use (withholding one solver's answer changes the final "
                                               "answer, a share of the withheld answers)",
}
#: at K = 2 the informant's own answer is the number it holds: how often it states it
STATES = "role_accuracy/informant"

#: the learning curve's fixed subset of the held-out set (answers)
CURVE_ANSWERS = 64


def lora() -> dict[str, Any]:
    return {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}


def base_config(setting: str, model: str, sizes: tuple[int, ...]) -> dict[str, Any]:
    """The config every method of ``setting`` shares (only ``credit`` and ``seed`` vary)."""
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; settings: {', '.join(SETTINGS)}")
    k = SETTINGS[setting][0]
    steps, problems, group, heldout, _, eval_every = sizes
    common = {
        "model": {"name": model, "lora": lora()},
        "rollout": {"problems_per_step": problems, "group_size": group},
        "backend": {"max_prompt_tokens": 512},
        "sampling": {"max_new_tokens": NEW_TOKENS, "temperature": TEMPERATURE},
        "eval_sampling": {"max_new_tokens": NEW_TOKENS,
                          **({"temperature": TEMPERATURE} if setting in SAMPLED_EVAL else {})},
        "steps": steps, "eval_every": eval_every,
        "checkpoint_every": max(1, steps // 2), "keep_checkpoints": 1,
        "tensorboard": False, "log_episodes": 2,
    }
    if setting.startswith("relay"):
        task = {"n_operands": k - 1, "max_operand": RELAY_MAX_OPERAND[setting], "twins_together": True}
        return {
            **common,
            "task": {"name": "relay_sum", "split": "train", "options": task, "limit": 2000},
            "eval_task": {"name": "relay_sum", "split": "test", "limit": heldout, "distinct": True, "options": task},
            "protocol": {"name": "relay", "options": {"n_agents": k, "reply_prefix": REPLY_PREFIX},
                         **({"channel": False} if setting in NO_CHANNEL else {})},
            **({"warm_start": dict(WARM_START)} if setting in WARM_SETTINGS else {}),
            "team": {"roles": [{"name": "informant", "count": k - 1}, {"name": "answerer"}]},
            # an episode is K messages; one minibatch holds a whole step's
            "optim": {"lr": LR, "minibatch_size": problems * group * k},
            "eval_curve_limit": min(CURVE_ANSWERS // 2, heldout),
            # information use before and after training: each informant's message withheld in turn
            "eval_withhold_messages": True,
        }
    if setting.startswith("chain"):
        return {
            **common,
            "task": {"name": "arith", "split": "train", "options": TASK, "limit": 2000},
            "eval_task": {"name": "arith", "split": "test", "limit": heldout, "distinct": True, "options": TASK},
            "protocol": {"name": "sequential", "options": {**CHAIN, "n_agents": k}},
            "team": {"roles": [{"name": "solver", "prompt": SOLVER_PROMPT, "count": k}]},
            # an episode is K messages; one minibatch holds a whole step's
            "optim": {"lr": LR, "minibatch_size": problems * group * k},
            "eval_curve_limit": min(CURVE_ANSWERS, heldout),
            # information use before and after training: each solver's answer withheld in turn
            "eval_withhold_messages": True,
        }
    task = {"task": "arith", "k": k, "options": FAIR_TASK, "distinct": True}
    return {
        **common,
        "task": {"name": "tuples", "split": "train", "options": {**task, "distinct": False}, "limit": 2000},
        "eval_task": {"name": "tuples", "split": "test", "limit": heldout, "options": task},
        "protocol": {"name": "split", "options": {"n_agents": k, "reply_prefix": REPLY_PREFIX,
                                                  "instruction": "Give the answer."}},
        "team": {"roles": [{"name": "solver", "prompt": SOLVER_PROMPT, "count": k}]},
        "optim": {"lr": LR, "minibatch_size": ANSWERS_PER_STEP},
        "eval_curve_limit": max(1, min(CURVE_ANSWERS // k, heldout)),
    }


# ------------------------------------------------------------------------------------- statistics
def sign_flip_p(differences: Sequence[float]) -> float:
    """The exact two-sided p of the paired sign-flip (permutation) test of the mean difference: the
    share of the 2^n sign assignments whose |mean| is at least the observed one (ties count, with a
    relative slack of 1e-9 for float sums). Needs no normality: under the null that a method does
    not matter, each seed's difference is as likely positive as negative. NaN with no differences.

    >>> sign_flip_p([0.1, 0.2, 0.3, 0.4, 0.5])  # every seed up: only 2 of 32 signings reach it
    0.0625
    >>> sign_flip_p([0.0, 0.0])                 # no difference at all: p = 1
    1.0
    """
    n = len(differences)
    if n == 0:
        return math.nan
    observed = abs(sum(differences))
    slack = 1e-9 * max(1.0, sum(abs(d) for d in differences))
    hits = sum(1 for signs in itertools.product((1, -1), repeat=n)
               if abs(sum(s * d for s, d in zip(signs, differences, strict=True))) >= observed - slack)
    return hits / 2 ** n


def comparison(result: dict[str, Any], label: str, key: str = "heldout/team_accuracy") -> dict[str, float]:
    """``label`` minus grpo on ``key``, paired over the seeds both hold: mean, 95% t half-width,
    exact sign-flip p, MDE (80% power) and n."""
    mine, base = _values(result, label, key), _values(result, "grpo", key)
    both = sorted(set(mine) & set(base))
    diffs = [mine[s] - base[s] for s in both]
    mean, half, n = paired_difference(mine, base)
    return {"mean": mean, "half": half, "p": sign_flip_p(diffs), "mde": mde(diffs), "n": n}


def floor(result: dict[str, Any]) -> dict[str, float]:
    """grpo's held-out gain over the untrained team (the same seeds' evaluation before training):
    mean, 95% t half-width, exact sign-flip p, n."""
    gains = list(_values(result, "grpo", "heldout_gain/team_accuracy").values())
    mean, half = mean_ci(gains)
    return {"mean": mean, "half": half, "p": sign_flip_p(gains), "n": len(gains)}


def _p(p: float) -> str:
    return "—" if not math.isfinite(p) else f"{p:.3f}"


def relay_start(setting: str) -> str:
    """What a relay setting starts from and withholds, as a clause of its table's notes."""
    if setting not in WARM_SETTINGS:
        return ""
    ws = WARM_START
    start = (f"; every method starts from a teacher warm start ({ws['episodes']} teacher episodes with plain "
             f"answers, {ws['steps']} steps of {ws['batch_size']} messages, shared by a seed's methods)")
    return start + ("; no channel: every message is withheld from the other agents in training and "
                    "evaluation (the teachers of the warm start read each other)" if setting in NO_CHANNEL else "")


def table(result: dict[str, Any]) -> tuple[str, list[str], str]:
    """(table, notes, headline) of one setting, from its stored result alone."""
    setting = result["setting"]
    header = ["method", "seeds", "team acc.", "Δ vs grpo (paired t)", "exact p (sign-flip)", "MDE (80%)",
              "curve area", "Δ curve area vs grpo", "optimiser steps", "generated tokens"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    acc = "heldout/team_accuracy"
    for label in labels_of(result):
        accuracy = mean_ci(list(_values(result, label, acc).values()))
        cells = [label, str(len(result["per_seed"][label])), _cell(*accuracy)]
        if label == "grpo":
            cells += ["—", "—", "—"]
        else:
            c = comparison(result, label)
            cells += [_cell(c["mean"], c["half"], signed=True), _p(c["p"]),
                      _cell(c["mde"], math.nan) if c["n"] >= 2 else "—"]
        cells.append(_cell(*mean_ci(list(_values(result, label, "curve_area").values()))))
        if label == "grpo":
            cells.append("—")
        else:
            area = comparison(result, label, "curve_area")
            cells.append(f"{_cell(area['mean'], area['half'], signed=True)} (p {_p(area['p'])})")
        cells.append(_cell(*mean_ci(list(_values(result, label, "train/updates").values())), 1))
        cells.append(_cell(*mean_ci(list(_values(result, label, "budget/generated_tokens").values())), 0))
        lines.append("| " + " | ".join(cells).replace(" (n=1)", "") + " |")
    f = floor(result)
    k = SETTINGS[setting][0]
    steps, problems, group, heldout, _, eval_every = result["sizes"]
    done = sum(len(v) for v in result["per_seed"].values())
    what = (f"K = 2: the informant sees a number from 1 to {RELAY_MAX_OPERAND[setting]}, the answerer (its own "
            "adapter) sees none and must give it; team reward the answerer's correctness. "
            f"{steps} steps of {problems} numbers x {group} episodes; held-out: {heldout} distinct numbers, none "
            "in the training pool" if setting == "relay_k2" else
            f"K = {k}: {k - 1} informants (one shared adapter) each see one operand of a sum (operands up to "
            f"{RELAY_MAX_OPERAND[setting]}), the answerer (its own adapter) sees none; team reward the answerer's "
            f"correctness. {steps} steps of {problems} sums x {group} episodes; held-out: {heldout} distinct sums "
            f"(no reordering of one in the training pool){relay_start(setting)}" if setting.startswith("relay") else
            f"K = {k} solvers of one shared adapter answer one sum (operands up to {TASK['max_operand']}) in turn, "
            "each reading the earlier answers and keeping or revising the running one; team reward the last "
            f"answer's score. {steps} steps of {problems} sums x {group} episodes; held-out: {heldout} distinct test "
            "sums" if setting.startswith("chain") else
            f"K = {k} solvers of one shared adapter, each on its own sum (operands up to {TASK['max_operand']}), "
            f"team reward the fraction right. {steps} steps of {problems} tuples x {group} episodes "
            f"({problems * k * group} answers per step); held-out: {heldout} tuples ({heldout * k} distinct answers, "
            "none with its commuted twin in the training pool)")
    decoding = (f"sampled at temperature {TEMPERATURE} (one sample a problem, the seed fixed)"
                if setting in SAMPLED_EVAL else "greedy")
    notes = [
        f"Setting `{setting}`: {what}; "
        f"{decoding}"
        f", every {eval_every} steps on a fixed subset and after training. "
        f"One minibatch per training step (one optimiser step, none when every group is dropped); LoRA r 8 on q "
        f"and v, lr {LR}, {NEW_TOKENS} new tokens, temperature {TEMPERATURE}; the base model in "
        f"{result.get('dtype') or model_dtype(result['config'])}. {done} of {result['runs_total']} "
        "runs finished. Cells: mean ± 95% t interval over seeds; Δ: mean of per-seed differences with its "
        "t interval; exact p: the two-sided sign-flip test of the same differences (smallest possible at n "
        "seeds: 2 / 2^n); MDE: the paired difference a two-sided 95% t test finds with 80% power at these seeds.",
        f"Floor: grpo's gain over the untrained team {_cell(f['mean'], f['half'], signed=True)} (exact p "
        f"{_p(f['p'])}, {f['n']} seeds).",
    ]
    again_path = result_path(setting, result.get("size", "default"), rerun=True)
    stored_default = result.get("size", "default") == "default" and "--methods" not in result.get("command", "")
    if again_path.is_file() and stored_default:
        spread = within_seed_spread(result, load_result(again_path))
        if spread:
            notes.append("Within-seed spread (`--rerun`: one seed trained again, every method): " + "; ".join(
                f"{label} seed {seed}: {a:.3f} then {b:.3f} ({b - a:+.3f})"
                for label, (seed, a, b) in sorted(spread.items()))
                + (". Rerun on the machine and thread count of the stored seed, it reproduced it exactly: a spread "
                   "between sittings (the arena's split_k8 moved by about 0.05 a seed) comes from another "
                   "machine's kernels or "
                   "thread count, not from the run itself." if all(a == b for _, a, b in spread.values()) else
                   ". A rerun moves a seed by this much with nothing changed (thread timing, another machine's "
                   "kernels)."))
    informing = information_use(result) if setting.startswith("relay") else []
    if setting.startswith("chain"):
        for key, what in CHAIN_COOPERATION.items():
            moved = information_use(result, key)
            if moved:
                notes.append(f"{what} (held-out, greedy), untrained -> trained, with the paired change (t interval, "
                             "exact p): " + "; ".join(moved) + ".")
    if informing:
        notes.append(f"Information use (held-out, {'sampled' if setting in SAMPLED_EVAL else 'greedy'}; an "
                     "informant's message withheld, the answerer's turn played again): the share of informant "
                     "messages whose withholding turns a right team answer "
                     "wrong, untrained -> trained, with the paired change (t interval, exact p): "
                     + "; ".join(informing) + ".")
    stating = information_use(result, STATES) if setting == "relay_k2" else []
    if stating:
        notes.append("The informant states its number (its message's answer is the reference), untrained -> "
                     "trained: " + "; ".join(stating) + ".")
    parts = []
    for label in labels_of(result):
        if label != "grpo":
            c = comparison(result, label)
            parts.append(f"{label} - grpo {_cell(c['mean'], c['half'], signed=True)} (p {_p(c['p'])})")
    headline = f"{setting}: grpo gain {_cell(f['mean'], f['half'], signed=True)}; " + "; ".join(parts) + "."
    return "\n".join(lines), notes, headline.replace(" (n=1)", "")


def information_use(result: dict[str, Any], key: str = NEEDED) -> list[str]:
    """Per method, ``key`` before and after training (untrained -> trained over the seeds that hold
    both; by default ``NEEDED``: how often an informant's message was needed), with the paired change;
    empty where no run measured it (the split settings)."""
    out = []
    for label in labels_of(result):
        before = _values(result, label, "untrained/" + key)
        after = _values(result, label, "heldout/" + key)
        seeds = sorted(set(before) & set(after))
        if not seeds:
            continue
        diffs = [after[s] - before[s] for s in seeds]
        change = mean_ci(diffs)
        then, now = _cell(*mean_ci([before[s] for s in seeds])), _cell(*mean_ci([after[s] for s in seeds]))
        out.append(f"{label} {then} -> {now}"
                   f" ({_cell(*change, signed=True)}, p {_p(sign_flip_p(diffs))})")
    return [line.replace(" (n=1)", "") for line in out]


# ------------------------------------------------------------------------------------- running
def run_setting(setting: str, model: str = EMBEDDED_MODEL, size: str = "default", folder: Path | None = None,
                only: Sequence[str] | None = None, parallel: int = 1, train: bool = True,
                rerun: int | None = None, tag: str | None = None, seeds: Sequence[int] | None = None
                ) -> dict[str, Any]:
    """Train every method x seed of ``setting`` (seed by seed, resuming the sweep folder) and collect
    the per-seed results of the runs that finished. ``rerun``: train that one seed again, every
    method, in a folder of its own (the within-seed spread: how far one seed's result moves when
    it is simply run again). ``tag``: the name of a ``--methods`` comparison (its folder's and
    file's suffix; ``more`` when ``only`` is given without one). ``seeds``: train these seeds only
    (the ones a stored comparison lacks, ``--seeds N``), in a sweep folder of their own."""
    from teamplay.training.experiments.sweep import plan, run_metrics

    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; settings: {', '.join(SETTINGS)}")
    sizes = SIZES[setting][size]
    base = base_config(setting, model, sizes)
    labels = tuple(only) if only is not None else SETTINGS[setting][1]
    unknown = sorted(set(labels) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}; methods: {', '.join(METHODS)}")
    if "grpo" not in labels:
        raise ValueError("every comparison is against grpo: keep grpo in --methods")
    if only is not None and tag is None:
        tag = "more"
    # a --methods comparison is a sweep of its own (a sweep folder holds one plan), stored beside
    chosen = seeds is not None and rerun is None
    out = folder or Path("runs") / (f"cooperation-{setting}{'' if size == 'default' else '-' + size}"
                                    f"{'' if tag is None else '-' + tag}{'' if rerun is None else f'-rerun{rerun}'}"
                                    f"{f'-seeds{min(seeds)}-{max(seeds)}' if chosen and seeds else ''}")
    seeds = (rerun,) if rerun is not None else tuple(seeds) if chosen else tuple(range(sizes[4]))
    if "warm_start" in base:  # the methods of one seed fine-tune once (the key holds the seed)
        base["warm_start"]["cache"] = str(out / "warm-starts")
    sweep = plan(out, base, {"credit": tuple(METHODS[label] for label in labels)}, seeds).seeds_first()

    if train:
        train_sweep(sweep, setting, parallel)
    label_of = dict(zip(dict.fromkeys(r.label for r in sweep.runs), labels, strict=True))
    per_seed: dict[str, dict[int, dict[str, float]]] = {label: {} for label in labels}
    curves: dict[str, dict[int, list[tuple[int, float]]]] = {label: {} for label in labels}
    tokens: dict[str, dict[int, dict[int, float]]] = {label: {} for label in labels}
    for r in sweep.runs:
        run_dir = sweep.run_dir(r)
        if (run_dir / "done.json").exists():
            per_seed[label_of[r.label]][r.seed] = {**run_metrics(run_dir), **untrained_metrics(run_dir)}
            curves[label_of[r.label]][r.seed] = run_learning_curve(run_dir)
            tokens[label_of[r.label]][r.seed] = step_tokens(run_dir)
    return {"setting": setting, "size": size, "sizes": sizes, "config": base, "refused": {},
            "per_seed": per_seed, "curves": curves, "tokens": tokens, "folder": str(out),
            "runs_total": len(sweep.runs), "dtype": model_dtype(base)}


def model_dtype(base: dict[str, Any]) -> str:
    """The dtype the setting's runs hold the base model in on this machine (``model.dtype`` resolved:
    ``auto`` is bfloat16 only where the CPU has native units), recorded in every result file."""
    from teamplay.agents.models import resolve_dtype
    from teamplay.config import ModelConfig

    default = ModelConfig.model_fields["dtype"].default  # a stored config leaves the default unwritten
    return resolve_dtype((base.get("model") or {}).get("dtype", default))


def untrained_metrics(run_dir: Path) -> dict[str, float]:
    """``untrained/<field>``: the held-out evaluation before training (step 0), flattened as
    ``run_metrics`` flattens the final one, so a cooperation measure can be compared before and after."""
    from teamplay.training.experiments.sweep import flatten_evaluation
    from teamplay.training.store.metrics import read_metrics

    before = next((r["heldout"] for r in read_metrics(run_dir) if r.get("step") == 0 and "heldout" in r), None)
    return {} if before is None else flatten_evaluation(before, "untrained/")


def result_path(setting: str, size: str = "default", tag: str | None = None, rerun: bool = False) -> Path:
    """The stored result of a setting's comparison (``tag``: a ``--methods`` comparison of its own,
    e.g. ``more``; ``rerun``: its seed run again, ``--rerun``)."""
    suffix = (("" if size == "default" else "-" + size) + ("" if tag is None else "-" + tag)
              + ("-rerun" if rerun else ""))
    return RESULTS / f"{setting}{suffix}.json"


def tag_of(path: Path, result: dict[str, Any]) -> str | None:
    """The ``--methods`` tag of a stored default-size comparison, read off its file name."""
    rest = path.stem[len(result["setting"]):]
    return rest[1:] if rest.startswith("-") else None


def within_seed_spread(result: dict[str, Any], again: dict[str, Any], key: str = "heldout/team_accuracy"
                       ) -> dict[str, tuple[int, float, float]]:
    """Per method of ``again`` (a ``--rerun`` of one seed): (seed, the stored run's ``key``, the rerun's)."""
    out = {}
    for label, seeds in again["per_seed"].items():
        for seed, metrics in seeds.items():
            first = result["per_seed"].get(label, {}).get(seed)
            if first is not None and key in first and key in metrics:
                out[label] = (seed, float(first[key]), float(metrics[key]))
    return out


def region_name(setting: str, tag: str | None = None) -> str:
    return f"cooperation_{setting}{'' if tag is None else '_' + tag}"


def region(result: dict[str, Any], tag: str | None = None) -> str:
    """The BENCHMARKS.md region of a setting, from its stored result (command and machine included)."""
    text, notes, headline = table(result)
    return Result(region_name(result["setting"], tag), text, headline, None, tuple(notes)).markdown(
        result["command"], machine_summary(result))


#: the tag of a comparison trained again on new seeds (``--replicate``): its file, folder and region
REPLICATION = "replication"


def seed_range(text: str) -> range:
    """``"100-107"`` -> seeds 100..107 (``--replicate``); a bad range is argparse's one-line error."""
    first, _, last = text.partition("-")
    try:
        seeds = range(int(first), int(last) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST-LAST seeds (e.g. 100-107), got {text!r}") from None
    if len(seeds) < 2 or seeds.start < 0:
        raise argparse.ArgumentTypeError(f"a replication needs at least 2 seeds from 0 up, got {text!r}")
    return seeds


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.cooperation --setting S [--parallel N] [--quick | --table-only]``."""
    from benchmarks.common import DEFAULT_OUTPUT, machine_info, machine_line, write_regions

    parser = argparse.ArgumentParser(description="credit where cooperation is necessary, with exact tests")
    parser.add_argument("--setting", nargs="+", choices=tuple(SETTINGS), default=["relay_k3"])
    parser.add_argument("--quick", action="store_true", help="smoke sizes (writes nothing)")
    parser.add_argument("--model", default=EMBEDDED_MODEL)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=None, help="keep the sweep folders here")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (Ray tasks, one thread each)")
    parser.add_argument("--methods", default=None, help="comma-separated method labels (grpo included)")
    parser.add_argument("--tag", default=None,
                        help="name of a --methods comparison: its folder, file and BENCHMARKS region (default: more)")
    parser.add_argument("--table-only", action="store_true", help="train nothing: the tables of the stored results")
    parser.add_argument("--collect", action="store_true",
                        help="train nothing: store the runs the sweep folder has finished, then the tables")
    parser.add_argument("--rerun", type=int, default=None, metavar="SEED",
                        help="train seed SEED again (every method, a folder of its own) and store it beside the "
                             "comparison: its within-seed spread")
    parser.add_argument("--replicate", type=seed_range, default=None, metavar="FIRST-LAST",
                        help="train the setting's methods again on seeds FIRST..LAST, never used before (a "
                             "folder of their own, resumable), stored as <setting>-replication.json: does "
                             "the first sitting hold on new seeds?")
    parser.add_argument("--seeds", type=int, default=None, metavar="N",
                        help="bring the stored comparison to N paired seeds: train only the seeds below N it lacks "
                             "(a sweep folder of their own, resumable) and add them to it; a comparison split over "
                             "several sittings")
    args = parser.parse_args(argv)
    if args.seeds is not None and (args.seeds < 1 or args.rerun is not None or args.quick or args.table_only):
        parser.error("--seeds N needs N >= 1, and goes with neither --rerun, --quick nor --table-only")
    if args.replicate is not None and (args.seeds is not None or args.rerun is not None or args.methods):
        parser.error("--replicate goes with neither --seeds, --rerun nor --methods")
    set_threads(args.threads)
    size = "quick" if args.quick else "default"
    only = None if args.methods is None else tuple(m.strip() for m in args.methods.split(","))
    line = machine_line(machine_info())
    for setting in args.setting:
        tag, again = (None if only is None else args.tag or "more"), args.rerun is not None
        if args.tag is not None and only is None:
            parser.error("--tag names a --methods comparison: give --methods too")
        if args.replicate is not None:
            tag = REPLICATION
        path = result_path(setting, size, tag=tag, rerun=again)
        if args.table_only:
            if not path.is_file():
                parser.error(f"--table-only: no stored results for {setting} ({path.name}); run it first")
            result = load_result(path)
        else:
            out = None if args.output is None else args.output / setting
            stored = load_result(path) if args.seeds is not None and path.is_file() else None
            seeds = list(args.replicate) if args.replicate is not None else None if args.seeds is None else [
                s for s in range(args.seeds) if stored is None or s not in seeds_held(stored)]
            if seeds == []:
                print(f"{setting}: the stored comparison holds seeds {sorted(seeds_held(stored))} already")
                result = stored
            else:
                try:
                    result = run_setting(setting, args.model, size, out, only, args.parallel, train=not args.collect,
                                         rerun=args.rerun, tag=tag, seeds=seeds)
                    result = {**result, "machine": line}
                    if stored is not None:
                        result = merge_results(stored, result, line)
                except ValueError as exc:
                    parser.error(str(exc))
            flags = [f"--setting {setting}", *([f"--parallel {args.parallel}"] if args.parallel > 1 else []),
                     *([f"--methods '{args.methods}'"] if args.methods else []),
                     *([f"--tag {args.tag}"] if args.tag else []),
                     *([f"--rerun {args.rerun}"] if again else []),
                     *([f"--seeds {args.seeds}"] if args.seeds is not None else []),
                     *([f"--replicate {args.replicate[0]}-{args.replicate[-1]}"] if args.replicate else [])]
            result = {**result, "command": " ".join(["python -m benchmarks.cooperation", *flags])}
            if not args.quick and seeds_held(result):
                save_result(result, path)
        if again:  # its table is the comparison's, with the spread in its notes
            if not args.quick:
                print(f"stored {path.name}")
            path = result_path(setting, size, tag=tag)
            if not path.is_file():
                continue
            result = load_result(path)
        text, notes, headline = table(result)
        print(f"\n## {setting}\n\n{text}", *notes, headline, sep="\n\n")
        if not args.quick and seeds_held(result):
            name = region_name(result["setting"], tag)
            write_regions(DEFAULT_OUTPUT, {name: region(result, tag)})
            print(f"updated {DEFAULT_OUTPUT.name}: {name}")


if __name__ == "__main__":
    main()
