"""The recovery-state interface the engine uses (docs/operations.md, "Scaling out").

Recovery state is what replicas must agree on: consecutive-error streaks and
fallback activation (:mod:`gateway.resilience.fallback`), route retry budgets
and team limits (:mod:`gateway.resilience.retry_allowance`). The decisions are the pure
functions of those modules; a backend only keeps their state, in process
(:class:`~gateway.state.memory.MemoryState`) or in Redis, shared by every
replica (:class:`~gateway.state.redis.RedisState`).

The methods are async because Redis is remote. A backend never raises because
its store is unreachable: it answers from local state instead. ``now`` is
wall-clock epoch seconds, passed in by the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from gateway.money.budgets import Book
from gateway.policy.schema import Budget, Fallback, RetryAllowance, TeamLimits
from gateway.resilience.fallback import Choice, FallbackState, Transition

__all__ = ["Choice", "FallbackState", "StateBackend", "Transition"]


@runtime_checkable
class StateBackend(Protocol):
    """Shared recovery state: fallback per route and model, retry budgets, team limits."""

    async def choose(self, key: str, fb: Fallback, now: float) -> Choice:
        """The model index a new request on ``key`` starts on (maybe the probe)."""
        ...

    async def record(
        self, key: str, fb: Fallback, index: int, outcome: str, now: float, *, probe: bool
    ) -> Transition | None:
        """Count one finished attempt; the fallback transition it caused, if any."""
        ...

    async def spend_retry(self, route: str, allowance: RetryAllowance, now: float) -> bool:
        """Take one retry from the route's retry allowance; False: it is spent."""
        ...

    async def note_request(self, route: str, now: float) -> None:
        """Count one request of the route (feeds the retry allowance)."""
        ...

    async def admit(self, team: str, limits: TeamLimits, now: float) -> float | None:
        """None: admitted and counted; else seconds until the team may send again."""
        ...

    async def add_tokens(self, team: str, limits: TeamLimits, tokens: int, now: float) -> None:
        """Count tokens the team used (for ``tokens_per_minute``)."""
        ...

    spending: Book
    """Each team's spending in its budget's period, as this replica knows it: read on the
    request path (no I/O); the backend keeps it in step with the other replicas."""
    shared: bool
    """Budgets (and the rest) are shared with other replicas."""

    def charge(self, team: str, budget: Budget, usd: float, now: float) -> None:
        """Add a finished request's cost (USD) to its team's budget (never waits)."""
        ...

    def track(self, budgets: Mapping[str, Budget], now: float) -> None:
        """The teams with a budget (at start and after a reload): their shared totals are
        read from now on; teams no longer in ``budgets`` are forgotten."""
        ...

    def fallback_snapshot(self) -> dict[str, FallbackState]:
        """This replica's view of every non-default fallback state (for /admin, gauges)."""
        ...

    async def close(self) -> None:
        """Release connections; the backend is not used afterwards."""
        ...
