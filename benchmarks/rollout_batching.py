"""Lock-step batched rollouts vs the same episodes one at a time.

The embedded model (SmolLM2-135M-Instruct, one LoRA adapter per role, HF backend with its default
micro-batch of 16) plays arith level-1 problems with greedy decoding. The same jobs run twice in
the same process: all at once through one ``RolloutRunner.run(jobs)`` (one batched generate per
turn and adapter) and one at a time (``runner.run([job])`` per job). Reported: completion tokens
per second of both, their ratio, and whether the transcripts are identical (greedy decoding must
not depend on the batch; a difference would be float rounding of padded batches flipping an
argmax, and is counted, not hidden).

    python -m benchmarks rollout_batching            # 32 problems single, 16 proposer_reviewer R=2
    python -m benchmarks.rollout_batching --quick    # 4 problems, single only
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.common import EMBEDDED_MODEL, Result, arith_rollouts, fmt_ratio, markdown_table, script_main

#: the target ratio (batched tokens/s over one-at-a-time tokens/s) on a 2-core CPU
TARGET = 3.0


@dataclass(frozen=True)
class Comparison:
    """One protocol's measurement.

    Fields:
        protocol: protocol name and options, as shown in the table.
        episodes: jobs run by each variant.
        generate_calls_batched / generate_calls_sequential: backend calls of each variant.
        tokens_batched / tokens_sequential: completion tokens generated (equal when identical).
        seconds_batched / seconds_sequential: wall time of each variant's runs.
        identical: episodes whose messages (texts and token ids) are the same in both variants.
    """

    protocol: str
    episodes: int
    generate_calls_batched: int
    generate_calls_sequential: int
    tokens_batched: int
    tokens_sequential: int
    seconds_batched: float
    seconds_sequential: float
    identical: int

    @property
    def speedup(self) -> float:
        """(tokens/s batched) / (tokens/s one at a time)."""
        return (self.tokens_batched / self.seconds_batched) / (self.tokens_sequential / self.seconds_sequential)


def compare(model: str, protocol: str, options: dict, n_problems: int, max_new_tokens: int) -> Comparison:
    """Run ``n_problems`` arith jobs batched and one at a time under ``protocol``; see the module doc."""
    setup = arith_rollouts(model, protocol, n_problems, 1, max_new_tokens, temperature=0.0, options=options)
    runner, jobs = setup.runner, setup.jobs

    runner.run(jobs[:1])  # warm-up: first-call allocations and kernel selection are not measured
    batched = runner.run(jobs)
    stats_b = runner.last_stats
    one_by_one, seconds_s, calls_s = [], 0.0, 0
    for i, job in enumerate(jobs):
        one_by_one.extend(runner.run([job], seed=i))  # job i gets seed i in the batched run too
        seconds_s += runner.last_stats.seconds
        calls_s += runner.last_stats.generate_calls
    identical = sum(_transcript(a) == _transcript(b) for a, b in zip(batched, one_by_one, strict=True))
    label = protocol + "".join(f", {k}={v}" for k, v in options.items())
    return Comparison(label, len(jobs), stats_b.generate_calls, calls_s, stats_b.tokens,
                      sum(ep.tokens for ep in one_by_one), stats_b.seconds, seconds_s, identical)


def _transcript(episode) -> tuple:
    return tuple((m.agent, m.text, tuple(m.completion_ids)) for m in episode.messages)


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """``quick``: 4 problems, 8 new tokens, protocol ``single`` only. Otherwise 32 problems, 48 new
    tokens for ``single``, and 16 problems of ``proposer_reviewer`` with 2 rounds."""
    n, max_new = (4, 8) if quick else (32, 48)
    # proposer_reviewer (two turns per episode) on half the problems keeps the suite under 15 minutes
    setups = [("single", {}, n)] + ([] if quick else [("proposer_reviewer", {"rounds": 2}, n // 2)])
    rows, data = [], []
    comparisons = [compare(model, p, o, k, max_new) for p, o, k in setups]
    for c in comparisons:
        rows.append([c.protocol, c.episodes, f"{c.generate_calls_batched} / {c.generate_calls_sequential}",
                     f"{c.tokens_batched / c.seconds_batched:.1f}",
                     f"{c.tokens_sequential / c.seconds_sequential:.1f}",
                     f"**{fmt_ratio(c.speedup)}**", f"{c.identical}/{c.episodes}"])
        data.append({**c.__dict__, "speedup": c.speedup})
    table = markdown_table(["protocol", "episodes", "generate calls (batched / one at a time)",
                            "tokens/s batched", "tokens/s one at a time", "ratio", "identical transcripts"],
                           rows)
    worst = min(c.speedup for c in comparisons)
    met = worst >= TARGET
    all_same = all(c.identical == c.episodes for c in comparisons)
    headline = (f"batched lock-step rollouts generate {', '.join(fmt_ratio(c.speedup) for c in comparisons)} "
                f"the tokens/s of one-at-a-time rollouts ({', '.join(c.protocol for c in comparisons)}); "
                f"target ≥ {TARGET:.0f}× {'met' if met else 'NOT met'}; transcripts "
                f"{'identical' if all_same else 'differ in some episodes (see table)'}.")
    notes = (f"Model {model} (float32, LoRA r=8 adapters at initialisation), arith level 1, greedy, "
             f"max_new_tokens={max_new}, HF backend micro-batch 16. Each variant runs after a one-job "
             f"warm-up; tokens are completion tokens.",)
    return Result("rollout_batching", table, headline, met, notes,
                  {"model": model, "max_new_tokens": max_new, "comparisons": data})


def main() -> None:
    script_main(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
