"""Preemption of ``teamplay federate`` (``teamplay.federated.server``, ``teamplay.training.run.preemption``):
SIGTERM or SIGINT abandons the round under way at its next safe point (a round past its held-out
evaluation ends first); the run stops with one ``warning:`` line and exit status 75, its last
completed round checkpointed, and ``--resume auto`` then logs the same rounds (all but timing fields)
and ends with the same adapters as a run never interrupted. A second signal stops at once (143)
and leaves the previous checkpoint intact.

The command runs for real (config, validation, the launcher's handlers, the server, each site's
``handle_train``); only Flower's simulation engine is replaced, by ``tests.federated.fakes.FakeGrid``
in this process, so a hook can signal this process at an exact moment: while a site trains, as the
server's held-out evaluation starts, while a checkpoint is written. The run: 2 sites, 2 rounds,
held-out evaluation before the first round and after each. One slow test signals a real
``teamplay federate`` in Flower's simulation engine (the server in a thread of Flower's, Ray).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from teamplay.agents.team_model import TeamModel
from teamplay.federated import client as client_module
from teamplay.federated import run as run_module
from teamplay.federated.server import FederatedServer
from teamplay.training.run.preemption import active_preemption
from teamplay.training.store.checkpoint import list_checkpoints
from tests.federated.fakes import FakeGrid, log_of, real_sites, tiny_config
from tests.reliability.helpers import adapter_tensors, invoke, signal_on_call, signal_when, warning_line

ROOT = Path(__file__).resolve().parents[2]


def fake_flower(patch: pytest.MonkeyPatch) -> None:
    """``run_federated`` with ``FakeGrid`` in this process instead of Flower's simulation engine,
    and the identity Flower's runtime would set (``Message()`` reads it)."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        patch.setattr(TaskIdentity, name, value)

    def simulate(server: FederatedServer, fed) -> None:
        server.run(FakeGrid(fed.clients, real_sites(Path(server.cfg.output_dir) / "sites")))

    patch.setattr(run_module, "_simulate", simulate)


def write_config(folder: Path, rounds: int = 2) -> Path:
    data = tiny_config(folder, clients=2, rounds=rounds)
    data["eval_task"] = {"name": "arith", "split": "test", "limit": 1}
    data["eval_sampling"] = {"max_new_tokens": 3}
    path = folder / "fed.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


#: fields of federated.jsonl that measure time, at any depth (the round's and its evaluation's)
TIMING = {"seconds", "tokens_per_second"}


def without_timing(data):
    if isinstance(data, dict):
        return {k: without_timing(v) for k, v in data.items() if k not in TIMING}
    return [without_timing(v) for v in data] if isinstance(data, list) else data


def numbers(run: Path) -> tuple[list[dict], dict[str, np.ndarray]]:
    """The run's rounds (without timing fields) and its final adapters."""
    latest = list_checkpoints(run)[-1]
    return without_timing(log_of(run)), {k: v.numpy() for k, v in adapter_tensors(latest).items()}


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    folder = tmp_path_factory.mktemp("straight")
    with pytest.MonkeyPatch.context() as patch:
        fake_flower(patch)
        result = invoke("federate", "--config", write_config(folder))
    assert result.exit_code == 0, result.output
    return numbers(folder / "run")






class Case(NamedTuple):
    """Where the signal comes, and what the stopped run leaves."""

    #: (owner, name, call, *signals): on the call-th call of owner.name (counted from the run's
    #: start: train_site 1-2 are round 1's sites, 3-4 round 2's; _evaluate 1 is before round 1, 2
    #: and 3 after rounds 1 and 2; save_adapters: in each round the 2 sites' checkpoints, then the
    #: server's, so call 3n is round n's server checkpoint)
    hook: tuple
    status: int
    line: str  #: the one warning line (its start, for a second signal)
    checkpoint: int | None  #: the latest checkpoint's round
    logged: list[int]  #: the rounds in federated.jsonl
    evaluations: int  #: held-out evaluations started (the round-0 one included)


