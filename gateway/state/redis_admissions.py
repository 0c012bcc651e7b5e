"""Team admissions reserved in blocks for :class:`~gateway.state.redis.RedisState`: the
reservations asked for in one pass of the event loop sent to Redis together, one Lua script
call per team window (the design is in :mod:`gateway.state.redis`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.policy.schema import TeamLimits
from gateway.resilience.team_limits import LIMIT_WINDOW_S, Lease
from gateway.state.redis_values import Ignored

if TYPE_CHECKING:
    from redis.asyncio import Redis

ADMIT_SCRIPT = """
local k = tonumber(ARGV[2])
local n = redis.pcall('INCRBY', KEYS[1], k)
local bad = 0
if type(n) == 'table' then
  redis.call('DEL', KEYS[1])
  n, bad = redis.call('INCRBY', KEYS[1], k), 1
end
if n == k then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
local t = redis.pcall('GET', KEYS[2])
if type(t) == 'table' then t, bad = false, bad + 2 end
return {n, t, bad}
"""
"""Count ARGV[2] admissions in the request window KEYS[1]; the new count, the window's
tokens (KEYS[2]) and what was malformed: 1, the request counter was not an integer
(it starts again); 2, the tokens' key is not a string (read as 0); 3, both."""


class Admissions:
    """Reservations of team admissions (:class:`~gateway.resilience.retry_allowance.Lease`), the
    ones asked for in one pass of the event loop sent as one pipeline.

    :meth:`join` queues a request whose team's block is used up and waits; the first
    join of a pass schedules the send for the end of the pass (``call_soon``), so every
    request woken in that pass shares the round trip. One script call per team window
    reserves a block for all its waiters (and the team's pace), then each waiter takes
    one admission from the block, or is refused when the window is full.
    """

    def __init__(
        self,
        redis: Redis,
        timeout: float,
        give_back: Callable[[str, int], None],
        ignored: Ignored,
    ) -> None:
        self._script = redis.register_script(ADMIT_SCRIPT)
        self._ignored = ignored
        self._redis = redis
        self._timeout = timeout
        self._give_back = give_back
        self._queued: dict[str, _Waiting] = {}
        self._sends: set[asyncio.Task[None]] = set()

    def join(
        self, lease: Lease, requests: str, tokens: str, limits: TeamLimits, now: float
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
        sizes = [w.lease.size(w.now, w.limits, len(w.futures)) for w in batch.values()]
        try:
            async with asyncio.timeout(self._timeout):
                replies = await self._reserve(batch, sizes)
        except Exception as exc:  # each waiter falls back to local state
            _fail(batch, exc)
            return
        except BaseException:  # cancelled (close): so are the waiters
            for w in batch.values():
                for future in w.futures:
                    future.cancel()
            raise
        try:
            self._settle(batch, sizes, replies)
        except Exception as exc:  # never leave a waiter waiting: it falls back to local state
            _fail(batch, exc)

    async def _reserve(self, batch: dict[str, _Waiting], sizes: list[int]) -> list[Any]:
        """The script's replies, one per team window: one call alone, or a pipeline."""
        ttl = 2 * LIMIT_WINDOW_S
        if len(batch) == 1:
            [(requests, w)] = batch.items()
            return [await self._script(keys=[requests, w.tokens], args=[ttl, sizes[0]])]
        async with self._redis.pipeline(transaction=False) as pipe:
            for (requests, w), n in zip(batch.items(), sizes, strict=True):
                await self._script(keys=[requests, w.tokens], args=[ttl, n], client=pipe)
            return await pipe.execute()

    def _settle(self, batch: dict[str, _Waiting], sizes: list[int], replies: list[Any]) -> None:
        """Each window's reservation into its lease, then each waiter admitted or refused."""
        for (requests, w), n, (count, used, bad) in zip(batch.items(), sizes, replies, strict=True):
            if bad & 1:
                self._ignored(requests, "not an integer: the counter starts again")
            if bad & 2:
                self._ignored(w.tokens, "not a string")
            used = self._ignored.counter(w.tokens, used)  # count: INCRBY's own integer
            over = w.lease.reserved(w.now, n, count, used, w.limits)
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


def _fail(batch: dict[str, _Waiting], exc: Exception) -> None:
    """Every waiter of ``batch`` still waiting gets ``exc`` (and falls back to local state)."""
    for w in batch.values():
        for future in w.futures:
            if not future.done():
                future.set_exception(exc)


@dataclass(slots=True)
class _Waiting:
    """The requests of one pass waiting on one team window's reservation."""

    lease: Lease
    tokens: str
    limits: TeamLimits
    now: float
    futures: list[asyncio.Future[bool]] = field(default_factory=list)
