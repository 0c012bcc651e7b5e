"""Bedrock's event stream decoded into SSE events (gateway/formats/eventstream.py)."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

import orjson
import pytest
from botocore.eventstream import EventStreamBuffer

from gateway.formats import CHAT, MESSAGES, sse
from gateway.formats.eventstream import EventStreamSplitter
from gateway.testing.eventstream_frames import (
    chunk_frame,
    error_frame,
    event_frame,
    exception_frame,
    frame,
)
from gateway.translate.convert import TranslatingSplitter

pytestmark = pytest.mark.fast

START = {
    "type": "message_start",
    "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 5, "output_tokens": 1}},
}  # fmt: skip
BLOCK = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
DELTA = {"type": "content_block_delta", "index": 0,
         "delta": {"type": "text_delta", "text": "Hello there"}}  # fmt: skip
BLOCK_STOP = {"type": "content_block_stop", "index": 0}
MESSAGE_DELTA = {"type": "message_delta", "delta": {"stop_reason": "end_turn",
                 "stop_sequence": None}, "usage": {"output_tokens": 3}}  # fmt: skip
STOP = {"type": "message_stop",
        "amazon-bedrock-invocationMetrics": {"inputTokenCount": 5, "outputTokenCount": 3,
                                             "invocationLatency": 40, "firstByteLatency": 9}}  # fmt: skip
ANTHROPIC = [START, BLOCK, DELTA, BLOCK_STOP, MESSAGE_DELTA, STOP]


def anthropic_sse(ev: dict[str, Any]) -> bytes:
    """The SSE event Anthropic itself sends for ``ev`` (compact JSON, as the frames carry)."""
    return b"event: " + ev["type"].encode() + b"\ndata: " + orjson.dumps(ev) + b"\n\n"


def feed_all(s: EventStreamSplitter, pieces: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for p in pieces:
        out.extend(s.feed(p))
    return out + s.close()


STREAM = b"".join(chunk_frame(e) for e in ANTHROPIC)
WANTED = [anthropic_sse(e) for e in ANTHROPIC]


def test_chunk_frames_become_anthropic_sse() -> None:
    """Each chunk frame becomes exactly the SSE event Anthropic sends for its inner event."""
    s = EventStreamSplitter()
    assert feed_all(s, [chunk_frame(e) for e in ANTHROPIC]) == WANTED
    assert s.pending == b"" and s.malformed == 0


@pytest.mark.parametrize("cut", range(1, len(chunk_frame(START))))
def test_a_frame_split_at_every_offset(cut: int) -> None:
    """A frame split at any byte (inside the prelude, headers, payload or CRC) decodes once
    whole, and what is held meanwhile is the part read so far."""
    first = chunk_frame(START)
    s = EventStreamSplitter()
    assert s.feed(first[:cut]) == []
    assert s.pending == first[:cut]
    assert s.feed(first[cut:] + chunk_frame(DELTA)) == [anthropic_sse(START), anthropic_sse(DELTA)]
    assert s.pending == b""


def test_byte_by_byte_and_all_in_one_read() -> None:
    """The whole stream one byte a read, or in one read, gives the same events."""
    assert feed_all(EventStreamSplitter(), [STREAM[i : i + 1] for i in range(len(STREAM))]) == (
        WANTED
    )
    assert feed_all(EventStreamSplitter(), [STREAM]) == WANTED


def test_pieces_across_frame_boundaries() -> None:
    """Reads that end mid-frame and begin another frame keep every event, in order."""
    pieces = [STREAM[i : i + 97] for i in range(0, len(STREAM), 97)]
    s = EventStreamSplitter()
    assert feed_all(s, pieces) == WANTED
    assert s.pending == b""


def _corrupt(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0x01
    return bytes(b)


CORRUPT_EVENT_START = (
    b'event: error\ndata: {"type":"error","error":{"type":"internalServerException"'
)


@pytest.mark.parametrize(
    ("where", "at"), [("prelude crc", 9), ("message crc", -1), ("payload", -10)]
)
def test_a_bad_crc_ends_the_stream_with_one_error(where: str, at: int) -> None:
    """A frame failing its prelude or message CRC gives one error event, then nothing:
    what follows is out of sync and dropped."""
    good = chunk_frame(START)
    bad = _corrupt(chunk_frame(DELTA), at)
    s = EventStreamSplitter()
    out = s.feed(good + bad + chunk_frame(BLOCK_STOP))
    assert out[0] == anthropic_sse(START)
    assert len(out) == 2 and out[1].startswith(CORRUPT_EVENT_START)
    assert b"corrupt (a frame failed its CRC)" in out[1]
    assert s.feed(chunk_frame(STOP)) == [] and s.close() == []
    assert s.pending == b""
    ev = sse.classify_event(out[1], _endpoint(MESSAGES))
    assert ev.kind is sse.ERROR and ev.data["error"]["type"] == "internalServerException"


def test_headers_that_do_not_parse_end_the_stream() -> None:
    """A frame whose CRCs hold but whose headers do not parse is corrupt too."""
    bad_headers = b"\x0b:event-type\x0c\x00\x01x"  # header type 12: there is none
    s = EventStreamSplitter()
    out = s.feed(_raw_frame(bad_headers, b"{}"))
    assert len(out) == 1 and out[0].startswith(CORRUPT_EVENT_START)


def _raw_frame(head: bytes, payload: bytes) -> bytes:
    """A frame of raw header bytes, both CRCs right."""
    prelude = struct.pack(">II", 12 + len(head) + len(payload) + 4, len(head))
    msg = prelude + struct.pack(">I", zlib.crc32(prelude)) + head + payload
    return msg + struct.pack(">I", zlib.crc32(msg))


def test_an_exception_frame_mid_stream() -> None:
    """An exception frame becomes Anthropic's error event with AWS's exception name and
    message, classified as an in-band error; the stream goes on being decoded."""
    s = EventStreamSplitter()
    data = chunk_frame(START) + chunk_frame(DELTA)
    data += exception_frame("throttlingException", "Too many tokens, please wait.")
    out = s.feed(data)
    assert out[:2] == [anthropic_sse(START), anthropic_sse(DELTA)]
    error = {"type": "error",
             "error": {"type": "throttlingException", "message": "Too many tokens, please wait."}}  # fmt: skip
    assert out[2] == b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"
    assert sse.is_error_event(out[2])


def test_an_error_message_frame() -> None:
    """An ``error`` message (code and message as headers) is the same error event."""
    (out,) = EventStreamSplitter().feed(error_frame("InternalFailure", "boom"))
    data = json.loads(out.split(b"data: ", 1)[1])
    assert data == {"type": "error", "error": {"type": "InternalFailure", "message": "boom"}}


def test_padding_field_is_ignored_and_a_chunk_without_it_too() -> None:
    """Bedrock's ``p`` padding beside ``bytes`` is not part of the event; a chunk without
    it decodes the same."""
    a = EventStreamSplitter().feed(chunk_frame(DELTA, padding="abcdefghijklmnopqrstu"))
    b = EventStreamSplitter().feed(chunk_frame(DELTA, padding=None))
    assert a == b == [anthropic_sse(DELTA)]


def test_inner_json_with_a_type_not_first_and_line_breaks() -> None:
    """An inner event whose ``type`` is not its first key, or whose JSON has line breaks
    between tokens, is still one well-formed SSE event named by its type."""
    raw = b'{"index": 0,\n "type": "content_block_stop"}'
    payload = orjson.dumps({"bytes": base64.b64encode(raw).decode(), "p": "abc"})
    (out,) = EventStreamSplitter().feed(frame(_event_headers("chunk"), payload))
    assert (
        out == b'event: content_block_stop\ndata: {"index": 0,  "type": "content_block_stop"}\n\n'
    )


def test_a_base64_value_with_json_escapes() -> None:
    """A ``bytes`` value whose slashes are JSON-escaped (``\\/``) decodes as JSON would."""
    raw = orjson.dumps({"type": "ping", "pad": "\u00ff\u00ff\u00ff"})  # base64 with "/"
    encoded = base64.b64encode(raw).decode()
    assert "/" in encoded
    payload = b'{"bytes":"' + encoded.replace("/", "\\/").encode() + b'"}'
    (out,) = EventStreamSplitter().feed(frame(_event_headers("chunk"), payload))
    assert out == b"event: ping\ndata: " + raw + b"\n\n"


def _event_headers(etype: str) -> dict[str, str]:
    return {":event-type": etype, ":content-type": "application/json", ":message-type": "event"}


@pytest.mark.parametrize(
    "payload",
    [b"not json", b'{"no_bytes": 1}', b'{"bytes": "%%%"}',
     orjson.dumps({"bytes": base64.b64encode(b"[1, 2]").decode()})],
)  # fmt: skip
def test_an_undecodable_chunk_is_dropped_and_counted(payload: bytes) -> None:
    """A chunk whose payload or inner event does not decode is dropped and counted as
    malformed; the stream goes on."""
    s = EventStreamSplitter()
    out = s.feed(frame(_event_headers("chunk"), payload) + chunk_frame(DELTA))
    assert out == [anthropic_sse(DELTA)]
    assert s.malformed == 1


CONVERSE = [
    ("messageStart", {"role": "assistant"}),
    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi"}}),
    ("contentBlockStop", {"contentBlockIndex": 0}),
    ("messageStop", {"stopReason": "end_turn"}),
    ("metadata", {"usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4},
                  "metrics": {"latencyMs": 12}}),
]  # fmt: skip


def test_converse_stream_frames() -> None:
    """ConverseStream events become ``event: <type>`` with their payload as sent, the
    padding field included."""
    frames = [event_frame(t, p, padding="abcd") for t, p in CONVERSE]
    out = feed_all(EventStreamSplitter(), frames)
    assert out == [
        b"event: " + t.encode() + b"\ndata: " + orjson.dumps({**p, "p": "abcd"}) + b"\n\n"
        for t, p in CONVERSE
    ]


def _endpoint(fmt: Any) -> Any:
    class Endpoint:
        pass

    ep = Endpoint()
    ep.fmt = fmt  # type: ignore[attr-defined]
    return ep


def test_inner_translating_splitter() -> None:
    """With a translating splitter inside, a Bedrock stream of Anthropic events comes out
    as chat completion chunks, closing events included."""
    inner = TranslatingSplitter(MESSAGES, CHAT, "claude-on-bedrock", include_usage=True)
    s = EventStreamSplitter(inner)
    out = feed_all(s, [STREAM[i : i + 50] for i in range(0, len(STREAM), 50)])
    datas = [e[6:-2] for e in out if e.startswith(b"data: ")]
    assert datas[-1] == b"[DONE]"
    chunks = [json.loads(d) for d in datas[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Hello there"
    assert any(c["choices"] and c["choices"][0]["finish_reason"] == "stop" for c in chunks)
    assert all(c["model"] == "claude-on-bedrock" for c in chunks)
    assert s.malformed == 0 and s.pending == b""


def test_inner_pending_and_malformed_are_counted() -> None:
    """What the inner splitter holds and drops is part of the outer's pending and malformed."""
    inner = TranslatingSplitter(MESSAGES, CHAT, "m", include_usage=False)
    s = EventStreamSplitter(inner)
    s.feed(chunk_frame(START))
    bad = orjson.dumps({"bytes": base64.b64encode(b'{"type":"content_block_delta",').decode()})
    s.feed(frame(_event_headers("chunk"), bad))  # inner JSON cut: the translator drops it
    assert s.malformed == 1
    half = chunk_frame(DELTA)[:20]
    s.feed(half)
    assert s.pending == half


