"""Where credit paid: one table of every stored comparison of credit methods, each method against
broadcast ``grpo`` on held-out team accuracy, with the paired t interval *and* an exact paired test
beside it, the power (MDE) of the comparison, and a one-line reading computed from those numbers.

The rows come from the committed per-seed results alone (``benchmarks/results/credit_arena/*.json``
and ``benchmarks/results/cooperation/*.json``), so anyone can recompute them; a test checks that the
README and ``docs/results/credit-paid.md`` hold exactly what they give (the README links each row's
file; the docs page names it).

    python -m benchmarks.credit_paid       # rewrite the README's and the docs page's table

Readings, in this order (the first that holds):

* *void*: the method took no optimiser step on any seed (its row is the untrained team: e.g. a
  selection rule that never selects), so it says nothing about the method;
* *same as grpo*: every seed's difference is exactly 0 (the method's advantages are grpo's up to a
  scale the normalisation removes: the runs are identical);
* *floor fails*: grpo's own gain over the untrained team is not above 0 by its t interval, so no
  difference between methods says anything about credit there;
* *paid*: the method's t interval lies above 0 and the exact sign-flip test gives p <= 0.05;
* *not settled*: one of the two holds and the other does not (e.g. every seed up at 5 seeds, whose
  smallest exact p is 0.0625);
* *worse*: the t interval lies below 0;
* *null*: neither, and the MDE says what difference the seeds could have found.

A cooperation comparison still short of its planned seeds (split over sittings: ``benchmarks.cooperation
--seeds N`` adds the ones it lacks) is one row, *in progress*, with no reading: a difference read off
the first seeds of a comparison would be read again at every sitting.

A comparison trained again on seeds never used before (``benchmarks.cooperation --replicate
100-107``, stored as ``<setting>-replication.json``) is rows of its own, read as any comparison,
then one *pooled* row per method over both sittings' seeds (disjoint, so the pooled test has their
sum), whose reading says whether the first sitting *held* (the replication alone reads *paid*
again), was *not confirmed* (the same sign, not settled alone) or *did not hold*; where the first
sitting was not paid, it says whether the new seeds settle it alone.

Settings that failed their calibration (``benchmarks/results/cooperation/calibration.json``: the
untrained team never produced the event a credit method learns from) are rows too, *null by
calibration*, with the exact one-sided 95% upper bound on the event's rate (``1 - 0.05^(1/n)`` for 0
of n, about 3/n). A probe that names the share a comparison ``needed`` (the groups with unequal rewards
a credit method learns from, 20%) and reaches it is *calibrated*: its comparison can be run. The
README leaves out the arena's first sittings of settings the cooperation benchmark reran clean
(``SUPERSEDED``) and the controls of the K = 8 audit (``AUDIT_CONTROLS``); the docs page keeps every row.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.arena_results import RESULTS as ARENA_RESULTS
from benchmarks.arena_results import load_result, mde, seeds_held
from benchmarks.cooperation import REPLICATION, sign_flip_p
from benchmarks.cooperation import RESULTS as COOPERATION_RESULTS
from benchmarks.cooperation import SIZES as COOPERATION_SIZES
from benchmarks.credit_arena import _cell, _values, mean_ci, paired_difference

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS_PAGE = ROOT / "docs" / "results" / "credit-paid.md"
REGION = "credit_paid"
ACCURACY = "heldout/team_accuracy"
GAIN = "heldout_gain/team_accuracy"
#: what each stored setting is, in a few words (the README's first column)
TEAMS = {
    "split_k2": "additive, K = 2", "split_k4": "additive, K = 4", "split_k8": "additive, K = 8",
    "split_k2_roles": "additive, K = 2, adapter each", "split_k4_roles": "additive, K = 4, adapter each",
    "split_k8_roles": "additive, K = 8, adapter each",
    "split_k4_fair": "additive, K = 4 (clean rerun)",
    "split_k8_fair": "additive, K = 8 (clean rerun)",
    "relay_k2": "relay, K = 2 (sampled eval)",
    "chain_k2": "chain, K = 2", "chain_k4": "chain, K = 4",
    "noisy_q05": "solver + spoiler (q = 0.5)",
    "gcpo": "GCPO: group as team", "parallel_shapley": "Parallel Shapley: paths + judge",
    "tracer": "TRACER: proposer/reviewer",
}
#: the cooperation benchmark's settings whose names the arena also uses, by what differs
COOPERATION_TEAMS = {
    "chain_k4": "chain, K = 4 (one step a step)", "chain_k8": "chain, K = 8 (one step a step)",
    "relay_k3_warm": "relay, K = 3, after a warm start",
    "relay_k3_warm_nochannel": "relay, K = 3, after a warm start, no channel",
}


#: arena comparisons rerun on a clean held-out set with equal optimiser steps (``split_kK_fair``): the
#: README shows the reruns, the docs page both
SUPERSEDED = frozenset({"split_k4", "split_k8", "split_k8-more"})
#: the controls an audit of the K = 8 additive team asked for (``--methods`` comparisons beside
#: ``split_k8_fair``): the README leaves them out as it leaves out SUPERSEDED, the docs page keeps them
AUDIT_CONTROLS = frozenset({"split_k8_fair-baseline", "split_k8_fair-controls", "split_k8_fair-more"})
CALIBRATION = COOPERATION_RESULTS / "calibration.json"


def stored_results() -> list[tuple[Path, dict[str, Any]]]:
    """Every committed comparison, arena first, in file-name order (a ``-rerun`` file is one seed
    trained again, read by its comparison's notes, not a comparison)."""
    paths = sorted(ARENA_RESULTS.glob("*.json")) + sorted(p for p in COOPERATION_RESULTS.glob("*.json")
                                                          if not p.stem.endswith("-rerun") and p != CALIBRATION)
    return [(path, load_result(path)) for path in paths]


def reading(floor: tuple[float, float], diff: tuple[float, float], p: float, power: float,
            steps: float = math.nan, diffs: Sequence[float] = ()) -> str:
    """The one-line reading of a comparison (module docstring), from grpo's gain (mean, half-width),
    the paired difference (mean, half-width), its exact p, its MDE (the difference the seeds could
    find with 80% power, shown with a null), the method's mean optimiser steps and the per-seed
    differences."""
    if steps == 0:
        return "void: no optimiser step"
    if diffs and all(d == 0 for d in diffs):  # exact: identical runs give identical accuracies
        return "same as grpo (every seed)"
    if not (math.isfinite(floor[1]) and floor[0] - floor[1] > 0):
        return "floor fails"
    above = math.isfinite(diff[1]) and diff[0] - diff[1] > 0
    exact = math.isfinite(p) and p <= 0.05
    if above and exact:
        return "**paid**"
    if above:
        return "not settled: t above 0, exact test not"
    if exact:
        return "not settled: exact test only"
    if math.isfinite(diff[1]) and diff[0] + diff[1] < 0:
        return "worse than grpo"
    return f"null (could find ±{power:.2f})" if math.isfinite(power) else "null"


def mean_steps(result: dict[str, Any], label: str) -> float:
    """The method's optimiser steps, mean over seeds (NaN where the runs did not record them)."""
    return mean_ci(list(_values(result, label, "train/updates").values()))[0]


def _p(p: float) -> str:
    return "—" if not math.isfinite(p) else f"{p:.3f}"


def upper_bound_95(successes: int, trials: int) -> float:
    """The exact one-sided 95% upper bound on a rate seen ``successes`` times in ``trials`` (0 of n:
    ``1 - 0.05^(1/n)``), by bisection on the binomial tail."""
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"a rate needs 0 <= successes <= trials and trials >= 1, got {successes} of {trials}")
    if successes == trials:
        return 1.0
    low, high = successes / trials, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        tail = sum(math.comb(trials, k) * mid ** k * (1 - mid) ** (trials - k) for k in range(successes + 1))
        low, high = (mid, high) if tail > 0.05 else (low, mid)
    return high


