"""What the gateway reads back from Redis, checked like any other input.

Redis is shared: another version of the gateway, an operator's ``redis-cli`` or a bug
may leave anything in the gateway's keys. A value read back (a deployment state, a
fallback state, a counter) becomes a typed state here or nowhere: a malformed one is
ignored, as if the key were empty, and logged once per key as ``state_value_ignored``
with the key and what is wrong, never the value (a stray value may hold anything,
secrets included).

A well-formed value is one the gateway itself could have written: JSON objects of the
known fields with the right types, finite times not before the epoch and at most
:data:`HORIZON_S` (a week) ahead, streaks and counters that are plain non-negative integers,
names of states and failure categories the gateway knows. Unknown fields are ignored
(another version's).

A team's spending total (:func:`spend_total`) is the exception: one the gateway did not
write is not read as 0 but fails closed (:mod:`gateway.state.redis_budgets`).
"""

from __future__ import annotations

from typing import Any

import orjson
import structlog

from gateway.errors import BadStateValue, Category
from gateway.resilience import fallback
from gateway.resilience.deployments import COOLDOWN, EJECTED, OUT, DeploymentState
from gateway.resilience.fallback import FallbackState

__all__ = [
    "HORIZON_S",
    "MAX_COUNT",
    "NOT_A_STRING",
    "Ignored",
    "counter",
    "deployment_state",
    "fallback_state",
    "spend_total",
]

log = structlog.get_logger("gateway.state")

HORIZON_S = 7 * 86400.0
"""The furthest ahead a time read back may be: a week (a cooldown longer than that is
not one a policy means)."""
MAX_COUNT = 2**53
"""Larger streaks and counters are not ones the gateway wrote."""
NOT_A_STRING = b"WRONGTYPE"
"""What a read script returns for a key that holds another Redis type than a string."""
_STATES = frozenset({"", COOLDOWN, OUT, EJECTED})
_CATEGORIES = frozenset({"", *(c.value for c in Category)})
_LOGGED_MAX = 4096


class Ignored:
    """Logs each key whose value is ignored once (``state_value_ignored``)."""

    def __init__(self) -> None:
        self._logged: set[tuple[str, str]] = set()

    def __call__(self, key: str, why: str, field: str = "") -> None:
        seen = (key, field)
        if seen in self._logged:
            return
        if len(self._logged) >= _LOGGED_MAX:
            self._logged.clear()
        self._logged.add(seen)
        extra = {"field": field[:200]} if field else {}
        log.warning("state_value_ignored", backend="redis", key=key[:200], **extra, reason=why)

    def counter(self, key: str, raw: Any) -> int:
        """:func:`counter`, or 0 (logged) when the value is not one."""
        try:
            return counter(raw)
        except BadStateValue as e:
            self(key, str(e))
            return 0


def _time(data: dict[str, Any], name: str, now: float) -> float:
    value = data.get(name, 0.0)
    # NaN and infinities fail the comparison too
    if type(value) not in (int, float) or not 0 <= value <= now + HORIZON_S:
        raise BadStateValue(f"{name}: not a time between the epoch and a week from now")
    return float(value)


def _count(data: dict[str, Any], name: str) -> int:
    value = data.get(name, 0)
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise BadStateValue(f"{name}: not a non-negative integer")
    return value


def _name(data: dict[str, Any], name: str, allowed: frozenset[str]) -> str:
    value = data.get(name, "")
    if type(value) is not str or value not in allowed:
        raise BadStateValue(f"{name}: not one the gateway knows")
    return value


def _object(raw: Any) -> dict[str, Any]:
    data = orjson.loads(raw) if isinstance(raw, bytes | str) else raw
    if type(data) is not dict:
        raise BadStateValue("not a JSON object")
    return data


def deployment_state(raw: Any, now: float) -> DeploymentState:
    """A deployment state from its JSON (bytes) or the decoded object; :class:`BadStateValue` when
    it is not one the gateway wrote (``now``: wall-clock epoch seconds)."""
    try:
        data = _object(raw)
    except orjson.JSONDecodeError:
        raise BadStateValue("not JSON") from None
    return DeploymentState(
        until=_time(data, "until", now),
        state=_name(data, "state", _STATES),
        why=_name(data, "why", _CATEGORIES),
        streak=_count(data, "streak"),
        short_until=_time(data, "short_until", now),
        last_error=_name(data, "last_error", _CATEGORIES),
    )


def fallback_state(raw: bytes | str | None, now: float) -> FallbackState:
    """A route's fallback state from its JSON (None: the key is empty, the initial
    state); :class:`BadStateValue` when it is not one the gateway wrote. ``active`` is not bounded
    here: an index the chain no longer has is the primary (a reload shortened it)."""
    if raw is None:
        return fallback.INITIAL
    try:
        data = _object(raw)
    except orjson.JSONDecodeError:
        raise BadStateValue("not JSON") from None
    if not {"active", "streak", "since", "probe_until"} <= data.keys():
        raise BadStateValue("a field is missing")
    return FallbackState(
        active=_count(data, "active"),
        streak=_count(data, "streak"),
        since=_time(data, "since", now),
        probe_until=_time(data, "probe_until", now),
    )


def counter(raw: Any) -> int:
    """A window counter (``GET`` / ``MGET``: bytes or None); :class:`BadStateValue` unless a plain
    integer. Negative is well-formed: a block given back may briefly take a count below
    zero."""
    if raw is None:
        return 0
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, bytes | str) and 0 < len(raw) <= 20:
        try:
            value = int(raw)
        except ValueError:
            raise BadStateValue("not an integer") from None
    else:
        raise BadStateValue("not an integer")
    if abs(value) > MAX_COUNT:
        raise BadStateValue("not a count the gateway wrote")
    return value


def spend_total(raw: Any) -> int:
    """A team's spending total of a period, micro-dollars (bytes, None: no key yet, 0, or
    :data:`NOT_A_STRING`); :class:`BadStateValue` unless an integer from 0 to :data:`MAX_COUNT`."""
    if raw == NOT_A_STRING:
        raise BadStateValue("not a string (another Redis type)")
    value = counter(raw)
    if value < 0:
        raise BadStateValue("negative")
    return value
