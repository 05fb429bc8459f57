"""Figure captions written from the stored per-seed results, so a caption cannot claim more than
the evidence does (``docs/gen_reference.py`` writes them into their pages; ``tests/docs`` checks).

A caption's numbers are the cells of the "where credit paid" table (``benchmarks.credit_paid``, the
table the README and ``docs/results/credit-paid.md`` hold), read from the committed results in
``benchmarks/results/``; its words follow those cells' readings (``paid``, ``floor fails``, ...).
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs" / "index.md"
SPLIT_GAIN = "caption:split_gain"

#: the figure's points (the arena's first sittings) and the clean reruns, by team size K
FIRST_SITTINGS = {2: "benchmarks/results/credit_arena/split_k2.json",
                  8: "benchmarks/results/credit_arena/split_k8.json"}
RERUNS = {4: "benchmarks/results/cooperation/split_k4_fair.json",
          8: "benchmarks/results/cooperation/split_k8_fair.json"}


def _credit_paid():
    """``benchmarks.credit_paid`` (the benchmarks package lives beside teamplay, not inside it)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import credit_paid

    return credit_paid


@functools.cache  # the stored results do not change while a process runs; the exact tests take seconds
def oracle_rows() -> dict[str, dict[str, str]]:
    """The ``oracle`` row of every stored comparison, by its file: ``seeds``, ``floor`` (grpo's own
    gain), ``diff`` (oracle - grpo, paired t), ``p`` (exact) and ``reading``, as the table writes them."""
    credit_paid = _credit_paid()
    out = {}
    for setting, label, seeds, floor, diff, p, reading in credit_paid.rows():
        if label != "oracle":
            continue
        path = re.search(r"\(([^)]+\.json)\)", setting).group(1)
        if ", both pooled]" in setting or ", new seeds " in setting:  # a replication's two rows
            path += "#pooled" if ", both pooled]" in setting else "#alone"
        out[path] = {"seeds": seeds, "floor": floor, "diff": diff, "p": p,
                     "reading": reading.replace("*", "")}
    return out


def replicated(rows: dict[str, dict[str, str]], path: str) -> dict[str, str]:
    """A rerun's ``oracle`` row: pooled with its replication on new seeds where one is stored (the
    pooled reading, its verdict on the first sitting cut off, and the replication's own row as
    ``alone``), else its own."""
    again = path.removesuffix(".json") + "-replication.json"
    if f"{again}#pooled" not in rows:
        return rows[path]
    pooled = dict(rows[f"{again}#pooled"])
    pooled["reading"] = pooled["reading"].split(";")[0] + " pooled with new seeds"
    return {**pooled, "alone": rows[f"{again}#alone"]}


def split_gain_caption() -> str:
    """The caption of ``credit_arena_split_gain.png`` on the home page (one paragraph, in italics)."""
    rows = oracle_rows()
    first = {k: rows[p] for k, p in FIRST_SITTINGS.items()}
    rerun = {k: replicated(rows, p) for k, p in RERUNS.items()}
    settled = [k for k, r in rerun.items() if r["reading"].startswith("paid")]
    open_ = [k for k, r in rerun.items() if not r["reading"].startswith("paid")]
    reruns = "; ".join(
        f"K = {k}: {r['reading']} ({r['diff']}, exact p {r['p']}, {r['seeds']} seeds"
        + (f"; `grpo`'s own gain {r['floor']}" if r["reading"] == "floor fails" else "")
        + (f"; alone, the {r['alone']['seeds']} new seeds read {r['alone']['reading']}, {r['alone']['diff']}"
           if "alone" in r else "") + ")"
        for k, r in rerun.items())
    k2 = "level" if first[2]["reading"].startswith("null") else first[2]["reading"]
    verdict = (f"Broadcast's cost is settled at K = {', '.join(map(str, settled))}"
               if settled else "No team size's cost is settled")
    if open_:
        verdict += f" and open at K = {', '.join(map(str, open_))}"
    return (
        f"*Held-out team accuracy gained by training on the true advantage (`oracle`) instead of "
        "broadcasting the team reward (`grpo`), by team size K (paired seeds, 95% intervals). The "
        f"points are the arena's first sittings: {k2} with one teammate (K = 2: {first[2]['diff']}, "
        f"{first[2]['seeds']} seeds), {first[8]['diff']} with seven (K = 8, {first[8]['seeds']} seeds). "
        f"Reruns on a held-out set without training twins and with equal optimiser steps read {reruns}. "
        f"{verdict}. Details: [the credit arena](results/arena.md), "
        "[where credit paid](results/credit-paid.md).*")


def with_caption(text: str, marker: str, caption: str) -> str:
    """``text`` with the body between ``<!-- marker:start -->`` and ``<!-- marker:end -->`` replaced
    (the region rule of the credit-paid table, ``benchmarks.credit_paid.replace_in``)."""
    return _credit_paid().replace_in(text, caption, marker)


def index_page() -> str:
    """``docs/index.md`` as it is, with its figure's caption written from the stored results."""
    return with_caption(INDEX.read_text(encoding="utf-8"), SPLIT_GAIN, split_gain_caption())
