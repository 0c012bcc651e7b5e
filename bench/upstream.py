"""A fast, minimal OpenAI-compatible upstream for benchmarking (never for tests).

A raw asyncio protocol (uvloop when installed) with a hand-written HTTP/1.1
request parser: keep-alive, ``content-length`` request bodies, no pipelining
needed. It answers every POST with a canned chat completion, or, when the body
says ``"stream": true``, with a 20-chunk SSE stream (19 content chunks, a final
chunk with ``finish_reason`` and usage, then ``data: [DONE]``) in chunked
transfer encoding. It must never be the bottleneck: the runner measures it
directly and prints its CPU per request.

Streams:
  * chunks are written one ``transport.write`` each, ``--chunk-gap-ms`` apart
    (default 1 ms, the event loop's timer resolution), so a proxy sees every
    chunk as its own read, as with a real model that emits tokens over time;
    ``?gap_ms=N`` on the request overrides it, ``?chunks=N`` sends N SSE chunks
    instead of 20 (the runner measures the per-chunk cost as the slope between two
    stream lengths);
  * ``?hold=ID`` sends the role chunk and the first content chunk, then holds the
    stream open until ``GET /_bench/release?hold=ID`` (a stream arriving after its
    release does not hold), or 45 s, for the RSS-with-open-streams phase.

Anthropic's and the clouds' paths (bench/clouds.py), answered from the request's path:

  * ``/v1/messages``, Bedrock's ``/model/{id}/invoke`` and Vertex's ``:rawPredict``: a
    canned Anthropic Messages answer; ``/v1/messages`` with ``"stream": true`` and
    ``:streamRawPredict``: the same answer as Anthropic's SSE events (``message_start``,
    ``content_block_start``, text deltas, ``content_block_stop``, ``message_delta``,
    ``message_stop``: N events in all for ``chunks=N``);
  * Bedrock's ``/model/{id}/invoke-with-response-stream``: the same events, each in an
    AWS event-stream ``chunk`` frame (``application/vnd.amazon.eventstream``, the event's
    JSON in base64, made once with ``gateway.testing.eventstream_frames``); a cloud call
    carries no client query, so the length comes from the model id too
    (``anthropic.claude-bench-chunks-100``);
  * Azure OpenAI's ``/openai/deployments/{d}/chat/completions`` is a chat completion,
    as every other path.

Run: ``python bench/upstream.py --port 18090`` (prints ``READY <port>``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import signal
import socket
from urllib.parse import parse_qsl

MODEL = "bench-model"
CHUNKS = 20  # SSE data chunks per stream, [DONE] not counted
HOLD_MAX_S = (
    45.0  # below the gateway's stream_idle timeout (60 s), so a late stream still completes
)

_COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello! This is the bench upstream answering your request.",
                },
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 14, "total_tokens": 26},
    },
    separators=(",", ":"),
).encode()

RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(_COMPLETION)).encode()
    + b"\r\n\r\n"
    + _COMPLETION
)
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def _sse_chunk(i: int, chunks: int = CHUNKS) -> bytes:
    if i == 0:
        delta: dict[str, str] = {"role": "assistant", "content": ""}
    else:
        delta = {"content": f"tok{i} "}
    obj: dict[str, object] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }
    if i == chunks - 1:
        obj["choices"] = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
        obj["usage"] = {"prompt_tokens": 12, "completion_tokens": 19, "total_tokens": 31}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _http_chunk(payload: bytes) -> bytes:
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


SSE_EVENTS = [_sse_chunk(i) for i in range(CHUNKS)] + [b"data: [DONE]\n\n"]
STREAM_PARTS = [_http_chunk(e) for e in SSE_EVENTS]
STREAM_END = b"0\r\n\r\n"
_PARTS: dict[int, list[bytes]] = {CHUNKS: STREAM_PARTS}


def stream_parts(chunks: int) -> list[bytes]:
    """The HTTP chunks of a stream of ``chunks`` SSE chunks (+ ``[DONE]``), made once."""
    parts = _PARTS.get(chunks)
    if parts is None:
        events = [_sse_chunk(i, chunks) for i in range(chunks)] + [b"data: [DONE]\n\n"]
        parts = _PARTS[chunks] = [_http_chunk(e) for e in events]
    return parts


# ---- Anthropic Messages, as SSE and as Bedrock's event stream (bench/clouds.py) ----------

_MESSAGE = json.dumps(
    {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [
            {"type": "text", "text": "Hello! This is the bench upstream answering your request."}
        ],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 14},
    },
    separators=(",", ":"),
).encode()
MESSAGE_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
    + str(len(_MESSAGE)).encode()
    + b"\r\n\r\n"
    + _MESSAGE
)
EVENTSTREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def anthropic_events(chunks: int) -> list[dict[str, object]]:
    """An Anthropic Messages stream of ``chunks`` events (at least 6): its start, one text
    block of ``chunks - 5`` deltas, its end."""
    deltas = [
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "text_delta", "text": f"tok{i} "}}
        for i in range(1, max(6, chunks) - 4)
    ]  # fmt: skip
    return [
        {"type": "message_start", "message": {
            "id": "msg_bench", "type": "message", "role": "assistant", "model": MODEL,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "text", "text": ""}},
        *deltas,
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": len(deltas)}},
        {"type": "message_stop"},
    ]  # fmt: skip


_KIND_PARTS: dict[tuple[str, int], list[bytes]] = {}


def kind_parts(kind: str, chunks: int) -> list[bytes]:
    """The HTTP chunks of an Anthropic stream of ``chunks`` events: ``kind`` ``sse`` (as
    Anthropic sends it) or ``eventstream`` (as Bedrock does), made once."""
    parts = _KIND_PARTS.get((kind, chunks))
    if parts is None:
        events = anthropic_events(chunks)
        if kind == "eventstream":
            from gateway.testing.eventstream_frames import chunk_frame

            raw = [chunk_frame(e) for e in events]
        else:
            raw = [
                b"event: %s\ndata: %s\n\n"
                % (str(e["type"]).encode(), json.dumps(e, separators=(",", ":")).encode())
                for e in events
            ]
        parts = _KIND_PARTS[(kind, chunks)] = [_http_chunk(e) for e in raw]
    return parts


_CHUNKS_IN_PATH = re.compile(rb"chunks-(\d+)")


def _kind(target: bytes, body: bytes) -> tuple[str, bool]:
    """What a POST asks for: (``chat``, ``anthropic`` or ``eventstream``, whether it streams)."""
    streams = b'"stream":true' in body or b'"stream": true' in body
    if target.startswith(b"/v1/messages") or b"rawPredict" in target:
        return "anthropic", streams or b":streamRawPredict" in target
    if target.startswith(b"/model/"):
        if b"/invoke-with-response-stream" in target:
            return "eventstream", True
        return "anthropic", False
    return "chat", streams


_MODELS = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
_OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(_MODELS),
    _MODELS,
)
_RELEASED = b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nreleased\n"
_BAD = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
_LENGTH_REQUIRED = b"HTTP/1.1 411 Length Required\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class State:
    def __init__(self, gap_s: float) -> None:
        self.gap_s = gap_s
        self.release = asyncio.Event()
        self.held = 0
        self.released: set[str] = set()  # hold ids already released: late arrivals don't hold
        self.requests = 0


class Conn(asyncio.Protocol):
    __slots__ = ("buf", "busy", "closed", "state", "t")

    def __init__(self, state: State) -> None:
        self.state = state
        self.buf = b""
        self.busy = False  # a stream is being written: parse the next request afterwards
        self.closed = False
        self.t: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf = self.buf + data if self.buf else data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        t = self.t
        assert t is not None
        buf = self.buf
        while buf and not self.busy:
            he = buf.find(b"\r\n\r\n")
            if he < 0:
                break
            head = buf[:he]
            line_end = head.find(b"\r\n")
            request_line = head if line_end < 0 else head[:line_end]
            parts = request_line.split(b" ")
            if len(parts) != 3:
                t.write(_BAD)
                t.close()
                self.buf = b""
                return
            method, target = parts[0], parts[1]
            lower = head.lower()
            cl = 0
            i = lower.find(b"\r\ncontent-length:")
            if i >= 0:
                j = lower.find(b"\r\n", i + 2)
                cl = int(lower[i + 17 : j if j >= 0 else len(lower)].strip())
            elif method == b"POST" and b"\r\ntransfer-encoding:" in lower:
                t.write(_LENGTH_REQUIRED)
                t.close()
                self.buf = b""
                return
            end = he + 4 + cl
            if len(buf) < end:
                break
            body = buf[he + 4 : end]
            buf = buf[end:]
            close = b"\r\nconnection: close" in lower
            self.state.requests += 1
            if method == b"GET":
                if target.startswith(b"/_bench/release"):
                    q = target.find(b"?")
                    for k, v in parse_qsl(target[q + 1 :].decode("latin-1") if q >= 0 else ""):
                        if k == "hold":
                            self.state.released.add(v)
                    self.state.release.set()
                    self.state.release = asyncio.Event()
                    t.write(_RELEASED)
                else:
                    t.write(_OK)
            else:
                kind, streams = _kind(target, body)
                if streams:
                    self.busy = True
                    self.buf = buf
                    asyncio.get_running_loop().create_task(self._stream(target, close, kind))
                    return
                t.write(MESSAGE_RESPONSE if kind == "anthropic" else RESPONSE)
            if close:
                t.close()
                self.buf = b""
                return
        self.buf = buf

    async def _stream(self, target: bytes, close: bool, kind: str = "chat") -> None:
        t = self.t
        assert t is not None
        st = self.state
        gap = st.gap_s
        hold = False
        parts = STREAM_PARTS
        head = STREAM_HEAD
        if kind != "chat":
            m = _CHUNKS_IN_PATH.search(target)
            parts = kind_parts("sse" if kind == "anthropic" else kind,
                               int(m.group(1)) if m else CHUNKS)  # fmt: skip
            if kind == "eventstream":
                head = EVENTSTREAM_HEAD
        q = target.find(b"?")
        if q >= 0:
            for k, v in parse_qsl(target[q + 1 :].decode("latin-1")):
                if k == "hold":
                    hold = v not in ("", "0") and v not in st.released
                elif k == "gap_ms":
                    gap = float(v) / 1000.0
                elif k == "chunks":
                    n = max(2, min(int(v), 10_000))
                    parts = (stream_parts(n) if kind == "chat" else
                             kind_parts("sse" if kind == "anthropic" else kind, n))  # fmt: skip
        try:
            if hold:  # the role chunk and the first content chunk, then hold
                t.write(head + parts[0] + parts[1])
                rest = parts[2:]
            else:
                t.write(head + parts[0])
                rest = parts[1:]
            if hold:
                st.held += 1
                try:
                    await asyncio.wait_for(st.release.wait(), HOLD_MAX_S)
                except TimeoutError:
                    pass
                finally:
                    st.held -= 1
            for part in rest:
                if self.closed:
                    return
                if gap > 0:
                    await asyncio.sleep(gap)
                    if self.closed:
                        return
                t.write(part)
            t.write(STREAM_END)
            if close:
                t.close()
                return
        except Exception:  # pragma: no cover - a benchmark server: never crash the loop
            t.close()
            return
        self.busy = False
        if self.buf and not self.closed:
            self._process()


async def serve(host: str, port: int, gap_s: float, backlog: int = 4096) -> None:
    loop = asyncio.get_running_loop()
    state = State(gap_s)
    server = await loop.create_server(
        lambda: Conn(state), host, port, reuse_address=True, backlog=backlog
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"READY {bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18090)
    p.add_argument("--chunk-gap-ms", type=float, default=1.0)
    a = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    asyncio.run(serve(a.host, a.port, a.chunk_gap_ms / 1000.0))


if __name__ == "__main__":
    main()
