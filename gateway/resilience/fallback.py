"""Route fallback state: consecutive-error streaks, activation, cooldown, probe.

One small immutable :class:`FallbackState` per fallback key (the engine uses
``f"{route_id}|{requested_model}"``) and two pure transitions over it. Model
*indexes* name the models of a route: ``0`` is the primary (the model asked
for), ``i > 0`` is ``fallback.chain[i - 1]``.

``choose(state, fb, now)``
    Which model a new request starts on. While a fallback is active the request
    uses it, except that once ``cooldown`` has passed since the fallback was
    activated (or the last probe failed) exactly one request *probes* the
    primary. The probe takes a lease, ``probe_until = now + probe_lease(fb)``
    with ``probe_lease = max(cooldown, PROBE_LEASE_MIN)`` (30 s): while the
    lease is live no other request probes. The probe's own :func:`record`
    releases the lease; the bound only matters when a probe never reports
    (a crashed replica, a cancelled request), so that the route is not stuck
    on the fallback for ever.

``record(state, fb, index, outcome, now, probe=...)``
    What one finished attempt on model ``index`` teaches. ``outcome`` is
    ``"ok"``, ``"server_error"`` (every category that counts toward fallback:
    server_error, server_overload, timeout, connection) or ``"other"`` (4xx,
    rate limits, quota: says nothing about the model's health).

    * On the active model: ``server_error`` increments the streak; at
      ``after_consecutive_server_errors`` the route moves to the next model of
      the chain (:class:`Activated`, streak reset, ``since = now``). A fallback
      that fails in turn walks on to the next one; the last model stays (its
      streak stops growing at the threshold). ``ok`` resets the streak,
      ``other`` leaves it alone.
    * A probe (``probe=True`` on index 0 while a fallback is active): ``ok``
      restores the primary (:class:`Recovered`, state reset); ``server_error``
      restarts the cooldown (``since = now``) and releases the lease, without
      walking the chain; ``other`` is inconclusive: it only releases the lease,
      so the next request probes again.
    * Stale records: an attempt on any index other than the active one (a
      request that chose its model before the route moved, or one that walked on
      by itself with :func:`next_index`) changes nothing. In particular only a
      probe can restore the primary, never a late success of an old request.
      A server-side failure of such a request on a model *before* the active one
      answers :class:`Follow`: the request should move to the active model now
      instead of retrying one the route already left.
    * A probe record that arrives while the primary is already active is an
      ordinary record on the active model.

Chain walks keep a live probe lease, so there is never more than one probe per
lease unless a probe result arrived in between. A state whose ``active`` index
no longer exists (the policy's chain was shortened by a reload) is treated as
the primary.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from gateway.policy.schema import Fallback

Outcome = Literal["ok", "server_error", "other"]

PROBE_LEASE_MIN = 30.0
"""Shortest probe lease, in seconds (the lease is ``max(cooldown, PROBE_LEASE_MIN)``)."""

ACTIVATION_REASON = "consecutive_server_errors"


@dataclass(frozen=True, slots=True)
class FallbackState:
    """The shared fallback state of one route and requested model."""

    active: int = 0
    """0 = the primary; i = ``fallback.chain[i - 1]``."""
    streak: int = 0
    """Consecutive server-side failures on the active model."""
    since: float = 0.0
    """When the active fallback was activated or the last probe failed (epoch s)."""
    probe_until: float = 0.0
    """A probe lease: while ``now < probe_until`` no other request probes."""


@dataclass(frozen=True, slots=True)
class Choice:
    """The model index a request starts on, and whether it is the probe."""

    index: int
    probe: bool = False
    back_to: int = field(default=0, compare=False)
    """For a probe: the fallback index the request returns to if the probe fails."""


@dataclass(frozen=True, slots=True)
class Activated:
    """The route moved from ``from_index`` to ``to_index`` (fallback_model_activated)."""

    from_index: int
    to_index: int
    reason: str = ACTIVATION_REASON


@dataclass(frozen=True, slots=True)
class Recovered:
    """A probe succeeded: the primary serves again; ``index`` is the fallback left."""

    index: int


@dataclass(frozen=True, slots=True)
class Follow:
    """A request still on an older model failed: the route already moved to ``index``."""

    index: int


Transition = Activated | Recovered | Follow

INITIAL = FallbackState()
PRIMARY = Choice(0)  # what the default state chooses


def next_index(fb: Fallback, index: int) -> int | None:
    """The model after ``index`` in the chain, or None when ``index`` is the last."""
    return index + 1 if 0 <= index < len(fb.chain) else None


def model_at(primary: str, fb: Fallback, index: int) -> str:
    """The public model name of ``index`` (0 = ``primary``)."""
    if index == 0:
        return primary
    if 0 < index <= len(fb.chain):
        return fb.chain[index - 1]
    raise IndexError(f"model index {index} outside 0..{len(fb.chain)}")


def probe_lease(fb: Fallback) -> float:
    """How long a probe keeps other requests from probing, in seconds."""
    return max(fb.cooldown, PROBE_LEASE_MIN)


def _normalise(state: FallbackState, fb: Fallback) -> FallbackState:
    if 0 <= state.active <= len(fb.chain):
        return state
    return INITIAL


def choose(state: FallbackState, fb: Fallback, now: float) -> tuple[FallbackState, Choice]:
    """The model a new request starts on, and the state after taking a probe lease."""
    state = _normalise(state, fb)
    if state.active == 0:
        return state, PRIMARY
    if now >= state.since + fb.cooldown and now >= state.probe_until:
        leased = replace(state, probe_until=now + probe_lease(fb))
        return leased, Choice(0, probe=True, back_to=state.active)
    return state, Choice(state.active)


def record(
    state: FallbackState,
    fb: Fallback,
    index: int,
    outcome: Outcome | str,
    now: float,
    *,
    probe: bool,
) -> tuple[FallbackState, Transition | None]:
    """The state after one attempt on ``index`` ended with ``outcome``, and the transition."""
    state = _normalise(state, fb)
    if probe and index == 0 and state.active > 0:
        if outcome == "ok":
            return INITIAL, Recovered(state.active)
        if outcome == "server_error":
            return replace(state, since=now, probe_until=0.0), None
        return replace(state, probe_until=0.0), None
    if index != state.active:
        if outcome == "server_error" and index < state.active:
            return state, Follow(state.active)  # a request that chose before the route moved
        return state, None
    if outcome == "ok":
        return (replace(state, streak=0) if state.streak else state), None
    if outcome != "server_error":
        return state, None
    threshold = fb.after_consecutive_server_errors
    streak = state.streak + 1
    if streak < threshold:
        return replace(state, streak=streak), None
    to = next_index(fb, state.active)
    if to is None:
        return (replace(state, streak=threshold) if state.streak != threshold else state), None
    moved = FallbackState(active=to, streak=0, since=now, probe_until=state.probe_until)
    return moved, Activated(state.active, to)