def calibration_rows() -> list[list[str]]:
    """One row per calibration probe (module docstring): no method ran, so no difference."""
    if not CALIBRATION.is_file():
        return []
    where = CALIBRATION.relative_to(ROOT).as_posix()
    out = []
    for probe in json.loads(CALIBRATION.read_text(encoding="utf-8"))["probes"]:
        k, n = probe["successes"], probe["trials"]
        seen = f"{probe.get('state', 'untrained')}: {probe['event']} {k} of {n}"
        if "needed" in probe and k / n >= probe["needed"]:  # the event a comparison needs is common enough
            verdict = f"calibrated ({k / n:.0%} ≥ {probe['needed']:.0%})"
        else:
            verdict = f"null by calibration (rate ≤ {upper_bound_95(k, n):.1%})"
        out.append([f"[{probe['team']}]({where})", "any", "—", seen, "—", "—", verdict])
    return out


def planned_seeds(path: Path, result: dict[str, Any]) -> int:
    """The paired seeds a stored comparison is planned to hold: a replication's range
    (``--replicate FIRST-LAST``), else a cooperation setting's default size (its sittings add seeds
    until then, ``benchmarks.cooperation --seeds N``); an arena comparison is whole as stored."""
    replicated = replicated_seeds(result)
    if replicated:
        return len(replicated)
    if path.parent == COOPERATION_RESULTS and result.get("size", "default") == "default" \
            and result["setting"] in COOPERATION_SIZES and "--rerun" not in result.get("command", ""):
        return COOPERATION_SIZES[result["setting"]]["default"][4]
    return 0


