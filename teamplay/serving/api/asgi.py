"""What the server's ASGI middlewares share (``auth``, ``metrics``, ``shutdown``): a middleware that
acts on HTTP requests only, and a JSON answer sent whole."""

from __future__ import annotations


class HttpMiddleware:
    """An ASGI middleware for HTTP requests: every other scope (lifespan, websocket) goes to ``app``
    untouched; a subclass implements :meth:`http` for the HTTP ones.

    Args:
        app: the ASGI app it wraps.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
        else:
            await self.http(scope, receive, send)

    async def http(self, scope, receive, send) -> None:
        """Handle one HTTP request (pass it on with ``self.app`` or answer it)."""
        raise NotImplementedError


async def send_json(send, status: int, body: bytes, *headers: tuple[bytes, bytes]) -> None:
    """Answer with the JSON ``body`` whole: the start (content type, content length, then ``headers``),
    then the body in one message."""
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})
