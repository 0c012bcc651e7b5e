"""Counts Redis refuses, on a real redis-server: any count the gateway is handed is bounded
before it is sent, so a team's window survives an absurd one; a count Redis still refuses
(its key holds something else than an integer) is dropped and its key logged once, by
name, in the JSON log line as the gateway writes it, and is never sent again."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from gateway.policy.schema import TeamLimits
from gateway.resilience.team_limits import limit_window
from gateway.state.redis import RedisState
from tests.log_sink import Sink
from tests.redis_server import RedisServer

pytestmark = pytest.mark.redis

NOW = time.time()
LIMITS = TeamLimits(tokens_per_minute=1000)
TOKENS = f"llm-gateway:limit:t:tok:{limit_window(NOW)}"


@pytest.fixture
async def state(redis_server: RedisServer) -> AsyncIterator[RedisState]:
    # no background sync: every command counted is one of the syncs the test runs
    s = RedisState(redis_server.url, wall=lambda: NOW, sync_interval=3600.0)
    yield s
    await s.close()


async def commands(redis: Redis) -> dict[str, int]:
    stats = await redis.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def test_an_absurd_token_count_keeps_the_window_and_is_sent_once(
    state: RedisState, redis: Redis
) -> None:
    """A request's tokens of 2**64-2 (a provider's absurd usage): one INCRBY, bounded, that
    Redis takes; the team's token key keeps what it held and the team is over its
    ``tokens_per_minute`` for the rest of the minute; nothing deleted, nothing left to send
    (it was deleted and sent again every sync, for ever)."""
    await redis.set(TOKENS, 400)
    await redis.config_resetstat()
    await state.add_tokens("t", LIMITS, 2**64 - 2, NOW)
    for _ in range(3):
        await state.sync()
    sent = await commands(redis)
    assert (sent.get("incrby"), sent.get("del", 0)) == (1, 0), sent
    assert state._pending == {}
    held = int(await redis.get(TOKENS))
    assert 400 + LIMITS.tokens_per_minute <= held <= 2**53  # readable back as a count
    assert await state.admit("t", LIMITS, NOW) is not None  # waits for the next minute
    assert not state.degraded


async def test_a_refused_count_is_dropped_and_its_key_logged_by_name(
    state: RedisState, redis: Redis, log_sink: Sink
) -> None:
    """A token key holding something else than an integer: the INCRBY Redis refuses is not
    sent again (one INCRBY over three syncs), and the warning, as the JSON line the gateway
    writes, names the key (it said ``"key": "[redacted]"``) and not the value."""
    log_sink.configure("info", "json")
    await redis.set(TOKENS, "sk-not-a-count")
    await redis.config_resetstat()
    await state.add_tokens("t", LIMITS, 50, NOW)
    for _ in range(3):
        await state.sync()
    sent = await commands(redis)
    assert sent.get("incrby") == 1, sent
    assert state._pending == {}
    warnings = [line for line in log_sink.lines() if line["level"] == "warning"]
    assert [(w["event"], w["key"]) for w in warnings] == [("state_value_ignored", TOKENS)]
    assert "sk-not-a-count" not in log_sink.path.read_text()
    assert not state.degraded


async def test_any_int_is_bounded_before_it_is_sent(state: RedisState, redis: Redis) -> None:
    """Counters flushed by the sync take any int without a refusal: beyond 64 bits either
    way, each key gets one INCRBY Redis accepts."""
    keys = [f"llm-gateway:budget:r:req:{n}" for n in range(3)]
    with capture_logs() as logs:
        for key, n in zip(keys, [2**70, -(2**70), 10**30], strict=True):
            state._count(key, n)
        await state.sync()
    assert [e for e in logs if e["log_level"] == "warning"] == []
    values = [int(v) for v in await redis.mget(keys)]
    assert all(abs(v) <= 2**53 for v in values), values
    assert state._pending == {}
