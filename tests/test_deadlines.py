"""gateway.upstream.deadlines: limits on waits, checked by one timer per loop, that behave as
``asyncio.timeout`` does."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gateway.upstream import deadlines
from gateway.upstream.deadlines import TICK, Limit
from tests.waiting import eventually

pytestmark = pytest.mark.fast


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


# ---- parity with asyncio.timeout -------------------------------------------------------
# Limit stands in for asyncio.timeout (docs/performance.md, the speed seams): each scenario
# runs with both, and what the task sees must be the same.

Move = Callable[[float | None], None]


@contextlib.asynccontextmanager
async def with_limit(seconds: float | None) -> AsyncIterator[Move]:
    with Limit(seconds) as lim:
        yield lambda s: lim.set(s)


@contextlib.asynccontextmanager
async def with_timeout(seconds: float | None) -> AsyncIterator[Move]:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(seconds) as cm:
        yield lambda s: cm.reschedule(None if s is None else loop.time() + s)


Bound = Callable[[float | None], contextlib.AbstractAsyncContextManager[Move]]


async def runs_out(bound: Bound, seen: list[str]) -> None:
    async with bound(0.03):
        seen.append("waiting")
        await asyncio.sleep(5)  # the wait the limit cuts
        seen.append("not reached")


async def in_time(bound: Bound, seen: list[str]) -> None:
    async with bound(1.0):
        await asyncio.sleep(0)  # a wait well within the limit
        seen.append("done")


async def no_limit(bound: Bound, seen: list[str]) -> None:
    async with bound(None):
        await asyncio.sleep(3 * TICK)  # long enough for a timer to have fired
        seen.append("done")


async def moved_forward(bound: Bound, seen: list[str]) -> None:
    async with bound(0.06) as move:
        for _ in range(4):
            move(0.06)
            await asyncio.sleep(0.03)  # each wait under the limit
        seen.append("done")


async def moved_closer(bound: Bound, seen: list[str]) -> None:
    async with bound(5.0) as move:
        move(0.03)
        await asyncio.sleep(5)  # cut by the nearer limit


async def removed(bound: Bound, seen: list[str]) -> None:
    async with bound(0.03) as move:
        move(None)
        await asyncio.sleep(3 * TICK)  # past where the limit was
        seen.append("done")


async def inner_runs_out(bound: Bound, seen: list[str]) -> None:
    async with bound(5.0):
        try:
            async with bound(0.03):
                await asyncio.sleep(5)  # cut by the inner limit
        except TimeoutError:
            seen.append("inner timed out")
        await asyncio.sleep(0)  # the outer block goes on
        seen.append("outer goes on")


async def outer_runs_out(bound: Bound, seen: list[str]) -> None:
    async with bound(0.03):
        try:
            async with bound(5.0):
                await asyncio.sleep(5)  # cut by the outer limit
        except TimeoutError:
            seen.append("inner saw a timeout")
        except asyncio.CancelledError:
            seen.append("inner saw a cancellation")
            raise


async def error_inside(bound: Bound, seen: list[str]) -> None:
    async with bound(1.0):
        raise ValueError("the body's own error")


async def body_swallows_the_cancellation(bound: Bound, seen: list[str]) -> None:
    async with bound(0.03):
        try:
            await asyncio.sleep(5)  # cut by the limit
        except asyncio.CancelledError:
            seen.append("swallowed")


async def cancelled_from_elsewhere(bound: Bound, seen: list[str]) -> None:
    inside = asyncio.Event()

    async def waits() -> None:
        async with bound(5.0):
            inside.set()
            await asyncio.sleep(5)  # the wait that is cancelled

    task = asyncio.create_task(waits())
    await inside.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        seen.append("cancelled")


SCENARIOS = [
    runs_out, in_time, no_limit, moved_forward, moved_closer, removed, inner_runs_out,
    outer_runs_out, error_inside, body_swallows_the_cancellation, cancelled_from_elsewhere,
]  # fmt: skip


async def outcome(scenario: Callable[..., Any], bound: Bound) -> tuple[Any, ...]:
    """What the task saw: the steps, what left the scenario (type and cause), and whether
    the task still counts a cancellation afterwards."""

    async def run() -> tuple[Any, ...]:
        seen: list[str] = []
        raised: BaseException | None = None
        try:
            await scenario(bound, seen)
        except BaseException as e:
            raised = e
        task = asyncio.current_task()
        assert task is not None
        cause = type(raised.__cause__).__name__ if raised is not None else None
        return seen, type(raised).__name__, cause, task.cancelling()

    return await asyncio.create_task(run())  # a task of its own: its cancel count is fresh


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
async def test_a_limit_behaves_as_asyncio_timeout(scenario: Callable[..., Any]) -> None:
    """The same steps, the same exception (and cause), the same cancel count after."""
    assert await outcome(scenario, with_limit) == await outcome(scenario, with_timeout)
