"""The only upstream HTTP client: one pooled ``aiohttp.ClientSession`` for every provider.

aiohttp carries the HTTP/1.1 work (keep-alive pool, DNS cache, TLS, proxies with
CONNECT, chunked bodies, decompression of gzip/deflate bodies that a provider or a
middlebox sends although the gateway asks for ``identity``). This module adds what a
gateway needs on top, and maps aiohttp's exceptions to failure categories here and
nowhere else::

    UpstreamFailure(timeout)     connect, first-byte and idle timeouts
    UpstreamFailure(connection)  refused, reset, DNS, TLS, proxy refusals, EOF before
                                 the answer, a body that ends early, a malformed
                                 response, a response over the size limits

AnswerLimits on what a provider may send (:class:`AnswerLimits`, from the ``GATEWAY_UPSTREAM_*``
settings): the size of one header line and the number of headers (aiohttp's parser
stops at them), and the size of a whole body, counted after decompression. A stream's
events are bounded by the relay (``max_event_bytes``).

``UpstreamFailure.stage`` says when it happened: ``connect``, ``first_byte`` (no
status line and headers in time), ``body`` (a JSON answer) or ``stream``.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import payload
from aiohttp.abc import AbstractStreamWriter
from yarl import URL

from gateway.errors import Category, Stage, UpstreamFailure
from gateway.formats.body_parts import SLICE, Parts
from gateway.upstream.deadlines import Limit

Response = aiohttp.ClientResponse

__all__ = ["AnswerLimits", "Body", "Response", "Upstream"]


@dataclass(frozen=True, slots=True)
class AnswerLimits:
    """What a provider's answer may hold (settings ``GATEWAY_UPSTREAM_*``)."""

    max_field_bytes: int = 8190  # one status or header line
    max_headers: int = 128
    max_body_bytes: int = 64 * 1024 * 1024  # a JSON answer, after decompression
    max_event_bytes: int = 8 * 1024 * 1024  # one SSE event of a stream


