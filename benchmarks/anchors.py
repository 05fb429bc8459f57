"""The anchors of float32 speed on a CPU: teamplay's generation and update beside raw ``generate``,
llama.cpp and the machine's own matrix-multiply rate, on the machine's kernels and on AVX2 kernels.

One fixed piece of work for every generator: the demo's first lock-step call (``configs/demo.yaml``:
32 proposer prompts, 8 problems x 4 episodes, the embedded SmolLM2-135M-Instruct), each prompt
decoded to exactly ``NEW_TOKENS`` new tokens (stop tokens ignored, so every engine decodes the same
number of tokens at the same batch):

* ``teamplay backend``: ``HFBackend.generate`` on the 32 requests (merged adapter, its own decoding
  loop and sampler, behaviour log-probs kept), float32, micro-batch 32;
* ``raw generate, peft``: ``model.generate`` of the same peft model with the proposer's adapter on;
* ``raw generate, plain``: ``model.generate`` of the base model loaded without LoRA layers;
* ``llama.cpp``: ``llama-cpp-python`` on the GGUF file the embedded model is read from (Q4_1
  weights: llama.cpp computes on the quantized blocks, teamplay on float32 weights dequantized from
  them), the 32 prompts as 32 sequences of one batch, greedy, ``n_threads`` = the benchmark's threads;
  with ``LORA`` set, also with the proposer's LoRA adapter (written as a GGUF adapter).

The machine's limit is ``torch.mm`` in float32 at three shapes: a large square product, the MLP
up-projection of one decode step at batch 32 ([32, 576] x [576, 1536]) and of an update over 3,200
tokens; GFLOP/s = 2 m k n / seconds. A decoded token of the 135M model costs about 0.27 GFLOP
(``FLOP_PER_TOKEN``: 2 x 106.2 M body weights + 2 x 28.3 M output head), so the decode row's rate
bounds the tokens/s a batch-32 decode could reach on this machine.

The update row runs one demo step's update (``PolicyUpdater.update`` on the step's policy samples,
as ``teamplay train`` runs it) and reports its nominal rate: 3 x forward FLOP (forward and backward)
over every sample's prompt and completion tokens, divided by the seconds. The shared-prompt path
runs a group's prompt once, so it does less work than that nominal count.

Every row runs twice in its own process: with torch's kernels for this CPU, and with
``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` (what a CPU without AVX-512 runs). llama.cpp is
compiled for the CPU it was built on (its row is the same in both).

    python -m benchmarks.anchors --threads 2          # about 20 minutes on 2 cores; writes the JSON and BENCHMARKS.md
                                                      # (resumable: a finished kernel set is kept in runs/anchors)
    python -m benchmarks.anchors --quick              # tiny sizes, writes nothing
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    DEFAULT_OUTPUT,
    EMBEDDED_MODEL,
    Result,
    machine_info,
    machine_line,
    markdown_table,
    set_threads,
    write_regions,
)

RESULTS = Path(__file__).resolve().parent / "results" / "anchors.json"
#: the kernel sets every torch row runs under (environment of the child process)
KERNELS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
#: new tokens decoded for every prompt (the demo's max_new_tokens)
NEW_TOKENS = 48
#: forward FLOP of one token through SmolLM2-135M's body: 2 x (30 layers x 3,538,944 weights)
BODY_FLOP_PER_TOKEN = 2 * 30 * 3_538_944
#: forward FLOP of one decoded token: the body and the output head (2 x 576 x 49,152)
FLOP_PER_TOKEN = BODY_FLOP_PER_TOKEN + 2 * 576 * 49_152
#: torch.mm shapes (m, k, n): the machine's limit, one decode step's MLP at batch 32, an update's MLP
SHAPES = {"square 1024": (1024, 1024, 1024), "decode, batch 32": (32, 576, 1536),
          "update, 3,200 tokens": (3200, 576, 1536)}
#: the module's one-line headline target: the runner against llama.cpp's batched decode (issue bar 0.8x)
LLAMA_TARGET = 0.8


# ------------------------------------------------------------------------------------ the limit
def matmul_rates(seconds: float) -> dict[str, float]:
    """GFLOP/s of float32 ``torch.mm`` at each of ``SHAPES``: the best of 5 timings, each of as many
    products as fill about ``seconds`` / 5."""
    import torch

    out = {}
    for name, (m, k, n) in SHAPES.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        torch.mm(a, b)
        start = time.perf_counter()
        torch.mm(a, b)
        once = max(time.perf_counter() - start, 1e-6)
        reps = max(1, int(seconds / 5 / once))
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b)
            best = min(best, (time.perf_counter() - start) / reps)
        out[name] = 2 * m * k * n / best / 1e9
    return out


# ------------------------------------------------------------------------------------ the work
def first_call(model: str, problems: int, group: int):
    """The demo's backend, its first lock-step call's requests (one per episode) and the plain model."""
    from benchmarks.rollout_speed import build

    setup = build(model, "float32", problems, group, NEW_TOKENS)
    return setup, setup.calls[0]


def no_stops(backend):
    """``backend`` with its stop tokens off (every reply runs to ``max_new_tokens``); undo with the
    returned function."""
    original = backend._stop_ids
    backend._stop_ids = lambda: (-1,)  # a token id no tokenizer has
    return lambda: setattr(backend, "_stop_ids", original)


def time_backend(setup, requests, repeats: int) -> tuple[float, int]:
    """Best seconds of ``HFBackend.generate`` on ``requests`` at micro-batch len(requests), and tokens."""
    backend = setup.backend
    backend.micro_batch_size = len(requests)
    sampling = setup.runner.sampling
    undo = no_stops(backend)
    try:
        best, tokens = float("inf"), 0
        for _ in range(repeats):
            start = time.perf_counter()
            out = backend.generate(requests, sampling)
            best = min(best, time.perf_counter() - start)
            tokens = sum(len(g.completion_ids) for g in out)
    finally:
        undo()
    return best, tokens


def prompt_ids(setup, requests) -> list[list[int]]:
    """The token ids the backend sends for each request (chat template, reply prefix)."""
    from teamplay.agents.prompts import build_reply_ids

    backend = setup.backend
    return [list(build_reply_ids(backend.tokenizer, r.chat, backend.max_prompt_tokens, r.reply_prefix)[0])
            for r in requests]


def time_raw(setup, requests, plain: bool, repeats: int) -> tuple[float, int]:
    """Best seconds of raw ``model.generate`` on the requests' prompts, one batch, exactly NEW_TOKENS
    each (sampled at the demo's temperature), and the tokens it made."""
    import torch
    from transformers import GenerationConfig

    from teamplay.agents.team_model import left_pad

    backend = setup.backend
    tok, tm = backend.tokenizer, backend.team_model
    sampling = setup.runner.sampling
    config = GenerationConfig(do_sample=True, temperature=sampling.temperature, top_p=1.0, top_k=0,
                              max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=tok.pad_token_id)
    input_ids, attention = left_pad(prompt_ids(setup, requests), tok.pad_token_id, tm.device)
    model = setup.plain if plain else tm.model
    adapter = requests[0].adapter
    best, tokens = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        with torch.no_grad(), tm.using(adapter):
            out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
        best = min(best, time.perf_counter() - start)
        tokens = int(out.shape[0] * (out.shape[1] - input_ids.shape[1]))
    return best, tokens


def time_update(model: str, quick: bool, repeats: int) -> dict[str, Any]:
    """Best seconds of one demo step's update (the trainer's own ``PolicyUpdater``, from the same
    weights and a fresh optimiser each time) and the tokens it runs."""
    import torch

    from benchmarks.update_speed import demo_config, step_samples

    with tempfile.TemporaryDirectory() as tmp:
        trainer, samples = step_samples(demo_config(model, "float32", Path(tmp) / "run", quick), synthetic=quick)
        try:
            updater = trainer.update.learner.updater
            params = updater.params
            start = {a: [p.detach().clone() for p in ps] for a, ps in params.items()}
            best = float("inf")
            for _ in range(repeats):
                with torch.no_grad():
                    for a, ps in params.items():
                        for p, p0 in zip(ps, start[a], strict=True):
                            p.copy_(p0)
                updater.optimizer = torch.optim.AdamW([p for ps in params.values() for p in ps], lr=1e-4)
                t0 = time.perf_counter()
                updater.update(samples, step=0)
                best = min(best, time.perf_counter() - t0)
        finally:
            trainer.close()
    tokens = sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    return {"seconds": best, "samples": len(samples), "tokens": tokens,
            "completion_tokens": sum(len(s.completion_ids) for s in samples),
            "nominal_gflop": 3 * FLOP_PER_TOKEN * tokens / 1e9}


def torch_rows(model: str, quick: bool) -> dict[str, Any]:
    """Every torch measurement under this process's kernels (the child's body)."""
    import torch

    problems, group, repeats = (2, 2, 1) if quick else (8, 4, 3)
    setup, requests = first_call(model, problems, group)
    out: dict[str, Any] = {"threads": torch.get_num_threads(), "batch": len(requests),
                           "matmul_gflops": matmul_rates(0.2 if quick else 3.0)}
    gen = {}
    for name, fn in (("teamplay backend", lambda: time_backend(setup, requests, repeats)),
                     ("raw generate, peft", lambda: time_raw(setup, requests, False, repeats)),
                     ("raw generate, plain", lambda: time_raw(setup, requests, True, repeats))):
        seconds, tokens = fn()
        gen[name] = {"seconds": seconds, "tokens": tokens}
    out["generation"] = gen
    out["prompts"] = prompt_ids(setup, requests)
    out["update"] = time_update(model, quick, 1 if quick else 2)
    return out


# ------------------------------------------------------------------------------------ llama.cpp
def llama_cpp_rows(prompts: list[list[int]], threads: int, repeats: int) -> dict[str, Any] | str:
    """llama.cpp decoding every prompt to NEW_TOKENS greedy tokens, all prompts as sequences of one
    batch: ``base`` (the GGUF alone) and ``lora`` (with an adapter of the demo's shapes, rank 8 on every
    linear layer), each the best of ``repeats``; a string (why not) when llama-cpp-python is missing."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed (pip install llama-cpp-python, compiled for this CPU)"
    from benchmarks.llama_cpp_decode import batched_greedy, write_random_lora
    from teamplay.agents.models import smollm2_gguf_path

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        adapter = write_random_lora(Path(tmp) / "lora.gguf")
        for name, lora in (("base", None), ("lora", adapter)):
            runs = [batched_greedy(smollm2_gguf_path(), prompts, NEW_TOKENS, threads, lora) for _ in range(repeats)]
            out[name] = min(runs, key=lambda r: r["seconds"])
    return out


# ------------------------------------------------------------------------------------ the run
def child(kernels: str, model: str, quick: bool, threads: int) -> dict[str, Any]:
    """Run ``torch_rows`` in a fresh process under ``kernels`` (the CPU capability is read once, at
    torch's import, so each kernel set needs its own process)."""
    env = {**os.environ, **KERNELS[kernels]}
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        target = Path(handle.name)
    try:
        cmd = [sys.executable, "-m", "benchmarks.anchors", "--child", str(target), "--model", model,
               "--threads", str(threads)] + (["--quick"] if quick else [])
        subprocess.run(cmd, env=env, check=True, cwd=Path(__file__).resolve().parents[1])
        return json.loads(target.read_text(encoding="utf-8"))
    finally:
        target.unlink(missing_ok=True)


def run(quick: bool = False, model: str = EMBEDDED_MODEL, threads: int = 2, keep: Path | None = None) -> Result:
    """Both kernel sets, then llama.cpp on the same prompts; the table and the raw numbers. ``keep``:
    a folder where each kernel set's numbers are kept as they finish; a kernel set found there is not
    measured again (a stopped run resumes)."""
    data: dict[str, Any] = {"machine": machine_info(), "new_tokens": NEW_TOKENS, "flop_per_token": FLOP_PER_TOKEN,
                            "kernels": {}}
    for kernels in KERNELS:
        kept = None if keep is None else keep / f"{kernels}-threads{threads}.json"
        if kept is not None and kept.is_file():
            data["kernels"][kernels] = json.loads(kept.read_text(encoding="utf-8"))
            continue
        data["kernels"][kernels] = child(kernels, model, quick, threads)
        if kept is not None:
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_text(json.dumps(data["kernels"][kernels]), encoding="utf-8")
    prompts = data["kernels"]["native"].pop("prompts")
    data["kernels"]["avx2"].pop("prompts", None)
    data["prompt_tokens"] = sum(len(p) for p in prompts)
    # a group's episodes share their first prompt: teamplay's backend (and llama.cpp here) prefill it once
    data["distinct_prompt_tokens"] = sum(len(p) for p in dict.fromkeys(tuple(p) for p in prompts))
    data["llama_cpp"] = llama_cpp_rows(prompts, threads, 1 if quick else 3)
    return result_of(data)


def tokens_per_second(row: dict[str, Any]) -> float:
    return row["tokens"] / row["seconds"]


#: the generators that run each distinct prompt once (``HFBackend.dedupe_prompts``; the llama.cpp
#: anchor shares a prompt's cache cells between its sequences); raw ``generate`` runs every row's
PREFILL_ONCE = frozenset({"teamplay backend"})


def generation_gflops(data: dict[str, Any], name: str, row: dict[str, Any]) -> float:
    """The work of one generation row per second: the prompt tokens it prefills through the body
    (each distinct prompt once, or every row's; the head runs on the last position only, counted
    with the decoded tokens) and every decoded token through body and head, over the row's seconds."""
    prefilled = row.get("prefill_tokens") or data["distinct_prompt_tokens" if name in PREFILL_ONCE
                                                  else "prompt_tokens"]
    work = prefilled * BODY_FLOP_PER_TOKEN + row["tokens"] * data["flop_per_token"]
    return work / row["seconds"] / 1e9


def result_of(data: dict[str, Any]) -> Result:
    """The anchors table of ``data`` (``run``'s or the stored JSON's)."""
    rows = []
    native = data["kernels"]["native"]
    batch = native["batch"]
    for kernels, got in data["kernels"].items():
        limit = got["matmul_gflops"]["decode, batch 32"]
        for name, row in got["generation"].items():
            tps = tokens_per_second(row)
            rows.append((f"{name}", kernels, f"batch {got['batch']}", f"{tps:.0f} tokens/s",
                         f"{generation_gflops(data, name, row):.1f}", f"{limit:.0f}"))
        upd = got["update"]
        rows.append(("update of one demo step", kernels, f"{upd['samples']} samples, {upd['tokens']} tokens",
                     f"{upd['seconds']:.1f} s", f"{upd['nominal_gflop'] / upd['seconds']:.1f} (nominal)",
                     f"{got['matmul_gflops']['update, 3,200 tokens']:.0f}"))
        rows.append(("torch.mm, square 1024", kernels, "", "", f"{got['matmul_gflops']['square 1024']:.0f}", ""))
    llama = data["llama_cpp"]
    notes = [f"Every engine decodes {data['new_tokens']} tokens for each of the {batch} prompts "
             f"({data['prompt_tokens']} prompt tokens in all, {data['distinct_prompt_tokens']} in the distinct "
             "prompts: "
             "a group's episodes share theirs; stops ignored); speed counts the decoded tokens. teamplay's backend "
             "and llama.cpp prefill each distinct prompt once (the backend's dedupe_prompts; llama.cpp's cache "
             "cells owned by every sequence of the prompt), raw generate every row's. GFLOP/s of a generator: its "
             f"forward work per second ({data['flop_per_token'] / 1e9:.2f} GFLOP per decoded token, body and head; "
             f"{BODY_FLOP_PER_TOKEN / 1e9:.2f} per prompt token, body only); of the update: 3 x the forward work "
             "of every sample's prompt and completion (the shared-prompt path runs less). The limit column: "
             "float32 torch.mm at the shape of that work (decode: [32, 576] x [576, 1536]; update: [3200, 576] x "
             "[576, 1536])."]
    headline = "llama.cpp not measured"
    if isinstance(llama, dict):
        for name, label in (("base", "llama.cpp (Q4_1 GGUF, greedy)"), ("lora", "llama.cpp + LoRA adapter")):
            got = llama[name]
            tps = tokens_per_second(got)
            rows.append((label, "its build", f"{got['sequences']} sequences", f"{tps:.0f} tokens/s",
                         f"{generation_gflops(data, label, got):.1f}", ""))
        ours = tokens_per_second(native["generation"]["teamplay backend"])
        theirs = tokens_per_second(llama["lora"])
        headline = (f"teamplay's backend (float32, its adapter merged) makes {ours:.0f} tokens/s at batch {batch}; "
                    f"llama.cpp with an adapter {theirs:.0f} ({ours / theirs:.2f}x; the issue's bar: "
                    f"{LLAMA_TARGET}x llama.cpp or 3x the runner's 96 tokens/s, whichever is lower)")
        notes.append(f"llama.cpp {llama['base']['llama_cpp_python']} as built here: {llama['base']['system_info']}. "
                     "Its adapter is random, of the demo's shapes (rank 8 on every linear layer): how fast an "
                     "adapter is applied does not depend on its values.")
    else:
        notes.append(f"llama.cpp: {llama}")
    table = markdown_table(("engine", "kernels", "work", "speed", "GFLOP/s", "limit GFLOP/s"), rows)
    return Result("anchors", table, headline, None, tuple(notes), data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, writes nothing")
    parser.add_argument("--model", default=EMBEDDED_MODEL)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--table-only", action="store_true", help="the table of the stored JSON")
    args = parser.parse_args()
    if args.child is not None:
        set_threads(args.threads)
        args.child.write_text(json.dumps(torch_rows(args.model, args.quick)), encoding="utf-8")
        return
    if args.table_only:
        result = result_of(json.loads(RESULTS.read_text(encoding="utf-8")))
    else:
        # the kernel sets finished so far stay in runs/anchors: the same command again resumes
        result = run(args.quick, args.model, args.threads, None if args.quick else Path("runs") / "anchors")
        if not args.quick:
            RESULTS.write_text(json.dumps(result.data, indent=1) + "\n", encoding="utf-8")
    command = f"python -m benchmarks.anchors --threads {args.threads}"
    if not args.quick:
        write_regions(DEFAULT_OUTPUT, {"anchors": result.markdown(command, machine_line(result.data["machine"]))})
    print(result.table, *result.notes, result.headline, sep="\n\n")


if __name__ == "__main__":
    main()
