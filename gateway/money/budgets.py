"""Team budgets: the period a budget is counted in, and a replica's book of what each team
spent in it (docs/policies.md, "Budgets"; docs/operations.md, "Budgets").

Pure: times are wall-clock epoch seconds passed in; nothing here waits or does I/O.

A budget's period is a UTC day, an ISO week (from Monday 00:00 UTC) or a calendar month
(:func:`period_of`). A :class:`Book` keeps, per team with a budget, the spending of its
current period as this replica knows it: the last total of every replica read back from
the state backend (``shared``) plus this replica's own spending not yet added to it
(``own``, and ``flushing`` while a sync is adding it). Amounts are kept in micro-dollars.
A request of a team asks :meth:`Book.spent` (no I/O: the request never waits for the
shared store); its cost is added with :meth:`Book.charge` when it is done. The first use
after the period's end starts the team's count from 0. The ``warn_at`` and ``exceeded``
crossings are reported once per period by the book (to the state backend, which logs
each once for all the replicas: :mod:`gateway.state.redis_budgets`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from gateway.policy.schema import Budget, Team

__all__ = [
    "MAX_CHARGE_USD",
    "MAX_TOTAL",
    "MICRO",
    "Book",
    "BudgetCrossing",
    "Period",
    "Spend",
    "describe",
    "iso",
    "period_of",
    "team_budgets",
]

MICRO = 1_000_000
#: The most one request is charged, USD: no answer costs this; a provider's count that
#: says so (2**63 tokens) is broken. Redis counts up to 2**63 micro-dollars.
MAX_CHARGE_USD = 1_000_000.0
"""Micro-dollars per dollar: the unit of the counts shared between replicas."""
MAX_TOTAL = 2**53
"""The largest total of a period a shared store holds, micro-dollars (about $9 billion):
a total beyond it, or below 0, is not one the gateway wrote; nor is a flush beyond it."""

Per = Literal["day", "week", "month"]
Kind = Literal["budget_warning", "budget_exceeded"]


@dataclass(frozen=True, slots=True)
class Period:
    """One period of a budget: ``key`` names it (``2026-12-03``, ``2026-W49``,
    ``2026-12``); it runs from ``start`` to ``end`` (epoch seconds, UTC), when the budget
    resets."""

    per: Per
    key: str
    start: float
    end: float


def period_of(per: Per, now: float) -> Period:
    """The period of a ``per`` budget that ``now`` (epoch seconds) falls in."""
    t = datetime.fromtimestamp(now, UTC)
    day = datetime(t.year, t.month, t.day, tzinfo=UTC)
    if per == "day":
        start, end, key = day, day + timedelta(days=1), day.strftime("%Y-%m-%d")
    elif per == "week":
        start = day - timedelta(days=day.weekday())  # Monday
        year, week, _ = start.isocalendar()
        end, key = start + timedelta(days=7), f"{year}-W{week:02d}"
    else:
        start = datetime(t.year, t.month, 1, tzinfo=UTC)
        nxt = datetime(t.year + t.month // 12, t.month % 12 + 1, 1, tzinfo=UTC)
        end, key = nxt, start.strftime("%Y-%m")
    return Period(per, key, start.timestamp(), end.timestamp())


def iso(ts: float) -> str:
    """``ts`` (epoch seconds) as an ISO 8601 UTC time: ``2026-12-04T00:00:00Z``."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


@dataclass(slots=True)
class Spend:
    """A team's spending in one period, as this replica knows it (micro-dollars)."""

    period: Period
    shared: int = 0
    """The last total of every replica read back (this replica's flushed spending in it)."""
    own: float = 0.0
    """This replica's spending not yet flushed (fractions of a micro-dollar kept)."""
    flushing: int = 0
    """This replica's spending being flushed now."""
    warned: bool = False
    exceeded: bool = False
    invalid: bool = False
    """The last total read back is not one the gateway could have written: the budget
    counts as spent (fail closed) and :meth:`Book.take` holds this replica's spending back
    until a valid total is read (the operator reset the key)."""

    @property
    def micro(self) -> float:
        return self.shared + self.flushing + self.own

    @property
    def usd(self) -> float:
        return self.micro / MICRO

    def state(self, budget: Budget) -> Literal["ok", "warned", "spent"]:
        usd = self.usd
        if usd >= budget.usd or self.invalid:
            return "spent"
        if budget.warn_at is not None and usd >= budget.warn_at * budget.usd:
            return "warned"
        return "ok"


@dataclass(frozen=True, slots=True)
class BudgetCrossing:
    """A team's spending crossed ``warn_at`` (``budget_warning``) or the limit
    (``budget_exceeded``) in ``period``."""

    kind: Kind
    team: str
    period: Period
    spent_usd: float
    limit_usd: float


