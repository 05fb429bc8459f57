"""The credit arena: does a credit method make a team learn better than broadcasting the team reward?

First calibrate, then compare. Every setting is sized so that plain ``grpo`` (the team reward
broadcast to every message) raises held-out team accuracy beyond its 95% interval over the
untrained team; only then does a comparison of credit methods say anything (the earlier arena was a
null result because even grpo did not learn: 1-2 optimiser updates per run).

Settings (arith sums of two numbers up to 40, answer-first replies "The answer is ..." with 6 new
tokens, temperature 0.7 in training, greedy held-out evaluation):

* ``noisy_q0`` / ``noisy_q05``: a trained LLM solver answers once, then a scripted teammate replaces
  the team's answer with a wrong one with probability q = 0 or 0.5 (``scripted:noisy_teammate``),
  independently of what came before: one model call per episode. At q = 0.5 the team reward is
  half noise for the solver; the credit-fidelity benchmark measures how far each method's credit
  follows the solver's true contribution there.
* ``pr``: the proposer/reviewer team with both roles trained (3 rounds: propose, review, propose
  again), short prompts, proposals that start "The answer is" and reviews that start "Verdict:".

Methods: ``grpo``, ``continuation`` and ``shapley`` with replay (the counterfactual methods the
fidelity table ranks highest), ``cosac``, and ``tracer_roles`` for proposer/reviewer; others with
``--methods``. No method is tuned: all share one setting (LoRA r 8 on q and v, lr, batch, decoding
fixed before any comparison) and the methods' default options.

Budget parity: the same training episodes for every method (the same steps x problems x group); the
table reports the tokens each generated, counterfactual ones included, and the scripted teammate's
turns separately (they cost no model tokens).

Statistics: seeds are *paired*: a seed fixes the data order, the adapters' initialisation and the
sampling streams for every method, so each method is compared with ``grpo`` within a seed. Cells are
the mean over seeds ± the half-width of the 95% Student-t interval; "Δ vs grpo" is the mean of the
per-seed differences with its own interval (more powerful than comparing two intervals). Held-out
team accuracy is measured on a fixed set of distinct test problems before training, every
``eval_every`` steps (the learning curve; its area, divided by the steps, is the mean held-out
accuracy over training, on a fixed subset of the first 64 problems) and after training (all of them).

    python -m benchmarks.credit_arena --parallel 2                 # noisy_q0 and noisy_q05, 5 seeds
    python -m benchmarks.credit_arena --setting pr --parallel 2    # proposer/reviewer (longer)
    python -m benchmarks.credit_arena --quick                      # a smoke run of the pipeline
    python -m benchmarks.credit_arena --full --parallel 2          # 10 seeds; resumes where it stopped

The runs are a ``teamplay sweep`` per setting (``runs/credit_arena-<setting>[-quick|-full]``):
running the same command again skips finished runs and resumes an interrupted one; the table says
how many runs it holds. ``python -m benchmarks.credit_arena`` rewrites its settings' regions of
BENCHMARKS.md (``credit_arena_<setting>``) and the figure ``benchmarks/figures/credit_arena_<setting>.png``
unless ``--quick``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import EMBEDDED_MODEL, Result, set_threads
from teamplay.report.sweep_page import curve_area, run_learning_curve

FIGURES = Path(__file__).resolve().parent / "figures"

#: method label -> credit section; only registered methods the trainer accepts run
ARENA_METHODS: dict[str, dict[str, Any]] = {
    "grpo": {"method": "grpo"},
    "continuation": {"method": "continuation"},
    "shapley (replay)": {"method": "shapley", "options": {"value": "replay"}},
    "cosac": {"method": "cosac"},
    "tracer_roles": {"method": "tracer_roles"},
    "shapley (masking)": {"method": "shapley", "options": {"value": "masking"}},
    "cal_grpo": {"method": "cal_grpo"},
    "loto (replay)": {"method": "loto", "options": {"value": "replay"}},
    "shape_max": {"method": "shape_max"},
}

#: labels each setting runs by default (``--methods`` replaces them)
SETTING_METHODS = {
    "noisy_q0": ("grpo", "continuation", "shapley (replay)", "cosac"),
    "noisy_q05": ("grpo", "continuation", "shapley (replay)", "cosac"),
    "pr": ("grpo", "continuation", "shapley (replay)", "cosac", "tracer_roles"),
}
SETTINGS = tuple(SETTING_METHODS)
#: the settings a plain ``python -m benchmarks.credit_arena`` runs (about 90 minutes with --parallel 2)
DEFAULT_SETTINGS = ("noisy_q0", "noisy_q05")

#: (steps, problems per step, group size, held-out problems, seeds, eval_every) by size
SIZES = {
    "quick": (2, 2, 4, 8, 2, 1),
    "default": (16, 4, 4, 200, 5, 4),
    "full": (16, 4, 4, 200, 10, 4),
}
PR_SIZES = {
    "quick": (1, 1, 4, 6, 2, 1),
    "default": (12, 4, 4, 200, 5, 4),
    "full": (12, 4, 4, 200, 10, 4),
}

#: the learning curve's fixed held-out subset (the first problems of the held-out set)
CURVE_PROBLEMS = 64
TASK = {"level": 1, "max_operand": 40}  # the test split holds 253 distinct problems (200 used)
NEW_TOKENS = 6
LR = 5e-4
#: training temperature: at 1.0 the untrained solver was right on none of 32 sampled answers in the
#: calibration probe (no group had unequal rewards); at 0.7 (the demo's) grpo learned
TEMPERATURE = 0.7
REPLY_PREFIX = "The answer is"
SOLVER_PROMPT = "You solve arithmetic problems."
CHAIN = {"n_agents": 2, "reply_prefix": REPLY_PREFIX, "first_instruction": "Give the answer.",
         "next_instruction": "Teammates answered above. Give the final answer."}
PR_ROLES = ({"name": "proposer", "prompt": SOLVER_PROMPT},
            {"name": "reviewer", "prompt": "You check answers to arithmetic problems."})
PR_PROTOCOL = {"rounds": 3, "verdict_prefix": "Verdict:", "proposal_prefix": REPLY_PREFIX,
               "instructions": {"solve": "Give the answer.", "review": "Is the answer {answer} RIGHT or WRONG?",
                                "revise_wrong": "A reviewer says {answer} is WRONG. Give the correct answer.",
                                "revise_right": "A reviewer says {answer} is RIGHT. Give the final answer.",
                                "recheck": "Give the final answer."}}


def sizes_of(setting: str, size: str) -> tuple[int, int, int, int, int, int]:
    return (PR_SIZES if setting == "pr" else SIZES)[size]


def arena_config(setting: str, model: str, sizes: tuple[int, int, int, int, int, int]) -> dict[str, Any]:
    """The base config shared by every method of ``setting`` (only ``credit`` and ``seed`` vary)."""
    if setting not in SETTING_METHODS:
        raise ValueError(f"unknown arena setting {setting!r}; settings: {', '.join(SETTINGS)}")
    steps, problems, group, heldout, _, eval_every = sizes
    if setting == "pr":
        protocol = {"name": "proposer_reviewer", "options": PR_PROTOCOL}
        team = {"roles": [dict(r) for r in PR_ROLES]}
    else:
        q = 0.0 if setting == "noisy_q0" else 0.5
        protocol = {"name": "sequential", "options": CHAIN}
        team = {"roles": [{"name": "solver", "prompt": SOLVER_PROMPT},
                          {"name": "teammate", "policy": f"scripted:noisy_teammate(q={q})"}]}
    return {
        "model": {"name": model, "lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}},
        "task": {"name": "arith", "split": "train", "options": TASK, "limit": 2000},
        "eval_task": {"name": "arith", "split": "test", "limit": heldout, "distinct": True, "options": TASK},
        "protocol": protocol,
        "team": team,
        "rollout": {"problems_per_step": problems, "group_size": group},
        "backend": {"max_prompt_tokens": 512},
        "sampling": {"max_new_tokens": NEW_TOKENS, "temperature": TEMPERATURE},
        "eval_sampling": {"max_new_tokens": NEW_TOKENS},
        "optim": {"lr": LR, "minibatch_size": 16},
        "steps": steps, "eval_every": eval_every, "eval_curve_limit": min(CURVE_PROBLEMS, heldout),
        "checkpoint_every": max(1, steps // 2), "keep_checkpoints": 1,
        "tensorboard": False, "log_episodes": 2,
        # the demo team's learned speak/skip controllers (proposer/reviewer only): trained on every
        # method's episodes alike (a skipped turn is generated anyway), read greedily at evaluation
        **({"controllers": {"enabled": True, "mode": "average_greedy"}} if setting == "pr" else {}),
    }


def applicable_methods(base: dict[str, Any], labels: Sequence[str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(the methods of ``labels`` the trainer accepts for this config, {label: why not} for the others)."""
    from teamplay.config import TrainConfig, build_config
    from teamplay.credit import credit_methods
    from teamplay.training.setup import check_run

    known = credit_methods()
    ok, refused = {}, {}
    for label in labels:
        credit = ARENA_METHODS[label]
        if credit["method"] not in known:
            refused[label] = "not registered in this version"
            continue
        try:
            check_run(build_config(TrainConfig, {**base, "credit": credit}))
        except ValueError as exc:
            refused[label] = str(exc).split(";")[0].removeprefix("credit.method: ")
            continue
        ok[label] = credit
    return ok, refused


