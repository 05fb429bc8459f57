"""Same seed, same numbers: a short single-process run, a short distributed run (Ray, 2 rollout
workers) and a short federated run (Flower, 2 sites x 2 rounds) give the metrics and adapters the
code before the run-shell redesign gave.

The fixture (``before_redesign/*.json``) was recorded from commit 0800a82, the last commit before
the redesign that composed ``Trainer`` from a Runner and a Learner (``make_trainer``), replaced
``DistributedTrainer(Trainer)`` and made a federated site's round one ``Trainer.train`` call. The
redesign was meant to move code, not to change a number; a difference here is a change of
behaviour, to explain (and then re-record) or to fix. ``record.py`` runs the three runs through
the command line only, with config fields both codebases accept; ``fractional_task.py`` gives the
tiny model's episodes unequal rewards, so every step updates.

Re-record (from the repository root; ``OLD`` is any folder outside the repository)::

    git worktree add --detach OLD 0800a82
    (cd OLD && PYTHONPATH=$PWD OMP_NUM_THREADS=1 "$OLDPWD/.venv/bin/python" \\
        "$OLDPWD/tests/equivalence/record.py" "$OLDPWD/tests/equivalence/before_redesign")
    git worktree remove --force OLD

The recorder prints which ``teamplay`` its subprocesses ran (it must be ``OLD``'s).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.equivalence.record import record

FIXTURE = Path(__file__).with_name("before_redesign")

#: Floats agree to 1e-5 relative or 1e-6 absolute, not bit for bit: the fixture was recorded on
#: one CPU, and another one (other SIMD kernels in torch's matmuls and reductions) may round the
#: last bits of a float32 sum differently; two steps of a tiny model do not amplify that beyond
#: these bounds. Integers, strings, booleans and None must be equal.
REL, ABS = 1e-5, 1e-6

#: keys (at any depth) that today's code logs and the code of 0800a82 did not, with the reason
#: each is allowed; any other key found on one side only is a failure
ADDED_SINCE: dict[str, str] = {}


def differences(before: Any, now: Any, where: str = "") -> list[str]:
    """Every place where ``now`` differs from ``before``: ``where: what``."""
    if isinstance(before, dict) and isinstance(now, dict):
        out = [f"{where}.{k}: only in the fixture" for k in before if k not in now]
        out += [f"{where}.{k}: only in today's output" for k in now if k not in before and k not in ADDED_SINCE]
        for k in before.keys() & now.keys():
            out += differences(before[k], now[k], f"{where}.{k}")
        return out
    if isinstance(before, list) and isinstance(now, list):
        if len(before) != len(now):
            return [f"{where}: {len(before)} entries in the fixture, {len(now)} today"]
        return [d for k, (b, n) in enumerate(zip(before, now, strict=True))
                for d in differences(b, n, f"{where}[{k}]")]
    floats = isinstance(before, float) or isinstance(now, float)
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (before, now))
    if floats and numbers:
        same = math.isclose(before, now, rel_tol=REL, abs_tol=ABS)
    else:
        same = type(before) is type(now) and before == now
    return [] if same else [f"{where}: {before!r} in the fixture, {now!r} today"]


def compare(name: str, tmp_path: Path) -> None:
    before = json.loads((FIXTURE / f"{name}.json").read_text())
    now = record(name, tmp_path)
    # the recorder's run is still the recorded one (if not: re-record, see the module docstring)
    assert (now["command"], now["config"]) == (before["command"], before["config"])
    problems = []
    # the lines both logs have, each named by its step or round; a missing or extra line is one problem
    for k, (old_line, new_line) in enumerate(zip(before["log"], now["log"], strict=False)):
        at = f"step {old_line['step']}" if "step" in old_line else f"round {old_line.get('round')}"
        problems += differences(old_line, new_line, f"log line {k} ({at})")
    if len(before["log"]) != len(now["log"]):
        problems.append(f"log: {len(before['log'])} lines in the fixture, {len(now['log'])} today")
    problems += differences(before["adapters"], now["adapters"], "final adapters")
    assert not problems, f"{name}: {len(problems)} differences from 0800a82:\n" + "\n".join(problems)


def test_differences_names_each_changed_missing_and_new_field():
    before = {"step": 1, "loss": 0.5, "heldout": {"team_accuracy": 0.25}, "gone": True, "ids": [1, 2]}
    now = {"step": 1, "loss": 0.5 * (1 + 2 * REL), "heldout": {"team_accuracy": 0.25 + 0.5 * ABS},
           "new": 0, "ids": [1, 3]}
    assert sorted(differences(before, now)) == [
        ".gone: only in the fixture", ".ids[1]: 2 in the fixture, 3 today",
        f".loss: 0.5 in the fixture, {now['loss']!r} today", ".new: only in today's output"]
    assert differences({"n": 1}, {"n": 1.0}) == [] and differences({"n": 1}, {"n": True}) != []


@pytest.mark.slow  # a teamplay train subprocess
def test_single_process_run_gives_the_numbers_of_before(tmp_path):
    compare("single", tmp_path)


@pytest.mark.slow  # a teamplay train subprocess that starts a Ray cluster
def test_distributed_run_gives_the_numbers_of_before(tmp_path):
    pytest.importorskip("ray")
    compare("distributed", tmp_path)


@pytest.mark.slow  # a teamplay federate subprocess that runs Flower's simulation on Ray
def test_federated_run_gives_the_numbers_of_before(tmp_path):
    pytest.importorskip("flwr")
    compare("federated", tmp_path)
