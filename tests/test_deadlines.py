"""gateway.deadlines: limits on waits, checked by one timer per loop."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway import deadlines
from gateway.deadlines import TICK, Limit
from tests.waiting import eventually


async def test_a_limit_that_runs_out_raises_timeout_error() -> None:
    """The wait is cancelled about when the limit runs out, and TimeoutError is raised."""
    t = time.monotonic()
    with pytest.raises(TimeoutError), Limit(0.05, "read"):
        await asyncio.sleep(5)  # the wait the limit cuts
    assert 0.04 < time.monotonic() - t < 0.05 + 3 * TICK


async def test_moving_a_limit_forward_keeps_the_wait_alive() -> None:
    """set() restarts the limit: waits that each stay under it never time out."""
    with Limit(0.06) as lim:
        for _ in range(5):
            lim.set(0.06)
            await asyncio.sleep(0.03)  # a wait under the limit
    assert lim.expired is None


async def test_the_kind_of_the_wait_that_ran_out_is_named() -> None:
    """One limit over several kinds of wait says which one ran out."""
    lim = Limit(None)
    with pytest.raises(TimeoutError), lim:
        lim.set(1.0, "read")
        await asyncio.sleep(0.01)  # a read that finishes in time
        lim.set(0.03, "write")
        await asyncio.sleep(5)  # a write that does not
    assert lim.expired == "write"


async def test_no_limit_while_set_to_none() -> None:
    """A limit set to None never fires."""
    with Limit(None) as lim:
        await asyncio.sleep(3 * TICK)  # long enough for a timer to have fired
    assert lim.expired is None


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    """Cancelling the task (a client that left) is not turned into a timeout."""

    waiting = asyncio.Event()

    async def waits() -> None:
        with Limit(5.0):
            waiting.set()
            await asyncio.sleep(5)  # the wait that is cancelled

    task = asyncio.create_task(waits())
    await waiting.wait()  # the task is inside its limit
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_nested_limits_the_inner_one_runs_out() -> None:
    """An inner limit that runs out is the inner block's TimeoutError; the outer goes on."""
    with Limit(5.0) as outer:
        with pytest.raises(TimeoutError), Limit(0.03):
            await asyncio.sleep(5)  # the wait the inner limit cuts
        await asyncio.sleep(0.01)  # the outer block goes on waiting
    assert outer.expired is None


async def test_the_timer_stops_when_no_limit_is_set() -> None:
    """With no limit left the loop has no table (and no timer) of ours."""
    with Limit(1.0):
        await asyncio.sleep(0)  # one wait under the limit
    loop = id(asyncio.get_running_loop())
    # the timer notices at its next tick that nothing is left, and goes
    await eventually(lambda: loop not in deadlines._tables, within=5 * TICK)
