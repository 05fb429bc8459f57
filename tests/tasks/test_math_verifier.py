"""MathVerifier: real math_verify answers, a hard deadline with kill and restart, threads, fork."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from teamplay.envs.tasks.answers.math_verifier import MathVerifier


@pytest.fixture
def verifier() -> Iterator[MathVerifier]:
    v = MathVerifier(timeout_s=3.0)
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


def test_a_frozen_worker_is_killed_at_the_deadline_and_replaced(caplog: pytest.LogCaptureFixture) -> None:
    # SIGSTOP makes the worker hang the way sympy does inside C code: no signal handler runs
    v = MathVerifier(timeout_s=0.5)
    try:
        assert v.equivalent("1", "1.0")
        pid = v.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        start = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="teamplay.envs.tasks.answers.math_verifier"):
            assert v.equivalent("2", "2.0") is False
        elapsed = time.monotonic() - start
        assert 0.5 <= elapsed < 2.0, elapsed
        assert v.timeouts == 1 and v.worker_pid is None
        assert "exceeded 0.5 s" in caplog.text
        with pytest.raises(ProcessLookupError):  # killed and reaped
            os.kill(pid, 0)
        assert v.equivalent("3", "3.0") is True  # a fresh worker answers the next call
        assert v.starts == 2
        calls = v.calls
        assert v.equivalent("2", "2.0") is False  # a missed deadline is remembered, not retried
        assert v.calls == calls
    finally:
        v.close()


def test_slow_sympy_input_scores_zero_within_the_deadline() -> None:
    # 9^9^9^9^9 keeps sympy busy until math_verify's own 1 s alarm; the 0.3 s deadline comes first
    v = MathVerifier(timeout_s=0.3)
    try:
        v.equivalent("1", "1.0")  # start the worker outside the timed part
        before = v.timeouts  # on a starved machine even the start may miss 0.3 s: count from here
        start = time.monotonic()
        assert v.equivalent("2", "9^{9^{9^{9^{9}}}}") is False
        assert time.monotonic() - start < 1.5
        assert v.timeouts == before + 1
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
