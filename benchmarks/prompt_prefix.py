"""Generation with the micro-batch's common prompt prefix run once vs every prompt run whole.

The HF backend runs the leading tokens that every prompt of a micro-batch shares (system prompt,
answer instruction) once and hands their key/value cache to ``generate``
(``HFBackend(share_prompt_prefix=True)``, the default). This benchmark evaluates the same team on
the same held-out problems twice in one process, with the prefix shared and without, alternating
the order over two repetitions, and reports the wall time of each, their ratio and whether the
transcripts are identical (greedy decoding: a difference would be float rounding flipping an
argmax, and is counted, not hidden).

Two teams (embedded model, greedy, one thread):

* the credit arena's proposer/reviewer setting (``benchmarks.credit_arena``, short prompts, 6 new tokens);
* ``proposer_reviewer`` with the default prompts on arith level 2 (24 new tokens).

    python -m benchmarks prompt_prefix            # 48 problems per team
    python -m benchmarks.prompt_prefix --quick    # 4 problems, the arena team only
"""

from __future__ import annotations

import time
from typing import Any

from benchmarks.common import EMBEDDED_MODEL, Result, fmt_ratio, markdown_table, script_main


def _teams(model: str, n: int, quick: bool) -> dict[str, dict[str, Any]]:
    from benchmarks.credit_arena import arena_config

    arena = arena_config("pr", model, (1, 1, 2, n, 1, 1))
    teams = {"credit arena (proposer/reviewer setting)": arena}
    if not quick:
        default = {**arena, "team": {"roles": [{"name": "proposer"}, {"name": "reviewer"}]},
                   "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
                   "eval_task": {"name": "arith", "split": "test", "limit": n, "options": {"level": 2}},
                   "eval_sampling": {"max_new_tokens": 24}}
        teams["proposer_reviewer, default prompts"] = default
    return teams


def measure(config: dict[str, Any], repeats: int = 2) -> dict[str, Any]:
    """Evaluate ``config``'s team on its held-out set with and without prefix sharing (``repeats``
    times each, alternating which goes first); seconds are summed over the repeats."""
    from teamplay.config import TrainConfig, build_config
    from teamplay.training.play.evaluation import evaluate
    from teamplay.training.play.rollout import RolloutRunner
    from teamplay.training.wiring.sampling import sampling_params
    from teamplay.training.wiring.wired_run import build_run

    cfg = build_config(TrainConfig, {**config, "credit": {"method": "grpo"}})
    parts = build_run(cfg)
    seconds = {True: 0.0, False: 0.0}
    transcripts: dict[bool, list] = {}
    prompt_tokens = 0
    for r in range(repeats):
        for share in ((False, True) if r % 2 == 0 else (True, False)):
            parts.backend.share_prompt_prefix = share
            runner = RolloutRunner(parts.make_eval_env, parts.backend, sampling_params(cfg.eval_sampling))
            start = time.perf_counter()
            episodes, _ = evaluate(runner, parts.eval_task, parts.eval_items, seed=0)
            seconds[share] += time.perf_counter() - start
            transcripts[share] = [tuple((m.text, tuple(m.completion_ids)) for m in ep.messages) for ep in episodes]
            prompt_tokens = sum(len(m.prompt_ids) for ep in episodes for m in ep.messages)
    identical = sum(a == b for a, b in zip(transcripts[True], transcripts[False], strict=True))
    return {"problems": len(parts.eval_items), "calls": sum(len(t) for t in transcripts[True]),
            "prompt_tokens": prompt_tokens, "seconds_whole": seconds[False], "seconds_shared": seconds[True],
            "ratio": seconds[False] / seconds[True], "identical": identical, "repeats": repeats}


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """``quick``: 4 problems of the arena team, one repetition; otherwise 48 problems per team."""
    n, repeats = (4, 1) if quick else (48, 2)
    data = {name: measure(config, repeats) for name, config in _teams(model, n, quick).items()}
    rows = [[name, d["problems"], d["calls"], f"{d['prompt_tokens'] / d['calls']:.0f}",
             f"{d['seconds_whole']:.1f}", f"{d['seconds_shared']:.1f}", f"**{fmt_ratio(d['ratio'])}**",
             f"{d['identical']}/{d['problems']}"] for name, d in data.items()]
    table = markdown_table(["team", "problems", "model calls", "prompt tokens per call", "s, whole prompts",
                            "s, prefix shared", "speed-up", "identical transcripts"], rows)
    notes = (f"Held-out evaluation (greedy) of the untrained team, {repeats} repetition(s) per variant in "
             f"one process, alternating which runs first; seconds are summed over the repetitions. HF "
             f"backend, micro-batch 16; the shared prefix is what every prompt of a micro-batch starts with "
             f"(role prompt and answer instruction, at least 8 tokens).",)
    ratios = ", ".join(f"{fmt_ratio(d['ratio'])} ({name})" for name, d in data.items())
    same = all(d["identical"] == d["problems"] for d in data.values())
    headline = (f"running the common prompt prefix once makes held-out evaluation {ratios} faster; transcripts "
                f"{'identical' if same else 'differ in some episodes (see table)'}.")
    return Result("prompt_prefix", table, headline, None, notes, {"teams": data})


if __name__ == "__main__":
    script_main(run, "shared prompt prefix vs whole prompts in generation")
