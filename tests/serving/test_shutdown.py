"""Graceful shutdown and disconnects: SIGTERM drains (503 for new requests, the requests in flight
finish within the bound or are cancelled before their next model call), every connection taken is
answered, the process exits 0; a client that disconnects while queued gives up its place and its
episodes never run."""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="teamplay serve needs the serve extra: pip install 'teamplay[serve]'")
httpx = pytest.importorskip("httpx", reason="the serve tests talk HTTP with httpx (the openai client's library)")

from teamplay.serving.api.server import ServeLimits, bind, create_app, running  # noqa: E402
from teamplay.serving.api.shutdown import accept_pending  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ASK = {"model": "slow", "messages": [{"role": "user", "content": "What is 23 + 95?"}]}
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


class SlowServer:
    """``tests.serving.slow_server`` in a subprocess: its URL, and its output once it exited."""

    def __init__(self, turn_s: float, drain_s: float, protocol: str = "single") -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.serving.slow_server", str(turn_s), str(drain_s),
                                      protocol], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     cwd=ROOT, env=ENV)
        self.url = self.proc.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.url + self.proc.stderr.read()

    def wait_running(self) -> None:
        """Until a request runs (bounded: 200 polls)."""
        for _ in range(200):
            if httpx.get(f"{self.url}/health").json()["running"] >= 1:
                return
            time.sleep(0.02)
        raise AssertionError("the request never started")

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err


def _post_in_thread(url: str, results: dict, key: str) -> threading.Thread:
    def post() -> None:
        results[key] = httpx.post(f"{url}/v1/chat/completions", json=ASK, timeout=60)

    thread = threading.Thread(target=post)
    thread.start()
    return thread


def test_sigterm_lets_the_request_in_flight_finish_refuses_new_ones_and_exits_0():
    server = SlowServer(turn_s=1.5, drain_s=30)
    try:
        results: dict = {}
        thread = _post_in_thread(server.url, results, "in_flight")
        server.wait_running()
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)  # the signal is handled on the server's loop
        refused = httpx.post(f"{server.url}/v1/chat/completions", json=ASK, timeout=10)
        health = httpx.get(f"{server.url}/health", timeout=10)
        thread.join(timeout=30)
    finally:
        code, out, err = server.finish()
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "shutting_down"
    assert health.status_code == 503 and health.json() == {"status": "draining"}
    assert results["in_flight"].status_code == 200
    assert results["in_flight"].json()["choices"][0]["message"]["content"] == "The answer is \\boxed{1}."
    assert code == 0, err
    assert out.strip() == "exited after 1 model calls"  # the refused request never ran


def test_sigterm_past_the_bound_cancels_the_run_before_its_next_model_call():
    """A 3-turn episode at 1 s a turn, a 0.3 s drain: the request gets 503 and the run stops after
    the model call it was in, not after all three."""
    server = SlowServer(turn_s=1.0, drain_s=0.3, protocol="proposer_reviewer")
    try:
        results: dict = {}
        thread = _post_in_thread(server.url, results, "cancelled")
        server.wait_running()
        server.proc.send_signal(signal.SIGTERM)
        thread.join(timeout=30)
    finally:
        code, out, err = server.finish()
    cancelled = results["cancelled"]
    assert cancelled.status_code == 503, cancelled.text
    assert cancelled.json()["error"]["code"] == "shutting_down" and "cancelled" in cancelled.json()["error"]["message"]
    assert code == 0, err
    assert out.strip() == "exited after 1 model calls"


def _post_until_refused(client, url: str, outcomes: list[str], deadline: float) -> None:
    """Posts back to back, each request on a new connection, until a connection is refused (or
    ``deadline``, ``time.monotonic()``), recording how each ended: ``200``, ``503`` (in OpenAI's
    error shape), ``refused``, else the status or the exception."""
    while time.monotonic() < deadline:
        try:
            response = client.post(f"{url}/v1/chat/completions", json=ASK)
        except httpx.ConnectError:
            outcomes.append("refused")
            return
        except httpx.HTTPError as exc:  # ReadError, RemoteProtocolError: taken, then dropped unanswered
            outcomes.append(f"{type(exc).__name__}: {exc}")
            return
        error = response.json().get("error") if response.status_code == 503 else None
        openai_503 = isinstance(error, dict) and {"message", "type", "code"} <= error.keys() \
            and error["code"] == "shutting_down"
        outcomes.append("503" if openai_503 else str(response.status_code))


def test_sigterm_under_a_stream_of_connections_answers_every_connection_it_took():
    """16 clients post back to back, each request on a new connection, until one is refused;
    SIGTERM after 0.3 s. Each request gets 200, OpenAI's 503 or a refused connection, never a reset
    or a connection closed unanswered (as when the stop closed the listening socket over its
    backlog and uvicorn closed the connections whose request it had not read yet)."""
    server = SlowServer(turn_s=0.01, drain_s=0.5)
    outcomes: list[str] = []
    # one client for the 16 threads (it is thread-safe; each makes a TLS context, slow), no keep-alive
    client = httpx.Client(timeout=30, limits=httpx.Limits(max_keepalive_connections=0))
    try:
        deadline = time.monotonic() + 20
        threads = [threading.Thread(target=_post_until_refused, args=(client, server.url, outcomes, deadline),
                                    daemon=True) for _ in range(16)]
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        server.proc.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(timeout=30)
    finally:
        client.close()
        code, _, err = server.finish()
    counts = Counter(outcomes)
    assert set(counts) <= {"200", "503", "refused"}, (counts, err)
    assert counts["refused"] == 16 and counts["200"] >= 1, (counts, err)  # each client ran until refused
    assert code == 0, err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="handshakes are stopped with a Linux socket filter")
