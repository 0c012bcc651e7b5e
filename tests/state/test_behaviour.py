"""Behaviour every state backend shares; each test runs on memory and on a real Redis."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway.policy.schema import Fallback, RetryAllowance, TeamLimits
from gateway.resilience.fallback import Activated, Choice, FallbackState, Follow, Recovered
from gateway.state import StateBackend

FB = Fallback(chain=("fb-1", "fb-2"), after_consecutive_server_errors=2, cooldown=60.0)
KEY = "team-a/r0|glm-4.7"
Make = Callable[..., StateBackend]


async def test_fallback_activation_and_stickiness(make_backend: Make) -> None:
    """Two server errors activate chain[0]; new requests then start on it."""
    s = make_backend()
    assert await s.choose(KEY, FB, 100.0) == Choice(0)
    assert await s.record(KEY, FB, 0, "server_error", 100.0, probe=False) is None
    assert await s.record(KEY, FB, 0, "server_error", 101.0, probe=False) == Activated(0, 1)
    assert await s.choose(KEY, FB, 102.0) == Choice(1)
    assert s.fallback_snapshot() == {KEY: FallbackState(active=1, since=101.0)}


async def test_fallback_keys_are_independent(make_backend: Make) -> None:
    """A fallback on one route and model leaves other keys on their primary."""
    s = make_backend()
    for t in (1.0, 2.0):
        await s.record(KEY, FB, 0, "server_error", t, probe=False)
    assert await s.choose("other|glm-4.7", FB, 3.0) == Choice(0)


async def test_success_and_other_outcomes(make_backend: Make) -> None:
    """A success resets the streak; a 4xx neither counts nor resets."""
    s = make_backend()
    await s.record(KEY, FB, 0, "server_error", 1.0, probe=False)
    await s.record(KEY, FB, 0, "ok", 2.0, probe=False)
    await s.record(KEY, FB, 0, "server_error", 3.0, probe=False)
    assert await s.record(KEY, FB, 0, "other", 4.0, probe=False) is None
    assert await s.choose(KEY, FB, 5.0) == Choice(0)
    assert await s.record(KEY, FB, 0, "server_error", 6.0, probe=False) == Activated(0, 1)


async def test_probe_recover_cycle(make_backend: Make) -> None:
    """After the cooldown one request probes, others keep the fallback, success recovers."""
    s = make_backend()
    for t in (0.0, 1.0):
        await s.record(KEY, FB, 0, "server_error", t, probe=False)
    assert await s.choose(KEY, FB, 61.0) == Choice(0, probe=True)
    assert await s.choose(KEY, FB, 61.5) == Choice(1)
    assert await s.record(KEY, FB, 0, "ok", 62.0, probe=True) == Recovered(1)
    assert await s.choose(KEY, FB, 63.0) == Choice(0)
    assert s.fallback_snapshot() == {}


async def test_probe_failure_and_chain_walk(make_backend: Make) -> None:
    """A failed probe restarts the cooldown; a failing fallback walks on to the next."""
    s = make_backend()
    for t in (0.0, 1.0):
        await s.record(KEY, FB, 0, "server_error", t, probe=False)
    assert (await s.choose(KEY, FB, 61.0)).probe
    assert await s.record(KEY, FB, 0, "server_error", 62.0, probe=True) is None
    assert await s.choose(KEY, FB, 100.0) == Choice(1)
    stale = await s.record(KEY, FB, 0, "server_error", 100.0, probe=False)
    assert stale == Follow(1)  # a request still on the primary follows the route
    await s.record(KEY, FB, 1, "server_error", 101.0, probe=False)
    assert await s.record(KEY, FB, 1, "server_error", 102.0, probe=False) == Activated(1, 2)
    assert await s.choose(KEY, FB, 103.0) == Choice(2)


async def test_retry_budget(make_backend: Make) -> None:
    """The budget allows the floor with no traffic and ratio x requests with traffic."""
    s = make_backend()
    floor = RetryAllowance(ratio=0.2, min_per_second=0.5)  # 5 per 10 s window
    assert [await s.spend_retry("r", floor, 1000.0) for _ in range(6)] == [True] * 5 + [False]
    ratio = RetryAllowance(ratio=0.5, min_per_second=0)
    for _ in range(8):
        await s.note_request("r2", 1000.0)
    assert [await s.spend_retry("r2", ratio, 1000.5) for _ in range(5)] == [True] * 4 + [False]
    assert await s.spend_retry("r2", ratio, 1010.0) is False  # the requests left the window
    assert await s.spend_retry("r", floor, 1010.0) is True  # and so did the retries


async def test_team_request_limit(make_backend: Make) -> None:
    """requests_per_minute refuses with the seconds until the next minute."""
    s = make_backend()
    limits = TeamLimits(requests_per_minute=2)
    assert await s.admit("t", limits, 6000.0) is None
    assert await s.admit("t", limits, 6001.0) is None
    assert await s.admit("t", limits, 6030.0) == pytest.approx(30.0)
    assert await s.admit("t", limits, 6031.0) == pytest.approx(29.0)
    assert await s.admit("t", limits, 6060.0) is None
    assert await s.admit("other", limits, 6030.0) is None


async def test_team_token_limit(make_backend: Make) -> None:
    """tokens_per_minute refuses new requests once the minute's tokens reach it."""
    s = make_backend()
    limits = TeamLimits(tokens_per_minute=100)
    assert await s.admit("t", limits, 120.0) is None
    await s.add_tokens("t", limits, 60, 121.0)
    assert await s.admit("t", limits, 122.0) is None
    await s.add_tokens("t", limits, 40, 123.0)
    assert await s.admit("t", limits, 135.0) == pytest.approx(45.0)
    assert await s.admit("t", limits, 180.0) is None


async def test_no_limits(make_backend: Make) -> None:
    """A team without limits is always admitted and token counts are not kept."""
    s = make_backend()
    await s.add_tokens("t", TeamLimits(), 10**9, 1.0)
    assert all([await s.admit("t", TeamLimits(), 1.0) is None for _ in range(50)])