def replicated_seeds(result: dict[str, Any]) -> range | None:
    """The seeds a replication was planned on (its command's ``--replicate FIRST-LAST``), else None."""
    found = re.search(r"--replicate (\d+)-(\d+)", result.get("command", ""))
    return range(int(found[1]), int(found[2]) + 1) if found else None


def first_sitting(path: Path) -> Path | None:
    """The comparison a replication file trained again (``S-replication.json`` -> ``S.json``)."""
    if not path.stem.endswith(f"-{REPLICATION}"):
        return None
    first = path.with_name(path.stem.removesuffix(f"-{REPLICATION}") + ".json")
    return first if first.is_file() else None


def comparison_row(name: str, label: str, result: dict[str, Any]) -> list[str]:
    """One table row: ``label`` against grpo in ``result`` (its seeds paired), with its reading."""
    floor = mean_ci(list(_values(result, "grpo", GAIN).values()))
    mine, base = _values(result, label, ACCURACY), _values(result, "grpo", ACCURACY)
    diffs = [mine[s] - base[s] for s in sorted(set(mine) & set(base))]
    mean, half, n = paired_difference(mine, base)
    p, power = sign_flip_p(diffs), mde(diffs)
    return [name, label, str(n), _cell(*floor, signed=True), _cell(mean, half, signed=True), _p(p),
            reading(floor, (mean, half), p, power, mean_steps(result, label), diffs)]


def pooled(first: dict[str, Any], again: dict[str, Any]) -> dict[str, Any]:
    """Both sittings' per-seed results as one comparison (their seeds are disjoint)."""
    held = seeds_held(first) & seeds_held(again)
    if held:
        raise ValueError(f"a replication must use new seeds; both sittings hold {sorted(held)}")
    return {**again, "per_seed": {label: {**first["per_seed"].get(label, {}), **seeds}
                                  for label, seeds in again["per_seed"].items()}}


