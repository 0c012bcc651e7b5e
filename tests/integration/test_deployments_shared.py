"""Deployment states shared by two real gateway processes through one real redis-server."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.testing import Error, FakeProvider
from tests.harness import write_policies
from tests.integration.test_deployments import KEYS, MESSAGES, files, keys_used
from tests.process import GatewayProcess
from tests.redis_server import RedisServer
from tests.waiting import eventually

pytestmark = pytest.mark.redis
ADMIN_KEY = "shared-deployments-admin"


async def states(gw: GatewayProcess) -> dict[str, str]:
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    async with (
        aiohttp.ClientSession() as s,
        s.get(gw.url + "/admin/deployments", headers=headers) as r,
    ):
        body: dict[str, Any] = await r.json()
    rows = body["models"]["gpt-dep"]["deployments"]
    return {d["deployment"]: d["state"] for d in rows}


async def deployment_up(gw: GatewayProcess, name: str) -> float | None:
    """``llm_gateway_deployment_up`` of ``gpt-dep``'s deployment ``name`` on /metrics."""
    async with aiohttp.ClientSession() as s, s.get(gw.url + "/metrics") as r:
        text = await r.text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "llm_gateway_deployment_up" and sample.labels == {
                "model": "gpt-dep",
                "deployment": name,
            }:
                return sample.value
    return None


async def test_a_cooldown_on_one_replica_steers_the_other(
    fake: FakeProvider,
    tmp_path: Path,
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Key A rate limited through replica 1: replica 2 knows within a second and sends its
    next request to key B without trying A; a replica started later loads the state."""
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    root = write_policies(
        tmp_path / "p", files(fake.url, {"provider": "keys", "balance": "ordered"}, {})
    )
    started: list[GatewayProcess] = []
    try:
        for _ in range(2):
            gw = GatewayProcess(root, state_url=redis_server.url, admin_key=ADMIN_KEY)
            started.append(await gw.start())
        one, two = started
        fake.push(Error.openai_rate_limit(retry_after=30))
        await one.openai().chat.completions.create(model="gpt-dep", messages=MESSAGES)
        assert keys_used(fake) == ["key-a", "key-b"]
        changed = time.monotonic()

        async def seen() -> bool:
            return (await states(two))["keys#1"] == "cooldown"

        await eventually(seen, within=1.0, what="replica 2 sees the cooldown")
        assert time.monotonic() - changed < 1.0
        assert await deployment_up(two, "keys#1") == 0  # received, not seen: still down
        assert await deployment_up(two, "keys#2") == 1
        fake.requests.clear()
        await two.openai().chat.completions.create(model="gpt-dep", messages=MESSAGES)
        assert keys_used(fake) == ["key-b"]

        late = GatewayProcess(root, state_url=redis_server.url, admin_key=ADMIN_KEY)
        started.append(await late.start())
        await eventually(lambda: _cooling(late), within=2.0, what="a new replica loads it")
    finally:
        for gw in started:
            await gw.stop()


async def _cooling(gw: GatewayProcess) -> bool:
    return (await states(gw))["keys#1"] == "cooldown"


async def test_redis_hung_the_siblings_still_absorb_rate_limits(
    fake: FakeProvider,
    tmp_path: Path,
    redis_server: RedisServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Redis unresponsive (SIGSTOP): a 429 on key A is still answered by key B at once,
    and the replica's own view keeps A out."""
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    model = {"provider": "keys", "balance": "ordered"}
    root = write_policies(tmp_path / "p", files(fake.url, model, {}))
    gw = await GatewayProcess(root, state_url=redis_server.url, admin_key=ADMIN_KEY).start()
    try:
        redis_server.pause()
        fake.push(Error.openai_rate_limit(retry_after=30))
        started = time.monotonic()
        await gw.openai().chat.completions.create(model="gpt-dep", messages=MESSAGES)
        assert time.monotonic() - started < 1.0
        assert keys_used(fake) == ["key-a", "key-b"]
        assert (await states(gw))["keys#1"] == "cooldown"
    finally:
        redis_server.resume()
        await gw.stop()
