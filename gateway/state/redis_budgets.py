"""Team budgets shared through Redis, in the background sync of
:class:`~gateway.state.redis.RedisState` (docs/operations.md, "Budgets").

Key (prefixed ``llm-gateway:``)::

    llm-gateway:spend:{team}:{period}   micro-dollars spent by every replica in the period
                                        (``2026-12-03``, ``2026-W49``, ``2026-12``);
                                        expires a day after the period's end
    llm-gateway:spend-event:{team}:{period}:{kind}
                                        the replica that logs the period's
                                        ``budget_warning`` / ``budget_exceeded``
                                        (``SET NX``); expires with the total

A request never waits for Redis for its budget: it reads the replica's
:class:`~gateway.money.budgets.Book` (the last total read back plus this replica's own
spending since). Each sync (every ``sync_interval``) adds this replica's unflushed
spending with ``INCRBY`` (whose reply is the new total of every replica, kept as the
book's ``shared``) and reads the totals of the other tracked teams with one ``MGET``,
in the same pipeline as the other counters.

When Redis fails, what was being flushed goes back into the replica's own spending, so
serving continues on the last total seen plus this replica's spending since, and the
next sync after the outage adds it all. A flush whose reply was lost after Redis applied
it is added again (over-counted, never under-counted).

A total the gateway could not have written (negative, not an integer, beyond 2**53, a
key of another Redis type, or one ``INCRBY`` refuses) fails closed: the team's budget
counts as spent, the event ``budget_total_invalid`` names the key (once until a valid
total is read again; never the value), and the key is left for the operator to reset.
This replica's spending waits meanwhile, sent after the reset; nothing is sent again to
a key Redis refused it for.

The events ``budget_warning`` and ``budget_exceeded`` are logged once per team and period
by all the replicas together: a replica whose book sees a crossing claims it in the next
pass (``SET NX``, a key per team, period and kind) and logs it only when the claim is
its own. A claim that does not reach Redis (an outage, a failed pass) is logged by the
replica all the same: an alert may come twice, never not at all.
"""

from __future__ import annotations

from typing import Any

import structlog

from gateway.errors import BadStateValue
from gateway.money.budgets import Book, BudgetCrossing, Period
from gateway.observe import budget_events
from gateway.state.redis_values import NOT_A_STRING, spend_total

log = structlog.get_logger("gateway.state")

KEEP_AFTER_S = 86400
"""How long a period's total stays in Redis after the period ends."""
SPENT = "the budget counts as spent until the key is reset"
READ_TOTALS = f"""
local out = {{}}
for i, key in ipairs(KEYS) do
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then v = '{NOT_A_STRING.decode()}' end
  out[i] = v
end
return out
"""
"""The totals of KEYS, as MGET reads them, but a key of another Redis type than a string
(which MGET reads as no key: 0) comes back as ``NOT_A_STRING``."""


class BudgetSync:
    """What one sync pass sends for budgets, and what it makes of the replies."""

    def __init__(self, book: Book, prefix: str) -> None:
        self.book = book
        self._prefix = prefix
        self._invalid: set[str] = set()  # keys logged invalid, until read valid again
        self._flushing: list[tuple[str, Period, int]] = []
        self._reads: list[tuple[str, Period]] = []
        self._claims: list[BudgetCrossing] = []  # crossings to claim with the next pass
        self._claiming: list[BudgetCrossing] = []  # and claimed by this one

    def claim(self, c: BudgetCrossing) -> None:
        """A crossing this replica's book saw: logged if this replica's claim is first."""
        self._claims.append(c)

    def key(self, team: str, period: Period) -> str:
        return f"{self._prefix}spend:{team}:{period.key}"

    def event_key(self, c: BudgetCrossing) -> str:
        return f"{self._prefix}spend-event:{c.team}:{c.period.key}:{c.kind}"

    @property
    def tracking(self) -> bool:
        """Some team has a budget: its total is read back at every sync (or a crossing
        waits to be claimed)."""
        return bool(self.book.teams) or bool(self.book.past) or bool(self._claims)

    def queue(self, pipe: Any) -> int:
        """Take this replica's unflushed spending and add the pass's commands to
        ``pipe``: an INCRBY and an EXPIREAT per team with spending, one read of the
        others' totals (:data:`READ_TOTALS`); how many replies they give."""
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
            pipe.eval(READ_TOTALS, len(self._reads), *(self.key(t, p) for t, p in self._reads))
        self._claiming, self._claims = self._claims, []
        for c in self._claiming:
            pipe.set(self.event_key(c), 1, nx=True, exat=int(c.period.end) + KEEP_AFTER_S)
        return 2 * len(self._flushing) + (1 if self._reads else 0) + len(self._claiming)

    def apply(self, replies: list[Any]) -> None:
        """Read back the pass's replies (and log the crossings whose claim was this
        replica's)."""
        flushing, self._flushing = self._flushing, []
        claiming, self._claiming = self._claiming, []
        if claiming:
            replies, claimed = replies[: -len(claiming)], replies[-len(claiming) :]
            for c, won in zip(claiming, claimed, strict=True):
                if won is not None:  # True: this replica's; an error: logged all the same
                    budget_events.crossed(c)
        book = self.book
        for (team, period, n), total in zip(
            flushing, replies[: 2 * len(flushing) : 2], strict=True
        ):
            if isinstance(total, Exception):  # not an integer: never sent again
                waits = book.refused(team, period, n)
                outcome = SPENT if waits else "this replica's spending of the past period dropped"
                self._check(team, period, None, "Redis refused to add to it", outcome)
            else:
                book.settle(team, period.key, self._check(team, period, total), n)
        if self._reads:
            read = replies[-1]
            for (team, period), raw in zip(self._reads, read, strict=True):
                book.settle(team, period.key, self._check(team, period, raw), 0)

    def _check(
        self, team: str, period: Period, raw: Any, why: str = "", outcome: str = SPENT
    ) -> int | None:
        """The total ``raw``; None when it is not one the gateway wrote (or ``why``),
        logged once naming the key, what is wrong and the ``outcome``."""
        key = self.key(team, period)
        if not why:
            try:
                total = spend_total(raw)
            except BadStateValue as e:
                why = str(e)
            else:
                self._invalid.discard(key)
                return total
        if key not in self._invalid:
            if len(self._invalid) >= 4096:  # keys of teams and periods since gone
                self._invalid.clear()
            self._invalid.add(key)
            log.error(
                "budget_total_invalid",
                backend="redis",
                key=key,
                team=team,
                period=period.key,
                reason=why,
                outcome=outcome,
            )
        return None

    def failed(self) -> None:
        """The pass did not reach Redis (or its replies were lost): what it flushed is
        this replica's own spending again, and the crossings it claimed are logged here."""
        flushing, self._flushing = self._flushing, []
        claiming, self._claiming = self._claiming, []
        for c in claiming:
            budget_events.crossed(c)
        for team, period, n in flushing:
            self.book.restore(team, period, n)

    def unclaimed(self) -> None:
        """Log the crossings not claimed yet (Redis is out, or the replica stops)."""
        claims, self._claims = self._claims, []
        for c in claims:
            budget_events.crossed(c)
