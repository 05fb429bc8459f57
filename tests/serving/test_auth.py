"""``--api-key``: the official ``openai`` client's ``api_key`` gets in, a wrong or missing key gets
401 in OpenAI's shape on every route but ``/health``, the environment variable sets the key, and a
server bound beyond loopback without a key warns once."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="teamplay serve needs the serve extra: pip install 'teamplay[serve]'")
openai = pytest.importorskip("openai", reason="the serve tests drive the server with the openai client (dev extra)")
import httpx  # noqa: E402 - the openai client's own HTTP library, present whenever openai is

from teamplay.config import EvalConfig, build_config  # noqa: E402
from teamplay.serving.api.auth import BearerAuth, exposure_warning, key_matches  # noqa: E402
from teamplay.serving.api.server import create_app, running  # noqa: E402
from teamplay.serving.episodes.engine import build_team_engine  # noqa: E402

KEY = "sk-team-0123456789"
TEAM = {"task": {"name": "arith", "split": "test", "limit": 5}, "protocol": {"name": "single"},
        "backend": {"name": "scripted", "policy": "truthful"}}
ASK = {"model": "guarded", "messages": [{"role": "user", "content": "What is 23 + 95?"}]}


@pytest.fixture(scope="module")
def url():
    engine = build_team_engine(build_config(EvalConfig, TEAM))
    with running(create_app(engine, "guarded", api_key=KEY)) as base:
        yield base


def _client(url: str, key: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)


def test_the_clients_api_key_gets_in(url):
    resp = _client(url, KEY).chat.completions.create(**ASK)
    assert resp.choices[0].message.content == "The answer is \\boxed{118}."
    assert [m.id for m in _client(url, KEY).models.list().data] == ["guarded"]


@pytest.mark.parametrize("key", ["wrong", KEY[:-1], KEY + "0", KEY.upper()])
def test_a_wrong_key_gets_401_in_openais_shape(url, key):
    with pytest.raises(openai.AuthenticationError) as refused:
        _client(url, key).chat.completions.create(**ASK)
    assert refused.value.status_code == 401 and refused.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        _client(url, key).models.list()


@pytest.mark.parametrize("headers", [{}, {"authorization": KEY}, {"authorization": f"Basic {KEY}"},
                                     {"authorization": "Bearer"}, {"x-api-key": KEY}])
def test_a_missing_or_malformed_header_gets_401_and_health_stays_open(url, headers):
    for method, path in [("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/v1/models/guarded"),
                         ("GET", "/metrics"), ("GET", "/no/such/route")]:
        resp = httpx.request(method, f"{url}{path}", json=ASK, headers=headers)
        assert resp.status_code == 401, (path, resp.text)
        assert resp.headers["www-authenticate"] == "Bearer"
        assert resp.json() == {"error": {"message": resp.json()["error"]["message"], "type": "invalid_request_error",
                                         "param": None, "code": "invalid_api_key"}}
    assert httpx.get(f"{url}/health", headers=headers).json()["status"] == "ok"


def test_the_scheme_is_case_insensitive_and_extra_blanks_do_not_count(url):
    for value in (f"bearer {KEY}", f"BEARER  {KEY}"):  # (HTTP itself drops blanks at the ends)
        assert httpx.get(f"{url}/v1/models", headers={"authorization": value}).status_code == 200


def test_key_matching():
    key = KEY.encode()
    assert key_matches(f"Bearer {KEY}".encode(), key)
    assert not key_matches(f"Bearer {KEY}x".encode(), key) and not key_matches(f"Token {KEY}".encode(), key)
    assert not key_matches(b"", key) and not key_matches(b"Bearer", key)
    with pytest.raises(ValueError, match="empty"):
        BearerAuth(None, "  ")


def test_only_a_keyless_server_beyond_loopback_warns():
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert exposure_warning(host, None) is None
    for host in ("0.0.0.0", "::", "192.168.1.10", "myhost.example"):
        assert exposure_warning(host, KEY) is None
        warning = exposure_warning(host, None)
        assert warning.startswith(f"warning: serving on {host} without an API key") and "\n" not in warning


def test_the_command_reads_the_key_from_the_environment(monkeypatch):
    """``serve`` with ``TEAMPLAY_API_KEY`` set guards its app with that key; on 0.0.0.0 without a
    key it prints the one warning line; an empty key is refused. (``serve`` itself is replaced,
    so nothing listens; the app it was handed is driven in process.)"""
    from starlette.testclient import TestClient
    from typer.testing import CliRunner

    import teamplay.serving.api.server as server
    from teamplay.cli import app

    served = {}
    monkeypatch.setattr(server, "serve", lambda app_, host, port, on_ready=None: served.update(app=app_, host=host))
    args = ["serve", "--set", "backend.name=scripted", "--set", "protocol.name=single"]
    runner = CliRunner()
    result = runner.invoke(app, args, env={"TEAMPLAY_API_KEY": KEY})
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output
    with TestClient(served["app"]) as http:
        assert http.get("/v1/models").status_code == 401
        assert http.get("/v1/models", headers={"authorization": f"Bearer {KEY}"}).status_code == 200
        assert http.get("/health").status_code == 200

    result = runner.invoke(app, [*args, "--host", "0.0.0.0"], env={"TEAMPLAY_API_KEY": None})
    assert result.exit_code == 0 and served["host"] == "0.0.0.0"
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warnings == [exposure_warning("0.0.0.0", None)]
    with TestClient(served["app"]) as http:
        assert http.get("/v1/models").status_code == 200  # no key: open, as warned

    result = runner.invoke(app, [*args, "--api-key", " "])
    assert result.exit_code == 2
    assert "error: serve: the API key (--api-key or TEAMPLAY_API_KEY) is empty" in result.output
