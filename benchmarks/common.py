"""What every benchmark shares: the ``Result`` record, the machine description, the embedded-model
helpers, and the rewriting of one table region of BENCHMARKS.md.

A benchmark module exposes ``run(quick: bool = False, ...) -> Result``. Speed and memory are
reported as RATIOS of two variants measured side by side in the same process (or the same
command); absolute seconds are kept in ``Result.data`` for the curious but are noisy on a shared
machine.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the embedded default model (``teamplay.agents.models.SMOLLM2_ALIAS``)
EMBEDDED_MODEL = "smollm2-135m"
#: the record every benchmark rewrites its regions in (``python -m benchmarks``, a script's ``--write``)
DEFAULT_OUTPUT = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


@dataclass(frozen=True)
class Result:
    """What one benchmark run produced.

    Fields:
        name: the benchmark's name (its module name; the ``bench:NAME`` markers of BENCHMARKS.md).
        table: a markdown table of the figures (no surrounding prose).
        headline: one line for the README: the ratio and whether the target is met.
        target_met: whether the stated target was reached; ``None`` when the benchmark has no
            pass/fail target.
        notes: sentences printed under the table (how to read it, what was extrapolated).
        data: the raw numbers (seconds, tokens, bytes, settings), JSON-serialisable.
    """

    name: str
    table: str
    headline: str
    target_met: bool | None
    notes: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)

    def markdown(self, command: str, machine: str) -> str:
        """The region written between this benchmark's markers: command, table, notes."""
        lines = [f"Command: `{command}` ({machine}).", "", self.table, ""]
        lines += [f"{note}" for note in self.notes]
        lines += ["", f"**Result:** {self.headline}"]
        return "\n".join(lines).strip() + "\n"


# ---------------------------------------------------------------------------------- machine
def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (``platform.processor()`` where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.processor() or "unknown CPU"
    match = re.search(r"^model name\s*:\s*(.+)$", text, flags=re.MULTILINE)
    return match.group(1).strip() if match else (platform.processor() or "unknown CPU")


def ram_gib() -> float | None:
    """Total RAM in GiB from /proc/meminfo; ``None`` where it cannot be read."""
    try:
        text = Path("/proc/meminfo").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, flags=re.MULTILINE)
    return int(match.group(1)) / 2**20 if match else None


def machine_info() -> dict[str, Any]:
    """Cores, CPU model, RAM, library versions, the dtype a config's ``model.dtype: auto`` means here
    (bfloat16 on a CPU with AVX512-BF16 or AMX, else float32: results differ between the two), date
    and load average of this machine, now."""
    import torch
    import transformers

    from teamplay.agents.models import resolve_dtype

    ram = ram_gib()
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "date": _dt.date.today().isoformat(),
        "cores": os.cpu_count(),
        "cpu": cpu_model(),
        "ram_gib": round(ram, 1) if ram is not None else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "dtype": resolve_dtype("auto"),
        "load_average_1min": round(load[0], 2) if load else None,
    }


def machine_line(info: dict[str, Any]) -> str:
    """One line naming the machine, e.g. ``2 cores AMD EPYC, 23.4 GiB RAM, torch 2.13.0, 2026-01-05``."""
    ram = f"{info['ram_gib']} GiB RAM" if info["ram_gib"] is not None else "RAM unknown"
    return (f"{info['cores']} cores {info['cpu']}, {ram}, torch {info['torch']}, "
            f"transformers {info['transformers']}, {_dtype(info)}{info['date']}, load average "
            f"{info['load_average_1min']} at start")


def _dtype(info: dict[str, Any]) -> str:
    """``model dtype auto = <dtype>, `` where ``info`` records it (older stored lines do not)."""
    return f"model dtype auto = {info['dtype']}, " if info.get("dtype") else ""


# ---------------------------------------------------------------------------------- timing
def set_threads(n: int) -> None:
    """Use ``n`` torch CPU threads (0 = torch's default). One thread is the default of the suite:
    on a machine shared with other jobs, OpenMP threads that wait for a busy core spin, and a
    2-thread batch-1 generate ran 4-7x slower than a 1-thread one here; one thread gives stable
    ratios."""
    import torch

    if n < 0:
        raise ValueError(f"threads must be >= 0, got {n}")
    if n:
        torch.set_num_threads(n)


