"""The runner against its baseline of the rollout-speed issue, side by side: the gain in one short run.

``rollout_speed`` (40 minutes) compares the runner with raw ``generate`` in every dtype and batch;
this benchmark times only what the issue's ">= 2.5x" is about, on the same demo rollouts (the demo's
team, controllers off, 8 problems x 4 episodes, T=0.7, 48 new tokens), all variants in one process
taking turns in each repeat:

* ``baseline``: the runner through peft's LoRA layers in float32 at micro-batch 16, every prompt run
  (the backend's settings when the issue measured 57-59 tokens/s; its sampler and cache are today's,
  which gave float32 micro-batch 16 1.09x, ``rollout_speed``);
* ``runner``: the backend's defaults with ``model.dtype: auto`` (bfloat16 where the CPU has native
  units) at micro-batch 32;
* ``runner, every prompt run``: the same with ``HFBackend.dedupe_prompts`` off, so a group's 4
  identical first-turn prompts run 4 times (what running each distinct prompt once saves);
* ``runner, no inference mode``: the runner with ``HFBackend.inference_mode`` off (decoding under
  ``no_grad`` only, as before 2026-12-05; the baseline runs so too).

Tokens per second of wall time (each variant counts its own completion tokens), best of the repeats.

    python -m benchmarks rollout_gain --threads 2
    python -m benchmarks.rollout_gain --quick
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from benchmarks.common import EMBEDDED_MODEL, Result, fmt_ratio, markdown_table, script_main
from benchmarks.rollout_speed import build, run_runner

#: the issue's bar: the runner at >= 2.5x the baseline's tokens/s
TARGET_GAIN = 2.5
VARIANTS = ("baseline", "runner", "runner, every prompt run", "runner, no inference mode")


@contextlib.contextmanager
def backend_switches(backend, dedupe: bool, inference: bool) -> Iterator[None]:
    """``backend.dedupe_prompts`` and ``backend.inference_mode`` set for the block (the class defaults
    after)."""
    backend.dedupe_prompts, backend.inference_mode = dedupe, inference
    try:
        yield
    finally:
        del backend.dedupe_prompts, backend.inference_mode


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """``quick``: 1 problem x 2 episodes, 4 new tokens, 1 repeat; otherwise 8 x 4, 48 new tokens, 3 repeats."""
    problems, group, max_new, repeats = (1, 2, 4, 1) if quick else (8, 4, 48, 3)
    setups = {dtype: build(model, dtype, problems, group, max_new) for dtype in ("float32", "auto")}
    # variant: (dtype, micro-batch, merged adapters, distinct prompts once, inference mode)
    plan = {"baseline": ("float32", 16, False, False, False), "runner": ("auto", 32, True, True, True),
            "runner, every prompt run": ("auto", 32, True, False, True),
            "runner, no inference mode": ("auto", 32, True, True, False)}
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for rep in range(repeats):  # variants take turns: the machine's load falls on all alike
        for variant in (VARIANTS if rep % 2 == 0 else tuple(reversed(VARIANTS))):
            dtype, mb, merged, dedupe, inference = plan[variant]
            setup = setups[dtype]
            with backend_switches(setup.backend, dedupe, inference):
                seconds, tokens, _ = run_runner(setup, mb, seed=200 + rep, merged=merged)
            rates[variant].append(tokens / seconds)
    best = {v: max(r) for v, r in rates.items()}
    resolved = {d: str(s.backend.team_model.base_model.dtype).removeprefix("torch.") for d, s in setups.items()}
    rows = [[v, f"{plan[v][0]} ({resolved[plan[v][0]]})", plan[v][1], "merged" if plan[v][2] else "peft layers",
             "yes" if plan[v][3] else "no", "yes" if plan[v][4] else "no", ", ".join(f"{r:.1f}" for r in rates[v]),
             f"{best[v]:.1f}", f"**{fmt_ratio(best[v] / best['baseline'])}**"] for v in VARIANTS]
    table = markdown_table(["variant", "dtype", "micro-batch", "adapters", "distinct prompts once", "inference mode",
                            "repeats tok/s", "best tok/s", "/ baseline"], rows)
    gain = best["runner"] / best["baseline"]
    dedupe = best["runner"] / best["runner, every prompt run"]
    met = gain >= TARGET_GAIN
    headline = (f"the runner makes {best['runner']:.1f} tokens/s, {fmt_ratio(gain)} the baseline's "
                f"{best['baseline']:.1f} (target >= {TARGET_GAIN}× {'met' if met else 'NOT met'}); running each "
                f"distinct prompt once: {fmt_ratio(dedupe)}; decoding in inference mode: "
                f"{fmt_ratio(best['runner'] / best['runner, no inference mode'])}.")
    import torch

    notes = (f"Model {model}, the demo's team and protocol (controllers off), {problems} problems × {group} "
             f"episodes, T=0.7, max_new_tokens={max_new}, {torch.get_num_threads()} torch thread(s); "
             f"{repeats} repeat(s), variants alternating their order.",)
    return Result("rollout_gain", table, headline, met, notes,
                  {"tokens_per_second": rates, "best": best, "resolved_dtypes": resolved})


if __name__ == "__main__":
    script_main(run, __doc__.splitlines()[0])
