"""Tokens/s of the demo's rollouts through ``RolloutRunner``, with the teamplay on ``PYTHONPATH``.

Written against the APIs that every teamplay since 2026-12-03 has, so that the rollout-speed issue's
baseline can be measured with the code of the day the issue was filed, side by side with today's
(``rollout_gain`` measures today's code in the baseline's settings, which already carries today's
sampler, cache and decoding loop). The demo's team and protocol (controllers off), 8 arith problems
(level 1, operands up to 12) x 4 episodes, T=0.7, 48 new tokens, one warm-up run, then ``--repeats``
timed runs; prints one JSON line (tokens/s of each run: completion tokens over wall time).

    git worktree add --detach ../teamplay-then bac7309     # the tree of 2026-12-03, before the issue's work
    PYTHONPATH=../teamplay-then python benchmarks/runner_throughput.py --dtype float32 --micro-batch 16
    python benchmarks/runner_throughput.py --dtype auto --micro-batch 32
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from types import ModuleType


def first_module(*names: str) -> ModuleType:
    """The first of ``names`` that imports (the module moved between teamplay versions)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(f"none of {names}")


def wiring_function(name: str):
    """The wiring function ``name``: in its own module of ``teamplay.training.wiring`` (today), or in
    the one wiring module of an earlier teamplay (``wiring.setup``, before that ``training.setup``)."""
    modules = {"load_items": "envs", "env_factory": "envs", "build_team_model": "model",
               "rollout_sampling": "sampling"}
    return getattr(first_module(f"teamplay.training.wiring.{modules[name]}", "teamplay.training.wiring.setup",
                                "teamplay.training.setup"), name)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", help="model.dtype (float32 only before 2026-12-03)")
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args(argv)
    import torch

    from teamplay.agents.backends.hf import HFBackend
    from teamplay.config import TrainConfig, build_config

    torch.set_num_threads(args.threads)
    rollout = first_module("teamplay.training.play.rollout", "teamplay.training.rollout")
    model = {"name": args.model, "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"}}
    if args.dtype != "float32":
        model["dtype"] = args.dtype
    cfg = build_config(TrainConfig, {
        "model": model, "backend": {"name": "hf", "max_prompt_tokens": 768},
        "task": {"name": "arith", "split": "train", "options": {"level": 1, "max_operand": 12}, "seed": 0,
                 "limit": 2000},
        "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
        "team": {"roles": [{"name": "proposer"}, {"name": "reviewer"}]},
        "controllers": {"enabled": False}, "sampling": {"max_new_tokens": 48, "temperature": 0.7}})
    task, items = wiring_function("load_items")(cfg.task)
    make_env, team = wiring_function("env_factory")(task, cfg.protocol, cfg.team)
    backend = HFBackend(wiring_function("build_team_model")(cfg.model, team, cfg.seed), max_prompt_tokens=768,
                        micro_batch_size=args.micro_batch)
    try:
        sampling = wiring_function("rollout_sampling")(cfg.sampling, cfg.credit.token)
    except TypeError:  # before 2026-12-04: rollout_sampling(cfg)
        sampling = wiring_function("rollout_sampling")(cfg)
    runner = rollout.RolloutRunner(make_env, backend, sampling)
    jobs = [rollout.RolloutJob(item, f"p{p}") for p, item in enumerate(items[:8]) for _ in range(4)]
    runner.run(jobs, seed=1)  # warm-up
    rates = []
    for r in range(args.repeats):
        runner.run(jobs, seed=100 + r)
        stats = runner.last_stats
        rates.append(stats.tokens / stats.seconds)
    result = {"dtype": args.dtype,
              "resolved": str(backend.team_model.base_model.dtype).removeprefix("torch."),
              "micro_batch": args.micro_batch, "threads": args.threads, "tokens_per_second": rates}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
