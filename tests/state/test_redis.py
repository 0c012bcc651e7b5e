"""The Redis backend: state shared by replicas, atomic updates, and outages."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import pytest
from redis.asyncio import Redis
from structlog.testing import capture_logs

from gateway.policy.schema import Fallback, RetryAllowance, TeamLimits
from gateway.resilience.fallback import Activated, Choice, Recovered
from gateway.state import open_state
from gateway.state.redis import MAX_STALENESS_S, RedisState

if TYPE_CHECKING:  # the fixture's type; conftest is not importable at run time
    from conftest import RedisServer

pytestmark = pytest.mark.redis

FB = Fallback(chain=("fb-1",), after_consecutive_server_errors=2, cooldown=60.0)
KEY = "team|glm-4.7"


class Clock:
    """A manual monotonic clock for the reconnect interval."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
async def replicas(redis_server: RedisServer) -> AsyncIterator[Callable[..., RedisState]]:
    """Make RedisState instances ("replicas") on the test's server; closed afterwards."""
    made: list[RedisState] = []

    def make(**options: object) -> RedisState:
        options.setdefault("timeout", 0.25)  # generous: CI machines are loaded
        options.setdefault("reconnect_interval", 0.05)
        state = RedisState(redis_server.url, **options)  # type: ignore[arg-type]
        made.append(state)
        return state

    yield make
    for state in made:
        await state.close()


def events(logs: list[dict[str, object]], name: str) -> list[dict[str, object]]:
    return [e for e in logs if e["event"] == name]


async def test_open_state_redis(redis_server: RedisServer) -> None:
    """A redis:// URL gives the Redis backend."""
    backend = open_state(redis_server.url, timeout=0.25)
    try:
        assert isinstance(backend, RedisState)
        assert await backend.choose(KEY, FB, 1.0) == Choice(0)
    finally:
        await backend.close()


async def test_replicas_share_fallback_activation(replicas: Callable[..., RedisState]) -> None:
    """Failures counted on two replicas activate the fallback for both; a probe lease is shared.

    ``max_staleness=0``: every answer reads Redis, so the sequence is exact (the
    bound on what a replica's view may miss is the next test's)."""
    a, b = replicas(max_staleness=0.0), replicas(max_staleness=0.0)
    assert await a.record(KEY, FB, 0, "server_error", 10.0, probe=False) is None
    assert await b.record(KEY, FB, 0, "server_error", 11.0, probe=False) == Activated(0, 1)
    assert await a.choose(KEY, FB, 12.0) == Choice(1)
    assert await b.choose(KEY, FB, 71.0) == Choice(0, probe=True)
    assert await a.choose(KEY, FB, 71.5) == Choice(1)  # b holds the lease
    assert await b.record(KEY, FB, 0, "ok", 72.0, probe=True) == Recovered(1)
    assert await a.choose(KEY, FB, 73.0) == Choice(0)
    assert a.fallback_snapshot() == {}


async def test_replicas_share_team_limits_and_budget(replicas: Callable[..., RedisState]) -> None:
    """Team limits and retry budgets count across replicas."""
    a, b = replicas(), replicas()
    limits = TeamLimits(requests_per_minute=3, tokens_per_minute=1000)
    assert [await r.admit("t", limits, 600.0) for r in (a, b, a)] == [None, None, None]
    assert await b.admit("t", limits, 630.0) == pytest.approx(30.0)
    await a.add_tokens("t", limits, 1000, 661.0)
    await a.sync()  # tokens are flushed by the background sync, at most 50 ms later
    assert await b.admit("t", limits, 662.0) == pytest.approx(58.0)
    budget = RetryAllowance(ratio=0.0, min_per_second=0.3)  # 3 retries per window
    spent = [await r.spend_retry("route", budget, 50.0) for r in (a, b, a, b)]
    assert spent == [True, True, True, False]


async def test_concurrent_failures_activate_once(replicas: Callable[..., RedisState]) -> None:
    """Twenty concurrent failures from two replicas give exactly one activation."""
    a, b = replicas(timeout=0.5), replicas(timeout=0.5)
    results = await asyncio.gather(
        *(r.record(KEY, FB, 0, "server_error", 5.0, probe=False) for r in (a, b) * 10)
    )
    assert [t for t in results if isinstance(t, Activated)] == [Activated(0, 1)]
    assert not a.degraded and not b.degraded