CASES = {
    "a site trains in round 1": Case(
        (client_module, "train_site", 1, signal.SIGTERM), 75,
        "warning: preempted by SIGTERM before round 1 finished; no checkpoint written yet; resume with --resume "
        "auto", None, [0], 1),
    "a site trains in round 2": Case(  # abandoned once the replies are in: round 2 is not evaluated
        (client_module, "train_site", 3, signal.SIGTERM), 75,
        "warning: preempted by SIGTERM after round 1; checkpoint step-000001 written; resume with --resume auto",
        1, [0, 1], 2),
    "round 2's evaluation starts": Case(  # aggregated already, abandoned all the same
        (FederatedServer, "_evaluate", 3, signal.SIGINT), 75,
        "warning: preempted by SIGINT after round 1; checkpoint step-000001 written; resume with --resume auto",
        1, [0, 1], 3),
    "round 2's checkpoint is written": Case(  # past its evaluation: the round ends, and the run stops
        (TeamModel, "save_adapters", 6, signal.SIGTERM), 75,
        "warning: preempted by SIGTERM after round 2; checkpoint step-000002 written; resume with --resume auto",
        2, [0, 1, 2], 3),
    "two signals while round 2's checkpoint is written": Case(  # its line is logged; resume drops it
        (TeamModel, "save_adapters", 6, signal.SIGTERM, signal.SIGTERM), 128 + signal.SIGTERM,
        "warning: second SIGTERM: stopped at once (a checkpoint being written is abandoned); the checkpoints "
        "written before are intact", 1, [0, 1, 2], 3),
}


@pytest.mark.parametrize("name", CASES)
def test_a_signal_stops_the_run_cleanly_and_resume_matches_a_straight_run(tmp_path, monkeypatch, straight, name):
    case = CASES[name]
    fake_flower(monkeypatch)
    config = write_config(tmp_path)
    run = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        evaluations = []
        real_evaluate = FederatedServer._evaluate
        patch.setattr(FederatedServer, "_evaluate", lambda self: (evaluations.append(1), real_evaluate(self))[1])
        signal_on_call(patch, *case.hook)
        result = invoke("federate", "--config", config)
    assert result.exit_code == case.status, result.output
    assert warning_line(result.output).startswith(case.line)
    assert active_preemption() is None  # the handlers of before the run are back
    assert [p.name for p in list_checkpoints(run)][-1:] == ([f"step-{case.checkpoint:06d}"] if case.checkpoint else [])
    assert [r["round"] for r in log_of(run)] == case.logged
    assert len(evaluations) == case.evaluations
    if case.status != 75:  # the checkpoint being written was abandoned: its staging folder is gone with it
        assert not [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".tmp-")]

    done = invoke("federate", "--config", config, "--resume", "auto")
    assert done.exit_code == 0, done.output
    assert not [x for x in done.output.splitlines() if x.startswith(("warning:", "error:"))], done.output
    rounds, adapters = numbers(run)
    want_rounds, want_adapters = straight
    assert rounds == want_rounds
    assert adapters.keys() == want_adapters.keys()
    for key, value in want_adapters.items():
        # exact: resumed and straight runs: the same ops, same kernels, one machine
        np.testing.assert_array_equal(adapters[key], value, err_msg=key)
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]


@pytest.mark.slow  # Flower's simulation engine starts a Ray cluster: tens of seconds, twice
def test_sigterm_stops_a_simulated_federation_cleanly(tmp_path):
    config = write_config(tmp_path, rounds=3)
    run = tmp_path / "run"
    # a new session, so that a failure below can end the Ray processes too; the signal goes to the
    # launcher alone, as a container runtime sends it
    proc = subprocess.Popen([sys.executable, "-m", "teamplay.cli", "federate", "--config", str(config)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = signal_when(proc, (run / "checkpoints" / "step-000001").is_dir, "round 1 finished", poll=0.1,
                         wait=120, group=True)
    assert proc.returncode == 75, stderr[-3000:]
    found = re.fullmatch(r"warning: preempted by SIGTERM after round ([12]); checkpoint step-00000([12]) written; "
                         r"resume with --resume auto", warning_line(stderr))
    assert found and found[1] == found[2], stderr[-3000:]
    done = int(found[1])
    assert list_checkpoints(run)[-1].name == f"step-{done:06d}"
    assert [r["round"] for r in log_of(run)] == list(range(done + 1))
    resumed = invoke("federate", "--config", config, "--resume", "auto")
    assert resumed.exit_code == 0, resumed.output
    assert [r["round"] for r in log_of(run)] == [0, 1, 2, 3]
    assert all(s["site_step"] == 3 for s in log_of(run)[3]["sites"].values())
