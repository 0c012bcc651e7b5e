"""Shared pieces of the edge tests: raw HTTP on sockets, a hostile upstream, RSS probes.

Everything here talks to the gateway through sockets only: raw asyncio streams (so a
test controls every byte and every pause) or a gateway process
(:class:`tests.process.GatewayProcess`) whose memory is measured from ``/proc``.
The fixtures that start these are in ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.harness import CLIENT_KEY
from tests.process import GatewayProcess

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
MESSAGES = [{"role": "user", "content": "hi"}]
AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}


# ---- raw HTTP on a socket ---------------------------------------------------------------


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


async def connect(
    url: str, *, rcvbuf: int | None = None, sndbuf: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A fresh connection; small kernel buffers when asked (set before connecting)."""
    host, port = host_port(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if sndbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        async with asyncio.timeout(1):
            await writer.wait_closed()


def request_bytes(
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    method: str = "POST",
) -> bytes:
    """A request in bytes; ``content-length`` is added for a body unless a header sets it."""
    lines = [f"{method} {path} HTTP/1.1", "host: gateway"]
    hdrs = {k.lower(): v for k, v in (headers or {}).items()}
    if body is not None and "content-length" not in hdrs and "transfer-encoding" not in hdrs:
        hdrs["content-length"] = str(len(body))
    lines += [f"{k}: {v}" for k, v in hdrs.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


def chat_request(
    model: str = "gpt-test",
    *,
    stream: bool = False,
    key: str | None = CLIENT_KEY,
    extra: dict[str, str] | None = None,
    path: str = "/v1/chat/completions",
) -> bytes:
    body = json.dumps({"model": model, "messages": MESSAGES, "stream": stream}).encode()
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    headers.update(extra or {})
    return request_bytes(path, body, headers)


class Malformed(AssertionError):
    """The gateway's bytes are not a well-formed HTTP/1.1 response."""


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    body: bytes
    chunked: bool = False

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def sse_data(self) -> list[str]:
        """The ``data:`` payloads of an SSE body, in order."""
        out = []
        for event in self.body.replace(b"\r\n", b"\n").split(b"\n\n"):
            lines = [ln[5:].strip() for ln in event.split(b"\n") if ln.startswith(b"data:")]
            if lines:
                out.append(b"\n".join(lines).decode())
        return out


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.split(b"\r\n")
    status_line = lines[0]
    if not status_line.startswith(b"HTTP/1.") or len(status_line.split(b" ")) < 2:
        raise Malformed(f"not a status line: {status_line[:120]!r}")
    try:
        status = int(status_line.split(b" ")[1])
    except ValueError:
        raise Malformed(f"not a status line: {status_line[:120]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise Malformed(f"not a header line: {line[:120]!r}")
        key = name.decode("latin-1").lower()
        text = value.strip().decode("latin-1")
        headers[key] = text if key not in headers else f"{headers[key]}, {text}"
    return status, headers


async def read_response(reader: asyncio.StreamReader, *, head_only: bool = False) -> RawResponse:
    """Read one response (a 1xx is returned on its own); strict chunked framing."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        raise Malformed(
            f"the connection ended before a response head: {e.partial[:200]!r}"
        ) from None
    status, headers = _parse_head(head[:-4])
    if head_only or 100 <= status < 200 or status in (204, 304):
        return RawResponse(status, headers, b"")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line[:-2].split(b";")[0], 16)
            except ValueError:
                raise Malformed(f"not a chunk size line: {size_line[:120]!r}") from None
            data = await reader.readexactly(size + 2)
            if data[-2:] != b"\r\n":
                raise Malformed(f"a chunk does not end with CRLF: {data[-40:]!r}")
            if size == 0:
                break
            parts.append(data[:-2])
        return RawResponse(status, headers, b"".join(parts), chunked=True)
    if "content-length" in headers:
        return RawResponse(
            status, headers, await reader.readexactly(int(headers["content-length"]))
        )
    return RawResponse(status, headers, await reader.read())


async def parse_responses(raw: bytes) -> list[RawResponse]:
    """Every response in ``raw`` (the bytes of one connection, read to its end), strictly."""
    reader = asyncio.StreamReader()
    reader.feed_data(raw)
    reader.feed_eof()
    out = []
    try:
        while not reader.at_eof():
            out.append(await read_response(reader))
    except asyncio.IncompleteReadError as e:
        raise Malformed(f"a response is cut short: {e.partial[-200:]!r}") from None
    return out


async def send_and_read(url: str, data: bytes, within: float = 5.0) -> RawResponse:
    """Send ``data`` on a fresh connection; the first response, read in ``within`` seconds."""
    reader, writer = await connect(url)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(within):
            return await read_response(reader)
    finally:
        await close(writer)


# ---- upstream answers -------------------------------------------------------------------


def chat_json(text: str, prompt_tokens: int = 3, completion_tokens: int = 5) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-evil",
            "object": "chat.completion",
            "created": 0,
            "model": "fake-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    ).encode()


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {
        "id": "chatcmpl-evil",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def chat_sse(text: str) -> bytes:
    return (
        chat_chunk({"role": "assistant", "content": ""})
        + chat_chunk({"content": text})
        + chat_chunk({}, "stop")
        + b"data: [DONE]\n\n"
    )


def response_bytes(
    body: bytes, content_type: str = "application/json", extra: str = "", status: int = 200
) -> bytes:
    reason = "OK" if status == 200 else "Error"
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n{extra}"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


# ---- a hostile upstream -------------------------------------------------------------------


@dataclass
class Exchange:
    """One request the evil upstream read, and the connection to answer it on."""

    n: int  # request number over all connections, from 1
    conn: int  # connection number, from 1
    head: bytes
    body: bytes
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    sent: int = 0  # bytes pumped by pump()

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def hold(self) -> None:
        """Send nothing more; return when the gateway closes the connection."""
        with contextlib.suppress(ConnectionError):
            while await self.reader.read(65536):
                pass

    async def pump(
        self,
        piece: bytes,
        cap_bytes: int,
        *,
        trickle: bytes | None = None,
        max_s: float = 10.0,
    ) -> None:
        """Write ``piece`` as fast as the gateway takes it, up to ``cap_bytes``; then
        ``trickle`` every 0.1 s (so no idle timeout ends it); until the gateway closes."""
        eof = asyncio.ensure_future(self.hold())
        end = time.monotonic() + max_s
        try:
            while self.sent < cap_bytes and not eof.done() and time.monotonic() < end:
                self.writer.write(piece)
                self.sent += len(piece)
                await self.writer.drain()
            while not eof.done() and time.monotonic() < end:
                if trickle:
                    self.writer.write(trickle)
                    await self.writer.drain()
                await asyncio.wait({eof}, timeout=0.1)
        except ConnectionError:
            pass
        finally:
            eof.cancel()
            with contextlib.suppress(BaseException):
                await eof


Answer = Callable[[Exchange], Awaitable[bool]]


class EvilUpstream:
    """A raw asyncio HTTP/1.1 server; ``answer(exchange)`` writes whatever it likes and
    returns True to read the next request on the same connection."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[Exchange] = []
        self.connections = 0
        self.closed_connections = 0  # connections ended (by the gateway, or by answer())
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.url = ""

    async def start(self) -> EvilUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t
        for w in list(self._writers):
            w.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1):
                    await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        conn = self.connections
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    break
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                body = await reader.readexactly(length)
                ex = Exchange(len(self.requests) + 1, conn, head, body, reader, writer)
                self.requests.append(ex)
                keep = await self.answer(ex)
                await writer.drain()
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed_connections += 1
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()


# ---- gateways ------------------------------------------------------------------------------


class Process:
    """A gateway process (``python -m gateway serve``) on the code of this tree."""

    def __init__(self, gp: GatewayProcess) -> None:
        self.gp = gp
        self.url = gp.url

    @property
    def pid(self) -> int:
        assert self.gp.proc is not None
        return self.gp.proc.pid

    async def stop(self) -> None:
        proc = self.gp.proc
        if proc is None or proc.poll() is not None:
            return
        proc.kill()  # no graceful drain to wait for: these tests are done with it
        await asyncio.to_thread(proc.wait)


async def warm_up(url: str, *, completions: int = 3) -> None:
    """A few requests of each kind, so that lazy imports and first-use caches are in the
    baseline of an RSS measurement."""
    async with aiohttp.ClientSession() as s:
        for _ in range(5):
            async with s.get(url + "/healthz") as r:
                await r.read()
        body = {"model": "gpt-test", "messages": MESSAGES}
        for stream in [False, True] * completions:
            async with s.post(
                url + "/v1/chat/completions", json={**body, "stream": stream}, headers=AUTH
            ) as r:
                await r.read()
        async with s.get(url + "/metrics") as r:
            await r.read()


# ---- memory ---------------------------------------------------------------------------------


def _status_kb(pid: int, field_name: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field_name} for pid {pid}")


@dataclass
class RssProbe:
    """Samples a process's RSS every 10 ms while it runs; ``growth_mb`` is the peak over
    the RSS at the start (``VmHWM`` catches a peak between two samples)."""

    pid: int
    baseline_kb: int = 0
    peak_kb: int = 0
    _hwm0: int = 0
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    async def __aenter__(self) -> RssProbe:
        self.baseline_kb = self.peak_kb = _status_kb(self.pid, "VmRSS")
        self._hwm0 = _status_kb(self.pid, "VmHWM")
        self._task = asyncio.create_task(self._sample())
        return self

    async def _sample(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(0.01)

    def sample(self) -> None:
        with contextlib.suppress(OSError, AssertionError):
            self.peak_kb = max(self.peak_kb, _status_kb(self.pid, "VmRSS"))
            hwm = _status_kb(self.pid, "VmHWM")
            if hwm > self._hwm0:
                self.peak_kb = max(self.peak_kb, hwm)

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.sample()

    @property
    def growth_mb(self) -> float:
        return (self.peak_kb - self.baseline_kb) / 1024


# ---- waiting --------------------------------------------------------------------------------


async def wait_for(cond: Callable[[], bool], within: float, step: float = 0.02) -> bool:
    """Poll ``cond`` until it holds (True) or ``within`` seconds passed (False)."""
    end = time.monotonic() + within
    while True:
        if cond():
            return True
        if time.monotonic() >= end:
            return False
        await asyncio.sleep(step)


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000 if samples else float("inf")
