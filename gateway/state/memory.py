"""In-process recovery state: dicts of the pure states of ``gateway.resilience``.

Each method is one synchronous transition, so within one event loop no lock is
needed. The dicts stay bounded: a fallback state that returns to the default is
deleted, and idle budget and limit windows are swept once a dict grows past
``SWEEP_AT`` entries (keys come from policy routes, models and teams, so in
practice they are few).
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.money.budgets import Book
from gateway.observe import budget_events
from gateway.policy.schema import Budget, Fallback, RetryAllowance, TeamLimits
from gateway.resilience import fallback
from gateway.resilience.fallback import Choice, FallbackState, Transition
from gateway.resilience.retry_allowance import AllowanceWindow
from gateway.resilience.team_limits import TeamWindow

SWEEP_AT = 4096


class MemoryState:
    """Recovery state of this process only (``GATEWAY_STATE_URL`` empty)."""

    def __init__(self) -> None:
        self.fallbacks: dict[str, FallbackState] = {}
        self.allowances: dict[str, AllowanceWindow] = {}
        self.teams: dict[str, TeamWindow] = {}
        self.spending = Book(budget_events.crossed)
        self.shared = False

    # ---- fallback ----

    def put_fallback(self, key: str, state: FallbackState) -> None:
        """Store ``state`` for ``key`` (deleting it when it is the default)."""
        if state is fallback.INITIAL or state == fallback.INITIAL:
            self.fallbacks.pop(key, None)
        else:
            self.fallbacks[key] = state

    async def choose(self, key: str, fb: Fallback, now: float) -> Choice:
        old = self.fallbacks.get(key)
        if old is None:  # the default state (a route that never failed): the primary, as is
            return fallback.PRIMARY
        state, choice = fallback.choose(old, fb, now)
        self.put_fallback(key, state)
        return choice

    async def record(
        self, key: str, fb: Fallback, index: int, outcome: str, now: float, *, probe: bool
    ) -> Transition | None:
        old = self.fallbacks.get(key)
        if old is None:
            if outcome == "ok" and not probe:  # the default state stays as it is
                return None
            old = fallback.INITIAL
        state, transition = fallback.record(old, fb, index, outcome, now, probe=probe)
        self.put_fallback(key, state)
        return transition

    def fallback_snapshot(self) -> dict[str, FallbackState]:
        return dict(self.fallbacks)

    # ---- retry budget ----

    def _allowance(self, route: str, now: float) -> AllowanceWindow:
        window = self.allowances.get(route)
        if window is None:
            if len(self.allowances) >= SWEEP_AT:
                for idle in [r for r, w in self.allowances.items() if w.is_idle(now)]:
                    del self.allowances[idle]
            window = self.allowances[route] = AllowanceWindow()
        return window

    async def spend_retry(self, route: str, allowance: RetryAllowance, now: float) -> bool:
        return self._allowance(route, now).try_spend(now, allowance)

    async def note_request(self, route: str, now: float) -> None:
        self._allowance(route, now).note_request(now)

    # ---- team limits ----

    def _team(self, team: str, now: float) -> TeamWindow:
        window = self.teams.get(team)
        if window is None:
            if len(self.teams) >= SWEEP_AT:
                for idle in [t for t, w in self.teams.items() if w.is_idle(now)]:
                    del self.teams[idle]
            window = self.teams[team] = TeamWindow()
        return window

    async def admit(self, team: str, limits: TeamLimits, now: float) -> float | None:
        if limits.requests_per_minute is None and limits.tokens_per_minute is None:
            return None
        return self._team(team, now).admit(now, limits)

    async def add_tokens(self, team: str, limits: TeamLimits, tokens: int, now: float) -> None:
        if limits.tokens_per_minute is None or tokens <= 0:
            return
        self._team(team, now).add_tokens(now, tokens)

    # ---- budgets ----

    def charge(self, team: str, budget: Budget, usd: float, now: float) -> None:
        self.spending.charge(team, budget, usd, now)

    def track(self, budgets: Mapping[str, Budget], now: float) -> None:
        self.spending.track(budgets, now)

    async def close(self) -> None:
        return None
