"""A team's spending total in Redis that the gateway could not have written fails closed,
through the real gateway on a real redis-server: the team stays refused and an event
names the key (a negative total unlocked a spent team for $100,000, one over 2**53 was
read as 0, with nothing logged)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import openai
import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from gateway.money.budgets import MICRO
from gateway.testing import FakeProvider, Success
from tests.harness import Harness, policy_files
from tests.redis_server import RedisServer
from tests.waiting import eventually

pytestmark = pytest.mark.redis
MESSAGES = [{"role": "user", "content": "Say hello"}]
ONE_USD = Success(usage={"prompt_tokens": 1000, "completion_tokens": 0})
BAD = {
    "negative": -100_000 * MICRO,
    "over 2**53": 2**53 + 1,
    "not an integer": "1e3",
    "not a string": None,  # a list
}


def key() -> str:
    return f"llm-gateway:spend:team-a:{datetime.now(UTC):%Y-%m-%d}"


async def refused(client: openai.AsyncOpenAI) -> bool:
    try:
        await client.chat.completions.create(model="gpt-test", messages=MESSAGES)  # type: ignore[arg-type]
    except openai.RateLimitError as e:
        return e.code == "budget_exceeded"
    return False


@pytest.mark.parametrize("value", list(BAD.values()), ids=list(BAD))
async def test_a_bad_total_keeps_a_spent_team_refused(
    fake: FakeProvider,
    gateway_of: Callable[..., Awaitable[Harness]],
    redis_server: RedisServer,
    redis: Redis,
    value: Any,
) -> None:
    """A team that spent its $1 a day is refused; its total is then replaced with a bad
    value: it stays refused (it was served again, uncounted), and one event names the key
    and not the value."""
    files = policy_files(fake.url)
    for spec in files["platform.yaml"]["models"].values():
        spec["price"] = {"input": 1000, "output": 1000}
    files["teams/team-a.yaml"]["teams"]["team-a"]["budget"] = {"usd": 1, "per": "day"}
    gw = await gateway_of(files, state_url=redis_server.url)
    client = gw.async_openai()
    fake.script("fake-model", [ONE_USD] * 5)
    await client.chat.completions.create(model="gpt-test", messages=MESSAGES)  # type: ignore[arg-type]
    assert await refused(client)

    async def flushed() -> bool:
        return await redis.get(key()) == str(MICRO).encode()

    await eventually(flushed, within=1, what="the spending in Redis")  # every replica's
    with capture_logs() as logs:
        await redis.delete(key())
        if value is None:
            await redis.rpush(key(), "1")  # type: ignore[misc]
        else:
            await redis.set(key(), value)
        answers = []
        for _ in range(5):  # over a few background syncs (every 50 ms)
            answers.append(await refused(client))
            await asyncio.sleep(0.06)

        def events() -> list[dict[str, Any]]:
            return [e for e in logs if e["event"] == "budget_total_invalid"]

        await eventually(events, within=1, what="the event")
    assert answers == [True] * 5
    assert len(fake.requests) == 1
    events = [e for e in logs if e["event"] == "budget_total_invalid"]
    assert [(e["key"], e["team"], e["log_level"]) for e in events] == [(key(), "team-a", "error")]
    assert str(value) not in str(events)
