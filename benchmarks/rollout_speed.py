"""Rollout speed against the machine's: the demo's rollouts through ``RolloutRunner`` against raw
``generate`` on the same prompts, in float32 and ``model.dtype: auto`` (bfloat16 where the CPU has it), at
micro-batch 16 and 32.

The demo's team and settings (``configs/demo.yaml``: the embedded SmolLM2-135M-Instruct, LoRA r=8 on
every linear layer, one adapter per role, proposer/reviewer with 3 rounds, arith level 1, T=0.7,
48 new tokens; the speak/skip controllers off, so every turn speaks) run ``problems x group``
training episodes through the runner (envs, protocol, ``HFBackend`` with behaviour log-probs).
Every turn request the runner sent is recorded, and the same requests, grouped as the runner
grouped them (one lock-step call, then one micro-batch per adapter and size, sorted by prompt
length), go to raw ``model.generate`` with nothing else:

* ``raw peft``: the same peft model, the request's adapter on, no scores kept;
* ``raw plain``: the plain base model, loaded again without LoRA layers (the limit of the model).

The runner itself runs three times: with the backend's defaults (``runner``: each adapter merged
into a LoRA-free copy of the base, ``teamplay.agents.merged``; tokens drawn by inverse CDF; a key/value
cache that grows in place, ``teamplay.agents.kv_cache``), through peft's LoRA layers (``runner
peft``: the float32 micro-batch-16 one is the issue's baseline of the gain column, before merging),
and merged but with ``generate``'s own multinomial draws and concatenating cache (``runner before``:
the backend before the sampler and the cache, side by side).

Each variant counts its own completion tokens (up to and including the first stop token; sampled
runs stop at different places) per second of wall time. All variants of both dtypes live in one
process and take turns within each repeat, so a change in the machine's load falls on all alike;
the best of the repeats counts. The ratio ``runner / raw peft`` (same dtype and micro-batch) is
what the runner adds to generation, ``runner bf16 / runner fp32`` what the dtype gives.

The profile splits one lock-step call of the runner (the first turn, micro-batch 16) into: prefill
(raw plain ``generate`` of one new token), decode (raw plain generate minus its prefill), LoRA (raw
peft minus raw plain), kept scores (raw peft with ``output_scores`` minus raw peft), the backend's
post-processing and prompt building (``HFBackend.generate`` minus raw peft with scores), and env +
protocol (the runner's time outside the backend, from a whole run). The parts are differences of
timed calls, so small ones carry the machine's noise.

    python -m benchmarks rollout_speed --threads 2   # about 40 minutes on 2 cores
    python -m benchmarks rollout_speed --quick    # tiny sizes, writes nothing
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import EMBEDDED_MODEL, Result, fmt_pct, fmt_ratio, markdown_table, script_main

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
#: ``model.dtype`` values compared; ``auto`` is bfloat16 with a float32 output head on a CPU with
#: native bfloat16 units (``teamplay.agents.models.load_configured_model``), float32 elsewhere
DTYPES = ("float32", "auto")
#: the acceptance bar of the runner against raw generate of the peft model (same dtype and batch)
TARGET_RATIO = 0.9


def demo_config(model: str, dtype: str, max_new_tokens: int):
    """The demo's config on ``model`` in ``dtype``, controllers off (every turn speaks)."""
    from teamplay.config import TrainConfig, build_config, read_yaml

    raw = read_yaml(DEMO_CONFIG)
    raw["model"] = {**raw["model"], "name": model, "dtype": dtype}
    raw["controllers"] = {"enabled": False}
    raw["sampling"] = {**raw["sampling"], "max_new_tokens": max_new_tokens}
    raw.update(eval_task=None, tensorboard=False)
    return build_config(TrainConfig, raw)