def test_an_exception_passes_the_inner_splitter_as_an_error() -> None:
    """An exception frame reaches the client side as an in-band error even when translated."""
    inner = TranslatingSplitter(MESSAGES, CHAT, "m", include_usage=False)
    s = EventStreamSplitter(inner)
    out = s.feed(chunk_frame(START) + exception_frame("modelStreamErrorException", "bad"))
    assert any(sse.is_error_event(e) and b"modelStreamErrorException" in e for e in out)


def test_frames_round_trip_through_botocore() -> None:
    """The test encoder's frames are what botocore's own decoder reads, headers and all."""
    buf = EventStreamBuffer()
    buf.add_data(chunk_frame(DELTA, padding="xyz") + exception_frame("throttlingException", "m"))
    buf.add_data(event_frame("metadata", {"usage": {}}) + error_frame("Code", "msg"))
    a, b, c, d = list(buf)
    assert a.headers == _event_headers("chunk")
    inner = json.loads(a.payload)
    assert inner["p"] == "xyz" and json.loads(base64.b64decode(inner["bytes"])) == DELTA
    assert b.headers[":exception-type"] == "throttlingException"
    assert b.headers[":message-type"] == "exception" and json.loads(b.payload) == {"message": "m"}
    assert c.headers[":event-type"] == "metadata" and json.loads(c.payload) == {"usage": {}}
    assert d.headers == {":error-code": "Code", ":error-message": "msg", ":message-type": "error"}
    assert d.payload == b""


