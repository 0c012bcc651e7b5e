"""Server-sent events: framing, what an upstream event means, and the gateway's own events.

The relay forwards upstream bytes as they came (never re-encoded), but only whole
events, so that a failure can always be followed by a well-formed error event.
Each event's ``data`` is decoded once (orjson) to learn whether it is the final
event, an in-band error, or carries usage; an undecodable event is dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from orjson import JSONDecodeError, loads

from gateway.errors import Category
from gateway.formats.event_kinds import COMMENT as COMMENT  # re-exported, as all of these
from gateway.formats.event_kinds import DATA as DATA
from gateway.formats.event_kinds import DONE as DONE
from gateway.formats.event_kinds import ERROR as ERROR
from gateway.formats.event_kinds import FINAL as FINAL
from gateway.formats.event_kinds import MALFORMED as MALFORMED
from gateway.formats.event_kinds import Kind as Kind

if TYPE_CHECKING:
    from gateway.formats.usage import Usage


class EventRules(Protocol):
    """What reading an upstream event asks of a stream's format (a
    :class:`~gateway.formats.Format`)."""

    @property
    def final_events(self) -> frozenset[str] | None: ...
    def event_usage(self, obj: dict[str, Any], so_far: Usage | None) -> Usage | None: ...


class EventEndpoint(Protocol):
    """An endpoint as the framing reads it (a :class:`gateway.formats.endpoints.Endpoint`):
    declared here, so that the framing loads no format."""

    @property
    def fmt(self) -> EventRules: ...


@dataclass(slots=True)
class Event:
    raw: bytes  # the event as received, including its trailing blank line
    kind: Kind
    data: Any = None


#: An event's fields as a plain tuple, ``(raw, kind, data)``: what the relay classifies each
#: event into. Making an :class:`Event` (a call of its ``__init__``) costs more than decoding
#: the rest of a chat event; the relay makes one only for an event it keeps.
Classified = tuple[bytes, Kind, Any]


class Splitter:
    """Accumulates body pieces and yields whole events."""

    __slots__ = ("_buf",)

    #: Undecodable events it dropped itself: none (the relay finds them, classifying each
    #: event); a translating splitter drops and counts them
    #: (gateway.translate.convert.TranslatingSplitter).
    malformed = 0
    #: The counts the provider reported that the events it yields do not carry: none (its
    #: events are the provider's, counts and all); a translating splitter's are those it
    #: read so far (an Anthropic ``message_start``'s, which a chat client's events carry
    #: only in the usage chunk at the end).
    usage: Usage | None = None

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, piece: bytes) -> list[bytes]:
        # ``13 in`` (an int) is a memchr; ``b"\r" in`` is not (it tries the bytes as an int
        # first, raising and clearing a TypeError)
        if not self._buf:
            if 13 not in piece:
                if _one_event(piece):
                    return [piece]  # the usual piece: exactly one whole event
            elif piece[-4:] == b"\r\n\r\n" and piece.count(13) == 2:
                one = piece[:-4] + b"\n\n"  # Google's framing: one event, CRLF ended
                if _one_event(one):
                    return [one]
        return self._split(piece)

    def _split(self, piece: bytes) -> list[bytes]:
        """The general path: any framing, ``\r\n`` line ends, an event over several pieces."""
        held = self._buf
        if held[-1:] == b"\r" and piece[:1] == b"\n":
            held = held[:-1]  # a \r\n split between two pieces: one \n
        if 13 in piece:  # the piece alone: a long event's pieces are not scanned again
            piece = piece.replace(b"\r\n", b"\n")
        buf = held + piece if held else piece
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
        the client's closing events, see :class:`gateway.translate.convert.TranslatingSplitter`)."""
        return []

    @property
    def pending(self) -> bytes:
        return self._buf


def _one_event(piece: bytes) -> bool:
    """Whether ``piece`` (``\n`` line ends) is one whole event: its first blank line ends it.

    Line by line with single-byte finds (memchr): CPython's search for ``b"\n\n"`` goes
    byte by byte, and an event has one or two lines.
    """
    last = len(piece) - 2
    i = piece.find(b"\n")
    while 0 < i < last:
        j = piece.find(b"\n", i + 1)
        if j == i + 1:
            return False  # a blank line before the end: more than one event
        i = j
    return i == last and i > 0 and piece[-1] == 10