# ------------------------------------------------------------------------------------- statistics
def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of the two-sided 95% Student-t interval): the sweep table's ``Cell``;
    NaN half-width below 2 values, NaN mean with none."""
    from teamplay.training.sweep import Cell

    cell = Cell(tuple(values))
    return (cell.mean, cell.ci95) if cell.n else (math.nan, math.nan)


def paired_difference(method: dict[int, float], baseline: dict[int, float]) -> tuple[float, float, int]:
    """Mean and 95% half-width of ``method[s] - baseline[s]`` over the seeds both hold, and their count."""
    seeds = sorted(set(method) & set(baseline))
    mean, half = mean_ci([method[s] - baseline[s] for s in seeds])
    return mean, half, len(seeds)


def _cell(mean: float, half: float, digits: int = 3, signed: bool = False) -> str:
    if not math.isfinite(mean):
        return "—"
    sign = "+" if signed else ""
    return f"{mean:{sign}.{digits}f}" + (f" ± {half:.{digits}f}" if math.isfinite(half) else " (n=1)")


# ------------------------------------------------------------------------------------- running
def run_setting(setting: str, model: str = EMBEDDED_MODEL, size: str = "default", folder: Path | None = None,
                only: Sequence[str] | None = None, parallel: int = 1,
                sizes: tuple[int, int, int, int, int, int] | None = None, train: bool = True) -> dict[str, Any]:
    """Train every method x seed of ``setting`` (resuming a stored sweep) and collect per-seed results;
    ``train=False`` only collects the runs the folder already finished (a comparison stopped part-way)."""
    from teamplay.distributed.compose import make_trainer
    from teamplay.training.sweep import plan, run_metrics, run_sweep

    sizes = sizes or sizes_of(setting, size)
    base = arena_config(setting, model, sizes)
    labels = tuple(only) if only is not None else SETTING_METHODS[setting]
    unknown = sorted(set(labels) - set(ARENA_METHODS))
    if unknown:
        raise ValueError(f"unknown arena method(s) {', '.join(unknown)}; methods: {', '.join(ARENA_METHODS)}")
    if "grpo" not in labels:
        raise ValueError("the arena compares every method with grpo: keep grpo in --methods")
    methods, refused = applicable_methods(base, labels)
    seeds = tuple(range(sizes[4]))
    out = folder or Path("runs") / f"credit_arena-{setting}{'' if size == 'default' else '-' + size}"
    # seed by seed: a comparison stopped part-way holds whole seeds, every method paired on them
    sweep = plan(out, base, {"credit": tuple(methods.values())}, seeds).seeds_first()

    def announce(r: Any, status: str) -> None:
        print(f"  {setting} {r.name}: {status}", flush=True)

    if train and parallel > 1:
        from teamplay.distributed.sweep import run_sweep_parallel

        run_sweep_parallel(sweep, parallel, on_run=announce)
    elif train:
        run_sweep(sweep, lambda cfg, resume: make_trainer(cfg).train(resume=resume), on_run=announce)
    label_of = {sweep_label: label for sweep_label, label in
                zip(dict.fromkeys(r.label for r in sweep.runs), methods, strict=True)}
    per_seed: dict[str, dict[int, dict[str, float]]] = {label: {} for label in methods}
    curves: dict[str, dict[int, list[tuple[int, float]]]] = {label: {} for label in methods}
    for r in sweep.runs:
        run_dir = sweep.run_dir(r)
        if not (run_dir / "done.json").exists():
            continue
        metrics = run_metrics(run_dir)
        metrics["replay_episodes"] = replay_episodes(run_dir)
        per_seed[label_of[r.label]][r.seed] = metrics
        curves[label_of[r.label]][r.seed] = run_learning_curve(run_dir)  # on the fixed 64-problem subset
    return {"setting": setting, "size": size, "sizes": sizes, "config": base, "refused": refused,
            "per_seed": per_seed, "curves": curves, "folder": str(out), "runs_total": len(sweep.runs)}


def replay_episodes(run_dir: Path) -> float:
    """Counterfactual re-executions the run made over all its steps (0 for methods without replays)."""
    from teamplay.training.metrics import read_metrics

    return float(sum(float(row.get("replay_episodes") or 0) for row in read_metrics(run_dir) if "reward_mean" in row))


# ------------------------------------------------------------------------------------- the table
#: (metric key in run_metrics, column name, digits)
MEASURES = (("heldout/team_accuracy", "team acc.", 3), ("heldout_gain/team_accuracy", "gain over untrained", 3),
            ("curve_area", "curve area", 3))
#: the solver's own answer before the teammate acts (team accuracy = (1 - q) x this, plus the coin)
NOISY_MEASURES = (("heldout/initial_accuracy", "solver acc.", 3),)
PR_MEASURES = (("heldout/team/first_answer_accuracy/proposer", "proposer first acc.", 3),
               ("heldout/team/verdict_accuracy", "verdict acc.", 3), ("heldout/team/wrong_caught", "wrong caught", 3),
               ("heldout/team/right_rejected", "right rejected", 3),
               ("heldout/tokens_per_problem", "tokens / problem", 1))
SPEAK_RATE = "heldout/speak_rate/"  # + "agent/stage": the share of a controller's decisions that spoke
COSTS = (("train/updates", "updates", 0), ("budget/tokens", "rollout tokens", 0),
         ("budget/generated_tokens", "generated tokens", 0), ("replay_episodes", "replay episodes", 0))


def _values(result: dict[str, Any], label: str, key: str) -> dict[int, float]:
    if key == "curve_area":
        return {s: curve_area(c) for s, c in result["curves"][label].items()}
    return {s: m[key] for s, m in result["per_seed"][label].items() if key in m}


def calibration(result: dict[str, Any]) -> tuple[float, float, bool]:
    """grpo's gain over the untrained team: (mean, 95% half-width, learns = the interval lies above 0)."""
    mean, half = mean_ci(list(_values(result, "grpo", "heldout_gain/team_accuracy").values()))
    return mean, half, bool(math.isfinite(half) and mean - half > 0)


