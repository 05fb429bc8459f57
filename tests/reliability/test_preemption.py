"""Preemption (``teamplay.training.run.preemption``): SIGTERM or SIGINT stops ``teamplay train`` and a
sequential ``teamplay sweep`` at the next safe point, with a checkpoint of the last completed step,
one ``warning:`` line, exit status 75 and the run lock released; ``--resume auto`` then reaches the
metrics, episodes and adapters of a run never interrupted. A second signal stops at once (128 + N)
and leaves the previous checkpoint intact.

The run: 4 steps, held-out evaluation at step 3 and before and after training, checkpoints only at
step 4 (``checkpoint_every: 4``), so every other checkpoint a test finds was written by the stop.
Signals come from outside (a ``teamplay train`` subprocess, signalled once its metrics show step
1) or, for an exact moment, from a hook in this process that signals it (during an evaluation,
during a checkpoint write).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from teamplay.training.experiments.sweep import parse_grid, plan, run_sweep
from teamplay.training.run import held_out
from teamplay.training.run import trainer as trainer_module
from teamplay.training.run.preemption import (
    SIGNALS,
    UNLOGGED_STEP,
    Interrupted,
    Preempted,
    preemption_handlers,
)
from teamplay.training.store import checkpoint
from teamplay.training.store.checkpoint import list_checkpoints, load_checkpoint, verify_checkpoint
from teamplay.training.store.run_folder import RunLock
from tests.reliability.helpers import (
    EVEN_TASK,
    adapter_tensors,
    invoke,
    signal_on_call,
    signal_when,
    slow_train_script,
    warning_line,
)
from tests.tiny import tiny_train_config

REPO = Path(__file__).resolve().parents[2]


#: ``teamplay train`` (the CLI of this checkout), each step starting a second late: a signal sent
#: once step 1 is logged arrives during step 2 (which is finished), rarely just before it
SLOW_START = slow_train_script(REPO, """
    import torch
    torch.set_num_threads(1)  # as the in-process runs it is compared with (one_torch_thread)
