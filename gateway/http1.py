"""A lean keep-alive HTTP/1.1 client on asyncio protocols, with ``httptools`` as the parser.

The gateway's upstream hop needs very little of a general HTTP client: a POST with a
``content-length`` body, the status and headers, then the body read whole or relayed
piece by piece. aiohttp's ``ClientSession`` costs ~130-150 µs of CPU per request for
that (docs/performance.md); this client does it in a fraction, and carries itself
what the session gave for free:

- **Pool.** Connections are kept per ``(scheme, host, port)``, most recently used
  first, at most :data:`MAX_IDLE_PER_HOST` idle per origin, each closed after
  :data:`IDLE_EXPIRY` seconds unused. A connection goes back to the pool only when its
  response was read to the end and both sides agreed to keep it alive; a body left
  unread (the client went away, an error, a timeout) closes it, never reuses it.
- **Stale connections.** A pooled connection the server closed while it sat idle
  fails before any response byte (EOF or reset): the request was not processed, so it
  is sent again once on a fresh connection (the classic keep-alive race).
- **Backpressure.** Body bytes wait in a buffer until the reader takes them; past
  :data:`HIGH_WATER` buffered bytes the socket stops being read until the reader
  drained it, so a slow consumer bounds the memory of a stream.
- **Timeouts** are plain event-loop timers: connect (TCP + TLS), first byte (the
  status line and headers, from the start of the call), and idle (each wait for more
  body). They raise :class:`TimeoutError` (:class:`ConnectTimeout` for the first).
- **Cancellation** of the waiting task aborts the connection at once, so the server
  sees the disconnect.
- **No decompression.** ``accept-encoding: identity`` is sent unless the caller sets
  the header (the caller then owns decoding). The gateway relays bodies as they are,
  LLM answers are small and the hop is usually near; gzip would cost CPU both ways.
- **Headers** of a response are a case-insensitive :class:`Headers` mapping; a header
  repeated in the response is joined with ``", "`` (RFC 9110 §5.3).
- **TLS**: ``ssl.create_default_context()`` (the system's trust store), SNI = host.
  No proxies, no redirects, no cookies.

Failures are :class:`ClientError` subclasses (or :class:`TimeoutError`); mapping them
to the gateway's failure categories is ``gateway/upstream.py``'s job.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar, cast, overload

import httptools
from yarl import URL

MAX_IDLE_PER_HOST = 128
IDLE_EXPIRY = 30.0  # seconds an idle pooled connection is kept
HIGH_WATER = 256 * 1024  # buffered body bytes before the socket is paused
# What a push-mode sink answers for each piece (Response.pipe).
GO, PAUSE, STOP = 0, 1, 2

_DEFAULT_PORT = {"http": 80, "https": 443}
_MAX_TARGETS = 1024
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_T = TypeVar("_T")

Key = tuple[str, str, int]


class ClientError(Exception):
    """Any failure of the client other than a timeout."""


class ConnectFailed(ClientError):
    """No connection: refused, unreachable, DNS, TLS handshake. ``__cause__`` says why."""


class ConnectTimeout(TimeoutError):
    """The TCP connect or the TLS handshake took too long."""


class Disconnected(ClientError):
    """The server closed or reset the connection before the response was complete."""

    def __init__(self, message: str, *, got_bytes: bool) -> None:
        super().__init__(message)
        #: Whether any byte of the response had arrived (if not, it was not processed).
        self.got_bytes = got_bytes


class BadResponse(ClientError):
    """The server's bytes are not a valid HTTP/1.1 response."""


class Headers(Mapping[str, str]):
    """Response headers; names are case-insensitive (stored lower-case)."""

    __slots__ = ("_d",)

    def __init__(self, items: dict[str, str]) -> None:
        self._d = items

    def __getitem__(self, name: str) -> str:
        return self._d[name.lower()]

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: str | _T) -> str | _T: ...
    def get(self, name: str, default: Any = None) -> Any:
        return self._d.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._d

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return f"Headers({self._d!r})"


