"""Server-sent events: framing, what an upstream event means, and the gateway's own events.

The relay forwards upstream bytes as they came (never re-encoded), but only whole
events, so that a failure can always be followed by a well-formed error event.
Each event's ``data`` is decoded once (orjson) to learn whether it is the final
event, an in-band error, or carries usage; an undecodable event is dropped.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import Category
from gateway.providers import Endpoint


class Kind(enum.Enum):
    data = "data"
    final = "final"  # the upstream's last meaningful event: the answer is complete
    error = "error"  # an in-band error event
    done = "done"  # data: [DONE]
    comment = "comment"
    malformed = "malformed"


# The members as plain names, for the per-event code: on Python 3.11 ``Kind.data`` goes
# through ``EnumType.__getattr__`` (about 0.12 µs a lookup; a stream event made several).
DATA, FINAL, ERROR, DONE, COMMENT, MALFORMED = (
    Kind.data, Kind.final, Kind.error, Kind.done, Kind.comment, Kind.malformed
)  # fmt: skip
CHAT, MESSAGES, RESPONSES = Endpoint.chat, Endpoint.messages, Endpoint.responses


@dataclass(slots=True)
class Event:
    raw: bytes  # the event as received, including its trailing blank line
    kind: Kind
    data: Any = None


class Splitter:
    """Accumulates body pieces and yields whole events."""

    __slots__ = ("_buf",)

    #: Undecodable events it dropped itself: none (the relay finds them, classifying each
    #: event); a translating splitter drops and counts them (gateway.translate.Splitter).
    malformed = 0

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, piece: bytes) -> list[bytes]:
        end = piece.find(b"\n\n")
        if end > 0 and end == len(piece) - 2 and not self._buf and b"\r" not in piece:
            return [piece]  # the usual piece: exactly one whole event
        if b"\r" in piece:
            piece = piece.replace(b"\r\n", b"\n")
        buf = self._buf + piece if self._buf else piece
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._buf = buf
            return []
        if end == len(buf) - 2 and buf.find(b"\n\n") == end and not buf.startswith(b"\n"):
            self._buf = b""
            return [buf]  # a piece that completes the event begun before
        self._buf = buf[end + 2 :]
        return [e + b"\n\n" for e in buf[:end].split(b"\n\n") if e]

    def close(self) -> list[bytes]:
        """Events owed when the upstream body ended: none (a translating splitter may owe
        the client's closing events, see :class:`gateway.translate.Splitter`)."""
        return []

    @property
    def pending(self) -> bytes:
        return self._buf


def _data_of(event: bytes) -> bytes | None:
    if event.startswith(b"data:") and b"\ndata:" not in event:  # the common case: one data line
        return event[5:].strip()
    lines = [ln[5:].lstrip() for ln in event.split(b"\n") if ln.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


_FINAL_TYPES = {
    RESPONSES: frozenset({"response.completed", "response.incomplete"}),
    MESSAGES: frozenset({"message_stop"}),
}
_ERROR_TYPES = frozenset({"error", "response.failed"})


def classify_event(raw: bytes, endpoint: Endpoint) -> Event:
    """What one upstream event means for the relay."""
    if raw.startswith(b"data: {") and raw.find(b"\n") == len(raw) - 2:
        data: bytes | None = raw[6:-2]  # the usual event: one JSON data line
    elif (
        raw.startswith(b"event: ")
        and (i := raw.find(b"\ndata: {")) > 0
        and raw.find(b"\n", i + 1) == len(raw) - 2
    ):
        data = raw[i + 7 : -2]  # Anthropic's and Responses' usual: a name, one JSON data line
    elif raw.startswith(b":"):
        return Event(raw, COMMENT)
    else:
        data = _data_of(raw.rstrip(b"\n"))
    if data is None:
        return Event(raw, COMMENT)  # event:/id:/retry: only
    if data == b"[DONE]":
        return Event(raw, DONE)
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return Event(raw, MALFORMED)
    if type(obj) is not dict:
        return Event(raw, MALFORMED)
    etype = obj.get("type")
    if type(etype) is not str:  # absent (chat), or not a name at all
        etype = None
        if "error" in obj and "choices" not in obj:
            return Event(raw, ERROR, obj)
    elif etype in _ERROR_TYPES:
        return Event(raw, ERROR, obj)
    finals = _FINAL_TYPES.get(endpoint)
    if finals is not None:
        return Event(raw, FINAL if etype in finals else DATA, obj)
    choices = obj.get("choices")
    if choices and type(choices) is list:
        for c in choices:
            if type(c) is dict and c.get("finish_reason"):
                return Event(raw, FINAL, obj)
    return Event(raw, DATA, obj)


def is_error_event(raw: bytes) -> bool:
    """An in-band error event, in whichever API's form (the test is the same for all)."""
    return classify_event(raw, CHAT).kind is ERROR


_PREAMBLE_TYPES = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "message_start",
        "content_block_start",
        "ping",
    }
)