async def test_concurrent_probes_take_one_lease(replicas: Callable[..., RedisState]) -> None:
    """Of many concurrent choices after the cooldown exactly one probes."""
    a, b = replicas(timeout=0.5), replicas(timeout=0.5)
    for t in (0.0, 1.0):
        await a.record(KEY, FB, 0, "server_error", t, probe=False)
    choices = await asyncio.gather(*(r.choose(KEY, FB, 100.0) for r in (a, b) * 10))
    assert sum(c.probe for c in choices) == 1


async def test_concurrent_admits_respect_the_limit(replicas: Callable[..., RedisState]) -> None:
    """Thirty concurrent requests on two replicas admit exactly requests_per_minute."""
    a, b = replicas(timeout=0.5), replicas(timeout=0.5)
    limits = TeamLimits(requests_per_minute=10)
    answers = await asyncio.gather(*(r.admit("t", limits, 60.0) for r in (a, b) * 15))
    assert sum(w is None for w in answers) == 10


async def test_keys_are_prefixed_and_expire(
    replicas: Callable[..., RedisState], redis_server: RedisServer
) -> None:
    """Every key lives under llm-gateway: and carries a TTL."""
    a = replicas()
    now = time.time()
    for t in (now, now):
        await a.record(KEY, FB, 0, "server_error", t, probe=False)
    await a.note_request("route", now)
    await a.spend_retry("route", RetryAllowance(), now)
    limits = TeamLimits(requests_per_minute=5, tokens_per_minute=5)
    await a.admit("team", limits, now)
    await a.add_tokens("team", limits, 3, now)
    await a.sync()  # the counters' flush
    raw = Redis.from_url(redis_server.url)
    try:
        keys = sorted(k.decode() for k in await raw.keys("*"))
        assert len(keys) == 5  # fb, budget req + retry, limit req + tok
        assert all(k.startswith("llm-gateway:") for k in keys)
        assert all([await raw.ttl(k) > 0 for k in keys])
    finally:
        await raw.aclose()


async def test_unreadable_state_starts_over(
    replicas: Callable[..., RedisState], redis_server: RedisServer
) -> None:
    """A corrupted fallback value is read as the default state, not an error."""
    raw = Redis.from_url(redis_server.url)
    try:
        await raw.set(f"llm-gateway:fb:{KEY}", b"not json")
    finally:
        await raw.aclose()
    a = replicas()
    assert await a.choose(KEY, FB, 1.0) == Choice(0)
    assert not a.degraded


async def test_outage_answers_locally_and_recovers(
    replicas: Callable[..., RedisState], redis_server: RedisServer
) -> None:
    """With redis-server killed calls answer from local state; a restart restores sharing."""
    clock = Clock()  # the reconnect interval's clock: moved on by the test, not waited for
    a, b = replicas(clock=clock), replicas(clock=clock)
    for t in (1.0, 2.0):
        await a.record(KEY, FB, 0, "server_error", t, probe=False)
    assert await b.choose(KEY, FB, 3.0) == Choice(1)

    with capture_logs() as logs:
        redis_server.stop()
        for t in (4.0, 5.0, 6.0):  # both keep the fallback they knew
            assert await a.choose(KEY, FB, t) == Choice(1)
            assert await b.choose(KEY, FB, t) == Choice(1)
        limits = TeamLimits(requests_per_minute=1)
        assert await a.admit("t", limits, 7.0) is None
        assert await a.admit("t", limits, 8.0) == pytest.approx(52.0)
        assert await a.spend_retry("r", RetryAllowance(), 9.0) is True
        await a.note_request("r", 9.0)
        await a.add_tokens("t", TeamLimits(tokens_per_minute=5), 3, 9.0)
        await b.sync()  # b answered from its fresh view; its sync finds Redis gone
        assert a.degraded and b.degraded
        degraded = events(logs, "state_backend_degraded")
        assert len(degraded) == 2  # once per replica, not once per call
        assert {e["error"] for e in degraded} <= {"ConnectionError", "TimeoutError"}
        assert all(e["log_level"] == "warning" for e in degraded)

        redis_server.start()  # same port, empty: Redis is the truth again
        clock.t += 0.06  # past the 0.05 s reconnect interval
        assert await a.choose(KEY, FB, 10.0) == Choice(0)
        assert await b.choose(KEY, FB, 10.0) == Choice(0)
        assert len(events(logs, "state_backend_recovered")) == 2
        assert len(events(logs, "state_backend_degraded")) == 2
    assert not a.degraded and not b.degraded
    for t in (11.0, 12.0):
        await a.record(KEY, FB, 0, "server_error", t, probe=False)
    await b.sync()  # b's view of the key, refreshed (the background sync does it every 50 ms)
    assert await b.choose(KEY, FB, 13.0) == Choice(1)  # shared again


