"""Team budgets shared through Redis, in the background sync of
:class:`~gateway.state.redis.RedisState` (docs/operations.md, "Budgets").

Key (prefixed ``llm-gateway:``)::

    llm-gateway:spend:{team}:{period}   micro-dollars spent by every replica in the period
                                        (``2026-12-03``, ``2026-W49``, ``2026-12``);
                                        expires a day after the period's end

A request never waits for Redis for its budget: it reads the replica's
:class:`~gateway.budgets.Book` (the last total read back plus this replica's own
spending since). Each sync (every ``sync_interval``) adds this replica's unflushed
spending with ``INCRBY`` (whose reply is the new total of every replica, kept as the
book's ``shared``) and reads the totals of the other tracked teams with one ``MGET``,
in the same pipeline as the other counters.

When Redis fails, what was being flushed goes back into the replica's own spending, so
serving continues on the last total seen plus this replica's spending since, and the
next sync after the outage adds it all. A flush whose reply was lost after Redis applied
it is added again (over-counted, never under-counted). A value that is not an integer
is logged once (``state_value_ignored``) and read as 0; a counter ``INCRBY`` refuses is
deleted and counted again from this replica's flush.
"""

from __future__ import annotations

from typing import Any

from gateway.budgets import Book, Period
from gateway.state.redis_values import Ignored

KEEP_AFTER_S = 86400
"""How long a period's total stays in Redis after the period ends."""


class BudgetSync:
    """What one sync pass sends for budgets, and what it makes of the replies."""

    def __init__(self, book: Book, ignored: Ignored, prefix: str) -> None:
        self.book = book
        self._ignored = ignored
        self._prefix = prefix
        self._flushing: list[tuple[str, Period, int]] = []
        self._reads: list[tuple[str, Period]] = []

    def key(self, team: str, period: Period) -> str:
        return f"{self._prefix}spend:{team}:{period.key}"

    @property
    def tracking(self) -> bool:
        """Some team has a budget: its total is read back at every sync."""
        return bool(self.book.teams) or bool(self.book.past)

    def queue(self, pipe: Any) -> int:
        """Take this replica's unflushed spending and add the pass's commands to
        ``pipe``: an INCRBY and an EXPIREAT per team with spending, one MGET of the
        others; how many replies they give."""
        self._flushing = self.book.take()
        flushed = {(team, p.key) for team, p, _ in self._flushing}
        self._reads = [
            (team, e.period)
            for team, e in self.book.teams.items()
            if (team, e.period.key) not in flushed
        ]
        for team, period, n in self._flushing:
            key = self.key(team, period)
            pipe.incrby(key, n)
            pipe.expireat(key, int(period.end) + KEEP_AFTER_S)
        if self._reads:
            pipe.mget([self.key(t, p) for t, p in self._reads])
        return 2 * len(self._flushing) + (1 if self._reads else 0)

    def apply(self, replies: list[Any]) -> list[str]:
        """Read back the pass's replies; the keys that hold something else than an
        integer (to delete: their spending is flushed again next time)."""
        flushing, self._flushing = self._flushing, []
        bad: list[str] = []
        book = self.book
        for (team, period, n), total in zip(
            flushing, replies[: 2 * len(flushing) : 2], strict=True
        ):
            if isinstance(total, Exception):
                key = self.key(team, period)
                self._ignored(key, "not an integer: the counter starts again")
                bad.append(key)
                book.restore(team, period, n)
                book.settle(team, period.key, 0, 0)
            else:
                book.settle(team, period.key, int(total), n)
        if self._reads:
            read = replies[-1]
            for (team, period), raw in zip(self._reads, read, strict=True):
                key = self.key(team, period)
                book.settle(team, period.key, self._ignored.counter(key, raw), 0)
        return bad

    def failed(self) -> None:
        """The pass did not reach Redis (or its replies were lost): what it flushed is
        this replica's own spending again."""
        flushing, self._flushing = self._flushing, []
        for team, period, n in flushing:
            self.book.restore(team, period, n)
