"""Team limits, as pure counting windows. Nothing here reads a clock: every method takes
``now`` (wall-clock epoch seconds, so that replicas sharing Redis agree on windows).

Team limits (``limits.requests_per_minute``, ``tokens_per_minute``): fixed
windows of ``LIMIT_WINDOW_S`` (60) seconds aligned to the epoch minute
(``floor(now / 60)``). Fixed windows are exact, cost one counter per team and
kind, and give an exact Retry-After (the end of the window); the price is
that a team can send up to twice its limit across a window boundary, as
with most providers' per-minute limits. A request is rejected when the
window already admitted ``requests_per_minute`` requests, or when the tokens
counted in the window are at or over ``tokens_per_minute`` (token counts are
only known after a response, so the limit stops *new* requests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.policy.schema import TeamLimits

LIMIT_WINDOW_S = 60


def limit_window(now: float) -> int:
    """The fixed one-minute window ``now`` falls in."""
    return math.floor(now / LIMIT_WINDOW_S)


def limit_wait(requests: int, tokens: int, limits: TeamLimits, now: float) -> float | None:
    """None if one more request fits the window, else seconds until the next window.

    ``requests`` are the requests already admitted in ``now``'s window,
    ``tokens`` the tokens counted in it.
    """
    rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
    if (rpm is not None and requests + 1 > rpm) or (tpm is not None and tokens >= tpm):
        return (limit_window(now) + 1) * LIMIT_WINDOW_S - now
    return None


@dataclass(slots=True)
class TeamWindow:
    """One team's requests and tokens in the current one-minute window."""

    window: int | None = None
    requests: int = 0
    tokens: int = 0

    def _roll(self, now: float) -> None:
        w = limit_window(now)
        if w != self.window:
            self.window, self.requests, self.tokens = w, 0, 0

    def admit(self, now: float, limits: TeamLimits) -> float | None:
        """None: admitted and counted. Else the Retry-After in seconds (not counted)."""
        self._roll(now)
        wait = limit_wait(self.requests, self.tokens, limits, now)
        if wait is None:
            self.requests += 1
        return wait

    def add_tokens(self, now: float, n: int) -> None:
        """Count ``n`` tokens (prompt + completion) used by the team at ``now``."""
        self._roll(now)
        self.tokens += max(0, n)

    def is_idle(self, now: float) -> bool:
        """The window ``now`` falls in has counted nothing."""
        return limit_window(now) != self.window or (self.requests == 0 and self.tokens == 0)


# ---- team limits shared by replicas: reserved blocks ---------------------------

LEASE_SHARE = 16
"""A replica reserves at most this fraction (1/16) of what a shared window has left."""
LEASE_FAST_S = 0.1
"""A block used up within this long after its reservation makes the next one twice as big."""
LEASE_IDLE_S = 1.0
"""Admissions reserved and not used for this long are given back to the shared count."""
LEASE_MAX = 4096
"""The largest block reserved at once."""


@dataclass(slots=True)
class Lease:
    """Admissions of one team window that a replica has reserved in the shared count and
    not used yet (the Redis backend keeps one per team; the round trips are its own).

    Counting every request in Redis costs a round trip per request. Instead a replica
    reserves a *block* of admissions at once (one INCRBY) and admits from it locally. A
    block is sized by the replica's own pace (twice the last one when that was used up
    within ``LEASE_FAST_S``, half of it otherwise), but never more than
    1/``LEASE_SHARE`` of what the window has left: far from the limit one round trip
    serves many requests, near it every block is one request and the count is exact.
    Replicas together never admit more than ``requests_per_minute``; a reserved block
    not used within ``LEASE_IDLE_S`` is given back, so what a replica holds back from
    the others is bounded too. Tokens are the window's as last read (at a reservation,
    or the backend's background refresh).
    """

    window: int | None = None
    left: int = 0  # reserved and not used yet
    count: int = 0  # the shared request count after the last reservation
    tokens: int = 0  # the window's tokens as last read
    block: int = 0  # the size of the last reservation
    reserved_at: float = 0.0
    used_at: float = 0.0

    def roll(self, now: float) -> None:
        """Start over in a new window (what the old one held expires with it)."""
        w = limit_window(now)
        if w != self.window:
            self.window, self.left, self.count, self.tokens = w, 0, 0, 0

    def wait(self, now: float, limits: TeamLimits, unflushed_tokens: int) -> float | None:
        """Seconds until the next window when the tokens are spent, else None."""
        tpm = limits.tokens_per_minute
        if tpm is not None and self.tokens + unflushed_tokens >= tpm:
            return (limit_window(now) + 1) * LIMIT_WINDOW_S - now
        return None

    def take(self, now: float) -> bool:
        """Admit one request from the block; False when it is used up."""
        if self.left <= 0:
            return False
        self.left -= 1
        self.used_at = now
        return True

    def size(self, now: float, limits: TeamLimits, wanted: int) -> int:
        """How many admissions to reserve now for ``wanted`` waiting requests."""
        if self.block and now - self.reserved_at <= LEASE_FAST_S:
            pace = 2 * self.block
        else:
            pace = self.block // 2
        rpm = limits.requests_per_minute
        if rpm is not None:
            pace = min(pace, (rpm - self.count) // LEASE_SHARE)
        return max(wanted, min(pace, LEASE_MAX), 1)

    def reserved(self, now: float, n: int, count: int, tokens: int, limits: TeamLimits) -> int:
        """Record a reservation of ``n`` that made the shared count ``count``; what of it
        is usable joins the block. Returns how many must be given back (over the limit)."""
        rpm = limits.requests_per_minute
        usable = n if rpm is None else max(0, min(n, rpm - (count - n)))
        self.left += usable
        self.count, self.tokens, self.block, self.reserved_at = count, tokens, n, now
        return n - usable

    def give_back(self, now: float) -> int:
        """The unused admissions to return once idle for ``LEASE_IDLE_S`` (then 0 held)."""
        if self.left <= 0 or now - max(self.used_at, self.reserved_at) < LEASE_IDLE_S:
            return 0
        n, self.left = self.left, 0
        return n
