"""Graceful shutdown and disconnects: SIGTERM drains (503 for new requests, the requests in flight
finish within the bound or are cancelled before their next model call), the process exits 0; a
client that disconnects while queued gives up its place and its episodes never run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="teamplay serve needs the serve extra: pip install 'teamplay[serve]'")
httpx = pytest.importorskip("httpx", reason="the serve tests talk HTTP with httpx (the openai client's library)")

from teamplay.serving.api.server import ServeLimits, create_app, running  # noqa: E402

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
    from teamplay.training.wiring.setup import env_factory, load_items, sampling_params

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
