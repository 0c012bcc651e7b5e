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

The framing is done here, not by botocore's decoder (``EventStreamBuffer``): that one
reads the prelude and every header of every frame in Python, a call per field, and
raises ``StopIteration`` on each read: about 91k instructions a frame before any of the
gateway's own work, where the whole gateway spends about 80k on relaying an SSE chunk, so
a Bedrock chunk cost 2.2x an SSE chunk. Here the prelude is read with ``struct``, both
CRCs are checked with ``zlib.crc32`` (the prelude's over its 8 bytes as soon as they are
read, the message's over all before it), and a frame's header block is parsed by
botocore's own parser (``botocore.eventstream.EventStreamHeaderParser``) only when it is
not the last frame's and not among the blocks seen lately: what a block means is cached
by its raw bytes, as Bedrock repeats the same few blocks (``:event-type``,
``:content-type``, ``:message-type``) in every frame. ``bench/eventstream.py`` measures
it (2026-12-03): an InvokeModelWithResponseStream chunk about 22.3k instructions a frame
here (5k of them decoding its base64) against 91k through ``EventStreamBuffer`` alone,
a ConverseStream event 13.8k against 90k, where splitting the same SSE event costs about
6k. Frames may be split anywhere across reads, several may come in one read.
"""

from __future__ import annotations

import struct
from binascii import a2b_base64
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol
from zlib import crc32

from botocore.eventstream import DuplicateHeader, EventStreamHeaderParser
from orjson import JSONDecodeError, dumps, loads

from gateway.errors import CorruptFrame

if TYPE_CHECKING:
    from gateway.formats.usage import Usage

__all__ = ["CORRUPT", "EventStreamSplitter", "Inner", "error_event"]


class Inner(Protocol):
    """The splitter the events go through when they are translated (a
    :class:`gateway.translate.convert.TranslatingSplitter`): whole SSE events in, the
    client's out."""

    def feed(self, piece: bytes) -> list[bytes]: ...
    def close(self) -> list[bytes]: ...
    @property
    def pending(self) -> bytes: ...
    @property
    def malformed(self) -> int: ...
    @property
    def usage(self) -> Usage | None: ...


#: The error type of the event that ends a stream whose framing broke.
CORRUPT = "internalServerException"

_PRELUDE = struct.Struct(">III").unpack_from  # total length, headers length, prelude CRC
_CRC = struct.Struct(">I").unpack_from
_MAX_HEADERS = 128 * 1024  # the format's limits (botocore's too): a header block's length,
_MAX_REST = 16 + 24 * 1024 * 1024  # and a frame's less its header block (the payload's 24 MiB)

# What a frame's header block says to do with its payload (see _plan): what, and its
# constant part.
_EVENT, _EXCEPTION, _ERROR, _DROP = range(4)
_CHUNK = (-1, b"")  # an InvokeModelWithResponseStream chunk (told apart by identity)

#: How the usual chunk payload begins: its ``bytes``, the base64 of ``{"type":"``.
_USUAL = b'{"bytes":"eyJ0eXBlIjoi'
_SSE = b"event: %b\ndata: %b\n\n"


def error_event(kind: str, message: str) -> bytes:
    """The SSE error event of an AWS exception ``kind`` (as AWS spells it)."""
    data = dumps({"type": "error", "error": {"type": kind, "message": message}})
    return b"event: error\ndata: " + data + b"\n\n"


@lru_cache(maxsize=64)
def _plan(head: bytes) -> tuple[int, bytes]:
    """What the frames of header block ``head`` become: (what, its constant part).

    The event's prefix for a ConverseStream event, the error type for an exception, the
    whole event for an ``error`` message."""
    try:
        headers = EventStreamHeaderParser().parse(head)
    except DuplicateHeader:
        raise CorruptFrame("a frame repeats a header") from None
    except (struct.error, KeyError, IndexError, UnicodeDecodeError):
        raise CorruptFrame("a frame's headers do not parse") from None
    kind = headers.get(":message-type")
    if kind == "event":
        etype = headers.get(":event-type")
        if etype == "chunk":
            return _CHUNK
        if type(etype) is str and _token(etype.encode()):
            return _EVENT, b"event: " + etype.encode() + b"\ndata: "
    elif kind == "exception":
        return _EXCEPTION, str(headers.get(":exception-type")).encode()
    elif kind == "error":
        code, message = headers.get(":error-code"), headers.get(":error-message")
        return _ERROR, error_event(str(code), str(message or ""))
    return _DROP, b""


class EventStreamSplitter:
    """:class:`gateway.formats.sse.Splitter` for a Bedrock event stream: body pieces in,
    whole SSE events out (see the module docstring). With ``inner``, a translating
    splitter, the events go through it and what it yields comes out."""

    __slots__ = ("_broken", "_dropped", "_head", "_held", "_inner", "_name", "_named", "_need",
                 "_parts", "_plan", "_prefix")  # fmt: skip

    def __init__(self, inner: Inner | None = None) -> None:
        self._parts: list[bytes] = []  # a frame begun, as read so far
        self._held = 0  # their length
        self._need = 0  # the length that makes it whole (12 until its prelude is read)
        self._broken = False
        self._dropped = 0
        self._inner = inner
        self._head = b""  # the header block of the last frame, and what it means
        self._plan: tuple[int, bytes] = (_DROP, b"")
        self._named, self._name = 0, b"-"  # the last chunk's type: where it ends, with its quote
        self._prefix = b""  # and the start of its event

    def feed(self, piece: bytes) -> list[bytes]:
        if self._held or self._broken:  # a frame begun in an earlier read, or a stream broken
            data = self._join(piece)
            if data is None:
                return []
        else:
            data = piece
        out: list[bytes] = []
        pos, size = 0, len(data)
        try:
            while size - pos >= 12:
                total, hlen, crc = _PRELUDE(data, pos)
                if (
                    crc32(data[pos : pos + 8]) != crc
                    or hlen > _MAX_HEADERS
                    or not 16 <= total - hlen <= _MAX_REST
                ):
                    raise CorruptFrame(_prelude_fault(data, pos, crc))
                end = pos + total
                if end > size:
                    break
                end -= 4  # where its payload ends and its CRC begins
                if crc32(data[pos + 8 : end], crc) != _CRC(data, end)[0]:
                    raise CorruptFrame("a frame failed its CRC")
                start = pos + 12 + hlen
                if (head := data[pos + 12 : start]) != self._head:  # not the last frame's
                    self._head, self._plan = head, _plan(head)
                pos = end + 4
                plan = self._plan
                # the usual chunk payload, {"bytes":"<base64 of {"type":"...>", ...}, read
                # without decoding its JSON: base64 has no quote, and a value with an
                # escape in it (``\/``) is not base64 as is, decoded as JSON by _chunk
                if (
                    plan is _CHUNK
                    and data[start : start + 22] == _USUAL
                    and start < (q := data.find(34, start + 22)) < end
                ):
                    try:
                        inner = a2b_base64(data[start + 10 : q], strict_mode=True)
                    except ValueError:  # binascii.Error
                        inner = b""
                    if inner[9 : self._named] == self._name or self._new_type(inner):
                        if 10 in inner or 13 in inner:
                            inner = _one_line(inner)
                        out.append(b"".join((self._prefix, inner, b"\n\n")))
                        continue
                payload = data[start:end]
                ev = _chunk(payload) if plan is _CHUNK else _other(plan, payload)
                if ev is None:
                    self._dropped += 1
                else:
                    out.append(ev)
        except CorruptFrame as e:
            self._broken = True
            out.append(error_event(CORRUPT, f"the Bedrock event stream is corrupt ({e})"))
            return self._through(out)
        if pos < size:
            rest = data[pos:] if pos else data
            self._parts.append(rest)
            self._held = len(rest)
            self._need = _PRELUDE(rest)[0] if len(rest) >= 12 else 12
        return self._through(out) if self._inner is not None else out

    def _join(self, piece: bytes) -> bytes | None:
        """The frame begun in earlier reads with ``piece``, once it can be read on (None:
        held until it is whole, or dropped after a broken frame)."""
        if self._broken:
            return None
        held = self._held + len(piece)
        self._parts.append(piece)
        if held < self._need:
            self._held = held
            return None
        data = b"".join(self._parts)
        self._parts, self._held = [], 0
        return data

    def _new_type(self, inner: bytes) -> bool:
        """Whether ``inner`` (``{"type":"...``) has its type's end, taken as the type of
        the chunks to come (a model's stream sends runs of the same type of event)."""
        if (q := inner.find(34, 9)) < 0 or not _token(inner[9:q]):
            return False
        self._named, self._name = q + 1, inner[9 : q + 1]  # the type and its quote
        self._prefix = b"event: " + inner[9:q] + b"\ndata: "
        return True

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
        held = b"".join(self._parts)
        if self._inner is not None and (more := self._inner.pending):
            return held + more
        return held

    @property
    def malformed(self) -> int:
        """Frames dropped because their payload did not decode (and ``inner``'s own)."""
        return self._dropped + (self._inner.malformed if self._inner is not None else 0)

    @property
    def usage(self) -> Usage | None:
        """A translating ``inner``'s counts so far (the events it yields carry their own)."""
        return self._inner.usage if self._inner is not None else None


def _prelude_fault(data: bytes, pos: int, crc: int) -> str:
    """Why the prelude of the frame at ``pos`` cannot be read."""
    if crc32(data[pos : pos + 8]) != crc:
        return "a frame failed its CRC"
    return "a frame's lengths are out of bounds"


def _one_line(data: bytes) -> bytes:
    """JSON as one SSE data line: a line break can only be whitespace between tokens."""
    if 10 in data or 13 in data:
        return data.replace(b"\r", b" ").replace(b"\n", b" ")
    return data


def _other(plan: tuple[int, bytes], payload: bytes) -> bytes | None:
    """The event of a frame other than a chunk, by its header block's ``plan``; None for
    one that does not stand for an event."""
    what, part = plan
    if what == _EVENT:
        if payload[:1] != b"{":
            return None
        if 10 in payload or 13 in payload:
            payload = _one_line(payload)
        return part + payload + b"\n\n"
    if what == _EXCEPTION:
        try:
            message = loads(payload).get("message")
        except (JSONDecodeError, AttributeError):
            message = None
        return error_event(part.decode(), str(message or ""))
    if what == _ERROR:
        return part
    return None


def _chunk(payload: bytes) -> bytes | None:
    """The event of a chunk whose payload is not read as usual: its JSON decoded."""
    try:
        inner = a2b_base64(loads(payload)["bytes"], strict_mode=True)
    except (JSONDecodeError, TypeError, KeyError, ValueError):  # binascii.Error too
        return None
    return _named(inner)


def _named(inner: bytes) -> bytes | None:
    """The event of an inner event whose type does not come first (None: not an event)."""
    try:
        etype = loads(inner).get("type")
    except (JSONDecodeError, AttributeError):
        return None
    if type(etype) is not str or not _token(etype.encode()):
        return None
    return _SSE % (etype.encode(), _one_line(inner))


def _token(name: bytes) -> bool:
    """An event type fit for an ``event:`` line: ASCII letters, digits, ``_`` and ``.``
    (a provider's line break there would make events of its own)."""
    return name.replace(b"_", b"").replace(b".", b"").isalnum()
