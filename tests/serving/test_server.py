"""``teamplay serve`` end to end: the real server (uvicorn on 127.0.0.1, a free port) driven by the
official ``openai`` client, on scripted teams (answers known) and a tiny random HF model (real
token counts). Errors must come back in OpenAI's shape with the client's typed exceptions, and
concurrent clients must be served by fewer ``RolloutRunner.run`` calls than requests."""

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
openai = pytest.importorskip("openai", reason="the serve tests drive the server with the openai client (dev extra)")
import httpx  # noqa: E402 - the openai client's own HTTP library, present whenever openai is

from teamplay.config import EvalConfig, build_config  # noqa: E402
from teamplay.serving.api.server import ServeLimits, create_app, running  # noqa: E402
from teamplay.serving.episodes.engine import build_team_engine  # noqa: E402
from tests.tiny import save_tiny  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = "pr-oracle"
#: the scripted proposer/reviewer team: 3 rounds = propose, review, propose again
ORACLE_TEAM = {"task": {"name": "arith", "split": "test", "limit": 200},
               "protocol": {"name": "proposer_reviewer", "options": {"rounds": 3}},
               "backend": {"name": "scripted", "policy": "truthful"}}
LIMITS = ServeLimits(max_batch=64, max_queue=256, timeout_s=30, max_n=4, max_body_bytes=64 * 1024,
                     max_question_chars=1000)
ERROR_KEYS = {"message", "type", "param", "code"}


@pytest.fixture(scope="module")
def oracle():
    """(base URL, engine) of the scripted oracle team's server."""
    engine = build_team_engine(build_config(EvalConfig, ORACLE_TEAM))
    with running(create_app(engine, MODEL, LIMITS)) as url:
        yield url, engine


@pytest.fixture()
def client(oracle):
    return openai.OpenAI(base_url=f"{oracle[0]}/v1", api_key="unused", max_retries=0, timeout=30)


def _items(engine, n: int):
    return engine.task.load("test", limit=n)


def test_known_problems_get_their_reference_and_the_transcript(oracle, client):
    _, engine = oracle
    for item in _items(engine, 4):
        resp = client.chat.completions.create(model=MODEL, messages=[
            {"role": "system", "content": "ignored: the protocol writes the system prompts"},
            {"role": "user", "content": f"  {item.prompt}\n"}])  # whitespace does not matter for the look-up
        (choice,) = resp.choices
        assert choice.message.content == f"The answer is \\boxed{{{item.reference}}}."
        assert engine.task.extract(choice.message.content) == item.reference
        assert resp.model == MODEL and resp.object == "chat.completion" and choice.finish_reason == "stop"
        extra = resp.model_extra["teamplay"]
        assert extra["problem_id"] == item.id and extra["reference_known"] is True
        (episode,) = extra["episodes"]
        assert episode["reward"] == 1.0 and episode["final_answer"] == item.reference
        turns = [(t["agent"], t["role"], t["stage"], t["round"], t["spoke"]) for t in episode["transcript"]]
        assert turns == [("proposer_0", "proposer", "propose", 0, True), ("reviewer_0", "reviewer", "review", 1, True),
                         ("proposer_0", "proposer", "propose", 2, True)]
        assert [t["text"] for t in episode["transcript"]][1] == "RIGHT"
        # scripted text has no tokens; the calls are counted per role
        assert resp.usage.total_tokens == 0
        assert {r: u["calls"] for r, u in extra["usage_by_role"].items()} == {"proposer": 2, "reviewer": 1}


def test_n_episodes_give_n_choices(oracle, client):
    item = _items(oracle[1], 1)[0]
    resp = client.chat.completions.create(model=MODEL, n=2, messages=[{"role": "user", "content": item.prompt}])
    assert [c.index for c in resp.choices] == [0, 1]
    assert {c.message.content for c in resp.choices} == {f"The answer is \\boxed{{{item.reference}}}."}
    episodes = resp.model_extra["teamplay"]["episodes"]
    assert [e["index"] for e in episodes] == [0, 1]
    assert resp.model_extra["teamplay"]["usage_by_role"]["proposer"]["calls"] == 4  # 2 episodes x 2 proposals


