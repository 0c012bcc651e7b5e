"""The gateway's HTTP/1.1 server on its own: framing, keep-alive, limits, disconnects.

Each test runs a real :class:`HttpServer` on a loopback port with a small handler and
talks to it over a raw socket, so what is asserted is the bytes on the wire.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gateway.server import HttpServer, Request, Response, StreamResponse

Handler = Callable[[Request], Any]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    servers: list[HttpServer] = []

    async def start(handler: Handler, **kw: Any) -> tuple[HttpServer, int]:
        kw.setdefault("max_body_bytes", 1000)
        kw.setdefault("read_timeout_s", 0.3)
        server = HttpServer(handler, **kw)
        port = await server.listen("127.0.0.1", 0)
        servers.append(server)
        return server, port

    yield start
    for s in servers:
        await s.close()


async def echo(request: Request) -> Response:
    text = f"{request.method} {request.path} ?{request.query_string} {len(request.body)}"
    return Response(text=text, headers={"x-seen-a": request.headers.get("x-a", "-")})


async def exchange(port: int, data: bytes, *, until_eof: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        async with asyncio.timeout(3):
            return await reader.read() if until_eof else await reader.read(65536)
    finally:
        writer.close()


def statuses(reply: bytes) -> list[int]:
    return [int(m) for m in re.findall(rb"HTTP/1\.1 (\d{3}) ", reply) if m != b"100"]


async def test_keep_alive_pipelined_requests_answered_in_order(serve: Any) -> None:
    _, port = await serve(echo)
    reqs = b"".join(
        b"POST /p%d?q=%d HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (i, i, i, b"x" * i)
        for i in range(1, 4)
    )
    reply = await exchange(port, reqs + b"GET /end HTTP/1.1\r\nconnection: close\r\n\r\n")
    assert statuses(reply) == [200, 200, 200, 200]
    bodies = [b"POST /p1 ?q=1 1", b"POST /p2 ?q=2 2", b"POST /p3 ?q=3 3", b"GET /end ? 0"]
    positions = [reply.index(b) for b in bodies]
    assert positions == sorted(positions)
    assert reply.count(b"connection: close") == 1  # only the last one asked to close


async def test_repeated_headers_are_joined_and_names_lower_cased(serve: Any) -> None:
    _, port = await serve(echo)
    reply = await exchange(port, b"GET / HTTP/1.1\r\nX-A: 1\r\nx-a: 2\r\nconnection: close\r\n\r\n")
    assert b"x-seen-a: 1, 2\r\n" in reply


async def test_chunked_request_body_and_expect_continue(serve: Any) -> None:
    _, port = await serve(echo)
    reply = await exchange(
        port,
        b"POST /c HTTP/1.1\r\nexpect: 100-continue\r\ntransfer-encoding: chunked\r\n"
        b"connection: close\r\n\r\n5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    assert reply.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert reply.endswith(b"POST /c ? 8")


async def test_http10_closes_and_head_has_no_body(serve: Any) -> None:
    _, port = await serve(echo)
    reply = await exchange(port, b"GET /ten HTTP/1.0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK") and b"connection: close" in reply
    assert reply.endswith(b"GET /ten ? 0")
    head = await exchange(port, b"HEAD /h HTTP/1.1\r\nconnection: close\r\n\r\n")
    assert b"content-length: 11\r\n" in head  # the length GET would have
    assert head.endswith(b"\r\n\r\n")


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\nx: " + b"a" * 9000 + b"\r\n\r\n", 431),
        (b"".join([b"GET / HTTP/1.1\r\n", *(b"h%d: v\r\n" % i for i in range(200)), b"\r\n"]), 431),
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nbad header\r\n\r\n", 400),
    ],
)
async def test_malformed_input_is_refused_and_closed(serve: Any, data: bytes, status: int) -> None:
    seen: list[Request] = []

    async def handler(request: Request) -> Response:
        seen.append(request)
        return Response(text="no")

    _, port = await serve(handler)
    reply = await exchange(port, data)
    assert statuses(reply) == [status]
    assert seen == []


async def test_oversize_body_reaches_the_handler_as_rejected_413(serve: Any) -> None:
    got: list[tuple[int, str] | None] = []

    async def handler(request: Request) -> Response:
        got.append(request.rejected)
        return Response(text="refused", status=request.rejected[0] if request.rejected else 200)

    _, port = await serve(handler)
    sized = b"POST / HTTP/1.1\r\ncontent-length: 5000\r\n\r\n" + b"x" * 5000
    assert statuses(await exchange(port, sized)) == [413]
    chunked = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"
    chunked += b"".join(b"200\r\n" + b"y" * 512 + b"\r\n" for _ in range(4)) + b"0\r\n\r\n"
    assert statuses(await exchange(port, chunked)) == [413]
    assert [g[0] if g else None for g in got] == [413, 413]


async def test_slow_headers_and_slow_body_time_out(serve: Any) -> None:
    rejected: list[int] = []

    async def handler(request: Request) -> Response:
        if request.rejected:
            rejected.append(request.rejected[0])
            return Response(text="slow", status=request.rejected[0])
        return Response(text="ok")

    _, port = await serve(handler, read_timeout_s=0.2)
    loop = asyncio.get_running_loop()
    t = loop.time()
    assert statuses(await exchange(port, b"GET / HTTP/1.1\r\nhost: x\r\nx-half")) == [408]
    assert statuses(await exchange(port, b"POST / HTTP/1.1\r\ncontent-length: 10\r\n\r\nab")) == [
        408
    ]
    assert loop.time() - t < 1.5
    assert rejected == [408]  # the body case reaches the handler (to answer in format)


async def test_stream_is_chunked_and_client_leaving_cancels_the_handler(serve: Any) -> None:
    cancelled = asyncio.Event()
    sent = asyncio.Event()

    async def handler(request: Request) -> StreamResponse:
        out = StreamResponse(200, {"content-type": "text/event-stream"})
        await out.prepare(request)
        await out.write(b"data: 1\n\n")
        sent.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return out

    _, port = await serve(handler)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /s HTTP/1.1\r\n\r\n")
    await asyncio.wait_for(sent.wait(), 3)
    head = await reader.readuntil(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head
    assert await reader.readexactly(14) == b"9\r\ndata: 1\n\n\r\n"
    writer.close()
    await asyncio.wait_for(cancelled.wait(), 3)


async def test_idle_keep_alive_connections_are_closed(serve: Any) -> None:
    server, port = await serve(echo, keepalive_s=0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\n\r\n")
    await reader.readuntil(b"GET / ? 0")
    assert len(server.connections) == 1
    async with asyncio.timeout(3):
        assert await reader.read() == b""  # closed by the server once idle
    writer.close()


async def test_handler_error_is_500_and_the_server_goes_on(serve: Any) -> None:
    async def handler(request: Request) -> Response:
        if request.path == "/boom":
            raise RuntimeError("bug")
        return Response(text="fine")

    _, port = await serve(handler)
    reply = await exchange(
        port, b"GET /boom HTTP/1.1\r\n\r\nGET /ok HTTP/1.1\r\nconnection: close\r\n\r\n"
    )
    assert statuses(reply) == [500, 200]


async def test_header_value_with_line_break_is_never_written(serve: Any) -> None:
    async def handler(request: Request) -> Response:
        return Response(text="x", headers={"x-evil": "a\r\nset-cookie: b"})

    _, port = await serve(handler)
    reply = await exchange(port, b"GET / HTTP/1.1\r\nconnection: close\r\n\r\n")
    assert statuses(reply) == [500]
    assert b"set-cookie" not in reply
