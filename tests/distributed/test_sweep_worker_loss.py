"""A parallel sweep whose Ray worker dies under a run: the run starts again from its latest
checkpoint once; a second death stops the sweep with one line, the finished runs kept.

Ray is replaced by a stand-in that hands out task references and, for the runs named in
``deaths``, answers ``get`` with Ray's own ``WorkerCrashedError`` (what ``ray.get`` raises when the
kernel kills the task's process): no cluster starts and no model trains, so the scheduling loop is
tested alone."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from teamplay.distributed import sweep as parallel
from teamplay.errors import TeamplayError
from teamplay.training.experiments.sweep import is_done, plan
from tests.training.test_sweep import sweep_config

ray = pytest.importorskip("ray")


class StandInRay:
    """Ray's calls the sweep driver makes; ``deaths[run folder name]`` workers die before that run's
    task returns. ``submitted`` lists (run folder name, resume) in submission order."""

    exceptions = ray.exceptions

    def __init__(self, deaths: dict[str, int], checkpoint_before_death: bool) -> None:
        self.deaths = dict(deaths)
        self.checkpoint_before_death = checkpoint_before_death
        self.submitted: list[tuple[str, str | None]] = []
        self._tasks: dict[object, str] = {}

    def remote(self, **_options):
        return lambda _fn: SimpleNamespace(remote=self._submit)

    def _submit(self, config: dict, resume: str | None, _threads: int, _stop_file: str) -> object:
        ref = object()
        self._tasks[ref] = config["output_dir"]
        self.submitted.append((Path(config["output_dir"]).name, resume))
        return ref

    def wait(self, refs: list, num_returns: int, timeout: float):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref: object) -> str:
        run_dir = Path(self._tasks[ref])
        if self.deaths.get(run_dir.name, 0) > 0:
            self.deaths[run_dir.name] -= 1
            if self.checkpoint_before_death:  # the run got past a checkpoint before its worker died
                (run_dir / "checkpoints" / "step-000001").mkdir(parents=True, exist_ok=True)
            raise ray.exceptions.WorkerCrashedError()
        run_dir.mkdir(parents=True, exist_ok=True)
        return str(run_dir)

    def cancel(self, ref: object, force: bool) -> None:
        pass


def stand_in_sweep(tmp_path: Path, monkeypatch, deaths: dict[int, int], checkpoint_before_death: bool):
    """A two-run sweep (seeds 0 and 1) on the stand-in; ``deaths`` by run index."""
    base = yaml.safe_load(sweep_config(tmp_path).read_text())
    sweep = plan(tmp_path / "sweep", base, {}, [0, 1])
    stand_in = StandInRay({sweep.runs[i].name: n for i, n in deaths.items()}, checkpoint_before_death)
    monkeypatch.setattr(parallel, "import_ray", lambda: stand_in)
    monkeypatch.setattr(parallel, "connect", lambda _config: False)
    monkeypatch.setattr(parallel, "finish_run", lambda sw, run: (sw.run_dir(run) / "done.json").write_text(
        json.dumps({"name": run.name})))
    return sweep, stand_in


@pytest.mark.parametrize(("checkpoint_before_death", "resume"), [(True, "auto"), (False, None)])
def test_a_run_whose_worker_died_once_starts_again_from_its_checkpoint(tmp_path, monkeypatch,
                                                                      checkpoint_before_death, resume):
    sweep, stand_in = stand_in_sweep(tmp_path, monkeypatch, {0: 1}, checkpoint_before_death)
    statuses: list[tuple[str, str]] = []
    trained = parallel.run_sweep_parallel(sweep, parallel=1, on_run=lambda run, s: statuses.append((run.name, s)))
    first, second = (run.name for run in sweep.runs)
    # submitted: the first run, again after its worker died (from the checkpoint it left, if any),
    # then the second
    assert stand_in.submitted == [(first, None), (first, resume), (second, None)]
    assert statuses[-1] == (first, "resume" if checkpoint_before_death else "start")
    assert [run.name for run in trained] == [first, second]
    assert all(is_done(sweep, run) for run in sweep.runs)


def test_a_run_whose_worker_dies_twice_stops_the_sweep_with_one_line(tmp_path, monkeypatch):
    sweep, stand_in = stand_in_sweep(tmp_path, monkeypatch, {1: 2}, checkpoint_before_death=True)
    with pytest.raises(TeamplayError) as caught:
        parallel.run_sweep_parallel(sweep, parallel=1)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"sweep run {sweep.runs[1].name}: its worker process died 2 times (WorkerCrashedError)")
    assert "run the same teamplay sweep command again" in message
    assert is_done(sweep, sweep.runs[0]) and not is_done(sweep, sweep.runs[1])  # the finished run is kept
    assert (sweep.run_dir(sweep.runs[1]) / "checkpoints" / "step-000001").is_dir()  # and the checkpoint
