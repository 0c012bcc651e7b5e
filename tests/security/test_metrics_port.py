"""``GATEWAY_METRICS_PORT`` serves ``/metrics`` and nothing else.

The port meant for Prometheus is reachable by whoever can reach the pods, past the
ingress. Every other path there is 404, whatever the key: the API, the admin endpoints,
the probes. It keeps serving ``/metrics`` while the gateway drains (Prometheus scrapes
until the process exits) and closes with the process. Checked on real ``serve``
processes, single and ``--workers 2``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from gateway.testing import Delay, FakeProvider
from tests.harness import CLIENT_KEY, PROVIDER_KEY, PROVIDER_KEY_ENV, policy_files, write_policies
from tests.integration.test_operations import ROOT, Served
from tests.process import free_port

ADMIN_KEY = "metrics-port-admin-key"
CLIENT = {"authorization": f"Bearer {CLIENT_KEY}", "x-api-key": CLIENT_KEY}
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
MESSAGES = [{"role": "user", "content": "Say hello"}]
CHAT = {"model": "gpt-test", "messages": MESSAGES}
MESSAGES_BODY = {"model": "claude-test", "max_tokens": 64, "messages": MESSAGES}
RESPONSES = {"model": "gpt-test", "input": "Say hello"}

#: (method, path, headers, JSON body) of everything but /metrics: 404 on the metrics port.
NOT_METRICS = [
    ("POST", "/v1/chat/completions", CLIENT, CHAT),
    ("POST", "/v1/messages", CLIENT, MESSAGES_BODY),
    ("POST", "/v1/responses", CLIENT, RESPONSES),
    ("POST", "/v1/completions", CLIENT, {"model": "gpt-test", "prompt": "hi"}),
    ("POST", "/v1/embeddings", CLIENT, {"model": "gpt-test", "input": "hi"}),
    ("GET", "/v1/models", CLIENT, None),
    ("GET", "/v1/unknown", CLIENT, None),
    ("GET", "/admin/policies", ADMIN, None),
    ("GET", "/admin/deployments", ADMIN, None),
    ("POST", "/admin/reload", ADMIN, None),
    ("GET", "/healthz", {}, None),
    ("GET", "/readyz", {}, None),
    ("GET", "/", {}, None),
]

Start = Callable[..., Awaitable[tuple[Served, str]]]


@pytest.fixture
async def serve_with_metrics_port(tmp_path: Path) -> AsyncIterator[Start]:
    """``python -m gateway serve`` with a metrics port (``workers``: ``--workers N``); the
    process and the metrics port's URL."""
    started: list[Served] = []

    async def start(policy_dir: Path, workers: int = 1) -> tuple[Served, str]:
        mport = free_port()
        env = {
            **os.environ,
            PROVIDER_KEY_ENV: PROVIDER_KEY,
            "GATEWAY_LOG_FORMAT": "json",
            "GATEWAY_SHUTDOWN_GRACE_S": "3",
            "GATEWAY_RELOAD_WATCH_S": "0",
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "GATEWAY_METRICS_PORT": str(mport),
        }
        args = ["--workers", str(workers)] if workers > 1 else []
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", "serve", "--policies", str(policy_dir),
            "--port", "0", *args, cwd=ROOT, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        served = Served(proc)
        started.append(served)
        ev = await served.wait_event("gateway_started", within=30)
        served.url = f"http://127.0.0.1:{ev['port']}"
        return served, f"http://127.0.0.1:{mport}"

    yield start
    for s in started:
        if s.proc.returncode is None:
            s.proc.kill()
            await s.proc.wait()
        s._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await s._reader


async def statuses(url: str) -> dict[str, int]:
    """``METHOD path`` -> status of every request of :data:`NOT_METRICS` sent to ``url``."""
    out = {}
    async with aiohttp.ClientSession() as s:
        for method, path, headers, body in NOT_METRICS:
            async with s.request(method, url + path, headers=headers, json=body) as r:
                await r.read()
                out[f"{method} {path}"] = r.status
    return out


async def metrics_status(url: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
        assert r.status != 200 or "llm_gateway_inflight_requests" in text
        return r.status


@pytest.mark.parametrize("workers", [1, 2], ids=["single", "workers"])
async def test_metrics_port_serves_metrics_only(
    serve_with_metrics_port: Start, fake: FakeProvider, tmp_path: Path, workers: int
) -> None:
    """On the metrics port: /metrics 200; the API with a team key, the admin endpoints with
    the admin key and the probes: 404. The main port still serves them (200)."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw, murl = await serve_with_metrics_port(root, workers=workers)
    assert await metrics_status(murl) == 200
    on_metrics = await statuses(murl)
    assert on_metrics == {k: 404 for k in on_metrics}, on_metrics
    assert len(fake.requests) == 0  # nothing reached the provider through the metrics port
    on_main = await statuses(gw.url)
    assert on_main["POST /v1/chat/completions"] == 200
    assert on_main["GET /admin/policies"] == 200
    assert await metrics_status(gw.url) == 404


async def test_metrics_port_scrapes_while_draining_and_closes_at_exit(
    serve_with_metrics_port: Start, fake: FakeProvider, tmp_path: Path
) -> None:
    """SIGTERM with a stream in flight: through the drain the metrics port answers /metrics
    and 404 for the API; once the process has exited nothing listens there."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    gw, murl = await serve_with_metrics_port(root)
    fake.push(Delay(0.25))  # 8 chunks: about 2 s, past the 1 s accept window
    async with aiohttp.ClientSession() as s:
        resp = await s.post(gw.url + "/v1/chat/completions", json={**CHAT, "stream": True},
                            headers=CLIENT)  # fmt: skip
        assert resp.status == 200
        await resp.content.readuntil(b"\n\n")
        gw.proc.send_signal(signal.SIGTERM)
        await gw.wait_event("gateway_draining", within=2)
        assert await metrics_status(murl) == 200
        assert (await statuses(murl))["POST /v1/chat/completions"] == 404
        await gw.wait_event("gateway_listener_closed", within=3)
        assert await metrics_status(murl) == 200  # in-flight wait: Prometheus still scrapes
        assert (await statuses(murl))["POST /v1/chat/completions"] == 404
        await resp.read()
        resp.release()
    assert await gw.wait_exit(within=10) == 0
    with pytest.raises(aiohttp.ClientConnectionError):
        await metrics_status(murl)
