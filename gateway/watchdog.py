"""One timer for a whole stream: upstream reads and client writes each get a time limit.

A relay waits many times per stream (for the next upstream piece, for the client to
take what was written). Arming and cancelling a timer around every wait costs more
than the wait's bookkeeping itself, so a :class:`Watchdog` keeps one timer for the
stream and each wait only notes when it began and how long it may last. The timer
wakes about once per limit; when it finds the current wait over its limit it ends
the enclosing ``asyncio.timeout`` block at once, and :attr:`expired` names the wait
that ran out (``"read"``: the upstream went quiet; ``"write"``: the client stopped
reading).
"""

from __future__ import annotations

import asyncio

READ, WRITE = "read", "write"


class Watchdog:
    __slots__ = ("_handle", "_loop", "_timeout", "expired", "kind", "limit", "since")

    def __init__(self, timeout: asyncio.Timeout, step: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._timeout = timeout
        self.kind = READ
        self.limit = step
        self.since: float | None = None  # when the current wait began; None: not waiting
        self.expired: str | None = None
        self._handle = self._loop.call_at(self._loop.time() + step, self._check)

    def wait(self, kind: str, limit: float) -> None:
        """A wait of ``kind`` begins now and may last ``limit`` seconds."""
        self.kind = kind
        self.limit = limit
        self.since = self._loop.time()

    def done(self) -> None:
        """The current wait ended."""
        self.since = None

    def _check(self) -> None:
        now = self._loop.time()
        since = self.since
        if since is None:
            due = now + self.limit
        elif now >= since + self.limit:
            self.expired = self.kind
            self._timeout.reschedule(now)  # the enclosing asyncio.timeout ends now
            return
        else:
            due = since + self.limit
        self._handle = self._loop.call_at(due, self._check)

    def stop(self) -> None:
        self._handle.cancel()
