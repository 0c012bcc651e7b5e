"""Waiting in tests: for a condition, never for a guessed length of time.

A test that sleeps "long enough" for something to happen is slow when the guess is
generous and flaky when the machine is loaded. :func:`eventually` polls the
condition instead, returns as soon as it holds, and fails with a clear message when
it does not within a generous bound.

A sleep that *is* the scenario (a client pausing on purpose, bytes trickled, a
cooldown that must pass, a wait a timer is meant to cut) stays a sleep, with a
comment saying so.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any


async def eventually(
    condition: Callable[[], Any],
    within: float = 5.0,
    *,
    step: float = 0.01,
    what: str = "",
    fail: bool = True,
) -> Any:
    """Poll ``condition()`` (sync or async) every ``step`` s until it returns something
    true, and return that. ``AssertionError`` (naming ``what``) once ``within`` s passed;
    with ``fail=False`` the last (false) result instead, for a caller whose own asserts
    say more about what is wrong.

    The condition is checked at once, so a wait for what already holds costs nothing. An
    exception raised by the condition ends the wait with that exception.
    """
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result or time.monotonic() > deadline:
            break
        await asyncio.sleep(step)
    if not result and fail:
        name = what or getattr(condition, "__name__", "condition")
        raise AssertionError(f"{name} did not hold within {within:g} s")
    return result
