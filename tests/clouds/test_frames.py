"""gateway/clouds/frames.py reads AWS event-stream frames exactly as botocore's decoder."""

from __future__ import annotations

import struct
import uuid
import zlib

import pytest
from botocore.eventstream import EventStreamBuffer

from gateway.clouds.frames import MAX_HEADERS, MAX_PAYLOAD, Frames
from gateway.testing.eventstream_frames import chunk_frame, error_frame, exception_frame

#: botocore's exception -> what :attr:`Frames.broken` says
WHY = {
    "ChecksumMismatch": "a frame failed its CRC",
    "InvalidHeadersLength": "a frame's headers are too long",
    "InvalidPayloadLength": "a frame's payload is too long",
    "DuplicateHeader": "a frame repeats a header",
}


def header(name: str, kind: int, value: bytes = b"") -> bytes:
    n = name.encode()
    return bytes([len(n)]) + n + bytes([kind]) + value


#: one header of every type botocore knows (0 true ... 9 uuid)
EVERY_TYPE = b"".join([
    header("t", 0), header("f", 1), header("b", 2, struct.pack(">b", -3)),
    header("s", 3, struct.pack(">h", -300)), header("i", 4, struct.pack(">i", -70000)),
    header("l", 5, struct.pack(">q", -(2**40))), header("y", 6, b"\x00\x03abc"),
    header(":event-type", 7, b"\x00\x05chunk"), header("ts", 8, struct.pack(">q", 1700000000000)),
    header("u", 9, uuid.UUID(int=7).bytes),
])  # fmt: skip


def raw_frame(head: bytes, payload: bytes) -> bytes:
    prelude = struct.pack(">II", 12 + len(head) + len(payload) + 4, len(head))
    msg = prelude + struct.pack(">I", zlib.crc32(prelude)) + head + payload
    return msg + struct.pack(">I", zlib.crc32(msg))


def _head(headers: dict[str, object]) -> bytes:
    """Headers as sent (this stream's frames carry string headers, but the one of every
    type, which is sent as it is)."""
    if "t" in headers:
        return EVERY_TYPE
    return b"".join(header(k, 7, struct.pack(">H", len(str(v))) + str(v).encode())
                    for k, v in headers.items())  # fmt: skip


def botocore(pieces: list[bytes]) -> tuple[list[tuple[dict[str, object], bytes]], str | None]:
    buf, out = EventStreamBuffer(), []
    try:
        for p in pieces:
            buf.add_data(p)
            out.extend((m.headers, m.payload) for m in buf)
    except Exception as e:  # what botocore raises is the point of comparison
        return out, WHY.get(type(e).__name__, "a frame's headers do not parse")
    return out, None


def ours(pieces: list[bytes]) -> tuple[list[tuple[dict[str, object], bytes]], str | None]:
    frames, out = Frames(), []
    for p in pieces:
        out.extend(frames.feed(p))
        if frames.broken:
            break
    return out, frames.broken


STREAM = (
    chunk_frame({"type": "message_start"}) + raw_frame(EVERY_TYPE, b'{"x":1}')
    + exception_frame("throttlingException", "slow down") + error_frame("E", "m")
    + raw_frame(b"", b"")
)  # fmt: skip


def test_every_header_type_as_botocore() -> None:
    """Headers of every type and the payloads come out as botocore gives them."""
    got, broken = ours([STREAM])
    assert broken is None and len(got) == 5
    assert (got, broken) == botocore([STREAM])
    assert got[1][0]["l"] == -(2**40) and got[1][0]["u"] == uuid.UUID(int=7).bytes


@pytest.mark.parametrize("cut", range(0, len(STREAM), 7))
def test_split_anywhere_as_botocore(cut: int) -> None:
    """A stream cut in two anywhere gives the same frames, the rest held as pending."""
    assert ours([STREAM[:cut], STREAM[cut:]]) == botocore([STREAM[:cut], STREAM[cut:]])
    frames = Frames()
    whole = frames.feed(STREAM[:cut])
    start = sum(len(raw_frame(_head(h), p)) for h, p in whole)
    assert frames.pending == STREAM[start:cut]


def test_byte_by_byte_as_botocore() -> None:
    """Fed one byte at a time: the same frames."""
    pieces = [STREAM[i : i + 1] for i in range(len(STREAM))]
    assert ours(pieces) == botocore(pieces)


@pytest.mark.parametrize("at", range(len(STREAM)))
def test_any_byte_flipped_as_botocore(at: int) -> None:
    """A byte flipped anywhere: the same frames before it and the same reason to stop."""
    bad = STREAM[:at] + bytes([STREAM[at] ^ 0x41]) + STREAM[at + 1 :]
    expected = botocore([bad])
    assert expected[1] is not None
    assert ours([bad]) == expected


@pytest.mark.parametrize(
    "head",
    [
        header("a", 7, b"\x00\x09abc"),  # a string cut short by the headers' end: kept short
        header("a", 9, b"1234"),  # a uuid cut short
        header("a", 3, b"\x01"),  # a short cut short
        header("a", 7, b"\x00"),  # a length cut short
        b"\x01a",  # no type
        header("a", 12),  # a type there is not
        header("a", 7, b"\x00\x02\xff\xfe"),  # not UTF-8
        header("a", 0) + header("a", 1),  # repeated
    ],
)
def test_odd_headers_as_botocore(head: bytes) -> None:
    """Headers cut short, of an unknown type, not UTF-8 or repeated, with both CRCs right:
    what botocore keeps is kept, what it refuses breaks the stream with its reason."""
    pieces = [chunk_frame({"type": "ping"}), raw_frame(head, b"{}"), chunk_frame({"type": "x"})]
    assert ours(pieces) == botocore(pieces)


@pytest.mark.parametrize(
    ("head_len", "total"),
    [(MAX_HEADERS + 1, MAX_HEADERS + 20), (0, MAX_PAYLOAD + 17), (0, MAX_PAYLOAD + 16)],
)
def test_limits_as_botocore(head_len: int, total: int) -> None:
    """botocore's limits on the headers' and the payload's length, read from the prelude
    before the frame has come."""
    prelude = struct.pack(">II", total, head_len)
    piece = prelude + struct.pack(">I", zlib.crc32(prelude))
    assert ours([piece]) == botocore([piece])


def test_nothing_is_read_past_a_broken_frame() -> None:
    """After a broken frame, what comes is dropped and nothing is held."""
    frames = Frames()
    good = chunk_frame({"type": "a"})
    assert len(frames.feed(good + b"\x00" * 16 + good)) == 1
    assert frames.broken == "a frame failed its CRC"
    assert frames.feed(good) == [] and frames.pending == b""
