"""Budget periods and the per-replica book, on an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.money.budgets import (
    MAX_CHARGE_USD,
    MAX_TOTAL,
    MICRO,
    Book,
    BudgetCrossing,
    describe,
    iso,
    period_of,
)
from gateway.policy.schema import Budget

pytestmark = pytest.mark.fast


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("per", "now", "key", "start", "end"),
    [
        ("day", "2026-12-03T12:30:00", "2026-12-03", "2026-12-03T00:00:00", "2026-12-04T00:00:00"),
        ("day", "2026-12-03T00:00:00", "2026-12-03", "2026-12-03T00:00:00", "2026-12-04T00:00:00"),
        ("day", "2026-12-03T23:59:59", "2026-12-03", "2026-12-03T00:00:00", "2026-12-04T00:00:00"),
        ("day", "2026-12-31T23:00:00", "2026-12-31", "2026-12-31T00:00:00", "2027-01-01T00:00:00"),
        ("week", "2026-12-03T12:00:00", "2026-W49", "2026-11-30T00:00:00", "2026-12-07T00:00:00"),
        ("week", "2026-11-30T00:00:00", "2026-W49", "2026-11-30T00:00:00", "2026-12-07T00:00:00"),
        ("week", "2026-12-06T23:59:59", "2026-W49", "2026-11-30T00:00:00", "2026-12-07T00:00:00"),
        ("week", "2026-12-07T00:00:00", "2026-W50", "2026-12-07T00:00:00", "2026-12-14T00:00:00"),
        ("week", "2027-01-01T09:00:00", "2026-W53", "2026-12-28T00:00:00", "2027-01-04T00:00:00"),
        ("week", "2025-12-31T09:00:00", "2026-W01", "2025-12-29T00:00:00", "2026-01-05T00:00:00"),
        ("month", "2026-12-03T12:00:00", "2026-12", "2026-12-01T00:00:00", "2027-01-01T00:00:00"),
        ("month", "2026-02-28T23:59:59", "2026-02", "2026-02-01T00:00:00", "2026-03-01T00:00:00"),
        ("month", "2024-02-29T12:00:00", "2024-02", "2024-02-01T00:00:00", "2024-03-01T00:00:00"),
        ("month", "2026-04-30T12:00:00", "2026-04", "2026-04-01T00:00:00", "2026-05-01T00:00:00"),
        ("month", "2027-01-01T00:00:00", "2027-01", "2027-01-01T00:00:00", "2027-02-01T00:00:00"),
    ],
)  # fmt: skip
def test_period_of(per: str, now: str, key: str, start: str, end: str) -> None:
    """A day, an ISO week from Monday and a calendar month, in UTC, with their keys."""
    p = period_of(per, at(now))  # type: ignore[arg-type]
    assert (p.key, p.start, p.end) == (key, at(start), at(end))


def test_iso_says_utc() -> None:
    """Reset times are written as ISO 8601 UTC."""
    assert iso(at("2026-12-04T00:00:00")) == "2026-12-04T00:00:00Z"


DAY = Budget(usd=10, per="day", warn_at=0.5)


def test_spent_once_the_limit_is_reached() -> None:
    """A team may spend until its spending reaches the limit; then the period is named."""
    book, now = Book(), at("2026-12-03T10:00:00")
    book.charge("t", DAY, 9.99, now)
    assert book.spent("t", DAY, now) is None
    book.charge("t", DAY, 0.01, now)
    period = book.spent("t", DAY, now)
    assert period is not None and period.end == at("2026-12-04T00:00:00")


def test_rollover_starts_from_zero() -> None:
    """On the injected clock, the first use after the period's end counts from 0 again."""
    book = Book()
    book.charge("t", DAY, 12, at("2026-12-03T23:59:59"))
    assert book.spent("t", DAY, at("2026-12-03T23:59:59.5")) is not None
    assert book.spent("t", DAY, at("2026-12-04T00:00:00")) is None
    assert book.teams["t"].usd == 0
    assert book.teams["t"].period.key == "2026-12-04"


def test_warning_and_exceeded_once_per_period() -> None:
    """warn_at and the limit are each crossed once per period, and again in the next."""
    seen: list[BudgetCrossing] = []
    book = Book(seen.append)
    now = at("2026-12-03T10:00:00")
    for _ in range(4):
        book.charge("t", DAY, 3, now)  # 3, 6 (warn), 9, 12 (exceeded)
    book.charge("t", DAY, 3, now)
    assert [(c.kind, c.period.key, c.spent_usd) for c in seen] == [
        ("budget_warning", "2026-12-03", 6),
        ("budget_exceeded", "2026-12-03", 12),
    ]
    book.charge("t", DAY, 11, at("2026-12-04T01:00:00"))  # both at once, next day
    assert [(c.kind, c.period.key) for c in seen[2:]] == [
        ("budget_warning", "2026-12-04"),
        ("budget_exceeded", "2026-12-04"),
    ]


