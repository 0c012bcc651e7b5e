"""Retry allowances and team limits on a virtual clock (gateway.resilience.retry_allowance, team_limits)."""

from __future__ import annotations

import pytest

from gateway.policy.schema import RetryAllowance, TeamLimits
from gateway.resilience.retry_allowance import ALLOWANCE_WINDOW_S, AllowanceWindow, retry_allowed
from gateway.resilience.team_limits import Lease, TeamWindow, limit_wait

pytestmark = pytest.mark.fast


def spend_all(w: AllowanceWindow, now: float, budget: RetryAllowance, cap: int = 10_000) -> int:
    n = 0
    while n < cap and w.try_spend(now, budget):
        n += 1
    return n


def test_floor_min_per_second() -> None:
    """With no traffic a route still gets min_per_second x 10 s retries per window."""
    w = AllowanceWindow()
    assert spend_all(w, 100.0, RetryAllowance(ratio=0.2, min_per_second=5)) == 50


def test_zero_budget_never_retries() -> None:
    """ratio 0 and min_per_second 0 allow no retry at all."""
    assert not AllowanceWindow().try_spend(1.0, RetryAllowance(ratio=0.0, min_per_second=0.0))


def test_ratio_with_traffic() -> None:
    """Above the floor, retries may add at most ratio of the window's requests."""
    budget = RetryAllowance(ratio=0.2, min_per_second=1)
    w = AllowanceWindow()
    for i in range(1000):
        w.note_request(100.0 + i * 0.009)  # 1000 requests within 9 s
    assert spend_all(w, 109.5, budget) == 200


def test_fractional_allowance_rounds_down() -> None:
    """ratio 0.2 of 7 requests (1.4) with no floor allows one retry."""
    budget = RetryAllowance(ratio=0.2, min_per_second=0)
    w = AllowanceWindow()
    for _ in range(7):
        w.note_request(5.0)
    assert spend_all(w, 5.0, budget) == 1


def test_window_expiry() -> None:
    """Requests and retries older than ten seconds no longer count."""
    budget = RetryAllowance(ratio=0.5, min_per_second=0)
    w = AllowanceWindow()
    for _ in range(10):
        w.note_request(100.2)
    assert spend_all(w, 100.5, budget) == 5
    assert w.counts(109.99) == (10, 5)
    assert not w.try_spend(109.99, budget)
    assert w.counts(110.0) == (0, 0)  # bucket 100 left the window [101, 110]
    assert not w.try_spend(110.0, budget)  # nothing to be a ratio of
    assert w.is_idle(110.0)
    assert len(w.requests) == 0 and len(w.retries) == 0


def test_spent_retries_free_up_as_they_age() -> None:
    """The floor refills as old retries leave the sliding window."""
    budget = RetryAllowance(ratio=0.0, min_per_second=1)
    w = AllowanceWindow()
    assert spend_all(w, 0.0, budget) == ALLOWANCE_WINDOW_S
    assert spend_all(w, 9.9, budget) == 0
    assert spend_all(w, 10.0, budget) == ALLOWANCE_WINDOW_S


def test_retry_allowed_rule() -> None:
    """The rule: retries + 1 <= max(ratio x requests, min_per_second x 10)."""
    b = RetryAllowance(ratio=0.2, min_per_second=5)
    assert retry_allowed(0, 49, b) and not retry_allowed(0, 50, b)
    assert retry_allowed(1000, 199, b) and not retry_allowed(1000, 200, b)


def test_requests_per_minute_with_retry_after() -> None:
    """The 4th request in a minute with limit 3 waits until the next minute."""
    limits = TeamLimits(requests_per_minute=3)
    w = TeamWindow()
    assert [w.admit(t, limits) for t in (600.0, 610.0, 620.0)] == [None, None, None]
    assert w.admit(645.0, limits) == pytest.approx(15.0)
    assert w.admit(659.5, limits) == pytest.approx(0.5)
    assert w.requests == 3  # refused requests are not counted
    assert w.admit(660.0, limits) is None


def test_tokens_per_minute_with_retry_after() -> None:
    """Tokens at or over the limit stop new requests until the next minute."""
    limits = TeamLimits(tokens_per_minute=1000)
    w = TeamWindow()
    assert w.admit(120.0, limits) is None
    w.add_tokens(121.0, 999)
    assert w.admit(122.0, limits) is None  # under the limit: still admitted
    w.add_tokens(123.0, 1)
    assert w.admit(130.0, limits) == pytest.approx(50.0)
    assert w.admit(180.0, limits) is None
    assert w.tokens == 0


