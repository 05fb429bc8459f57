"""``stream: true``: OpenAI chunks over server-sent events, read with the official client's
streaming API (``client.chat.completions.create(stream=True)``) and as raw bytes; the streamed
answer, usage and transcripts equal the non-streamed ones; errors after the stream began arrive
as an error event; a streaming client that hangs up gives up its queue place."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="teamplay serve needs the serve extra: pip install 'teamplay[serve]'")
openai = pytest.importorskip("openai", reason="the serve tests drive the server with the openai client (dev extra)")
import httpx  # noqa: E402 - the openai client's own HTTP library, present whenever openai is

from teamplay.config import EvalConfig, build_config  # noqa: E402
from teamplay.serving.api.server import ServeLimits, create_app, running  # noqa: E402
from teamplay.serving.episodes.engine import build_team_engine  # noqa: E402
from tests.tiny import save_tiny  # noqa: E402

ORACLE = {"task": {"name": "arith", "split": "test", "limit": 5},
          "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
          "backend": {"name": "scripted", "policy": "truthful"}}
QUESTION = [{"role": "user", "content": "What is 23 + 95?"}]


@pytest.fixture(scope="module")
def oracle():
    with running(create_app(build_team_engine(build_config(EvalConfig, ORACLE)), "oracle")) as url:
        yield url


def _client(url: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_the_clients_stream_gives_the_answer_of_each_choice(oracle):
    chunks = list(_client(oracle).chat.completions.create(model="oracle", n=2, messages=QUESTION, stream=True))
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1
    assert all(len(c.choices) == 1 for c in chunks)
    # per choice: the role first, then the answer, then finish_reason "stop" on an empty delta
    for index in (0, 1):
        mine = [c.choices[0] for c in chunks if c.choices[0].index == index]
        assert [m.delta.role for m in mine] == ["assistant", None, None]
        assert "".join(m.delta.content or "" for m in mine) == "The answer is \\boxed{118}."
        assert [m.finish_reason for m in mine] == [None, None, "stop"]
    # both role chunks come before any answer: sent at once, while the team works
    assert [c.choices[0].delta.role for c in chunks[:2]] == ["assistant", "assistant"]
    assert all(c.usage is None for c in chunks)
    episodes = chunks[-1].model_extra["teamplay"]["episodes"]
    assert [e["final_answer"] for e in episodes] == ["118", "118"] and episodes[0]["reward"] == 1.0


def test_raw_events_end_with_done(oracle):
    with httpx.stream("POST", f"{oracle}/v1/chat/completions", json={
            "model": "oracle", "messages": QUESTION, "stream": True,
            "stream_options": {"include_usage": True}}, timeout=60) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        raw = resp.read().decode()
    events = raw.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]  # the stream's last bytes: "data: [DONE]\n\n"
    bodies = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(e.startswith("data: ") for e in events[:-2])
    assert [b["usage"] for b in bodies[:-1]] == [None] * (len(bodies) - 1)
    assert bodies[-1]["choices"] == [] and set(bodies[-1]["usage"]) == {"prompt_tokens", "completion_tokens",
                                                                       "total_tokens"}


def test_streamed_usage_and_transcripts_equal_the_completions(tmp_path):
    model = save_tiny(tmp_path / "model")
    cfg = build_config(EvalConfig, {**ORACLE, "model": {"name": str(model), "device": "cpu"},
                                    "backend": {"name": "hf", "max_prompt_tokens": 512},
                                    "sampling": {"max_new_tokens": 5, "temperature": 0.0}})
    with running(create_app(build_team_engine(cfg), "tiny")) as url:
        client = _client(url)
        whole = client.chat.completions.create(model="tiny", n=2, messages=QUESTION)
        chunks = list(client.chat.completions.create(model="tiny", n=2, messages=QUESTION, stream=True,
                                                     stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.choices == [] and last.usage.model_dump() == whole.usage.model_dump()
    assert last.usage.completion_tokens > 0  # a model's tokens, not a scripted team's zero
    for choice in whole.choices:
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and
                           c.choices[0].index == choice.index)
        assert streamed == choice.message.content
    assert last.model_extra["teamplay"]["episodes"] == whole.model_extra["teamplay"]["episodes"]


def _gated_engine():
    from teamplay.agents.backends.scripted import ScriptedBackend
    from teamplay.serving.episodes.engine import TeamEngine
    from teamplay.training.wiring.envs import env_factory, load_items
    from teamplay.training.wiring.sampling import sampling_params

    cfg = build_config(EvalConfig, {"task": {"name": "arith", "limit": 3}, "protocol": {"name": "single"}})
    task, items = load_items(cfg.task)
    make_env, _ = env_factory(task, cfg.protocol, None)
    asked, release = [], threading.Event()

    def gated(request) -> str:
        asked.append(request.item.prompt)
        release.wait(10)
        return "The answer is 1."

    engine = TeamEngine(task, items, make_env, ScriptedBackend(gated), sampling_params(cfg.sampling), "single")
    return engine, asked, release


def test_an_error_after_the_stream_began_is_an_error_event():
    engine, _, release = _gated_engine()
    with running(create_app(engine, "gated", ServeLimits(timeout_s=0.3))) as url:
        stream = _client(url).chat.completions.create(model="gated", messages=QUESTION, stream=True)
        first = next(iter(stream))
        assert first.choices[0].delta.role == "assistant"
        with pytest.raises(openai.APIError, match="no result within 0.3 s"):
            list(stream)
        release.set()


def test_a_streaming_client_that_hangs_up_gives_up_its_queue_place():
    engine, asked, release = _gated_engine()
    with running(create_app(engine, "gated", ServeLimits(max_batch=1))) as url:
        a = threading.Thread(target=lambda: httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
            "model": "gated", "messages": [{"role": "user", "content": "A?"}]}))
        a.start()
        for _ in range(200):  # until A runs (bounded)
            if asked:
                break
            time.sleep(0.01)
        with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=30, json={
                "model": "gated", "messages": [{"role": "user", "content": "B?"}], "stream": True}) as resp:
            lines = resp.iter_lines()  # kept: a dropped iterator closes the response
            assert next(lines).startswith("data: ")  # B's role chunk: B is queued behind A
            health = httpx.get(f"{url}/health").json()
            assert health["queued"] == 1, health
        for _ in range(200):  # B's client hung up: B leaves the queue before A ends (bounded)
            if httpx.get(f"{url}/health").json()["queued"] == 0:
                break
            time.sleep(0.01)
        queued = httpx.get(f"{url}/health").json()["queued"]
        release.set()
        a.join(timeout=30)
    assert queued == 0 and asked == ["A?"]