def test_the_stop_takes_the_backlog_and_refuses_the_connections_after_it():
    """``accept_pending`` takes the connections waiting in the listening socket's backlog (its
    close would reset them) and stops new handshakes first, so that none slips in before the
    close: a connection tried after it never completes, and is refused once the socket closes."""
    listener = bind("127.0.0.1", 0)
    listener.listen(16)
    waiting = [socket.create_connection(listener.getsockname()) for _ in range(3)]
    taken = accept_pending([listener])
    late = socket.socket()
    late.setblocking(False)
    try:
        assert late.connect_ex(listener.getsockname()) == errno.EINPROGRESS
        assert select.select([], [late], [], 0.2)[1] == []  # its SYN was dropped: not connected
        listener.close()
        assert select.select([], [late], [], 10)[1] == [late]  # its retried SYN, a second later
        assert late.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNREFUSED
        waiting[0].sendall(b"ping")
        assert len(taken) == 3 and taken[0].recv(4) == b"ping"  # the taken ones work
    finally:
        for sock in [*waiting, *taken, late, listener]:
            sock.close()


def test_the_command_exits_0_on_sigterm(tmp_path):
    config = tmp_path / "oracle.yaml"
    config.write_text(json.dumps({"task": {"name": "arith", "limit": 5}, "backend": {"name": "scripted"}}))
    proc = subprocess.Popen([sys.executable, "-m", "teamplay.cli", "serve", "--config", str(config), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    line = proc.stdout.readline()
    assert line.startswith("serving oracle at "), line + proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err.strip() == "stopped serving oracle"


def test_a_client_that_disconnects_while_queued_gives_up_its_place():
    """One request at a time (max_batch 1): while A runs, B waits and its client hangs up; B is
    dropped (never runs), and C, sent after, runs right after A."""
    from teamplay.agents.backends.scripted import ScriptedBackend
    from teamplay.config import EvalConfig, build_config
    from teamplay.serving.episodes.engine import TeamEngine
    from teamplay.training.wiring.envs import env_factory, load_items
    from teamplay.training.wiring.sampling import sampling_params

    cfg = build_config(EvalConfig, {"task": {"name": "arith", "limit": 3}, "protocol": {"name": "single"}})
    task, items = load_items(cfg.task)
    make_env, _ = env_factory(task, cfg.protocol, None)
    asked = []
    release = threading.Event()

    def gated(request) -> str:
        asked.append(request.item.prompt)
        release.wait(10)
        return "The answer is 1."

    engine = TeamEngine(task, items, make_env, ScriptedBackend(gated), sampling_params(cfg.sampling), "single")
    limits = ServeLimits(max_batch=1)

    def ask(question: str) -> dict:
        return {"model": "gated", "messages": [{"role": "user", "content": question}]}

    with running(create_app(engine, "gated", limits)) as url:
        results: dict = {}
        a = threading.Thread(target=lambda: results.update(a=httpx.post(f"{url}/v1/chat/completions",
                                                                           json=ask("A?"), timeout=30)))
        a.start()
        for _ in range(200):  # until A runs (bounded)
            if asked:
                break
            time.sleep(0.01)
        with pytest.raises(httpx.ReadTimeout):  # B's client gives up after 0.3 s: the connection closes
            httpx.post(f"{url}/v1/chat/completions", json=ask("B?"), timeout=0.3)
        for _ in range(200):  # the server saw the disconnect: B left the queue
            if httpx.get(f"{url}/health").json()["queued"] == 0:
                break
            time.sleep(0.01)
        c = threading.Thread(target=lambda: results.update(c=httpx.post(f"{url}/v1/chat/completions",
                                                                           json=ask("C?"), timeout=30)))
        c.start()
        time.sleep(0.1)
        release.set()
        a.join(timeout=30)
        c.join(timeout=30)
        health = httpx.get(f"{url}/health").json()
    assert results["a"].status_code == 200 and results["c"].status_code == 200
    assert asked == ["A?", "C?"]  # B never ran
    assert health["queued"] == 0 and health["requests"] == 2


def test_the_command_closes_the_backend_it_built(monkeypatch):
    """``serve`` built the backend, so it closes it once serving stopped (``serve`` replaced by a
    no-op here; the close is GenerationBackend's, recorded)."""
    from typer.testing import CliRunner

    import teamplay.serving.api.server as server
    from teamplay.agents.backends.base import GenerationBackend
    from teamplay.cli import app

    closed = []
    monkeypatch.setattr(server, "serve", lambda *args, **kwargs: None)
    monkeypatch.setattr(GenerationBackend, "close", lambda self: closed.append(self.name))
    result = CliRunner().invoke(app, ["serve", "--set", "backend.name=scripted", "--set", "protocol.name=single"])
    assert result.exit_code == 0, result.output
    assert closed == ["scripted"]
