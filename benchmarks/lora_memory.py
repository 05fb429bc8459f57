"""Peak memory of a 4-role team: per-role LoRA adapters on one base model vs 4 full model copies.

Each variant runs in a fresh Python subprocess that does the same work and reports its peak
resident set size: ``VmHWM`` of /proc/self/status where there is one. Not ``getrusage``'s
``ru_maxrss``: Linux carries the parent's peak into a forked child's ``ru_maxrss`` across exec, so
a child of a big parent (the suite after the trainer benchmark) would report the parent's peak.

* ``baseline``: import torch, transformers, peft and teamplay; nothing else. Subtracted from the
  others, so the figures are the memory of the models and their work;
* ``one``: one model (``load_model``) with one LoRA adapter doing the work 4 times: the
  single-agent reference (same number of batches as the team, so allocator growth from repeated
  work is not charged to the adapters);
* ``team``: one model, 4 LoRA adapters (``TeamModel``, one per role), as teamplay runs a team;
* ``copies``: 4 ``load_model`` copies, each with its own LoRA adapter (one model per role, as
  systems without shared-base adapters run a team).

The work, per adapter (``team``), per copy (``copies``), or 4 times for ``one``: generate a batch of 8
arith prompts (24 new tokens, greedy), then one forward and backward of the completions'
log-probs. Every copy gets a LoRA adapter rather than full fine-tuning, so the comparison isolates
the sharing of the base weights (full fine-tuning of 4 copies would also hold 4 sets of gradients
and optimiser state, and look worse still).

    python -m benchmarks lora_memory
    python -m benchmarks.lora_memory --quick
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from benchmarks.common import EMBEDDED_MODEL, Result, fmt_ratio, markdown_table, set_threads

MODES = ("baseline", "one", "team", "copies")
ROLES = 4
#: the target: the 4-role LoRA team under this multiple of one model's memory
TARGET = 1.2


def _work(team_model, adapter: str, n_prompts: int, max_new: int) -> None:
    """Generate one batch with ``adapter``, then one backward through its log-probs."""
    from teamplay.agents.backends.hf import HFBackend
    from teamplay.envs.tasks import get_task
    from teamplay.records import ChatMessage, SamplingParams, TurnRequest

    items = get_task("arith", level=1).load("test", limit=n_prompts)
    backend = HFBackend(team_model, max_prompt_tokens=512)
    requests = [TurnRequest(agent=f"{adapter}_0", role=adapter, stage="solve", round=0,
                            chat=(ChatMessage("user", it.prompt),), adapter=adapter) for it in items]
    gens = backend.generate(requests, SamplingParams(max_new_tokens=max_new, temperature=0.0))
    logp, mask = team_model.completion_logprobs([g.prompt_ids for g in gens], [g.completion_ids for g in gens],
                                                adapter=adapter)  # [B, C], [B, C]
    loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
    loss.backward()


def worker(mode: str, model: str, n_prompts: int, max_new: int) -> int:
    """Run ``mode`` in this process; returns its peak RSS in KiB."""
    import peft  # noqa: F401  (the baseline imports what every variant imports)
    import torch  # noqa: F401
    import transformers  # noqa: F401

    from teamplay.agents.models import load_model
    from teamplay.agents.team_model import TeamModel

    roles = [f"role{i}" for i in range(ROLES)]
    if mode == "one":
        base, tok = load_model(model)
        single = TeamModel(base, tok, ["role0"], r=8, alpha=16)
        for _ in roles:  # the same number of batches as the team: only the adapters differ
            _work(single, "role0", n_prompts, max_new)
    elif mode == "team":
        base, tok = load_model(model)
        team_model = TeamModel(base, tok, roles, r=8, alpha=16)
        for role in roles:
            _work(team_model, role, n_prompts, max_new)
    elif mode == "copies":
        copies = []
        for role in roles:
            base, tok = load_model(model)
            copies.append(TeamModel(base, tok, [role], r=8, alpha=16))
        for role, team_model in zip(roles, copies, strict=True):
            _work(team_model, role, n_prompts, max_new)
    elif mode != "baseline":
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return peak_rss_kib()


def peak_rss_kib() -> int:
    """This process's peak RSS in KiB: ``VmHWM`` (Linux, reset by exec), else ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])  # "VmHWM:   123456 kB"
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def worker_env() -> dict[str, str]:
    """The worker's environment, with glibc's mmap threshold fixed.

    glibc raises its mmap threshold each time a large mmapped block is freed, after which large
    tensors come from the heap and their pages stay resident: the peak of one and the same run then
    varies by about 500 MB from process to process (measured here: 1751 vs 2245 MiB for identical
    single-adapter runs), which would swamp the differences this benchmark is about. A fixed
    threshold keeps every large tensor in its own mapping, returned when freed, and makes the peak
    reproducible to about 1 MiB. (Other C libraries ignore the variable.)
    """
    return {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}


