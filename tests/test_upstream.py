"""The upstream client (gateway/upstream/client.py) against raw sockets: what a provider may send.

Each test runs a small asyncio server that answers with exact bytes, so what is
asserted is how the client reads them: the pooled-connection guard, decompression,
the size limits and the failure each broken answer maps to.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from gateway.errors import Category, UpstreamFailure
from gateway.upstream.client import AnswerLimits, Upstream
from tests.waiting import eventually

Script = Callable[[int, asyncio.StreamWriter], Awaitable[None]]


def response(body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    head += b"".join(h + b"\r\n" for h in extra)
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


@pytest.fixture
async def server() -> AsyncIterator[Callable[[Script], Awaitable[str]]]:
    """``url = await server(script)``: ``script(n, writer)`` answers the n-th request."""
    servers: list[asyncio.Server] = []

    async def start(script: Script) -> str:
        count = 0

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal count
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = next(
                        (
                            int(line.split(b":")[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length:")
                        ),
                        0,
                    )
                    await reader.readexactly(length)
                    count += 1
                    await script(count, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(srv)
        return f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/v1/chat/completions"

    yield start
    for srv in servers:
        srv.close()


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    u = Upstream(AnswerLimits(max_body_bytes=64 * 1024))
    await u.start()
    yield u
    await u.close()


async def post(u: Upstream, url: str) -> bytes:
    resp = await u.open(url, {}, b"{}", connect_timeout=1, first_byte_timeout=1)
    return await u.read(resp, idle_timeout=1)


async def forge_while_idle(n: int, writer: asyncio.StreamWriter) -> None:
    """Answer, then (on the first request only) push a second, forged answer 50 ms later."""
    writer.write(response(b'{"n":%d}' % n))
    if n == 1:
        await asyncio.sleep(0.05)  # the scenario: the connection is idle in the pool by then
        writer.write(response(b'{"forged":true}'))


def forged_arrived(connector: aiohttp.BaseConnector) -> bool:
    """Whether the bytes sent to the connection idle in the pool have arrived: aiohttp up to
    3.14 marks it ``should_close`` (the test it applies on release and ``upstream._Pool``
    on reuse) and keeps it pooled; an aiohttp that fixed #13656 may instead close it and
    drop it from the pool. The pool is aiohttp's private ``_conns``: these tests are about
    aiohttp's internals anyway."""
    pooled = [p for conns in connector._conns.values() for p, _ in conns]  # type: ignore[attr-defined]
    return not pooled or any(p.should_close for p in pooled)


async def test_plain_aiohttp_either_has_the_hole_or_fixed_it(server: Any) -> None:
    """What the pool guard stands in for: plain aiohttp, asked again after bytes arrived on
    its idle pooled connection, answers with them (aio-libs/aiohttp#13656, up to 3.14.5 at
    least) or with the provider's real answer (a release with the fix). Nothing else: the
    gateway's guard (next test) is right under both; once every supported aiohttp gives
    the real answer, ``upstream._Pool`` can go."""
    url = await server(forge_while_idle)
    async with aiohttp.ClientSession() as s:
        async with s.post(url, data=b"{}") as r:
            assert await r.read() == b'{"n":1}'
        assert s.connector is not None
        await eventually(lambda: forged_arrived(s.connector), what="the forged answer")
        async with s.post(url, data=b"{}") as r:
            assert await r.read() in (b'{"forged":true}', b'{"n":2}')


async def test_a_connection_that_spoke_while_idle_is_never_reused(
    server: Any, upstream: Upstream
) -> None:
    """Bytes a provider sends on an idle pooled connection never answer a later request
    (the behaviour the gateway needs, with or without aiohttp's own fix)."""
    url = await server(forge_while_idle)
    assert await post(upstream, url) == b'{"n":1}'
    connector = upstream._session.connector  # type: ignore[union-attr]
    assert connector is not None
    await eventually(lambda: forged_arrived(connector), what="the forged answer")
    assert await post(upstream, url) == b'{"n":2}'  # a fresh connection, a real answer
    assert await post(upstream, url) == b'{"n":3}'


