"""The retry allowance of a route (the policy's ``retry.budget``), as a pure counting
window; the word *budget* is kept for a team's money in code.

Nothing here reads a clock: every method takes ``now`` (wall-clock epoch
seconds, so that replicas sharing Redis agree on bucket boundaries).

The retry allowance (``retry.budget: {ratio, min_per_second}`` in a policy, docs/policies.md),
after Finagle's RetryAllowance (20 % of requests, a floor per second, 10 s memory):
a sliding window of ``ALLOWANCE_WINDOW_S`` (10) one-second buckets counts the
route's requests and retries. A retry is allowed when::

    retries_in_window + 1 <= max(ratio * requests_in_window,
                                 min_per_second * ALLOWANCE_WINDOW_S)

so retries add at most ``ratio`` of recent traffic, and a quiet route still
gets ``min_per_second`` retries per second on average. A bucket is the integer
second ``floor(now)``; the window is the current bucket and the nine before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gateway.policy.schema import RetryAllowance

ALLOWANCE_WINDOW_S = 10


def allowance_bucket(now: float) -> int:
    """The one-second bucket ``now`` falls in."""
    return math.floor(now)


def allowance_buckets(now: float) -> range:
    """The buckets of the sliding window ending at ``now``, oldest first."""
    current = allowance_bucket(now)
    return range(current - ALLOWANCE_WINDOW_S + 1, current + 1)


def retry_allowed(requests: int, retries: int, allowance: RetryAllowance) -> bool:
    """May one more retry be spent, given the window's requests and retries so far?"""
    most = max(allowance.ratio * requests, allowance.min_per_second * ALLOWANCE_WINDOW_S)
    return retries + 1 <= most


@dataclass(slots=True)
class AllowanceWindow:
    """One route's requests and retries per second, over the last ten seconds."""

    requests: dict[int, int] = field(default_factory=dict)
    retries: dict[int, int] = field(default_factory=dict)
    pruned_at: int | None = None  # the bucket of the last prune: nothing is stale within it

    def _prune(self, now: float) -> None:
        current = allowance_bucket(now)
        if current == self.pruned_at:
            return
        self.pruned_at = current
        window = allowance_buckets(now)
        for buckets in (self.requests, self.retries):
            for stale in [b for b in buckets if b not in window]:
                del buckets[stale]

    def counts(self, now: float) -> tuple[int, int]:
        """(requests, retries) in the window ending at ``now``."""
        self._prune(now)
        return sum(self.requests.values()), sum(self.retries.values())

    def note_request(self, now: float) -> None:
        """Count one request (a first attempt) of the route."""
        self._prune(now)
        b = allowance_bucket(now)
        self.requests[b] = self.requests.get(b, 0) + 1

    def try_spend(self, now: float, allowance: RetryAllowance) -> bool:
        """Spend one retry if the allowance allows it; False means: do not retry."""
        requests, retries = self.counts(now)
        if not retry_allowed(requests, retries, allowance):
            return False
        b = allowance_bucket(now)
        self.retries[b] = self.retries.get(b, 0) + 1
        return True

    def is_idle(self, now: float) -> bool:
        """Nothing counted in the window: the window may be dropped."""
        requests, retries = self.counts(now)
        return requests == 0 and retries == 0
