"""Budgets shared by gateway processes through one real Redis, and what an outage does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from gateway.testing import FakeProvider, Success
from tests.harness import policy_files, write_policies
from tests.process import GatewayProcess
from tests.redis_server import RedisServer
from tests.waiting import eventually

pytestmark = pytest.mark.redis
MESSAGES = [{"role": "user", "content": "Say hello"}]
ADMIN = "budget-admin-key"
ONE_USD = Success(usage={"prompt_tokens": 1000, "completion_tokens": 0})


@pytest.fixture
async def replicas(
    fake: FakeProvider, tmp_path: Path, redis_server: RedisServer
) -> AsyncIterator[Callable[..., Any]]:
    """Two gateway processes on one Redis; team-a has ``budget``, every model costs 1 USD
    per 1000 tokens."""
    started: list[GatewayProcess] = []

    async def make(budget: dict[str, Any]) -> tuple[GatewayProcess, GatewayProcess]:
        files = policy_files(fake.url)
        for spec in files["platform.yaml"]["models"].values():
            spec["price"] = {"input": 1000, "output": 1000}
        files["teams/team-a.yaml"]["teams"]["team-a"]["budget"] = budget
        root = write_policies(tmp_path / "policies", files)
        for _ in range(2):
            gw = GatewayProcess(
                root, state_url=redis_server.url, state_reconnect_s="0.2", admin_key=ADMIN
            )
            started.append(await gw.start())
        return started[0], started[1]

    yield make
    for gw in started:
        await gw.stop()


async def budget_of(gw: GatewayProcess) -> dict[str, Any]:
    auth = {"authorization": f"Bearer {ADMIN}"}
    async with aiohttp.ClientSession() as s, s.get(gw.url + "/admin/budgets", headers=auth) as r:
        assert r.status == 200
        team: dict[str, Any] = (await r.json())["teams"]["team-a"]
        return team


async def ask(gw: GatewayProcess) -> None:
    await gw.openai().chat.completions.create(model="gpt-test", messages=MESSAGES)


async def test_spending_on_one_replica_refuses_on_the_other(
    replicas: Any, fake: FakeProvider
) -> None:
    """A budget spent through replica A is refused by replica B once B's sync read the
    shared total (well under a second)."""
    a, b = await replicas({"usd": 1, "per": "day"})
    fake.script("fake-model", [ONE_USD])
    await ask(a)

    async def b_knows() -> bool:
        return (await budget_of(b))["spent_usd"] == 1

    await eventually(b_knows, within=1, step=0.02, what="the shared total on replica B")
    seen = await budget_of(b)
    assert (seen["state"], seen["shared"]) == ("spent", True)
    with pytest.raises(openai.RateLimitError) as exc:
        await ask(b)
    assert exc.value.code == "budget_exceeded"
    assert len(fake.requests) == 1


async def test_redis_lost_mid_period_serving_goes_on_with_local_counts(
    replicas: Any, fake: FakeProvider, redis_server: RedisServer
) -> None:
    """With Redis gone, both replicas keep serving; each holds the team to the last total it
    saw plus its own spending since (so A, which spent, refuses; B, which did not, serves)."""
    a, b = await replicas({"usd": 3, "per": "month"})
    fake.script("fake-model", [ONE_USD])
    await ask(a)

    async def b_knows() -> bool:
        return (await budget_of(b))["spent_usd"] == 1

    await eventually(b_knows, within=1, step=0.02, what="the shared total on replica B")
    redis_server.stop()
    fake.script("fake-model", [ONE_USD] * 2)
    await ask(a)
    await ask(a)  # A: 1 seen + 2 of its own
    with pytest.raises(openai.RateLimitError):
        await ask(a)
    assert (await budget_of(a))["spent_usd"] == 3
    await ask(b)  # B only knows the 1 it saw, and its own few tokens
    seen = await budget_of(b)
    assert 1 < seen["spent_usd"] < 1.1 and seen["state"] == "ok"