class Book:
    """Each team's spending in its budget's current period, on this replica.

    ``crossed`` is called with each crossing, once per team and period."""

    def __init__(self, crossed: Callable[[BudgetCrossing], None] = lambda _c: None) -> None:
        self.teams: dict[str, Spend] = {}
        self.budgets: dict[str, Budget] = {}  # the budget each team was last seen with
        self.past: dict[str, tuple[Period, float]] = {}
        """Per team: its spending of the period before, not flushed when that ended."""
        self.crossed = crossed

    def entry(self, team: str, budget: Budget, now: float) -> Spend:
        """The team's spending in the period of ``now``: from 0 in a new period."""
        e = self.teams.get(team)
        if e is None or now >= e.period.end or e.period.per != budget.per or now < e.period.start:
            if e is not None and e.own >= 1:  # (what is being flushed is the sync's)
                self.past[team] = (e.period, e.own)
            e = self.teams[team] = Spend(period_of(budget.per, now))
        self.budgets[team] = budget
        return e

    def track(self, budgets: Mapping[str, Budget], now: float) -> None:
        """Keep the teams of ``budgets`` (their periods started), forget the others."""
        for team in [t for t in self.teams if t not in budgets]:
            del self.teams[team]
            self.budgets.pop(team, None)
        for team, budget in budgets.items():
            self.entry(team, budget, now)

    def spent(self, team: str, budget: Budget, now: float) -> Period | None:
        """None while the team may spend; else the period its budget is spent in (it
        resets at the period's ``end``, or, when its total read back is invalid, once a
        valid one is read)."""
        e = self.entry(team, budget, now)
        return e.period if e.micro >= budget.usd * MICRO or e.invalid else None

    def charge(self, team: str, budget: Budget, usd: float, now: float) -> None:
        """Add a request's cost (USD) to the team's spending: at most
        :data:`MAX_CHARGE_USD` (or the whole budget, if larger), so that a provider's
        absurd token count spends the budget without overflowing the shared counter."""
        e = self.entry(team, budget, now)
        e.own += min(usd, max(MAX_CHARGE_USD, budget.usd)) * MICRO
        self._check(team, e, budget)

    def _check(self, team: str, e: Spend, budget: Budget) -> None:
        usd = e.usd
        if not e.warned and budget.warn_at is not None and usd >= budget.warn_at * budget.usd:
            e.warned = True
            self.crossed(BudgetCrossing("budget_warning", team, e.period, usd, budget.usd))
        if not e.exceeded and usd >= budget.usd:
            e.exceeded = e.warned = True
            self.crossed(BudgetCrossing("budget_exceeded", team, e.period, usd, budget.usd))

    # ---- for a shared store: what to flush, what was read back ----

    def take(self) -> list[tuple[str, Period, int]]:
        """This replica's unflushed spending, whole micro-dollars (the fractions stay):
        ``(team, period, amount)``, the past periods' first; the current ones are
        ``flushing`` until :meth:`settle`, :meth:`restore` or :meth:`refused`. At most
        :data:`MAX_TOTAL` each (the rest stays); none of a team whose total is invalid."""
        out = [
            (team, period, min(int(left), MAX_TOTAL)) for team, (period, left) in self.past.items()
        ]
        self.past.clear()
        for team, e in self.teams.items():
            n = min(int(e.own), MAX_TOTAL)
            if n > 0 and not e.invalid:
                e.own -= n
                e.flushing += n
                out.append((team, e.period, n))
        return out

    def settle(self, team: str, key: str, total: int | None, flushed: int) -> None:
        """The total of every replica read back for ``team``'s period ``key`` (after
        adding ``flushed`` of this replica's spending to it, or 0 for a read); None, or
        one outside 0 .. :data:`MAX_TOTAL`: not a total the gateway wrote, the budget
        counts as spent until a valid one is read back."""
        e = self.teams.get(team)
        if e is None or e.period.key != key:
            return  # a period that ended meanwhile
        e.flushing -= flushed
        if total is None or not 0 <= total <= MAX_TOTAL:
            e.invalid = True
            return
        e.invalid = False
        e.shared = total
        budget = self.budgets.get(team)
        if budget is not None:
            self._check(team, e, budget)

    def refused(self, team: str, period: Period, flushed: int) -> bool:
        """The store refused to add ``flushed`` to the total (it holds something else than
        an integer): the total is invalid and the spending waits in ``own`` for a valid
        one (True). A past period's is dropped (False): its key is no longer read back."""
        e = self.teams.get(team)
        if e is None or e.period.key != period.key:
            return False
        e.flushing -= flushed
        e.own += flushed
        e.invalid = True
        return True

    def restore(self, team: str, period: Period, flushed: int) -> None:
        """``flushed`` was not added to the shared total (the store failed): it is this
        replica's own spending again, flushed with a later sync."""
        e = self.teams.get(team)
        if e is not None and e.period.key == period.key:
            e.flushing -= flushed
            e.own += flushed
            return
        before = self.past.get(team)
        left = before[1] if before is not None and before[0].key == period.key else 0.0
        self.past[team] = (period, left + flushed)


def team_budgets(teams: Mapping[str, Team]) -> dict[str, Budget]:
    """The teams that have a budget, with it."""
    return {name: t.budget for name, t in teams.items() if t.budget is not None}


def describe(book: Book, budgets: Mapping[str, Budget], now: float) -> dict[str, Any]:
    """Per team with a budget: its period, spending and state, as ``/admin/budgets``
    shows them."""
    out: dict[str, Any] = {}
    for team, budget in budgets.items():
        e = book.entry(team, budget, now)
        spent = e.usd
        out[team] = {
            "per": budget.per,
            "period": e.period.key,
            "spent_usd": round(spent, 6),
            "limit_usd": budget.usd,
            "remaining_usd": 0.0 if e.invalid else round(max(0.0, budget.usd - spent), 6),
            "resets_at": iso(e.period.end),
            "warn_at": budget.warn_at,
            "when_spent": budget.when_spent,
            "downgrade_to": list(budget.downgrade_to),
            "state": e.state(budget),
        }
    return out
