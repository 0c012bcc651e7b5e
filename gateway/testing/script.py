# long: the catalogue of script steps; Error alone holds every provider's ready-made error answer
"""Script steps for :class:`gateway.testing.FakeProvider`.

A *step* decides how the fake provider answers one request. Steps are plain frozen
dataclasses; a request consumes one entry of the script, and an entry is either one
step or a tuple of steps that apply together (``(SlowFirstByte(0.2), CutAfter(3))``).

Before any byte is sent:

- :class:`Error` -- answer an HTTP error (with realistic ready-made bodies and headers).
- :class:`Reset` -- abort the TCP connection (RST) without any response.
- :class:`Hang` -- accept and never answer, until the client goes away.
- :class:`SlowFirstByte` -- wait before sending the headers, then answer normally.
- :class:`HeadersThenSilence` -- send ``200`` and the headers, then nothing.

Shaping a successful answer:

- :class:`Success` -- force the text, finish reason, tool call or usage.

Faults of a successful stream (``n`` always counts *content deltas*: text pieces or
tool-argument pieces; every event before the first delta, such as the role chunk,
``message_start`` or ``response.created``, is always sent; an ``n`` beyond the
answer's deltas means "after the last delta", before the finish event):

- :class:`CutAfter` -- send ``n`` deltas, then abort the connection.
- :class:`StallAfter` -- send ``n`` deltas, then stall forever.
- :class:`ErrorEventAfter` -- send ``n`` deltas, then the API's own in-stream error event.
- :class:`MalformedEventAt` -- after ``n`` deltas insert ``data: {not json`` and go on.
- :class:`NoDone` -- OpenAI streams end after the finish chunk without ``data: [DONE]``;
  Gemini streams end cleanly without the chunk that carries ``finishReason``.
- :class:`Delay` -- sleep before every delta.

A broken provider:

- :class:`Tamper` -- rewrite the JSON of the answer (or of each stream event) before it
  is sent: wrongly typed fields, missing ones, anything.

``CutAfter`` and ``StallAfter`` also apply to non-streamed requests: the headers and
the first half of the JSON body are sent, then the connection is aborted / stalls.
The other stream faults do not change a non-streamed answer.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from gateway.testing.error_bodies import (
    GEMINI_DEADLINE,
    GEMINI_INTERNAL,
    GEMINI_NO_KEY,
    GEMINI_OVERLOADED,
    OPENAI_SERVER_MESSAGE,
    ZHIPU_CODES,
    anthropic_error,
    context_length_body,
    gemini_key_invalid,
    gemini_quota,
    gemini_too_long,
    google_error,
    openai_error,
)

#: The wire format an error body is rendered in: the format of the endpoint called.
ApiStyle: TypeAlias = Literal["openai", "anthropic", "gemini"]
#: An error body: JSON (dict/list), raw text or bytes, nothing, or a function of the
#: endpoint's :data:`ApiStyle` returning one of those.
Body: TypeAlias = "dict[str, Any] | list[Any] | str | bytes | Callable[[str], Any] | None"


#: Google's 401 message (the body of ``Error.unauthorized()`` on a Gemini endpoint).
_UNAUTHENTICATED = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential. See "
    "https://developers.google.com/identity/sign-in/web/devconsole-project."
)


def _seconds(value: float) -> str:
    """``20.0`` -> ``"20"``, ``1.5`` -> ``"1.5"`` (how providers print waits)."""
    return f"{value:g}"


@dataclass(frozen=True)
class Error:
    """Answer ``status`` with ``body`` and ``headers`` before any other byte.

    ``body`` is a dict/list (sent as JSON), a str or bytes (sent as is, with
    ``content_type``), ``None`` (empty body), or a callable taking the endpoint's
    style (``"openai"``, ``"anthropic"`` or ``"gemini"``) and returning one of those: the generic
    constructors use it so that one step looks right on every endpoint. ``quote``: names of
    request headers whose values the body quotes, as a provider that echoes the request it
    refused does: each ``{name}`` in the body is replaced by that header's value.
    """

    status: int
    body: Body = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str | None = None
    quote: tuple[str, ...] = ()

    def render(self, style: str) -> tuple[bytes, str]:
        """The body bytes and content type of this error on an endpoint of ``style``."""
        body = self.body(style) if callable(self.body) else self.body
        if body is None:
            return b"", self.content_type or "application/json"
        if isinstance(body, bytes):
            return body, self.content_type or "application/octet-stream"
        if isinstance(body, str):
            return body.encode(), self.content_type or "text/plain; charset=utf-8"
        return json.dumps(body, ensure_ascii=False).encode(), (
            self.content_type or "application/json"
        )

    # --- OpenAI ---------------------------------------------------------------------

    @classmethod
    def openai_rate_limit(
        cls,
        retry_after: float | None = None,
        retry_after_ms: float | None = None,
        message: str | None = None,
    ) -> Error:
        """429 ``rate_limit_exceeded``; the wait (if any) in the headers and the message.

        With ``retry_after`` the response carries ``retry-after`` and
        ``x-ratelimit-reset-requests``; with ``retry_after_ms`` it carries
        ``retry-after-ms``. Without either, nothing hints at a wait.
        """
        headers = {
            "x-ratelimit-limit-requests": "3",
            "x-ratelimit-remaining-requests": "0",
            "x-ratelimit-limit-tokens": "40000",
            "x-ratelimit-remaining-tokens": "39900",
        }
        hint = ""
        if retry_after is not None:
            headers["retry-after"] = _seconds(retry_after)
            headers["x-ratelimit-reset-requests"] = f"{_seconds(retry_after)}s"
            hint = f" Please try again in {_seconds(retry_after)}s."
        if retry_after_ms is not None:
            headers["retry-after-ms"] = _seconds(retry_after_ms)
            hint = hint or f" Please try again in {_seconds(retry_after_ms)}ms."
        if message is None:
            message = (
                "Rate limit reached for fake-model in organization org-fake on requests "
                "per min (RPM): Limit 3, Used 3, Requested 1." + hint
            )
        body = openai_error(message, "requests", "rate_limit_exceeded")
        return cls(429, body, headers)

    @classmethod
    def openai_quota(cls) -> Error:
        """429 ``insufficient_quota``: not a rate limit, retrying does not help."""
        message = (
            "You exceeded your current quota, please check your plan and billing details. "
            "For more information on this error, read the docs: "
            "https://platform.openai.com/docs/guides/error-codes/api-errors."
        )
        return cls(429, openai_error(message, "insufficient_quota", "insufficient_quota"))

    @classmethod
    def openai_server(cls, status: int = 500) -> Error:
        """A 5xx ``server_error`` as OpenAI sends it."""
        return cls(status, openai_error(OPENAI_SERVER_MESSAGE, "server_error"))

    @classmethod
    def overloaded_503(cls) -> Error:
        """503 ``server_is_overloaded`` (OpenAI's ``service_unavailable_error``)."""
        body = openai_error(
            "The server is overloaded or not ready yet.",
            "service_unavailable_error",
            "server_is_overloaded",
        )
        return cls(503, body)

    # --- Anthropic ------------------------------------------------------------------

    @classmethod
    def anthropic_overloaded(cls) -> Error:
        """529 ``overloaded_error``."""
        return cls(529, anthropic_error("overloaded_error", "Overloaded"))

    @classmethod
    def anthropic_server(cls, status: int = 500) -> Error:
        """A 5xx ``api_error``."""
        return cls(status, anthropic_error("api_error", "Internal server error"))

    @classmethod
    def anthropic_rate_limit(cls, retry_after: float | None = None) -> Error:
        """429 ``rate_limit_error`` with ``anthropic-ratelimit-*`` headers.

        The ``*-reset`` headers are RFC 3339 times ``retry_after`` seconds (default
        60) after the step was built; ``retry-after`` is sent only when given.
        """
        wait = 60.0 if retry_after is None else retry_after
        reset = _dt.datetime.now(_dt.UTC) + _dt.timedelta(seconds=wait)
        reset_text = reset.strftime("%Y-%m-%dT%H:%M:%SZ")
        headers = {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": reset_text,
            "anthropic-ratelimit-tokens-limit": "40000",
            "anthropic-ratelimit-tokens-remaining": "0",
            "anthropic-ratelimit-tokens-reset": reset_text,
        }
        if retry_after is not None:
            headers["retry-after"] = _seconds(retry_after)
        message = (
            "This request would exceed the rate limit for your organization of 50 requests "
            "per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. "
            "You can see the response headers for current usage. Please reduce the prompt "
            "length or the maximum tokens requested, or try again later."
        )
        return cls(429, anthropic_error("rate_limit_error", message), headers)

    # --- Gemini (Google AI Studio; Vertex passes the same bodies) ------------------------
    # Google sends no retry-after header: the wait is in the body's RetryInfo, if anywhere.

    @classmethod
    def gemini_rate_limit(
        cls, retry_delay: str | None = "2s", per_day: bool = False, model: str = "gemini-2.5-flash"
    ) -> Error:
        """429 ``RESOURCE_EXHAUSTED``: the per-minute (or, ``per_day``, the per-day) request
        quota of ``model``, with ``google.rpc.QuotaFailure`` and, unless ``retry_delay`` is
        ``None``, ``google.rpc.RetryInfo`` (``retryDelay``, e.g. ``"2s"``) in its details."""
        return cls(429, gemini_quota(retry_delay, per_day, model))

    @classmethod
    def gemini_overloaded(cls) -> Error:
        """503 ``UNAVAILABLE``, "The model is overloaded. Please try again later"."""
        return cls(503, google_error(503, "UNAVAILABLE", GEMINI_OVERLOADED))

    @classmethod
    def gemini_internal(cls) -> Error:
        """500 ``INTERNAL``, "An internal error has occurred. Please retry or report in ..."."""
        return cls(500, google_error(500, "INTERNAL", GEMINI_INTERNAL))

    @classmethod
    def gemini_deadline(cls) -> Error:
        """504 ``DEADLINE_EXCEEDED``: the model did not answer within Google's deadline."""
        return cls(504, google_error(504, "DEADLINE_EXCEEDED", GEMINI_DEADLINE))

    @classmethod
    def gemini_prompt_too_long(cls, count: int, limit: int) -> Error:
        """400 ``INVALID_ARGUMENT``, "The input token count (``count``) exceeds the maximum
        number of tokens allowed (``limit``)"."""
        return cls(400, gemini_too_long(count, limit))

    @classmethod
    def gemini_auth(cls, missing: bool = False) -> Error:
        """400 ``INVALID_ARGUMENT`` with reason ``API_KEY_INVALID`` (a key Gemini does not
        know), or with ``missing`` the 403 ``PERMISSION_DENIED`` of a request with no key."""
        if missing:
            return cls(403, google_error(403, "PERMISSION_DENIED", GEMINI_NO_KEY))
        return cls(400, gemini_key_invalid())

    # --- in the format of the endpoint called -----------------------------------------

    @classmethod
    def unauthorized(cls, style: ApiStyle | None = None) -> Error:
        """401 in the endpoint's format (or ``style``'s)."""

        def body(endpoint_style: str) -> dict[str, Any]:
            if (style or endpoint_style) == "anthropic":
                return anthropic_error("authentication_error", "invalid x-api-key")
            if (style or endpoint_style) == "gemini":
                return google_error(401, "UNAUTHENTICATED", _UNAUTHENTICATED)
            message = (
                "Incorrect API key provided: sk-fake***. You can find your API key at "
                "https://platform.openai.com/account/api-keys."
            )
            return openai_error(message, "invalid_request_error", "invalid_api_key")

        return cls(401, body)

    @classmethod
    def bad_request(cls, message: str = "Invalid request.", style: ApiStyle | None = None) -> Error:
        """400 ``invalid_request_error`` with ``message``, in the endpoint's format."""

        def body(endpoint_style: str) -> dict[str, Any]:
            if (style or endpoint_style) == "anthropic":
                return anthropic_error("invalid_request_error", message)
            if (style or endpoint_style) == "gemini":
                return google_error(400, "INVALID_ARGUMENT", message)
            return openai_error(message, "invalid_request_error")

        return cls(400, body)

    @classmethod
    def context_length(
        cls,
        limit: int,
        got: int,
        style: Literal["openai", "anthropic", "vllm", "gemini"] | None = None,
        completion: int = 0,
    ) -> Error:
        """400 prompt-too-long: ``got`` prompt tokens against a window of ``limit``.

        ``style`` picks the provider's wording (default: the endpoint's format):
        OpenAI ``context_length_exceeded``, Anthropic ``prompt is too long: M tokens >
        N maximum``, vLLM's ``(parameter=input_tokens, value=M)``, or Gemini's
        ``The input token count (M) exceeds the maximum number of tokens allowed (N).``
        """

        def body(endpoint_style: str) -> dict[str, Any]:
            return context_length_body(style or endpoint_style, limit, got, completion)

        return cls(400, body)

    @classmethod
    def zhipu(cls, code: int, message: str | None = None, status: int | None = None) -> Error:
        """A Zhipu (GLM) error: ``{"error": {"code": "1302", "message": ...}}``.

        Known codes (:data:`ZHIPU_CODES`) bring their documented message and status;
        Zhipu sends no ``Retry-After`` or rate-limit headers.
        """
        default_status, default_message = ZHIPU_CODES.get(code, (400, "请求失败"))
        body = {
            "error": {"code": str(code), "message": message or default_message},
            "request_id": "fake-zhipu-request",
        }
        return cls(status or default_status, body)


@dataclass(frozen=True)
class Reset:
    """Abort the connection (TCP RST) without sending any response."""


@dataclass(frozen=True)
class Hang:
    """Accept the request and never answer, until the client goes away."""


@dataclass(frozen=True)
class SlowFirstByte:
    """Wait ``delay_s`` seconds before sending the headers, then answer normally."""

    delay_s: float


@dataclass(frozen=True)
class HeadersThenSilence:
    """Send ``200`` and the headers (SSE headers for a stream), then nothing."""


@dataclass(frozen=True)
class Success:
    """Force a successful answer.

    ``text`` replaces the model's full reply (max-tokens cuts and continuation still
    apply); ``finish_reason`` is reported as given (OpenAI names are translated for
    Anthropic: stop -> end_turn, length -> max_tokens, tool_calls -> tool_use,
    content_filter -> refusal; Responses: length/content_filter -> ``incomplete``; Gemini:
    stop and tool_calls -> STOP, length -> MAX_TOKENS, content_filter -> SAFETY, and
    Gemini's own names as given: ``Success(finish_reason="RECITATION")``);
    ``tool_call`` is a tool name or ``{"name": ..., "arguments": {...}}`` and is
    answered even when the request has no tools; ``usage`` overrides the counted
    ``{"prompt_tokens": .., "completion_tokens": ..}`` and the prompt cache's
    ``{"cache_read": .., "cache_write": ..}`` (parts of the prompt; a forced
    ``prompt_tokens`` without them reports no cache); ``headers`` are added to the
    answer's (e.g. ``x-ratelimit-remaining-requests``).
    """

    text: str | None = None
    finish_reason: str | None = None
    tool_call: str | dict[str, Any] | None = None
    usage: dict[str, int] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CutAfter:
    """Send ``n_chunks`` content deltas of the stream, then abort the connection."""

    n_chunks: int


@dataclass(frozen=True)
class StallAfter:
    """Send ``n_chunks`` content deltas, then stall until the client goes away."""

    n_chunks: int


@dataclass(frozen=True)
class ErrorEventAfter:
    """Send ``n_chunks`` content deltas, then an in-stream error event, then end.

    The event is the API's own: OpenAI chat/completions ``data: {"error": {...}}``,
    Anthropic ``event: error`` (``overloaded_error`` by default), Responses
    ``event: error`` with ``{"type": "error", "sequence_number": .., "error": {...}}``,
    Gemini ``data: {"error": {"code": 503, "message": .., "status": "UNAVAILABLE"}}``.
    ``payload`` replaces the JSON data of the event.
    """

    n_chunks: int
    payload: dict[str, Any] | None = None


@dataclass(frozen=True)
class MalformedEventAt:
    """After ``n`` content deltas insert one undecodable ``data: {not json`` event."""

    n: int


@dataclass(frozen=True)
class NoDone:
    """End an OpenAI stream after its finish chunk without ``data: [DONE]``; end a Gemini
    stream cleanly after its last content chunk, without the chunk carrying
    ``finishReason`` and the final usage."""


@dataclass(frozen=True)
class Delay:
    """Sleep ``per_chunk_s`` seconds before every content delta of a stream."""

    per_chunk_s: float


@dataclass(frozen=True)
class Tamper:
    """Rewrite what is sent: ``rewrite(data, index)`` gets the decoded JSON answer
    (``index`` -1) or the decoded data of each stream event (``index``: its place in the
    stream, counting every event; ``[DONE]`` and undecodable events are sent as they are)
    and returns the JSON value to send in its place (the event keeps its name)."""

    rewrite: Callable[[Any, int], Any]


Step: TypeAlias = (
    Error
    | Reset
    | Hang
    | SlowFirstByte
    | HeadersThenSilence
    | Success
    | CutAfter
    | StallAfter
    | ErrorEventAfter
    | MalformedEventAt
    | NoDone
    | Delay
    | Tamper
)
#: One script entry: a step, or several steps applied to the same request.
ScriptEntry: TypeAlias = Step | tuple[Step, ...]

__all__ = [
    "ZHIPU_CODES",
    "ApiStyle",
    "CutAfter",
    "Delay",
    "Error",
    "ErrorEventAfter",
    "Hang",
    "HeadersThenSilence",
    "MalformedEventAt",
    "NoDone",
    "Reset",
    "ScriptEntry",
    "SlowFirstByte",
    "StallAfter",
    "Step",
    "Success",
    "Tamper",
    "context_length_body",
]
