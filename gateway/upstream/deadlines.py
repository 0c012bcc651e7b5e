"""Time limits on the gateway's waits, all on one timer per event loop.

Every request waits several times: for the provider's first byte, for the body, for
each piece of a stream, for a slow client to take what was written. Under uvloop an
``asyncio.timeout()`` block costs about 9 µs (a libuv timer made and cancelled each
time), more than the wait's own bookkeeping, and a stream would pay it per piece.
Here every limit is a :class:`Limit`, an entry in a table that one timer (:data:`TICK`
apart, running only while some limit is set) checks: setting, moving or clearing a
limit is a few attribute writes, and limits are kept to within a tick.

A limit that runs out cancels its task, as ``asyncio.timeout`` does; leaving the
``with`` block then raises :class:`TimeoutError` instead of the cancellation, while a
cancellation that came from elsewhere (a client that left) stays one. ``kind`` names
the wait that ran out, for a caller that bounds several kinds of wait with one limit.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

TICK = 0.02  # seconds between checks while any limit is set


class _Table:
    """The limits set on one event loop, and its timer."""

    __slots__ = ("limits", "loop", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.limits: set[Limit] = set()
        self.timer: asyncio.TimerHandle | None = None

    def add(self, lim: Limit) -> None:
        self.limits.add(lim)
        if self.timer is None:
            self.timer = self.loop.call_later(TICK, self.check)

    def check(self) -> None:
        """Cancel the task of every limit that ran out; check again while any is set."""
        self.timer = None
        now = self.loop.time()
        for lim in [x for x in self.limits if x.due is not None and x.due <= now]:
            self.limits.discard(lim)
            lim.expire()
        if self.limits:
            self.timer = self.loop.call_later(TICK, self.check)
        else:
            _tables.pop(id(self.loop), None)


_tables: dict[int, _Table] = {}


class Limit:
    """A time limit on the current task's waits: ``with Limit(5.0): await ...``."""

    __slots__ = ("_cancelling", "_loop", "_task", "due", "expired", "kind")

    def __init__(self, seconds: float | None, kind: str = "") -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None, "a Limit bounds a task's waits"
        self._task = task
        self._cancelling = 0
        self.kind = kind
        self.due = self._loop.time() + seconds if seconds is not None else None
        self.expired: str | None = None  # the kind of wait that ran out

    def set(self, seconds: float | None, kind: str = "") -> None:
        """The current wait (of ``kind``) may last ``seconds`` from now; None: no limit."""
        self.kind = kind
        self.due = None if seconds is None else self._loop.time() + seconds

    def expire(self) -> None:
        if self.expired is None:
            self.expired = self.kind
            self._task.cancel()

    def __enter__(self) -> Limit:
        self._cancelling = self._task.cancelling()
        table = _tables.get(id(self._loop))
        if table is None or table.loop is not self._loop:
            table = _tables[id(self._loop)] = _Table(self._loop)
        table.add(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        table = _tables.get(id(self._loop))
        if table is not None:
            table.limits.discard(self)
        if self.expired is not None:
            ours = self._task.uncancel() <= self._cancelling
            if ours and exc_type is asyncio.CancelledError:
                raise TimeoutError(f"{self.expired or 'wait'} timed out") from exc