def test_shared_total_and_own_spending_add_up() -> None:
    """The last total read back plus this replica's spending since decide; a flush moves
    whole micro-dollars out and the total read back replaces them."""
    book, now = Book(), at("2026-12-03T10:00:00")
    book.charge("t", DAY, 2.5, now)
    [(team, period, n)] = book.take()
    assert (team, n) == ("t", 2_500_000)
    book.charge("t", DAY, 1, now)
    assert book.teams["t"].usd == 3.5  # flushing + own
    book.settle("t", period.key, 7 * MICRO, n)  # another replica spent 4.5
    assert book.teams["t"].usd == 8
    book.settle("t", period.key, 9 * MICRO, 0)  # a read: others spent 1 more
    assert book.spent("t", DAY, now) is not None


def test_a_failed_flush_stays_own_spending() -> None:
    """What a flush that failed took is this replica's own spending again."""
    book, now = Book(), at("2026-12-03T10:00:00")
    book.charge("t", DAY, 4, now)
    [(_, period, n)] = book.take()
    book.restore("t", period, n)
    assert book.teams["t"].usd == 4
    assert [x[2] for x in book.take()] == [4 * MICRO]


def test_the_past_period_is_still_flushed() -> None:
    """Spending not flushed when its period ended is flushed to that period's key."""
    book = Book()
    book.charge("t", DAY, 1, at("2026-12-03T23:59:59"))
    book.charge("t", DAY, 2, at("2026-12-04T00:00:01"))
    assert sorted((p.key, n) for _, p, n in book.take()) == [
        ("2026-12-03", MICRO),
        ("2026-12-04", 2 * MICRO),
    ]


def test_describe_shows_period_spending_and_state() -> None:
    """/admin/budgets' rows: period key, spent, limit, remaining, reset, state."""
    book, now = Book(), at("2026-12-03T10:00:00")
    book.charge("t", DAY, 6, now)
    row = describe(book, {"t": DAY}, now)["t"]
    assert row["period"] == "2026-12-03"
    assert (row["spent_usd"], row["limit_usd"], row["remaining_usd"]) == (6, 10, 4)
    assert row["resets_at"] == "2026-12-04T00:00:00Z"
    assert row["state"] == "warned"


def test_an_absurd_cost_spends_the_budget_without_overflowing_the_shared_counter() -> None:
    """A broken provider's count (2**63 tokens at $15 per million) is charged as at most
    MAX_CHARGE_USD: the budget is spent, and what is flushed fits Redis's 64-bit INCRBY."""
    book, now = Book(), at("2026-12-03T10:00:00")
    book.charge("t", DAY, (2**63 - 1) * 15e-6, now)
    assert book.spent("t", DAY, now) is not None
    [(_, _, n)] = book.take()
    assert n == MAX_CHARGE_USD * MICRO < 2**63


@pytest.mark.parametrize("total", [None, -1, MAX_TOTAL + 1], ids=["unreadable", "neg", "huge"])
def test_an_invalid_total_spends_the_budget_and_holds_the_spending_back(
    total: int | None,
) -> None:
    """A total read back that the gateway could not have written: the budget counts as
    spent (``/admin/budgets``: spent, nothing remaining), this replica's spending waits
    (not taken) and is taken once a valid total is read back."""
    book, now = Book(), at("2026-12-03T10:00:00")
    book.charge("t", DAY, 1, now)
    period = book.teams["t"].period
    book.settle("t", period.key, total, 0)
    assert book.spent("t", DAY, now) == period
    row = describe(book, {"t": DAY}, now)["t"]
    assert (row["state"], row["remaining_usd"]) == ("spent", 0)
    assert book.take() == []
    book.settle("t", period.key, 0, 0)  # the operator deleted the key
    assert book.spent("t", DAY, now) is None
    assert [n for _, _, n in book.take()] == [MICRO]


def test_a_refused_flush_waits_and_a_past_one_is_dropped() -> None:
    """Spending the store refused to add: the current period's waits in the book (the
    total invalid), a past period's is dropped (its key is no longer read)."""
    book = Book()
    book.charge("t", DAY, 1, at("2026-12-03T23:59:59"))
    book.charge("t", DAY, 2, at("2026-12-04T00:00:01"))
    (past, p1, n1), (_, p2, n2) = sorted(book.take(), key=lambda x: x[1].key)
    assert book.refused(past, p1, n1) is False
    assert book.refused("t", p2, n2) is True
    e = book.teams["t"]
    assert (e.invalid, e.own, e.flushing) == (True, 2 * MICRO, 0)
    assert book.take() == []


def test_a_flush_is_at_most_max_total() -> None:
    """Whatever the budget, one flush is at most MAX_TOTAL micro-dollars (the rest stays):
    a count Redis adds and the replicas read back."""
    huge, now = Budget(usd=1e15, per="day"), at("2026-12-03T10:00:00")
    book = Book()
    book.charge("t", huge, 1e12, now)
    [(_, _, n)] = book.take()
    assert n == MAX_TOTAL
    assert book.teams["t"].own == 1e12 * MICRO - MAX_TOTAL
