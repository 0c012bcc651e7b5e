"""Recovery state shared by every replica through Redis (``GATEWAY_STATE_URL=redis://...``).

Keys (all prefixed ``llm-gateway:``)::

    llm-gateway:fb:{route|model}            JSON FallbackState; TTL max(1 h, 4 x cooldown)
    llm-gateway:budget:{route}:req:{sec}    requests in one second; TTL 12 s
    llm-gateway:budget:{route}:retry:{sec}  retries in one second;  TTL 12 s
    llm-gateway:limit:{team}:req:{minute}   admitted requests in one minute; TTL 120 s
    llm-gateway:limit:{team}:tok:{minute}   tokens in one minute;   TTL 120 s

Fallback state runs the *same* pure transitions as the memory backend
(:mod:`gateway.resilience.fallback`), so the logic exists once: the common
case (nothing changes: the primary is active, a success with no streak) costs
one GET; a change is written under optimistic locking (WATCH / GET /
MULTI SET EXEC, retried ``WATCH_ATTEMPTS`` times when another replica wrote
in between). Under sustained contention ``choose`` answers the active model
without probing and ``record`` drops that one count, which is always safe.

Budgets and limits are counters: INCR first, inside a MULTI that also reads the
window (one round trip, atomic), then the pure rule of
:mod:`gateway.resilience.budget` decides; a refused retry or request is taken
back with DECR. Every caller sees a distinct count, so replicas never admit
more than the limit together; between the INCR and the DECR a refused
caller's count is visible to others, which can only make them stricter.
Windows rely on the replicas' wall clocks agreeing (NTP).

Outages (SPEC §12): commands use short socket timeouts (``timeout``, default
100 ms, for connect and read) and no client-side retries, and every operation is
bounded by ``op_timeout``. When Redis fails or is slow, the call is answered by
an embedded :class:`~gateway.state.memory.MemoryState`, the event
``state_backend_degraded`` is logged once per outage (with the error class,
never the URL), and Redis is tried again at most every ``reconnect_interval``
(1 s) by a single request; when it answers, ``state_backend_recovered`` is
logged and Redis is used again. Nothing is merged back: Redis is the truth.
The local fallback states are a copy of the last states this replica saw in
Redis, so during an outage a replica keeps the fallback it knew about and
continues from there; streaks, activations and recoveries made locally during
the outage are not written to Redis, and the local budget and limit windows
start empty at the outage and are forgotten afterwards (so during an outage
each replica applies team limits on its own).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
import structlog
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import WatchError

from gateway.policy.schema import Fallback, Limits, RetryBudget
from gateway.resilience import fallback
from gateway.resilience.budget import (
    BUDGET_WINDOW_S,
    LIMIT_WINDOW_S,
    budget_bucket,
    budget_buckets,
    limit_wait,
    limit_window,
    retry_allowed,
)
from gateway.resilience.fallback import Choice, FallbackState, Transition
from gateway.state.memory import MemoryState

log = structlog.get_logger("gateway.state")

PREFIX = "llm-gateway:"
WATCH_ATTEMPTS = 8
FALLBACK_TTL_MIN = 3600

T = TypeVar("T")
R = TypeVar("R")


def _decode(raw: bytes | str | None) -> FallbackState:
    if raw is None:
        return fallback.INITIAL
    try:
        data = orjson.loads(raw)
        return FallbackState(
            active=int(data["active"]),
            streak=int(data["streak"]),
            since=float(data["since"]),
            probe_until=float(data["probe_until"]),
        )
    except (ValueError, TypeError, KeyError):
        return fallback.INITIAL  # unreadable: start over rather than fail requests


def _encode(state: FallbackState) -> bytes:
    return orjson.dumps(
        {
            "active": state.active,
            "streak": state.streak,
            "since": state.since,
            "probe_until": state.probe_until,
        }
    )


def _int(raw: Any) -> int:
    return int(raw) if raw is not None else 0


class RedisState:
    """Recovery state in Redis, answered locally while Redis is unreachable."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 0.1,
        op_timeout: float | None = None,
        reconnect_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
        self._op_timeout = op_timeout if op_timeout is not None else 5 * timeout
        self._reconnect_interval = reconnect_interval
        self._clock = clock
        self.local = MemoryState()
        self.degraded = False
        self._next_try = 0.0

    # ---- outage handling ----

    async def _call(
        self, remote: Callable[[], Awaitable[T]], local: Callable[[], Awaitable[T]]
    ) -> T:
        if self.degraded:
            if self._clock() < self._next_try:
                return await local()
            self._next_try = self._clock() + self._reconnect_interval  # one trial per interval
        try:
            async with asyncio.timeout(self._op_timeout):
                result = await remote()
        except Exception as exc:  # never raise to the caller because of Redis
            self._mark_down(exc)
            return await local()
        if self.degraded:
            self.degraded = False
            log.info("state_backend_recovered", backend="redis")
        return result

    def _mark_down(self, exc: Exception) -> None:
        self._next_try = self._clock() + self._reconnect_interval
        if not self.degraded:
            self.degraded = True
            log.warning(
                "state_backend_degraded",
                backend="redis",
                error=type(exc).__name__,
                retry_interval_s=self._reconnect_interval,
            )

    # ---- fallback ----

    async def _update(
        self,
        key: str,
        fb: Fallback,
        step: Callable[[FallbackState], tuple[FallbackState, R]],
        contended: Callable[[FallbackState], R],
    ) -> R:
        rkey = f"{PREFIX}fb:{key}"
        state = _decode(await self._redis.get(rkey))
        new, result = step(state)
        if new != state:
            ttl = max(FALLBACK_TTL_MIN, math.ceil(4 * fb.cooldown))
            async with self._redis.pipeline(transaction=True) as pipe:
                for _ in range(WATCH_ATTEMPTS):
                    try:
                        await pipe.watch(rkey)
                        state = _decode(await pipe.get(rkey))
                        new, result = step(state)
                        if new == state:
                            await pipe.unwatch()  # type: ignore[no-untyped-call]
                            break
                        pipe.multi()  # type: ignore[no-untyped-call]
                        if new == fallback.INITIAL:
                            pipe.delete(rkey)
                        else:
                            pipe.set(rkey, _encode(new), ex=ttl)
                        await pipe.execute()
                        break
                    except WatchError:
                        continue
                else:
                    self.local.put_fallback(key, state)
                    return contended(state)
        self.local.put_fallback(key, new)
        return result

    async def choose(self, key: str, fb: Fallback, now: float) -> Choice:
        def step(s: FallbackState) -> tuple[FallbackState, Choice]:
            return fallback.choose(s, fb, now)

        def contended(s: FallbackState) -> Choice:
            active = s.active if 0 <= s.active <= len(fb.chain) else 0
            return Choice(active)

        return await self._call(
            lambda: self._update(key, fb, step, contended),
            lambda: self.local.choose(key, fb, now),
        )

    async def record(
        self, key: str, fb: Fallback, index: int, outcome: str, now: float, *, probe: bool
    ) -> Transition | None:
        def step(s: FallbackState) -> tuple[FallbackState, Transition | None]:
            return fallback.record(s, fb, index, outcome, now, probe=probe)

        return await self._call(
            lambda: self._update(key, fb, step, lambda _s: None),
            lambda: self.local.record(key, fb, index, outcome, now, probe=probe),
        )

    def fallback_snapshot(self) -> dict[str, FallbackState]:
        return self.local.fallback_snapshot()

    # ---- retry budget ----

    @staticmethod
    def _budget_key(route: str, kind: str, bucket: int) -> str:
        return f"{PREFIX}budget:{route}:{kind}:{bucket}"

    async def _note_request(self, route: str, now: float) -> None:
        key = self._budget_key(route, "req", budget_bucket(now))
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, BUDGET_WINDOW_S + 2)
            await pipe.execute()

    async def note_request(self, route: str, now: float) -> None:
        await self._call(
            lambda: self._note_request(route, now),
            lambda: self.local.note_request(route, now),
        )

    async def _spend_retry(self, route: str, budget: RetryBudget, now: float) -> bool:
        window = budget_buckets(now)
        mine = self._budget_key(route, "retry", budget_bucket(now))
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incr(mine)
            pipe.expire(mine, BUDGET_WINDOW_S + 2)
            pipe.mget([self._budget_key(route, "req", b) for b in window])
            pipe.mget([self._budget_key(route, "retry", b) for b in window])
            _, _, requests, retries = await pipe.execute()
        spent_before = sum(_int(x) for x in retries) - 1  # our INCR is in the window
        if retry_allowed(sum(_int(x) for x in requests), spent_before, budget):
            return True
        await self._redis.decr(mine)
        return False

    async def spend_retry(self, route: str, budget: RetryBudget, now: float) -> bool:
        return await self._call(
            lambda: self._spend_retry(route, budget, now),
            lambda: self.local.spend_retry(route, budget, now),
        )

    # ---- team limits ----

    @staticmethod
    def _limit_key(team: str, kind: str, now: float) -> str:
        return f"{PREFIX}limit:{team}:{kind}:{limit_window(now)}"

    async def _admit(self, team: str, limits: Limits, now: float) -> float | None:
        requests, tokens = self._limit_key(team, "req", now), self._limit_key(team, "tok", now)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incr(requests)
            pipe.expire(requests, 2 * LIMIT_WINDOW_S)
            pipe.get(tokens)
            admitted, _, used = await pipe.execute()
        wait = limit_wait(_int(admitted) - 1, _int(used), limits, now)
        if wait is not None:
            await self._redis.decr(requests)
        return wait

    async def admit(self, team: str, limits: Limits, now: float) -> float | None:
        if limits.requests_per_minute is None and limits.tokens_per_minute is None:
            return None
        return await self._call(
            lambda: self._admit(team, limits, now),
            lambda: self.local.admit(team, limits, now),
        )

    async def _add_tokens(self, team: str, tokens: int, now: float) -> None:
        key = self._limit_key(team, "tok", now)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.incrby(key, tokens)
            pipe.expire(key, 2 * LIMIT_WINDOW_S)
            await pipe.execute()

    async def add_tokens(self, team: str, limits: Limits, tokens: int, now: float) -> None:
        if limits.tokens_per_minute is None or tokens <= 0:
            return
        await self._call(
            lambda: self._add_tokens(team, tokens, now),
            lambda: self.local.add_tokens(team, limits, tokens, now),
        )

    async def close(self) -> None:
        try:
            await self._redis.aclose()
        except Exception as exc:  # closing must not fail a shutdown
            log.debug("state_backend_close_failed", backend="redis", error=type(exc).__name__)