def test_both_limits_apply() -> None:
    """Either limit refuses; tokens from the previous minute do not carry over."""
    limits = TeamLimits(requests_per_minute=2, tokens_per_minute=100)
    w = TeamWindow()
    assert w.admit(0.0, limits) is None
    w.add_tokens(1.0, 500)
    assert w.admit(2.0, limits) == pytest.approx(58.0)
    assert w.admit(61.0, limits) is None
    assert w.admit(62.0, limits) is None
    assert w.admit(63.0, limits) == pytest.approx(57.0)


def test_no_limits_admit_everything() -> None:
    """TeamLimits with neither field set never refuse."""
    assert limit_wait(10**9, 10**9, TeamLimits(), 5.0) is None
    w = TeamWindow()
    assert all(w.admit(float(i), TeamLimits()) is None for i in range(100))


def test_negative_tokens_are_ignored() -> None:
    """A negative token count never lowers the window's total."""
    w = TeamWindow()
    w.add_tokens(0.0, 10)
    w.add_tokens(0.0, -5)
    assert w.tokens == 10
    assert not w.is_idle(0.0) and w.is_idle(60.0)


# ---- reserved blocks of a shared team window (Lease) ----------------------------


def test_blocks_double_while_used_up_quickly_and_shrink_when_not() -> None:
    """A block used up within LEASE_FAST_S makes the next twice as big; a slower pace halves it."""
    lease, limits = Lease(), TeamLimits(requests_per_minute=1_000_000)
    lease.roll(600.0)
    assert lease.size(600.0, limits, 1) == 1
    lease.reserved(600.0, 1, 1, 0, limits)
    assert lease.size(600.05, limits, 1) == 2
    lease.reserved(600.05, 2, 3, 0, limits)
    assert lease.size(600.06, limits, 1) == 4
    lease.reserved(600.06, 4, 7, 0, limits)
    assert lease.size(601.0, limits, 1) == 2  # a second later: half
    assert lease.size(601.0, limits, 9) == 9  # never less than the requests waiting


def test_blocks_shrink_to_one_near_the_limit() -> None:
    """A block is at most 1/16 of what the window has left, so near the limit it is one."""
    lease, limits = Lease(), TeamLimits(requests_per_minute=100)
    lease.roll(0.0)
    lease.reserved(0.0, 64, 64, 0, limits)  # the shared count is at 64: 36 left
    assert lease.size(0.01, limits, 1) == 2  # 36 // 16
    lease.reserved(0.01, 2, 95, 0, limits)  # others counted meanwhile: 5 left
    assert lease.size(0.02, limits, 1) == 1


def test_a_reservation_past_the_limit_is_usable_only_up_to_it() -> None:
    """Of a block that takes the shared count past the limit only what fits is admitted;
    the rest is to be given back at once."""
    lease, limits = Lease(), TeamLimits(requests_per_minute=10)
    lease.roll(0.0)
    assert lease.reserved(0.0, 4, 12, 0, limits) == 2  # counts 9-12: 9 and 10 fit
    assert [lease.take(0.0) for _ in range(3)] == [True, True, False]
    assert lease.reserved(0.0, 3, 15, 0, limits) == 3  # all over


def test_tokens_spent_stop_new_requests_until_the_next_window() -> None:
    """The window's tokens (as last read, plus this replica's unflushed) at or over
    tokens_per_minute refuse until the window ends."""
    lease, limits = Lease(), TeamLimits(tokens_per_minute=1000)
    lease.roll(630.0)
    lease.reserved(630.0, 1, 1, 990, limits)
    assert lease.wait(630.0, limits, 0) is None
    assert lease.wait(630.0, limits, 10) == pytest.approx(30.0)
    lease.roll(660.0)  # a new window: nothing counted yet
    assert lease.wait(660.0, limits, 0) is None and lease.left == 0


def test_an_idle_block_is_given_back_after_a_second() -> None:
    """What a block still holds goes back once unused for LEASE_IDLE_S, and only once."""
    lease, limits = Lease(), TeamLimits(requests_per_minute=1000)
    lease.roll(0.0)
    lease.reserved(0.0, 8, 8, 0, limits)
    assert lease.take(0.2)
    assert lease.give_back(1.0) == 0  # used 0.8 s ago
    assert lease.give_back(1.2) == 7
    assert lease.give_back(5.0) == 0 and lease.left == 0