def _data_of(event: bytes) -> bytes | None:
    if event.startswith(b"data:") and b"\ndata:" not in event:  # the common case: one data line
        return event[5:].strip()
    lines = [ln[5:].lstrip() for ln in event.split(b"\n") if ln.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


_ERROR_TYPES = frozenset({"error", "response.failed"})


def classify_event(raw: bytes, endpoint: EventEndpoint) -> Event:
    """What one upstream event means for the relay."""
    finals = endpoint.fmt.final_events
    return Event(*(_classify_choices(raw) if finals is None else _classify_typed(raw, finals)))


def classifier(endpoint: EventEndpoint) -> Callable[[bytes], Classified]:
    """:func:`classify_event` for the events of one endpoint's stream (the relay's, decided
    once a stream), as a :data:`Classified` tuple. The usual event takes a fast path that
    returns what :func:`_classify` would (tests/test_sse_fast.py holds them to it)."""
    finals = endpoint.fmt.final_events
    if finals is None:
        return _classify_choices

    def classify(raw: bytes) -> Classified:
        return _classify_typed(raw, finals)

    return classify


def _classify_choices(raw: bytes) -> Classified:
    """An event of chat or completions, whose final event has a ``finish_reason``."""
    if raw[:7] == b"data: {":
        body = raw[6:-2]
        if 10 not in body and raw[-2] == 10:  # one JSON data line: the usual event
            try:
                obj = loads(body)  # begins with "{": a dict, or it does not decode
            except JSONDecodeError:
                return raw, MALFORMED, None
            choices = obj.get("choices")
            if type(choices) is list and "type" not in obj:  # choices and no type: no error
                for c in choices:
                    if (
                        type(c) is dict
                        and c.get("finish_reason")
                        and type(c["finish_reason"]) is str  # a reason of another type: none
                    ):
                        return raw, FINAL, obj
                return raw, DATA, obj
            return _meaning(raw, obj, None)
    return _classify(raw, None)


def _classify_typed(raw: bytes, finals: frozenset[str]) -> Classified:
    """An event of Messages or Responses, whose final event has one of the types ``finals``."""
    if raw[:7] == b"event: " and (i := raw.find(b"\ndata: {")) > 0:
        body = raw[i + 7 : -2]
        if 10 not in body and raw[-2] == 10:  # a name and one JSON data line: the usual event
            try:
                obj = loads(body)  # begins with "{": a dict, or it does not decode
            except JSONDecodeError:
                return raw, MALFORMED, None
            etype = obj.get("type")
            if type(etype) is str and etype not in _ERROR_TYPES:
                return raw, FINAL if etype in finals else DATA, obj
            return _meaning(raw, obj, finals)
    return _classify(raw, finals)


def _classify(raw: bytes, finals: frozenset[str] | None) -> Classified:
    """The general path: any framing. ``finals``: the final event's types, None for an
    endpoint whose final event has a ``finish_reason``."""
    if raw.startswith(b"data: {") and raw.find(b"\n") == len(raw) - 2:
        data: bytes | None = raw[6:-2]  # one JSON data line
    elif (
        raw.startswith(b"event: ")
        and (i := raw.find(b"\ndata: {")) > 0
        and raw.find(b"\n", i + 1) == len(raw) - 2
    ):
        data = raw[i + 7 : -2]  # Anthropic's and Responses' usual: a name, one JSON data line
    elif raw.startswith(b":"):
        return raw, COMMENT, None
    else:
        data = _data_of(raw.rstrip(b"\n"))
    if data is None:
        if raw[:1] == b"{":  # bare JSON: how Google's streams send an error at times
            return _bare(raw)
        return raw, COMMENT, None  # event:/id:/retry: only
    if data == b"[DONE]":
        return raw, DONE, None
    try:
        obj = loads(data)
    except JSONDecodeError:
        return raw, MALFORMED, None
    return _meaning(raw, obj, finals)


def _bare(raw: bytes) -> Classified:
    """An event of JSON with no ``data:`` field: an error object is an error (Gemini sends
    a failure inside a stream so: its SDKs read such lines as errors); anything else is
    undecodable."""
    try:
        obj = loads(raw)
    except JSONDecodeError:
        return raw, MALFORMED, None
    if type(obj) is dict and "error" in obj:
        return raw, ERROR, obj
    return raw, MALFORMED, None


def _meaning(raw: bytes, obj: Any, finals: frozenset[str] | None) -> Classified:
    """What a decoded event means (see :func:`_classify`)."""
    if type(obj) is not dict:
        return raw, MALFORMED, None
    etype = obj.get("type")
    if type(etype) is not str:  # absent (chat), or not a name at all
        etype = None
        if "error" in obj and "choices" not in obj:
            return raw, ERROR, obj
    elif etype in _ERROR_TYPES:
        return raw, ERROR, obj
    if finals is not None:
        return raw, FINAL if etype in finals else DATA, obj
    choices = obj.get("choices")
    if choices and type(choices) is list:
        for c in choices:
            if type(c) is dict and c.get("finish_reason") and type(c["finish_reason"]) is str:
                return raw, FINAL, obj
    elif type(candidates := obj.get("candidates")) is list:  # Gemini: the finishReason's
        for c in candidates:
            if type(c) is dict and c.get("finishReason") and type(c["finishReason"]) is str:
                return raw, FINAL, obj
    return raw, DATA, obj


def is_error_event(raw: bytes) -> bool:
    """An in-band error event, in whichever API's form (the test is the same for all)."""
    return _classify_choices(raw)[1] is ERROR


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
    after them is still a failed attempt, recovered invisibly. An event with a field of
    the wrong type is not one: it is content, passed on as the provider sent it.
    """
    if ev.kind is COMMENT:
        return True
    if ev.kind is not DATA:
        return False
    try:
        return _preamble(ev.data)
    except (AttributeError, TypeError):  # a field of the wrong type
        return False


def _preamble(obj: dict[str, Any]) -> bool:
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


def usage_of(obj: Any, endpoint: EventEndpoint, so_far: Usage | None = None) -> Usage | None:
    """The stream's usage after one decoded event, if the event carries any
    (:meth:`~gateway.formats.Format.event_usage`; ``so_far``: what its earlier events
    reported). Counts are the stream's so far (an Anthropic ``message_delta`` repeats the
    input tokens of ``message_start``, or brings them when they were not known then). A
    count that is not one (:func:`~gateway.formats.usage.token_count`) is 0; usage of the
    wrong shape is none."""
    if not isinstance(obj, dict):
        return None
    try:
        return endpoint.fmt.event_usage(obj, so_far)
    except (AttributeError, TypeError):  # a field of the wrong type: no usage
        return None


KEEPALIVE = b": keepalive\n\n"


def retry_comment(attempt: int, wait: float, category: Category) -> bytes:
    return (
        f": gateway api_retry attempt={attempt} wait_seconds={wait:.1f} "
        f"category={category.value}\n\n"
    ).encode()
