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
* ``split_k2`` / ``split_k4`` / ``split_k8``: the additive team, K solvers of one shared adapter each
  on its own sum, team reward the fraction right, where credit must pay if it ever does; ``grpo``
  (floor) against ``oracle`` (A* in closed form: the ceiling). ``split_kK_roles``: the same team with
  one adapter per solver.
* ``chain_k2`` / ``chain_k4`` / ``chain_k8``: COSAC's sequential chain, K solvers of one shared
  adapter answering one sum in turn, each keeping or revising the running answer (credit is not
  additive); ``grpo`` against ``cosac``, no closed-form ceiling.

The seeds' own claims (issue 39), each against grpo on the same config, with no closed-form ceiling:

* ``gcpo``: GCPO's claim that coverage credit over a group of samples gives better accuracy *and*
  diversity. One solver (``single``) that works the sum before answering (32 new tokens, no reply
  prefix: at 6 answer-first tokens every right solution is the same text); the group of G = 4 is the
  team ``coverage`` credits. Held-out: greedy pass@1, pass@4 from 4 samples per problem at the training
  temperature (``eval_samples``, before and after training), and the distinct right solutions per
  problem (texts: every right answer to a sum is the same number).
* ``parallel_shapley``: Parallel Shapley's claim that a generative judge's Shapley values credit the
  paths that work. Protocol ``paths``: K = 4 paths (two of the model, one shared adapter; a scripted
  ``copier`` of path_a and a scripted ``silent`` path), then a judge, the model with a frozen adapter
  (the base model: an aggregator that does not learn, as Parallel Shapley's reward model, so every
  method trains the same two paths under the same aggregator; trained, it would take a share of
  every method's credit and all of masking's). ``grpo``, ``shapley (judge)`` (the base model asked which
  answer the visible solutions give, 10 tokens, 31 coalitions per episode) and ``shapley (masking)``
  (which sees only the judge's message, so credits the frozen judge alone and trains nothing). The
  table reports each role's credit share (the free riders' among them) and the judge's tokens.
* ``tracer``: TRACER's claim of tokens saved at equal accuracy: the ``pr`` team with learned speak/skip
  controllers on the review only (the second proposal always speaks), a review token priced at 0.02
  in the controller's value of speaking, so that skipping the review of a right answer pays;
  ``tracer_roles`` against ``grpo``; tokens per problem, team and verdict accuracy, correction rates.