def test_a_new_question_has_no_reference_and_no_reward(oracle, client):
    resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "What is 1000 + 1?"}])
    extra = resp.model_extra["teamplay"]
    assert extra["reference_known"] is False and extra["problem_id"].startswith("serve/")
    assert extra["episodes"][0]["reward"] is None
    assert resp.choices[0].message.content == ""  # the oracle states an empty box: no answer


def test_stop_cuts_the_content(oracle, client):
    item = _items(oracle[1], 1)[0]
    resp = client.chat.completions.create(model=MODEL, stop=["{"], messages=[{"role": "user", "content": item.prompt}])
    assert resp.choices[0].message.content == "The answer is \\boxed"


def test_models_and_health(oracle, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).owned_by == "teamplay"
    health = httpx.get(f"{oracle[0]}/health").json()
    assert health["status"] == "ok" and health["model"] == MODEL and health["queued"] == 0


def _raw(url: str, body: bytes | str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS
    return body["error"]


USER = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.mark.parametrize(("body", "status", "param", "code"), [
    (b'{"model": "pr-oracle", "messages": [', 400, None, "invalid_json"),
    (b"[1, 2]", 400, None, None),
    (json.dumps({"model": MODEL}), 400, "messages", "missing_required_parameter"),
    (json.dumps({"messages": USER}), 400, "model", "missing_required_parameter"),
    (json.dumps({"model": MODEL, "messages": []}), 400, "messages", "invalid_value"),
    (json.dumps({"model": MODEL, "messages": [{"role": "system", "content": "hi"}]}), 400, "messages",
     "invalid_value"),
    (json.dumps({"model": MODEL, "messages": USER, "n": 5}), 400, "n", "invalid_value"),
    (json.dumps({"model": MODEL, "messages": USER, "n": 0}), 400, "n", "invalid_value"),
    (json.dumps({"model": MODEL, "messages": USER, "temperature": 0.001}), 400, "temperature", "invalid_value"),
    (json.dumps({"model": MODEL, "messages": USER, "stop": list("abcde")}), 400, "stop", "invalid_value"),
    (json.dumps({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}), 400,
     "messages.0.content", "invalid_value"),
    (json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 1001}]}), 400, "messages",
     "context_length_exceeded"),
    (json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 70_000}]}), 413, None,
     "request_too_large"),
])
def test_bad_requests_get_openai_errors(oracle, body, status, param, code):
    error = _error(_raw(oracle[0], body), status)
    assert error["param"] == param and error["code"] == code and error["message"]
    assert error["type"] == "invalid_request_error"


def test_the_client_raises_its_typed_errors(oracle, client):
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-4o", messages=USER)
    assert unknown.value.code == "model_not_found" and MODEL in unknown.value.message
    with pytest.raises(openai.BadRequestError) as hot:
        client.chat.completions.create(model=MODEL, messages=USER, temperature=3)
    assert hot.value.param == "temperature" and "less than or equal to 2" in hot.value.message
    with pytest.raises(openai.BadRequestError) as streamed:
        client.chat.completions.create(model=MODEL, messages=USER, stream_options={"include_usage": True})
    assert streamed.value.param == "stream_options" and "only allowed with stream=true" in streamed.value.message
    with pytest.raises(openai.BadRequestError) as long:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "7" * 2000}])
    assert long.value.code == "context_length_exceeded"
    error = _error(httpx.get(f"{oracle[0]}/v1/nothing"), 404)
    assert "Not Found" in error["message"]


def test_concurrent_clients_are_batched(oracle):
    """32 client threads x 4 requests: every answer right, in far fewer lock-step turns than the
    384 (128 episodes x 3 turns) of one request at a time."""
    url, engine = oracle
    items = _items(engine, 128)
    before = httpx.get(f"{url}/health").json()
    failures, answers = [], {}

    def worker(k: int) -> None:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)
        for item in items[4 * k:4 * k + 4]:
            try:
                resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": item.prompt}])
                answers[item.id] = resp.choices[0].message.content
            except Exception as exc:  # noqa: BLE001 - collected and reported below
                failures.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert failures == []
    assert answers == {item.id: f"The answer is \\boxed{{{item.reference}}}." for item in items}
    after = httpx.get(f"{url}/health").json()
    assert after["requests"] - before["requests"] == 128 and after["episodes"] - before["episodes"] == 128
    # 32 clients keep up to 32 episodes in the batch: about 384 / 32 = 12 turns when they keep in
    # step, more as they drift apart; one request at a time would take 384
    assert 3 <= after["turns"] - before["turns"] < 128, (before, after)


