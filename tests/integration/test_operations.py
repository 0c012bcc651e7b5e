"""Operations: policy hot reload (file watch, SIGHUP, /admin/reload) and graceful drain.

In-process tests use the harness; SIGHUP and drain run ``python -m gateway serve`` as
a real subprocess in front of the fake provider served by the test process, and read
its JSON log lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from gateway.testing import Delay, FakeProvider
from tests.harness import CLIENT_KEY, PROVIDER_KEY, PROVIDER_KEY_ENV, policy_files, write_policies

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "Say hello"}]
AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}


class Served:
    """``python -m gateway serve`` in a subprocess, with its JSON log lines collected."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self.other: list[str] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())
        self.url = ""

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                self.other.append(line.decode(errors="replace"))
                continue
            self.events.append(event)
            self._changed.set()
        self._changed.set()

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == name]

    async def wait_event(self, name: str, count: int = 1, timeout: float = 10.0) -> dict[str, Any]:
        async def until() -> dict[str, Any]:
            while len(found := self.named(name)) < count:
                if self._reader.done():
                    raise AssertionError(f"gateway exited before {name!r}: {self.events}")
                self._changed.clear()
                await self._changed.wait()
            return found[count - 1]

        return await asyncio.wait_for(until(), timeout)

    async def wait_exit(self, timeout: float) -> int:
        rc = await asyncio.wait_for(self.proc.wait(), timeout)
        await self._reader
        return rc


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start ``python -m gateway serve --policies DIR --port 0``; ``env`` adds GATEWAY_* settings."""
    started: list[Served] = []

    async def start(policy_dir: Path, **env: str) -> Served:
        full = {
            **os.environ,
            PROVIDER_KEY_ENV: PROVIDER_KEY,
            "GATEWAY_LOG_FORMAT": "json",
            "GATEWAY_SHUTDOWN_GRACE_S": "3",
            "GATEWAY_RELOAD_WATCH_S": "0.2",
            **{f"GATEWAY_{k.upper()}": v for k, v in env.items()},
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", "serve", "--policies", str(policy_dir),
            "--port", "0", cwd=ROOT, env=full,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        s = Served(proc)
        started.append(s)
        ev = await s.wait_event("gateway_started", timeout=30)
        s.url = f"http://127.0.0.1:{ev['port']}"
        return s

    yield start
    for s in started:
        if s.proc.returncode is None:
            s.proc.kill()
            await s.proc.wait()
        s._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await s._reader


def sse_text(raw: bytes) -> tuple[str, list[str | None]]:
    """The joined content and the finish reasons of an OpenAI chat SSE body."""
    text, finishes = [], []
    for line in raw.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = orjson.loads(line[6:])
        assert "error" not in chunk, chunk
        for choice in chunk.get("choices", []):
            text.append(choice["delta"].get("content") or "")
            finishes.append(choice.get("finish_reason"))
    return "".join(text), finishes


async def chat(session: aiohttp.ClientSession, url: str, model: str = "gpt-test") -> int:
    async with session.post(
        url + "/v1/chat/completions", json={"model": model, "messages": MESSAGES}, headers=AUTH
    ) as r:
        await r.read()
        return r.status


# ---- graceful drain ------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_drain_finishes_streams_and_exits_0(
    serve: Callable[..., Any], fake: FakeProvider, tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGTERM/SIGINT mid-stream: /readyz 503 at once, new requests served during the accept
    window, then the listener closes; the stream completes intact; exit 0 within the grace."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw = await serve(root)  # grace 3 s: accept window 1 s, in-flight up to 3 s more
    fake.push(Delay(0.3))  # 8 chunks: about 2.4 s
    async with aiohttp.ClientSession() as s:
        async with s.get(gw.url + "/readyz") as r:
            assert r.status == 200
        resp = await s.post(
            gw.url + "/v1/chat/completions",
            json={"model": "gpt-test", "messages": MESSAGES, "stream": True},
            headers=AUTH,
        )
        assert resp.status == 200
        first = await resp.content.readuntil(b"\n\n")  # the stream has started
        gw.proc.send_signal(sig)
        t0 = time.monotonic()
        draining = await gw.wait_event("gateway_draining", timeout=2)
        assert draining["signal"] == sig.name and draining["accept_s"] == 1.0
        async with aiohttp.ClientSession() as fresh:  # a new connection, as a load balancer's
            async with fresh.get(gw.url + "/readyz") as r:
                assert r.status == 503
            assert await chat(fresh, gw.url) == 200  # still accepting
        assert time.monotonic() - t0 < 1.0
        await gw.wait_event("gateway_listener_closing", timeout=2)
        async with aiohttp.ClientSession() as late:
            with pytest.raises(aiohttp.ClientConnectionError):
                await chat(late, gw.url)
        rest = await resp.read()
        text, finishes = sse_text(first + rest)
        assert text == fake.reply.get("gpt-test") or text.startswith("Hello! This is the fake")
        assert finishes[-1] == "stop" and rest.rstrip().endswith(b"data: [DONE]")
    rc = await gw.wait_exit(timeout=5)
    took = time.monotonic() - t0
    assert rc == 0
    assert took < 3.0, took  # the stream ended at ~2.4 s; no waiting for the full grace
    stopped = gw.named("gateway_stopped")
    assert stopped and stopped[0]["drain_s"] < 3.0
    done = [e for e in gw.named("request_completed") if e.get("status") == 200]
    assert len(done) == 2, gw.events


async def test_drain_cancels_what_outlives_the_grace(
    serve: Callable[..., Any], fake: FakeProvider, tmp_path: Path
) -> None:
    """A stream longer than accept window + grace is ended and the process still exits 0."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url, {"timeouts": {"stream_idle": "20s", "total": "60s"}}))
    gw = await serve(root, shutdown_grace_s="1.5")  # accept 0.5 s, in-flight 1.5 s
    fake.push(Delay(1.0))  # 8 s
    async with aiohttp.ClientSession() as s:
        resp = await s.post(
            gw.url + "/v1/chat/completions",
            json={"model": "gpt-test", "messages": MESSAGES, "stream": True},
            headers=AUTH,
        )
        await resp.content.readuntil(b"\n\n")
        gw.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        with contextlib.suppress(aiohttp.ClientError):
            body = await resp.read()
            print("BODY", body)
    rc = await gw.wait_exit(timeout=10)
    took = time.monotonic() - t0
    print("TOOK", took, gw.events[-6:])
    assert rc == 0
    assert took < 2.5, took