class _Conn(asyncio.Protocol):
    """One connection: the protocol, the parser callbacks and the current response's state."""

    def __init__(self, client: Client, key: Key) -> None:
        self.client = client
        self.key = key
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.deadline = 0.0
        self.sink: Callable[[bytes], int] | None = None  # push mode (Response.pipe)
        self.idle = 0.0  # push mode: the idle timeout each piece renews
        self.sink_said = GO
        self.closed = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.busy = False  # a request was sent and its response is not released yet
        self.got_bytes = False
        self.headers_done = False
        self.done = False  # the whole response arrived
        self.until_close = False  # a body delimited by the end of the connection
        self.keep_alive = False
        self.informational = False
        self.error: BaseException | None = None
        self.raw: list[tuple[bytes, bytes]] = []
        self.status = 0
        self.headers: Headers | None = None
        self.buf: list[bytes] = []
        self.buffered = 0
        self.paused = False

    # ---- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        if not self.busy or self.done:  # bytes nobody asked for: the connection is unusable
            self.keep_alive = False
            self.abort()
            return
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if not self.done:
                self.error = BadResponse(f"malformed response: {exc}")
            self.keep_alive = False
            self.abort()
            self._wake()

    def eof_received(self) -> bool:
        return False  # close; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.client._forget(self)
        if self.busy and not self.done and self.error is None:
            if self.headers_done and self.until_close and exc is None:
                self.done = True  # the body ran until the server closed: that is its end
            else:
                if self.headers_done:
                    msg = "the connection closed before the body was complete"
                else:
                    msg = "the connection closed before the response"
                if exc is not None:
                    msg += f" ({exc.__class__.__name__})"
                self.error = Disconnected(msg, got_bytes=self.got_bytes)
                self.error.__cause__ = exc
        self._wake()

    def pause_writing(self) -> None:  # the request body is written at once; nothing to pause
        pass

    def resume_writing(self) -> None:
        pass

    # ---- httptools callbacks ------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # 100 Continue and friends: the real response follows
            self.informational = True
            self.raw = []
            return
        headers: dict[str, str] = {}
        for n, v in self.raw:
            name = n.decode("latin-1").lower()
            value = v.decode("latin-1")
            old = headers.get(name)
            headers[name] = value if old is None else f"{old}, {value}"
        self.raw = []
        self.status = status
        self.headers = Headers(headers)
        self.until_close = (
            "content-length" not in headers
            and "chunked" not in headers.get("transfer-encoding", "").lower()
            and status not in (204, 304)
        )
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        sink = self.sink
        if sink is not None:  # push mode: hand the piece on here, no buffer, no task switch
            self.deadline = self.loop.time() + self.idle
            said = sink(body)
            if said != GO:
                self.sink = None  # what follows is buffered, for nobody
                self.sink_said = said
                if said == PAUSE and self.transport is not None:
                    self.transport.pause_reading()
                self._wake()
            return
        self.buf.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.informational:
            self.informational = False
            return
        self.done = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()

    # ---- the reader's side --------------------------------------------------------------
    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def wait(self, seconds: float) -> None:
        """Until the protocol has news, at most ``seconds`` (then :class:`TimeoutError`).

        One timer per connection, moved lazily: each wait only sets a deadline, and the
        timer, when it fires early, re-arms itself for the deadline (a stream's reads
        would otherwise add and cancel a timer per chunk). A timeout or a cancellation
        aborts the connection.
        """
        fut = self.loop.create_future()
        self.waiter = fut
        self.deadline = deadline = self.loop.time() + seconds
        timer = self.timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self.timer = self.loop.call_at(deadline, self._check_deadline)
        try:
            await fut
        except BaseException:
            self.abort()
            raise
        finally:
            self.waiter = None

    def _check_deadline(self) -> None:
        self.timer = None
        w = self.waiter
        if w is None or w.done():
            return  # nobody waits: the next wait arms a timer again
        if self.loop.time() >= self.deadline:
            w.set_exception(TimeoutError())
        else:
            self.timer = self.loop.call_at(self.deadline, self._check_deadline)

    def take(self) -> bytes:
        """All body bytes buffered so far (``b""`` when none); resumes a paused socket."""
        buf = self.buf
        if not buf:
            return b""
        data = buf[0] if len(buf) == 1 else b"".join(buf)
        buf.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def abort(self) -> None:
        self.keep_alive = False
        if self.transport is not None and not self.closed:
            self.transport.abort()


