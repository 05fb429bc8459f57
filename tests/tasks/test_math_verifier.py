"""MathVerifier: real math_verify answers, a hard deadline with kill, restart and one retry, threads, fork.

No test needs a deadline met by a busy machine: those that need an answer allow ``GENEROUS_S``, and
those that need a missed deadline use a worker that really stops (SIGSTOP) or input that keeps
sympy busy past it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from teamplay.envs.tasks.answers import math_verifier
from teamplay.envs.tasks.answers.math_verifier import _WORKER, MathVerifier
from teamplay.envs.tasks.catalog.math_tasks import MathTask
from teamplay.records import TaskItem


@pytest.fixture
def verifier() -> Iterator[MathVerifier]:
    v = MathVerifier(timeout_s=GENEROUS_S)
    yield v
    v.close()


@pytest.mark.parametrize(("gold", "pred", "equal"), [
    ("\\frac{11}{2}", "5.5", True),
    ("x^2+2x+1", "(x+1)^2", True),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)", True),
    ("\\sqrt{2}/2", "\\frac{1}{\\sqrt{2}}", True),
    ("2", "3", False),
    ("\\frac{1}{2}", "\\frac{1}{3}", False),
    ("(1, 2)", "(2, 1)", False),
])
def test_math_verify_equivalence(verifier: MathVerifier, gold: str, pred: str, equal: bool) -> None:
    assert verifier.equivalent(gold, pred) is equal


@pytest.mark.parametrize("pred", ["", "   ", None, "x" * 1001])
def test_empty_wrong_type_and_overlong_answers_skip_the_worker(verifier: MathVerifier, pred: object) -> None:
    assert verifier.equivalent("1", pred) is False  # type: ignore[arg-type]
    assert verifier.calls == 0


def test_results_are_cached(verifier: MathVerifier) -> None:
    assert verifier.equivalent("\\frac{1}{2}", "0.5")
    assert verifier.equivalent("\\frac{1}{2}", "0.5")
    assert verifier.calls == 1


#: a deadline no check of a warmed-up worker comes near, even on a machine busy with other work:
#: tests that need an answer use it; tests that need a missed deadline freeze the worker for real
GENEROUS_S = 20.0


def _fake_worker(tmp_path: Path, freezes: int) -> Path:
    """A worker script whose first ``freezes`` processes report ready and then never answer (as a
    worker stuck in sympy's C code); later ones are the real worker."""
    script = tmp_path / "frozen_worker.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, runpy, signal, sys
        marks = {str(tmp_path / "starts")!r}
        with open(marks, "a") as f:
            f.write("x")
        if os.path.getsize(marks) > {freezes}:
            runpy.run_path({str(_WORKER)!r}, run_name="__main__")
            sys.exit(0)
        print(json.dumps({{"ready": True}}), flush=True)
        sys.stdin.readline()
        os.kill(os.getpid(), signal.SIGSTOP)
    """), encoding="utf-8")
    return script


def test_a_frozen_worker_is_killed_at_the_deadline_and_replaced(caplog: pytest.LogCaptureFixture) -> None:
    # SIGSTOP makes the worker hang the way sympy does inside C code: no signal handler runs, so the
    # deadline is missed whatever the machine's load; the retry's fresh worker answers
    v = MathVerifier(timeout_s=GENEROUS_S / 4)
    try:
        assert v.equivalent("1", "1.0")
        pid = v.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        with caplog.at_level(logging.WARNING, logger="teamplay.envs.tasks.answers.math_verifier"):
            assert v.equivalent("3", "3.0") is True  # the first attempt missed, the retry answered
        assert v.timeouts == 1 and v.starts == 2
        assert "retrying on a fresh worker" in caplog.text
        with pytest.raises(ProcessLookupError):  # killed and reaped
            os.kill(pid, 0)
        calls = v.calls
        assert v.equivalent("3", "3.0") is True  # the retry's verdict is remembered
        assert v.calls == calls
    finally:
        v.close()


def test_a_first_miss_then_an_answer_gives_the_right_verdict_and_caches_it(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(math_verifier, "_WORKER", _fake_worker(tmp_path, freezes=1))
    v = MathVerifier(timeout_s=GENEROUS_S / 4)
    try:
        assert v.equivalent("\\frac{1}{2}", "0.5") is True
        assert (v.timeouts, v.starts, v.calls) == (1, 2, 2)
        assert v.equivalent("\\frac{1}{2}", "0.5") is True
        assert v.calls == 2  # cached: not asked again
    finally:
        v.close()


def test_two_misses_cache_unequal_and_count_two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    # both workers freeze for real, so a short deadline is missed on any machine
    monkeypatch.setattr(math_verifier, "_WORKER", _fake_worker(tmp_path, freezes=2))
    v = MathVerifier(timeout_s=0.3)
    try:
        with caplog.at_level(logging.WARNING, logger="teamplay.envs.tasks.answers.math_verifier"):
            assert v.equivalent("2", "2.0") is False
        assert (v.timeouts, v.starts, v.calls) == (2, 2, 2)
        assert "again; scoring as wrong" in caplog.text
        assert v.equivalent("2", "2.0") is False  # remembered as unequal, not asked a third time
        assert (v.timeouts, v.calls) == (2, 2)
    finally:
        v.close()


def test_the_math_task_reports_its_verifier_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(math_verifier, "_WORKER", _fake_worker(tmp_path, freezes=2))
    v = MathVerifier(timeout_s=0.3)
    task = MathTask(verifier=v)
    try:
        assert task.counters() == {"verifier_deadlines_missed": 0}
        item = TaskItem(id="p", prompt="?", reference="2")
        assert task.score_answer("2.0", item) == 0.0  # not equal as text: math_verify is asked, twice
        assert task.counters() == {"verifier_deadlines_missed": 2}
    finally:
        v.close()


def test_slow_sympy_input_scores_zero() -> None:
    # 9^9^9^9^9 keeps sympy busy until math_verify's own 1 s alarm, on any machine: a 0.3 s deadline is
    # missed by both attempts
    v = MathVerifier(timeout_s=0.3)
    try:
        assert v.equivalent("2", "9^{9^{9^{9^{9}}}}") is False
        assert v.timeouts == 2
    finally:
        v.close()


def test_a_dead_worker_is_restarted(verifier: MathVerifier) -> None:
    assert verifier.equivalent("1", "1.0")
    pid = verifier.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):  # worker_pid polls the process, so this also reaps it
        if verifier.worker_pid is None:
            break
        time.sleep(0.02)
    assert verifier.worker_pid is None
    # the dead worker is noticed before sending; the new one answers correctly
    assert verifier.equivalent("2", "2.0") is True
    assert verifier.starts == 2


def test_threads_share_one_worker(verifier: MathVerifier) -> None:
    errors: list[BaseException] = []
    results: dict[int, list[bool]] = {}

    def work(k: int) -> None:
        try:
            results[k] = [verifier.equivalent(f"{k}+{i}", f"{k + i}") for i in range(10)]
        except BaseException as exc:  # pragma: no cover - recorded for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert results == {k: [True] * 10 for k in range(4)}
    assert verifier.starts == 1


@pytest.mark.skipif(sys.platform == "win32", reason="os.fork is POSIX only")
def test_a_forked_copy_starts_its_own_worker(verifier: MathVerifier) -> None:
    assert verifier.equivalent("1", "1.0")
    parent_worker = verifier.worker_pid
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child process
        ok = verifier.equivalent("4", "4.0") and verifier.worker_pid not in (None, parent_worker)
        os.write(write_fd, b"1" if ok else b"0")
        verifier.close()
        os._exit(0)
    os.close(write_fd)
    answer = os.read(read_fd, 1)
    os.waitpid(child, 0)
    assert answer == b"1"
    assert verifier.worker_pid == parent_worker  # the child did not touch the parent's worker
    assert verifier.equivalent("5", "5.0")