# ------------------------------------------------------------------------------ real tokens


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(base URL, engine) of a tiny random HF model playing proposer/reviewer, 6 new tokens at most."""
    model = save_tiny(tmp_path_factory.mktemp("tiny") / "model")
    cfg = build_config(EvalConfig, {**ORACLE_TEAM, "model": {"name": str(model), "device": "cpu"},
                                    "backend": {"name": "hf", "max_prompt_tokens": 512},
                                    "sampling": {"max_new_tokens": 6}})
    engine = build_team_engine(cfg)
    with running(create_app(engine, "tiny", LIMITS)) as url:
        yield url, engine


def test_usage_adds_up_and_max_tokens_caps_each_message(tiny):
    client = openai.OpenAI(base_url=f"{tiny[0]}/v1", api_key="unused", max_retries=0, timeout=60)
    resp = client.chat.completions.create(model="tiny", n=2, max_tokens=3, messages=[
        {"role": "user", "content": "What is 23 + 95?"}])
    extra = resp.model_extra["teamplay"]
    turns = [t for e in extra["episodes"] for t in e["transcript"]]
    assert len(turns) == 6 and all(1 <= t["completion_tokens"] <= 3 and t["prompt_tokens"] > 0 for t in turns)
    usage = resp.usage
    assert usage.completion_tokens == sum(t["completion_tokens"] for t in turns)
    assert usage.prompt_tokens == sum(t["prompt_tokens"] for t in turns)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    by_role = extra["usage_by_role"]
    assert sum(u["total_tokens"] for u in by_role.values()) == usage.total_tokens
    for episode in extra["episodes"]:  # each episode's roles add up to its turns
        assert sum(u["completion_tokens"] for u in episode["usage_by_role"].values()) == sum(
            t["completion_tokens"] for t in episode["transcript"])
    # a larger max_tokens never raises the served config's 6 tokens
    big = client.chat.completions.create(model="tiny", max_tokens=1000, messages=[
        {"role": "user", "content": "What is 23 + 95?"}])
    assert max(t["completion_tokens"] for t in big.model_extra["teamplay"]["episodes"][0]["transcript"]) <= 6


def test_a_seeded_request_gives_the_same_episodes_whatever_runs_beside_it(tiny):
    client = openai.OpenAI(base_url=f"{tiny[0]}/v1", api_key="unused", max_retries=0, timeout=60)

    def texts(resp):
        return [[t["text"] for t in e["transcript"]] for e in resp.model_extra["teamplay"]["episodes"]]

    ask = {"model": "tiny", "n": 2, "temperature": 1.0, "seed": 7, "messages": [{"role": "user", "content": "Hi?"}]}
    alone = texts(client.chat.completions.create(**ask))
    results = {}

    def call(key, **kw):
        results[key] = client.chat.completions.create(**kw)

    threads = [threading.Thread(target=call, args=("seeded",), kwargs=ask)] + [
        threading.Thread(target=call, args=(k,), kwargs={**ask, "seed": None}) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert texts(results["seeded"]) == alone


def test_seeded_greedy_requests_share_one_run_and_keep_their_own_episodes(tiny):
    """lm-eval sends ``seed`` with every greedy request: such requests are batched together (one
    run), each with its own env seeds, and give the transcripts each gives alone."""
    from teamplay.serving.episodes.engine import EpisodeRequest

    engine = tiny[1]
    greedy = engine.sampling_for(None, 0.0, None)
    item, _ = engine.item_for("What is 23 + 95?")
    other, _ = engine.item_for("What is 7 + 8?")
    asks = [EpisodeRequest("a", item, 2, greedy, seed=3), EpisodeRequest("b", other, 1, greedy, seed=11),
            EpisodeRequest("c", item, 1, greedy)]
    alone = [engine.run([r])[0] for r in asks]
    before = engine.stats.runs
    together = engine.run(asks)
    assert engine.stats.runs == before + 1  # one RolloutRunner.run for the three
    for mine, solo in zip(together, alone, strict=True):
        assert [[m.text for m in e.messages] for e in mine] == [[m.text for m in e.messages] for e in solo]
    # a seeded request with sampled decoding still runs alone
    sampled = engine.sampling_for(None, 1.0, None)
    before = engine.stats.runs
    engine.run([EpisodeRequest("d", item, 1, sampled, seed=3), EpisodeRequest("e", item, 1, sampled)])
    assert engine.stats.runs == before + 2


# ------------------------------------------------------------------------------ overload, timeout


def _gauge(url: str, name: str) -> float:
    """The value of one unlabelled gauge of the server's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}
    return families[name].samples[0].value


