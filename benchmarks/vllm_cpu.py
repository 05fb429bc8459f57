"""vLLM's CPU build against the hf backend: rollout tokens/s and one training step's wall time.

The demo's team and settings (``configs/demo.yaml``: the embedded SmolLM2-135M-Instruct, one LoRA
adapter per role, proposer/reviewer with 3 rounds, learned speak/skip controllers, Shapley credit,
sampling at T=0.7 with 48 new tokens) run three ways in one process, one after the other:

* ``hf fp32``: the hf backend in float32 (the demo as shipped);
* ``hf bf16``: the hf backend in bfloat16 (what a vLLM run trains in: vLLM's LoRA kernels take no
  float32);
* ``vllm bf16``: the vllm backend on vLLM's CPU build, the learner in bfloat16.

Each variant is a ``Trainer`` of the same config (same seed, so the same adapters at the start and
the same problems), measured on: the rollouts of the demo's step size (4 problems x 4 episodes) and
of a larger batch (16 x 4), as generated tokens per second of wall time (the two dtypes and engines
sample different tokens, so each row counts its own; the better of 2 repeats); then two training
steps (rollouts, controller and credit, the LoRA update, and for vLLM the adapter reload), their
mean wall time. The three trainers live side by side and take turns (variant by variant within each
repeat and each step), so a change in the machine's load falls on all three alike.
Every variant gets one core: one torch thread for hf and for the learner, and vLLM's engine bound
to one core (``VLLM_CPU_OMP_THREADS_BIND``), so the ratios compare engines, not thread counts.

Needs vLLM (``make install-vllm``; run with that venv's python). Writes the ``vllm_cpu`` region of
BENCHMARKS.md unless ``--quick``:

    .venv-vllm/bin/python -m benchmarks.vllm_cpu            # about 20 minutes on 2 cores
    .venv-vllm/bin/python -m benchmarks.vllm_cpu --quick    # tiny sizes, writes nothing
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import EMBEDDED_MODEL, Result, fmt_ratio, markdown_table, set_threads

DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
#: (label, backend, dtype), in the order they run; the first is the baseline of the ratios
VARIANTS = (("hf fp32", "hf", "float32"), ("hf bf16", "hf", "bfloat16"), ("vllm bf16", "vllm", "bfloat16"))


@dataclass(frozen=True)
class Rollouts:
    """One batch of training rollouts: ``episodes`` episodes, ``tokens`` generated, ``seconds`` wall."""

    episodes: int
    tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds


@dataclass
class Measured:
    """One variant: its rollouts per batch size (problems -> one Rollouts per repeat) and its
    training steps' wall times and generated tokens."""

    label: str
    start_seconds: float
    rollouts: dict[int, list[Rollouts]] = field(default_factory=dict)
    step_seconds: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)

    def best(self, problems: int) -> Rollouts:
        """The repeat with the most tokens/s (the least disturbed by anything else on the machine)."""
        return max(self.rollouts[problems], key=lambda r: r.tokens_per_second)

    @property
    def step_mean(self) -> float:
        return sum(self.step_seconds) / len(self.step_seconds)


def config(backend: str, dtype: str, output: Path, quick: bool, model: str):
    """The demo's config for one variant (``quick``: 8 new tokens)."""
    from teamplay.config import TrainConfig, build_config, read_yaml

    raw = read_yaml(DEMO_CONFIG)
    raw["model"] = {**raw["model"], "name": model, "dtype": dtype}
    raw["backend"] = {**raw["backend"], "name": backend}
    if backend == "vllm":
        raw["backend"]["enforce_eager"] = True  # no CUDA graphs on a CPU
    if quick:
        raw["sampling"] = {**raw["sampling"], "max_new_tokens": 8}
    raw.update(output_dir=str(output), tensorboard=False, eval_task=None)
    return build_config(TrainConfig, raw)


def rollouts(trainer, problems: int, tag: str) -> Rollouts:
    """Time the training rollouts of the trainer's first ``problems`` problems (group_size each)."""
    from teamplay.training.play.rollout import RolloutJob

    jobs = [RolloutJob(item=item, group_id=f"{tag}:{k}") for k, item in enumerate(trainer.items[:problems])
            for _ in range(trainer.cfg.rollout.group_size)]
    t0 = time.perf_counter()
    episodes = trainer.runner.run(jobs, seed=2)
    return Rollouts(len(jobs), sum(e.tokens for e in episodes), time.perf_counter() - t0)