LEARNS = "it learns: the interval lies above 0"
DOES_NOT_LEARN = "NOT beyond its interval: no comparison in this setting says anything about credit"


def markdown(result: dict[str, Any]) -> tuple[str, list[str], str]:
    """(table, notes, headline) of one setting's result."""
    setting = result["setting"]
    speak = sorted({key for seeds in result["per_seed"].values() for m in seeds.values() for key in m
                    if key.startswith(SPEAK_RATE)})
    measures = MEASURES + (PR_MEASURES if setting == "pr" else NOISY_MEASURES) + tuple(
        (key, "speaks " + key.removeprefix(SPEAK_RATE), 2) for key in speak)
    header = ["method", "seeds", *(name for _, name, _ in measures),
              *(f"Δ {name} vs grpo (paired)" for _, name, _ in MEASURES), *(name for _, name, _ in COSTS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    verdicts = []
    for label in result["per_seed"]:
        cells = [label, str(len(result["per_seed"][label]))]
        for key, _, digits in measures:
            cells.append(_cell(*mean_ci(list(_values(result, label, key).values())), digits))
        for key, name, digits in MEASURES:
            if label == "grpo":
                cells.append("—")
                continue
            mean, half, n = paired_difference(_values(result, label, key), _values(result, "grpo", key))
            cells.append(_cell(mean, half, digits, signed=True))
            if n >= 2 and math.isfinite(half):
                word = "above" if mean - half > 0 else ("below" if mean + half < 0 else "not separated from")
                verdicts.append((label, name, word))
        for key, _, digits in COSTS:
            cells.append(_cell(*mean_ci(list(_values(result, label, key).values())), digits))
        lines.append("| " + " | ".join(cells) + " |")
    gain, half, learns = calibration(result)
    steps, problems, group, heldout, seeds, eval_every = result["sizes"]
    done = sum(len(v) for v in result["per_seed"].values())
    notes = [
        f"Setting `{setting}`: {done} of {result['runs_total']} runs finished; {steps} steps of {problems} problems x "
        f"{group} episodes for every method (the same training episodes), held-out: {heldout} distinct arith "
        f"test problems (operands up to {TASK['max_operand']}), greedy, every {eval_every} steps and after "
        f"training; LoRA r 8 on q and v, lr {LR}, {NEW_TOKENS} new tokens per message, temperature {TEMPERATURE}. "
        "Cells: mean "
        "± 95% t interval over seeds; 'Δ ... vs grpo' is the mean of per-seed differences with its interval "
        "(seeds paired: same data order, initialisation and sampling streams); 'curve area' is the mean "
        "held-out accuracy over training (trapezoid area / steps); 'generated tokens' include the "
        "counterfactual ones, 'replay episodes' are re-executions (each also runs the scripted teammate, "
        "which costs no tokens).",
        f"Calibration: grpo's gain over the untrained team is {_cell(gain, half, 3, signed=True)} "
        f"({LEARNS if learns else DOES_NOT_LEARN}).",
    ]
    if result["refused"]:
        notes.append("Not run: " + "; ".join(f"{k} ({v})" for k, v in result["refused"].items()) + ".")
    apart = [f"{label} is {word} grpo on {name}" for label, name, word in verdicts if word != "not separated from"]
    together = sum(1 for *_, word in verdicts if word == "not separated from")
    notes.append("Paired differences beyond their intervals: " + "; ".join(apart) + f". The other {together} "
                  "overlap 0." if apart else f"Paired differences beyond their intervals: none ({together} "
                  "comparisons, all overlapping 0).")
    if apart:
        verdict = f"; {'; '.join(apart)}"
    elif together:
        verdict = "; no method separates from grpo (paired, 95%)"
    else:
        verdict = "; no paired comparison yet (a method needs 2 seeds that grpo also finished)"
    headline = f"{setting}: grpo gain {_cell(gain, half, 3, signed=True)}{verdict}."
    return "\n".join(lines), notes, headline


def figure(result: dict[str, Any], path: Path) -> Path | None:
    """Learning curves per method (mean with the 95% band over seeds); None without any finished run."""
    from teamplay.report.plots import plot_learning_curves

    curves = {label: list(c.values()) for label, c in result["curves"].items() if c}
    if not curves:
        return None
    return plot_learning_curves(curves, path, title=f"credit arena: {result['setting']}",
                                ylabel="held-out team accuracy")


def region_name(setting: str) -> str:
    return f"credit_arena_{setting}"


def run(quick: bool = False, model: str = EMBEDDED_MODEL, settings: Sequence[str] = DEFAULT_SETTINGS,
        folder: Path | None = None, only: Sequence[str] | None = None, parallel: int = 1,
        size: str | None = None, sizes: tuple[int, int, int, int, int, int] | None = None) -> Result:
    """Run ``settings`` (the suite's entry: the default ones) and return their tables as one Result."""
    size = size or ("quick" if quick else "default")
    tables, notes, headlines, data = [], [], [], {}
    for setting in settings:
        out = None if folder is None else folder / setting
        result = run_setting(setting, model, size, out, only, parallel, sizes)
        table, setting_notes, headline = markdown(result)
        tables.append(f"**{setting}**\n\n{table}")
        notes += setting_notes
        headlines.append(headline)
        data[setting] = result
    return Result("credit_arena", "\n\n".join(tables), " ".join(headlines), None, tuple(notes), data)


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.credit_arena [--setting S ...] [--parallel N] [--quick | --full]``."""
    from benchmarks.__main__ import DEFAULT_OUTPUT
    from benchmarks.common import machine_info, machine_line, write_regions

    parser = argparse.ArgumentParser(description="the credit arena: calibrate, then compare credit methods")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="smoke sizes (writes nothing)")
    group.add_argument("--full", action="store_true", help="10 seeds per method (resumes where it stopped)")
    parser.add_argument("--setting", nargs="*", choices=SETTINGS, default=list(DEFAULT_SETTINGS))
    parser.add_argument("--model", default=EMBEDDED_MODEL)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=None, help="keep the sweep folders here")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (Ray tasks, one thread each)")
    parser.add_argument("--methods", default=None, help="comma-separated method labels (grpo included)")
    parser.add_argument("--table-only", action="store_true",
                        help="train nothing: write the table of the runs the sweep folder has finished")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    line = machine_line(machine_info())
    size = "quick" if args.quick else ("full" if args.full else "default")
    only = None if args.methods is None else tuple(m.strip() for m in args.methods.split(","))
    for setting in args.setting:
        out = None if args.output is None else args.output / setting
        try:
            result = run_setting(setting, args.model, size, out, only, args.parallel, train=not args.table_only)
        except ValueError as exc:
            parser.error(str(exc))
        table, notes, headline = markdown(result)
        print(f"\n## {setting}\n\n{table}", *notes, headline, sep="\n\n")
        if args.quick:
            continue
        # a --methods run is another comparison: its own region and figure, the default table stays
        suffix = ("_full" if args.full else "") + ("_more" if only is not None else "")
        png = figure(result, FIGURES / f"credit_arena_{setting}{suffix}.png")
        flags = [f"--setting {setting}", *(["--full"] if args.full else []),
                 *([f"--parallel {args.parallel}"] if args.parallel > 1 else []),
                 *([f"--methods '{args.methods}'"] if args.methods else [])]
        body = Result(region_name(setting), table, headline, None, tuple(notes)).markdown(
            " ".join(["python -m benchmarks.credit_arena", *flags]), line)
        if png is not None:
            body += f"\n![learning curves: {setting}](benchmarks/figures/{png.name})\n"
        write_regions(DEFAULT_OUTPUT, {region_name(setting) + suffix: body})
        print(f"updated {DEFAULT_OUTPUT.name}: {region_name(setting) + suffix}")


if __name__ == "__main__":
    main()