def rows(superseded: bool = True) -> list[list[str]]:
    """One row per (stored comparison, method other than grpo), then the calibration rows;
    ``superseded=False`` leaves out the comparisons in ``SUPERSEDED`` and ``AUDIT_CONTROLS``."""
    out = []
    for path, result in stored_results():
        if not superseded and ((path.parent == ARENA_RESULTS and path.stem in SUPERSEDED)
                               or (path.parent == COOPERATION_RESULTS and path.stem in AUDIT_CONTROLS)):
            continue
        setting = result["setting"]
        where = path.relative_to(ROOT).as_posix()
        names = COOPERATION_TEAMS if path.parent == COOPERATION_RESULTS and setting in COOPERATION_TEAMS else TEAMS
        held, planned = len(seeds_held(result)), planned_seeds(path, result)
        if held < planned:  # a comparison split over sittings, not finished: no reading yet
            out.append([f"[{names.get(setting, setting)}]({where})", "all", str(held), "—", "—", "—",
                        f"in progress: {held} of {planned} paired seeds stored"])
            continue
        if first_sitting(path) is not None:  # read right after the comparison it trained again
            continue
        name = names.get(setting, setting)
        mine = {label: comparison_row(f"[{name}]({where})", label, result)
                for label in sorted(result["per_seed"]) if label != "grpo"}
        out += mine.values()
        again = path.with_name(f"{path.stem}-{REPLICATION}.json")
        if path.parent == COOPERATION_RESULTS and again.is_file():
            out += replication_rows(name, again, load_result(again), result, mine)
    return out


def mean_difference(result: dict[str, Any], label: str) -> float:
    """The mean over paired seeds of ``label``'s held-out accuracy minus grpo's."""
    return paired_difference(_values(result, label, ACCURACY), _values(result, "grpo", ACCURACY))[0]


def replication_rows(name: str, path: Path, result: dict[str, Any], first: dict[str, Any],
                     first_rows: dict[str, list[str]]) -> list[list[str]]:
    """A replication's rows (``--replicate``, stored at ``path`` as ``result``): per method, its own
    comparison, then both sittings pooled, read with whether the first sitting (``first``, whose
    rows by method are ``first_rows``) held (the replication alone *paid* again), was not confirmed
    (the same sign, but the new seeds alone do not settle it) or did not hold; where the first was
    not paid, whether the new seeds settle it alone."""
    where, seeds = path.relative_to(ROOT).as_posix(), replicated_seeds(result)
    out = []
    for label in sorted(result["per_seed"]):
        if label == "grpo":
            continue
        alone = comparison_row(f"[{name}, new seeds {seeds.start}-{seeds[-1]}]({where})", label, result)
        both = comparison_row(f"[{name}, both pooled]({where})", label, pooled(first, result))
        paid_again = alone[-1] == "**paid**"
        if first_rows[label][-1] != "**paid**":  # nothing to hold: did the new seeds settle it?
            both[-1] += "; new seeds " + ("settle it alone" if paid_again else "do not settle it alone")
        else:
            same_sign = mean_difference(first, label) * mean_difference(result, label) > 0
            both[-1] += "; first sitting " + ("held" if paid_again else
                                              "not confirmed (same sign)" if same_sign else "did not hold")
        out += [alone, both]
    return out


def table(links: bool = True) -> str:
    """The markdown table; ``links=True`` (the README) links each row's file and leaves out the
    superseded sittings, ``links=False`` (the docs page) names the files without linking them (the
    docs site holds no repository files, and its strict build refuses a link outside it)."""
    header = ["setting (its seeds)", "method", "seeds", "floor: grpo's gain", "method - grpo (paired t)",
              "exact p", "reading"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows(superseded=not links) + calibration_rows():
        if not links:
            row[0] = re.sub(r"\[([^]]+)\]\(([^)]+)\)", r"\1 (`\2`)", row[0])
        lines.append("| " + " | ".join(row).replace(" (n=1)", "") + " |")
    return "\n".join(lines)


def replace_in(text: str, body: str, region: str = REGION) -> str:
    """``text`` with the body between ``<!-- region:start -->`` and ``<!-- region:end -->`` replaced
    (by default the ``credit_paid`` region; the region must exist)."""
    start, end = f"<!-- {region}:start -->", f"<!-- {region}:end -->"
    if start not in text or end not in text:
        raise ValueError(f"no {region} region (markers {start} ... {end})")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def main(argv: Sequence[str] | None = None) -> None:
    from teamplay.atomic import write_atomically

    for path, links in ((README, True), (DOCS_PAGE, False)):
        write_atomically(path, replace_in(path.read_text(encoding="utf-8"), table(links)))
        print(f"updated {path.name}")


if __name__ == "__main__":
    main()
