"""When a cloud credential is fetched again: pure arithmetic on an expiry time and the
clock's reading, both passed in (no clock is read here).

A token is refreshed ahead of its expiry by a tenth of what is left of its life, at least
a minute, and never later than half-way through what is left, so that a token of a few
seconds (tests, a misconfigured identity service) is still replaced well before it ends.
A failed refresh is tried again with a doubling wait, capped, while the old token is kept;
a retry never waits past the old token's expiry, so the failure is known the moment there
is nothing left to sign with.

A fetch that does not answer is not waited for in silence: with nothing usable held (the
first token) the credential is unusable once the fetch is ``timeout`` old; with a token
held, the moment that token expires (:func:`unusable_at`). The fetch itself is not given
up: its answer, whenever it comes, is taken.
"""

from __future__ import annotations

import math

#: The least time a token is refreshed ahead of its expiry (seconds).
AHEAD_AT_LEAST = 60.0
#: The share of what is left of a token's life by which it is refreshed ahead.
AHEAD_SHARE = 0.1
#: How long the first fetch of a credential may take before its provider is out (seconds;
#: ``GATEWAY_CLOUD_TOKEN_TIMEOUT_S``).
FETCH_TIMEOUT = 3.0
#: The first wait before a failed fetch is tried again, and the longest (seconds).
RETRY_FIRST = 1.0
RETRY_CAP = 60.0


def refresh_delay(expires_at: float | None, now: float) -> float:
    """Seconds from ``now`` until a credential expiring at ``expires_at`` (epoch seconds)
    is refreshed: :data:`math.inf` for one that does not expire, 0 for one already past
    the point (or expired)."""
    if expires_at is None:
        return math.inf
    left = expires_at - now
    if left <= 0:
        return 0.0
    ahead = min(max(AHEAD_AT_LEAST, AHEAD_SHARE * left), left / 2)
    return left - ahead


def retry_delay(
    failures: int,
    expires_at: float | None,
    now: float,
    first: float = RETRY_FIRST,
    cap: float = RETRY_CAP,
) -> float:
    """Seconds from ``now`` until a fetch that failed ``failures`` times in a row (1 or
    more) is tried again: ``first`` doubled per further failure up to ``cap``, and no
    later than the expiry of the credential still held (``expires_at``; None: none held
    or one that does not expire)."""
    wait = min(cap, first * 2.0 ** min(max(failures - 1, 0), 32))
    if expires_at is not None and expires_at > now:
        return min(wait, expires_at - now)
    return wait


def unusable_at(started: float, timeout: float, held: bool, expires_at: float | None) -> float:
    """The moment a credential whose fetch began at ``started`` and has not answered has
    nothing usable: with a credential ``held``, its expiry (``expires_at``; never for one
    that does not expire, at once for one already expired); with none, ``timeout`` after
    the fetch began."""
    if not held:
        return started + timeout
    return math.inf if expires_at is None else expires_at
