"""The benchmarks of ``python -m benchmarks``, in the order they run, and the COSAC bandit adapter.

Each entry maps a name (the ``bench:NAME`` markers of BENCHMARKS.md) to ``run(quick, model) ->
Result``. ``cosac_bandit`` needs no model; its ``model`` argument is ignored.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks import (
    async_overlap,
    cosac_bandit,
    credit_arena,
    credit_fidelity,
    credit_fraction,
    federated,
    federated_byzantine,
    head_scoring,
    lora_memory,
    prompt_prefix,
    ray_scaleout,
    replay_cost,
    rollout_batching,
    rollout_gain,
    rollout_overhead,
    rollout_speed,
    serve_throughput,
    token_credit_step,
    trainer_vs_trl,
    update_speed,
)
from benchmarks.common import Result, fmt_ratio


def cosac_result(quick: bool = False, model: str | None = None) -> Result:
    """``benchmarks/cosac_bandit.py``'s table: 10 seeds for K = 2, 4, 8, 16 (``quick``: 2 seeds,
    K = 2, 4). No target: it documents how much closer COSAC's advantages are to the exact ones."""
    seeds, ks = (2, (2, 4)) if quick else (10, (2, 4, 8, 16))
    rows = cosac_bandit.run(seeds=seeds, Ks=ks)
    gains = ", ".join(f"K={r['K']}: {fmt_ratio(r['ma_over_cosac'])}" for r in rows)
    headline = f"MA-GRPO's advantage MSE over COSAC's: {gains} (mean over {seeds} seeds)."
    notes = ("Advantage MSE against the exact SeqAU advantages (N=16 rollouts, A=4 actions, COSAC λ=1.0 with "
             "L=8 fictitious continuations and the sampled baseline, HA-GRPO with τ=0.3); mean ± standard "
             "error over seeds. Ratios above 1× mean COSAC is closer to the exact advantages.",)
    return Result("cosac_bandit", cosac_bandit.markdown_table(rows), headline, None, notes, {"rows": rows})


#: name -> run(quick, model); the order in which ``python -m benchmarks`` runs them
BENCHMARKS: dict[str, Callable[..., Result]] = {
    "rollout_batching": rollout_batching.run,
    "prompt_prefix": prompt_prefix.run,
    "rollout_overhead": rollout_overhead.run,
    "rollout_speed": rollout_speed.run,
    "rollout_gain": rollout_gain.run,
    "credit_fraction": credit_fraction.run,
    "trainer_vs_trl": trainer_vs_trl.run,
    "update_speed": update_speed.run,
    "head_scoring": head_scoring.run,
    "lora_memory": lora_memory.run,
    "cosac_bandit": cosac_result,
    "replay_cost": replay_cost.run,
    "ray_scaleout": ray_scaleout.run,
    "token_credit_step": token_credit_step.run,
    "federated": federated.run,
    "federated_byzantine": federated_byzantine.run,
    "credit_fidelity": credit_fidelity.run,
    "credit_arena": credit_arena.run,
    "serve_throughput": serve_throughput.run,
    "async_overlap": async_overlap.run,
}