class Response:
    """The status and headers of an answer; the body is read with :meth:`read` or
    :meth:`next_piece`. Call :meth:`release` (or :meth:`close`) when done with it: the
    connection is reused when the body was read to the end, closed otherwise."""

    __slots__ = ("_conn", "headers", "status")

    def __init__(self, conn: _Conn) -> None:
        self._conn: _Conn | None = conn
        self.status = conn.status
        assert conn.headers is not None
        self.headers: Headers = conn.headers

    async def read(self, idle_timeout: float) -> bytes:
        """The whole body; ``idle_timeout`` bounds each wait for more of it."""
        conn = self._conn
        if conn is None:
            raise ClientError("the response was released")
        parts: list[bytes] = []
        while True:
            if conn.buf:
                parts.append(conn.take())
            if conn.done:
                break
            if conn.error is not None:
                raise conn.error
            await conn.wait(idle_timeout)
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)

    async def pipe(
        self,
        sink: Callable[[bytes], int],
        idle_timeout: float,
        drain: Callable[[], Awaitable[None]],
    ) -> bool:
        """Hand body pieces to ``sink`` as they arrive, in the protocol's callback: no
        future, timer or task switch per piece. ``sink`` returns :data:`GO`, :data:`PAUSE`
        (reading stops until ``drain()`` returns: the consumer's backpressure) or
        :data:`STOP`; it must not raise. True at the end of the body, False when stopped.
        A gap longer than ``idle_timeout`` raises :class:`TimeoutError`."""
        conn = self._conn
        if conn is None:
            raise ClientError("the response was released")
        conn.idle = idle_timeout
        while True:
            paused_socket = False
            if conn.buf:  # arrived before, or after the sink said stop or pause
                said = sink(conn.take())
            elif conn.done:
                return True
            elif conn.error is not None:
                raise conn.error
            else:
                conn.sink_said, conn.sink = GO, sink
                try:
                    await conn.wait(idle_timeout)
                finally:
                    conn.sink = None
                said = conn.sink_said
                paused_socket = said == PAUSE  # on_body paused the socket
            if said == STOP:
                return False
            if said == PAUSE:
                await drain()
                if paused_socket and conn.transport is not None:
                    conn.transport.resume_reading()

    async def next_piece(self, idle_timeout: float) -> bytes:
        """The body bytes that arrived since the last call, waiting up to ``idle_timeout``
        for some; ``b""`` at the end of the body."""
        conn = self._conn
        if conn is None:
            raise ClientError("the response was released")
        while True:
            if conn.buf:
                return conn.take()
            if conn.done:
                return b""
            if conn.error is not None:
                raise conn.error
            await conn.wait(idle_timeout)

    @property
    def complete(self) -> bool:
        """The whole body arrived (it may still be buffered, unread)."""
        return self._conn is not None and self._conn.done

    def release(self) -> None:
        """Give the connection back: to the pool when the body was read whole, else close it."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.client._release(conn)

    close = release

    def __del__(self) -> None:
        # A response dropped without release (a task cancelled between open and read):
        # its connection must not stay open and busy forever.
        conn = self._conn
        if conn is not None and not conn.closed and not conn.loop.is_closed():
            conn.abort()


class Client:
    """The pool and the requests. Use one per event loop; :meth:`close` at the end."""

    def __init__(
        self,
        *,
        max_idle_per_host: int = MAX_IDLE_PER_HOST,
        idle_expiry: float = IDLE_EXPIRY,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.max_idle_per_host = max_idle_per_host
        self.idle_expiry = idle_expiry
        self._ssl = ssl_context
        self._idle: dict[Key, deque[_Conn]] = {}
        self._all: set[_Conn] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False
        self._targets: dict[str | URL, tuple[Key, str]] = {}

    # ---- requests -------------------------------------------------------------------------
    async def post(
        self,
        url: str | URL,
        headers: Mapping[str, str],
        body: bytes,
        *,
        connect_timeout: float,
        first_byte_timeout: float,
    ) -> Response:
        """Send a POST and wait for the status line and headers.

        ``first_byte_timeout`` runs from now to the end of the headers (connect
        included); ``connect_timeout`` bounds the TCP connect and TLS handshake.
        """
        if self._closed:
            raise ClientError("the client is closed")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + first_byte_timeout
        target = self._targets.get(url)
        if target is None:
            target = self._target(url)
        key, start = target
        request = _request_bytes(start, headers, body)
        fresh = False
        while True:
            conn = None if fresh else self._checkout(key, loop.time())
            reused = conn is not None
            if conn is None:
                left = deadline - loop.time()
                conn = await self._connect(key, min(connect_timeout, left))
            conn.busy = True
            assert conn.transport is not None
            conn.transport.write(request)
            try:
                while not conn.headers_done:
                    if conn.error is not None:
                        raise conn.error
                    await conn.wait(deadline - loop.time())
            except Disconnected as exc:
                conn.busy = False
                if reused and not exc.got_bytes:
                    fresh = True  # a stale pooled connection: the request was not processed
                    continue
                raise
            except BaseException:
                conn.abort()
                raise
            return Response(conn)

    def _target(self, url: str | URL) -> tuple[Key, str]:
        """The pool key and the request line + host header of a URL (cached)."""
        u = url if isinstance(url, URL) else URL(url)
        scheme, host = u.scheme, u.raw_host
        if scheme not in _DEFAULT_PORT or not host:
            raise ClientError(f"unsupported URL {u!s}")
        port = u.port or _DEFAULT_PORT[scheme]
        authority = f"[{host}]" if ":" in host else host
        if port != _DEFAULT_PORT[scheme]:
            authority = f"{authority}:{port}"
        target = ((scheme, host, port), f"POST {u.raw_path_qs} HTTP/1.1\r\nhost: {authority}\r\n")
        if len(self._targets) >= _MAX_TARGETS:  # URLs with per-request queries: stay bounded
            self._targets.clear()
        self._targets[url] = target
        return target

    # ---- the pool -------------------------------------------------------------------------
    def _checkout(self, key: Key, now: float) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be stale
            if conn.closed or conn.transport is None or conn.transport.is_closing():
                continue
            if now - conn.idle_since > self.idle_expiry:
                conn.abort()
                continue
            return conn
        return None

    async def _connect(self, key: Key, seconds: float) -> _Conn:
        scheme, host, port = key
        ctx = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ctx = self._ssl
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(max(seconds, 0.0)):
                _, conn = await loop.create_connection(
                    lambda: _Conn(self, key),
                    host,
                    port,
                    ssl=ctx,
                    server_hostname=host if ctx is not None else None,
                )
        except TimeoutError as exc:
            raise ConnectTimeout(f"connecting to {host}:{port} timed out") from exc
        except OSError as exc:  # refused, unreachable, DNS (gaierror), TLS (SSLError)
            raise ConnectFailed(f"cannot connect to {host}:{port}: {exc}") from exc
        self._all.add(conn)
        if self._closed:
            conn.abort()
            raise ClientError("the client is closed")
        return conn

    def _release(self, conn: _Conn) -> None:
        if (
            not conn.done
            or not conn.keep_alive
            or conn.closed
            or conn.buf
            or self._closed
            or conn.transport is None
            or conn.transport.is_closing()
        ):
            conn.abort()
            return
        idle = self._idle.get(conn.key)
        if idle is None:
            idle = self._idle[conn.key] = deque()
        if len(idle) >= self.max_idle_per_host:
            conn.abort()
            return
        conn._reset()
        conn.idle_since = conn.loop.time()
        idle.append(conn)
        if self._sweeper is None:
            self._sweeper = conn.loop.call_later(self.idle_expiry, self._sweep)

    def _sweep(self) -> None:
        """Close the connections idle longer than ``idle_expiry`` (oldest are on the left)."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        limit = loop.time() - self.idle_expiry
        left = False
        for key, idle in list(self._idle.items()):
            while idle and (idle[0].closed or idle[0].idle_since <= limit):
                idle.popleft().abort()
            if idle:
                left = True
            else:
                del self._idle[key]
        if left and not self._closed:
            self._sweeper = loop.call_later(self.idle_expiry / 2, self._sweep)

    def _forget(self, conn: _Conn) -> None:
        self._all.discard(conn)
        if not conn.busy:
            idle = self._idle.get(conn.key)
            if idle is not None:
                with contextlib.suppress(ValueError):
                    idle.remove(conn)

    def idle_count(self, key: Key | None = None) -> int:
        """Idle pooled connections (for one origin, or all)."""
        if key is not None:
            return len(self._idle.get(key, ()))
        return sum(len(q) for q in self._idle.values())

    async def close(self) -> None:
        """Close every connection, idle or busy."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self._idle.clear()
        for conn in list(self._all):
            conn.abort()
        self._all.clear()
        await asyncio.sleep(0)  # let the transports call connection_lost


def _request_bytes(start: str, headers: Mapping[str, str], body: bytes) -> bytes:
    """The request: ``start`` (request line and host), the caller's headers (names
    lower-case, as the gateway writes them), ``accept-encoding`` and the length."""
    lines = [f"{k}: {v}\r\n" for k, v in headers.items() if k not in _OWN_HEADERS]
    block = "".join(lines)
    if block.count("\n") != len(lines) or block.count("\r") != len(lines):
        raise ValueError("a request header name or value contains CR or LF")
    if "accept-encoding" not in headers:
        block += "accept-encoding: identity\r\n"
    head = f"{start}{block}content-length: {len(body)}\r\n\r\n"
    return head.encode("utf-8") + body
