"""Recovery state shared by every replica through Redis (``GATEWAY_STATE_URL=redis://...``).

Keys (all prefixed ``llm-gateway:``)::

    llm-gateway:fb:{route|model}            JSON FallbackState; TTL max(1 h, 4 x cooldown)
    llm-gateway:budget:{route}:req:{sec}    requests in one second; TTL 12 s
    llm-gateway:budget:{route}:retry:{sec}  retries in one second;  TTL 12 s
    llm-gateway:limit:{team}:req:{minute}   admitted requests in one minute; TTL 120 s
    llm-gateway:limit:{team}:tok:{minute}   tokens in one minute;   TTL 120 s

Redis off the critical path (issue 18): a request makes at most ONE round trip to
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
  (:class:`~gateway.resilience.budget.Lease`: sized by this replica's pace, at most
  1/16 of what the window has left, so exact near the limit; an unused block is
  given back after a second). A reservation is a Lua script that INCRBYs the minute's
  request counter by the block (EXPIRE when new) and returns it with the minute's
  tokens, atomically. The reservations asked for in one pass of the event loop travel
  together (:class:`_Admissions`): one pipeline, one script call per team window.
  Replicas together never admit more than the limit; what is over it in a block is
  given back at the next flush.
* ``spend_retry`` (not on the happy path) is one MULTI: INCR the second's retry
  counter, read the window; a refused retry is taken back with DECR.

Windows rely on the replicas' wall clocks agreeing (NTP).

Outages (SPEC §12): commands use short socket timeouts (``timeout``, default
100 ms, for connect and read) and no client-side retries, and every operation is
bounded by ``op_timeout``. When Redis fails or is slow, the call is answered by
an embedded :class:`~gateway.state.memory.MemoryState`, the event
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
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
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
    LEASE_IDLE_S,
    LIMIT_WINDOW_S,
    Lease,
    budget_bucket,
    budget_buckets,
    limit_window,
    retry_allowed,
)
from gateway.resilience.fallback import Choice, FallbackState, Transition
from gateway.state.memory import MemoryState

log = structlog.get_logger("gateway.state")

PREFIX = "llm-gateway:"
WATCH_ATTEMPTS = 8
FALLBACK_TTL_MIN = 3600
SYNC_INTERVAL_S = 0.05
"""How often the background sync flushes counters and refreshes fallback views."""
MAX_STALENESS_S = 0.1
"""The oldest view ``choose`` / ``record`` answer from; older views are read through."""
VIEW_IDLE_S = 30.0
"""A view not used for this long is no longer refreshed (it is read again on use)."""

ADMIT_SCRIPT = """
local k = tonumber(ARGV[2])
local n = redis.call('INCRBY', KEYS[1], k)
if n == k then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return {n, redis.call('GET', KEYS[2])}
"""
"""Count ARGV[2] admissions in the request window KEYS[1]; the new count and the
window's tokens (KEYS[2])."""

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


async def _nothing() -> None:
    return None


class _Admissions:
    """Reservations of team admissions (:class:`~gateway.resilience.budget.Lease`), the
    ones asked for in one pass of the event loop sent as one pipeline.

    :meth:`join` queues a request whose team's block is used up and waits; the first
    join of a pass schedules the send for the end of the pass (``call_soon``), so every
    request woken in that pass shares the round trip. One script call per team window
    reserves a block for all its waiters (and the team's pace), then each waiter takes
    one admission from the block, or is refused when the window is full.
    """

    def __init__(self, redis: Redis, timeout: float, give_back: Callable[[str, int], None]):
        self._script = redis.register_script(ADMIT_SCRIPT)
        self._redis = redis
        self._timeout = timeout
        self._give_back = give_back
        self._queued: dict[str, _Waiting] = {}
        self._sends: set[asyncio.Task[None]] = set()

    def join(
        self, lease: Lease, requests: str, tokens: str, limits: Limits, now: float
    ) -> asyncio.Future[bool]:
        """True once admitted from a new reservation, False when the window is full."""
        loop = asyncio.get_running_loop()
        if not self._queued:
            loop.call_soon(self._send)
        waiting = self._queued.get(requests)
        if waiting is None:
            waiting = self._queued[requests] = _Waiting(lease, tokens, limits, now)
        future: asyncio.Future[bool] = loop.create_future()
        waiting.futures.append(future)
        return future

    def _send(self) -> None:
        batch, self._queued = self._queued, {}
        task = asyncio.get_running_loop().create_task(self._round_trip(batch))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _round_trip(self, batch: dict[str, _Waiting]) -> None:
        ttl = 2 * LIMIT_WINDOW_S
        sizes = [w.lease.size(w.now, w.limits, len(w.futures)) for w in batch.values()]
        try:
            async with asyncio.timeout(self._timeout):
                if len(batch) == 1:
                    [(requests, w)] = batch.items()
                    replies = [await self._script(keys=[requests, w.tokens], args=[ttl, sizes[0]])]
                else:
                    async with self._redis.pipeline(transaction=False) as pipe:
                        for (requests, w), n in zip(batch.items(), sizes, strict=True):
                            await self._script(
                                keys=[requests, w.tokens], args=[ttl, n], client=pipe
                            )
                        replies = await pipe.execute()
        except Exception as exc:  # each waiter falls back to local state
            for w in batch.values():
                for future in w.futures:
                    if not future.done():
                        future.set_exception(exc)
            return
        except BaseException:  # cancelled (close): so are the waiters
            for w in batch.values():
                for future in w.futures:
                    future.cancel()
            raise
        for (requests, w), n, (count, used) in zip(batch.items(), sizes, replies, strict=True):
            over = w.lease.reserved(w.now, n, _int(count), _int(used), w.limits)
            if over:
                self._give_back(requests, over)
            for future in w.futures:
                if not future.done():  # a waiter may have been cancelled
                    future.set_result(w.lease.take(w.now))

    async def close(self) -> None:
        for task in list(self._sends):
            task.cancel()
        for task in list(self._sends):
            with contextlib.suppress(BaseException):
                await task


