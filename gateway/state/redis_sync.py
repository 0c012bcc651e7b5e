"""The base of :class:`~gateway.state.redis.RedisState`: what a replica keeps of the state
shared through Redis (fallback views, unflushed counters, reserved admissions), the
background sync that keeps it in step, and the outage handling every call to Redis goes
through; also the keys' prefix and how values are encoded, and read back through
:mod:`gateway.state.redis_values` (a malformed value is logged once and read as the
initial state, or 0; a team's spending total fails closed instead). The design is in
:mod:`gateway.state.redis`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import orjson
import structlog

from gateway.errors import BadStateValue
from gateway.money.budgets import BudgetCrossing
from gateway.observe import budget_events
from gateway.resilience import fallback
from gateway.resilience.fallback import FallbackState
from gateway.resilience.retry_allowance import ALLOWANCE_WINDOW_S
from gateway.resilience.team_limits import LEASE_IDLE_S, LIMIT_WINDOW_S, Lease, limit_window
from gateway.state.memory import MemoryState
from gateway.state.redis_budgets import BudgetSync
from gateway.state.redis_values import MAX_COUNT, Ignored, fallback_state

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = structlog.get_logger("gateway.state")

PREFIX = "llm-gateway:"
SYNC_INTERVAL_S = 0.05
"""How often the background sync flushes counters and refreshes fallback views."""
MAX_STALENESS_S = 0.1
"""The oldest view ``choose`` / ``record`` answer from; older views are read through."""
VIEW_IDLE_S = 30.0
"""A view not used for this long is no longer refreshed (it is read again on use)."""

T = TypeVar("T")


def encode_state(state: FallbackState) -> bytes:
    return orjson.dumps(
        {
            "active": state.active,
            "streak": state.streak,
            "since": state.since,
            "probe_until": state.probe_until,
        }
    )


async def nothing() -> None:
    return None


class SyncedState:
    """The views, counters and reservations of one replica, synced with Redis in the
    background; every call to Redis goes through :meth:`_call`."""

    def __init__(
        self,
        redis: Redis,
        *,
        op_timeout: float,
        reconnect_interval: float,
        clock: Callable[[], float],
        wall: Callable[[], float],
        sync_interval: float,
        max_staleness: float,
    ) -> None:
        self._redis = redis
        self._op_timeout = op_timeout
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
        self._used: dict[str, float] = {}  # fallback key -> last use of its view
        self._pending: dict[str, int] = {}  # counter key -> count not yet flushed
        self._inflight: dict[str, int] = {}  # counter key -> count being flushed
        self._sync_task: asyncio.Task[None] | None = None
        self._closed = False
        self.ignored = Ignored()
        """Logs each key whose value is ignored once (also used for counters)."""
        self.spending = self.local.spending  # one book, kept through an outage
        self._budget_sync = BudgetSync(self.spending, PREFIX)
        self.spending.crossed = self._crossed  # logged by the replica that claims it

    def _decode(self, key: str, raw: bytes | str | None) -> FallbackState:
        """The fallback state of ``key`` read back; the initial one when malformed (the
        next change replaces it)."""
        try:
            return fallback_state(raw, self._wall())
        except BadStateValue as e:
            self.ignored(f"{PREFIX}fb:{key}", str(e))
            return fallback.INITIAL

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

    def _crossed(self, c: BudgetCrossing) -> None:
        """A budget crossing of this replica's book: claimed with the next sync, so that
        one replica logs it; logged at once while Redis is out."""
        if self.degraded:
            budget_events.crossed(c)
        else:
            self._budget_sync.claim(c)

    def _mark_down(self, exc: Exception) -> None:
        self._next_try = self._clock() + self._reconnect_interval
        self._budget_sync.unclaimed()  # the crossings waiting for a sync: logged here
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
        if not keys and not counts and not teams and not self._budget_sync.tracking:
            return False
        if self.degraded:  # counters go to the local state while degraded
            return True
        self._pending, self._inflight = {}, counts
        try:
            await self._call(lambda: self._sync(keys, counts, teams, now, wall), nothing)
        finally:
            self._inflight = {}
            self._budget_sync.failed()  # (nothing left when the replies were read)
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
                pipe.expire(
                    key, ALLOWANCE_WINDOW_S + 2 if ":budget:" in key else 2 * LIMIT_WINDOW_S
                )
            if keys:
                pipe.mget([f"{PREFIX}fb:{k}" for k in keys])
            if teams:
                pipe.mget([self._limit_key(t, "tok", wall) for t in teams])
            spending = self._budget_sync.queue(pipe)
            replies = await pipe.execute(raise_on_error=False)
        if spending:
            self._budget_sync.apply(replies[-spending:])
            replies = replies[:-spending]
        incremented = replies[: 2 * len(counts) : 2]
        if bad := [k for k, r in zip(counts, incremented, strict=True) if isinstance(r, Exception)]:
            await self._refused(bad)
        if teams:
            window = limit_window(wall)
            for team, raw in zip(teams, replies.pop(), strict=True):
                lease = self._leases.get(team)
                if lease is not None and lease.window == window:
                    lease.tokens = self.ignored.counter(self._limit_key(team, "tok", wall), raw)
        if keys:
            for key, raw in zip(keys, replies[-1], strict=True):
                self._set_view(key, self._decode(key, raw), sent)

    async def _refused(self, keys: list[str]) -> None:
        """Counters Redis refused to add to (what is sent is bounded: their keys hold
        something else than an integer): each logged once by its key, deleted so that
        later counts start it again; the refused counts are dropped, never sent again."""
        for key in keys:
            self.ignored(key, "not an integer: its count is dropped, the counter starts again")
        await self._redis.delete(*keys)

    def _unflushed(self, key: str) -> int:
        return self._pending.get(key, 0) + self._inflight.get(key, 0)

    def _count(self, key: str, n: int) -> None:
        """Add ``n`` to the counter of ``key`` with the next flush: any int, bounded to what
        Redis takes and the replicas read back (:data:`MAX_COUNT` either way)."""
        total = self._pending.get(key, 0) + n
        self._pending[key] = max(-MAX_COUNT, min(total, MAX_COUNT))
        if self._sync_task is None:
            self._ensure_sync()

    # ---- fallback views ----

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

    # ---- keys ----

    @staticmethod
    def _limit_key(team: str, kind: str, now: float) -> str:
        return f"{PREFIX}limit:{team}:{kind}:{limit_window(now)}"