def measure_all(sizes: tuple[int, ...], repeats: int, steps: int, quick: bool, model: str,
                workdir: Path) -> list[Measured]:
    """Every variant's trainer, then the measurements interleaved (variant by variant within each
    repeat and each step), so a change in the machine's load falls on every variant alike."""
    from teamplay.training.run.trainer import Trainer
    from teamplay.training.store.metrics import generated_tokens

    trainers, measured = [], []
    try:
        for label, backend, dtype in VARIANTS:
            cfg = config(backend, dtype, workdir / label.replace(" ", "-"), quick, model)
            start = time.perf_counter()
            trainers.append(Trainer(cfg))
            measured.append(Measured(label, time.perf_counter() - start))
            rollouts(trainers[-1], 1, "warm-up")  # first-call allocations and kernel selection
        for repeat in range(repeats):
            for problems in sizes:
                for trainer, m in zip(trainers, measured, strict=True):
                    r = rollouts(trainer, problems, f"r{repeat}b{problems}")
                    m.rollouts.setdefault(problems, []).append(r)
                    print(f"  {m.label}: {problems} x 4 rollouts, {r.tokens} tokens in {r.seconds:.1f} s", flush=True)
        for _ in range(steps):
            for trainer, m in zip(trainers, measured, strict=True):
                t0 = time.perf_counter()
                metrics = trainer.step().metrics
                m.step_seconds.append(time.perf_counter() - t0)
                m.step_tokens.append(generated_tokens(metrics))
                print(f"  {m.label}: step {trainer.state.step} in {m.step_seconds[-1]:.1f} s", flush=True)
    finally:
        for trainer in trainers:
            trainer.close()  # a vLLM engine the run started ends here
    return measured


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """The three variants of the module doc; the table's ratios are against ``hf fp32``."""
    if importlib.util.find_spec("vllm") is None:
        raise SystemExit("error: vLLM is not installed; make install-vllm, then run this with .venv-vllm/bin/python")
    # one core per variant (see the module doc); the KV cache in GiB on the CPU build (default 4)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    sizes, repeats, steps = ((1,), 1, 1) if quick else ((4, 16), 2, 2)
    with tempfile.TemporaryDirectory() as tmp:
        measured = measure_all(sizes, repeats, steps, quick, model, Path(tmp))
    base = measured[0]
    header = ["variant", "start (s)"]
    for problems in sizes:
        header += [f"rollouts {problems}x4: tokens/s", "vs hf fp32"]
    header += ["training step (s)", "vs hf fp32"]
    rows = []
    for m in measured:
        row = [m.label, f"{m.start_seconds:.0f}"]
        for problems in sizes:
            r = m.best(problems)
            row += [f"{r.tokens_per_second:.1f} ({r.tokens} in {r.seconds:.0f} s)",
                    fmt_ratio(r.tokens_per_second / base.best(problems).tokens_per_second)]
        row += [" / ".join(f"{s:.0f}" for s in m.step_seconds) + f" (mean {m.step_mean:.0f})",
                fmt_ratio(base.step_mean / m.step_mean)]
        rows.append(row)
    vllm, bf16 = measured[2], measured[1]
    big = sizes[-1]
    speed = vllm.best(big).tokens_per_second / base.best(big).tokens_per_second
    headline = (f"vLLM-CPU rollouts at {big}x4 episodes: {fmt_ratio(speed)} the tokens/s of the hf backend in "
                f"float32 ({fmt_ratio(vllm.best(big).tokens_per_second / bf16.best(big).tokens_per_second)} "
                f"hf in bfloat16); a training step {fmt_ratio(base.step_mean / vllm.step_mean)} as fast.")
    notes = ("Ratios: tokens/s over hf fp32's; for the step, hf fp32's wall time over the row's (above 1x: "
             "faster). Each variant samples its own tokens (dtype and engine change them), so each row "
             "counts what it generated. One core per variant; start = building the trainer (model load, "
             "and for vLLM the engine start).",)
    data = {"sizes": sizes, "variants": [{"label": m.label, "start_seconds": m.start_seconds,
                                          "rollouts": {str(k): [vars(r) for r in v] for k, v in m.rollouts.items()},
                                          "step_seconds": m.step_seconds, "step_tokens": m.step_tokens}
                                         for m in measured]}
    return Result("vllm_cpu", markdown_table(header, rows), headline, None, notes, data)


def main(argv: list[str] | None = None) -> None:
    from benchmarks.common import DEFAULT_OUTPUT, machine_info, machine_line, write_regions

    parser = argparse.ArgumentParser(prog="python -m benchmarks.vllm_cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes; writes nothing")
    parser.add_argument("--model", default=EMBEDDED_MODEL, help="model alias, local folder or hub id")
    args = parser.parse_args(argv)
    set_threads(1)
    line = machine_line(machine_info())
    result = run(quick=args.quick, model=args.model)
    print(result.table, *result.notes, result.headline, sep="\n\n")
    if not args.quick:
        command = ".venv-vllm/bin/python -m benchmarks.vllm_cpu" + (
            f" --model {args.model}" if args.model != EMBEDDED_MODEL else "")
        write_regions(DEFAULT_OUTPUT, {"vllm_cpu": result.markdown(command, line)})


if __name__ == "__main__":
    main(sys.argv[1:])
