"""AWS event-stream frames read from a byte stream, as botocore's ``EventStreamBuffer``
reads them, at a quarter of its cost. Pure.

A frame (an event-stream *message*): a prelude of three big-endian uint32 (the frame's
total length, its headers' length, the CRC32 of the first eight bytes), the headers
(each a name of one length byte, a type byte and a value of that type), the payload, and
the CRC32 of everything before it. botocore's decoder is pure Python, an object per
frame and per header, and slices its buffer again for every field: some 14 µs a frame,
where a Bedrock stream's frame otherwise costs the gateway about what an SSE event does
(bench/eventstream.py, bench/clouds.py). :class:`Frames` does the same checks in the
same order with ``struct`` and ``zlib.crc32`` on one buffer, and gives the same headers
and payloads; ``tests/clouds/test_frames.py`` holds it to botocore's decoder on valid,
split, truncated and corrupted frames of every header type.
"""

from __future__ import annotations

import struct
from zlib import crc32

__all__ = ["Frames"]

#: botocore's limits: a frame with longer headers or payload is refused.
MAX_HEADERS = 128 * 1024
MAX_PAYLOAD = 24 * 1024 * 1024

_PRELUDE = struct.Struct(">III").unpack_from
_UINT32 = struct.Struct(">I").unpack_from
_UINT16 = struct.Struct(">H").unpack_from
#: Header types of fixed size: type -> (struct, size); 0 and 1 are true and false.
_FIXED = {
    2: struct.Struct(">b"), 3: struct.Struct(">h"), 4: struct.Struct(">i"),
    5: struct.Struct(">q"), 8: struct.Struct(">q"),
}  # fmt: skip


class BrokenFrame(Exception):
    """A frame that fails a CRC or a limit, or repeats a header; the message says which,
    in words that carry nothing of the stream's content."""


class Frames:
    """Body pieces in, whole frames out as ``(headers, payload)``; a frame may be split
    anywhere, several may come in one piece. At a frame that does not hold, :attr:`broken`
    says why (the frames before it are given) and nothing more is read: past a broken
    frame the framing is lost."""

    __slots__ = ("_buf", "_checked", "_head", "_headers", "broken")

    def __init__(self) -> None:
        self._buf = b""
        self._checked = False  # the prelude of the frame begun in _buf has been checked
        self.broken: str | None = None
        # the last frame's header bytes and what they parse to: a stream's frames mostly
        # carry the same headers, parsed once (the dict is shared: read it, never change it)
        self._head = b""
        self._headers: dict[str, object] = {}

    @property
    def pending(self) -> bytes:
        """A frame begun and not finished."""
        return self._buf

    def feed(self, piece: bytes) -> list[tuple[dict[str, object], bytes]]:
        if self.broken is not None:
            return []
        buf = self._buf + piece if self._buf else piece
        out: list[tuple[dict[str, object], bytes]] = []
        pos, size = 0, len(buf)
        try:
            while size - pos >= 12:
                total, head_len, prelude_crc = _PRELUDE(buf, pos)
                if not self._checked:
                    if crc32(buf[pos : pos + 8]) != prelude_crc:
                        raise BrokenFrame("a frame failed its CRC")
                    if head_len > MAX_HEADERS:
                        raise BrokenFrame("a frame's headers are too long")
                    if total - head_len - 16 > MAX_PAYLOAD:
                        raise BrokenFrame("a frame's payload is too long")
                    self._checked = True
                if size - pos < total:
                    break
                if total < 16 + head_len:  # lengths that cannot be: a CRC would fail
                    raise BrokenFrame("a frame failed its CRC")
                end = pos + total - 4
                if crc32(buf[pos + 8 : end], prelude_crc) != _UINT32(buf, end)[0]:
                    raise BrokenFrame("a frame failed its CRC")
                body = pos + 12 + head_len
                head = buf[pos + 12 : body]
                if head != self._head:
                    self._headers, self._head = _headers(head), head
                out.append((self._headers, buf[body:end]))
                pos = end + 4
                self._checked = False
        except (BrokenFrame, struct.error, KeyError, IndexError, UnicodeDecodeError) as e:
            self._buf, self._checked = b"", False
            self.broken = str(e) if type(e) is BrokenFrame else "a frame's headers do not parse"
            return out
        self._buf = buf[pos:] if pos < size else b""
        return out


def _headers(data: bytes) -> dict[str, object]:
    """The headers of a frame, parsed as botocore parses them (a value cut short by the
    end of the headers is kept as far as it goes)."""
    headers: dict[str, object] = {}
    i, n = 0, len(data)
    while i < n:
        name_len = data[i]
        name = data[i + 1 : i + 1 + name_len].decode()
        i += 1 + name_len
        kind = data[i]  # IndexError when the type is missing
        i += 1
        value: object
        if kind == 7 or kind == 6:
            length = _UINT16(data, i)[0]
            raw = data[i + 2 : i + 2 + length]
            value = raw.decode() if kind == 7 else raw
            i += 2 + length
        elif kind == 0 or kind == 1:
            value = kind == 0
        elif kind == 9:
            value = data[i : i + 16]
            i += 16
        else:
            fixed = _FIXED[kind]  # KeyError: a type there is not
            value = fixed.unpack_from(data, i)[0]
            i += fixed.size
        if name in headers:
            raise BrokenFrame("a frame repeats a header")
        headers[name] = value
    return headers