def test_a_bad_prelude_is_caught_before_its_frame_is_whole() -> None:
    """A prelude failing its CRC ends the stream as soon as its 12 bytes are read: its
    lengths are not trusted to wait for the rest."""
    bad = _corrupt(chunk_frame(DELTA), 2)  # the total length, under the prelude's CRC
    s = EventStreamSplitter()
    out = s.feed(bad[:12])
    assert len(out) == 1 and b"corrupt (a frame failed its CRC)" in out[0]
    assert s.feed(bad[12:]) == [] and s.pending == b""


def test_lengths_out_of_bounds_end_the_stream() -> None:
    """A prelude whose CRC holds but whose header block is over 128 KiB, or shorter than
    the frame's fixed parts, is corrupt."""
    for total, hlen in ((300, 200 * 1024), (15, 0)):
        prelude = struct.pack(">II", total, hlen)
        (out,) = EventStreamSplitter().feed(prelude + struct.pack(">I", zlib.crc32(prelude)))
        assert out.startswith(CORRUPT_EVENT_START) and b"lengths are out of bounds" in out


def test_header_blocks_changing_mid_stream() -> None:
    """Frames whose header blocks alternate (a chunk, a Converse event, an exception, a
    chunk) are each read by their own block."""
    data = chunk_frame(START) + event_frame("metadata", {"usage": {}}) + chunk_frame(DELTA)
    data += exception_frame("throttlingException", "slow down") + chunk_frame(STOP)
    out = EventStreamSplitter().feed(data)
    assert out[0] == anthropic_sse(START) and out[2] == anthropic_sse(DELTA)
    assert out[1] == b'event: metadata\ndata: {"usage":{}}\n\n'
    assert b"throttlingException" in out[3] and out[4] == anthropic_sse(STOP)


def test_chunk_types_sharing_a_prefix() -> None:
    """Each chunk is named by its own type, also when it begins like the last one's."""
    events = [{"type": t, "index": 0} for t in ("abc", "abcd", "abc", "ab", "abc")]
    assert EventStreamSplitter().feed(b"".join(chunk_frame(e) for e in events)) == [
        anthropic_sse(e) for e in events
    ]


def test_an_event_type_that_is_not_a_name_makes_no_sse_line() -> None:
    """A chunk or Converse event whose type holds a line break (a broken or hostile
    provider) is dropped and counted, never written as SSE lines of its own."""
    splitter = EventStreamSplitter()
    forged = {"type": "ping\nevent: error\ndata: {}", "x": 1}
    out = splitter.feed(chunk_frame(forged) + event_frame("contentBlockDelta\ndata: {}", {"a": 1}))
    assert out == [] and splitter.malformed == 2
    good = splitter.feed(chunk_frame({"type": "message_stop"}))
    assert good == [b'event: message_stop\ndata: {"type":"message_stop"}\n\n']
