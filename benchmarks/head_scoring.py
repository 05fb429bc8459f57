"""The chosen tokens' log-probs through a float32 output head: ``head_logprobs`` (one [N, V] buffer)
against the head's logits, ``log_softmax`` and a gather, forward and backward.

Each run is a fresh Python subprocess (so that its peak resident set is its own:
``lora_memory.peak_rss_kib``) that builds a frozen float32 head of the embedded model's size
(576 -> 49,152) and N bfloat16 hidden states, then computes the N chosen tokens'
log-probs at temperature 0.7 and their gradient. It reports the seconds of that forward and
backward and how far the peak rose over the setup. ``plain`` and ``fused`` take turns over the
repeats; N = 256 (a demo minibatch's completion tokens) and 2048 (16 completions of 128 tokens).

    python -m benchmarks head_scoring
    python -m benchmarks.head_scoring --quick
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Result, fmt_ratio, markdown_table
from benchmarks.lora_memory import peak_rss_kib

VARIANTS = ("plain", "fused")
HIDDEN, VOCAB = 576, 49_152


def measure(variant: str, rows: int, hidden: int, vocab: int, threads: int) -> dict[str, float]:
    """One forward and backward of ``rows`` chosen-token log-probs (in this process)."""
    import torch

    from teamplay.agents.head_logprobs import head_logprobs, logits_logprobs

    torch.set_num_threads(threads)
    torch.manual_seed(0)  # the head's initialisation: the same head in every run
    gen = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(hidden, vocab, bias=False).requires_grad_(False)
    states = torch.randn(rows, hidden, generator=gen).to(torch.bfloat16).requires_grad_(True)
    targets = torch.randint(0, vocab, (rows,), generator=gen)
    before = peak_rss_kib()
    start = time.perf_counter()
    if variant == "fused":
        logp = head_logprobs(states, head, targets, 0.7)
    else:
        logp = logits_logprobs(head(states.float()), targets, 0.7)  # the plain path TeamModel falls back to
    logp.sum().backward()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_mib": (peak_rss_kib() - before) / 1024,
            "checksum": float(logp.detach().double().sum())}


def _child(variant: str, rows: int, hidden: int, vocab: int, threads: int) -> dict[str, float]:
    code = ("import json, sys; from benchmarks.head_scoring import measure; "
            f"print(json.dumps(measure({variant!r}, {rows}, {hidden}, {vocab}, {threads})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool = False, model: str | None = None) -> Result:
    """``quick``: a 32 -> 500 head, N = 16 and 64, one repeat; otherwise the embedded model's head,
    N = 256 and 2048, 3 repeats. ``model`` is ignored (the head's size is the embedded model's)."""
    import torch

    threads = torch.get_num_threads()
    hidden, vocab = (32, 500) if quick else (HIDDEN, VOCAB)
    sizes, repeats = ((16, 64), 1) if quick else ((256, 2048), 3)
    data: dict[str, Any] = {"hidden": hidden, "vocab": vocab, "threads": threads, "runs": {}}
    rows = []
    for n in sizes:
        runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
        for r in range(repeats):
            for variant in (VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))):
                runs[variant].append(_child(variant, n, hidden, vocab, threads))
        data["runs"][str(n)] = runs
        best = {v: min(x["seconds"] for x in runs[v]) for v in VARIANTS}
        peak = {v: max(x["peak_mib"] for x in runs[v]) for v in VARIANTS}
        for v in VARIANTS:
            rows.append([n, v, f"{best[v]:.3f}", ", ".join(f"{x['seconds']:.3f}" for x in runs[v]),
                         f"{peak[v]:.0f}", f"**{fmt_ratio(best['plain'] / best[v])}**",
                         f"{n * vocab * 4 / 2**20:.0f}"])
    table = markdown_table(["tokens N", "variant", "best s", "repeats s", "peak rise MiB", "plain / variant",
                            "one [N, V] float32 MiB"], rows)
    largest = str(max(sizes))
    runs = data["runs"][largest]
    speed = min(x["seconds"] for x in runs["plain"]) / min(x["seconds"] for x in runs["fused"])
    memory = max(x["peak_mib"] for x in runs["plain"]) / max(max(x["peak_mib"] for x in runs["fused"]), 1e-9)
    headline = (f"at N = {largest} chosen tokens the fused head's forward and backward take 1/{speed:.2f} of the "
                f"plain path's time and 1/{memory:.2f} of its peak memory rise")
    notes = (f"A frozen float32 head {hidden} -> {vocab}, bfloat16 states, temperature 0.7, {threads} torch "
             f"thread(s); each run a fresh subprocess, {repeats} repeat(s) alternating the variants. Peak rise: "
             "VmHWM after the backward minus before the forward.",)
    return Result("head_scoring", table, headline + ".", None, notes, data)


if __name__ == "__main__":
    from benchmarks.common import script_main

    script_main(run, "chosen-token log-probs through the head: fused against plain")
