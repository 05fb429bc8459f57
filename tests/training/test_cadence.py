"""The rules of one ``train`` call's rhythm (``teamplay.training.run.trainer.Cadence``), alone."""

from __future__ import annotations

from teamplay.training.run.trainer import Cadence


def test_another_step_until_the_run_is_finished_or_the_call_took_its_limit():
    assert Cadence(None, 5, None, True).another_step(100, finished=False)
    assert not Cadence(None, 5, None, True).another_step(0, finished=True)
    assert Cadence(None, 5, 2, True).another_step(1, finished=False)
    assert not Cadence(None, 5, 2, True).another_step(2, finished=False)


def test_evaluates_every_eval_every_steps_but_not_a_step_that_ends_the_run():
    cadence = Cadence(eval_every=3, checkpoint_every=5, limit=None, held_out=True)
    assert [s for s in range(1, 10) if cadence.evaluates(s, ends_run=False)] == [3, 6, 9]
    assert not cadence.evaluates(6, ends_run=True)  # the final evaluation (or the error) takes its place
    assert not Cadence(3, 5, None, held_out=False).evaluates(3, ends_run=False)  # no held-out problems
    assert not Cadence(None, 5, None, True).evaluates(3, ends_run=False)


def test_the_call_ends_with_its_own_save_and_checkpoints_periodically_before():
    cadence = Cadence(eval_every=None, checkpoint_every=2, limit=3, held_out=False)
    # steps 5, 6, 7 of a resumed run, the call's 1st, 2nd and 3rd: 6 periodic, 7 ends the call
    assert [cadence.checkpoint(s, t, finished=False) for s, t in [(5, 1), (6, 2), (7, 3)]] == [
        None, "periodic", "call"]
    assert Cadence(None, 2, None, False).checkpoint(5, 5, finished=True) == "call"  # the run's last step
