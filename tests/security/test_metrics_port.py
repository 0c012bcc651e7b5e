"""``GATEWAY_METRICS_PORT`` serves ``/metrics`` and nothing else.

The port meant for Prometheus is reachable by whoever can reach the pods, past the
ingress. Every other path there is 404, whatever the key: the API, the admin endpoints,
the probes. It keeps serving ``/metrics`` while the gateway drains (Prometheus scrapes
until the process exits) and closes with the process. Checked on real ``serve``
processes, single and ``--workers 2``.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from gateway.testing import Delay, FakeProvider
from tests.harness import CLIENT_KEY, policy_files, write_policies
from tests.integration.test_operations import Served, serve  # noqa: F401 (a fixture)
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
def serve_with_metrics_port(serve: Callable[..., Awaitable[Served]]) -> Start:  # noqa: F811
    """``python -m gateway serve`` with a metrics port (``workers``: ``--workers N``); the
    gateway and the metrics port's URL."""

    async def start(policy_dir: Path, workers: int = 1) -> tuple[Served, str]:
        mport = free_port()
        args = ["--workers", str(workers)] if workers > 1 else []
        env = {"reload_watch_s": "0", "admin_key": ADMIN_KEY, "metrics_port": str(mport)}
        return await serve(policy_dir, *args, **env), f"http://127.0.0.1:{mport}"

    return start


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


@pytest.mark.parametrize("workers", [1, 2], ids=["single", "workers"])
async def test_metrics_on_the_public_port_is_warned_of_at_start(
    serve: Callable[..., Awaitable[Served]],  # noqa: F811
    serve_with_metrics_port: Start,
    fake: FakeProvider,
    tmp_path: Path,
    workers: int,
) -> None:
    """Without a metrics port, /metrics (every team's budget and spend among the rest) is
    on the public port: the start says so once, a warning naming what it shows and the
    setting that moves it; with a metrics port, nothing is said."""
    root = write_policies(tmp_path / "policies", policy_files(fake.url))
    args = ["--workers", str(workers)] if workers > 1 else []
    gw = await serve(root, *args, reload_watch_s="0")
    (warned,) = gw.named("metrics_on_public_port")
    assert warned["level"] == "warning" and warned["token_required"] is False
    assert "GATEWAY_METRICS_PORT" in warned["fix"] and "budget" in warned["shows"]
    assert await metrics_status(gw.url) == 200  # as it says
    separate, _ = await serve_with_metrics_port(root, workers=workers)
    assert separate.named("metrics_on_public_port") == []