""")


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Every run of this module, in-process or in a subprocess, on one torch thread: float results
    depend on the thread count, and another test of the session may have changed this process's."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def make_config(tmp_path_factory, tiny_model):
    """``make_config(run)``: the config file of a 4-step run into ``run``."""
    folder = tmp_path_factory.mktemp("preempt")
    plugin = folder / "even_task.py"  # one file: a task path is imported once per process
    plugin.write_text(EVEN_TASK)

    def make(run: Path) -> Path:
        path = run.parent / f"{run.name}.yaml"
        path.write_text(json.dumps(tiny_train_config(  # JSON is YAML
            tiny_model, run, task_name=f"{plugin}:EvenTask", lora_r=2, problems_per_step=2, group_size=4,
            max_new_tokens=2, eval_task={"name": f"{plugin}:EvenTask", "split": "test", "limit": 2},
            eval_sampling={"max_new_tokens": 2}, optim={"lr": 0.05},
            steps=4, eval_every=3, checkpoint_every=4, keep_checkpoints=5)))
        return path

    return make


def numbers(run: Path) -> tuple[list, list, dict[str, torch.Tensor]]:
    """What a run computed: metrics.jsonl and episodes.jsonl lines without wall times, and the
    adapters of its last checkpoint."""
    def lines(name: str) -> list:
        return [_no_times(json.loads(line)) for line in (run / name).read_text().splitlines()]
    return lines("metrics.jsonl"), lines("episodes.jsonl"), adapter_tensors(list_checkpoints(run)[-1])


def _no_times(value):
    if isinstance(value, dict):
        return {k: _no_times(v) for k, v in value.items() if "seconds" not in k and "per_second" not in k}
    return [_no_times(v) for v in value] if isinstance(value, list) else value


@pytest.fixture(scope="module")
def straight(tmp_path_factory, make_config):
    """The numbers of the run never interrupted."""
    run = tmp_path_factory.mktemp("straight") / "run"
    result = invoke("train", "--config", make_config(run))
    assert result.exit_code == 0, result.output
    metrics, _, adapters = found = numbers(run)
    assert [m["step"] for m in metrics] == [0, 1, 2, 3, 4, 4] and "heldout" in metrics[3]
    assert sum(m.get("optimizer_steps", 0) for m in metrics) > 0  # it learned: the comparison means something
    assert any(bool(v.any()) for k, v in adapters.items() if "lora_B" in k)
    return found


def resume_matches(run: Path, config: Path, straight) -> None:
    result = invoke("train", "--config", config, "--resume", "auto")
    assert result.exit_code == 0, result.output
    assert not [line for line in result.output.splitlines() if line.startswith(("warning:", "error:"))]
    metrics, episodes, adapters = numbers(run)
    want_metrics, want_episodes, want_adapters = straight
    assert metrics == want_metrics
    assert episodes == want_episodes
    assert adapters.keys() == want_adapters.keys()
    # exact: resumed and straight runs: the same ops, same kernels, one machine
    assert all(torch.equal(adapters[k], want_adapters[k]) for k in adapters)




def assert_unlocked(run: Path) -> None:
    RunLock(run).acquire().release()  # raises RunFolderError while a trainer holds it


def assert_latest_checkpoint(run: Path, step: int) -> None:
    latest = list_checkpoints(run)[-1]
    verify_checkpoint(latest)
    assert latest.name == f"step-{step:06d}" and load_checkpoint(latest).state.step == step




@pytest.mark.slow  # a `teamplay train` subprocess: about 15 s of it is starting Python and torch
def test_sigterm_after_a_step_checkpoints_it_and_resume_matches_a_straight_run(tmp_path, make_config, straight):
    run = tmp_path / "run"
    config = make_config(run)
    proc = subprocess.Popen([sys.executable, "-c", SLOW_START, "train", "--config",
                             str(config)], env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = run / "metrics.jsonl"
    stderr = signal_when(proc, lambda: metrics.is_file() and '"step": 1' in metrics.read_text(), "step 1 logged")
    assert proc.returncode == 75, stderr[-3000:]
    line = warning_line(stderr)
    found = re.fullmatch(r"warning: preempted by SIGTERM after step ([12]); checkpoint (step-00000[12]) written; "
                         r"resume with --resume auto", line)
    assert found, line
    step = int(found[1])
    assert found[2] == f"step-{step:06d}"
    assert_latest_checkpoint(run, step)  # written by the stop: checkpoint_every is 4
    assert len(list_checkpoints(run)) == 1
    assert_unlocked(run)
    resume_matches(run, config, straight)


@pytest.mark.parametrize("sig, call, step", [
    (signal.SIGTERM, 2, 3),  # the evaluation of step 3: abandoned, repeated by the resumed run
    (signal.SIGINT, 3, 4),   # the evaluation after training: abandoned, the resumed run only evaluates
])
def test_a_signal_during_evaluation_abandons_it_and_resume_matches(tmp_path, make_config, straight, monkeypatch,
                                                                   sig, call, step):
    run = tmp_path / "run"
    config = make_config(run)
    generated_while_evaluating = []
    real_evaluate = held_out.evaluate

    def evaluate(runner, *args, **kwargs):  # counts the generate calls the evaluation makes
        backend = runner.backend
        runner.backend = type("Counting", (), {
            "name": backend.name,
            "generate": lambda self, *a: (generated_while_evaluating.append(1), backend.generate(*a))[1]})()
        return real_evaluate(runner, *args, **kwargs)

    monkeypatch.setattr(held_out, "evaluate", evaluate)
    signal_on_call(monkeypatch, held_out, "evaluate", call, sig)  # 1: before training, 2: step 3, 3: after
    result = invoke("train", "--config", config)
    assert result.exit_code == 75, result.output
    name = signal.Signals(sig).name
    assert warning_line(result.output) == (f"warning: preempted by {name} after step {step}; checkpoint "
                                           f"step-{step:06d} written; resume with --resume auto")
    assert len(generated_while_evaluating) == call - 1  # abandoned before its first turn
    assert_latest_checkpoint(run, step)
    assert_unlocked(run)
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in logged] == list(range(step)) + ([4] if step == 4 else [])
    assert not any("heldout_final" in m for m in logged)
    extra = load_checkpoint(list_checkpoints(run)[-1]).extra
    assert (UNLOGGED_STEP in extra) == (step == 3)  # step 3's lines wait in its checkpoint
    monkeypatch.undo()
    if step == 3:  # a resume that dies after writing step 3's lines, before a checkpoint: not logged twice
        monkeypatch.setattr(trainer_module.Trainer, "step", crash)
        assert invoke("train", "--config", config, "--resume", "auto").exit_code == 130
        assert '"step": 3' in (run / "metrics.jsonl").read_text()
        monkeypatch.undo()
    resume_matches(run, config, straight)


def crash(self):
    raise KeyboardInterrupt  # as a crash: no clean stop, no checkpoint


def test_a_signal_during_a_checkpoint_write_lets_it_finish(tmp_path, make_config, straight, monkeypatch):
    run = tmp_path / "run"
    config = make_config(run)
    signal_on_call(monkeypatch, checkpoint, "save_file", 1, signal.SIGTERM)  # the checkpoint of step 4
    result = invoke("train", "--config", config)
    assert result.exit_code == 75, result.output
    assert warning_line(result.output) == ("warning: preempted by SIGTERM after step 4; checkpoint step-000004 "
                                           "written; resume with --resume auto")
    assert_latest_checkpoint(run, 4)
    assert_unlocked(run)
    monkeypatch.undo()
    resume_matches(run, config, straight)  # only the evaluation after training was left


def test_two_signals_stop_at_once_and_keep_the_previous_checkpoint(tmp_path, make_config, straight, monkeypatch):
    run = tmp_path / "run"
    config = make_config(run)
    # checkpoints at steps 2 and 4 (checkpoint_every may change on resume: it changes no number);
    # both signals arrive while step 4's checkpoint is being written
    signal_on_call(monkeypatch, checkpoint, "save_file", 2, signal.SIGTERM, signal.SIGTERM)
    result = invoke("train", "--config", config, "--set", "checkpoint_every=2")
    assert result.exit_code == 128 + signal.SIGTERM, result.output
    assert warning_line(result.output).startswith("warning: second SIGTERM: stopped at once (a checkpoint being "
                                                  "written is abandoned); the checkpoints written before are intact")
    assert [p.name for p in list_checkpoints(run)] == ["step-000002"]
    assert_latest_checkpoint(run, 2)
    assert_unlocked(run)
    monkeypatch.undo()
    resume_matches(run, config, straight)
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]  # the abandoned save


def test_a_sweep_stops_like_a_run_and_continues_when_run_again(tmp_path, make_config, monkeypatch):
    config = make_config(tmp_path / "unused")
    out = tmp_path / "sweep"
    args = ("sweep", "--config", config, "--grid", "optim.lr=0.05", "-o", out, "--steps", 2)
    signal_on_call(monkeypatch, trainer_module.Trainer, "step", 1, signal.SIGTERM)
    result = invoke(*args)
    assert result.exit_code == 75, result.output
    assert warning_line(result.output) == (
        "warning: preempted by SIGTERM after step 1; checkpoint step-000001 written; run optim.lr=0.05__seed0 "
        "stops there; run the same teamplay sweep command again to continue")
    run = out / "runs" / "optim.lr=0.05__seed0"
    assert_latest_checkpoint(run, 1)
    assert_unlocked(run)
    assert not (run / "done.json").exists()
    monkeypatch.undo()
    again = invoke(*args)
    assert again.exit_code == 0, again.output
    assert "optim.lr=0.05__seed0: resuming from its checkpoint" in again.output
    assert (run / "done.json").is_file()
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 2]  # before, each step once, after


def test_a_sweep_stops_before_its_next_run(tmp_path):
    sweep = plan(tmp_path, {"steps": 1}, parse_grid(["optim.lr=0.1,0.2"]), (0,))
    trained = []

    def train(cfg, resume):  # a run that finishes, then the signal comes (writing its results, say)
        trained.append(cfg.optim.lr)
        os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Preempted, match=r"^preempted by SIGTERM before run optim\.lr=0\.2__seed0 started; run the "
                                        r"same teamplay sweep command again to continue$"):
        run_sweep(sweep, train)
    assert trained == [0.1]  # exact: the config value, passed through
    assert (sweep.run_dir(sweep.runs[0]) / "done.json").is_file()


def test_handlers_are_restored_and_a_second_signal_raises_at_once():
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    with preemption_handlers() as preemption:
        assert not preemption.requested
        os.kill(os.getpid(), signal.SIGINT)
        assert preemption.signum == signal.SIGINT
        with preemption_handlers() as nested:  # a trainer inside a sweep reads the sweep's flag
            assert nested is preemption
        with pytest.raises(Interrupted) as stopped:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler raises at the next bytecode, never reaching the end of this
        assert stopped.value.exit_status == 143
        # a third signal would meet the handlers of before
        assert {sig: signal.getsignal(sig) for sig in SIGNALS} == before
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == before

    seen = {}

    def in_a_thread():  # Python lets only the main thread install handlers: none there, no error
        with preemption_handlers() as p:
            seen["handler"], seen["requested"] = signal.getsignal(signal.SIGTERM), p.requested

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == {"handler": before[signal.SIGTERM], "requested": False}
