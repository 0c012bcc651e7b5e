"""A replica's budget book synced with a real Redis: the key, its expiry, a malformed
value, an outage."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from gateway.money.budgets import MICRO, period_of
from gateway.policy.schema import Budget
from gateway.state.redis import RedisState
from tests.redis_server import RedisServer

pytestmark = pytest.mark.redis
DAY = Budget(usd=10, per="day")
# Today (UTC), as on the real clock: Redis expires a key at its period's end plus a day by
# its own clock, so a fixed date in the past would find every key already expired.
TODAY = datetime.now(UTC).replace(hour=10, minute=0, second=0, microsecond=0)
NOW = TODAY.timestamp()
KEY = f"llm-gateway:spend:t:{TODAY:%Y-%m-%d}"


@pytest.fixture
async def state(redis_server: RedisServer) -> AsyncIterator[RedisState]:
    # the test runs every sync: none in the background at the same time
    s = RedisState(redis_server.url, wall=lambda: NOW, reconnect_interval=0.05, sync_interval=3600)
    yield s
    await s.close()


async def test_spending_is_added_in_micro_dollars_and_expires_after_the_period(
    state: RedisState, redis: Redis
) -> None:
    """A sync adds the replica's spending to the period's key (micro-dollars) with an
    expiry a day past the period's end, and takes back the total of every replica."""
    await redis.set(KEY, 5 * MICRO)  # another replica's
    state.charge("t", DAY, 1.25, NOW)
    await state.sync()
    assert int(await redis.get(KEY)) == 6_250_000
    expires = await redis.expiretime(KEY)
    assert expires == int(period_of("day", NOW).end) + 86400
    assert state.spending.teams["t"].usd == 6.25


async def test_a_team_without_spending_reads_the_total(state: RedisState, redis: Redis) -> None:
    """A tracked team with no spending of its own reads the shared total at each sync."""
    state.track({"t": DAY}, NOW)
    await redis.set(KEY, 10 * MICRO)
    await state.sync()
    assert state.spending.spent("t", DAY, NOW) is not None


#: Values of a period's total the gateway could not have written, and how to plant them.
BAD_TOTALS = {
    "negative": -100_000 * MICRO,  # a spent team "credited" $100,000
    "over 2**53": 2**53 + 1,  # was read as 0
    "not an integer": "lots",
    "not a string": None,  # a list: MGET reads it as no key at all
}


async def plant(redis: Redis, value: object) -> None:
    await redis.delete(KEY)
    if value is None:
        await redis.rpush(KEY, "1")  # type: ignore[misc]
    else:
        await redis.set(KEY, value)  # type: ignore[arg-type]


def invalid(logs: list[dict[str, object]]) -> list[object]:
    return [e["key"] for e in logs if e["event"] == "budget_total_invalid"]


@pytest.mark.parametrize("value", list(BAD_TOTALS.values()), ids=list(BAD_TOTALS))
async def test_a_bad_total_spends_the_budget_until_it_is_reset(
    state: RedisState, redis: Redis, value: object
) -> None:
    """A period's total that is negative, not an integer, beyond 2**53 or of the wrong Redis
    type: the team's budget counts as spent (fail closed: it unlocked the team), logged once
    naming the key, never the value; the key is left for the operator and the replica's
    own spending waits (not sent, not lost). Once the key is reset (DEL), the next syncs read
    0 and add the spending that waited."""
    state.charge("t", DAY, 1, NOW)
    await state.sync()
    assert state.spending.spent("t", DAY, NOW) is None
    await plant(redis, value)
    with capture_logs() as logs:
        for _ in range(2):
            await state.sync()
        assert state.spending.spent("t", DAY, NOW) is not None
        state.charge("t", DAY, 2, NOW)  # a request already in flight
        for _ in range(2):
            await state.sync()
        assert state.spending.spent("t", DAY, NOW) is not None
        assert state.spending.teams["t"].state(DAY) == "spent"
    assert invalid(logs) == [KEY]
    assert "lots" not in str(logs) and "100000" not in str(logs)
    assert await redis.exists(KEY)  # left as it is: the operator's to reset
    await redis.delete(KEY)
    for _ in range(2):
        await state.sync()
    assert state.spending.spent("t", DAY, NOW) is None
    assert int(await redis.get(KEY)) == 2 * MICRO  # the spending that waited
    assert state.spending.teams["t"].usd == 2


async def test_a_total_redis_refuses_to_add_to_is_not_sent_again(
    state: RedisState, redis: Redis
) -> None:
    """Spending whose INCRBY Redis refuses (the key holds garbage) is sent once: the team is
    spent and the spending waits for the key's reset, with no INCRBY/DEL loop."""
    await redis.set(KEY, "lots")
    state.charge("t", DAY, 2, NOW)
    await redis.config_resetstat()
    with capture_logs() as logs:
        for _ in range(4):
            await state.sync()
    stats = await redis.info("commandstats")
    assert stats["cmdstat_incrby"]["calls"] == 1
    assert "cmdstat_del" not in stats
    assert invalid(logs) == [KEY]
    assert state.spending.spent("t", DAY, NOW) is not None
    assert await redis.get(KEY) == b"lots"


