"""A backend the run built is the run's to close, also when the run fails to start: when a part
built after it raises, ``Trainer`` closes it before the error propagates; a backend passed in by
the caller stays open (``wired_run.WiredRun.owns_backend``, ``WiredRun.closed_on_error``)."""

from __future__ import annotations

import pytest

from teamplay.agents.backends.hf import HFBackend
from teamplay.config import TrainConfig, build_config
from teamplay.envs.protocols import get_protocol
from teamplay.envs.team_env import TeamEnv
from teamplay.training.run.trainer import Trainer
from teamplay.training.wiring import wired_run
from tests.training.fixtures import FirstTokenTask, tiny_team_model


class ClosingBackend(HFBackend):
    """The tiny model's HF backend, counting its ``close`` calls."""

    closes = 0

    def close(self) -> None:
        self.closes += 1
        super().close()


class FailingParts:
    """A ``PartsFactory`` that cannot build its parts (as a cluster that does not start)."""

    driver_backend = None

    def __call__(self, cfg, run, trainable):
        raise RuntimeError("the parts could not be built")


def _start(tmp_path, monkeypatch, pass_backend: bool) -> ClosingBackend:
    """Start a Trainer whose parts fail; the run builds the backend unless ``pass_backend``."""
    task = FirstTokenTask("abcd")
    cfg = build_config(TrainConfig, {"output_dir": str(tmp_path / "run"), "tensorboard": False})
    team = TeamEnv(task, get_protocol("single"), None).team
    tm = tiny_team_model(team)
    backend = ClosingBackend(tm, max_prompt_tokens=1024)
    monkeypatch.setattr(wired_run, "build_backend", lambda *args, **kwargs: backend)
    with pytest.raises(RuntimeError, match="the parts could not be built"):
        Trainer(cfg, team_model=tm, backend=backend if pass_backend else None, task=task,
                items=task.load("train", limit=4), parts=FailingParts())
    return backend


def test_a_backend_the_run_built_is_closed_when_its_parts_fail(tmp_path, monkeypatch):
    assert _start(tmp_path, monkeypatch, pass_backend=False).closes == 1


def test_a_backend_passed_in_stays_open_when_the_parts_fail(tmp_path, monkeypatch):
    assert _start(tmp_path, monkeypatch, pass_backend=True).closes == 0
