"""Listening for clients: aiohttp's low-level ``web.Server`` behind a byte guard.

``web.Server`` is aiohttp's documented protocol factory for ``loop.create_server``;
each connection gets aiohttp's ``RequestHandler`` (parser, keep-alive, pipelining,
handler cancellation). The gateway wraps each one in a :class:`Guard` that bounds
what a connection may send while no request of it is being handled, i.e. the
request line and headers of the next request (``GATEWAY_MAX_HEADER_BYTES``):

- aiohttp limits one header line and the number of headers, but not their total;
- after refusing a malformed head, aiohttp goes on reading and queueing an error per
  read (up to 32) until its 400 is written, each holding the bytes read with it: an
  attacker streaming an endless header line grew a process by megabytes per
  connection. The guard drops such a connection once the bound is passed.

Counting stops at the blank line that ends a head (body bytes never count) and starts
again when the gateway's handler for that request returns. A connection over the
bound is aborted: there is no request to answer yet.

A request asking to upgrade (``Upgrade: h2c``) is answered as the HTTP/1.1 request it
is, with ``connection: close``, and its connection closed after the answer
(:func:`request_factory`): aiohttp's C parser drops whatever was pipelined behind such a
request in the same read, which would otherwise wait, unanswered, for the keep-alive
timeout. Told that the connection closes, a client sends those requests again on a
new one.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_parser import RawRequestMessage

log = logging.getLogger("gateway.web.listener")

_END = b"\r\n\r\n"


class Guard(asyncio.Protocol):
    """One client connection: aiohttp's protocol, with the bytes of its heads counted."""

    __slots__ = ("_busy", "_counting", "_inner", "_limit", "_new", "_seen", "_tail", "transport")

    def __init__(self, inner: Any, limit: int) -> None:
        self._inner = inner
        self._limit = limit
        self._seen = 0  # bytes of the current head so far
        self._counting = True
        self._busy = 0  # requests of this connection being handled
        self._tail = b""  # the last 3 bytes read, for a blank line split across reads
        self._new = True  # no request of this connection handled yet
        self.transport: asyncio.Transport | None = None

    # ---- the gateway's handler says when a request starts and ends ------------------
    def begin(self) -> None:
        self._busy += 1
        self._counting = False
        self._new = False

    def end(self) -> None:
        self._busy -= 1
        if not self._busy:
            self._counting, self._seen, self._tail = True, 0, b""

    # ---- asyncio.Protocol, passed on to aiohttp ------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        GUARDS[transport] = self
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        GUARDS.pop(self.transport, None)
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._counting:
            joined = self._tail + data if self._tail else data
            if joined.find(_END) >= 0:
                self._counting = False  # the head is complete: the body is not ours to count
            else:
                self._seen += len(data)
                if self._seen > self._limit:
                    log.warning(
                        "bad_http_request",
                        extra={"status": 400, "error": "HeaderBytesOverLimit"},
                    )
                    assert self.transport is not None
                    self.transport.abort()
                    return
                self._tail = joined[-3:]
        self._inner.data_received(data)

    def arriving(self) -> bool:
        """Whether a request is on its way: a new connection that has not had one handled
        yet, or a head read (in part or whole) that no handler took yet."""
        return not self._busy and (self._new or not self._counting or self._seen > 0)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()  # type: ignore[no-any-return]

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


#: The guard of each open client connection, by its transport (``request.transport``).
GUARDS: dict[Any, Guard] = {}


def requests_arriving() -> bool:
    """Whether a request is on its way on some open client connection (what a drain that
    closes the port early must not cut: :func:`gateway.web.drain.accept_window`)."""
    return any(g.arriving() for g in GUARDS.values())


def request_factory(loop: asyncio.AbstractEventLoop) -> Callable[..., web.BaseRequest]:
    """aiohttp's requests, except that one asking to upgrade closes its connection.

    aiohttp switches protocols only for WebSocket; for any other upgrade it serves the
    request as HTTP/1.1, but its C parser drops the bytes that followed the request in
    the same read (the requests a client pipelined behind it). Marked ``should_close``,
    the request's answer says ``connection: close`` and aiohttp closes the connection
    after it, so those requests are sent again instead of waiting forever.
    """

    def make(
        message: RawRequestMessage, payload: Any, protocol: Any, writer: Any, task: Any
    ) -> web.BaseRequest:
        if message.upgrade:
            message = message._replace(should_close=True)
        return web.BaseRequest(message, payload, protocol, writer, task, loop)

    return make


class Listener:
    """Listening sockets (one, or the ones a parent bound) serving ``handler`` through
    aiohttp's ``web.Server``."""

    def __init__(self, server: web.Server, socks: list[asyncio.Server]) -> None:
        self.server = server
        self._socks = socks
        self.port: int = socks[0].sockets[0].getsockname()[1]

    @classmethod
    async def open(
        cls,
        server: web.Server,
        host: str,
        port: int,
        *,
        max_header_bytes: int,
        socks: list[socket.socket] | None = None,
    ) -> Listener:
        """Listen on ``host:port``, or on ``socks`` bound and listening already (a worker's
        share of its parent's sockets: gateway/web/workers.py)."""
        loop = asyncio.get_running_loop()

        def factory() -> Guard:
            return Guard(server(), max_header_bytes)

        if socks:
            servers = [await loop.create_server(factory, sock=s, backlog=1024) for s in socks]
        else:
            servers = [
                await loop.create_server(factory, host, port, backlog=1024, reuse_address=True)
            ]
        return cls(server, servers)

    async def stop_accepting(self) -> None:
        """No new connections; idle keep-alive ones close now, busy ones after their answer."""
        if self._socks:
            for s in self._socks:
                s.close()
            self._socks = []
            self.server.pre_shutdown()

    async def close(self, grace_s: float) -> None:
        """Close every connection; handlers still running after ``grace_s`` are cancelled."""
        await self.stop_accepting()
        await self.server.shutdown(grace_s)
