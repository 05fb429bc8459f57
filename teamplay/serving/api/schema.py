"""The wire format of ``teamplay serve``: OpenAI's chat-completions schema, plus one field of ours.

Requests and responses follow OpenAI's ``POST /v1/chat/completions`` and ``GET /v1/models``
(https://platform.openai.com/docs/api-reference/chat), so the official clients work unchanged.
What teamplay adds is the top-level ``teamplay`` field of a completion (``TeamplayInfo``): the
team's transcript and per-role usage of every episode. Standard clients ignore unknown fields.

Request fields the server reads: ``model``, ``messages``, ``max_tokens`` (or its newer name
``max_completion_tokens``), ``temperature``, ``top_p``, ``n``, ``stop``, ``seed``, ``stream`` and
``stream_options.include_usage`` (``teamplay.serving.api.streaming``).
Every other field OpenAI defines (``user``, ``logit_bias``, ``tools``, ...) is accepted and ignored.

Errors are ``{"error": {"message", "type", "param", "code"}}`` (``ErrorBody``) with a 4xx or 5xx
status, which the clients turn into their typed exceptions (``openai.BadRequestError``, ...).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# ------------------------------------------------------------------------------------ requests


class ContentPart(BaseModel):
    """One part of a multi-part message content; only ``{"type": "text", "text": ...}`` is read."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="Part type; the server accepts 'text' only.")
    text: str | None = Field(None, description="The text of a 'text' part.")


class ChatMessageIn(BaseModel):
    """One message of the conversation a client sends."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"] = Field(
        description="Author of the message.")
    content: str | list[ContentPart] | None = Field(None, description="Text, or a list of text parts.")


class StreamOptions(BaseModel):
    """``stream_options`` of a streamed request."""

    model_config = ConfigDict(extra="ignore")

    include_usage: bool = Field(False, description="A last chunk with the request's usage and no choices.")


class ChatCompletionRequest(BaseModel):
    """The body of ``POST /v1/chat/completions`` (OpenAI's fields; unknown ones are ignored).

    Ranges are checked here (a 400 naming the field); the limits of one server (longest
    question, most episodes per request, the config's token cap) are checked by the server.
    """

    model_config = ConfigDict(extra="ignore")

    model: str = Field(description="The served model id (GET /v1/models): the team's name.")
    messages: list[ChatMessageIn] = Field(min_length=1, description="The conversation; the team answers "
                                                                    "its last user message.")
    max_tokens: int | None = Field(None, ge=1, description="New tokens per agent message at most (never "
                                                           "more than the served config's).")
    max_completion_tokens: int | None = Field(None, ge=1, description="OpenAI's newer name of max_tokens; "
                                                                      "the smaller of the two applies.")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="Sampling temperature (0 = greedy); "
                                                                        "None: the config's.")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus mass; None: the config's.")
    n: int = Field(1, ge=1, description="Episodes to run (one choice each).")
    stop: str | list[str] | None = Field(None, description="Up to 4 strings; the returned content is cut "
                                                           "before the first one.")
    seed: int | None = Field(None, description="Seed of the request's episodes (see teamplay.serving.episodes.engine).")
    stream: bool | None = Field(False, description="Server-sent events of chat.completion.chunk objects "
                                                   "(teamplay.serving.api.streaming).")
    stream_options: StreamOptions | None = Field(None, description="Streaming options; only with stream=true.")

    def stop_strings(self) -> tuple[str, ...]:
        """``stop`` as a tuple (empty strings dropped)."""
        if self.stop is None:
            return ()
        values = [self.stop] if isinstance(self.stop, str) else self.stop
        return tuple(s for s in values if s)


# ------------------------------------------------------------------------------------ responses


class Usage(BaseModel):
    """Tokens of one completion, summed over the team's messages (``total = prompt + completion``)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def of(cls, prompt: int, completion: int) -> Usage:
        return cls(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


class RoleUsage(Usage):
    """``Usage`` of one role's messages, and how many model calls they took."""

    calls: int = 0

    def plus(self, other: RoleUsage) -> RoleUsage:
        return RoleUsage(prompt_tokens=self.prompt_tokens + other.prompt_tokens,
                         completion_tokens=self.completion_tokens + other.completion_tokens,
                         total_tokens=self.total_tokens + other.total_tokens, calls=self.calls + other.calls)


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str = Field(description="The team's final answer as the sentence every task extractor reads "
                                     "(``The answer is \\boxed{X}.``); empty when the team gave none.")


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop"] = "stop"
    logprobs: None = None


class TranscriptTurn(BaseModel):
    """One turn of one agent (a skipped turn has ``spoke = false`` and empty text)."""

    agent: str
    role: str
    stage: str
    round: int
    spoke: bool
    text: str
    answer: str | None = Field(description="The answer the task's extractor read from the text.")
    prompt_tokens: int
    completion_tokens: int


class EpisodeInfo(BaseModel):
    """What the team did for one choice."""

    index: int = Field(description="The choice this episode produced.")
    final_answer: str | None
    reward: float | None = Field(None, description="Verifier score of the final answer; only when the "
                                                   "question is one of the served task's problems.")
    transcript: list[TranscriptTurn]
    usage_by_role: dict[str, RoleUsage]


class TeamplayInfo(BaseModel):
    """The ``teamplay`` field of a completion: the team behind the answer."""

    task: str
    protocol: str
    problem_id: str = Field(description="The served task's problem id, or 'serve/...' for a new question.")
    reference_known: bool = Field(description="Whether the question is one of the served task's problems.")
    episodes: list[EpisodeInfo]
    usage_by_role: dict[str, RoleUsage] = Field(description="Per-role usage summed over the episodes.")


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None
    teamplay: TeamplayInfo


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "teamplay"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# ------------------------------------------------------------------------------------ errors


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class ApiError(Exception):
    """An error the server answers with OpenAI's error shape and ``status``.

    ``type`` follows OpenAI's names: ``invalid_request_error`` (4xx the client can fix),
    ``rate_limit_error`` (429), ``timeout_error`` (504), ``server_error`` (5xx).
    """

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = ErrorBody(error=ErrorDetail(message=message, type=type, param=param, code=code))

    def content(self) -> dict[str, Any]:
        return self.body.model_dump()
