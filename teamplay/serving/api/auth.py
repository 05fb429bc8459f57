"""Bearer-key authentication of ``teamplay serve`` (an ASGI middleware).

With a key set, every HTTP request but ``GET /health`` must carry ``Authorization: Bearer KEY``
(the header the official ``openai`` client sends from its ``api_key``); anything else gets 401 in
OpenAI's error shape (code ``invalid_api_key``) before the app reads the body. The key is compared
with ``hmac.compare_digest``, whose time does not depend on where the two first differ, so a
client cannot find the key byte by byte by timing the answers.

``/health`` stays open: load balancers and orchestrators probe it without credentials, and it
tells nothing but the queue length and counters.
"""

from __future__ import annotations

import hmac
import ipaddress
import json

from teamplay.serving.api.asgi import HttpMiddleware, send_json

#: paths answered without a key
OPEN_PATHS = frozenset({"/health"})
#: the environment variable ``teamplay serve`` reads the key from (keeps it out of shell history)
API_KEY_ENV = "TEAMPLAY_API_KEY"


def key_matches(header: bytes | None, key: bytes) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer KEY`` (scheme case-insensitive).

    >>> key_matches(b"Bearer s3cret", b"s3cret"), key_matches(b"bearer s3cret", b"s3cret")
    (True, True)
    >>> key_matches(b"Bearer s3cre", b"s3cret"), key_matches(None, b"s3cret"), key_matches(b"s3cret", b"s3cret")
    (False, False, False)
    """
    if header is None:
        return False
    scheme, _, given = header.strip().partition(b" ")
    # compare_digest on the whole value even when the scheme is wrong: one code path, one timing
    return hmac.compare_digest(given.strip(), key) & (scheme.lower() == b"bearer")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` reaches this machine only (``localhost`` or a loopback address).

    >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """The one warning line for a server reachable from the network with no key, else None."""
    if api_key or is_loopback(host):
        return None
    return (f"warning: serving on {host} without an API key: anyone who can reach this address can use the "
            f"team; set --api-key or {API_KEY_ENV}")


_UNAUTHORIZED = json.dumps({"error": {
    "message": "Incorrect or missing API key: send the header 'Authorization: Bearer <key>' "
               "(the openai client's api_key)",
    "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}).encode()


class BearerAuth(HttpMiddleware):
    """ASGI middleware: 401 for an HTTP request without the right bearer key (see the module doc).

    Args:
        app: the ASGI app it guards.
        key: the API key (non-empty).
    """

    def __init__(self, app, key: str) -> None:
        if not key.strip():
            raise ValueError("the API key is empty")
        super().__init__(app)
        self.key = key.strip().encode("utf-8")  # as the header's value is read: surrounding blanks dropped

    async def http(self, scope, receive, send) -> None:
        if scope["path"] in OPEN_PATHS or key_matches(dict(scope["headers"]).get(b"authorization"), self.key):
            await self.app(scope, receive, send)
        else:
            await send_json(send, 401, _UNAUTHORIZED, (b"www-authenticate", b"Bearer"))
