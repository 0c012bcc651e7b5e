"""A request pipelined behind an ``Upgrade: h2c`` request is never left waiting.

aiohttp's C parser (llhttp) pauses after a request that asks to upgrade; for a protocol
it does not switch to (anything but WebSocket) it resumes, but drops whatever followed
that request in the same read. The gateway answers the upgrade request as HTTP/1.1 with
``connection: close`` and closes the connection after it, so a client that pipelined
more requests sees at once that they were not answered and sends them again on a new
connection, instead of waiting for the keep-alive timeout.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from gateway.testing import FakeProvider
from tests.edges.support import (
    AUTH,
    MESSAGES,
    RawResponse,
    close,
    connect,
    parse_responses,
    request_bytes,
)
from tests.harness import Harness

KEEPALIVE = 3.0  # the gateway's keep-alive (head) timeout in these tests, seconds
UPGRADE = {
    "connection": "Upgrade, HTTP2-Settings",
    "upgrade": "h2c",
    "http2-settings": "AAMAAABkAARAAAAAAAIAAAAA",
}
CHAT_BODY = json.dumps({"model": "gpt-test", "messages": MESSAGES}).encode()
FIRST = {
    "GET /healthz": request_bytes("/healthz", None, UPGRADE, method="GET"),
    "POST /v1/chat/completions": request_bytes(
        "/v1/chat/completions",
        CHAT_BODY,
        {**UPGRADE, **AUTH, "content-type": "application/json"},
    ),
}
SECOND = request_bytes("/healthz", None, {}, method="GET")


async def read_all(url: str, data: bytes, within: float) -> tuple[bytes, float, bool]:
    """Send ``data`` at once on a fresh connection; read until EOF (or ``within`` s):
    the bytes, the seconds to EOF, and whether EOF came."""
    reader, writer = await connect(url)
    got = bytearray()
    t0 = time.monotonic()
    eof = False
    try:
        writer.write(data)
        await writer.drain()
        try:
            async with asyncio.timeout(within):
                while piece := await reader.read(65536):
                    got += piece
                eof = True
        except TimeoutError:
            pass
    finally:
        await close(writer)
    return bytes(got), time.monotonic() - t0, eof


def describe(responses: list[RawResponse], waited: float, eof: bool) -> str:
    said = [(r.status, r.headers.get("connection")) for r in responses]
    end = f"EOF after {waited:.2f} s" if eof else f"no EOF within {waited:.2f} s"
    return f"{len(responses)} answer(s) (status, connection): {said}; {end}"


@pytest.mark.parametrize("first", list(FIRST))
async def test_request_pipelined_after_h2c_upgrade_is_not_left_waiting(
    make_gateway: Callable[..., Any], fake: FakeProvider, first: str
) -> None:
    """An upgrade request and a second request in one write: both are answered, or the
    first says ``connection: close`` and the connection ends right after it (the client
    retries the second at once); never a wait for the keep-alive timeout."""
    gw: Harness = await make_gateway(client_header_timeout_s=KEEPALIVE)
    raw, waited, eof = await read_all(gw.url, FIRST[first] + SECOND, within=KEEPALIVE + 2)
    responses = await parse_responses(raw)
    observed = describe(responses, waited, eof)
    assert responses and responses[0].status == 200, observed
    both = len(responses) == 2 and responses[1].status == 200
    closed = responses[0].headers.get("connection", "").lower() == "close"
    assert both or (closed and len(responses) == 1), observed
    assert eof and waited < 1.0, observed  # told at once, not after the keep-alive timeout
    if first.startswith("POST"):
        assert [r.body["messages"] for r in fake.requests] == [MESSAGES]


async def test_plain_pipelined_requests_keep_the_connection(
    make_gateway: Callable[..., Any],
) -> None:
    """Without an upgrade, pipelined requests are answered on one kept-alive connection."""
    gw: Harness = await make_gateway(client_header_timeout_s=KEEPALIVE)
    raw, waited, eof = await read_all(gw.url, SECOND + SECOND, within=0.5)
    assert not eof, f"the connection ended after {waited:.2f} s"
    assert raw.count(b"HTTP/1.1 200") == 2, raw[:500]
    assert b"connection: close" not in raw.lower(), raw[:500]
