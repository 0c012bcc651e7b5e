# long: one class, the Redis backend of all recovery state, under its key layout's documentation
"""Recovery state shared by every replica through Redis (``GATEWAY_STATE_URL=redis://...``).

Keys (all prefixed ``llm-gateway:``)::

    llm-gateway:fb:{route|model}            JSON FallbackState; TTL max(1 h, 4 x cooldown)
    llm-gateway:budget:{route}:req:{sec}    requests in one second; TTL 12 s
    llm-gateway:budget:{route}:retry:{sec}  retries in one second;  TTL 12 s
    llm-gateway:limit:{team}:req:{minute}   admitted requests in one minute; TTL 120 s
    llm-gateway:limit:{team}:tok:{minute}   tokens in one minute;   TTL 120 s
    llm-gateway:spend:{team}:{period}       a team's budget spending (redis_budgets)
    llm-gateway:spend-event:{team}:{period}:{event}  who logs a budget event (redis_budgets)

The ``budget:`` keys hold a route's retry allowance (the policy's ``retry.budget``); they keep
that name so that replicas of every version share them.

Redis off the critical path: a request makes at most ONE round trip to
Redis on its happy path, and none when its team has no limits.

* Fallback state: each replica keeps a *view* of every fallback key it used, the
  last value it read from Redis with the (monotonic) time the read was sent. A
  background sync refreshes the views of keys used in the last ``VIEW_IDLE_S``
  with one MGET every ``sync_interval`` (50 ms). ``choose`` and ``record`` run
  the pure transitions of :mod:`gateway.resilience.fallback` on the view: when
  nothing changes (the primary is active and a success leaves no streak: the
  happy path) they answer locally, with no round trip. A view older than
  ``max_staleness`` (100 ms), or a key not seen yet, is read through (one GET)
  first. So an answer never rests on a view older than ``max_staleness``: a
  transition written by one replica is seen by every other within
  ``max_staleness`` plus one round trip, and usually within ``sync_interval``.
* Every change (an error streak, an activation, a probe lease, a recovery) is
  written to Redis under optimistic locking, computed from the value in Redis
  and not from the view (WATCH / GET / MULTI SET EXEC, retried
  ``WATCH_ATTEMPTS`` times when another replica wrote in between). A stale view
  can therefore only delay what a replica *sees*, never lose or double a
  transition: two replicas that both think they take the probe lease still
  take it once. Under sustained contention ``choose`` answers the active model
  without probing and ``record`` drops that one count, which is always safe.
  A success seen against a view that shows no streak is not written, so a
  streak another replica started less than ``max_staleness`` ago survives a
  success here ("consecutive" across replicas is as fine-grained as that).
* Counters (``note_request``, ``add_tokens``) are added up locally and flushed
  by the same background sync, pipelined (INCRBY + EXPIRE per window), at most
  ``sync_interval`` later. A replica adds its own unflushed counts when it reads
  a window (``spend_retry``, ``admit``), so its own decisions are exact; other
  replicas' counts arrive up to ``sync_interval`` late, which matters nothing
  against windows of 10 s (budgets) and 60 s (team limits).
* Team admission (only for a team with limits) is the one round trip, and most
  requests skip it: admissions are reserved in blocks
  (:class:`~gateway.resilience.retry_allowance.Lease`: sized by this replica's pace, at most
  1/16 of what the window has left, so exact near the limit; an unused block is
  given back after a second). A reservation is a Lua script that INCRBYs the minute's
  request counter by the block (EXPIRE when new) and returns it with the minute's
  tokens, atomically. The reservations asked for in one pass of the event loop travel
  together (:class:`Admissions`): one pipeline, one script call per team window.
  Replicas together never admit more than the limit; what is over it in a block is
  given back at the next flush.
* ``spend_retry`` (not on the happy path) is one MULTI: INCR the second's retry
  counter, read the window; a refused retry is taken back with DECR.

Windows rely on the replicas' wall clocks agreeing (NTP).

Outages (docs/operations.md, "Scaling out"): commands use short socket timeouts
(``timeout``, default 100 ms, for connect and read) and no client-side retries, and
every operation is bounded by ``op_timeout``. When Redis fails or is slow, the call is
answered by an embedded :class:`~gateway.state.memory.MemoryState`, the event
``state_backend_degraded`` is logged once per outage (with the error class,
never the URL), and Redis is tried again at most every ``reconnect_interval``
(1 s) by a single request; when it answers, ``state_backend_recovered`` is
logged and Redis is used again. Nothing is merged back: Redis is the truth.
The local fallback states are the views this replica last had, so during an
outage a replica keeps the fallback it knew about and continues from there;
streaks, activations and recoveries made locally during the outage are not
written to Redis, and every view is read again from Redis after it. The local
budget and limit windows start empty at the outage and are forgotten afterwards
(so during an outage each replica applies team limits on its own); counts not
yet flushed when Redis failed are dropped (at most ``sync_interval`` of them).

The background sync and the outage handling are in :mod:`gateway.state.redis_sync`, the
reservation of admissions in :mod:`gateway.state.redis_admissions`, team budgets (their
keys, flush and outage behaviour) in :mod:`gateway.state.redis_budgets`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

import structlog
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import WatchError

from gateway.policy.schema import Budget, Fallback, RetryAllowance, TeamLimits
from gateway.resilience import fallback
from gateway.resilience.fallback import Choice, FallbackState, Transition
from gateway.resilience.retry_allowance import (
    ALLOWANCE_WINDOW_S,
    allowance_bucket,
    allowance_buckets,
    retry_allowed,
)
from gateway.resilience.team_limits import LIMIT_WINDOW_S, Lease, limit_window
from gateway.state.redis_admissions import Admissions
from gateway.state.redis_sync import (
    MAX_STALENESS_S,
    PREFIX,
    SYNC_INTERVAL_S,
    SyncedState,
    encode_state,
    nothing,
)

log = structlog.get_logger("gateway.state")

WATCH_ATTEMPTS = 8
FALLBACK_TTL_MIN = 3600
MAX_REQUEST_TOKENS = 2**32
"""The most tokens one request adds to its team's window: more than any model's context
window. A provider's absurd count spends the window's ``tokens_per_minute`` and leaves a
total the replicas still read back as a count (below 2**53)."""

R = TypeVar("R")


class RedisState(SyncedState):
    """Recovery state in Redis, answered locally while Redis is unreachable."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 0.1,
        op_timeout: float | None = None,
        reconnect_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sync_interval: float = SYNC_INTERVAL_S,
        max_staleness: float = MAX_STALENESS_S,
    ) -> None:
        super().__init__(
            Redis.from_url(
                url,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0),
                health_check_interval=0,
            ),
            op_timeout=op_timeout if op_timeout is not None else 5 * timeout,
            reconnect_interval=reconnect_interval,
            clock=clock,
            wall=wall,
            sync_interval=sync_interval,
            max_staleness=max_staleness,
        )
        self._timeout = timeout
        self._admissions = Admissions(self._redis, 2 * timeout, self._count, self.ignored)
        self._reads: dict[str, asyncio.Future[FallbackState]] = {}  # reads in flight
        self.shared = True

    # ---- fallback ----

    async def _update(
        self,
        key: str,
        fb: Fallback,
        step: Callable[[FallbackState], tuple[FallbackState, R]],
        contended: Callable[[FallbackState], R],
        known: FallbackState | None,
    ) -> R:
        """``step`` applied to the value in Redis; ``known``: a fresh view that ``step``
        changes (the read is then skipped: the change is computed again under WATCH)."""
        rkey = f"{PREFIX}fb:{key}"
        if known is None:
            sent = self._clock()
            state = self._decode(key, await self._redis.get(rkey))
            new, result = step(state)
            if new == state:
                self._set_view(key, state, sent)
                return result
        ttl = max(FALLBACK_TTL_MIN, math.ceil(4 * fb.cooldown))
        async with self._redis.pipeline(transaction=True) as pipe:
            for _ in range(WATCH_ATTEMPTS):
                try:
                    sent = self._clock()
                    await pipe.watch(rkey)
                    state = self._decode(key, await pipe.get(rkey))
                    new, result = step(state)
                    if new == state:
                        await pipe.unwatch()  # type: ignore[no-untyped-call]
                        self._set_view(key, state, sent)
                        return result
                    pipe.multi()  # type: ignore[no-untyped-call]
                    if new == fallback.INITIAL:
                        pipe.delete(rkey)
                    else:
                        pipe.set(rkey, encode_state(new), ex=ttl)
                    await pipe.execute()
                    break
                except WatchError:
                    continue
            else:
                self._set_view(key, state, sent)
                return contended(state)
        self._set_view(key, new, sent, written=True)
        return result

    async def _known(self, key: str) -> FallbackState | None:
        """A view of ``key`` fresh enough to answer from: this replica's, or read again
        (one read per key at a time: the requests that find the view stale share it);
        None while Redis is unreachable."""
        if self.degraded:
            return None
        known = self._view(key)
        if known is not None:
            return known
        read = self._reads.get(key)
        if read is None:
            read = self._reads[key] = asyncio.ensure_future(self._read_view(key))
            read.add_done_callback(lambda _r: self._reads.pop(key, None))
        return await self._call(lambda: asyncio.shield(read), nothing)

    async def _read_view(self, key: str) -> FallbackState:
        sent = self._clock()
        state = self._decode(key, await self._redis.get(f"{PREFIX}fb:{key}"))
        self._set_view(key, state, sent)
        return state

    async def choose(self, key: str, fb: Fallback, now: float) -> Choice:
        known = await self._known(key)
        if known is not None:
            new, choice = fallback.choose(known, fb, now)
            if new == known:
                return choice  # the happy path: no round trip

        def step(s: FallbackState) -> tuple[FallbackState, Choice]:
            return fallback.choose(s, fb, now)

        def contended(s: FallbackState) -> Choice:
            active = s.active if 0 <= s.active <= len(fb.chain) else 0
            return Choice(active)

        return await self._call(
            lambda: self._update(key, fb, step, contended, known),
            lambda: self.local.choose(key, fb, now),
        )

    async def record(
        self, key: str, fb: Fallback, index: int, outcome: str, now: float, *, probe: bool
    ) -> Transition | None:
        known = await self._known(key)
        if known is not None:
            new, transition = fallback.record(known, fb, index, outcome, now, probe=probe)
            if new == known:
                return transition  # the happy path: no round trip

        def step(s: FallbackState) -> tuple[FallbackState, Transition | None]:
            return fallback.record(s, fb, index, outcome, now, probe=probe)

        return await self._call(
            lambda: self._update(key, fb, step, lambda _s: None, known),
            lambda: self.local.record(key, fb, index, outcome, now, probe=probe),
        )

    def fallback_snapshot(self) -> dict[str, FallbackState]:
        return self.local.fallback_snapshot()

    # ---- retry budget ----

    @staticmethod
    def _allowance_key(route: str, kind: str, bucket: int) -> str:
        return f"{PREFIX}budget:{route}:{kind}:{bucket}"

    async def _note_request(self, route: str, now: float) -> None:
        key = self._allowance_key(route, "req", allowance_bucket(now))
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, ALLOWANCE_WINDOW_S + 2)
            await pipe.execute()

    async def note_request(self, route: str, now: float) -> None:
        if self.degraded:  # local, or this request is the one trial of the interval
            await self._call(
                lambda: self._note_request(route, now),
                lambda: self.local.note_request(route, now),
            )
            return
        self._count(self._allowance_key(route, "req", allowance_bucket(now)), 1)

    async def _spend_retry(self, route: str, allowance: RetryAllowance, now: float) -> bool:
        window = allowance_buckets(now)
        mine = self._allowance_key(route, "retry", allowance_bucket(now))
        request_keys = [self._allowance_key(route, "req", b) for b in window]
        retry_keys = [self._allowance_key(route, "retry", b) for b in window]
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incr(mine)
            pipe.expire(mine, ALLOWANCE_WINDOW_S + 2)
            pipe.mget(request_keys)
            pipe.mget(retry_keys)
            mine_now, _, requests, retries = await pipe.execute(raise_on_error=False)
        refused = isinstance(mine_now, Exception)  # it held something else than an integer
        if refused:
            await self._refused([mine])  # this retry is not counted
        count = self.ignored.counter
        spent_before = sum(map(count, retry_keys, retries)) - (0 if refused else 1)  # ours
        noted = sum(map(count, request_keys, requests)) + sum(map(self._unflushed, request_keys))
        if retry_allowed(noted, spent_before, allowance):
            return True
        if not refused:
            await self._redis.decr(mine)
        return False

    async def spend_retry(self, route: str, allowance: RetryAllowance, now: float) -> bool:
        return await self._call(
            lambda: self._spend_retry(route, allowance, now),
            lambda: self.local.spend_retry(route, allowance, now),
        )

    # ---- team limits ----

    async def _admit(self, team: str, limits: TeamLimits, now: float) -> float | None:
        lease = self._leases.get(team)
        if lease is None:
            lease = self._leases[team] = Lease()
        lease.roll(now)
        tokens = self._limit_key(team, "tok", now)
        if (wait := lease.wait(now, limits, self._unflushed(tokens))) is not None:
            return wait
        if not lease.take(now):
            requests = self._limit_key(team, "req", now)
            if not await self._admissions.join(lease, requests, tokens, limits, now):
                return (limit_window(now) + 1) * LIMIT_WINDOW_S - now
            if (wait := lease.wait(now, limits, self._unflushed(tokens))) is not None:
                lease.left += 1  # the reservation read the tokens: spent; back in the block
                return wait
        if self._sync_task is None:
            self._ensure_sync()  # gives back what stays unused, refreshes the tokens
        return None

    async def admit(self, team: str, limits: TeamLimits, now: float) -> float | None:
        if limits.requests_per_minute is None and limits.tokens_per_minute is None:
            return None
        if self.degraded:  # local, or this request is the one trial of the interval
            return await self._call(
                lambda: self._admit(team, limits, now),
                lambda: self.local.admit(team, limits, now),
            )
        try:  # no timer of its own: the reservation's round trip has one
            return await self._admit(team, limits, now)
        except Exception as exc:
            self._mark_down(exc)
            return await self.local.admit(team, limits, now)

    async def _add_tokens(self, team: str, tokens: int, now: float) -> None:
        key = self._limit_key(team, "tok", now)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.incrby(key, tokens)
            pipe.expire(key, 2 * LIMIT_WINDOW_S)
            await pipe.execute()

    async def add_tokens(self, team: str, limits: TeamLimits, tokens: int, now: float) -> None:
        if limits.tokens_per_minute is None or tokens <= 0:
            return
        tokens = min(tokens, MAX_REQUEST_TOKENS)
        if self.degraded:
            await self._call(
                lambda: self._add_tokens(team, tokens, now),
                lambda: self.local.add_tokens(team, limits, tokens, now),
            )
            return
        self._count(self._limit_key(team, "tok", now), tokens)

    # ---- budgets (synced by redis_budgets) ----

    def charge(self, team: str, budget: Budget, usd: float, now: float) -> None:
        self.spending.charge(team, budget, usd, now)
        if self._sync_task is None:
            self._ensure_sync()

    def track(self, budgets: Mapping[str, Budget], now: float) -> None:
        self.spending.track(budgets, now)
        if budgets and self._sync_task is None:
            self._ensure_sync()

    async def close(self) -> None:
        self._closed = True
        task, self._sync_task = self._sync_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if (self._pending or self.spending.teams) and not self.degraded:
            with contextlib.suppress(Exception):
                await self.sync()  # the last counts and spending; bounded by op_timeout
        self._budget_sync.unclaimed()  # a crossing no sync claimed: logged all the same
        await self._admissions.close()
        try:
            await self._redis.aclose()
        except Exception as exc:  # closing must not fail a shutdown
            log.debug("state_backend_close_failed", backend="redis", error=type(exc).__name__)
