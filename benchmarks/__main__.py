"""``python -m benchmarks [NAME ...] [--quick]``: run the benchmarks and rewrite their tables in
BENCHMARKS.md.

Without names every benchmark runs (small sizes, about 10-15 minutes on a 2-core CPU). Each
result replaces only the region between its ``<!-- bench:NAME:start -->`` and
``<!-- bench:NAME:end -->`` markers; the prose around them is kept. A run of every benchmark also
rewrites the ``machine`` region (CPU, cores, RAM, versions, date). ``--quick`` runs the tiniest
sizes and, unless ``--output`` is given, writes nothing (its figures are not worth keeping).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import DEFAULT_OUTPUT, EMBEDDED_MODEL, machine_info, machine_line, set_threads, write_regions
from benchmarks.suite import BENCHMARKS


def command_of(name: str, model: str, threads: int, quick: bool = False) -> str:
    """The command that reproduces one benchmark's region."""
    extra = (f" --model {model}" if model != EMBEDDED_MODEL else "") + (f" --threads {threads}" if threads != 1 else "")
    return f"python -m benchmarks {name}{' --quick' if quick else ''}{extra}"


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}")
    parser.add_argument("--quick", action="store_true", help="tiniest sizes; writes nothing unless --output")
    parser.add_argument("--model", default=EMBEDDED_MODEL, help="model alias, local folder or hub id")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: stable ratios on a shared machine; 0 = torch's default)")
    parser.add_argument("--output", type=Path, default=None, help="markdown file to update (default BENCHMARKS.md)")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw numbers to this JSON file")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(BENCHMARKS)}")
    names = list(args.names) or list(BENCHMARKS)
    set_threads(args.threads)
    info = machine_info()
    line = machine_line(info)
    print(f"# {line}", flush=True)
    output = args.output if args.output is not None else (None if args.quick else DEFAULT_OUTPUT)
    regions, raw = {}, {"machine": info, "quick": args.quick, "results": {}}
    for name in names:
        start = time.perf_counter()
        result = BENCHMARKS[name](quick=args.quick, model=args.model)
        seconds = time.perf_counter() - start
        print(f"\n## {name} ({seconds:.0f} s)\n\n{result.table}\n", *result.notes, f"\n{result.headline}",
              sep="\n", flush=True)
        # a benchmark whose table is computed from its committed files gives that region itself
        regions[name] = result.data.get("region") or \
            result.markdown(command_of(name, args.model, args.threads, args.quick), line)
        raw["results"][name] = {"headline": result.headline, "target_met": result.target_met,
                                "seconds": seconds, "data": result.data}
        # written after each benchmark: a later failure does not lose the figures already measured
        if output is not None:
            write_regions(output, {name: regions[name]})
        if args.json is not None:
            args.json.write_text(json.dumps(raw, indent=2, default=str), encoding="utf-8")
    if set(names) == set(BENCHMARKS) and output is not None:
        write_regions(output, {"machine": _machine_region(info)})
    if output is not None:
        print(f"\nupdated {output.name}: {', '.join(regions)}")
    return raw


def _machine_region(info: dict) -> str:
    rows = [("date", info["date"]), ("CPU", f"{info['cpu']}, {info['cores']} cores"),
            ("RAM", f"{info['ram_gib']} GiB"), ("torch threads", info["torch_threads"]),
            ("Python / torch / transformers", f"{info['python']} / {info['torch']} / {info['transformers']}"),
            ("1-minute load average at start", info["load_average_1min"])]
    lines = ["| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines) + "\n\nCommand: `python -m benchmarks` (every benchmark, in this order).\n"


if __name__ == "__main__":
    main(sys.argv[1:])