@dataclass(slots=True)
class _Waiting:
    """The requests of one pass waiting on one team window's reservation."""

    lease: Lease
    tokens: str
    limits: Limits
    now: float
    futures: list[asyncio.Future[bool]] = field(default_factory=list)


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
        wall: Callable[[], float] = time.time,
        sync_interval: float = SYNC_INTERVAL_S,
        max_staleness: float = MAX_STALENESS_S,
    ) -> None:
        self._redis = Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
        self._timeout = timeout
        self._op_timeout = op_timeout if op_timeout is not None else 5 * timeout
        self._admissions = _Admissions(self._redis, 2 * timeout, self._count)
        self._leases: dict[str, Lease] = {}  # team -> its reserved admissions
        self._reconnect_interval = reconnect_interval
        self._clock = clock
        self._wall = wall  # epoch seconds, as the engine passes ``now``
        self._sync_interval = sync_interval
        self._max_staleness = max_staleness
        self.local = MemoryState()
        """The views of fallback state (and, during an outage, all state)."""
        self.degraded = False
        self._next_try = 0.0
        self._seen: dict[str, float] = {}  # fallback key -> when its view's read was sent
        self._reads: dict[str, asyncio.Future[FallbackState]] = {}  # reads in flight
        self._used: dict[str, float] = {}  # fallback key -> last use of its view
        self._pending: dict[str, int] = {}  # counter key -> count not yet flushed
        self._inflight: dict[str, int] = {}  # counter key -> count being flushed
        self._sync_task: asyncio.Task[None] | None = None
        self._closed = False

    # ---- outage handling ----

    async def _call(
        self,
        remote: Callable[[], Awaitable[T]],
        local: Callable[[], Awaitable[T]],
        limit: float | None = None,
    ) -> T:
        if self.degraded:
            if self._clock() < self._next_try:
                return await local()
            self._next_try = self._clock() + self._reconnect_interval  # one trial per interval
        try:
            async with asyncio.timeout(limit or self._op_timeout):
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
        self._seen.clear()  # every view is read again from Redis after the outage
        self._pending.clear()  # at most one sync interval of counts
        self._leases.clear()  # reservations are made again after the outage
        if not self.degraded:
            self.degraded = True
            log.warning(
                "state_backend_degraded",
                backend="redis",
                error=type(exc).__name__,
                retry_interval_s=self._reconnect_interval,
            )

    # ---- background sync: counters out, fallback views in ----

    def _ensure_sync(self) -> None:
        if self._sync_task is None and not self._closed:
            self._sync_task = asyncio.get_running_loop().create_task(self._sync_loop())

    async def _sync_loop(self) -> None:
        try:
            while not self._closed:  # redis-py may swallow the cancel of close()
                await asyncio.sleep(self._sync_interval)
                try:
                    if self._closed or not await self.sync():
                        return  # idle: started again by the next use
                except Exception as exc:  # a bug here must not stop the gateway
                    log.warning("state_sync_failed", backend="redis", error=type(exc).__name__)
        finally:
            if self._sync_task is asyncio.current_task():
                self._sync_task = None

    async def sync(self) -> bool:
        """Flush the counters, give back idle reservations and refresh the fallback views
        and the tokens of the teams served now (the background sync does this every
        ``sync_interval``); False when there was nothing to do."""
        now, wall = self._clock(), self._wall()
        for key in [k for k, used in self._used.items() if now - used >= VIEW_IDLE_S]:
            del self._used[key]
            self._seen.pop(key, None)
        teams = self._tend_leases(wall)
        keys = list(self._used)
        counts = self._pending
        if not keys and not counts and not teams:
            return False
        if self.degraded:  # counters go to the local state while degraded
            return True
        self._pending, self._inflight = {}, counts
        try:
            await self._call(lambda: self._sync(keys, counts, teams, now, wall), _nothing)
        finally:
            self._inflight = {}
        return True

    def _tend_leases(self, wall: float) -> list[str]:
        """Give back what idle reservations hold; the teams whose tokens to refresh."""
        window, teams = limit_window(wall), []
        for team, lease in list(self._leases.items()):
            if lease.window != window:
                del self._leases[team]  # what it held expired with its window
                continue
            if back := lease.give_back(wall):
                self._count(self._limit_key(team, "req", wall), -back)
            if lease.left or wall - lease.used_at < LEASE_IDLE_S:
                teams.append(team)
        return teams

    async def _sync(
        self, keys: list[str], counts: dict[str, int], teams: list[str], sent: float, wall: float
    ) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for key, n in counts.items():
                pipe.incrby(key, n)
                pipe.expire(key, BUDGET_WINDOW_S + 2 if ":budget:" in key else 2 * LIMIT_WINDOW_S)
            if keys:
                pipe.mget([f"{PREFIX}fb:{k}" for k in keys])
            if teams:
                pipe.mget([self._limit_key(t, "tok", wall) for t in teams])
            replies = await pipe.execute()
        if teams:
            window = limit_window(wall)
            for team, raw in zip(teams, replies.pop(), strict=True):
                lease = self._leases.get(team)
                if lease is not None and lease.window == window:
                    lease.tokens = _int(raw)
        if keys:
            for key, raw in zip(keys, replies[-1], strict=True):
                self._set_view(key, _decode(raw), sent)

    def _unflushed(self, key: str) -> int:
        return self._pending.get(key, 0) + self._inflight.get(key, 0)

    def _count(self, key: str, n: int) -> None:
        self._pending[key] = self._pending.get(key, 0) + n
        if self._sync_task is None:
            self._ensure_sync()

    # ---- fallback ----

    def _view(self, key: str) -> FallbackState | None:
        """This replica's view of ``key`` if it is fresh enough to answer from, else None."""
        now = self._clock()
        self._used[key] = now
        if self._sync_task is None:
            self._ensure_sync()
        seen = self._seen.get(key)
        if seen is None or now - seen > self._max_staleness:
            return None
        return self.local.fallbacks.get(key, fallback.INITIAL)

    def _set_view(
        self, key: str, state: FallbackState, sent: float, *, written: bool = False
    ) -> None:
        """Keep ``state`` read (or ``written``) at ``sent`` unless a later read is kept."""
        seen = self._seen.get(key)
        if seen is not None and sent < seen:
            if not written:
                return
            sent = seen  # our own write is newer than any read that went before it
        self._seen[key] = sent
        self.local.put_fallback(key, state)

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
            state = _decode(await self._redis.get(rkey))
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
                    state = _decode(await pipe.get(rkey))
                    new, result = step(state)
                    if new == state:
                        await pipe.unwatch()  # type: ignore[no-untyped-call]
                        self._set_view(key, state, sent)
                        return result
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
        return await self._call(lambda: asyncio.shield(read), _nothing)

    async def _read_view(self, key: str) -> FallbackState:
        sent = self._clock()
        state = _decode(await self._redis.get(f"{PREFIX}fb:{key}"))
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
    def _budget_key(route: str, kind: str, bucket: int) -> str:
        return f"{PREFIX}budget:{route}:{kind}:{bucket}"

    async def _note_request(self, route: str, now: float) -> None:
        key = self._budget_key(route, "req", budget_bucket(now))
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.incr(key)
            pipe.expire(key, BUDGET_WINDOW_S + 2)
            await pipe.execute()

    async def note_request(self, route: str, now: float) -> None:
        if self.degraded:  # local, or this request is the one trial of the interval
            await self._call(
                lambda: self._note_request(route, now),
                lambda: self.local.note_request(route, now),
            )
            return
        self._count(self._budget_key(route, "req", budget_bucket(now)), 1)

    async def _spend_retry(self, route: str, budget: RetryBudget, now: float) -> bool:
        window = budget_buckets(now)
        mine = self._budget_key(route, "retry", budget_bucket(now))
        request_keys = [self._budget_key(route, "req", b) for b in window]
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incr(mine)
            pipe.expire(mine, BUDGET_WINDOW_S + 2)
            pipe.mget(request_keys)
            pipe.mget([self._budget_key(route, "retry", b) for b in window])
            _, _, requests, retries = await pipe.execute()
        spent_before = sum(_int(x) for x in retries) - 1  # our INCR is in the window
        noted = sum(_int(x) for x in requests) + sum(self._unflushed(k) for k in request_keys)
        if retry_allowed(noted, spent_before, budget):
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

    async def admit(self, team: str, limits: Limits, now: float) -> float | None:
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

    async def add_tokens(self, team: str, limits: Limits, tokens: int, now: float) -> None:
        if limits.tokens_per_minute is None or tokens <= 0:
            return
        if self.degraded:
            await self._call(
                lambda: self._add_tokens(team, tokens, now),
                lambda: self.local.add_tokens(team, limits, tokens, now),
            )
            return
        self._count(self._limit_key(team, "tok", now), tokens)

    async def close(self) -> None:
        self._closed = True
        task, self._sync_task = self._sync_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._pending and not self.degraded:
            with contextlib.suppress(Exception):
                await self.sync()  # the last counts; bounded by op_timeout
        await self._admissions.close()
        try:
            await self._redis.aclose()
        except Exception as exc:  # closing must not fail a shutdown
            log.debug("state_backend_close_failed", backend="redis", error=type(exc).__name__)