async def test_a_second_answer_in_the_same_write_is_not_read_as_the_next(
    server: Any, upstream: Upstream
) -> None:
    """A response followed at once by another one: the connection is closed, not pooled."""

    async def twice(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(response(b'{"n":%d}' % n) + (response(b'{"forged":1}') if n == 1 else b""))

    url = await server(twice)
    assert await post(upstream, url) == b'{"n":1}'
    assert await post(upstream, url) == b'{"n":2}'


async def test_gzip_answer_is_decoded(server: Any, upstream: Upstream) -> None:
    """A provider that compresses although asked for identity: the body arrives decoded."""
    plain = b'{"usage":{"prompt_tokens":3}}'

    async def gz(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(response(gzip.compress(plain), b"content-encoding: gzip"))

    assert await post(upstream, await server(gz)) == plain


async def test_body_over_the_limit_fails_as_connection(server: Any, upstream: Upstream) -> None:
    """A body larger than max_body_bytes (counted after decompression) is refused."""

    async def bomb(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(response(gzip.compress(b"0" * 10_000_000), b"content-encoding: gzip"))

    with pytest.raises(UpstreamFailure) as info:
        await post(upstream, await server(bomb))
    assert info.value.category is Category.connection and info.value.stage == "body"
    assert "over 65536 bytes" in info.value.message


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nx-long: " + b"a" * 20_000 + b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"".join(b"x-%d: 1\r\n" % i for i in range(500)) + b"\r\n",
        b"NOT HTTP AT ALL\r\n\r\n",
    ],
    ids=["long-header", "many-headers", "garbage"],
)
async def test_malformed_heads_fail_as_connection(
    server: Any, upstream: Upstream, answer: bytes
) -> None:
    """Header lines over the limit, too many headers, garbage: a connection failure."""

    async def send(n: int, writer: asyncio.StreamWriter) -> None:
        writer.write(answer)

    with pytest.raises(UpstreamFailure) as info:
        await post(upstream, await server(send))
    assert info.value.category is Category.connection


async def test_silence_is_a_first_byte_timeout(server: Any, upstream: Upstream) -> None:
    """No status line in time: a timeout whose stage says the first byte never came."""

    async def silent(n: int, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)  # the scenario: a provider that never answers

    url = await server(silent)
    with pytest.raises(UpstreamFailure) as info:
        await upstream.open(url, {}, b"{}", connect_timeout=1, first_byte_timeout=0.2)
    assert info.value.category is Category.timeout and info.value.stage == "first_byte"


async def test_half_a_body_then_silence_times_out_and_is_not_pooled(
    server: Any, upstream: Upstream
) -> None:
    """A body that stops mid-way times out; the connection is closed, so the next
    request gets a whole answer on a fresh one."""

    async def half(n: int, writer: asyncio.StreamWriter) -> None:
        whole = response(b'{"n":%d}' % n)
        writer.write(whole[:-3] if n == 1 else whole)

    url = await server(half)
    resp = await upstream.open(url, {}, b"{}", connect_timeout=1, first_byte_timeout=1)
    with pytest.raises(UpstreamFailure) as info:
        await upstream.read(resp, idle_timeout=0.2)
    assert info.value.category is Category.timeout
    async with asyncio.timeout(2):
        assert await post(upstream, url) == b'{"n":2}'


async def test_refused_connection_maps_to_connect_stage(upstream: Upstream) -> None:
    """Nothing listening: a connection failure at the connect stage."""
    srv = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    with pytest.raises(UpstreamFailure) as info:
        await upstream.open(
            f"http://127.0.0.1:{port}/", {}, b"{}", connect_timeout=1, first_byte_timeout=1
        )
    assert info.value.category is Category.connection and info.value.stage == "connect"
