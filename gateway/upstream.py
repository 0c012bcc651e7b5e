"""The only upstream HTTP client.

One pooled ``aiohttp.ClientSession`` (keep-alive, no cookies) for every provider.
aiohttp's exceptions are mapped to failure categories here and nowhere else::

    UpstreamFailure(category=timeout)     connect / first-byte / idle timeouts
    UpstreamFailure(category=connection)  refused, reset, DNS, TLS, EOF before the answer
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncGenerator, Mapping

import aiohttp
from yarl import URL

from gateway.errors import Category


class UpstreamFailure(Exception):
    def __init__(self, category: Category, message: str) -> None:
        super().__init__(message)
        self.category = category
        self.message = message


def _map(exc: BaseException, during: str) -> UpstreamFailure:
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return UpstreamFailure(Category.timeout, f"upstream {during} timed out")
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | ssl.SSLError):
        return UpstreamFailure(Category.connection, f"TLS error {during}: {exc.__class__.__name__}")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return UpstreamFailure(Category.connection, f"cannot connect to upstream: {exc.os_error}")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return UpstreamFailure(Category.connection, f"upstream closed the connection {during}")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return UpstreamFailure(Category.connection, f"upstream body broken {during}")
    return UpstreamFailure(Category.connection, f"upstream {exc.__class__.__name__} {during}")


_MAPPED = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


class Upstream:
    """A pooled client; ``open`` returns a response whose body the caller reads."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=30)
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None),
            skip_auto_headers=("User-Agent",),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def open(
        self,
        url: str | URL,
        headers: Mapping[str, str],
        body: bytes,
        *,
        connect_timeout: float,
        first_byte_timeout: float,
    ) -> aiohttp.ClientResponse:
        """POST and wait for the status line and headers; raise UpstreamFailure."""
        assert self._session is not None, "Upstream.start() was not awaited"
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout, connect=connect_timeout
        )
        try:
            async with asyncio.timeout(first_byte_timeout):
                return await self._session.post(
                    url, data=body, headers=headers, timeout=timeout, allow_redirects=False
                )
        except _MAPPED as exc:
            raise _map(exc, "before the first byte") from exc

    @staticmethod
    async def read(resp: aiohttp.ClientResponse, idle_timeout: float) -> bytes:
        try:
            async with asyncio.timeout(idle_timeout):
                return await resp.read()
        except _MAPPED as exc:
            raise _map(exc, "while reading the body") from exc
        finally:
            resp.release()

    @staticmethod
    async def chunks(
        resp: aiohttp.ClientResponse, idle_timeout: float
    ) -> AsyncGenerator[bytes, None]:
        """Body pieces as they arrive; a gap longer than ``idle_timeout`` is a timeout."""
        content = resp.content
        try:
            while True:
                async with asyncio.timeout(idle_timeout):
                    data = await content.readany()
                if not data:
                    return
                yield data
        except _MAPPED as exc:
            raise _map(exc, "mid-stream") from exc
        finally:
            resp.close()