async def test_reconnect_is_tried_once_per_interval(
    replicas: Callable[..., RedisState], redis_server: RedisServer
) -> None:
    """While degraded, Redis is retried only after reconnect_interval, not on every call."""
    clock = Clock()
    a = replicas(reconnect_interval=1.0, clock=clock)
    with capture_logs() as logs:
        redis_server.stop()
        await a.spend_retry("r", RetryAllowance(), 1.0)
        assert a.degraded
        redis_server.start()
        for _ in range(5):  # the server is back, but the interval has not passed
            await a.spend_retry("r", RetryAllowance(), 1.0)
        assert a.degraded and not events(logs, "state_backend_recovered")
        clock.t = 1.0
        await a.spend_retry("r", RetryAllowance(), 1.0)
        assert not a.degraded
        assert len(events(logs, "state_backend_recovered")) == 1


async def test_hung_redis_times_out_to_local_state(
    replicas: Callable[..., RedisState], redis_server: RedisServer
) -> None:
    """A Redis that accepts but never answers costs one short timeout, then local answers."""
    a = replicas(reconnect_interval=10.0)
    assert await a.choose(KEY, FB, 1.0) == Choice(0)
    redis_server.pause()
    try:
        with capture_logs() as logs:
            started = time.monotonic()
            assert await a.admit("t", TeamLimits(requests_per_minute=1), 1.0) is None
            assert time.monotonic() - started < 1.0  # one timeout (0.25 s), not a hang
            started = time.monotonic()
            for t in (2.0, 3.0):
                await a.record(KEY, FB, 0, "server_error", t, probe=False)
            assert await a.choose(KEY, FB, 4.0) == Choice(1)
            assert time.monotonic() - started < 0.5  # 3 timeouts would take >= 0.75 s
        [event] = events(logs, "state_backend_degraded")
        assert event["error"] == "TimeoutError"
    finally:
        redis_server.resume()


async def test_password_never_logged(redis_server: RedisServer) -> None:
    """The degraded event names the error class, never the URL or its password."""
    redis_server.stop()
    url = f"redis://:s3cret-pw@127.0.0.1:{redis_server.port}/0"
    with capture_logs() as logs:
        backend = open_state(url, timeout=0.05)
        try:
            assert await backend.choose(KEY, FB, 1.0) == Choice(0)
        finally:
            await backend.close()
    assert events(logs, "state_backend_degraded")
    assert "s3cret-pw" not in repr(logs)
    assert str(redis_server.port) not in repr(logs)


async def test_a_change_reaches_every_view_within_the_bound(
    replicas: Callable[..., RedisState],
) -> None:
    """A fallback activated by one replica is seen by another that answers from its view
    within max_staleness (100 ms) plus one round trip; the background sync usually
    brings it sooner (every 50 ms)."""
    a, b = replicas(), replicas()
    assert await a.choose(KEY, FB, 1.0) == Choice(0)  # a now answers KEY from a fresh view
    for t in (2.0, 3.0):
        await b.record(KEY, FB, 0, "server_error", t, probe=False)
    activated = time.monotonic()
    seen = None
    while seen is None:
        if await a.choose(KEY, FB, 4.0) == Choice(1):
            seen = time.monotonic() - activated
        else:
            assert time.monotonic() - activated < MAX_STALENESS_S + 0.25, "view never refreshed"
            await asyncio.sleep(0.002)  # polling the condition
    assert seen < MAX_STALENESS_S + 0.25


