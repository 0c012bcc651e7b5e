"""The only upstream HTTP client.

One pooled keep-alive HTTP/1.1 client (:mod:`gateway.http1`, asyncio protocols with
``httptools`` as the parser; no cookies, no redirects, no decompression) for every
provider. Its exceptions are mapped to failure categories here and nowhere else::

    UpstreamFailure(category=timeout)     connect / first-byte / idle timeouts
    UpstreamFailure(category=connection)  refused, reset, DNS, TLS, EOF before the answer,
                                          a body that ends early, a malformed response

The messages say when it happened: ``... before the first byte`` (``proxy.py`` marks
those timeouts as first-byte timeouts), ``... while reading the body``, ``... mid-stream``.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping

from yarl import URL

from gateway import http1
from gateway.errors import Category
from gateway.http1 import Response

#: What a :meth:`Upstream.pipe` sink answers for each piece: go on, pause reading until
#: the consumer drained, stop.
GO, PAUSE, STOP = http1.GO, http1.PAUSE, http1.STOP

__all__ = ["Response", "Upstream", "UpstreamFailure"]


class UpstreamFailure(Exception):
    def __init__(self, category: Category, message: str) -> None:
        super().__init__(message)
        self.category = category
        self.message = message


def _map(exc: BaseException, during: str) -> UpstreamFailure:
    if isinstance(exc, http1.ConnectTimeout):
        return UpstreamFailure(Category.timeout, f"upstream connect timed out {during}")
    if isinstance(exc, TimeoutError):
        return UpstreamFailure(Category.timeout, f"upstream timed out {during}")
    cause = exc.__cause__
    if isinstance(exc, ssl.SSLError) or isinstance(cause, ssl.SSLError):
        name = (cause if isinstance(cause, ssl.SSLError) else exc).__class__.__name__
        return UpstreamFailure(Category.connection, f"TLS error {during}: {name}")
    if isinstance(exc, http1.ConnectFailed):
        return UpstreamFailure(Category.connection, f"cannot connect to upstream: {cause}")
    if isinstance(exc, http1.Disconnected):
        if during != "before the first byte":
            return UpstreamFailure(Category.connection, f"upstream body broken {during}: {exc}")
        return UpstreamFailure(Category.connection, f"upstream closed the connection {during}")
    if isinstance(exc, http1.BadResponse):
        return UpstreamFailure(Category.connection, f"upstream sent a malformed response {during}")
    return UpstreamFailure(Category.connection, f"upstream {exc.__class__.__name__} {during}")


_MAPPED = (http1.ClientError, TimeoutError, OSError)


class Upstream:
    """A pooled client; ``open`` returns a response whose body the caller reads."""

    def __init__(self) -> None:
        self._client: http1.Client | None = None

    async def start(self) -> None:
        self._client = http1.Client()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def open(
        self,
        url: str | URL,
        headers: Mapping[str, str],
        body: bytes,
        *,
        connect_timeout: float,
        first_byte_timeout: float,
    ) -> Response:
        """POST and wait for the status line and headers; raise UpstreamFailure."""
        assert self._client is not None, "Upstream.start() was not awaited"
        try:
            return await self._client.post(
                url,
                headers,
                body,
                connect_timeout=connect_timeout,
                first_byte_timeout=first_byte_timeout,
            )
        except _MAPPED as exc:
            raise _map(exc, "before the first byte") from exc

    @staticmethod
    async def read(resp: Response, idle_timeout: float) -> bytes:
        """The whole body; a gap longer than ``idle_timeout`` is a timeout."""
        try:
            return await resp.read(idle_timeout)
        except _MAPPED as exc:
            raise _map(exc, "while reading the body") from exc
        finally:
            resp.release()

    @staticmethod
    async def pipe(
        resp: Response,
        sink: Callable[[bytes], int],
        idle_timeout: float,
        drain: Callable[[], Awaitable[None]],
    ) -> bool:
        """Push body pieces to ``sink`` as they arrive (see :meth:`http1.Response.pipe`);
        True at the end of the body. The caller releases ``resp`` (closing its generator)."""
        try:
            return await resp.pipe(sink, idle_timeout, drain)
        except _MAPPED as exc:
            raise _map(exc, "mid-stream") from exc

    @staticmethod
    async def chunks(resp: Response, idle_timeout: float) -> AsyncGenerator[bytes, None]:
        """Body pieces as they arrive; a gap longer than ``idle_timeout`` is a timeout.

        Closing the generator early (``aclose``) closes the connection; one read to the
        end goes back to the pool.
        """
        try:
            while True:
                data = await resp.next_piece(idle_timeout)
                if not data:
                    return
                yield data
        except _MAPPED as exc:
            raise _map(exc, "mid-stream") from exc
        finally:
            resp.release()
