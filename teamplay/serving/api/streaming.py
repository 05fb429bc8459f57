"""``stream: true``: a completion as server-sent events in OpenAI's ``chat.completion.chunk`` format.

The events of one request, each ``data: {json}\\n\\n``:

1. per choice, at once: ``delta = {"role": "assistant", "content": ""}`` (the client sees the
   answer has begun while the team works);
2. when the team's episodes end, per choice: ``delta = {"content": ANSWER}`` (the whole final
   answer in one chunk: a team's answer exists only once its last turn is taken), then ``delta = {}``
   with ``finish_reason: "stop"``;
3. with ``stream_options.include_usage``: a last chunk with ``choices: []`` and the request's
   ``usage`` (every earlier chunk carries ``usage: null``, as OpenAI's do);
4. ``data: [DONE]``.

The last chunk before ``[DONE]`` also carries the ``teamplay`` field (transcripts, per-role usage)
of the non-streamed completion. An error after the stream began (timeout, a failed run, shutdown)
is sent as one ``data: {"error": {...}}`` event in OpenAI's error shape, which the ``openai``
client raises as ``APIError``, and the stream ends without ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from teamplay.serving.api.schema import ApiError, ChatCompletion

DONE = b"data: [DONE]\n\n"


def event(data: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``data`` as compact JSON."""
    return b"data: " + json.dumps(data, separators=(",", ":")).encode("utf-8") + b"\n\n"


async def stream_completion(answer: Awaitable[ChatCompletion], *, request_id: str, model: str, created: int,
                            n: int, include_usage: bool) -> AsyncIterator[bytes]:
    """The events of one request whose completion ``answer`` will give (see the module doc)."""

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        body: dict[str, Any] = {"id": request_id, "object": "chat.completion.chunk", "created": created,
                                "model": model, "system_fingerprint": None, "choices": choices}
        if include_usage:
            body["usage"] = None
        return event({**body, **extra})

    def choice(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}

    pending = asyncio.ensure_future(answer)  # queued now, before the first event goes out
    try:
        for i in range(n):
            yield chunk([choice(i, {"role": "assistant", "content": ""})])
        completion = await pending
    except ApiError as exc:
        yield event(exc.content())
        return
    except Exception as exc:  # noqa: BLE001 - a bug: the client still gets an error in OpenAI's shape
        yield event(ApiError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error").content())
        return
    finally:  # the client hung up (the stream was cancelled or closed): a queued request leaves the queue
        if not pending.done():
            pending.cancel()
    teamplay = completion.teamplay.model_dump()
    last = len(completion.choices) - 1
    for c in completion.choices:
        yield chunk([choice(c.index, {"content": c.message.content})])
        if c.index == last and not include_usage:
            yield chunk([choice(c.index, {}, c.finish_reason)], teamplay=teamplay)
        else:
            yield chunk([choice(c.index, {}, c.finish_reason)])
    if include_usage:
        yield chunk([], usage=completion.usage.model_dump(), teamplay=teamplay)
    yield DONE
