"""Credit time as a fraction of the time the embedded model takes to generate the same episodes.

Credit side (``benchmarks/credit_speed.py``, no model calls): exact Shapley for 8-agent vote teams
over 1,024 episodes (256 coalitions each), and each registered credit method on a training batch
of 8 problems x 8 episodes of a 4-agent vote team (two rounds of messages per agent).

Generation side, measured in the same run: the embedded model plays a 4-agent ``vote`` team on
arith level 1 with training-style sampling (temperature 1, 48 new tokens at most) through
``RolloutRunner``. Seconds per message are measured on ``P`` problems x 8 episodes (P = 4 in the
suite's run: half the training batch) and scaled by message count to the batch sizes of the credit
side: 8 x 8 x 4 messages, and 1,024 x 8 messages for the 8-agent Shapley sweep. The 8-agent
figure is always an extrapolation (an 8-agent team's messages cost what a 4-agent team's do: each
solver sees only the problem) and the table says so.

    python -m benchmarks credit_fraction
    python -m benchmarks.credit_fraction --quick
"""

from __future__ import annotations

from benchmarks import credit_speed
from benchmarks.common import EMBEDDED_MODEL, Result, arith_rollouts, fmt_pct, markdown_table, script_main

#: the target: credit under this fraction of generation time, for teams up to 8 agents
TARGET = 0.02
EPISODES_PER_PROBLEM = 8


def generation_seconds_per_message(model: str, n_problems: int, group: int, max_new_tokens: int) -> dict:
    """Sampled rollouts of a 4-agent vote team; seconds, messages and tokens of the measured run."""
    setup = arith_rollouts(model, "vote", n_problems, group, max_new_tokens, temperature=1.0,
                           options={"n_agents": 4}, split="train")
    runner = setup.runner
    runner.run(setup.jobs[:1], seed=10_000)  # warm-up
    runner.run(setup.jobs, seed=0)
    stats = runner.last_stats
    return {"episodes": stats.episodes, "messages": stats.requests, "tokens": stats.tokens,
            "seconds": stats.seconds, "seconds_per_message": stats.seconds / stats.requests}


def run(quick: bool = False, model: str = EMBEDDED_MODEL, gen_problems: int | None = None) -> Result:
    """``quick``: 128 Shapley episodes, generation measured on 1 problem x 2 episodes with 8 new
    tokens. Otherwise 1,024 episodes, and generation measured on 4 problems x 8 episodes (half the
    8 x 8 batch, to keep the suite under 15 minutes on 2 cores; ``gen_problems=8`` measures it all)
    with 48 new tokens."""
    credit = credit_speed.run(quick=quick)
    if quick:
        gen = generation_seconds_per_message(model, gen_problems or 1, 2, 8)
    else:
        gen = generation_seconds_per_message(model, gen_problems or 4, EPISODES_PER_PROBLEM, 48)
    per_msg = gen["seconds_per_message"]
    measured_batch = gen["messages"] == 8 * EPISODES_PER_PROBLEM * 4
    batch_gen = per_msg * 8 * EPISODES_PER_PROBLEM * 4
    shap = credit["shapley_exact_8_agents"]
    shap_gen = per_msg * shap["episodes"] * 8
    rows = [[f"exact Shapley, 8 agents, {shap['episodes']:,} episodes", f"{shap['seconds']:.3f}",
             f"{shap_gen:.0f} (extrapolated)", f"**{fmt_pct(shap['seconds'] / shap_gen)}**"]]
    fractions = {"shapley_exact_8_agents": shap["seconds"] / shap_gen}
    for method, seconds in credit["training_batch_8x8_4_agents_seconds"].items():
        fractions[method] = seconds / batch_gen
        rows.append([f"`{method}`, 8 problems × 8 episodes, 4-agent vote", f"{seconds:.3f}",
                     f"{batch_gen:.0f}" + ("" if measured_batch else " (extrapolated)"),
                     f"**{fmt_pct(fractions[method])}**"])
    table = markdown_table(["credit", "credit s", "generation s", "credit / generation"], rows)
    worst_name = max(fractions, key=fractions.get)
    met = fractions[worst_name] < TARGET
    headline = (f"credit takes at most {fmt_pct(fractions[worst_name])} of generation time ({worst_name}); "
                f"exact 8-agent Shapley over {shap['episodes']:,} episodes "
                f"{fmt_pct(fractions['shapley_exact_8_agents'])}; target < {fmt_pct(TARGET)} "
                f"{'met' if met else 'NOT met'}.")
    notes = (f"Generation measured on {gen['episodes']} episodes of a 4-agent vote team ({gen['messages']} "
             f"messages, {gen['tokens']} tokens, {gen['seconds']:.1f} s, {per_msg * 1e3:.0f} ms per message; "
             f"model {model}, temperature 1). Rows marked extrapolated scale that per-message time by "
             f"message count. The credit side uses `benchmarks/credit_speed.py`'s synthetic episodes "
             f"(40-token messages); credit cost does not depend on the text.",)
    return Result("credit_fraction", table, headline, met, notes,
                  {"credit": credit, "generation": gen, "fractions": fractions, "model": model})


def main() -> None:
    script_main(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