Their default sizes, estimated from a split_k8 run (12 steps x 32 answers of 6 tokens: about 7
minutes on one core) and probes of the 135M model on this 2-core machine while other runs shared it
(a greedy batch of 16 answers of 32 tokens: 0.45 s per answer; a credit judge prompt of 5 messages:
0.6 s), each about 90 minutes or less with ``--parallel 2``: ``gcpo`` 10 runs of about 14 minutes (12 steps of 8
problems x 4, 100 held-out problems, 400 sampled ones twice) = about 70 minutes; ``parallel_shapley``
5 seeds of grpo and masking (about 4 minutes each) and shapley (judge) (about 28 minutes: 10 steps x
8 episodes x 31 judged coalitions) = about 85 minutes; ``tracer`` 16 runs of about 6.5 minutes (the
``pr`` sizes, 8 seeds) = about 55 minutes. Measured: ``tracer --seeds 5`` (10 runs) took 98 minutes,
about 19 minutes a run on one core, three times its estimate; ``gcpo`` (10 runs, on the code with
teamplay's own decoding loop) took 115 minutes beside other jobs and about 14 minutes a pair of runs
on an idle machine, i.e. about the 70 estimated; ``parallel_shapley`` (15 runs) took two sittings:
a judged run 23 minutes on one core beside one other run (44-47 beside foreground jobs), 93% of it
the credit judge, and the others about 4 minutes, so about 80 minutes idle (each resumable with the
same command).

The split, chain and claim settings store their per-seed results in
``benchmarks/results/credit_arena/`` (committed; ``--table-only`` rewrites their tables from them,
``--seeds N`` brings a stored comparison to N paired seeds).

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
    python -m benchmarks.credit_arena --setting gcpo --parallel 2  # a claim (stored per-seed results)
    python -m benchmarks.credit_arena --setting gcpo --table-only  # its table from the stored results
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
from typing import Any, NamedTuple

from benchmarks.arena_results import (
    load_result,
    machine_summary,
    mde,
    merge_results,
    result_path,
    save_result,
    seeds_held,
    tokens_to_reach,
)
from benchmarks.common import EMBEDDED_MODEL, Result, set_threads
from teamplay.report.sweep_page import curve_area, run_learning_curve

FIGURES = Path(__file__).resolve().parent / "figures"

#: the credit judge of ``shapley (judge)`` (Parallel Shapley's generative reward model): asked which
#: answer the visible solutions give, in a few tokens. With the value's default template (reason, then
#: \boxed{}) and this budget the 135M judge solved the sum itself ("23 + 32 = 65") whatever it was
#: shown, so every coalition had one value and every agent no credit (a probe of 3 untrained episodes);
#: a longer reply costs its tokens 31 times per episode (every coalition of 5 agents is judged)
JUDGE_TEMPLATE = ("Question:\n{question}\n\nSolutions written by members of a team (some may be withheld):\n"
                  "{transcript}\n\nWhich final answer do the solutions give? Reply with that number only.")
JUDGE_TOKENS = 10

#: method label -> credit section; only registered methods the trainer accepts run
ARENA_METHODS: dict[str, dict[str, Any]] = {
    "grpo": {"method": "grpo"},
    "continuation": {"method": "continuation"},
    "influence": {"method": "influence"},
    "shapley (replay)": {"method": "shapley", "options": {"value": "replay"}},
    "cosac": {"method": "cosac"},
    "tracer_roles": {"method": "tracer_roles"},
    "shapley (masking)": {"method": "shapley", "options": {"value": "masking"}},
    "cal_grpo": {"method": "cal_grpo"},
    "loto (replay)": {"method": "loto", "options": {"value": "replay"}},
    "shape_max": {"method": "shape_max"},
    "oracle": {"method": "oracle", "options": {"form": "additive"}},
    "oracle (spoiler)": {"method": "oracle", "options": {"form": "spoiler"}},
    # the controls of an audit of loto's lead at K = 8 (benchmarks.cooperation): the exact advantage
    # centred but not scaled, its positive part (no push-down), its baseline p_i from the group's G
    # answers pooled with 8 more of each agent alone (replayed, not trained on: the G-sample baseline's
    # noise), a broadcast that reinforces right team answers only (RAFT), and grpo normalised per agent
    # (Dr. MAS)
    "oracle (mean only)": {"method": "oracle", "options": {"form": "additive", "mode": "mean_only"}},
    "oracle (positive part)": {"method": "oracle", "options": {"form": "additive", "push_down": False}},
    "oracle (baseline of 8 more)": {"method": "oracle", "options": {"form": "additive", "baseline_samples": 8}},
    "raft": {"method": "raft"},
    # RAFT's reward ranking (best of the group): the threshold form selects nothing where a team is
    # never wholly right (split at K = 8)
    "raft (best of group)": {"method": "raft", "options": {"select": "best"}},
    "dr_mas": {"method": "dr_mas"},
    "loto (masking)": {"method": "loto", "options": {"value": "masking"}},
    "coverage": {"method": "coverage"},
    "shapley (judge)": {"method": "shapley", "options": {"value": "judge", "judge_template": JUDGE_TEMPLATE,
                                                         "judge_max_new_tokens": JUDGE_TOKENS}},
}

#: the additive team's settings by team size: ``split_kK`` (one LoRA adapter shared by the K solvers)
#: and ``split_kK_roles`` (one adapter per solver: each role its own)
SPLIT_K = {**{f"split_k{k}": k for k in (2, 4, 8)}, **{f"split_k{k}_roles": k for k in (2, 4, 8)}}
PER_ROLE = frozenset(name for name in SPLIT_K if name.endswith("_roles"))
#: COSAC's sequential chain by team size: K solvers of one shared adapter answer in turn, each seeing
#: the earlier answers and keeping or revising the running one; team reward the last answer's score
#: (credit is not additive: a later solver can repair or spoil an earlier one). No closed-form A*.
CHAIN_K = {f"chain_k{k}": k for k in (2, 4, 8)}
#: the settings whose per-seed results are committed (benchmarks/results/credit_arena/<setting>.json)
STORED_K = {**SPLIT_K, **CHAIN_K}
#: the seeds' own claims (issue 39), stored too, each with a table of its own (``claim_markdown``)
CLAIMS = ("gcpo", "parallel_shapley", "tracer")
STORED_SETTINGS = (*STORED_K, *CLAIMS)
#: labels each setting runs by default (``--methods`` replaces them)
SETTING_METHODS = {
    "noisy_q0": ("grpo", "continuation", "shapley (replay)", "cosac"),
    "noisy_q05": ("grpo", "continuation", "shapley (replay)", "cosac"),
    "pr": ("grpo", "continuation", "shapley (replay)", "cosac", "tracer_roles"),
    # the additive team: oracle is the ceiling (shapley (masking) equals it exactly on split: c_i / K,
    # tested, so it is not run twice); cosac needs a fixed turn order (refused on split)
    # the floor and the ceiling; the other methods run as a --methods comparison of their own
    **{name: ("grpo", "oracle") for name in SPLIT_K},
    # the chain: COSAC's own claim (faster learning of agents in turn) against broadcast
    **{name: ("grpo", "cosac") for name in CHAIN_K},
    # the claims: GCPO's coverage credit of a group of samples, Parallel Shapley's judged paths (and
    # masking, which cannot see paths), TRACER's role credit with cost-aware review controllers
    "gcpo": ("grpo", "coverage"),
    "parallel_shapley": ("grpo", "shapley (judge)", "shapley (masking)"),
    "tracer": ("grpo", "tracer_roles"),
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


#: split settings by size: (steps, sub-problems per step, group, held-out sub-problems, seeds,
#: eval_every); a step's tuples are the sub-problems / K and the held-out tuples 200 / K, so every K
#: trains on the same 8 x 4 = 32 answers per step and is measured on the same 200 held-out answers:
#: only how the answers are grouped into teams (and so what broadcast credit mixes) changes with K
SPLIT_SIZES = {
    "quick": (2, 2, 2, 2, 2, 1),
    "default": (12, 8, 4, 200, 3, 4),
    "full": (12, 8, 4, 200, 10, 4),
}


#: chain settings by size: (steps, problems per step, group, held-out problems, seeds, eval_every),
#: the split settings' steps, curve and seeds; a problem is one arith sum for the whole chain
CHAIN_SIZES = {
    "quick": (2, 1, 2, 2, 2, 1),
    "default": (12, 4, 4, 200, 3, 4),
    "full": (12, 4, 4, 200, 10, 4),
}


#: the claims by size: (steps, problems per step, group, held-out problems, seeds, eval_every). The
#: defaults fit about 90 minutes each with --parallel 2 on 2 cores (estimates in the module docstring)
CLAIM_SIZES = {
    "gcpo": {"quick": (2, 2, 2, 4, 2, 1), "default": (12, 8, 4, 100, 5, 4), "full": (12, 8, 4, 100, 10, 4)},
    "parallel_shapley": {"quick": (2, 1, 2, 2, 2, 1), "default": (10, 2, 4, 64, 5, 5),
                         "full": (10, 2, 4, 64, 10, 5)},
    "tracer": {"quick": (1, 1, 4, 6, 2, 1), "default": (12, 4, 4, 200, 8, 4), "full": (12, 4, 4, 200, 10, 4)},
}
#: gcpo's solver reasons before it answers (no reply prefix), so that two right solutions can differ:
#: at 32 tokens the untrained solver was right on 10 of 64 samples at temperature 0.7 and 2 of 16
#: greedily (at 48 tokens 1 of 32 sampled: long ramblings); longer replies stop mid-sentence
GCPO_NEW_TOKENS = 32
#: parallel_shapley's team (protocol ``paths``): two working paths of one shared adapter, then the two
#: free riders; ``earlier`` lets the copier read path_a (in a simultaneous round it sees nothing)
PATHS_PROTOCOL = {"n_paths": 4, "paths_see": "earlier", "reply_prefix": REPLY_PREFIX, "instruction": "Give the answer."}
PATHS_ROLES = ({"name": "path_a", "adapter": "path", "prompt": SOLVER_PROMPT},
               {"name": "path_b", "adapter": "path", "prompt": SOLVER_PROMPT},
               {"name": "copier", "policy": "scripted:copier(agent=path_a_0)"},
               {"name": "silent", "policy": "scripted:silent"},
               # the model with a frozen adapter, i.e. the base model: an aggregator that does not
               # learn, as Parallel Shapley's reward model; see the module docstring
               {"name": "judge", "trainable": False})
#: tracer's price of a review token to the review controller: any price > 0 makes skipping the review
#: of a right answer pay (speaking is worth at most 1 - price x tokens there, skipping 1); at 0.02 a
#: 6-token review of an answer under review that is wrong still pays when it catches it more than 6% of
#: the time (2 p - 1 - 0.12 > -1)
PRICE_PER_TOKEN = 0.02
TRACER_CONTROLLERS = {"enabled": True, "mode": "average_greedy", "stages": ["review"],
                      "price_per_token": PRICE_PER_TOKEN}


def sizes_of(setting: str, size: str) -> tuple[int, int, int, int, int, int]:
    """(steps, problems per step, group, held-out problems, seeds, eval_every); for a split setting
    problems count tuples of K (``SPLIT_SIZES`` divided by K, at least 1)."""
    if setting in CLAIM_SIZES:
        return CLAIM_SIZES[setting][size]
    if setting in SPLIT_K:
        k = SPLIT_K[setting]
        steps, answers, group, heldout, seeds, every = SPLIT_SIZES[size]
        return steps, max(1, answers // k), group, max(1, heldout // k), seeds, every
    if setting in CHAIN_K:
        return CHAIN_SIZES[size]
    return (PR_SIZES if setting == "pr" else SIZES)[size]


def arena_config(setting: str, model: str, sizes: tuple[int, int, int, int, int, int]) -> dict[str, Any]:
    """The base config shared by every method of ``setting`` (only ``credit`` and ``seed`` vary)."""
    if setting not in SETTING_METHODS:
        raise ValueError(f"unknown arena setting {setting!r}; settings: {', '.join(SETTINGS)}")
    steps, problems, group, heldout, _, eval_every = sizes
    if setting in CLAIMS:
        return claim_config(setting, model, sizes)
    if setting in SPLIT_K:
        return split_config(SPLIT_K[setting], model, sizes, per_role=setting in PER_ROLE)
    if setting == "pr":
        protocol = {"name": "proposer_reviewer", "options": PR_PROTOCOL}
        team = {"roles": [dict(r) for r in PR_ROLES]}
    elif setting in CHAIN_K:
        protocol = {"name": "sequential", "options": {**CHAIN, "n_agents": CHAIN_K[setting]}}
        team = {"roles": [{"name": "solver", "prompt": SOLVER_PROMPT, "count": CHAIN_K[setting]}]}
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


def split_config(k: int, model: str, sizes: tuple[int, int, int, int, int, int],
                 per_role: bool = False) -> dict[str, Any]:
    """The additive team: K solvers of one shared adapter (``per_role``: K roles, one adapter each),
    each on its own arith sum, team reward the fraction right; the same decoding, LoRA and optimiser
    as the noisy settings. Held-out
    tuples are drawn as they come (arith's test split has 253 distinct sums, fewer than 200 x K);
    the curve's subset is the first ``CURVE_PROBLEMS / K`` of them (64 sub-problems)."""
    steps, problems, group, heldout, _, eval_every = sizes
    task = {"task": "arith", "k": k, "options": TASK}
    return {
        "model": {"name": model, "lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}},
        "task": {"name": "tuples", "split": "train", "options": task, "limit": 2000},
        "eval_task": {"name": "tuples", "split": "test", "limit": heldout, "options": task},
        "protocol": {"name": "split", "options": {"n_agents": k, "reply_prefix": REPLY_PREFIX,
                                                  "instruction": "Give the answer."}},
        "team": {"roles": [{"name": f"solver{i + 1}", "prompt": SOLVER_PROMPT} for i in range(k)] if per_role
                 else [{"name": "solver", "prompt": SOLVER_PROMPT, "count": k}]},
        "rollout": {"problems_per_step": problems, "group_size": group},
        "backend": {"max_prompt_tokens": 512},
        "sampling": {"max_new_tokens": NEW_TOKENS, "temperature": TEMPERATURE},
        "eval_sampling": {"max_new_tokens": NEW_TOKENS},
        "optim": {"lr": LR, "minibatch_size": 16},
        "steps": steps, "eval_every": eval_every, "eval_curve_limit": max(1, min(CURVE_PROBLEMS // k, heldout)),
        "checkpoint_every": max(1, steps // 2), "keep_checkpoints": 1,
        "tensorboard": False, "log_episodes": 2,
    }


def claim_config(setting: str, model: str, sizes: tuple[int, int, int, int, int, int]) -> dict[str, Any]:
    """A claim's base config: the arena's task, LoRA, optimiser, temperature and curve, with the claim's
    team (``claim_team``); held-out problems are distinct, the curve's are the first ``CURVE_PROBLEMS``
    (every evaluation uses them all when there are no more)."""
    steps, problems, group, heldout, _, eval_every = sizes
    protocol, roles, new_tokens, extra = claim_team(setting, group)
    return {
        "model": {"name": model, "lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}},
        "task": {"name": "arith", "split": "train", "options": TASK, "limit": 2000},
        "eval_task": {"name": "arith", "split": "test", "limit": heldout, "distinct": True, "options": TASK},
        "protocol": protocol, "team": {"roles": roles},
        "rollout": {"problems_per_step": problems, "group_size": group},
        "backend": {"max_prompt_tokens": 512},
        "sampling": {"max_new_tokens": new_tokens, "temperature": TEMPERATURE},
        "eval_sampling": {"max_new_tokens": new_tokens},
        "optim": {"lr": LR, "minibatch_size": 16},
        "steps": steps, "eval_every": eval_every,
        **({"eval_curve_limit": CURVE_PROBLEMS} if heldout > CURVE_PROBLEMS else {}),
        "checkpoint_every": max(1, steps // 2), "keep_checkpoints": 1,
        "tensorboard": False, "log_episodes": 2, **extra,
    }


def claim_team(setting: str, group: int) -> tuple[dict[str, Any], list[dict[str, Any]], int, dict[str, Any]]:
    """(protocol, roles, new tokens per message, other config fields) of a claim: ``gcpo`` one solver
    that reasons (``GCPO_NEW_TOKENS``) and pass@k with k = the group (``eval_samples``);
    ``parallel_shapley`` the paths team (``PATHS_ROLES``; prompts up to 1024 tokens); ``tracer`` the
    ``pr`` team with review controllers priced per token (``TRACER_CONTROLLERS``)."""
    if setting == "gcpo":
        solver = {"name": "solver", "prompt": SOLVER_PROMPT}
        return {"name": "single"}, [solver], GCPO_NEW_TOKENS, {"eval_samples": group}
    if setting == "parallel_shapley":  # the judge reads four paths (a byte-level test tokenizer: 600 tokens)
        return ({"name": "paths", "options": dict(PATHS_PROTOCOL)}, [dict(r) for r in PATHS_ROLES], NEW_TOKENS,
                {"backend": {"max_prompt_tokens": 1024}})
    return ({"name": "proposer_reviewer", "options": PR_PROTOCOL}, [dict(r) for r in PR_ROLES], NEW_TOKENS,
            {"controllers": dict(TRACER_CONTROLLERS)})


def applicable_methods(base: dict[str, Any], labels: Sequence[str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(the methods of ``labels`` the trainer accepts for this config, {label: why not} for the others)."""
    from teamplay.config import TrainConfig, build_config
    from teamplay.credit import credit_methods
    from teamplay.training.wiring.checks import check_run

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
    from teamplay.training.experiments.sweep import Cell

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
                sizes: tuple[int, int, int, int, int, int] | None = None, train: bool = True,
                seeds: Sequence[int] | None = None) -> dict[str, Any]:
    """Train every method x seed of ``setting`` (resuming a stored sweep) and collect per-seed results;
    ``train=False`` only collects the runs the folder already finished (a comparison stopped part-way).
    ``seeds``: train these seeds only (default ``range(sizes[4])``), in a sweep folder of their own."""
    from teamplay.training.experiments.sweep import plan, run_metrics

    sizes = sizes or sizes_of(setting, size)
    base = arena_config(setting, model, sizes)
    labels = tuple(only) if only is not None else SETTING_METHODS[setting]
    unknown = sorted(set(labels) - set(ARENA_METHODS))
    if unknown:
        raise ValueError(f"unknown arena method(s) {', '.join(unknown)}; methods: {', '.join(ARENA_METHODS)}")
    if "grpo" not in labels:
        raise ValueError("the arena compares every method with grpo: keep grpo in --methods")
    methods, refused = applicable_methods(base, labels)
    chosen = seeds is not None
    seeds = tuple(seeds) if chosen else tuple(range(sizes[4]))
    # a --methods comparison, or extra seeds, is a sweep of its own (a sweep folder holds one plan)
    out = folder or Path("runs") / (f"credit_arena-{setting}{'' if size == 'default' else '-' + size}"
                                    f"{'' if only is None else '-more'}"
                                    f"{f'-seeds{seeds[0]}-{seeds[-1]}' if chosen and seeds else ''}")
    # seed by seed: a comparison stopped part-way holds whole seeds, every method paired on them
    sweep = plan(out, base, {"credit": tuple(methods.values())}, seeds).seeds_first()

    if train:
        train_sweep(sweep, setting, parallel)
    label_of = {sweep_label: label for sweep_label, label in
                zip(dict.fromkeys(r.label for r in sweep.runs), methods, strict=True)}
    per_seed: dict[str, dict[int, dict[str, float]]] = {label: {} for label in methods}
    curves: dict[str, dict[int, list[tuple[int, float]]]] = {label: {} for label in methods}
    tokens: dict[str, dict[int, dict[int, float]]] = {label: {} for label in methods}
    for r in sweep.runs:
        run_dir = sweep.run_dir(r)
        if not (run_dir / "done.json").exists():
            continue
        metrics = run_metrics(run_dir)
        metrics["replay_episodes"] = replay_episodes(run_dir)
        metrics["train/messages_updated"] = step_total(run_dir, "samples")
        if setting in CLAIMS:
            metrics.update(claim_metrics(run_dir))
        per_seed[label_of[r.label]][r.seed] = metrics
        curves[label_of[r.label]][r.seed] = run_learning_curve(run_dir)  # on the fixed 64-problem subset
        tokens[label_of[r.label]][r.seed] = step_tokens(run_dir)
    if chosen:  # the seed count this result holds
        sizes = (*sizes[:4], len(seeds), sizes[5])
    return {"setting": setting, "size": size, "sizes": sizes, "config": base, "refused": refused,
            "per_seed": per_seed, "curves": curves, "tokens": tokens, "folder": str(out),
            "runs_total": len(sweep.runs)}


def train_sweep(sweep: Any, setting: str, parallel: int = 1) -> None:
    """Train (resuming) every run of ``sweep``, ``parallel`` at once (Ray tasks, one thread each)
    or one by one in this process, printing each run's start and end."""
    from teamplay.distributed.compose import make_trainer
    from teamplay.training.experiments.sweep import run_sweep

    def announce(r: Any, status: str) -> None:
        print(f"  {setting} {r.name}: {status}", flush=True)

    if parallel > 1:
        from teamplay.distributed.sweep import run_sweep_parallel

        run_sweep_parallel(sweep, parallel, on_run=announce)
    else:
        run_sweep(sweep, lambda cfg, resume: make_trainer(cfg).train(resume=resume), on_run=announce)


def step_total(run_dir: Path, key: str) -> float:
    """``key`` summed over a run's training steps (``samples``: the messages that entered updates)."""
    from teamplay.training.store.metrics import read_metrics

    return float(sum(float(row.get(key) or 0) for row in read_metrics(run_dir) if "reward_mean" in row))


def step_tokens(run_dir: Path) -> dict[int, float]:
    """Generated tokens (counterfactual ones included) after each training step, by step number."""
    from teamplay.training.store.metrics import read_metrics

    return {int(row["step"]): float(row["generated_tokens_total"]) for row in read_metrics(run_dir)
            if "reward_mean" in row and "generated_tokens_total" in row}


def claim_metrics(run_dir: Path) -> dict[str, float]:
    """What the claims' tables read beyond ``run_metrics``: ``train/credit_share/<role>``, the role's
    credit share (its messages' sum of |advantage| over all messages', the step metric ``credit_share``)
    averaged over the training steps that credited anything, and ``untrained/tokens_per_problem``, the
    untrained team's held-out tokens per problem (the step-0 evaluation)."""
    from teamplay.training.store.metrics import read_metrics

    rows = read_metrics(run_dir)
    shares = [row["credit_share"] for row in rows
              if "reward_mean" in row and sum(row.get("credit_share", {}).values())]
    roles = sorted({role for share in shares for role in share})
    out = {f"train/credit_share/{role}": sum(share.get(role, 0.0) for share in shares) / len(shares) for role in roles}
    before = next((row["heldout"] for row in rows if row.get("step") == 0 and "heldout" in row), None)
    if before is not None:
        out["untrained/tokens_per_problem"] = float(before["tokens_per_problem"])
    return out


def replay_episodes(run_dir: Path) -> float:
    """Counterfactual re-executions the run made over all its steps (0 for methods without replays)."""
    from teamplay.training.store.metrics import read_metrics

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


def labels_of(result: dict[str, Any]) -> list[str]:
    """A result's method labels, grpo first and the others by name (the same order before and after
    the result is stored as JSON with sorted keys)."""
    return sorted(result["per_seed"], key=lambda label: (label != "grpo", label))


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


# ------------------------------------------------------------------------------ the split tables
SPLIT_COSTS = (("train/updates", "updates", 0), ("train/messages_updated", "messages in updates", 0),
               ("budget/generated_tokens", "generated tokens", 0))


def _tokens_to_grpo(result: dict[str, Any], label: str) -> tuple[list[float], int]:
    """Per seed both finished, the tokens ``label`` generated until its curve reached grpo's final
    curve accuracy of that seed (reached seeds only), and how many seeds there were."""
    grpo = result["curves"]["grpo"]
    seeds = sorted(set(result["curves"][label]) & set(grpo))
    reached = [tokens_to_reach(result["curves"][label][s], result["tokens"][label][s], grpo[s][-1][1]) for s in seeds]
    return [t for t in reached if math.isfinite(t)], len(seeds)


def versus_grpo(result: dict[str, Any], label: str, key: str = "heldout/team_accuracy"
                ) -> tuple[float, float, int, bool]:
    """``label`` minus grpo, paired: (mean, 95% half-width, seeds, the interval lies above 0); NaN and
    0 seeds where the setting has no ``label`` run."""
    if label not in result["per_seed"]:
        return math.nan, math.nan, 0, False
    mean, half, n = paired_difference(_values(result, label, key), _values(result, "grpo", key))
    return mean, half, n, bool(n >= 2 and math.isfinite(half) and mean - half > 0)


def ceiling(result: dict[str, Any], key: str = "heldout/team_accuracy") -> tuple[float, float, int, bool]:
    """oracle minus grpo (:func:`versus_grpo`): the setting's ceiling."""
    return versus_grpo(result, "oracle", key)


def split_markdown(result: dict[str, Any]) -> tuple[str, list[str], str]:
    """(table, notes, headline) of a stored setting (split or chain), from its stored result alone."""
    setting, k = result["setting"], STORED_K[result["setting"]]
    header = ["method", "seeds", "team acc.", "Δ team acc. vs grpo (paired)", "MDE (80%)", "curve area",
              "Δ curve area vs grpo", "tokens to grpo's final acc.", *(name for _, name, _ in SPLIT_COSTS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    acc, area = "heldout/team_accuracy", "curve_area"
    for label in labels_of(result):
        cells = [label, str(len(result["per_seed"][label])),
                 _cell(*mean_ci(list(_values(result, label, acc).values())))]
        if label == "grpo":
            cells += ["—", "—"]
        else:
            mine, base = _values(result, label, acc), _values(result, "grpo", acc)
            both = sorted(set(mine) & set(base))
            cells += [_cell(*paired_difference(mine, base)[:2], signed=True),
                      _cell(mde([mine[s] - base[s] for s in both]), math.nan) if len(both) >= 2 else "—"]
        cells.append(_cell(*mean_ci(list(_values(result, label, area).values()))))
        cells.append("—" if label == "grpo" else _cell(*paired_difference(
            _values(result, label, area), _values(result, "grpo", area))[:2], signed=True))
        reached, n = _tokens_to_grpo(result, label)
        cells.append(f"{mean_ci(reached)[0]:.0f} ({len(reached)} of {n} reached)" if reached else f"— (0 of {n})")
        for key, _, digits in SPLIT_COSTS:
            cells.append(_cell(*mean_ci(list(_values(result, label, key).values())), digits))
        lines.append("| " + " | ".join(cells).replace(" (n=1)", "") + " |")
    steps, problems, group, heldout, seeds, eval_every = result["sizes"]
    done = sum(len(v) for v in result["per_seed"].values())
    gain, half, learns = calibration(result)
    top, top_half, n_top, above = ceiling(result)
    discriminates = learns and above
    if setting in CHAIN_K:
        return "\n".join(lines), chain_notes(result, done, gain, half, learns), (
            f"{setting}: grpo gain {_cell(gain, half, 3, signed=True)} ({len(result['per_seed']['grpo'])} "
            "seeds; no closed-form ceiling).")
    notes = [
        f"Setting `{setting}`: K = {k} solvers of {adapters_of(setting)}, each on its own arith sum (operands up "
        f"to {TASK['max_operand']}), team reward the fraction right. {done} of {result['runs_total']} runs finished "
        f"(seeds run in order, every method on each). {steps} steps of {problems} tuples x {group} episodes "
        f"({problems * k * group} answers per step, the same at every K); held-out: {heldout} tuples "
        f"({heldout * k} answers), greedy, every {eval_every} steps on the first {max(1, CURVE_PROBLEMS // k)} "
        f"tuples and after training; LoRA r 8 on q and v, lr {LR}, {NEW_TOKENS} new tokens, temperature "
        f"{TEMPERATURE}. Cells: mean ± 95% t interval over seeds; Δ: mean of per-seed differences with its "
        "interval; MDE: the paired difference a two-sided 95% test would find with 80% power at these seeds, "
        "from the sd of the per-seed differences (— below 2 seeds); tokens to grpo's final acc.: generated "
        "tokens until the method's curve reached grpo's final curve accuracy of the same seed.",
        f"Floor: grpo's gain over the untrained team is {_cell(gain, half, 3, signed=True)} "
        f"({LEARNS if learns else 'not beyond its interval'}). Ceiling: oracle - grpo on team accuracy is "
        f"{_cell(top, top_half, 3, signed=True)} over {n_top} paired seeds "
        f"({'above 0' if above else 'not separated from 0'}). "
        + ("This setting can discriminate credit methods." if discriminates else
           "This setting cannot (yet) discriminate credit methods: it needs both."),
    ]
    if result["refused"]:
        notes.append("Not run: " + "; ".join(f"{m} ({why})" for m, why in result["refused"].items()) + ".")
    headline = (f"{setting}: grpo gain {_cell(gain, half, 3, signed=True)}; oracle - grpo "
                f"{_cell(top, top_half, 3, signed=True)} ({n_top} seeds).")
    return "\n".join(lines), notes, headline


def chain_notes(result: dict[str, Any], done: int, gain: float, half: float, learns: bool) -> list[str]:
    """The notes of a chain setting's table: what it is, its sizes, its floor (it has no ceiling)."""
    setting, k = result["setting"], CHAIN_K[result["setting"]]
    steps, problems, group, heldout, seeds, eval_every = result["sizes"]
    beats = [label for label in labels_of(result) if label != "grpo" and versus_grpo(result, label)[3]]
    notes = [
        f"Setting `{setting}`: a chain of K = {k} solvers of one shared LoRA adapter on one arith sum (operands "
        f"up to {TASK['max_operand']}): each answers in turn after the earlier answers, keeping or revising the "
        f"running one; team reward the last answer's score. {done} of {result['runs_total']} runs finished "
        f"(seeds run in order, every method on each). {steps} steps of {problems} problems x {group} episodes; "
        f"held-out: {heldout} problems, greedy, every {eval_every} steps on the first "
        f"{min(CURVE_PROBLEMS, heldout)} and after training; LoRA r 8 on q and v, lr {LR}, {NEW_TOKENS} new "
        f"tokens, temperature {TEMPERATURE}. Cells as in the split tables.",
        f"Floor: grpo's gain over the untrained team is {_cell(gain, half, 3, signed=True)} "
        f"({LEARNS if learns else 'not beyond its interval'}). Ceiling: none (A* has no closed form in a chain: "
        "a later solver can repair or spoil an earlier answer). "
        + (f"Beyond grpo by a paired 95% interval: {', '.join(beats)}." if beats and learns else
           "No method is beyond grpo by a paired 95% interval." if learns else
           "grpo does not learn here, so no comparison says anything about credit."),
    ]
    if result["refused"]:
        notes.append("Not run: " + "; ".join(f"{m} ({why})" for m, why in result["refused"].items()) + ".")
    return notes


def adapters_of(setting: str) -> str:
    """How a split setting's solvers hold their LoRA weights, in words."""
    return "one LoRA adapter each" if setting in PER_ROLE else "one shared LoRA adapter"


# ------------------------------------------------------------------------------ the claims' tables
class ClaimColumns(NamedTuple):
    """The columns of a claim's table.

    Fields:
        measures: (metric key, column, digits) shown as mean ± 95% interval over seeds; ``{k}`` in a
            column stands for the group size.
        paired: the keys whose per-seed difference to grpo is shown with its interval and MDE.
        costs: (counter key, column, digits) of training; a counter a run did not log is 0 for it.
    """

    measures: tuple[tuple[str, str, int], ...]
    paired: tuple[str, ...]
    costs: tuple[tuple[str, str, int], ...]


ACC, PASS_K = "heldout/team_accuracy", "heldout_sampled/samples/pass_at_k"
DISTINCT = "heldout_sampled/samples/distinct_correct_texts"
PATH_ROLES = ("path_a", "path_b", "copier", "silent", "judge")
REVIEW_SPEAKS, TOKENS = "heldout/speak_rate/reviewer_0/review", "heldout/tokens_per_problem"
CLAIM_COLUMNS = {
    "gcpo": ClaimColumns(
        measures=((ACC, "pass@1 (greedy)", 3), (PASS_K, "pass@{k}", 3),
                  ("heldout_sampled/team_accuracy", "sampled acc.", 3),
                  (DISTINCT, "distinct right solutions / problem", 2),
                  ("heldout_sampled/samples/distinct_correct_share", "distinct / right samples", 2),
                  ("curve_area", "curve area", 3)),
        paired=(ACC, PASS_K, DISTINCT),
        costs=(("train/updates", "updates", 0), ("budget/generated_tokens", "training tokens", 0))),
    "parallel_shapley": ClaimColumns(
        measures=((ACC, "team acc.", 3), ("heldout/role_accuracy/path_a", "path_a acc.", 3),
                  ("curve_area", "curve area", 3),
                  *((f"train/credit_share/{role}", f"credit share {role}", 3) for role in PATH_ROLES)),
        paired=(ACC, "train/credit_share/copier", "train/credit_share/silent"),
        costs=(("train/updates", "updates", 0), ("budget/tokens", "rollout tokens", 0),
               ("budget/judge_tokens", "judge tokens", 0), ("budget/generated_tokens", "generated tokens", 0))),
    "tracer": ClaimColumns(
        measures=((ACC, "team acc.", 3), (TOKENS, "tokens / problem", 1), (REVIEW_SPEAKS, "reviews spoken", 2),
                  ("heldout/team/verdict_accuracy", "verdict acc.", 3),
                  ("heldout/team/wrong_caught", "wrong caught", 3),
                  ("heldout/team/right_rejected", "right rejected", 3),
                  ("heldout/team/correction_rate", "correction rate", 3), ("heldout/team/harm_rate", "harm rate", 3),
                  ("heldout/team/first_answer_accuracy/proposer", "proposer first acc.", 3),
                  ("curve_area", "curve area", 3)),
        paired=(ACC, TOKENS),
        costs=(("train/updates", "updates", 0), ("budget/tokens", "rollout tokens", 0),
               ("budget/counterfactual_tokens", "counterfactual review tokens", 0),
               ("budget/generated_tokens", "generated tokens", 0))),
}


def _cost(result: dict[str, Any], label: str, key: str) -> dict[int, float]:
    """A training counter per seed (0 where the run logged none of it: a run without a judge)."""
    return {s: m.get(key, 0.0) for s, m in result["per_seed"][label].items()}


def _paired_cell(result: dict[str, Any], label: str, key: str, digits: int) -> str:
    """``label - grpo`` on ``key``, paired: mean ± interval (MDE m)."""
    mine, base = _values(result, label, key), _values(result, "grpo", key)
    both = sorted(set(mine) & set(base))
    mean, half, n = paired_difference(mine, base)
    cell = _cell(mean, half, digits, signed=True)
    return cell if n < 2 else f"{cell} (MDE {mde([mine[s] - base[s] for s in both]):.{digits}f})"


def claim_markdown(result: dict[str, Any]) -> tuple[str, list[str], str]:
    """(table, notes, headline) of a claim (``CLAIM_COLUMNS``), from its stored result alone."""
    setting = result["setting"]
    columns = CLAIM_COLUMNS[setting]
    digits = {key: d for key, _, d in columns.measures}
    names = {key: name.format(k=result["sizes"][2]) for key, name, _ in columns.measures}
    header = ["method", "seeds", *names.values(), *(f"Δ {names[key]} vs grpo (paired; MDE)" for key in columns.paired),
              *(name for _, name, _ in columns.costs)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label in labels_of(result):
        cells = [label, str(len(result["per_seed"][label]))]
        cells += [_cell(*mean_ci(list(_values(result, label, key).values())), d) for key, _, d in columns.measures]
        cells += ["—" if label == "grpo" else _paired_cell(result, label, key, digits[key]) for key in columns.paired]
        cells += [_cell(*mean_ci(list(_cost(result, label, key).values())), d) for key, _, d in columns.costs]
        lines.append("| " + " | ".join(cells).replace(" (n=1)", "") + " |")
    # (method, key, mean, half-width, seeds) of every paired comparison
    pairs = [(label, key, *paired_difference(_values(result, label, key), _values(result, "grpo", key)))
             for label in labels_of(result) if label != "grpo" for key in columns.paired]
    tested = [(label, key, mean, half) for label, key, mean, half, n in pairs if n >= 2 and math.isfinite(half)]
    apart = [f"{label} is {'above' if mean > 0 else 'below'} grpo on {names[key]}"
             for label, key, mean, half in tested if abs(mean) > half]
    gain, half, learns = calibration(result)
    notes = [*CLAIM_NOTES[setting](result),
             f"Floor: grpo's gain in {names[ACC]} over the untrained team is {_cell(gain, half, 3, signed=True)} "
             f"({LEARNS if learns else DOES_NOT_LEARN}). Ceiling: none ({CLAIM_CEILINGS[setting]}).",
             ("Paired differences beyond their intervals: " + "; ".join(apart)
              + f"; the other {len(tested) - len(apart)} overlap 0." if apart else
              f"Paired differences beyond their intervals: none ({len(tested)} comparisons of 2 seeds or more, "
              "all overlapping 0).")]
    if result["refused"]:
        notes.append("Not run: " + "; ".join(f"{m} ({why})" for m, why in result["refused"].items()) + ".")
    by_method = {label: ", ".join(f"{names[key]} {_cell(mean, h, digits[key], signed=True)}"
                                  for who, key, mean, h, _ in pairs if who == label)
                 for label in labels_of(result) if label != "grpo"}
    headline = (f"{setting}: grpo gain {_cell(gain, half, 3, signed=True)} ({len(result['per_seed']['grpo'])} seeds)"
                + "".join(f"; {label} - grpo: {text}" for label, text in by_method.items()) + ".")
    return "\n".join(lines), notes, headline.replace(" (n=1)", "")


def _untrained(result: dict[str, Any], key: str, gain_key: str) -> str:
    """The untrained team's mean over grpo's seeds of ``key``: each run's final value minus its gain."""
    runs = result["per_seed"]["grpo"].values()
    values = [m[key] - m[gain_key] for m in runs if key in m and gain_key in m]
    return _cell(*mean_ci(values))


def _setting_line(result: dict[str, Any]) -> str:
    """The sizes sentence every claim's notes share."""
    steps, problems, group, heldout, seeds, eval_every = result["sizes"]
    done = sum(len(v) for v in result["per_seed"].values())
    curve = min(CURVE_PROBLEMS, heldout)
    return (f"{done} of {result['runs_total']} runs finished (seeds run in order, every method on each). {steps} "
            f"steps of {problems} problems x {group} episodes for every method; held-out: {heldout} distinct arith "
            f"test problems (operands up to {TASK['max_operand']}), greedy, every {eval_every} steps on the first "
            f"{curve} and after training; LoRA r 8 on q and v, lr {LR}, temperature {TEMPERATURE}. Cells: mean ± 95% "
            "t interval over seeds; Δ: the mean of per-seed differences to grpo (seeds paired: same data order, "
            "initialisation and sampling streams) with its interval, and the MDE: the paired difference a two-sided "
            "95% test would find with 80% power at these seeds (from the sd of the differences).")


def gcpo_notes(result: dict[str, Any]) -> list[str]:
    k = result["sizes"][2]
    return [
        f"Setting `gcpo`: one solver (protocol `single`), {GCPO_NEW_TOKENS} new tokens to work the sum and answer "
        f"(no reply prefix); the group of {k} episodes of a problem is the team that GCPO's coverage game credits "
        f"(coverage: the method's defaults, the packaged all-MiniLM-L6-v2 embedding of the solution, alpha 1). "
        + _setting_line(result) + f" pass@{k}: before and after training every held-out problem is also played "
        f"{k} times at the training temperature (unbiased pass@k; 'sampled acc.' is the mean of those samples). "
        "Diversity: the distinct right solutions per problem (whitespace-normalised texts of its right samples; "
        "every right answer to a sum is the same number, so distinct right answers could not differ between "
        "methods, the written solutions can) and their share of the right samples. 'training tokens' are all "
        "the tokens generated in training (coverage's embeddings generate none).",
        f"The untrained solver: pass@1 {_untrained(result, ACC, 'heldout_gain/team_accuracy')}, pass@{k} "
        f"{_untrained(result, PASS_K, 'heldout_sampled_gain/pass_at_k')}.",
    ]


def paths_notes(result: dict[str, Any]) -> list[str]:
    return [
        "Setting `parallel_shapley`: K = 4 paths and a judge (protocol `paths`, paths_see earlier: path k reads "
        "the earlier paths): path_a and path_b are the model with one shared LoRA adapter; `copier` (scripted) "
        "restates path_a's answer without any work and `silent` (scripted) answers nothing; the judge reads the "
        "four and gives the team's answer, which the verifier scores. The judge is the model with a frozen "
        "adapter (the base model): not trained, as Parallel Shapley's reward model is not, so every method trains "
        "the same two paths under the same aggregator (a trained judge would take a share of every method's "
        "credit and all of masking's, and change the aggregation while the paths learn). Replies start "
        f"'{REPLY_PREFIX}', {NEW_TOKENS} new tokens. shapley (judge): exact Shapley over the 5 agents, v(S) the "
        "verifier's score of the answer the base model (adapters off) writes after reading S's messages, the "
        f"others withheld (31 coalitions per episode, up to {JUDGE_TOKENS} tokens each, asked which answer the "
        "solutions give); shapley (masking): v(S) the team reward when the judge's message is in S, else 0, so it "
        "credits the judge alone and, the judge being frozen, trains nothing. Credit share: a role's sum of "
        "|advantage| over all messages', averaged over the training steps (grpo gives every message of an episode "
        "one advantage: 0.2 each). " + _setting_line(result) + " 'judge tokens': the credit judge's; "
        "'rollout tokens' include the team judge's.",
    ]


def tracer_notes(result: dict[str, Any]) -> list[str]:
    untrained = mean_ci([m["untrained/tokens_per_problem"] for m in result["per_seed"]["grpo"].values()
                         if "untrained/tokens_per_problem" in m])
    return [
        "Setting `tracer`: the proposer/reviewer team of `pr` (both roles trained; propose, review, propose "
        f"again; replies start '{REPLY_PREFIX}' or 'Verdict:', {NEW_TOKENS} new tokens) with learned speak/skip "
        "controllers on the review only (controllers.stages: review; the second proposal always speaks), a "
        f"review token priced at {PRICE_PER_TOKEN}: to its controller a spoken review is worth +1 for a right "
        "verdict and -1 for a wrong one, less the price, against +1 (-1) for skipping the review of a right "
        "(wrong) answer, so skipping pays where the review adds nothing. The controllers learn from every "
        "method's episodes alike (a skipped review is generated anyway, as a counterfactual) and decide greedily "
        "at evaluation (average_greedy). " + _setting_line(result) + " 'tokens / problem' are the held-out "
        "team's (a skipped review costs none): compare them at equal team accuracy.",
        f"The untrained team (its controllers have seen no state, so every review speaks) used "
        f"{_cell(*untrained, 1)} tokens per problem.",
    ]


CLAIM_NOTES = {"gcpo": gcpo_notes, "parallel_shapley": paths_notes, "tracer": tracer_notes}
#: why no claim has a closed-form ceiling
CLAIM_CEILINGS = {
    "gcpo": "no closed-form best credit of a group of samples: the coverage game is a modelling choice, not A*",
    "parallel_shapley": "the team reward is a judge's reading of its paths, with no closed-form A*",
    "tracer": "a review's value depends on the proposer's revision, with no closed-form A*",
}


def stored_markdown(result: dict[str, Any]) -> tuple[str, list[str], str]:
    """(table, notes, headline) of a stored setting: a claim's, or a split or chain setting's."""
    return (claim_markdown if result["setting"] in CLAIMS else split_markdown)(result)


def team_of(setting: str) -> str:
    """The team-size summary's "team" cell of a split or chain setting: its protocol and adapters."""
    adapters = "one adapter per solver" if setting in PER_ROLE else "shared adapter"
    return f"{'chain' if setting in CHAIN_K else 'split'}, {adapters}"


def gain_table(results: Sequence[dict[str, Any]]) -> str:
    """Per team (split, chain), K and method, the paired team-accuracy difference to grpo with its
    interval and MDE, and grpo's own gain (the floor)."""
    lines = ["| team | K | method | seeds | Δ team acc. vs grpo | MDE (80%) | grpo's gain over untrained |",
             "|---|---|---|---|---|---|---|"]
    for result in sorted(results, key=lambda r: (r["setting"] in CHAIN_K, r["setting"] in PER_ROLE,
                                                 STORED_K[r["setting"]])):
        gain, half, _ = calibration(result)
        base = _values(result, "grpo", "heldout/team_accuracy")
        for label in labels_of(result):
            if label == "grpo":
                continue
            mine = _values(result, label, "heldout/team_accuracy")
            mean, h, n = paired_difference(mine, base)
            both = sorted(set(mine) & set(base))
            lines.append(f"| {team_of(result['setting'])} | {STORED_K[result['setting']]} | {label} | {n} | "
                         f"{_cell(mean, h, signed=True)} | "
                         f"{_cell(mde([mine[s] - base[s] for s in both]), math.nan) if n >= 2 else '—'} | "
                         f"{_cell(gain, half, signed=True)} |".replace(" (n=1)", ""))
    return "\n".join(lines)


def gain_figure(results: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """The headline figure: each method's team-accuracy gain over grpo (paired, 95% bars) against K."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from teamplay.atomic import write_atomically

    series: dict[str, list[tuple[int, float, float]]] = {}
    for result in results:
        base = _values(result, "grpo", "heldout/team_accuracy")
        for label in labels_of(result):
            if label != "grpo":
                mean, half, n = paired_difference(_values(result, label, "heldout/team_accuracy"), base)
                if n:
                    name = f"{label} ({team_of(result['setting'])})"
                    series.setdefault(name, []).append((STORED_K[result["setting"]], mean, half if n >= 2 else 0.0))
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (label, points) in enumerate(series.items()):
        points.sort()
        ax.errorbar([p[0] * (1 + 0.04 * i) for p in points], [p[1] for p in points], yerr=[p[2] for p in points],
                    marker="o", capsize=4, label=label)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks([2, 4, 8], labels=["2", "4", "8"])
    ax.set_xlabel("team size K (split: one sub-problem each; chain: one sum in turn)")
    ax.set_ylabel("held-out team accuracy - grpo's (paired)")
    ax.set_title("credit arena: gain over broadcast grpo against team size")
    ax.legend()
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    write_atomically(path, buffer.getvalue())
    return path


def split_region(result: dict[str, Any]) -> str:
    """The BENCHMARKS.md region of a stored setting (split, chain or claim), from its stored result
    (command and machine included)."""
    table, notes, headline = stored_markdown(result)
    return Result(region_name(result["setting"]), table, headline, None, tuple(notes)).markdown(
        result["command"], machine_summary(result))


def summary_region(results: Sequence[dict[str, Any]]) -> str:
    """The team-size summary region: the gain table and the headline figure of every split and chain setting."""
    results = sorted(results, key=lambda r: list(STORED_K).index(r["setting"]))  # the command's order
    runs = sum(len(v) for r in results for v in r["per_seed"].values())
    total = sum(r["runs_total"] for r in results)
    return (f"Team-size summary, from {runs} of {total} runs (`benchmarks/results/credit_arena/*.json`; "
            f"regenerate with `python -m benchmarks.credit_arena --table-only --setting "
            f"{' '.join(r['setting'] for r in results)}`).\n\n{gain_table(results)}\n\n"
            "![gain over grpo against K](benchmarks/figures/credit_arena_split_gain.png)\n")


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
        table, setting_notes, headline = (stored_markdown if setting in STORED_SETTINGS else markdown)(result)
        tables.append(f"**{setting}**\n\n{table}")
        notes += setting_notes
        headlines.append(headline)
        data[setting] = result
    return Result("credit_arena", "\n\n".join(tables), " ".join(headlines), None, tuple(notes), data)


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.credit_arena [--setting S ...] [--parallel N] [--quick | --full]``."""
    from benchmarks.common import DEFAULT_OUTPUT, machine_info, machine_line, write_regions

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
    parser.add_argument("--seeds", type=int, default=None, metavar="N",
                        help="stored settings (split, chain, claims): bring the stored comparison to N paired "
                             "seeds (the stored seeds are kept; only the missing ones train; resumable)")
    parser.add_argument("--table-only", action="store_true",
                        help="train nothing: write the table of the runs the sweep folder has finished "
                             "(stored settings: of the stored per-seed results)")
    parser.add_argument("--collect", action="store_true",
                        help="stored settings: train nothing, store the runs the sweep folder has finished "
                             "(a comparison stopped part-way), then write the tables")
    args = parser.parse_args(argv)
    if args.seeds is not None and (args.seeds < 1 or set(args.setting) - set(STORED_SETTINGS)):
        parser.error("--seeds N needs N >= 1 and stored settings only (split, chain, claims; the others take "
                     "--full)")
    set_threads(args.threads)
    line = machine_line(machine_info())
    size = "quick" if args.quick else ("full" if args.full else "default")
    only = None if args.methods is None else tuple(m.strip() for m in args.methods.split(","))
    team_sizes_done = []
    for setting in args.setting:
        out = None if args.output is None else args.output / setting
        if setting in STORED_SETTINGS:
            split_main(parser, args, setting, size, out, only, line)
            if setting in STORED_K:  # the team-size summary is the split and chain settings'
                team_sizes_done.append(setting)
            continue
        try:
            result = run_setting(setting, args.model, size, out, only, args.parallel, train=not args.table_only)
        except ValueError as exc:
            parser.error(str(exc))
        table, notes, headline = markdown(result)
        print(f"\n## {setting}\n\n{table}", *notes, headline, sep="\n\n")
        if args.quick:
            continue
        # the per-seed evidence behind this table, committed beside the split settings' (its table is
        # still written from the sweep folder, as before)
        if any(result["per_seed"].values()):
            flags = [f"--setting {setting}", *(["--full"] if args.full else []),
                     *([f"--methods '{args.methods}'"] if args.methods else [])]
            save_result({**result, "command": " ".join(["python -m benchmarks.credit_arena", *flags]), "machine": line},
                        result_path(setting, size, more=only is not None))
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
    if team_sizes_done and not args.quick and only is None:  # a --methods comparison has its own table only
        write_team_size_summary(size)


def split_main(parser: argparse.ArgumentParser, args: argparse.Namespace, setting: str, size: str,
               out: Path | None, only: tuple[str, ...] | None, line: str) -> str:
    """One stored setting (split, chain or claim): train (resuming) and store its per-seed results, or with
    ``--table-only`` read the stored ones; then its region of BENCHMARKS.md and its learning-curve figure."""
    from benchmarks.common import DEFAULT_OUTPUT, write_regions

    suffix = ("" if size == "default" else "_" + size) + ("" if only is None else "_more")
    path = result_path(setting, size, more=only is not None)
    if args.table_only:
        if not path.is_file():
            parser.error(f"--table-only: no stored results for {setting} ({path.name}); run the comparison first")
        result = load_result(path)
    elif args.seeds is not None and path.is_file() and not args.quick:
        result = add_seeds(parser, args, setting, size, out, only, line, path)
    else:
        try:
            result = run_setting(setting, args.model, size, out, only, args.parallel, train=not args.collect,
                                 seeds=None if args.seeds is None else range(args.seeds))
        except ValueError as exc:
            parser.error(str(exc))
        flags = [f"--setting {setting}", *(["--full"] if args.full else []),
                 *([f"--seeds {args.seeds}"] if args.seeds is not None else []),
                 *([f"--parallel {args.parallel}"] if args.parallel > 1 else []),
                 *([f"--methods '{args.methods}'"] if args.methods else [])]
        result = {**result, "command": " ".join(["python -m benchmarks.credit_arena", *flags]), "machine": line}
        if not args.quick:
            save_result(result, path)
    table, notes, headline = stored_markdown(result)
    print(f"\n## {setting}\n\n{table}", *notes, headline, sep="\n\n")
    if args.quick:
        return setting
    body = split_region(result)
    png = figure(result, FIGURES / f"credit_arena_{setting}{suffix}.png")
    if png is not None:
        body += f"\n![learning curves: {setting}](benchmarks/figures/{png.name})\n"
    write_regions(DEFAULT_OUTPUT, {region_name(setting) + suffix: body})
    print(f"updated {DEFAULT_OUTPUT.name}: {region_name(setting) + suffix}")
    return setting


def add_seeds(parser: argparse.ArgumentParser, args: argparse.Namespace, setting: str, size: str,
              out: Path | None, only: tuple[str, ...] | None, line: str, path: Path) -> dict[str, Any]:
    """``--seeds N`` on a stored comparison: train the seeds below N it does not hold (every method
    on each, in a sweep folder of their own, resumable), add them to the stored result and save it."""
    stored = load_result(path)
    missing = [s for s in range(args.seeds) if s not in seeds_held(stored)]
    if not missing:
        print(f"{setting}: the stored comparison holds seeds {sorted(seeds_held(stored))} already")
        return stored
    try:
        new = run_setting(setting, args.model, size, out, only, args.parallel, train=not args.collect,
                          seeds=missing)
        result = merge_results(stored, new, line)
    except ValueError as exc:
        parser.error(str(exc))
    flags = [f"--setting {setting}", *(["--full"] if args.full else []), f"--seeds {args.seeds}",
             *([f"--parallel {args.parallel}"] if args.parallel > 1 else []),
             *([f"--methods '{args.methods}'"] if args.methods else [])]
    result["command"] = " ".join(["python -m benchmarks.credit_arena", *flags])
    save_result(result, path)
    return result


def stored_team_size_results(size: str = "default") -> list[dict[str, Any]]:
    """Every split and chain setting's stored default comparison of this size (the ones that exist)."""
    paths = [result_path(s, size) for s in STORED_K]
    return [load_result(p) for p in paths if p.is_file()]


def write_team_size_summary(size: str = "default") -> None:
    """The team-size summary region and headline figure, from every stored split and chain result
    (``credit_arena_split_summary``; ``_full`` for the --full comparisons)."""
    from benchmarks.common import DEFAULT_OUTPUT, write_regions

    suffix = "" if size == "default" else f"_{size}"
    results = stored_team_size_results(size)
    if results:
        gain_figure(results, FIGURES / f"credit_arena_split_gain{suffix}.png")
        write_regions(DEFAULT_OUTPUT, {f"credit_arena_split_summary{suffix}": summary_region(results)})


if __name__ == "__main__":
    main()
