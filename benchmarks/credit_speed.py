"""Wall time of the credit layer (no model calls), to set against generation time.

Two measurements:

1. exact Shapley for 8-agent vote teams over 1,024 episodes (256 coalitions each, the vote
   characteristic function vectorised over coalitions, one coefficient-matrix product per episode);
2. every registered method of credit part A (except ``coverage``, whose cost is the embedding model)
   on a training-size batch: 8 problems x 8 episodes of a 4-agent vote team.

Usage: ``python benchmarks/credit_speed.py [--quick]``; or ``from benchmarks.credit_speed import run``.
``run(quick)`` returns a dict of seconds (and per-episode milliseconds) for the lead's report of
"credit time as a fraction of generation time".
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import teamplay.credit.methods  # noqa: F401  (registers the methods)
from teamplay.credit.registry import CreditBatch, assign
from teamplay.credit.values.characteristic import VoteCharacteristic
from teamplay.credit.values.shapley import shapley_exact
from teamplay.envs.voting import plurality
from teamplay.records import Episode, Message, TaskItem


def _episode(rng: np.random.Generator, n_agents: int, problem: str, rounds: int = 1) -> Episode:
    agents = tuple(f"solver_{i}" for i in range(n_agents))
    answers = [str(x) if x < 7 else None for x in rng.integers(0, 8, n_agents)]  # "4" is right
    msgs = tuple(Message(a, "solver", r, "solve", f"Round {r}: the answer is {x}.", answer=x,
                         completion_ids=(1,) * 40, logprobs=(-1.0,) * 40)
                 for r in range(rounds) for a, x in zip(agents, answers, strict=True))
    final = plurality(answers)
    return Episode(problem, "g", agents, msgs, final, 1.0 if final == "4" else 0.0,
                   agent_answers=dict(zip(agents, answers, strict=True)))


def _score(text: str, item: TaskItem) -> float:
    return 1.0 if text == item.reference else 0.0


def run(quick: bool = False) -> dict:
    """Time the credit layer; ``quick`` shrinks the Shapley sweep to 128 episodes."""
    rng = np.random.default_rng(0)
    item = TaskItem("bench/0", "What is 2+2?", "4")
    n_eps = 128 if quick else 1024
    episodes = [_episode(rng, 8, "bench/0") for _ in range(n_eps)]
    shapley_exact(8, np.zeros(256))  # build the cached coefficient matrix outside the timing
    start = time.perf_counter()
    for ep in episodes:
        cf = VoteCharacteristic(ep, lambda a: _score(a, item))
        shapley_exact(8, cf.table())
    shapley_s = time.perf_counter() - start

    batches = []
    for p in range(8):
        pitem = TaskItem(f"bench/{p}", "What is 2+2?", "4")
        eps = tuple(_episode(rng, 4, pitem.id, rounds=2) for _ in range(8))
        batches.append(CreditBatch(eps, pitem, _score, lambda t: t))
    per_method = {}
    for name in ("grpo", "gspo", "shapley", "shapley_prm", "shape_max"):
        if name == "shape_max":  # candidates need agent_correct
            use = [CreditBatch(tuple(_with_correct(e) for e in b.episodes), b.item, b.score, b.extract)
                   for b in batches]
        else:
            use = batches
        start = time.perf_counter()
        for b in use:
            assign(name, b)
        per_method[name] = time.perf_counter() - start
    return {
        "shapley_exact_8_agents": {"episodes": n_eps, "seconds": shapley_s,
                                   "ms_per_episode": 1e3 * shapley_s / n_eps},
        "training_batch_8x8_4_agents_seconds": per_method,
    }


def _with_correct(ep: Episode) -> Episode:
    correct = {a: (1.0 if x == "4" else 0.0) for a, x in ep.agent_answers.items()}
    return Episode(ep.problem_id, ep.group_id, ep.agents, ep.messages, ep.final_answer, ep.reward,
                   ep.agent_answers, correct)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="128 instead of 1,024 episodes")
    args = parser.parse_args()
    print(json.dumps(run(quick=args.quick), indent=2))


if __name__ == "__main__":
    main()
