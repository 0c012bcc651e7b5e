"""Scale-out: two gateway processes share recovery state through a real Redis, and survive
its outage."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from gateway.testing import Error, FakeProvider
from tests.harness import policy_files, write_policies
from tests.process import GatewayProcess
from tests.redis_server import RedisServer
from tests.waiting import eventually

pytestmark = pytest.mark.redis
MESSAGES = [{"role": "user", "content": "Say hello"}]
FALLBACK = {"fallback": {"chain": ["gpt-backup"], "cooldown": "30s"}, "turn_retry": {"max": 0}}


async def model_of(gw: GatewayProcess) -> str:
    raw = await gw.openai().chat.completions.with_raw_response.create(
        model="gpt-test", messages=MESSAGES
    )
    return raw.headers["x-gateway-model"]


async def metrics_of(gw: GatewayProcess) -> str:
    async with aiohttp.ClientSession() as s, s.get(gw.url + "/metrics") as r:
        return await r.text()


@pytest.fixture
async def replicas(
    fake: FakeProvider, tmp_path: Path, redis_server: RedisServer
) -> AsyncIterator[Callable[..., Any]]:
    """Start two gateway processes on one policy set and one Redis."""
    started: list[GatewayProcess] = []

    async def make(
        policy: dict[str, Any] | None = None, limits: dict[str, int] | None = None
    ) -> tuple[GatewayProcess, GatewayProcess]:
        root = write_policies(tmp_path / "policies", policy_files(fake.url, policy, limits))
        pair = [GatewayProcess(root, state_url=redis_server.url, state_reconnect_s="0.2")
                for _ in range(2)]  # fmt: skip
        for gw in pair:
            started.append(await gw.start())
        return pair[0], pair[1]

    yield make
    for gw in started:
        await gw.stop()


async def test_fallback_activated_on_a_is_used_by_b(replicas: Any, fake: FakeProvider) -> None:
    """A fallback activated through replica A sends replica B's next request to the fallback."""
    a, b = await replicas(policy=FALLBACK)
    fake.script("fake-model", [Error.openai_server(500)] * 2)
    assert await model_of(a) == "gpt-backup"
    fake.requests.clear()
    assert await model_of(b) == "gpt-backup"  # b had no view of the route yet: read through
    assert [r.model for r in fake.requests] == ["gpt-backup"]


async def test_team_limit_enforced_across_replicas(replicas: Any, fake: FakeProvider) -> None:
    """requests_per_minute counts requests through both replicas together."""
    a, b = await replicas(limits={"requests_per_minute": 3})
    await model_of(a)
    await model_of(b)
    await model_of(a)
    with pytest.raises(openai.RateLimitError) as exc:
        await model_of(b)
    assert exc.value.code == "team_rate_limited"
    assert int(exc.value.response.headers["retry-after"]) >= 1
    assert exc.value.response.headers["x-should-retry"] == "true"
    assert len(fake.requests) == 3


async def test_redis_outage_loses_no_request(
    replicas: Any, fake: FakeProvider, redis_server: RedisServer
) -> None:
    """Killing Redis mid-test: both replicas keep answering; restarting it restores sharing."""
    a, b = await replicas(policy=FALLBACK)
    assert await model_of(a) == "gpt-test"
    redis_server.stop()
    for gw in (a, b, a, b):
        assert await model_of(gw) == "gpt-test"  # served on local state
    assert "llm_gateway_state_backend_degraded 1.0" in await metrics_of(a)
    redis_server.start()

    async def shares_again(gw: GatewayProcess) -> bool:
        # a replica tries Redis again on a request once its reconnect interval has passed
        await model_of(gw)
        return "llm_gateway_state_backend_degraded 0.0" in await metrics_of(gw)

    await eventually(lambda: shares_again(a), step=0.02)
    await eventually(lambda: shares_again(b), step=0.02)
    fake.script("fake-model", [Error.openai_server(500)] * 2)
    assert await model_of(a) == "gpt-backup"
    await moves_to_backup_within_the_bound(b)  # shared again


# A replica answers the fallback choice from its view of Redis when the view is at most
# 100 ms old (gateway/state/redis.py, MAX_STALENESS_S), and refreshes every view it uses
# every 50 ms; so a change made by one replica reaches the others within 100 ms plus a
# round trip. The margin on top is for two loaded processes on a CI machine.
BOUND_S = 0.1 + 0.4


async def moves_to_backup_within_the_bound(gw: GatewayProcess) -> float:
    """Seconds until ``gw`` answers from the fallback; fails past BOUND_S."""
    started = time.monotonic()
    while await model_of(gw) != "gpt-backup":
        assert time.monotonic() - started < BOUND_S, "the other replica's change never arrived"
    return time.monotonic() - started


async def test_a_fallback_activated_on_a_reaches_a_busy_b_within_the_bound(
    replicas: Any, fake: FakeProvider
) -> None:
    """B, serving from a fresh view of the fallback state, moves to the fallback A activated
    within the stated bound (100 ms of staleness plus a round trip)."""
    a, b = await replicas(policy=FALLBACK)
    for _ in range(3):
        assert await model_of(b) == "gpt-test"  # b's view of the route is fresh
    fake.script("fake-model", [Error.openai_server(500)] * 2)
    assert await model_of(a) == "gpt-backup"
    took = await moves_to_backup_within_the_bound(b)
    assert took < BOUND_S
