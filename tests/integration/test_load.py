"""500 concurrent streams through a gateway process: every one intact, memory bounded."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.testing import FakeProvider
from tests.harness import CLIENT_KEY, PROVIDER_KEY, PROVIDER_KEY_ENV, policy_files, write_policies
from tests.waiting import eventually

STREAMS = 500


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
async def gateway_process(fake: FakeProvider, tmp_path: Path) -> AsyncIterator[tuple[str, int]]:
    # Correctness and memory, not speed: generous timeouts on a loaded CI machine.
    slow_ok = {"timeouts": {"connect": "10s", "first_byte": "60s", "stream_idle": "60s",
                            "total": "120s"}}  # fmt: skip
    root = write_policies(tmp_path / "policies", policy_files(fake.url, slow_ok))
    port = free_port()
    env = {**os.environ, PROVIDER_KEY_ENV: PROVIDER_KEY, "GATEWAY_LOG_LEVEL": "warning"}
    proc = subprocess.Popen(  # noqa: ASYNC220 (a fixture starting the process once)
        [sys.executable, "-m", "gateway", "serve", "--policies", str(root), "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:

            async def ready() -> bool:
                try:
                    async with s.get(url + "/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            await eventually(ready, within=15, step=0.02, what="the gateway's /readyz")
        yield url, proc.pid
    finally:
        # Ctrl-C: nothing is in flight, so it exits at once (SIGTERM keeps a 5 s accept window)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


async def test_500_concurrent_streams(gateway_process: tuple[str, int], fake: FakeProvider) -> None:
    """Every stream completes intact; the gateway's RSS stays bounded and settles after."""
    url, pid = gateway_process
    fake.chunks = 20
    start_rss = rss_mb(pid)
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    peak = start_rss

    async def one(s: aiohttp.ClientSession) -> bytes:
        async with s.post(url + "/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status == 200
            return await r.read()

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as s:
        task = asyncio.gather(*(one(s) for _ in range(STREAMS)))
        while not task.done():
            peak = max(peak, rss_mb(pid))
            await asyncio.sleep(0.05)  # the sampling period of the peak, not a wait
        results = await task
    assert len(results) == STREAMS
    for raw in results:
        assert raw.rstrip().endswith(b"data: [DONE]")
        assert raw.count(b'"finish_reason":"stop"') == 1
        assert b"error" not in raw
    # the answers' buffers are freed once the streams are done
    await eventually(lambda: rss_mb(pid) < start_rss + 40, within=2, fail=False)
    end_rss = rss_mb(pid)
    assert peak < 150, f"peak RSS {peak:.0f} MB"
    assert end_rss < start_rss + 40, f"RSS {start_rss:.0f} -> {end_rss:.0f} MB"


async def test_slow_client_backpressure(
    gateway_process: tuple[str, int], fake: FakeProvider
) -> None:
    """A client that stops reading stops the upstream read: the gateway never holds the answer."""
    url, pid = gateway_process
    fake.reply["fake-model"] = "y" * 40_000_000  # a 40 MB answer, in 4,000 pieces of 10 KB
    fake.chunks = 4_000
    body = {
        "model": "gpt-test",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_tokens": 10**9,
    }  # fmt: skip  (client-capped: no continuation transcript)
    start = rss_mb(pid)
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            url + "/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
        ) as r,  # fmt: skip
    ):
        assert r.status == 200
        await r.content.readexactly(100_000)  # the stream is flowing ...
        grown = 0.0
        for _ in range(4):  # ... then the client stops reading for 2 s
            await asyncio.sleep(0.5)  # the scenario: a client not reading, sampled
            grown = max(grown, rss_mb(pid) - start)
        rest = await r.read()  # and then reads everything
    assert rest.rstrip().endswith(b"data: [DONE]")
    assert grown < 20, f"the gateway grew {grown:.0f} MB while its client was not reading"
