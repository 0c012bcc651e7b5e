"""The client edge on the wire, ordinary behaviour: keep-alive and pipelining in order,
``Expect: 100-continue`` after the key check, HTTP/1.0, and the header / idle timer."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from gateway.testing import FakeProvider
from tests.edges.support import chat_request, close, connect, read_response, request_bytes
from tests.harness import CLIENT_KEY, Harness

BODY = json.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}).encode()


async def test_pipelined_requests_are_answered_in_order(gw: Harness) -> None:
    """Three requests written at once on one connection get three answers, in order."""
    reader, writer = await connect(gw.url)
    try:
        writer.write(
            request_bytes("/healthz", method="GET")
            + chat_request()
            + request_bytes("/readyz", method="GET")
        )
        async with asyncio.timeout(5):
            answers = [await read_response(reader) for _ in range(3)]
    finally:
        await close(writer)
    assert [a.status for a in answers] == [200, 200, 200]
    assert answers[0].body == b"ok\n" and answers[2].body == b"ready\n"
    assert answers[1].json()["object"] == "chat.completion"


async def test_expect_continue_is_answered_after_the_key_check(
    gw: Harness, fake: FakeProvider
) -> None:
    """With a valid key the client is told to go on (100), then answered; with an
    unknown key it gets its 401 at once and never has to send the body."""
    head = request_bytes(
        "/v1/chat/completions",
        headers={
            "authorization": f"Bearer {CLIENT_KEY}",
            "content-type": "application/json",
            "content-length": str(len(BODY)),
            "expect": "100-continue",
        },
    )
    reader, writer = await connect(gw.url)
    try:
        writer.write(head)
        async with asyncio.timeout(5):
            interim = await read_response(reader)
            assert interim.status == 100
            writer.write(BODY)
            final = await read_response(reader)
    finally:
        await close(writer)
    assert final.status == 200 and final.json()["object"] == "chat.completion"

    refused = head.replace(CLIENT_KEY.encode(), b"not-a-key")
    reader, writer = await connect(gw.url)
    try:
        writer.write(refused)
        async with asyncio.timeout(5):
            answer = await read_response(reader)
    finally:
        await close(writer)
    assert answer.status == 401
    assert len(fake.requests) == 1


async def test_http10_request_is_answered_and_closed(gw: Harness) -> None:
    """An HTTP/1.0 request without keep-alive gets its answer and the connection closes."""
    reader, writer = await connect(gw.url)
    try:
        writer.write(b"GET /healthz HTTP/1.0\r\n\r\n")
        async with asyncio.timeout(5):
            data = await reader.read()  # to EOF: the gateway closes
    finally:
        await close(writer)
    assert data.startswith(b"HTTP/1.") and b" 200 " in data[:20] and data.endswith(b"ok\n")


async def test_idle_and_slow_head_connections_are_closed(
    make_gateway: Callable[..., Awaitable[Harness]],
) -> None:
    """A keep-alive connection left idle, and one that sends half a head, are closed after
    client_header_timeout_s; a connection in use is not."""
    gw = await make_gateway(client_header_timeout_s=0.3)
    idle_r, idle_w = await connect(gw.url)
    slow_r, slow_w = await connect(gw.url)
    try:
        idle_w.write(request_bytes("/healthz", method="GET"))
        async with asyncio.timeout(5):
            assert (await read_response(idle_r)).status == 200
        slow_w.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
        t = time.monotonic()
        async with asyncio.timeout(5):
            assert await idle_r.read() == b""  # closed by the gateway
            assert await slow_r.read() == b""
        assert time.monotonic() - t < 2.0
    finally:
        await close(idle_w)
        await close(slow_w)