class Recording:
    """A backend wrapper that keeps every request list it was handed (one entry per lock-step call)."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.name = backend.name
        self.calls: list[list[Any]] = []

    def generate(self, requests, sampling):
        self.calls.append(list(requests))
        return self.backend.generate(requests, sampling)


@dataclass
class Setup:
    """One dtype's models: the runner's (peft) backend, the plain base model, the jobs."""

    dtype: str
    backend: Any
    runner: Any
    plain: Any
    jobs: list[Any]
    calls: list[list[Any]] = field(default_factory=list)


def build(model: str, dtype: str, problems: int, group: int, max_new_tokens: int) -> Setup:
    from teamplay.agents.backends.hf import HFBackend
    from teamplay.agents.models import load_configured_model
    from teamplay.training.play.rollout import RolloutJob, RolloutRunner
    from teamplay.training.wiring.envs import env_factory, load_items
    from teamplay.training.wiring.model import build_team_model
    from teamplay.training.wiring.sampling import rollout_sampling

    cfg = demo_config(model, dtype, max_new_tokens)
    task, items = load_items(cfg.task)
    make_env, team = env_factory(task, cfg.protocol, cfg.team)
    backend = HFBackend(build_team_model(cfg.model, team, cfg.seed), max_prompt_tokens=cfg.backend.max_prompt_tokens)
    recording = Recording(backend)
    runner = RolloutRunner(make_env, recording, rollout_sampling(cfg.sampling, cfg.credit.token))
    plain, _ = load_configured_model(model, dtype)
    jobs = [RolloutJob(item, f"p{p}") for p, item in enumerate(items[:problems]) for _ in range(group)]
    runner.run(jobs, seed=1)  # the requests of one whole run, recorded; also the warm-up
    return Setup(dtype, backend, runner, plain, jobs, recording.calls)


def raw_generate(setup: Setup, micro_batch: int, plain: bool, *, scores: bool = False,
                 max_new_tokens: int | None = None, calls: Sequence[Sequence[Any]] | None = None) -> tuple[float, int]:
    """Seconds and completion tokens of raw ``generate`` on the recorded calls' prompts, grouped as
    ``HFBackend`` groups them (adapter, then length-sorted micro-batches)."""
    import torch
    from transformers import GenerationConfig

    from teamplay.agents.prompts import build_reply_ids
    from teamplay.agents.team_model import left_pad

    backend, tok = setup.backend, setup.backend.tokenizer
    sampling = setup.runner.sampling
    config = GenerationConfig(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                              top_k=sampling.top_k, max_new_tokens=max_new_tokens or sampling.max_new_tokens,
                              eos_token_id=list(backend.stop_ids), pad_token_id=tok.pad_token_id,
                              return_dict_in_generate=True, output_scores=scores)
    stops = torch.tensor(backend.stop_ids)
    tm = backend.team_model
    model = setup.plain if plain else tm.model
    tokens, seconds = 0, 0.0
    for requests in (setup.calls if calls is None else calls):
        start = time.perf_counter()
        prompts = [build_reply_ids(tok, r.chat, backend.max_prompt_tokens, r.reply_prefix)[0] for r in requests]
        groups: dict[str | None, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(r.adapter, []).append(i)
        for adapter, members in groups.items():
            members = sorted(members, key=lambda i: len(prompts[i]))
            for lo in range(0, len(members), micro_batch):
                chunk = [prompts[i] for i in members[lo:lo + micro_batch]]
                input_ids, attention = left_pad(chunk, tok.pad_token_id, tm.device)  # [B, P]
                with torch.no_grad(), tm.using(adapter):
                    out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
                new = out.sequences[:, input_ids.shape[1]:]  # [B, N]
                is_stop = torch.isin(new, stops)  # [B, N]: a completion ends at its first stop token
                tokens += int(torch.where(is_stop.any(-1), is_stop.int().argmax(-1) + 1, new.shape[1]).sum())
        seconds += time.perf_counter() - start
    return seconds, tokens


@contextlib.contextmanager
def as_before(backend: Any, before: bool):
    """With ``before``: the backend as it was before the inverse-CDF sampler and the growing cache
    (``sampler: multinomial``, generate's own concatenating cache); else unchanged."""
    from teamplay.agents import kv_cache

    sampler, supported = backend.sampler, kv_cache.SUPPORTED
    if before:
        backend.sampler, kv_cache.SUPPORTED = "multinomial", False
    try:
        yield
    finally:
        backend.sampler, kv_cache.SUPPORTED = sampler, supported


def run_runner(setup: Setup, micro_batch: int, seed: int, merged: bool = True,
               before: bool = False) -> tuple[float, int, float]:
    """Seconds, completion tokens and the seconds spent inside the backend of one whole runner run,
    with adapters merged for generation or through peft's LoRA layers; ``before``: see ``as_before``."""
    setup.backend.micro_batch_size = micro_batch
    setup.backend.merged_generation = None if merged else "off for the benchmark"
    calls = len(setup.calls)
    with as_before(setup.backend, before):
        setup.runner.run(setup.jobs, seed=seed)
    del setup.calls[calls:]  # keep the recorded run's requests only
    stats = setup.runner.last_stats
    return stats.seconds, stats.tokens, stats.generate_seconds


def profile(setup: Setup, repeats: int) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Seconds of the first lock-step call split into parts (module docstring), best of ``repeats``;
    and the behaviour / trainer fidelity of its tokens, generated merged and through peft."""
    first = setup.calls[:1]
    sampling = setup.runner.sampling
    setup.backend.micro_batch_size = 16
    timed: dict[str, list[float]] = {k: [] for k in ("prefill", "plain", "peft", "scores", "backend", "merged")}
    generations: dict[str, Any] = {}
    for _ in range(repeats):
        timed["prefill"].append(raw_generate(setup, 16, True, max_new_tokens=1, calls=first)[0])
        timed["plain"].append(raw_generate(setup, 16, True, calls=first)[0])
        timed["peft"].append(raw_generate(setup, 16, False, calls=first)[0])
        timed["scores"].append(raw_generate(setup, 16, False, scores=True, calls=first)[0])
        for path, off in (("backend", "off for the profile"), ("merged", None)):
            setup.backend.merged_generation = off
            start = time.perf_counter()
            generations[path] = setup.backend.generate(first[0], sampling)
            timed[path].append(time.perf_counter() - start)
    fidelity = {"peft": ratio_stats(setup, first[0], generations["backend"]),
                "merged": ratio_stats(setup, first[0], generations["merged"])}
    return {k: min(v) for k, v in timed.items()}, fidelity


def ratio_stats(setup: Setup, requests: Sequence[Any], generations: Sequence[Any]) -> dict[str, float]:
    """The per-token ratio trainer / behaviour probability of ``generations`` (the trainer's one
    forward pass against the log-probs recorded while decoding): its mean, mean |r - 1| and max |r - 1|."""
    import torch

    tm, temperature = setup.backend.team_model, setup.runner.sampling.temperature or 1.0
    by_adapter: dict[str | None, list[int]] = {}
    for i, r in enumerate(requests):
        by_adapter.setdefault(r.adapter, []).append(i)
    ratios = []
    for adapter, rows in by_adapter.items():
        gens = [generations[i] for i in rows]
        with torch.no_grad():
            logp, mask = tm.completion_logprobs([g.prompt_ids for g in gens], [g.completion_ids for g in gens],
                                                adapter=adapter, temperature=temperature)  # [b, C] each
        for b, g in enumerate(gens):
            ratios.append(torch.exp(logp[b, : len(g.logprobs)] - torch.tensor(g.logprobs)))
    r = torch.cat(ratios)  # [tokens]
    return {"tokens": int(r.numel()), "mean": float(r.mean()), "mean_abs_dev": float((r - 1).abs().mean()),
            "max_abs_dev": float((r - 1).abs().max())}


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """``quick``: 1 problem x 2 episodes, 4 new tokens, 1 repeat; otherwise the demo's step size
    doubled (8 problems x 4 episodes, so micro-batch 32 fills), 48 new tokens, 2 repeats."""
    problems, group, max_new, repeats = (1, 2, 4, 1) if quick else (8, 4, 48, 2)
    batches = (16, 32)
    setups = [build(model, dtype, problems, group, max_new) for dtype in DTYPES]
    measured: dict[tuple[str, str, int], list[tuple[float, int]]] = {}
    inside: dict[tuple[str, int], list[float]] = {}
    for rep in range(repeats):  # variants take turns: the machine's load falls on all alike
        for setup in setups:
            for mb in batches:
                for label, merged, before in (("runner", True, False), ("runner peft", False, False),
                                              ("runner before", True, True)):
                    seconds, tokens, gen = run_runner(setup, mb, seed=100 + rep, merged=merged, before=before)
                    measured.setdefault((setup.dtype, label, mb), []).append((seconds, tokens))
                    if merged and not before:
                        inside.setdefault((setup.dtype, mb), []).append(seconds - gen)
                for label, plain in (("raw peft", False), ("raw plain", True)):
                    measured.setdefault((setup.dtype, label, mb), []).append(raw_generate(setup, mb, plain))
    best = {k: max(t / s for s, t in v) for k, v in measured.items()}  # tokens/s, best repeat
    baseline = best[("float32", "runner peft", 16)]  # the backend before merging, at its defaults
    rows = []
    for dtype in DTYPES:
        for mb in batches:
            runner, through, before, peft, plain = (best[(dtype, v, mb)] for v in (
                "runner", "runner peft", "runner before", "raw peft", "raw plain"))
            rows.append([dtype, mb, f"{runner:.1f}", f"{through:.1f}", f"{before:.1f}", f"{peft:.1f}", f"{plain:.1f}",
                         fmt_ratio(runner / peft), fmt_ratio(runner / plain), fmt_ratio(runner / before),
                         fmt_ratio(runner / baseline)])
    table = markdown_table(["dtype", "micro-batch", "runner tok/s", "runner peft tok/s", "runner before tok/s",
                            "raw peft tok/s", "raw plain tok/s", "runner / raw peft", "runner / raw plain",
                            "runner / runner before", "runner / runner peft fp32 mb16"], rows)
    profiled = {s.dtype: profile(s, repeats) for s in setups}
    parts = {d: p for d, (p, _) in profiled.items()}
    fidelity = {d: f for d, (_, f) in profiled.items()}
    env_share = {s.dtype: min(inside[(s.dtype, 16)]) for s in setups}
    prows = []
    for dtype, p in parts.items():
        split = [("prefill (prompt forward)", p["prefill"]), ("decode (base model)", p["plain"] - p["prefill"]),
                 ("LoRA layers", p["peft"] - p["plain"]), ("full-vocabulary scores kept", p["scores"] - p["peft"]),
                 ("backend through peft: prompts, log-probs, results", p["backend"] - p["scores"])]
        prows += [[dtype, name, f"{s * 1e3:.0f}", fmt_pct(s / p["backend"])] for name, s in split]
        saved = p["merged"] - p["backend"]
        prows.append([dtype, "merged adapters instead of LoRA layers (backend merged - through peft)",
                      f"{saved * 1e3:.0f}", fmt_pct(saved / p["backend"])])
        prows.append([dtype, "(whole run) env + protocol outside the backend", f"{env_share[dtype] * 1e3:.0f}", "-"])
    profile_table = markdown_table(["dtype", "part of the first lock-step call (mb 16)", "ms", "share"], prows)
    best_ratio = max(best[(d, "runner", mb)] / best[(d, "raw peft", mb)] for d in DTYPES for mb in batches)
    fastest = max(((d, mb) for d in DTYPES for mb in batches), key=lambda k: best[(k[0], "runner", k[1])])
    gain = best[(fastest[0], "runner", fastest[1])] / baseline
    met = all(best[(d, "runner", mb)] / best[(d, "raw peft", mb)] >= TARGET_RATIO for d in DTYPES for mb in batches)
    headline = (f"runner / raw peft generate: {', '.join(f'{r[0]} mb{r[1]} {r[7]}' for r in rows)} "
                f"(target >= {TARGET_RATIO}× {'met' if met else 'NOT met'} at every dtype and batch; best "
                f"{fmt_ratio(best_ratio)}); fastest runner setting {fastest[0]} mb{fastest[1]}: "
                f"{best[(fastest[0], 'runner', fastest[1])]:.1f} tokens/s, {fmt_ratio(gain)} the float32 mb16 "
                f"runner through peft.")
    tokens = {k: [t for _, t in v] for k, v in measured.items()}
    import torch

    notes = (f"Model {model}, demo team and protocol (controllers off), {problems} problems × {group} episodes "
             f"({len(setups[0].jobs)} episodes, {len(setups[0].calls)} lock-step calls), T=0.7, max_new_tokens="
             f"{max_new}, {torch.get_num_threads()} torch thread(s); best of {repeats} alternating repeats, "
             "tokens/s of wall time.",
             "Profile: differences of timed calls on the first lock-step call (best of the repeats); a negative "
             "part is noise of that size.", "", profile_table, "",
             "Behaviour / trainer fidelity on that call's tokens (ratio r = trainer probability / behaviour "
             "probability of each sampled token; float32 gives 1 to 1e-5): " + "; ".join(
                 f"{d} {path}: mean r {f['mean']:.4f}, mean |r - 1| {f['mean_abs_dev']:.4f}, max |r - 1| "
                 f"{f['max_abs_dev']:.4f} over {f['tokens']} tokens"
                 for d, paths in fidelity.items() for path, f in paths.items()) + ".")
    data = {"model": model, "episodes": len(setups[0].jobs), "calls": len(setups[0].calls), "max_new_tokens": max_new,
            "tokens_per_second": {f"{d} {v} mb{mb}": x for (d, v, mb), x in best.items()},
            "tokens": {f"{d} {v} mb{mb}": x for (d, v, mb), x in tokens.items()},
            "profile_seconds": parts, "env_seconds": env_share, "fidelity": fidelity,
            "resolved_dtypes": {s.dtype: str(s.backend.team_model.base_model.dtype) for s in setups}}
    return Result("rollout_speed", table, headline, met, notes, data)


def main() -> None:
    script_main(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
