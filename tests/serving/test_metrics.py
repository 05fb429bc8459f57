"""``GET /metrics``: Prometheus text format, parsed back with ``prometheus_client``'s own parser;
the counts must equal what the test sent and what the completions reported."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("fastapi", reason="teamplay serve needs the serve extra: pip install 'teamplay[serve]'")
parser = pytest.importorskip("prometheus_client.parser", reason="/metrics needs prometheus-client (serve extra)")
import httpx  # noqa: E402 - the openai client's HTTP library, a dependency of fastapi's test client too

from teamplay.config import EvalConfig, build_config  # noqa: E402
from teamplay.serving.api.server import ServeLimits, create_app, running  # noqa: E402
from teamplay.serving.episodes.engine import build_team_engine  # noqa: E402
from tests.tiny import save_tiny  # noqa: E402


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of ``/metrics``: (name, sorted labels) -> value."""
    resp = httpx.get(f"{url}/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(resp.text) for s in family.samples}


def _chat(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)


def test_requests_latency_runs_and_tokens_add_up(tmp_path):
    model = save_tiny(tmp_path / "model")
    cfg = build_config(EvalConfig, {"task": {"name": "arith", "split": "test", "limit": 5},
                                    "protocol": {"name": "single"},
                                    "model": {"name": str(model), "device": "cpu"},
                                    "backend": {"name": "hf", "max_prompt_tokens": 512},
                                    "sampling": {"max_new_tokens": 4}})
    with running(create_app(build_team_engine(cfg), "tiny", ServeLimits(max_n=4))) as url:
        before = scrape(url)
        assert before[("teamplay_in_flight_episodes", ())] == 0 and before[("teamplay_queued_requests", ())] == 0
        asks = [{"model": "tiny", "n": n, "messages": [{"role": "user", "content": f"What is {n} + 1?"}]}
                for n in (1, 2, 3)]
        answers = [_chat(url, ask) for ask in asks]
        assert [a.status_code for a in answers] == [200, 200, 200]
        assert _chat(url, {"model": "tiny", "messages": []}).status_code == 400
        assert _chat(url, {"model": "other", "messages": asks[0]["messages"]}).status_code == 404
        assert httpx.get(f"{url}/nowhere/{time.time()}").status_code == 404
        after = scrape(url)
    chat = "/v1/chat/completions"
    assert after[("teamplay_requests_total", (("route", chat), ("status", "200")))] == 3
    assert after[("teamplay_requests_total", (("route", chat), ("status", "400")))] == 1
    assert after[("teamplay_requests_total", (("route", chat), ("status", "404")))] == 1
    # the unknown path is one "other" series, not a series of its own
    assert after[("teamplay_requests_total", (("route", "other"), ("status", "404")))] == 1
    assert after[("teamplay_requests_total", (("route", "/metrics"), ("status", "200")))] == 1  # the first scrape
    assert after[("teamplay_request_latency_seconds_count", ())] == 5
    assert after[("teamplay_queue_wait_seconds_count", ())] == 3  # only requests that reached the queue
    # one turn per request (sent one after another, one model call per episode): 1, 2 and 3 episodes
    assert after[("teamplay_episodes_per_turn_count", ())] == 3 and after[("teamplay_episodes_per_turn_sum", ())] == 6
    assert after[("teamplay_episodes_per_turn_bucket", (("le", "2.0"),))] == 2
    assert after[("teamplay_episodes_total", ())] == 6
    generated = sum(a.json()["usage"]["completion_tokens"] for a in answers)
    assert generated > 0 and after[("teamplay_generated_tokens_total", ())] == generated


def test_in_flight_episodes_and_queued_requests_during_a_run():
    from teamplay.agents.backends.scripted import ScriptedBackend
    from teamplay.serving.episodes.engine import TeamEngine
    from teamplay.training.wiring.envs import env_factory, load_items
    from teamplay.training.wiring.sampling import sampling_params

    cfg = build_config(EvalConfig, {"task": {"name": "arith", "limit": 3}, "protocol": {"name": "single"}})
    task, items = load_items(cfg.task)
    make_env, _ = env_factory(task, cfg.protocol, None)
    release, started = threading.Event(), threading.Event()

    def gated(request) -> str:
        started.set()
        release.wait(10)
        return "The answer is 1."

    engine = TeamEngine(task, items, make_env, ScriptedBackend(gated), sampling_params(cfg.sampling), "single")
    ask = {"model": "gated", "n": 3, "messages": [{"role": "user", "content": "What is 1 + 1?"}]}
    with running(create_app(engine, "gated", ServeLimits(max_batch=3))) as url:
        threads = [threading.Thread(target=_chat, args=(url, ask)) for _ in range(2)]
        threads[0].start()
        assert started.wait(10)
        threads[1].start()
        for _ in range(200):  # until the second request is queued (bounded)
            during = scrape(url)
            if during[("teamplay_queued_requests", ())] == 1:
                break
            time.sleep(0.01)
        release.set()
        for t in threads:
            t.join(timeout=30)
        idle = scrape(url)
    assert during[("teamplay_in_flight_episodes", ())] == 3 and during[("teamplay_queued_requests", ())] == 1
    assert idle[("teamplay_in_flight_episodes", ())] == 0 and idle[("teamplay_queued_requests", ())] == 0
