"""``teamplay serve`` as a hostile or careless client would use it, against a server process this
test starts on 127.0.0.1 (``tests.serving.slow_server`` with instant scripted turns and the
default ``ServeLimits``): malformed and oversize bodies, wrong types, 1e6-character messages, 200
concurrent requests, disconnects mid-request, a client sending its headers byte by byte, SIGTERM
under load. For each: the status and body shape, that the server still answers a normal request,
and its resident memory before and after. Every loop is bounded.

The figures (status, seconds to the normal request after, memory) go to a markdown table when
``TEAMPLAY_SERVE_FIGURES=FILE`` is set (BENCHMARKS.md's table comes from there); the assertions
hold whatever the timings.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="teamplay serve needs the serve extra: pip install 'teamplay[serve]'")
httpx = pytest.importorskip("httpx", reason="the serve tests talk HTTP with httpx (the openai client's library)")

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
ASK = {"model": "slow", "messages": [{"role": "user", "content": "What is 23 + 95?"}]}
ERROR_KEYS = {"message", "type", "param", "code"}
#: resident-memory growth allowed over the whole suite: far below what keeping any one of the
#: bodies sent would cost (200 requests of 1e6 characters = 200 MB; one 20 MB body), far above
#: allocator noise (a few MB of arenas and caches kept after a burst)
MEMORY_BOUND_MB = 64
FIGURES: list[list[str]] = []


def _rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MB (Linux ``/proc``; None elsewhere)."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        return None
    line = next(x for x in status.read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


class Server:
    def __init__(self, turn_s: float = 0.0, drain_s: float = 30.0) -> None:
        # stderr to a file, not a pipe: a pipe nobody reads fills up and blocks the server's logging
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.serving.slow_server", str(turn_s), str(drain_s)],
                                     stdout=subprocess.PIPE, stderr=self.err, text=True, cwd=ROOT, env=ENV)
        self.url = self.proc.stdout.readline().strip()
        assert self.url.startswith("http://127.0.0.1:"), self.url + self._stderr()
        self.host, self.port = self.url.removeprefix("http://").split(":")

    def normal(self) -> float:
        """Seconds to answer one normal request (which must be right)."""
        start = time.perf_counter()
        resp = httpx.post(f"{self.url}/v1/chat/completions", json=ASK, timeout=30)
        assert resp.status_code == 200
        assert resp.json()["choices"][0]["message"]["content"] == "The answer is \\boxed{1}."
        return time.perf_counter() - start

    def stop(self) -> tuple[int, str, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        return self.proc.returncode, out, self._stderr()

    def _stderr(self) -> str:
        self.err.seek(0)
        return self.err.read()


@pytest.fixture(scope="module")
def server():
    srv = Server()
    srv.rss_start = _rss_mb(srv.proc.pid)
    yield srv
    rss_end = _rss_mb(srv.proc.pid)
    code, _, err = srv.stop()
    assert code == 0, err
    assert "Traceback" not in err, err  # no client mistake reaches the log as a crash
    if srv.rss_start is not None:
        assert rss_end - srv.rss_start < MEMORY_BOUND_MB, (srv.rss_start, rss_end)
    figures = os.environ.get("TEAMPLAY_SERVE_FIGURES")
    if figures:
        rows = ["| case | requests | statuses | body shape | normal request after (s) | RSS before -> after (MB) |",
                "|---|---|---|---|---|---|", *("| " + " | ".join(r) + " |" for r in FIGURES)]
        Path(figures).write_text("\n".join(rows) + "\n")


def _record(server: Server, case: str, requests: int, statuses: list[int], shape: str, rss_before) -> None:
    after = server.normal()
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    rss_after = _rss_mb(server.proc.pid)
    counts = ", ".join(f"{n} x {s}" for s, n in sorted({s: statuses.count(s) for s in statuses}.items())) or "-"
    memory = "-" if rss_before is None else f"{rss_before:.0f} -> {rss_after:.0f}"
    FIGURES.append([case, str(requests), counts, shape, f"{after:.3f}", memory])


def _openai_error(resp: httpx.Response) -> dict:
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS and body["error"]["message"], body
    return body["error"]


BAD_BODIES = [b"", b"{", b"null", b"[]", b'"text"', b"{'single': 'quotes'}", b"\xff\xfe\x00", b'{"model": "slow"}',
              json.dumps({"model": "slow", "messages": "hello"}).encode(),
              json.dumps({"model": "slow", "messages": [{"role": "user", "content": 7}]}).encode(),
              json.dumps({"model": "slow", "messages": [{"role": "robot", "content": "hi"}]}).encode(),
              json.dumps({**ASK, "n": "two"}).encode(), json.dumps({**ASK, "temperature": "hot"}).encode(),
              json.dumps({**ASK, "max_tokens": -1}).encode(), json.dumps({**ASK, "stop": 5}).encode(),
              json.dumps({**ASK, "stream": "yes please"}).encode(), json.dumps({**ASK, "model": 12}).encode(),
              json.dumps({**ASK, "seed": 1.5}).encode()]


def test_malformed_bodies_and_wrong_types_get_400_in_openais_shape(server):
    before = _rss_mb(server.proc.pid)
    statuses = []
    for body in BAD_BODIES:
        resp = httpx.post(f"{server.url}/v1/chat/completions", content=body,
                          headers={"content-type": "application/json"})
        statuses.append(resp.status_code)
        assert resp.status_code == 400, (body, resp.text)
        assert _openai_error(resp)["type"] == "invalid_request_error"
    _record(server, "malformed JSON and wrong types", len(BAD_BODIES), statuses, "OpenAI error", before)


def test_oversize_bodies_get_413_without_being_read_whole(server):
    before = _rss_mb(server.proc.pid)
    big = b'{"model": "slow", "messages": [{"role": "user", "content": "' + b"x" * (20 << 20) + b'"}]}'
    statuses = []
    declared = httpx.post(f"{server.url}/v1/chat/completions", content=big, timeout=60,
                          headers={"content-type": "application/json"})

    def chunks():  # no content-length: the server must count while it reads
        for lo in range(0, len(big), 1 << 20):
            yield big[lo:lo + (1 << 20)]

    try:
        chunked = httpx.post(f"{server.url}/v1/chat/completions", content=chunks(), timeout=60)
        chunked_status = chunked.status_code
        assert _openai_error(chunked)["code"] == "request_too_large"
    except httpx.WriteError:  # the server answered 413 and closed while the rest was still being sent
        chunked_status = 413
    for resp_status in (declared.status_code, chunked_status):
        statuses.append(resp_status)
        assert resp_status == 413
    assert _openai_error(declared)["code"] == "request_too_large"
    _record(server, "20 MB body (declared, and chunked)", 2, statuses, "OpenAI error", before)


def test_million_character_messages_get_400(server):
    before = _rss_mb(server.proc.pid)
    statuses = []
    for _ in range(10):
        resp = httpx.post(f"{server.url}/v1/chat/completions", timeout=30, json={
            "model": "slow", "messages": [{"role": "user", "content": "7" * 1_000_000}]})
        statuses.append(resp.status_code)
        assert resp.status_code == 400 and _openai_error(resp)["code"] == "context_length_exceeded"
    _record(server, "1e6-character message", 10, statuses, "OpenAI error", before)


def test_200_concurrent_requests_are_all_answered(server):
    before = _rss_mb(server.proc.pid)

    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            return await asyncio.gather(*(client.post(f"{server.url}/v1/chat/completions", json=ASK)
                                          for _ in range(200)))

    answers = asyncio.run(burst())
    statuses = [a.status_code for a in answers]
    assert statuses == [200] * 200
    assert {a.json()["choices"][0]["message"]["content"] for a in answers} == {"The answer is \\boxed{1}."}
    _record(server, "200 concurrent requests", 200, statuses, "completion", before)


def test_clients_that_disconnect_mid_request_leave_nothing_behind(server):
    before = _rss_mb(server.proc.pid)
    body = json.dumps(ASK).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: {server.host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode()
    for cut in (len(head) // 2, len(head), len(head) + len(body) // 2, len(head) + len(body)):
        for _ in range(10):  # headers cut, body missing, half a body, the whole request: then hang up
            with socket.create_connection((server.host, int(server.port)), timeout=10) as sock:
                sock.sendall((head + body)[:cut])
    for _ in range(200):  # the server drops what they queued (bounded)
        health = httpx.get(f"{server.url}/health").json()
        if health["queued"] == 0:
            break
        time.sleep(0.01)
    assert health["queued"] == 0
    _record(server, "disconnect mid-request (4 cuts x 10)", 40, [], "(hung up: no answer)", before)


def test_a_client_sending_byte_by_byte_does_not_hold_up_others(server):
    """A client dribbling a request (about 2 ms a byte) while a normal request is answered."""
    before = _rss_mb(server.proc.pid)
    body = json.dumps(ASK).encode()
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: {server.host}\r\ncontent-type: application/json\r\n"
               f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body
    with socket.create_connection((server.host, int(server.port)), timeout=30) as sock:
        half = len(request) // 2
        for i in range(half):
            sock.send(request[i:i + 1])
            time.sleep(0.002)
        others = server.normal()  # answered while the slow client is half-way
        for i in range(half, len(request)):
            sock.send(request[i:i + 1])
            time.sleep(0.002)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    assert status == 200 and b"The answer is \\\\boxed{1}." in reply
    _record(server, f"slow client, byte by byte (normal request meanwhile: {others:.3f} s)", 1, [status],
            "completion", before)


def test_sigterm_under_load_finishes_what_is_in_flight_refuses_the_rest_and_exits_0():
    """100 requests in flight on a slow team (10 ms a model call, so about 1 s of work; a 20 s
    drain), SIGTERM, then 20 more: the 100 are answered, the 20 get 503, the process exits 0."""
    srv = Server(turn_s=0.01, drain_s=20.0)

    async def load() -> tuple[list, list]:
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=120)) as client:
            def post():
                return asyncio.ensure_future(client.post(f"{srv.url}/v1/chat/completions", json=ASK))

            in_flight = [post() for _ in range(100)]
            for _ in range(500):  # until all 100 reached the server (bounded)
                health = (await client.get(f"{srv.url}/health")).json()
                if health["received"] == 100:
                    break
                await asyncio.sleep(0.01)
            srv.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.2)  # the signal is handled on the server's loop
            late = [post() for _ in range(20)]
            return (await asyncio.gather(*in_flight, return_exceptions=True),
                    await asyncio.gather(*late, return_exceptions=True))

    try:
        in_flight, late = asyncio.run(load())
    finally:
        code, out, err = srv.stop()
    assert code == 0, err
    first = [r.status_code if isinstance(r, httpx.Response) else repr(r) for r in in_flight]
    then = [r.status_code if isinstance(r, httpx.Response) else repr(r) for r in late]
    assert first == [200] * 100 and then == [503] * 20, (first, then)
    assert {_openai_error(r)["code"] for r in late} == {"shutting_down"}
    FIGURES.append(["SIGTERM under load: 100 in flight, then 20 more", "120", "100 x 200, 20 x 503",
                    "completion / OpenAI error", "- (exited 0)", "-"])
