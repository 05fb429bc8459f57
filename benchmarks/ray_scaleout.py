"""The Ray path: rollout overhead at 1 worker, throughput at 2 workers, bytes per weight sync.

The same arith level-1 jobs (protocol ``single``, greedy) run

* in-process: ``RolloutRunner`` with an ``HFBackend`` in this process (1 torch thread);
* on Ray with 1 rollout worker: ``RolloutPool`` (the worker owns its own copy of the model, runs
  the same runner on all jobs, 1 torch thread), episodes shipped back to this process;
* on Ray with 2 rollout workers: each runs half of the jobs.

Each variant is warmed up once, then the variants run interleaved ``repeats`` rounds. Overhead =
Ray 1-worker time / in-process time - 1 in the same round, median over rounds (target < 10%): a
load spike from another process moves one round's ratio, not the figure. Tokens/s use each
variant's fastest run.
Throughput = completion tokens per second. Bytes per sync: the LoRA tensors ``AdapterWeights``
sends (the team's adapters: one for ``single``; r=8, all linear layers) against every parameter of the model (what a
full-weight sync of the same model would move).

    python -m benchmarks ray_scaleout
    python -m benchmarks.ray_scaleout --quick
"""

from __future__ import annotations

import os
import statistics
import time

from benchmarks.common import EMBEDDED_MODEL, Result, arith_items, fmt_pct, fmt_ratio, markdown_table, script_main

#: Ray's overhead at 1 rollout worker, as a fraction of the in-process rollout time
TARGET = 0.10


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """``quick``: 2 problems x 2 episodes, 8 new tokens, one round; otherwise 8 x 4, 32 new
    tokens, 5 interleaved rounds."""
    import ray

    from teamplay.agents.backends.hf import HFBackend
    from teamplay.config import BackendConfig, LoraConfig, ModelConfig, ProtocolConfig, WorkerResources
    from teamplay.distributed.rollout import RolloutPool, WorkerSpec
    from teamplay.distributed.weights import AdapterWeights, full_weight_bytes
    from teamplay.records import SamplingParams
    from teamplay.training.play.rollout import RolloutJob, RolloutRunner
    from teamplay.training.wiring.envs import env_factory
    from teamplay.training.wiring.model import build_team_model

    n_problems, group, max_new, repeats = (2, 2, 8, 1) if quick else (8, 4, 32, 5)
    task, items = arith_items(n_problems)
    make_env, team = env_factory(task, ProtocolConfig(name="single"), None)
    model_cfg = ModelConfig(name=model, lora=LoraConfig(r=8, alpha=16))
    team_model = build_team_model(model_cfg, team, seed=0)
    backend = HFBackend(team_model, max_prompt_tokens=1536)
    sampling = SamplingParams(max_new_tokens=max_new, temperature=0.0)
    runner = RolloutRunner(make_env, backend, sampling)
    jobs = [RolloutJob(item, f"p{p}") for p, item in enumerate(items) for _ in range(group)]

    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, logging_level="WARNING",
                 log_to_driver=False)
    spec = WorkerSpec(model=model_cfg, backend=BackendConfig(), team=team, seed=0, make_envs={"train": make_env},
                      max_new_tokens=max_new)
    res = WorkerResources(num_cpus=0.5)
    try:
        pools = {1: RolloutPool(spec, 1, res, sampling), 2: RolloutPool(spec, 2, res, sampling)}
        runner.run(jobs[:2])  # warm-up
        for pool in pools.values():
            pool.run(jobs[:2 * len(pool.workers)])
        times: dict[str, list[float]] = {"in-process": [], "ray 1 worker": [], "ray 2 workers": []}
        tokens: dict[str, int] = {}
        for _ in range(repeats):
            start = time.perf_counter()
            local = runner.run(jobs)
            times["in-process"].append(time.perf_counter() - start)
            tokens["in-process"] = sum(ep.tokens for ep in local)
            for n, label in ((1, "ray 1 worker"), (2, "ray 2 workers")):
                start = time.perf_counter()
                remote = pools[n].run(jobs)
                times[label].append(time.perf_counter() - start)
                tokens[label] = sum(ep.tokens for ep in remote)
                if [m.completion_ids for ep in remote for m in ep.messages] != \
                        [m.completion_ids for ep in local for m in ep.messages]:
                    raise RuntimeError(f"{label}: greedy episodes differ from the in-process ones")
        for pool in pools.values():
            pool.shutdown()
    finally:
        if started_ray:
            ray.shutdown()
    best = {k: min(v) for k, v in times.items()}
    paired = {k: [t / b for t, b in zip(v, times["in-process"], strict=True)] for k, v in times.items()}
    overhead = statistics.median(paired["ray 1 worker"]) - 1
    speedup = statistics.median(a / b for a, b in zip(times["ray 1 worker"], times["ray 2 workers"], strict=True))
    adapters = AdapterWeights.of(team_model, version=1)
    full = full_weight_bytes(team_model.model)
    rows = [[label, f"{best[label]:.2f}", f"{tokens[label] / best[label]:.1f}",
             ", ".join(f"{r:.3f}" for r in paired[label]), fmt_ratio(statistics.median(paired[label]))]
            for label in times]
    table = markdown_table(["variant", "seconds (fastest)", "tokens / s (fastest)", "time / in-process, per round",
                            "median"], rows)
    sync = markdown_table(["weight sync", "bytes", "MiB"], [
        [f"adapter-only ({len(adapters.tensors)} adapter(s), r=8, all linear layers)", f"{adapters.nbytes:,}",
         f"{adapters.nbytes / 2**20:.2f}"],
        ["full weights (base + adapters)", f"{full:,}", f"{full / 2**20:.1f}"],
        ["ratio", fmt_ratio(full / adapters.nbytes), ""]])
    met = overhead < TARGET
    headline = (f"Ray at 1 rollout worker adds {fmt_pct(overhead)} to the in-process rollout time (median of "
                f"{repeats} paired rounds; target < {fmt_pct(TARGET)} {'met' if met else 'NOT met'}); 2 workers vs 1: "
                f"{fmt_ratio(speedup)} "
                f"throughput on this machine; an adapter sync moves {adapters.nbytes / 2**20:.2f} MiB, "
                f"{fmt_ratio(full / adapters.nbytes)} less than a full-weight sync.")
    notes = (f"Model {model}, protocol single, {n_problems} problems × {group} episodes ({len(jobs)} jobs), greedy, "
             f"max_new_tokens={max_new}, {tokens['in-process']} completion tokens in every variant (the Ray "
             f"episodes are checked equal to the in-process ones, token for token). All runs (s): "
             + "; ".join(f"{k}: {', '.join(f'{x:.2f}' for x in v)}" for k, v in times.items()) + ".",
             f"Each worker uses 1 torch thread, as does the in-process runner. The machine has {os.cpu_count()} "
             f"cores shared with other processes, so 2 workers can at best double the 1-worker throughput "
             f"here and in practice get less. With one GPU per worker the shards run on separate devices and "
             f"throughput scales with the number of workers, less the per-step Ray round trip measured above "
             f"as the 1-worker overhead.")
    data = {"model": model, "jobs": len(jobs), "max_new_tokens": max_new, "times": times, "tokens": tokens,
            "overhead": overhead, "speedup_2_vs_1": speedup, "adapter_bytes": adapters.nbytes, "full_bytes": full}
    return Result("ray_scaleout", table + "\n\n" + sync, headline, met, notes, data)


def main() -> None:
    script_main(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
