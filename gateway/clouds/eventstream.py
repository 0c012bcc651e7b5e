"""Bedrock's streamed answers: AWS event-stream frames in, server-sent events out. Pure.

Bedrock frames a stream as AWS event-stream messages (binary: a prelude with two
lengths and a CRC32, typed headers, the payload, a CRC32 of the whole), not as SSE. The
gateway reads every stream as SSE events, so :class:`EventStreamSplitter` turns each
frame into the one SSE event it stands for, and from there the stream is any other:

- an ``InvokeModelWithResponseStream`` ``chunk`` (payload ``{"bytes": <base64>}``, maybe
  with Bedrock's padding field ``"p"``) carries an Anthropic stream event: it becomes
  ``event: <its type>\\ndata: <its JSON as sent>\\n\\n``, exactly Anthropic's own SSE;
- a ``ConverseStream`` event of type T (``messageStart``, ``contentBlockDelta``, ...) with
  JSON payload P becomes ``event: T\\ndata: P\\n\\n``;
- an exception (``:message-type`` ``exception``, ``:exception-type`` X, payload
  ``{"message": M}``) or an ``error`` message (``:error-code`` X, ``:error-message`` M)
  becomes ``event: error\\ndata: {"type":"error","error":{"type":X,"message":M}}\\n\\n``,
  Anthropic's in-band error, which the gateway classifies by X;
- a frame that fails a CRC or cannot be parsed becomes one such error
  (``internalServerException``, "the Bedrock event stream is corrupt"), and what follows
  it is dropped: past a broken frame the stream's framing is lost.

Frames are read by :class:`gateway.clouds.frames.Frames` (botocore's decoder's checks,
both CRCs and its limits, at a quarter of its cost), fed the pieces as they are read: a
frame may be split anywhere, several may come in one read.
"""

from __future__ import annotations

from binascii import a2b_base64
from typing import TYPE_CHECKING

from orjson import JSONDecodeError, dumps, loads

from gateway.clouds.frames import Frames

if TYPE_CHECKING:
    from gateway.translate.convert import Splitter

__all__ = ["CORRUPT", "EventStreamSplitter", "error_event"]

#: The error type of the event that ends a stream whose framing broke.
CORRUPT = "internalServerException"

_SSE = b"event: %b\ndata: %b\n\n"


def error_event(kind: str, message: str) -> bytes:
    """The SSE error event of an AWS exception ``kind`` (as AWS spells it)."""
    data = dumps({"type": "error", "error": {"type": kind, "message": message}})
    return b"event: error\ndata: " + data + b"\n\n"


class EventStreamSplitter:
    """:class:`gateway.streams.sse.Splitter` for a Bedrock event stream: body pieces in,
    whole SSE events out (see the module docstring). With ``inner``, a translating
    splitter, the events go through it and what it yields comes out."""

    __slots__ = ("_broken", "_dropped", "_frames", "_inner")

    def __init__(self, inner: Splitter | None = None) -> None:
        self._frames = Frames()
        self._broken = False
        self._dropped = 0
        self._inner = inner

    def feed(self, piece: bytes) -> list[bytes]:
        if self._broken:
            return []
        frames = self._frames
        out: list[bytes] = []
        for headers, payload in frames.feed(piece):
            ev = self._event(headers, payload)
            if ev is not None:
                out.append(ev)
        if frames.broken is not None:
            self._broken = True
            why = f"the Bedrock event stream is corrupt ({frames.broken})"
            out.append(error_event(CORRUPT, why))
        return self._through(out) if self._inner is not None else out

    def _event(self, headers: dict[str, object], payload: bytes) -> bytes | None:
        """The SSE event of one frame, None for a frame whose payload does not decode."""
        kind = headers.get(":message-type")
        if kind == "event":
            etype = headers.get(":event-type")
            if etype == "chunk":
                return self._chunk(payload)
            if type(etype) is str and payload[:1] == b"{":
                return _SSE % (etype.encode(), _one_line(payload))
        elif kind == "exception":
            try:
                message = loads(payload).get("message")
            except (JSONDecodeError, AttributeError):
                message = None
            return error_event(str(headers.get(":exception-type")), str(message or ""))
        elif kind == "error":
            code, message = headers.get(":error-code"), headers.get(":error-message")
            return error_event(str(code), str(message or ""))
        self._dropped += 1
        return None

    def _chunk(self, payload: bytes) -> bytes | None:
        """An InvokeModelWithResponseStream chunk: the Anthropic event it wraps."""
        inner = None
        if payload[:10] == b'{"bytes":"' and (end := payload.find(b'"', 10)) > 0:
            # the usual payload, read without decoding it: base64 has no quote, and a value
            # with an escape in it (``\/``) is not base64 as is, decoded as JSON below
            try:
                inner = a2b_base64(payload[10:end], strict_mode=True)
            except ValueError:  # binascii.Error
                inner = None
        if inner is None:
            try:
                inner = a2b_base64(loads(payload)["bytes"], strict_mode=True)
            except (JSONDecodeError, TypeError, KeyError, ValueError):  # binascii.Error too
                self._dropped += 1
                return None
        if inner[:9] == b'{"type":"' and (end := inner.find(b'"', 9)) > 0:
            name = inner[9:end]  # the usual event: its type comes first
        else:
            try:
                etype = loads(inner).get("type")
            except (JSONDecodeError, AttributeError):
                etype = None
            if type(etype) is not str:
                self._dropped += 1
                return None
            name = etype.encode()
        return _SSE % (name, _one_line(inner))

    def _through(self, events: list[bytes]) -> list[bytes]:
        inner = self._inner
        if inner is None:
            return events
        out: list[bytes] = []
        for ev in events:
            out.extend(inner.feed(ev))
        return out

    def close(self) -> list[bytes]:
        """Events owed when the body ended: a translating ``inner``'s closing events (a
        frame cut short is not one: the stream ends without its final event)."""
        return self._inner.close() if self._inner is not None else []

    @property
    def pending(self) -> bytes:
        """What is held: a frame begun and not finished (and ``inner``'s own)."""
        if self._inner is not None and (more := self._inner.pending):
            return self._frames.pending + more
        return self._frames.pending

    @property
    def malformed(self) -> int:
        """Frames dropped because their payload did not decode (and ``inner``'s own)."""
        return self._dropped + (self._inner.malformed if self._inner is not None else 0)


def _one_line(data: bytes) -> bytes:
    """JSON as one SSE data line: a line break can only be whitespace between tokens."""
    if 10 in data or 13 in data:
        return data.replace(b"\r", b" ").replace(b"\n", b" ")
    return data
