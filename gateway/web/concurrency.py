"""Per-team concurrency: at most ``limits.max_concurrent`` of a team's requests in flight.

Counted in this process only: a replica, or one worker of ``serve --workers``. What the
limit protects is per process too (the memory that holds request bodies, the upstream
connection pool), so one team's burst cannot take all of it. A request over the limit is
refused at once, right after its key was checked and before its body is read: a 429 in
the endpoint's format with ``retry-after: 1``; it is never queued. A slot is held from
then until the handler is done: a JSON answer handed over, a stream ended (completed,
failed, or the client gone), an error answered.
"""

from __future__ import annotations

from gateway.errors import GatewayError


class TeamSlots:
    """The requests in flight per team that has a ``max_concurrent`` (the others are not
    counted)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[str, int] = {}

    def take(self, team: str, limit: int) -> None:
        """One slot of ``team``'s ``limit``, or the 429 that refuses the request."""
        held = self._held.get(team, 0)
        if held >= limit:
            raise GatewayError(
                429,
                f"team {team!r} has {held} requests in flight, its limit "
                f"(limits.max_concurrent: {limit}); retry when one has ended",
                code="team_concurrency_limited",
                headers={"retry-after": "1", "x-should-retry": "true"},
                close=True,  # its body was not read
            )
        self._held[team] = held + 1

    def give_back(self, team: str) -> None:
        held = self._held[team] - 1
        if held:
            self._held[team] = held
        else:
            del self._held[team]

    def held(self, team: str) -> int:
        """How many of ``team``'s requests hold a slot now."""
        return self._held.get(team, 0)