def failure(exc: BaseException, stage: Stage) -> UpstreamFailure:
    """aiohttp's (and the OS's) exceptions as failure categories: the one mapping."""
    if isinstance(exc, UpstreamFailure):
        return exc
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return UpstreamFailure(Category.timeout, "upstream connect timed out", "connect")
    if isinstance(exc, TimeoutError):  # our own deadlines, and aiohttp's socket timeouts
        what = {"first_byte": "before the first byte", "connect": "while connecting"}
        return UpstreamFailure(
            Category.timeout, f"upstream timed out {what.get(stage, 'mid-body')}", stage
        )
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        return UpstreamFailure(
            Category.connection, f"the egress proxy refused the tunnel (HTTP {exc.status})", stage
        )
    if isinstance(exc, aiohttp.ClientProxyConnectionError):
        return UpstreamFailure(Category.connection, "cannot connect to the egress proxy", stage)
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return UpstreamFailure(
            Category.connection, f"TLS error with upstream: {exc.__class__.__name__}", stage
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamFailure(
            Category.connection, f"cannot connect to upstream: {exc.os_error}", "connect"
        )
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return UpstreamFailure(
            Category.connection, f"upstream closed the connection ({stage})", stage
        )
    if isinstance(exc, aiohttp.ClientPayloadError):
        return UpstreamFailure(Category.connection, f"upstream body broken ({stage})", stage)
    if isinstance(exc, aiohttp.ClientResponseError):  # the parser refused the response
        return UpstreamFailure(
            Category.connection, f"upstream sent a malformed response ({stage})", stage
        )
    return UpstreamFailure(
        Category.connection, f"upstream {exc.__class__.__name__} ({stage})", stage
    )


class Body(payload.Payload):
    """A request body sent from its one encoded copy, and let go of once sent.

    aiohttp would copy a large body: ``io.BytesIO`` (what it asks for past 1 MiB) is copied
    when aiohttp measures it, and ``bytes`` written whole are copied into the transport's
    buffer for what the socket did not take at once. This writes slices of the one copy,
    waiting for the socket between them, and drops its reference when it starts: once the
    upload is done nothing in the gateway holds the encoded body while the provider
    thinks (the caller keeps no reference either: pass ``Body(encode(...))``). A body in
    :class:`~gateway.formats.body_parts.Parts` is never whole: its long strings are encoded a
    slice at a time as they are written, and each is let go of once written.
    """

    _autoclose = True  # nothing to close: bytes in memory

    def __init__(self, data: bytes | Parts) -> None:
        super().__init__(data, content_type=None)
        self._size = data.size if isinstance(data, Parts) else len(data)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        data = self._value
        if isinstance(data, Parts):  # a copy of the lists: writing empties them
            data = b"".join(_encoded(Parts(list(data.pieces), list(data.strings), data.size)))
        return bytes(data).decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        data: Any = self._value
        self._value = b""  # sent once (the gateway never resends a body: an attempt encodes)
        if isinstance(data, Parts):
            left = data.size if content_length is None else content_length
            for chunk in _encoded(data):
                if left <= 0:
                    return
                await writer.write(chunk[:left] if len(chunk) > left else chunk)
                left -= len(chunk)
            return
        if content_length is not None and content_length < len(data):
            data = memoryview(data)[:content_length]
        if len(data) <= SLICE:
            await writer.write(data)
            return
        view = memoryview(data)
        del data
        for start in range(0, len(view), SLICE):
            await writer.write(view[start : start + SLICE])


def _encoded(parts: Parts) -> Iterator[bytes | memoryview]:
    """The bytes of ``parts`` in order, a long string a slice at a time; each piece and
    string is let go of once yielded (the lists are emptied as they go)."""
    pieces, strings = parts.pieces, parts.strings
    pieces.reverse()
    strings.reverse()
    while pieces:
        piece = memoryview(pieces.pop())
        for start in range(0, len(piece), SLICE):
            yield piece[start : start + SLICE]
        del piece
        if strings:
            for s in strings.pop():
                for start in range(0, len(s), SLICE):
                    yield orjson.dumps(s[start : start + SLICE])[1:-1]
            del s


#: What :func:`failure` maps; anything else is a bug and propagates.
MAPPED = (aiohttp.ClientError, TimeoutError, OSError)


class _Pool(aiohttp.TCPConnector):
    """aiohttp's connector, minus one hole: a pooled connection on which the server sent
    bytes while it sat idle is closed instead of reused.

    aiohttp parses such bytes as the next response and hands it to the next request on
    that connection (a forged or stale answer, e.g. a load balancer's 408; reported as
    aio-libs/aiohttp#13656, fixed upstream after 3.14.5). Until a release has the fix,
    this checks the connection aiohttp picked (``Connection.protocol.should_close``, the
    test aiohttp itself applies when a connection is released) and closes it if anything
    arrived. It overrides the connector's ``_get``. That and ``should_close`` are names
    outside aiohttp's documented API, like the few others the gateway relies on:
    ``web.Server.pre_shutdown`` and a ``web.BaseRequest`` built from a
    ``RawRequestMessage`` (gateway/web/listener.py), ``BaseRequest.writer`` for a
    ``100 Continue`` (gateway/web/handlers.py), and :class:`Body`, which empties its
    ``Payload._value`` once sent. That is why pyproject.toml holds aiohttp to one minor
    release; ``tests/test_upstream.py`` shows the hole (under either aiohttp) and this guard.
    """

    async def _get(self, key, traces):  # type: ignore[no-untyped-def]
        while (conn := await super()._get(key, traces)) is not None:
            proto = conn.protocol
            if proto is None or not proto.should_close:
                return conn
            conn.close()  # bytes arrived while idle: never answer a request with them
        return None


class Upstream:
    """A pooled client; :meth:`open` returns a response whose body the caller reads."""

    def __init__(self, limits: AnswerLimits | None = None) -> None:
        self.limits = limits or AnswerLimits()
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    async def start(self) -> None:
        lim = self.limits
        self._session = aiohttp.ClientSession(
            connector=_Pool(limit=0, ttl_dns_cache=300, keepalive_timeout=30),
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None),
            skip_auto_headers=("User-Agent",),
            trust_env=False,  # proxies are resolved per provider (gateway.upstream.egress)
            max_line_size=lim.max_field_bytes,
            max_field_size=lim.max_field_bytes,
            max_headers=lim.max_headers,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _timeout(self, connect: float) -> aiohttp.ClientTimeout:
        t = self._timeouts.get(connect)
        if t is None:
            t = self._timeouts[connect] = aiohttp.ClientTimeout(
                total=None, connect=connect, sock_connect=connect
            )
        return t

    async def open(
        self,
        url: str | URL,
        headers: Mapping[str, str],
        body: Body | bytes,
        *,
        connect_timeout: float,
        first_byte_timeout: float,
        proxy: str | None = None,
        ssl_context: ssl.SSLContext | bool = True,
    ) -> Response:
        """POST and wait for the status line and headers; raise :class:`UpstreamFailure`.
        A large ``body`` is best passed as :class:`Body` (it is let go of once sent)."""
        assert self._session is not None, "Upstream.start() was not awaited"
        try:
            with Limit(first_byte_timeout):
                return await self._session.post(
                    url,
                    data=body if isinstance(body, Body) else Body(body),
                    headers=headers,
                    timeout=self._timeout(connect_timeout),
                    allow_redirects=False,
                    proxy=proxy,
                    ssl=ssl_context,
                )
        except MAPPED as exc:
            raise failure(exc, "first_byte") from exc

    async def read(
        self, resp: Response, idle_timeout: float, deadline: float | None = None
    ) -> bytes:
        """The whole body (decompressed), at most ``max_body_bytes``; a gap longer than
        ``idle_timeout`` is a timeout, and so is reading past ``deadline`` (monotonic: a
        provider trickling its answer cannot hold the request past it). The connection
        goes back to the pool only when the body was read to its end."""
        cap = self.limits.max_body_bytes
        content = resp.content
        parts: list[bytes] = []
        size = 0
        try:
            if not content.is_eof():  # the rest is on its way: wait, each gap bounded
                with Limit(_wait(idle_timeout, deadline)) as idle:
                    while data := await content.readany():
                        size += len(data)
                        if size > cap:
                            raise UpstreamFailure(
                                Category.connection, f"upstream body is over {cap} bytes", "body"
                            )
                        parts.append(data)
                        idle.set(_wait(idle_timeout, deadline))
            data = content.read_nowait()  # the usual case: it all came with the head
            if data:
                size += len(data)
                if size > cap:
                    raise UpstreamFailure(
                        Category.connection, f"upstream body is over {cap} bytes", "body"
                    )
                parts.append(data)
        except MAPPED as exc:
            resp.close()
            raise failure(exc, "body") from exc
        except BaseException:
            resp.close()
            raise
        resp.release()
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _wait(idle_timeout: float, deadline: float | None) -> float:
    """How long the next piece of a body may take."""
    if deadline is None:
        return idle_timeout
    return max(0.0, min(idle_timeout, deadline - time.monotonic()))
