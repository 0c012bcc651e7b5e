"""Requests and answers of the gateway's HTTP/1.1 server (:mod:`gateway.server.protocol`).

A :class:`Request` arrives whole (body buffered); a handler returns a :class:`Response`
(written in one piece) or a :class:`StreamResponse` (written as it comes, chunked).
"""

from __future__ import annotations

import http
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.server.protocol import Conn

_REASONS = {s.value: s.phrase.encode() for s in http.HTTPStatus}
_REASONS[499] = b"Client Closed Request"


class Request:
    """One parsed request, its body whole. Header names are lower case; a repeated header's
    values are joined with ", " (RFC 9110 5.3). Values keep bytes that are not UTF-8 as
    surrogate escapes, for the handler to refuse."""

    __slots__ = (
        "after",
        "body",
        "conn",
        "headers",
        "keep_alive",
        "log",
        "method",
        "path",
        "query_string",
        "rejected",
        "version",
    )  # fmt: skip

    def __init__(
        self,
        method: str,
        path: str,
        query_string: str,
        headers: dict[str, str],
        body: bytes,
        keep_alive: bool,
        version: str,
        conn: Conn,
    ) -> None:
        self.method = method
        self.path = path
        self.query_string = query_string
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive
        self.version = version
        self.rejected: tuple[int, str] | None = None
        self.conn = conn
        self.log: Any = None  # the gateway's RequestLog for /v1/ requests
        #: Called once the answer is written (or could not be): work the client need not wait for.
        self.after: Callable[[], None] | None = None


class Response:
    """A complete answer, written in one piece."""

    __slots__ = ("body", "close", "headers", "status")

    def __init__(
        self,
        body: bytes = b"",
        status: int = 200,
        headers: dict[str, str] | None = None,
        content_type: str | None = None,
        text: str | None = None,
    ) -> None:
        if text is not None:
            body = text.encode()
            content_type = content_type or "text/plain; charset=utf-8"
        self.status = status
        self.body = body
        self.headers = {} if headers is None else headers
        if content_type is not None:
            self.headers["content-type"] = content_type
        self.close = False

    def force_close(self) -> None:
        """Close the connection after this answer (the rest of a request body was not read)."""
        self.close = True


class StreamResponse:
    """An answer written as it comes: ``prepare()``, ``write()``, ``write_eof()`` (all awaited)."""

    __slots__ = ("_chunked", "_conn", "_head", "close", "done", "headers", "status")

    def __init__(self, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.headers = {} if headers is None else headers
        self.close = False
        self._conn: Conn | None = None
        self._chunked = True
        self._head = False
        self.done = False

    @property
    def prepared(self) -> bool:
        return self._conn is not None

    async def prepare(self, request: Request) -> None:
        if self._conn is not None:
            return
        conn = request.conn
        self._chunked = request.version != "1.0"
        self._head = request.method == "HEAD"
        if not self._chunked:
            self.close = True  # HTTP/1.0: the end of the body is the end of the connection
        close = self.close or not request.keep_alive or conn.server.closing
        self.close = close
        framing = "transfer-encoding: chunked\r\n" if self._chunked else ""
        conn.write(head_bytes(self.status, self.headers, framing, close, request.version))
        conn.started = True
        self._conn = conn
        await conn.drain()

    async def write(self, data: bytes) -> None:
        """Send ``data``; wait while the client is not reading (backpressure)."""
        self.write_nowait(data)
        if self.paused:
            await self.drain()

    def write_nowait(self, data: bytes) -> None:
        """Send ``data`` now, without waiting for the client to read (see :attr:`paused`)."""
        conn = self._conn
        assert conn is not None, "prepare() first"
        if self.done:
            raise ConnectionResetError("the answer has already ended")
        if not data or self._head:
            return
        if self._chunked:
            conn.write(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            conn.write(data)

    @property
    def paused(self) -> bool:
        """The client's socket buffer is full: :meth:`drain` before writing more."""
        return self._conn is not None and self._conn.paused

    async def drain(self) -> None:
        if self._conn is not None:
            await self._conn.drain()

    async def write_eof(self) -> None:
        if self.done or self._conn is None:
            return
        self.done = True
        if self._chunked and not self._head:
            self._conn.write(b"0\r\n\r\n")
        await self._conn.drain()


Handler = Callable[[Request], Awaitable[Response | StreamResponse]]


class _DateHeader:
    """The ``date`` header line, formatted once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._line = ""

    def __call__(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._second = second
            stamp = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(second))
            self._line = f"date: {stamp}\r\n"
        return self._line


_date = _DateHeader()


def head_bytes(
    status: int, headers: dict[str, str], extra: str, close: bool, version: str
) -> bytes:
    """The status line and headers; ``extra`` holds framing lines (already formatted)."""
    block = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    if block.count("\n") != len(headers) or block.count("\r") != len(headers):
        raise ValueError("a response header holds a line break")
    if close:
        extra += "connection: close\r\n"
    elif version == "1.0":
        extra += "connection: keep-alive\r\n"
    reason = _REASONS.get(status, b"Unknown")
    lines = (block + extra + _date()).encode("utf-8", "surrogateescape")
    return b"HTTP/1.1 %d %b\r\n%b\r\n" % (status, reason, lines)
