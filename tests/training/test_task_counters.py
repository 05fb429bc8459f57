"""A task's running counters (MATH: its verifier's missed deadlines) are logged with every step."""

from __future__ import annotations

from tests.training.fixtures import ConstantTask
from tests.training.test_trainer import LETTERS, make_trainer


class CountingTask(ConstantTask):
    """A constant task whose counter goes up by one each time the run reads it."""

    reads = 0

    def counters(self) -> dict[str, int]:
        self.reads += 1
        return {"verifier_deadlines_missed": self.reads * 10}


def test_each_step_logs_the_tasks_counters(tmp_path):
    history = make_trainer(tmp_path, {"steps": 2}, task=CountingTask(LETTERS)).train().history
    assert [h["verifier_deadlines_missed"] for h in history] == [10, 20]
