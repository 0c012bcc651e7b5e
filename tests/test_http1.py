"""gateway.http1, the upstream HTTP/1.1 client, against real loopback servers.

The fake provider covers the ordinary answers and its scripted faults; a raw asyncio
server (``RawServer``) writes exact bytes for the edge cases: chunked and until-close
bodies, short bodies, stale keep-alive connections, 100 Continue, a huge body for
backpressure.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gateway import http1
from gateway.errors import Category
from gateway.testing import CutAfter, FakeProvider, Hang, HeadersThenSilence, Reset, StallAfter
from gateway.upstream import GO, PAUSE, STOP, Upstream, UpstreamFailure

CHAT = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
STREAM = json.dumps(
    {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
).encode()
HEADERS = {"content-type": "application/json", "authorization": "Bearer k"}
T = {"connect_timeout": 2.0, "first_byte_timeout": 2.0}

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class RawServer:
    """A loopback TCP server whose handler writes raw bytes; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed = asyncio.Event()  # a client connection ended (EOF or reset)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1/x"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        n = self.connections
        self.connections += 1
        try:
            await self.handler(reader, writer, n)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed.set()
            writer.close()
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        """One request (head + body), or None at EOF."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await reader.readexactly(length)
        self.requests.append(head + body)
        return head + body


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        + extra
        + b"content-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def keep_alive_server(answer: bytes, per_connection: int = 1000) -> Handler:
    """Answers ``answer`` to up to ``per_connection`` requests per connection, then closes."""

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        server: RawServer = handler.server  # type: ignore[attr-defined]
        for _ in range(per_connection):
            if await server.read_request(r) is None:
                return
            w.write(answer)
            await w.drain()

    return handler


def raw(handler_body: Callable[[RawServer, asyncio.StreamReader, asyncio.StreamWriter, int],
                               Awaitable[None]]) -> RawServer:  # fmt: skip
    """A RawServer whose handler gets the server too."""
    server: RawServer

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await handler_body(server, r, w, n)

    server = RawServer(handler)
    return server


def serving(answer: bytes, per_connection: int = 1000) -> RawServer:
    h = keep_alive_server(answer, per_connection)
    server = RawServer(h)
    h.server = server  # type: ignore[attr-defined]
    return server


@pytest.fixture
async def client() -> AsyncIterator[http1.Client]:
    c = http1.Client()
    yield c
    await c.close()


# ---- ordinary answers -------------------------------------------------------------------


async def test_post_against_the_fake_provider(fake: FakeProvider, client: http1.Client) -> None:
    resp = await client.post(fake.url + "/v1/chat/completions", HEADERS, CHAT, **T)
    assert resp.status == 200
    assert resp.headers.get("Content-Type", "").startswith("application/json")
    assert resp.headers["CONTENT-TYPE"] == resp.headers["content-type"]
    assert "Content-Length" in resp.headers
    body = json.loads(await resp.read(2.0))
    resp.release()
    assert body["model"] == "fake-model"
    seen = fake.requests[0]
    assert seen.method == "POST" and seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == "Bearer k"
    assert seen.headers["host"] == fake.url.removeprefix("http://")
    assert seen.headers["accept-encoding"] == "identity"
    assert seen.headers["content-length"] == str(len(CHAT))
    assert "cookie" not in seen.headers and "user-agent" not in seen.headers


async def test_query_string_and_caller_accept_encoding(fake: FakeProvider) -> None:
    async with _client() as client:
        headers = {**HEADERS, "accept-encoding": "br", "host": "evil", "content-length": "1"}
        resp = await client.post(
            fake.url + "/v1/chat/completions?api-version=1&x=%20y", headers, CHAT, **T
        )
        await resp.read(2.0)
        resp.release()
    seen = fake.requests[0]
    assert seen.query == {"api-version": "1", "x": " y"}
    assert seen.headers["accept-encoding"] == "br"  # the caller's choice is kept
    assert seen.headers["host"] == fake.url.removeprefix("http://")  # never the caller's
    assert seen.headers["content-length"] == str(len(CHAT))


class _client:
    async def __aenter__(self) -> http1.Client:
        self.c = http1.Client()
        return self.c

    async def __aexit__(self, *exc: object) -> None:
        await self.c.close()


async def test_keep_alive_reuses_one_connection(client: http1.Client) -> None:
    async with serving(ok(b'{"a":1}')) as server:
        for _ in range(5):
            resp = await client.post(server.url, HEADERS, b"{}", **T)
            assert await resp.read(2.0) == b'{"a":1}'
            resp.release()
        assert server.connections == 1
        assert client.idle_count() == 1


async def test_stream_pieces_from_the_fake_provider(fake: FakeProvider) -> None:
    up = Upstream()
    await up.start()
    try:
        resp = await up.open(fake.url + "/v1/chat/completions", HEADERS, STREAM, **T)
        assert resp.headers["content-type"].startswith("text/event-stream")
        data = b"".join([p async for p in up.chunks(resp, 2.0)])
        assert data.count(b"data: ") >= fake.chunks and data.rstrip().endswith(b"[DONE]")
        # read to the end: the connection went back to the pool and is reused
        assert up._client is not None and up._client.idle_count() == 1
        resp = await up.open(fake.url + "/v1/chat/completions", HEADERS, CHAT, **T)
        assert json.loads(await up.read(resp, 2.0))["object"] == "chat.completion"
        assert up._client.idle_count() == 1
    finally:
        await up.close()


async def test_chunked_body_and_duplicate_headers(client: http1.Client) -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\nx-a: 2\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    async with serving(answer) as server:
        resp = await client.post(server.url, HEADERS, b"{}", **T)
        assert resp.headers["x-a"] == "1, 2"
        assert await resp.read(2.0) == b"hello world"
        resp.release()
        resp = await client.post(server.url, HEADERS, b"{}", **T)
        pieces = []
        while piece := await resp.next_piece(2.0):
            pieces.append(piece)
        resp.release()
        assert b"".join(pieces) == b"hello world"
        assert server.connections == 1


async def test_body_until_close(client: http1.Client) -> None:
    async def handler(
        s: RawServer, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        await s.read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\npart one, ")
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"part two")
        await w.drain()
        w.close()

    async with raw(handler) as server:
        resp = await client.post(server.url, HEADERS, b"{}", **T)
        assert await resp.read(2.0) == b"part one, part two"
        resp.release()
        assert client.idle_count() == 0  # the connection ended with the body


async def test_interim_100_continue_is_skipped(client: http1.Client) -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"done")
    async with serving(answer) as server:
        resp = await client.post(server.url, HEADERS, b"{}", **T)
        assert resp.status == 200
        assert await resp.read(2.0) == b"done"
        resp.release()


async def test_status_and_body_of_an_error(fake: FakeProvider, client: http1.Client) -> None:
    from gateway.testing import Error

    fake.push(Error.openai_rate_limit(retry_after=3))
    resp = await client.post(fake.url + "/v1/chat/completions", HEADERS, CHAT, **T)
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "3"
    assert b"rate" in (await resp.read(2.0)).lower()
    resp.release()


# ---- the pool ---------------------------------------------------------------------------


async def test_stale_pooled_connection_is_retried_once_on_a_fresh_one(
    client: http1.Client,
) -> None:
    # Each connection answers once and closes without saying so (no "connection: close"):
    # the pooled connection is dead when the next request is sent on it.
    async with serving(ok(b"x"), per_connection=1) as server:
        for _ in range(3):
            resp = await client.post(server.url, HEADERS, b"{}", **T)
            assert await resp.read(2.0) == b"x"
            resp.release()
            await asyncio.sleep(0.02)  # let the close arrive (or not: both paths work)
        assert server.connections == 3
        assert len(server.requests) == 3  # every request processed exactly once


async def test_stale_race_reset_on_write_is_retried(client: http1.Client) -> None:
    # The server closes right after the first answer; the client reuses the pooled
    # connection before it noticed the close.
    async def handler(
        s: RawServer, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        await s.read_request(r)
        w.write(ok(b"first" if n == 0 else b"again"))
        await w.drain()
        if n == 0:
            await asyncio.sleep(0.05)
            w.transport.abort()  # RST, no answer to the second request
            return
        while await s.read_request(r) is not None:
            w.write(ok(b"again"))

    async with raw(handler) as server:
        resp = await client.post(server.url, HEADERS, b"{}", **T)
        assert await resp.read(2.0) == b"first"
        resp.release()
        await asyncio.sleep(0.01)
        resp = await client.post(server.url, HEADERS, b"{}", **T)  # sent before the RST
        assert await resp.read(2.0) == b"again"
        resp.release()
        assert server.connections == 2


async def test_a_fresh_connection_reset_is_not_retried(
    fake: FakeProvider, client: http1.Client
) -> None:
    fake.push(Reset())
    with pytest.raises(http1.Disconnected) as info:
        await client.post(fake.url + "/v1/chat/completions", HEADERS, CHAT, **T)
    assert not info.value.got_bytes
    assert len(fake.requests) == 1


async def test_abandoned_body_closes_the_connection(client: http1.Client) -> None:
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello"  # 5 of 10 bytes, then waits
    async with serving(answer) as server:
        resp = await client.post(server.url, HEADERS, b"{}", **T)
        assert await resp.next_piece(2.0) == b"hello"
        resp.release()  # the rest never read
        assert client.idle_count() == 0
        await asyncio.wait_for(server.closed.wait(), 2.0)


async def test_a_response_dropped_unreleased_closes_its_connection(
    fake: FakeProvider, client: http1.Client
) -> None:
    fake.push(HeadersThenSilence())
    resp = await client.post(fake.url + "/v1/chat/completions", HEADERS, CHAT, **T)
    del resp  # never read, never released
    await asyncio.wait_for(fake.disconnected.wait(), 2.0)
    assert client.idle_count() == 0


async def test_idle_expiry_and_max_idle_per_host() -> None:
    client = http1.Client(idle_expiry=0.1, max_idle_per_host=1)
    try:
        async with serving(ok(b"x")) as server:
            first, second = await asyncio.gather(
                client.post(server.url, HEADERS, b"{}", **T),
                client.post(server.url, HEADERS, b"{}", **T),
            )
            for resp in (first, second):
                await resp.read(2.0)
                resp.release()
            assert server.connections == 2
            assert client.idle_count() == 1  # the second one over the limit was closed
            await asyncio.sleep(0.3)  # past the expiry: the sweep closed it
            assert client.idle_count() == 0
            resp = await client.post(server.url, HEADERS, b"{}", **T)
            await resp.read(2.0)
            resp.release()
            assert server.connections == 3
    finally:
        await client.close()


async def test_server_closing_an_idle_connection_removes_it_from_the_pool(
    client: http1.Client,
) -> None:
    async with serving(ok(b"x", b"connection: keep-alive\r\n"), per_connection=1) as server:
        resp = await client.post(server.url, HEADERS, b"{}", **T)
        await resp.read(2.0)
        resp.release()
        await asyncio.wait_for(server.closed.wait(), 2.0)
        for _ in range(50):
            if client.idle_count() == 0:
                break
            await asyncio.sleep(0.01)
        assert client.idle_count() == 0


async def test_connection_close_response_is_not_pooled(client: http1.Client) -> None:
    async with serving(ok(b"x", b"connection: close\r\n")) as server:
        resp = await client.post(server.url, HEADERS, b"{}", **T)
        assert await resp.read(2.0) == b"x"
        resp.release()
        assert client.idle_count() == 0


# ---- bodies that end early --------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort", id="content-length"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n", id="chunked"
        ),
    ],
)
async def test_a_body_cut_short_is_an_error_never_a_short_body(
    client: http1.Client, answer: bytes
) -> None:
    async def handler(
        s: RawServer, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        await s.read_request(r)
        w.write(answer)
        await w.drain()
        w.close()

    async with raw(handler) as server:
        resp = await client.post(server.url, HEADERS, b"{}", **T)
        with pytest.raises(http1.Disconnected):
            await resp.read(2.0)
        resp.release()
        resp = await client.post(server.url, HEADERS, b"{}", **T)
        pieces = []
        with pytest.raises(http1.Disconnected):
            while piece := await resp.next_piece(2.0):
                pieces.append(piece)
        assert b"".join(pieces) in (b"short", b"hello")  # what arrived, then the error
        resp.release()


async def test_malformed_response(client: http1.Client) -> None:
    async with serving(b"NOT HTTP AT ALL\r\n\r\n") as server:
        with pytest.raises(http1.BadResponse):
            await client.post(server.url, HEADERS, b"{}", **T)


async def test_header_injection_is_refused(client: http1.Client) -> None:
    with pytest.raises(ValueError, match="CR or LF"):
        await client.post("http://127.0.0.1:9/x", {"x-a": "1\r\nx-b: 2"}, b"", **T)


# ---- timeouts, refusals, cancellation (through gateway.upstream) -------------------------


@pytest.fixture
async def up() -> AsyncIterator[Upstream]:
    u = Upstream()
    await u.start()
    yield u
    await u.close()


async def test_first_byte_timeout(fake: FakeProvider, up: Upstream) -> None:
    fake.push(Hang())
    with pytest.raises(UpstreamFailure) as info:
        await up.open(fake.url + "/v1/chat/completions", HEADERS, CHAT,
                      connect_timeout=1.0, first_byte_timeout=0.2)  # fmt: skip
    assert info.value.category is Category.timeout
    assert "first byte" in info.value.message
    await asyncio.wait_for(fake.disconnected.wait(), 2.0)  # the upstream saw us go


async def test_idle_timeout_reading_the_body(fake: FakeProvider, up: Upstream) -> None:
    fake.push(HeadersThenSilence())
    resp = await up.open(fake.url + "/v1/chat/completions", HEADERS, CHAT, **T)
    with pytest.raises(UpstreamFailure) as info:
        await up.read(resp, 0.2)
    assert info.value.category is Category.timeout
    assert "while reading the body" in info.value.message
    assert "first byte" not in info.value.message
    await asyncio.wait_for(fake.disconnected.wait(), 2.0)


async def test_idle_timeout_mid_stream(fake: FakeProvider, up: Upstream) -> None:
    fake.push(StallAfter(2))
    resp = await up.open(fake.url + "/v1/chat/completions", HEADERS, STREAM, **T)
    got = []
    with pytest.raises(UpstreamFailure) as info:
        async for piece in up.chunks(resp, 0.2):
            got.append(piece)
    assert got
    assert info.value.category is Category.timeout
    assert "mid-stream" in info.value.message


async def test_cut_mid_stream_and_mid_body(fake: FakeProvider, up: Upstream) -> None:
    fake.push(CutAfter(2))
    resp = await up.open(fake.url + "/v1/chat/completions", HEADERS, STREAM, **T)
    with pytest.raises(UpstreamFailure) as info:
        async for _ in up.chunks(resp, 2.0):
            pass
    assert info.value.category is Category.connection
    assert "mid-stream" in info.value.message

    fake.push(CutAfter(1))
    resp = await up.open(fake.url + "/v1/chat/completions", HEADERS, CHAT, **T)
    with pytest.raises(UpstreamFailure) as info:
        await up.read(resp, 2.0)
    assert info.value.category is Category.connection
    assert "while reading the body" in info.value.message


async def test_reset_before_the_answer(fake: FakeProvider, up: Upstream) -> None:
    fake.push(Reset())
    with pytest.raises(UpstreamFailure) as info:
        await up.open(fake.url + "/v1/chat/completions", HEADERS, CHAT, **T)
    assert info.value.category is Category.connection
    assert "before the first byte" in info.value.message


async def test_connection_refused(up: Upstream) -> None:
    async with serving(b"") as server:
        url = server.url
    with pytest.raises(UpstreamFailure) as info:
        await up.open(url, HEADERS, CHAT, **T)
    assert info.value.category is Category.connection
    assert info.value.message.startswith("cannot connect to upstream")


async def test_unresolvable_host(up: Upstream) -> None:
    with pytest.raises(UpstreamFailure) as info:
        await up.open("http://no-such-host.invalid/v1/x", HEADERS, CHAT, **T)
    assert info.value.category is Category.connection


async def test_cancellation_closes_the_connection_at_once(fake: FakeProvider, up: Upstream) -> None:
    fake.push(StallAfter(1))
    resp = await up.open(fake.url + "/v1/chat/completions", HEADERS, STREAM, **T)
    pieces = up.chunks(resp, 30.0)

    async def consume() -> None:
        async for _ in pieces:
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(fake.disconnected.wait(), 1.0)
    assert up._client is not None and up._client.idle_count() == 0


async def test_cancelled_while_waiting_for_the_headers(fake: FakeProvider, up: Upstream) -> None:
    fake.push(Hang())
    task = asyncio.create_task(up.open(fake.url + "/v1/chat/completions", HEADERS, CHAT, **T))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(fake.disconnected.wait(), 1.0)


# ---- backpressure -----------------------------------------------------------------------


async def test_a_slow_reader_pauses_the_socket(client: http1.Client) -> None:
    size = 16 * 1024 * 1024
    body = bytes(range(256)) * (size // 256)

    async def handler(
        s: RawServer, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        await s.read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        for i in range(0, size, 65536):
            w.write(body[i : i + 65536])
            await w.drain()

    async with raw(handler) as server:
        resp = await client.post(server.url, HEADERS, b"{}", **T)
        await asyncio.sleep(0.3)  # nobody reads: the client must stop reading the socket
        conn = resp._conn
        assert conn is not None
        assert conn.paused
        assert conn.buffered <= http1.HIGH_WATER + 512 * 1024  # bounded: one read past it
        got = bytearray()
        while piece := await resp.next_piece(2.0):
            got += piece
            assert conn.buffered <= http1.HIGH_WATER + 512 * 1024
        resp.release()
        assert bytes(got) == body
        assert client.idle_count() == 1


# ---- TLS --------------------------------------------------------------------------------


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    try:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
             "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"openssl cannot make a test certificate: {exc}")
    return cert, key


async def test_https_with_sni_and_verification(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    sni: list[str | None] = []
    server_ctx.sni_callback = lambda _sock, name, _ctx: sni.append(name)  # type: ignore[assignment,misc]

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        head = await r.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await r.readexactly(length)
        w.write(ok(b"secure"))
        await w.drain()
        await r.read()  # until the client goes
        w.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        trusting = ssl.create_default_context(cafile=str(cert))
        client = http1.Client(ssl_context=trusting)
        try:
            resp = await client.post(f"https://localhost:{port}/v1/x", HEADERS, b"{}", **T)
            assert await resp.read(2.0) == b"secure"
            resp.release()
            assert sni == ["localhost"]
        finally:
            await client.close()
        # the default context does not trust a self-signed certificate
        up = Upstream()
        await up.start()
        try:
            with pytest.raises(UpstreamFailure) as info:
                await up.open(f"https://localhost:{port}/v1/x", HEADERS, b"{}", **T)
        finally:
            await up.close()
        assert info.value.category is Category.connection
        assert info.value.message.startswith("TLS error before the first byte")
    finally:
        server.close()
        await server.wait_closed()


def test_headers_mapping() -> None:
    h = http1.Headers({"content-type": "a", "x-b": "1, 2"})
    assert h["Content-Type"] == "a" and h.get("X-B") == "1, 2" and h.get("nope") is None
    assert h.get("nope", "d") == "d"
    assert "CONTENT-TYPE" in h and 3 not in h
    assert dict(h) == {"content-type": "a", "x-b": "1, 2"} and len(h) == 2
    assert json.dumps(dict(h))  # plain str values


# ---- push mode (Upstream.pipe: the stream relay's path) -----------------------------------


async def test_pipe_hands_every_piece_on_and_ends_with_the_body(
    fake: FakeProvider, up: Upstream
) -> None:
    resp = await up.open(fake.url + "/v1/chat/completions", HEADERS, STREAM, **T)
    got: list[bytes] = []

    def sink(piece: bytes) -> int:
        got.append(piece)
        return GO

    async def drain() -> None:
        raise AssertionError("never asked to drain")

    assert await up.pipe(resp, sink, 2.0, drain) is True
    resp.release()
    data = b"".join(got)
    assert data.count(b"data: ") >= fake.chunks and data.rstrip().endswith(b"[DONE]")
    assert up._client is not None and up._client.idle_count() == 1  # back in the pool


async def test_pipe_stop_and_pause(fake: FakeProvider, up: Upstream) -> None:
    resp = await up.open(fake.url + "/v1/chat/completions", HEADERS, STREAM, **T)
    stopped: list[bytes] = []
    assert await up.pipe(resp, lambda p: stopped.append(p) or STOP, 2.0, asyncio.sleep) is False
    assert len(stopped) == 1  # nothing handed on after STOP
    resp.release()

    resp = await up.open(fake.url + "/v1/chat/completions", HEADERS, STREAM, **T)
    got: list[bytes] = []
    drains = 0

    async def drain() -> None:
        nonlocal drains
        drains += 1
        await asyncio.sleep(0.01)

    def pausing(piece: bytes) -> int:
        got.append(piece)
        return PAUSE  # every piece: reading resumes only after each drain

    assert await up.pipe(resp, pausing, 2.0, drain) is True
    resp.release()
    assert drains >= 1 and b"".join(got).rstrip().endswith(b"[DONE]")


async def test_pipe_idle_timeout_is_renewed_by_each_piece(fake: FakeProvider, up: Upstream) -> None:
    """Pieces 0.1 s apart never trip a 0.3 s idle timeout; a stall after two pieces does."""
    fake.push(StallAfter(2))
    resp = await up.open(fake.url + "/v1/chat/completions", HEADERS, STREAM, **T)
    got: list[bytes] = []
    with pytest.raises(UpstreamFailure) as info:
        await up.pipe(resp, lambda p: got.append(p) or GO, 0.3, asyncio.sleep)
    resp.release()
    assert got and info.value.category is Category.timeout
    assert "mid-stream" in info.value.message