class Stopwatch:
    """Accumulates wall time under named parts: ``with watch("env"): ...``; ``watch.seconds["env"]``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, part: str) -> Iterator[None]:
        import time

        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[part] = self.seconds.get(part, 0.0) + time.perf_counter() - start


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}×"


def fmt_pct(x: float) -> str:
    """A fraction as a percentage with 3 significant digits below 1% (0.00037 -> ``0.0370%``)."""
    return f"{100 * x:.3g}%" if abs(x) < 0.01 else f"{100 * x:.1f}%"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table; cells are written with ``str``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- the model
def load_team_model(model: str, team, r: int = 8, alpha: int = 16, seed: int = 0):
    """``TeamModel`` of ``model`` (alias, local folder or hub id) with one LoRA adapter per adapter
    of ``team``, built exactly as ``teamplay train`` builds it (``build_team_model``)."""
    from teamplay.config import LoraConfig, ModelConfig
    from teamplay.training.wiring.model import build_team_model

    cfg = ModelConfig(name=model, lora=LoraConfig(r=r, alpha=alpha))
    return build_team_model(cfg, team, seed=seed)


def arith_items(n: int, split: str = "test", seed: int = 0):
    """The arith task (level 1) and its first ``n`` items of ``split``."""
    from teamplay.envs.tasks import get_task

    task = get_task("arith", level=1)
    return task, task.load(split, limit=n, seed=seed)


@dataclass(frozen=True)
class ArithRollouts:
    """An arith level-1 rollout set-up on a model (``arith_rollouts``).

    Fields:
        task: the arith task (level 1).
        items: its problems.
        make_env: builds a fresh env of the protocol with its default team (``env_factory``).
        backend: ``HFBackend`` on ``load_team_model``'s team model, prompts cut at 1,536 tokens.
        runner: ``RolloutRunner`` of ``make_env`` and ``backend`` with the set-up's sampling.
        jobs: ``group`` jobs per problem, in problem order; problem ``p``'s group id is ``p{p}``.
    """

    task: Any
    items: list[Any]
    make_env: Callable[[], Any]
    backend: Any
    runner: Any
    jobs: list[Any]


def arith_rollouts(model: str, protocol: str, n_problems: int, group: int, max_new_tokens: int,
                   temperature: float, options: dict[str, Any] | None = None, split: str = "test") -> ArithRollouts:
    """The first ``n_problems`` arith items of ``split`` played by ``protocol`` (with ``options``)
    on ``model`` through ``RolloutRunner``, ``group`` episodes per problem."""
    from teamplay.agents.backends.hf import HFBackend
    from teamplay.config import ProtocolConfig
    from teamplay.records import SamplingParams
    from teamplay.training.play.rollout import RolloutJob, RolloutRunner
    from teamplay.training.wiring.envs import env_factory

    task, items = arith_items(n_problems, split=split)
    make_env, team = env_factory(task, ProtocolConfig(name=protocol, options=options or {}), None)
    backend = HFBackend(load_team_model(model, team), max_prompt_tokens=1536)
    runner = RolloutRunner(make_env, backend, SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature))
    jobs = [RolloutJob(item, f"p{p}") for p, item in enumerate(items) for _ in range(group)]
    return ArithRollouts(task, items, make_env, backend, runner, jobs)


# ---------------------------------------------------------------------------------- BENCHMARKS.md
def marker(name: str, end: bool) -> str:
    return f"<!-- bench:{name}:{'end' if end else 'start'} -->"


def replace_region(text: str, name: str, content: str) -> str:
    """``text`` with the region between ``bench:NAME`` markers replaced by ``content``.

    The markers themselves and everything outside them (hand-written prose) are kept. When the
    markers are absent, a new section ``## NAME`` holding them is appended at the end, so a
    benchmark added later still gets written. Raises ValueError when the markers are present but
    out of order or repeated (editing the file by hand went wrong; fix the markers).
    """
    start, end = marker(name, end=False), marker(name, end=True)
    n_start, n_end = text.count(start), text.count(end)
    if n_start == 0 and n_end == 0:
        return text.rstrip("\n") + f"\n\n## {name}\n\n{start}\n{content.rstrip()}\n{end}\n"
    if n_start != 1 or n_end != 1 or text.index(start) > text.index(end):
        raise ValueError(f"BENCHMARKS.md: expected one {start} followed by one {end}; found {n_start} "
                         f"start and {n_end} end marker(s). Fix the markers by hand")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{content.rstrip()}\n{end}{tail}"


def write_regions(path: Path, regions: dict[str, str]) -> None:
    """Rewrite the named regions of ``path`` (created when missing); written atomically."""
    from teamplay.atomic import write_atomically

    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    for name, content in regions.items():
        text = replace_region(text, name, content)
    write_atomically(path, text)


def script_main(run: Callable[..., Any], description: str) -> None:
    """``python -m benchmarks.NAME [--quick] [--model M] [--threads N]``: run one benchmark, print it."""
    import argparse

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiniest sizes")
    parser.add_argument("--model", default=EMBEDDED_MODEL, help="model alias, folder or hub id")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    args = parser.parse_args()
    set_threads(args.threads)
    result = run(quick=args.quick, model=args.model)
    print(result.table, *result.notes, result.headline, sep="\n\n")
