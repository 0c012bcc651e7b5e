"""The gateway's HTTP/1.1 server: asyncio protocols with ``httptools`` as the parser.

Why not aiohttp's server: measured on the benchmark machine, aiohttp's server alone
(parse a JSON body, answer canned bytes) costs 118 µs of CPU per request, most of the
gateway's whole budget of 150; the same work on an asyncio protocol with httptools
(the parser under uvicorn) costs 16 µs, and aiohttp's per-write cost made every
relayed stream chunk cost ~45 µs more. See docs/performance.md.

What it does, and no more: HTTP/1.1 and 1.0, keep-alive, pipelined requests answered
in order, ``Expect: 100-continue``, chunked and sized request bodies buffered up to
``max_body_bytes`` (413 past it, 408 when a client takes longer than ``read_timeout_s``
to send its request, headers included), header limits (431/414), complete responses
written in one ``transport.write``, streamed responses with chunked framing and write
backpressure, and the handler cancelled when the client goes away. A request the
server refuses before its body is complete (413, 408) still reaches the handler, with
``rejected`` set, so that it is answered in the client's API format and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import cast

import httptools

from gateway.server.messages import Handler, Request, Response, StreamResponse, head_bytes

# Protocol-level records go through the stdlib bridge (gateway.observe.logs renders them as
# the same JSON lines): a malformed request is a WARNING naming the error class, never its
# bytes (they may hold the start of an Authorization header).
log = logging.getLogger("gateway.server")

MAX_URL = 8190
MAX_FIELD = 8190  # one header line, as aiohttp and nginx
MAX_HEADERS = 128
LINGER_S = 2.0  # how long unread input is drained after an early answer, before closing
_MAX_QUEUED = 16  # pipelined requests waiting their turn on one connection


class Conn(asyncio.Protocol):
    """One client connection: parses requests and runs the handler for each, in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        # The parser holds this protocol (its callbacks): a cycle, broken in connection_lost
        # so that a closed connection is freed at once, not at the next full collection.
        self.parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self.paused = False
        self._drain: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._queue: deque[Request] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._in_message = False
        self._lingering = False
        self._close_after = False  # close once the answer in progress is written
        self.started = False  # the current answer's head is out (a stream)
        self.idle_since: float | None = time.monotonic()
        self._reset()

    def _reset(self) -> None:
        self._url = b""
        self._headers: dict[str, str] = {}
        self._header_count = 0
        self._body: list[bytes] = []
        self._size = 0
        self._reject: tuple[int, str] | None = None
        self._headers_done = False
        self._request: Request | None = None

    # ---- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.server.changed.set()
        self.transport = None
        self.parser = None
        if self._timer is not None:
            self._timer.cancel()
        self._queue.clear()
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the client left: stop its upstream request too
        self._wake()

    def eof_received(self) -> None:
        return None  # a client that stops sending has gone: close (and cancel its handler)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake()

    def _wake(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # an early answer went out: what the client still sends is dropped
        try:
            self.parser.feed_data(data)  # type: ignore[union-attr]  # None only once closed
        except httptools.HttpParserUpgrade:
            self._close_after = True  # served as a plain request; no protocol switch
        except httptools.HttpParserError as e:
            self._bad_input(e)
            return
        if self._in_message and self._timer is None and self.transport is not None:
            # The request did not arrive in one piece: bound the time it may take.
            self._timer = self.server.loop.call_later(self.server.read_timeout_s, self._too_slow)

    # ---- httptools callbacks ---------------------------------------------------------
    def on_message_begin(self) -> None:
        self._in_message = True
        self.idle_since = None

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_URL:
            self._reject = (414, "the request target is too long")
            raise ValueError

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > MAX_HEADERS or len(name) + len(value) > MAX_FIELD:
            self._reject = (431, "request header fields too large")
            raise ValueError
        key = name.decode("latin-1").lower()
        text = value.decode("utf-8", "surrogateescape")
        old = self._headers.get(key)
        self._headers[key] = text if old is None else f"{old}, {text}"

    def on_headers_complete(self) -> None:
        p = self.parser
        assert p is not None
        try:
            url = httptools.parse_url(self._url)
        except httptools.HttpParserInvalidURLError:
            self._reject = (400, "the request target is not a valid URL")
            raise ValueError from None
        version = p.get_http_version()
        req = Request(
            p.get_method().decode("latin-1"),
            url.path.decode("utf-8", "surrogateescape") if url.path else "/",
            url.query.decode("utf-8", "surrogateescape") if url.query else "",
            self._headers,
            b"",
            p.should_keep_alive(),
            version,
            self,
        )
        self._request = req
        self._headers_done = True
        length = self._headers.get("content-length")
        limit = self.server.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            self._early(req, 413)
            raise ValueError  # stop parsing: the connection closes after the answer
        if self._headers.get("expect", "").lower() == "100-continue" and self.transport:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self.server.max_body_bytes:
            assert self._request is not None
            self._early(self._request, 413)
            raise ValueError  # stop parsing: the connection closes after the answer
        self._body.append(body)

    def on_message_complete(self) -> None:
        req = self._request
        assert req is not None
        req.body = b"".join(self._body) if len(self._body) != 1 else self._body[0]
        self._in_message = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._reset()
        self._submit(req)

    # ---- requests and answers --------------------------------------------------------
    def _submit(self, req: Request) -> None:
        if self._task is None:
            self._task = self.server.loop.create_task(self._serve(req))
        elif len(self._queue) < _MAX_QUEUED:
            self._queue.append(req)
        else:  # a client pipelining without reading its answers
            self._abort()

    def _early(self, req: Request, status: int) -> None:
        """Answer now, before the body is complete (413, 408): through the handler, so the
        answer is in the client's format, then close the connection."""
        if self._lingering:
            return
        self._lingering = True  # parse nothing more from this connection
        self._in_message = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        messages = {
            413: f"request body is larger than the gateway's limit of "
            f"{self.server.max_body_bytes} bytes",
            408: f"the request did not arrive within {self.server.read_timeout_s:g} s",
        }
        req.rejected = (status, messages[status])
        req.keep_alive = False
        self._queue.clear()
        if self._task is None:
            self._task = self.server.loop.create_task(self._serve(req))
        # else: a pipelined answer is still being written: the connection closes after it

    def _too_slow(self) -> None:
        self._timer = None
        if not self._in_message or self.transport is None:
            return
        if self._headers_done and self._request is not None:
            self._early(self._request, 408)
            return
        # Still in the headers: there is no request to answer in any format.
        self._plain(408, "the request headers did not arrive in time")

    def _bad_input(self, e: Exception) -> None:
        if self._lingering:
            return  # already answered (413 through the handler)
        status, message = self._reject or (400, f"malformed HTTP request ({type(e).__name__})")
        log.warning("bad_http_request", extra={"status": status, "error": type(e).__name__})
        self._plain(status, message)

    def _plain(self, status: int, message: str) -> None:
        """A plain-text answer for input that never became a request; then close."""
        self._lingering = True
        self._queue.clear()
        if self._task is not None:  # an answer is being written: just close after it
            self._close_after = True
            return
        body = f"{status}: {message}\n".encode()
        headers = {"content-type": "text/plain; charset=utf-8", "content-length": str(len(body))}
        self.write(head_bytes(status, headers, "", True, "1.1") + body)
        self._linger()

    async def _serve(self, req: Request) -> None:
        while True:
            close = await self._answer(req)
            if self.transport is None:
                return
            if close or self._lingering or (self.server.closing and not self._queue):
                self._task = None
                self._linger()
                return
            if not self._queue:
                self._task = None
                self.idle_since = time.monotonic()
                return
            req = self._queue.popleft()

    async def _answer(self, req: Request) -> bool:
        """Run the handler and write its answer; True when the connection must close after."""
        try:
            resp: Response | StreamResponse | None = await self.server.handler(req)
        except asyncio.CancelledError:
            self._task = None
            raise
        except Exception:
            log.exception("request_failed")
            resp = None
        started, self.started = self.started, False
        try:
            if isinstance(resp, Response) and not started and self.transport is not None:
                try:
                    return self._write_whole(req, resp)  # the usual case: no coroutine
                except ConnectionError:
                    return True
            return await self._write_answer(req, resp, started)
        finally:
            after, req.after = req.after, None
            if after is not None:  # the handler's bookkeeping, once its answer is out
                try:
                    after()
                except Exception:
                    log.exception("request_failed")

    async def _write_answer(
        self, req: Request, resp: Response | StreamResponse | None, started: bool
    ) -> bool:
        if self.transport is None:
            return True
        try:
            if isinstance(resp, StreamResponse) and resp.prepared:
                await resp.write_eof()
                return resp.close or self._close_after
            if started:  # a stream's head is out, then the handler failed: only closing is honest
                self.force_close()
                return True
            if isinstance(resp, StreamResponse):
                await resp.prepare(req)
                await resp.write_eof()
                return resp.close or self._close_after
            return self._write_whole(req, resp)
        except ConnectionError:
            return True

    def _write_whole(self, req: Request, resp: Response | None) -> bool:
        """A complete answer (a 500 for a handler that failed), in one write."""
        if resp is None:
            resp = Response(text="500: Internal Server Error\n", status=500)
        close = (
            resp.close
            or not req.keep_alive
            or self.server.closing
            or req.rejected is not None
            or self._close_after
        )
        body = resp.body
        framing = f"content-length: {len(body)}\r\n"
        try:
            head = head_bytes(resp.status, resp.headers, framing, close, req.version)
        except ValueError:
            log.exception("request_failed")
            body = b"500: Internal Server Error\n"
            framing = f"content-length: {len(body)}\r\n"
            head = head_bytes(500, {}, framing, close, req.version)
        self.write(head if req.method == "HEAD" else head + body)
        return close

    def write(self, data: bytes) -> None:
        t = self.transport
        if t is None or t.is_closing():
            raise ConnectionResetError("the client closed the connection")
        t.write(data)

    async def drain(self) -> None:
        if self.transport is None:
            raise ConnectionResetError("the client closed the connection")
        if not self.paused:
            return
        if self._drain is None:
            self._drain = self.server.loop.create_future()
        await self._drain
        if self.transport is None:
            raise ConnectionResetError("the client closed the connection")

    def _linger(self) -> None:
        """End our side now (the client sees the whole answer and EOF); drop what it still
        sends for a moment, then close. Closing with unread input would send a RST that
        can destroy the answer in flight."""
        t = self.transport
        if t is None:
            return
        self._lingering = True
        if t.can_write_eof() and not t.is_closing():
            t.write_eof()
            self.server.loop.call_later(LINGER_S, t.close)
        else:
            t.close()

    def _abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def close_if_idle(self) -> bool:
        if self._task is None and not self._in_message and self.transport is not None:
            self.transport.close()
            return True
        return False

    def force_close(self) -> None:
        """Cancel the running handler and close (what was written is still sent)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self.transport is not None:
            self.transport.close()

    @property
    def busy(self) -> bool:
        return self._task is not None


class HttpServer:
    """Listens and serves; ``shutdown`` drains (see :func:`gateway.app._drain`)."""

    def __init__(
        self,
        handler: Handler,
        *,
        max_body_bytes: int,
        read_timeout_s: float,
        keepalive_s: float = 75.0,
    ) -> None:
        self.handler = handler
        self.max_body_bytes = max_body_bytes
        self.read_timeout_s = read_timeout_s
        self.keepalive_s = keepalive_s
        self.connections: set[Conn] = set()
        self.changed = asyncio.Event()  # a connection closed or finished a request
        self.closing = False
        self.port = 0
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.loop = asyncio.get_running_loop()

    async def listen(self, host: str, port: int, *, reuse_port: bool = False) -> int:
        self._server = await self.loop.create_server(
            lambda: Conn(self), host, port, reuse_address=True, reuse_port=reuse_port,
            backlog=1024,
        )  # fmt: skip
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = self.loop.create_task(self._sweep())
        return self.port

    async def _sweep(self) -> None:
        """Close keep-alive connections idle longer than ``keepalive_s`` (checked in steps,
        so that the request path never arms a timer)."""
        step = max(0.05, min(5.0, self.keepalive_s / 4))
        while True:
            await asyncio.sleep(step)
            cutoff = time.monotonic() - self.keepalive_s
            for c in list(self.connections):
                if c.idle_since is not None and c.idle_since < cutoff:
                    c.close_if_idle()

    async def stop_listening(self) -> None:
        """No new connections; keep-alive connections close after their current answer."""
        self.closing = True
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        for c in list(self.connections):
            c.close_if_idle()

    async def wait_idle(self, seconds: float) -> bool:
        """Wait until no connection has a request in flight; False when ``seconds`` ran out."""
        if not await self._wait_until(lambda: not any(c.busy for c in self.connections), seconds):
            return False
        for c in list(self.connections):
            c.close_if_idle()
        return True

    async def _wait_until(self, done: Callable[[], bool], seconds: float) -> bool:
        end = self.loop.time() + seconds
        while not done():
            left = end - self.loop.time()
            if left <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)
        return True

    async def close(self) -> None:
        """Close everything now (running handlers are cancelled)."""
        await self.stop_listening()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for c in list(self.connections):
            c.force_close()
        # Let cancelled handlers unwind and written answers flush; then drop the rest.
        await self._wait_until(lambda: not self.connections, 0.5)
        for c in list(self.connections):
            c._abort()