async def _commands(raw: Redis) -> dict[str, int]:
    stats = await raw.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def _happy_request(state: RedisState, limits: TeamLimits, now: float) -> None:
    """The state calls one successful request makes (handlers.py and engine.py)."""
    assert await state.admit("team", limits, now) is None
    await state.note_request("route", now)
    choice = await state.choose(KEY, FB, now)
    assert await state.record(KEY, FB, choice.index, "ok", now, probe=choice.probe) is None
    await state.add_tokens("team", limits, 30, now)


async def test_happy_path_is_at_most_one_round_trip_and_blocks_grow_with_the_pace(
    replicas: Callable[..., RedisState], redis_server: RedisServer
) -> None:
    """A successful request waits for at most one Redis command, the team admission, and
    most wait for none: admissions are reserved in blocks that double while they are used
    up quickly (20 requests in a row: at most 5 reservations; 64 at once: one); a team
    without limits sends nothing. The background sync is held off here so that every
    command counted is one a request waited for."""
    a = replicas(sync_interval=3600.0, max_staleness=3600.0)
    limits = TeamLimits(requests_per_minute=100_000, tokens_per_minute=10_000_000)
    now = time.time()
    await _happy_request(a, limits, now)  # the first use of KEY reads it once
    raw = Redis.from_url(redis_server.url)
    try:
        await raw.config_resetstat()
        for _ in range(20):
            await _happy_request(a, limits, now)
        sequential = await _commands(raw)
        a._leases.clear()  # a new replica's pace: no block yet
        await raw.config_resetstat()
        await asyncio.gather(*(_happy_request(a, limits, now) for _ in range(64)))
        concurrent = await _commands(raw)
        await raw.config_resetstat()
        for _ in range(20):
            await _happy_request(a, TeamLimits(), now)
        unlimited = await _commands(raw)
    finally:
        await raw.aclose()
    # commandstats also counts the commands a script runs (its INCRBY and GET)
    inside = {"incrby", "get", "expire", "config|resetstat"}
    assert 1 <= sequential["evalsha"] <= 5 and set(sequential) - inside == {"evalsha"}, sequential
    assert concurrent["evalsha"] == 1 and set(concurrent) - inside == {"evalsha"}, concurrent
    assert set(unlimited) - {"config|resetstat"} == set(), unlimited
    await a.sync()  # the counts of all 105 requests arrive together
    assert not a.degraded


async def test_an_unused_reservation_is_given_back(
    replicas: Callable[..., RedisState], redis_server: RedisServer
) -> None:
    """Admissions a replica reserved and did not use go back to the shared count once idle
    for a second, so the other replicas can use them."""
    wall = Clock()
    wall.t = 6000.0
    a = replicas(wall=wall, sync_interval=3600.0)
    limits = TeamLimits(requests_per_minute=1000)
    for i in range(12):  # blocks of 1, 2, 4, 8: 15 reserved, 12 used
        assert await a.admit("t", limits, wall.t + i * 0.001) is None
    raw = Redis.from_url(redis_server.url)
    key = f"llm-gateway:limit:t:req:{int(wall.t // 60)}"
    try:
        assert int(await raw.get(key)) == 15
        wall.t += 0.5
        await a.sync()  # not idle long enough: kept
        assert int(await raw.get(key)) == 15
        wall.t += 1.0
        await a.sync()  # idle for over a second: 3 given back
        assert int(await raw.get(key)) == 12
    finally:
        await raw.aclose()


async def test_requests_that_find_a_view_stale_share_one_read(
    replicas: Callable[..., RedisState], redis_server: RedisServer
) -> None:
    """When the view of a route is too old to answer from, the requests that find it so
    share one read of Redis instead of one read each (a busy loop delays the refresh)."""
    a = replicas(max_staleness=0.0, sync_interval=3600.0)  # every answer needs a fresh read
    raw = Redis.from_url(redis_server.url)
    try:
        await raw.config_resetstat()
        choices = await asyncio.gather(*(a.choose(KEY, FB, 1.0) for _ in range(64)))
        stats = await _commands(raw)
    finally:
        await raw.aclose()
    assert choices == [Choice(0)] * 64
    assert stats.get("get") == 1, stats