def measure(mode: str, model: str, n_prompts: int, max_new: int, threads: int) -> int:
    """Peak RSS (KiB) of ``mode`` in a fresh interpreter."""
    cmd = [sys.executable, "-m", "benchmarks.lora_memory", "--worker", mode, "--model", model,
           "--prompts", str(n_prompts), "--max-new", str(max_new), "--threads", str(threads)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=worker_env())
    if done.returncode != 0:
        raise RuntimeError(f"lora_memory worker {mode!r} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return int(json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_kib"])


def run(quick: bool = False, model: str = EMBEDDED_MODEL, threads: int = 1) -> Result:
    """``quick``: 2 prompts, 4 new tokens; otherwise 8 prompts, 24 new tokens."""
    n_prompts, max_new = (2, 4) if quick else (8, 24)
    peak = {mode: measure(mode, model, n_prompts, max_new, threads) for mode in MODES}
    above = {mode: (peak[mode] - peak["baseline"]) / 2**10 for mode in MODES[1:]}  # MiB
    if above["one"] <= 0:
        raise RuntimeError(f"lora_memory: one model measured no memory above the bare interpreter "
                           f"(peak RSS KiB {peak}); the measurement is broken on this platform")
    rows = [[label, f"{peak[mode] / 2**10:.0f}", f"{above[mode]:.0f}", f"**{fmt_ratio(above[mode] / above['one'])}**"]
            for mode, label in (("one", "one model, 1 LoRA adapter"),
                                ("team", f"{ROLES}-role team: one base model, {ROLES} LoRA adapters"),
                                ("copies", f"{ROLES} model copies, 1 LoRA adapter each"))]
    rows.insert(0, ["interpreter with torch, transformers, peft, teamplay", f"{peak['baseline'] / 2**10:.0f}",
                    "0", ""])
    table = markdown_table(["variant", "peak RSS MiB", "above interpreter MiB", "relative to one model"], rows)
    team_ratio = above["team"] / above["one"]
    met = team_ratio < TARGET
    headline = (f"a {ROLES}-role team with per-role LoRA adapters peaks at {fmt_ratio(team_ratio)} the memory of "
                f"one model; {ROLES} separate copies at {fmt_ratio(above['copies'] / above['one'])}; "
                f"target < {TARGET}× {'met' if met else 'NOT met'}.")
    notes = (f"Model {model} (float32), per adapter or copy: generate {n_prompts} arith prompts × {max_new} "
             f"new tokens, then one backward of their log-probs; each variant in a fresh subprocess "
             f"(peak RSS: VmHWM of /proc/self/status).",)
    return Result("lora_memory", table, headline, met, notes,
                  {"model": model, "peak_rss_kib": peak, "above_baseline_mib": above})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiniest sizes")
    parser.add_argument("--model", default=EMBEDDED_MODEL, help="model alias, folder or hub id")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--prompts", type=int, default=8, help=argparse.SUPPRESS)
    parser.add_argument("--max-new", type=int, default=24, help=argparse.SUPPRESS)
    args = parser.parse_args()
    set_threads(args.threads)
    if args.worker:
        print(json.dumps({"peak_rss_kib": worker(args.worker, args.model, args.prompts, args.max_new)}))
        return
    result = run(quick=args.quick, model=args.model, threads=args.threads)
    print(result.table, *result.notes, result.headline, sep="\n\n")


if __name__ == "__main__":
    main()
