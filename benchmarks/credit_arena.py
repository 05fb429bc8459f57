"""The credit arena: which credit method makes a team learn best, same budget, several seeds.

Every method trains the same team on the same problems with the same steps, batch, decoding,
learning rate and held-out set; only ``credit`` (and the trainer seed) differ. The runs are a
``teamplay sweep`` (``teamplay.training.sweep``): one normal run folder per method and seed, the
table is the sweep's mean ± 95% Student-t interval over seeds.

Settings:

* ``controlled``: a scripted noisy proposer (right with probability 0.5 on its first proposal,
  compliant with the review: it switches its answer after a WRONG verdict) and an LLM reviewer,
  the only trained role. The team is right exactly when the review is right, so the right credit is
  known: a review earns credit when it catches a wrong answer or wrongly rejects a right one.
  Measures: held-out reviewer verdict accuracy (wrong caught, right rejected) and team accuracy.
* ``full``: proposer and reviewer both played (and trained) by the model, on sums of two numbers up
  to 50 (arith level 1, ``FULL_TASK``), where the untrained team is right on about an eighth of the
  held-out problems (greedy): well below ceiling, with room to learn. Held out on 200 distinct
  problems. Sized for a CPU: short role prompts and turn instructions, proposals that start "The
  answer is" and reviews that start "Verdict:" (``FULL_PROTOCOL``), 8 new tokens per message, LoRA
  on the attention's q and v projections. Measures: team accuracy, the proposer's first-answer
  accuracy, the reviewer's verdicts.

Methods: ``grpo`` (team reward broadcast), ``shapley`` with the masking characteristic function
(withhold an agent's messages, score the last visible answer) and with replay (re-execute the
episode without the agent, with the current policies), ``continuation`` (V(after) − V(before)
from sampled continuations), ``tracer_roles`` (TRACER's role rewards), ``cosac`` (ridge surrogate
over the turns' actions: proposals labelled by their answers, reviews by their verdicts),
``cal_grpo`` (attempt-level credit for re-proposals), and ``grpo`` followed by each token-level
method (``credit.token``: aem, dgpo, ep_grpo, gear, s_trace, vpr; each spreads the message's
advantage over its tokens). ``ARENA_METHODS`` keeps only the ones the registry and the trainer
accept for the setting; the others are listed as not run with the reason. The controlled setting
runs all 13; the full one the 7 message-level methods (``SETTING_METHODS``: its answers are 2-4
generated tokens, and its runs cost about 4x the controlled ones); ``--methods all`` runs every one.

Budget: every method spends the same number of generated tokens (``token_budget``: its training
episodes' tokens plus the counterfactual ones of replays and continuations), so a method that
re-executes trains fewer steps; each run stops at the step that reaches the budget (at most
``STEP_CAP`` x the nominal steps). The budget is ``TOKENS_PER_EPISODE`` x the nominal steps x
problems x episodes, about what ``grpo`` spends in the nominal steps; the table reports each
method's steps, rollout tokens and generated tokens.

Tuning: none for any method. Every method runs with the one shared setting below (chosen before
any arena run, from the trainer's defaults and the sizes the CPU allows); the methods' own options
are their defaults, except ``shapley``'s characteristic function (masking or replay).

Sizes (``SIZES``), from timing single runs with one torch thread on the 2-core machine. Controlled,
2 steps of 2 x 4 episodes, 12 held-out problems, load average ~2: 32 s for grpo (about 4 s of
loading, 2 x 6 s of held-out evaluation, 2 x 8 s of steps); continuation 67 s and shapley with
replay 43 s (their counterfactual generation); the others like grpo. So a run costs about
4 s + 1 s per held-out problem + 1 s per training episode (continuation about twice that per
episode), and the 13 methods x 3 seeds give: ``--quick`` (1 step of 1 x 4 episodes, 6 held-out
problems) about 10 minutes, the default (6 steps of 2 x 4, 40 held-out problems) about 70
minutes. The untrained team's held-out evaluation runs once per
seed, not once per run (the sweep's ``eval_cache``). Full, one thread, 64 held-out problems: 50 s
to evaluate (0.8 s per problem: 3 model calls, prefill of 50-90-token prompts dominates; the
default prompts, with 24-token messages, took 1.9 s), and 8 s per step of 8 episodes (16 s with an
update); continuation spends about 22 s more per step on its continuations. So a full run costs
about 5 s + 0.8 s per held-out problem + 1-2 s per training episode, and the default (about 6 steps
of 2 x 4, 200 held-out problems, 7 methods x 3 seeds) took 50 minutes with ``--parallel 2``;
``--quick`` is a smoke run of its pipeline (24 held-out problems).

    python -m benchmarks credit_arena            # controlled setting (the suite's run)
    python -m benchmarks credit_arena --quick    # smoke size: about 10 minutes on 2 cores
    python -m benchmarks.credit_arena --parallel 2   # two runs at a time (Ray tasks): the same table
    python -m benchmarks.credit_arena --setting full --parallel 2   # the full setting: about 50 minutes
    python -m benchmarks.credit_arena --setting full --quick

``python -m benchmarks.credit_arena`` rewrites its setting's region of BENCHMARKS.md
(``credit_arena`` or ``credit_arena_full``) unless ``--quick``.

The runs live in a sweep folder (``runs/credit_arena-<setting>[-quick]`` under the working
directory, or ``--output``): running the same command again skips finished runs and resumes an
interrupted one; delete the folder for fresh runs.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from benchmarks.common import EMBEDDED_MODEL, Result, set_threads

#: token credit methods that read a proposer/reviewer message like any other (teamplay list)
TOKEN_METHODS = ("aem", "dgpo", "ep_grpo", "gear", "s_trace", "vpr")

#: method label -> credit section; only registered methods run
ARENA_METHODS: dict[str, dict[str, Any]] = {
    "grpo": {"method": "grpo"},
    "shapley (masking)": {"method": "shapley", "options": {"value": "masking"}},
    "shapley (replay)": {"method": "shapley", "options": {"value": "replay"}},
    "continuation": {"method": "continuation"},
    "tracer_roles": {"method": "tracer_roles"},
    "cosac": {"method": "cosac"},
    "cal_grpo": {"method": "cal_grpo"},
    # token level (credit.token): grpo's message advantage spread over the message's tokens
    **{f"grpo + token {m}": {"method": "grpo", "token": {"method": m}} for m in TOKEN_METHODS},
}

#: labels each setting runs by default (``--methods`` replaces them). The full setting leaves out the
#: token-level methods: its messages are answers of 2-4 generated tokens (" 57.") and verdicts of about
#: 5, where spreading a message's advantage over its tokens changes little, and its runs cost about 4x
#: the controlled ones (module doc); the controlled setting compares them.
MESSAGE_METHODS = tuple(label for label in ARENA_METHODS if not label.startswith("grpo + token"))
SETTING_METHODS = {"controlled": tuple(ARENA_METHODS), "full": MESSAGE_METHODS}

#: generated tokens per training episode that set the budget: steps x problems x group x this.
#: Controlled: the scripted proposer generates nothing, a review is at most 4 tokens (3.6 per
#: episode in a 2-step grpo run); full: a 48-token proposal and review, plus re-proposals.
TOKENS_PER_EPISODE = {"controlled": 4, "full": 20}
#: a run stops at its token budget; this many times the nominal steps is the hard bound
STEP_CAP = 3

#: (nominal steps, problems per step, group size, held-out problems, seeds) per setting and size
SIZES = {
    ("controlled", True): (1, 1, 4, 6, 3),     # about 10 minutes on 2 cores (module doc)
    ("controlled", False): (6, 2, 4, 40, 3),   # about 70 minutes
    ("full", True): (1, 1, 4, 24, 3),          # a smoke run: not the 200 held-out problems
    ("full", False): (6, 2, 4, 200, 3),        # 50 minutes on 2 cores with --parallel 2
}

VERDICT_PREFIX = "Verdict:"
NOISY_PROPOSER = "scripted:noisy_proposer(p_right=0.5)"
#: a short reviewer prompt: the prompt is most of the cost of a one-word verdict on a CPU
REVIEWER_PROMPT = ("You check the proposed answer to an arithmetic problem. The first word of your reply "
                   "must be RIGHT if the proposed answer is correct, WRONG if it is not.")
#: full setting: sums of two numbers up to 50, where the untrained team is right on about 0.12-0.16
#: of the held-out problems (greedy); the test split has more than 200 distinct ones
FULL_TASK = {"level": 1, "max_operand": 50}
#: full setting: short prompts and turn instructions (prompt tokens are most of a turn's cost on a
#: CPU), and replies that start "The answer is" / "Verdict:" (the model's next words are its answer
#: or its verdict): a whole episode is about 20 generated tokens
FULL_ROLES = ({"name": "proposer", "prompt": "You solve arithmetic problems."},
              {"name": "reviewer", "prompt": "You check answers to arithmetic problems."})
FULL_PROTOCOL = {"rounds": 3, "verdict_prefix": VERDICT_PREFIX, "proposal_prefix": "The answer is",
                 "instructions": {"solve": "Give the answer.", "review": "Is the answer {answer} RIGHT or WRONG?",
                                  "revise_wrong": "A reviewer says {answer} is WRONG. Give the correct answer.",
                                  "revise_right": "A reviewer says {answer} is RIGHT. Give the final answer.",
                                  "recheck": "Give the final answer."}}


def token_budget(setting: str, sizes: tuple[int, int, int, int, int]) -> int:
    """Generated tokens every method of ``setting`` may spend (its episodes' and counterfactual ones)."""
    steps, problems, group, _, _ = sizes
    return steps * problems * group * TOKENS_PER_EPISODE[setting]


def arena_config(setting: str, quick: bool, model: str,
                 sizes: tuple[int, int, int, int, int] | None = None) -> dict[str, Any]:
    """The base config shared by every method of ``setting`` (``sizes`` replaces ``SIZES``): every
    run stops at the same ``token_budget``, at most ``STEP_CAP`` x the nominal steps."""
    sizes = sizes or SIZES[(setting, quick)]
    steps, problems, group, heldout, _ = sizes
    model_section: dict[str, Any] = {"name": model, "lora": {"r": 8, "alpha": 16}}
    if setting == "controlled":
        team = {"roles": [{"name": "proposer", "policy": NOISY_PROPOSER},
                          {"name": "reviewer", "prompt": REVIEWER_PROMPT}]}
        new_tokens = 4  # a verdict is its first line: RIGHT or WRONG
        options: dict[str, Any] = {"level": 1}
        # reviews start "Verdict:" (a prompt prefix): the untrained model then names a verdict in
        # 4/20 reviews at T=1 instead of 0/20, so there is something for credit to reinforce
        protocol = {"rounds": 3, "verdict_prefix": VERDICT_PREFIX}
    else:
        team = {"roles": list(FULL_ROLES)}
        new_tokens = 8  # "The answer is" + " 57." / "Verdict:" + " WRONG." and a few words
        options = FULL_TASK
        protocol = FULL_PROTOCOL
        model_section["lora"]["target_modules"] = ["q_proj", "v_proj"]  # less adapter work per token
    return {
        "model": model_section,
        "task": {"name": "arith", "split": "train", "options": options},
        "eval_task": {"name": "arith", "split": "test", "limit": heldout, "distinct": True, "options": options},
        "protocol": {"name": "proposer_reviewer", "options": protocol},
        "team": team,
        "rollout": {"problems_per_step": problems, "group_size": group},
        "backend": {"max_prompt_tokens": 512},
        "sampling": {"max_new_tokens": new_tokens, "temperature": 1.0},
        "eval_sampling": {"max_new_tokens": new_tokens},
        "optim": {"lr": 5e-4, "minibatch_size": 32},
        "steps": STEP_CAP * steps, "token_budget": token_budget(setting, sizes),
        "checkpoint_every": STEP_CAP * steps, "keep_checkpoints": 1,
        "tensorboard": False, "log_episodes": 2,
    }


def applicable_methods(base: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(methods that can run on this config, {method: why not} for the others)."""
    from teamplay.config import TrainConfig, build_config
    from teamplay.credit import credit_methods
    from teamplay.training.setup import validate_run

    known = credit_methods()
    ok, refused = {}, {}
    for label, credit in ARENA_METHODS.items():
        if credit["method"] not in known:
            refused[label] = "not registered in this version"
            continue
        try:
            validate_run(build_config(TrainConfig, {**base, "credit": credit}))  # what the trainer checks
        except ValueError as exc:
            refused[label] = str(exc).split(";")[0].removeprefix("credit.method: ")
            continue
        ok[label] = credit
    return ok, refused


def separated(a: dict[str, Any], b: dict[str, Any]) -> int:
    """+1 when interval a lies wholly above interval b, -1 when wholly below, 0 when they overlap."""
    lo_a, hi_a = a["mean"] - (a["ci95"] or math.inf), a["mean"] + (a["ci95"] or math.inf)
    lo_b, hi_b = b["mean"] - (b["ci95"] or math.inf), b["mean"] + (b["ci95"] or math.inf)
    return 1 if lo_a > hi_b else (-1 if hi_a < lo_b else 0)


def run(quick: bool = False, model: str = EMBEDDED_MODEL, setting: str = "controlled",
        folder: Path | None = None, sizes: tuple[int, int, int, int, int] | None = None,
        only: tuple[str, ...] | None = None, parallel: int = 1) -> Result:
    """Train every applicable method x seed of ``setting`` and tabulate them (see the module doc).
    ``sizes`` = (steps, problems per step, group size, held-out problems, seeds) replaces ``SIZES``;
    ``only`` keeps the methods with these labels (the smoke test runs two); ``parallel`` > 1 trains
    that many runs at once as Ray tasks (``teamplay sweep --parallel``; same table)."""
    from teamplay.training.sweep import plan, run_sweep, summarize
    from teamplay.training.trainer import Trainer

    sizes = sizes or SIZES[(setting, quick)]
    base = arena_config(setting, quick, model, sizes)
    methods, refused = applicable_methods(base)
    chosen = SETTING_METHODS[setting] if only is None else only
    unknown = sorted(set(chosen) - set(ARENA_METHODS))
    if unknown:
        raise ValueError(f"unknown arena method(s) {', '.join(unknown)}; methods: {', '.join(ARENA_METHODS)}")
    left_out = [label for label in ARENA_METHODS if label not in chosen]
    methods = {label: credit for label, credit in methods.items() if label in chosen}
    seeds = tuple(range(sizes[4]))
    # a sweep folder, so an interrupted arena run continues where it stopped when run again
    out = folder or Path("runs") / f"credit_arena-{setting}{'-quick' if quick else ''}"
    sweep = plan(out, base, {"credit": tuple(methods.values())}, seeds)
    def announce(r: Any, status: str) -> None:
        print(f"  {r.name}: {status}", flush=True)

    if parallel > 1:
        from teamplay.distributed.sweep import run_sweep_parallel

        run_sweep_parallel(sweep, parallel, on_run=announce)
    else:
        run_sweep(sweep, lambda cfg, resume: Trainer(cfg).train(resume=resume), on_run=announce)
    results = summarize(sweep).to_json()
    labels = dict(zip([p["label"] for p in results["points"]], methods, strict=True))
    return _result(setting, quick, sizes, base, seeds, results, labels, refused, left_out)


METRICS = (("heldout/team_accuracy", "team acc."), ("heldout_gain/team_accuracy", "Δ team acc."),
           ("heldout/team/verdict_accuracy", "verdict acc."), ("heldout/team/wrong_caught", "wrong caught"),
           ("heldout/team/right_rejected", "right rejected"), ("heldout/team/verdict_rate", "verdict rate"),
           ("heldout/team/first_answer_accuracy/proposer", "first answer acc."),
           ("heldout/team/correction_rate", "correction rate"),
           ("train/varied_groups", "varied groups"), ("train/updates", "updates"),
           ("budget/steps", "steps"), ("budget/tokens", "rollout tokens"),
           ("budget/generated_tokens", "generated tokens"))


def _cell(metric: dict[str, Any] | None, digits: int = 3) -> str:
    if metric is None:
        return "—"
    ci = "n=1" if metric["ci95"] is None else f"± {metric['ci95']:.{digits}f}"
    return f"{metric['mean']:.{digits}f} {ci}"


def _result(setting: str, quick: bool, sizes: tuple[int, ...], base: dict[str, Any], seeds: tuple[int, ...],
            results: dict[str, Any], labels: dict[str, str], refused: dict[str, str],
            left_out: list[str]) -> Result:
    points = {labels[p["label"]]: p["metrics"] for p in results["points"]}
    header = ["method", *(name for _, name in METRICS)]
    rows = [[label, *(_cell(m.get(key), 0 if key.startswith(("budget", "train/updates")) else 3)
                      for key, _ in METRICS)]
            for label, m in points.items()]
    table = "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                      + ["| " + " | ".join(r) + " |" for r in rows])
    verdicts = []
    grpo = points.get("grpo", {})
    for label, m in points.items():
        if label == "grpo":
            continue
        for key, name in METRICS[:3]:
            if key in m and key in grpo:
                side = separated(m[key], grpo[key])
                word = {1: "beats", -1: "is below", 0: "does not separate from"}[side]
                verdicts.append(f"{label} {word} grpo on {name}")
    steps, problems, group, heldout, _ = sizes
    task, protocol, lora = base["task"]["options"], base["protocol"]["options"], base["model"]["lora"]
    bound = f", operands up to {task['max_operand']}" if "max_operand" in task else ""
    targets = f" on {', '.join(lora['target_modules'])}" if "target_modules" in lora else ""
    prefixes = f"reviews start with {VERDICT_PREFIX!r}" + (
        f", proposals with {protocol['proposal_prefix']!r}, short turn instructions (`FULL_PROTOCOL`)"
        if "proposal_prefix" in protocol else "")
    notes = (
        f"Setting `{setting}`{' (--quick)' if quick else ''}: {len(seeds)} seeds per method; every run stops "
        f"once it has generated {base['token_budget']} tokens (about {steps} steps of {problems} problems x "
        f"{group} episodes for grpo; at most {base['steps']} steps); held-out: {heldout} distinct arith level "
        f"{task['level']}{bound} test problems, greedy; lr {base['optim']['lr']}, LoRA r {lora['r']}{targets}, "
        f"{base['sampling']['max_new_tokens']} new tokens per message; {prefixes}. "
        f"Cells: mean ± 95% t interval over seeds; 'rollout tokens' are the "
        f"training episodes' tokens, 'generated tokens' add the counterfactual ones (replays, "
        f"continuations): the budget each method spent, equal up to the last step's overshoot; 'varied "
        f"groups' is the share of training groups whose team rewards were not all equal, 'updates' the "
        f"optimiser steps taken. No method "
        f"was tuned: all share this one setting.",
        "Not run: " + "; ".join(f"{k} ({v})" for k, v in refused.items()) + "." if refused else "",
        ("Not in this setting (`SETTING_METHODS`; `--methods` adds them): " + ", ".join(left_out) + "."
         if left_out else ""),
        _separations(verdicts),
    )
    separated_any = [v for v in verdicts if " beats " in v]
    headline = (f"{setting}: " + (", ".join(separated_any) if separated_any else
                                  "no method beats grpo beyond the 95% intervals") + f" ({len(seeds)} seeds).")
    return Result(region_name(setting), table, headline, None, tuple(n for n in notes if n),
                  {"results": results, "labels": labels, "refused": refused, "config": base})


def _separations(verdicts: list[str]) -> str:
    """One sentence: the comparisons with grpo whose intervals do not overlap, and how many do."""
    apart = [v for v in verdicts if " does not separate " not in v]
    overlapping = len(verdicts) - len(apart)
    if not verdicts:
        return "Beyond their intervals: no comparison (grpo alone)."
    measures = ", ".join(name for _, name in METRICS[:3])
    if not apart:
        return (f"Beyond their intervals: none. All {overlapping} comparisons with grpo (each method on "
                f"{measures}) overlap.")
    return (f"Beyond their intervals: {'; '.join(v.rstrip('.') for v in apart)}. The other {overlapping} "
            f"comparisons with grpo (each method on {measures}) overlap.")


def region_name(setting: str) -> str:
    """The BENCHMARKS.md region of a setting's table: ``credit_arena`` (controlled) or ``credit_arena_full``."""
    return "credit_arena" if setting == "controlled" else f"credit_arena_{setting}"


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.credit_arena [--setting full] [--parallel N] [--quick]``: run one setting
    and, unless ``--quick`` (or with ``--write``), rewrite its region of BENCHMARKS.md."""
    from benchmarks.__main__ import DEFAULT_OUTPUT
    from benchmarks.common import machine_info, machine_line, write_regions

    parser = argparse.ArgumentParser(description="the credit arena (one setting)")
    parser.add_argument("--quick", action="store_true", help="smoke sizes")
    parser.add_argument("--setting", choices=("controlled", "full"), default="controlled")
    parser.add_argument("--model", default=EMBEDDED_MODEL)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=None, help="keep the sweep folder here")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (Ray tasks, one thread each)")
    parser.add_argument("--methods", default=None,
                        help="comma-separated method labels, or 'all' (default: the setting's SETTING_METHODS)")
    parser.add_argument("--write", type=Path, default=None,
                        help="markdown file whose region to rewrite (default BENCHMARKS.md, not with --quick)")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    line = machine_line(machine_info())
    only = None
    if args.methods is not None:
        only = tuple(ARENA_METHODS) if args.methods == "all" else tuple(m.strip() for m in args.methods.split(","))
    try:
        result = run(quick=args.quick, model=args.model, setting=args.setting, folder=args.output,
                     parallel=args.parallel, only=only)
    except ValueError as exc:
        parser.error(str(exc))
    print(result.table, *result.notes, result.headline, sep="\n\n")
    print(json.dumps(result.data["labels"]))
    target = args.write if args.write is not None else (None if args.quick else DEFAULT_OUTPUT)
    if target is not None:
        flags = [f"--setting {args.setting}"] if args.setting != "controlled" else []
        flags += ["--quick"] if args.quick else []
        flags += [f"--parallel {args.parallel}"] if args.parallel > 1 else []
        flags += [f"--model {args.model}"] if args.model != EMBEDDED_MODEL else []
        flags += [f"--methods '{args.methods}'"] if args.methods is not None else []
        command = " ".join(["python -m benchmarks.credit_arena", *flags])
        write_regions(target, {result.name: result.markdown(command, line)})
        print(f"updated {target.name}: {result.name}")


if __name__ == "__main__":
    main()