def _wait_for(check, what: str, within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"the server never had {what}"
        time.sleep(0.005)


def test_timeouts_and_a_full_queue(tmp_path):
    """A team that takes 2 s per turn behind a server that waits 1 s and queues one request: the
    running and the queued request time out (504), a third finds the queue full (429). Each next
    request is sent once /metrics shows the one before it running or queued, so the order holds
    however slowly a loaded machine starts the client threads."""
    from teamplay.agents.backends.scripted import ScriptedBackend
    from teamplay.serving.episodes.engine import TeamEngine
    from teamplay.training.wiring.envs import env_factory, load_items
    from teamplay.training.wiring.sampling import sampling_params

    cfg = build_config(EvalConfig, {"task": {"name": "arith", "limit": 3}, "protocol": {"name": "single"}})
    task, items = load_items(cfg.task)
    make_env, _ = env_factory(task, cfg.protocol, None)

    def slow(request):
        time.sleep(2.0)
        return "The answer is 1."

    engine = TeamEngine(task, items, make_env, ScriptedBackend(slow), sampling_params(cfg.sampling), "single")
    limits = ServeLimits(max_batch=1, max_queue=1, timeout_s=1.0)
    statuses = {}
    with running(create_app(engine, "slow", limits)) as url:
        def post(key):
            statuses[key] = _raw(url, json.dumps({"model": "slow", "messages": USER}))

        threads = {key: threading.Thread(target=post, args=(key,)) for key in ("running", "queued", "refused")}
        threads["running"].start()
        _wait_for(lambda: _gauge(url, "teamplay_in_flight_episodes") == 1, "an episode in flight")
        threads["queued"].start()
        _wait_for(lambda: _gauge(url, "teamplay_queued_requests") == 1, "a queued request")
        threads["refused"].start()
        for t in threads.values():
            t.join(timeout=10)
    assert _error(statuses["running"], 504)["type"] == "timeout_error"
    assert _error(statuses["queued"], 504)["code"] == "timeout"
    refused = _error(statuses["refused"], 429)
    assert refused["type"] == "rate_limit_error" and refused["code"] == "queue_full"


# ------------------------------------------------------------------------------ the command


def test_the_command_serves_until_interrupted(tmp_path):
    config = tmp_path / "oracle_team.yaml"
    config.write_text(json.dumps(ORACLE_TEAM))  # JSON is YAML
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "teamplay.cli", "serve", "--config", str(config), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving oracle_team at http://127.0.0.1:"), line + proc.stderr.read()
        base = line.split(" at ")[1].split()[0]  # .../v1
        client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=30)
        assert [m.id for m in client.models.list().data] == ["oracle_team"]
        resp = client.chat.completions.create(model="oracle_team",
                                              messages=[{"role": "user", "content": "What is 23 + 95?"}])
        assert resp.choices[0].message.content == "The answer is \\boxed{118}."
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the normal way to stop a server
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err.strip() == "stopped serving oracle_team"


def test_the_command_refuses_bad_input_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from teamplay.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["serve", "--set", "backend.name=scripted", "--set", "task.name=nope"])
    assert result.exit_code == 2 and "error: task.name: unknown task 'nope'" in result.output
    result = runner.invoke(app, ["serve", str(tmp_path), "--config", str(tmp_path / "x.yaml")])
    assert result.exit_code == 2 and "not both" in result.output
    result = runner.invoke(app, ["serve", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such folder" in result.output
    result = runner.invoke(app, ["serve", "--set", "backend.name=scripted", "--max-batch", "0"])
    assert result.exit_code == 2 and "max_batch must be >= 1" in result.output