def is_preamble(ev: Event) -> bool:
    """An event that comes before any content (roles, ids, empty blocks).

    The relay holds these back until the first real event, so that an error right
    after them is still a failed attempt, recovered invisibly.
    """
    if ev.kind is COMMENT:
        return True
    if ev.kind is not DATA:
        return False
    obj = ev.data
    etype = obj.get("type")
    if etype is not None:
        if etype == "content_block_start":
            block = obj.get("content_block") or {}
            return block.get("type") == "text" and not block.get("text")
        if etype == "response.output_item.added":
            return (obj.get("item") or {}).get("type") == "message"
        return etype in _PREAMBLE_TYPES
    choices = obj.get("choices")
    if not choices:
        return False
    for c in choices:
        delta = c.get("delta") if isinstance(c, dict) else None
        if not isinstance(delta, dict) or c.get("finish_reason") or delta.get("tool_calls"):
            return False
        if delta.get("content") or delta.get("reasoning_content") or c.get("text"):
            return False
    return True


def usage_of(obj: Any, endpoint: Endpoint) -> tuple[int, int] | None:
    """(prompt, completion) tokens carried by one decoded event, if any. Counts are the
    stream's so far (an Anthropic ``message_delta`` repeats the input tokens of
    ``message_start``, or brings them when they were not known then): a stream's tokens are
    the largest it reported."""
    if not isinstance(obj, dict):
        return None
    if endpoint is MESSAGES:
        etype = obj.get("type")
        if etype == "message_start":
            u = (obj.get("message") or {}).get("usage") or {}
            return int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
        if etype == "message_delta":  # cumulative counts; input ones too when known late
            u = obj.get("usage") or {}
            return int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
        return None
    if endpoint is RESPONSES:
        if obj.get("type") in _FINAL_TYPES[RESPONSES]:
            u = (obj.get("response") or {}).get("usage") or {}
            return int(u.get("input_tokens") or 0), int(u.get("output_tokens") or 0)
        return None
    u = obj.get("usage")
    if isinstance(u, dict):
        return int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
    return None


KEEPALIVE = b": keepalive\n\n"


def retry_comment(attempt: int, wait: float, category: Category) -> bytes:
    return (
        f": gateway api_retry attempt={attempt} wait_seconds={wait:.1f} "
        f"category={category.value}\n\n"
    ).encode()


def error_event(
    endpoint: Endpoint, etype: str, message: str, code: str | None = None, response_id: str = ""
) -> bytes:
    """The in-band error event of the endpoint's dialect, so that the client's SDK raises.

    Responses streams get ``event: error`` (the OpenAI SDK raises on it) followed by
    ``response.failed`` (what the Codex CLI reads to report why a stream failed).
    """
    if endpoint is MESSAGES:
        body = {"type": "error", "error": {"type": etype, "message": message}}
        return b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"
    err = {"type": etype, "code": code or etype, "message": message, "param": None}
    if endpoint is RESPONSES:
        body = {"type": "error", "error": err, "code": code or etype, "message": message}
        failed = {
            "type": "response.failed",
            "response": {
                "id": response_id or "resp_gateway_error",
                "object": "response",
                "status": "failed",
                "output": [],
                "error": {"code": code or etype, "message": message},
            },
        }
        return (
            b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"
            b"event: response.failed\ndata: " + orjson.dumps(failed) + b"\n\n"
        )
    return b"data: " + orjson.dumps({"error": err}) + b"\n\n"