async def test_an_outage_keeps_the_last_total_and_own_spending(
    state: RedisState, redis: Redis, redis_server: RedisServer
) -> None:
    """With Redis gone the book keeps the last total seen plus this replica's spending,
    and adds it all to Redis once it is back."""
    await redis.set(KEY, 3 * MICRO)
    state.track({"t": DAY}, NOW)
    await state.sync()
    redis_server.stop()
    state.charge("t", DAY, 2, NOW)
    await state.sync()  # fails: the spending stays this replica's own
    await state.note_request("r", NOW)  # marks the outage (a request's call)
    assert state.spending.teams["t"].usd == 5
    redis_server.start()  # empty: it ran without persistence
    await state.sync()  # degraded: nothing sent
    await asyncio.sleep(0.06)  # the reconnect interval: the next call tries Redis again
    await state.note_request("r", NOW)
    assert not state.degraded
    await state.sync()
    restarted = Redis.from_url(redis_server.url)
    try:
        assert int(await restarted.get(KEY)) == 2 * MICRO  # the 3 before the restart: lost
    finally:
        await restarted.aclose()
    assert state.spending.teams["t"].usd == 2


async def test_closing_flushes_the_last_spending(redis_server: RedisServer, redis: Redis) -> None:
    """A replica that stops adds the spending it had not flushed yet."""
    state = RedisState(redis_server.url, wall=lambda: NOW)
    state.charge("t", DAY, 3, NOW)
    await state.close()
    assert int(await redis.get(KEY)) == 3 * MICRO


async def test_rollover_flushes_the_old_period_to_its_own_key(
    state: RedisState, redis: Redis
) -> None:
    """Spending of a period that ended before it was flushed goes to that period's key;
    the new period counts from 0."""
    before = TODAY.replace(hour=23, minute=59, second=59).timestamp()
    state.charge("t", DAY, 1, before)
    state.charge("t", DAY, 2, before + 2)  # the next day
    await state.sync()
    assert int(await redis.get(KEY)) == MICRO
    tomorrow = TODAY + timedelta(days=1)
    assert int(await redis.get(f"llm-gateway:spend:t:{tomorrow:%Y-%m-%d}")) == 2 * MICRO
    assert state.spending.teams["t"].usd == 2


WARNED = Budget(usd=10, per="day", warn_at=0.5)
EVENT_KEY = f"llm-gateway:spend-event:t:{TODAY:%Y-%m-%d}:"


def budget_events(logs: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(e["event"], e["spent_usd"]) for e in logs if str(e["event"]).startswith("budget_")]


async def test_each_crossing_is_logged_once_by_all_replicas(
    redis_server: RedisServer, redis: Redis
) -> None:
    """Two replicas whose books both see the team cross ``warn_at`` and then its limit:
    each event is logged once in all, by the replica whose claim came first; the claims
    expire with the period's total."""
    a = RedisState(redis_server.url, wall=lambda: NOW)
    b = RedisState(redis_server.url, wall=lambda: NOW)
    try:
        b.track({"t": WARNED}, NOW)
        with capture_logs() as logs:
            a.charge("t", WARNED, 6, NOW)  # A crosses warn_at: claimed with its next sync
            assert budget_events(logs) == []
            await a.sync()
            await b.sync()  # B reads 6: its book crosses warn_at too, claimed next time
            await b.sync()  # A's claim was first: B logs nothing
            a.charge("t", WARNED, 5, NOW)  # both books reach the limit
            b.charge("t", WARNED, 5, NOW)
            for _ in range(2):
                await a.sync()
                await b.sync()
        assert budget_events(logs) == [("budget_warning", 6), ("budget_exceeded", 11)]
        end = int(period_of("day", NOW).end) + 86400
        for kind in ("budget_warning", "budget_exceeded"):
            assert await redis.expiretime(EVENT_KEY + kind) == end
    finally:
        await a.close()
        await b.close()


async def test_a_crossing_is_logged_all_the_same_when_redis_is_out(
    state: RedisState, redis_server: RedisServer
) -> None:
    """A claim whose sync fails is logged by the replica, and a crossing seen while Redis
    is out at once: an alert may come twice, never not at all."""
    state.track({"t": WARNED}, NOW)
    await state.sync()
    redis_server.stop()
    with capture_logs() as logs:
        state.charge("t", WARNED, 6, NOW)
        await state.sync()  # fails: the claim it carried is logged here
        assert budget_events(logs) == [("budget_warning", 6)]
        assert state.degraded
        state.charge("t", WARNED, 5, NOW)
        assert budget_events(logs) == [("budget_warning", 6), ("budget_exceeded", 11)]


async def test_a_replica_that_stops_logs_its_last_crossing(
    redis_server: RedisServer, redis: Redis
) -> None:
    """A crossing still to be claimed when the replica stops: claimed by the last sync."""
    state = RedisState(redis_server.url, wall=lambda: NOW)
    with capture_logs() as logs:
        state.charge("t", WARNED, 10, NOW)
        await state.close()
    assert budget_events(logs) == [("budget_warning", 10), ("budget_exceeded", 10)]
    assert await redis.exists(EVENT_KEY + "budget_exceeded")
