"""Which deployment of a model takes the next attempt, and what an outcome does to it
(docs/recovery.md, Deployments). Pure: state in, state out, clock and randomness passed in.

A model may be served by several deployments (keys, accounts, regions, replicas). Each
has a :class:`DeploymentState`; the engine asks :func:`choose` before every attempt and
:func:`record` after it, and the state backend keeps the states (shared by replicas).

Out of service, until a wall-clock time, for one reason:

==================  ===========================================================  ========
outcome             what happens to the deployment                               for
==================  ===========================================================  ========
rate_limit,         ``cooldown``: the retry goes to a sibling at once            the
server_overload                                                                  hint,
                                                                                 capped
quota_exhausted,    ``out``: taken out while the others serve                    quota_
auth                                                                             cooldown
server_error,       a streak; at ``after_consecutive_server_errors`` in a row:  fallback
timeout,            ``ejected`` (at most ``max_ejected_percent`` of the model's  .cooldown
connection          deployments at once), then the first pick is one probe
success             streak reset; a probe's success (or a pick after an ``out``
                    or a cooldown ended) is a recovery; while the deployment is
                    still out (an answer to a request sent before it went out)
                    nothing changes but its headroom
==================  ===========================================================  ========

**One probe.** When :func:`choose` picks an ejected deployment whose ejection is over
(``Pick.probe``), the engine leases it to that request with :func:`probing`: it stays
out of service for the lease, so concurrent requests go to its siblings. The probe's
answer recovers it, its failure ejects it again; a probe that never reports (its
request cancelled, its replica gone) lets the lease run out, and the next pick probes.

A successful answer whose rate-limit headers say a dimension is (nearly) used up marks
the deployment *short* until that dimension resets: it still serves, but others are
preferred meanwhile.

:func:`choose` prefers, in order: in service; not tried yet in this request; not short
of headroom; then the model's rule (``weighted``: at random by weight; ``session``:
weighted, each session by its own ranking, :mod:`gateway.resilience.affinity`;
``ordered``: the first; ``least_busy``: the fewest requests in flight on this replica).
When every deployment is out it answers :class:`Wait` for the earliest one back.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace

from gateway.errors import Category
from gateway.resilience import affinity
from gateway.resilience.failure import Failure, Rng

__all__ = [
    "COOLDOWN",
    "EJECTED",
    "OUT",
    "DeploymentState",
    "Pick",
    "Rules",
    "Transition",
    "Wait",
    "choose",
    "probing",
    "record",
    "sibling_in",
]

COOLDOWN, OUT, EJECTED = "cooldown", "out", "ejected"

_COOL = frozenset({Category.rate_limit, Category.server_overload})
_TAKE_OUT = frozenset({Category.quota_exhausted, Category.auth})
_STREAK = frozenset({Category.server_error, Category.timeout, Category.connection})
#: Failures that belong to one deployment (its key, account, region or replica): another
#: deployment of the same model may well answer. A bad request fails everywhere.
SIBLING_MAY_ANSWER = _COOL | _TAKE_OUT | _STREAK


@dataclass(frozen=True, slots=True)
class DeploymentState:
    """One deployment's health as every replica should see it (wall-clock epoch seconds)."""

    until: float = 0.0  # out of service until then (0: in service)
    state: str = ""  # "" | COOLDOWN | OUT | EJECTED while ``until`` is ahead
    why: str = ""  # the failure category that put it there
    streak: int = 0  # server errors / timeouts in a row
    short_until: float = 0.0  # short of rate-limit headroom until then
    last_error: str = ""  # the last failure category seen (kept after recovery)

    def serving(self, now: float) -> bool:
        return self.until <= now

    def short(self, now: float) -> bool:
        return self.short_until > now


@dataclass(frozen=True, slots=True)
class Rules:
    """The policy numbers :func:`record` applies (from the request's policy)."""

    retry_after_cap: float = 300.0  # a cooldown never lasts longer
    default_cooldown: float = 1.0  # a rate limit or overload without a hint
    quota_cooldown: float = 3600.0
    eject_after: int = 2  # fallback.after_consecutive_server_errors
    eject_for: float = 60.0  # fallback.cooldown
    max_ejected_percent: float = 50.0
    probe_lease: float = 60.0  # how long a probe keeps an ejected deployment to itself


@dataclass(frozen=True, slots=True)
class Pick:
    index: int
    probe: bool = False


@dataclass(frozen=True, slots=True)
class Wait:
    """Every deployment is out: the earliest is back after ``seconds``."""

    seconds: float
    index: int


@dataclass(frozen=True, slots=True)
class Transition:
    """What an outcome changed, for events: ``kind`` is COOLDOWN, OUT, EJECTED or
    ``recovered``; ``seconds`` how long it is out."""

    kind: str
    why: str
    seconds: float = 0.0


def choose(
    states: Sequence[DeploymentState],
    weights: Sequence[float],
    balance: str,
    tried: AbstractSet[int],
    now: float,
    rng: Rng,
    inflight: Sequence[int] = (),
    session: int | None = None,
    names: Sequence[str] = (),
) -> Pick | Wait:
    """The deployment the next attempt goes to (see the module docstring for the order).
    ``session`` and the deployments' ``names``: the rule ``session`` ranks by them."""
    serving = [i for i, s in enumerate(states) if s.serving(now)]
    if not serving:
        i = min(range(len(states)), key=lambda j: (states[j].until, j))
        return Wait(max(0.0, states[i].until - now), i)
    fresh = [i for i in serving if i not in tried] or serving
    roomy = [i for i in fresh if not states[i].short(now)] or fresh
    if len(roomy) == 1 or balance == "ordered":
        i = roomy[0]
    elif balance == "least_busy":
        busy = list(inflight) + [0] * (len(states) - len(inflight))
        i = min(roomy, key=lambda j: (busy[j], j))
    elif balance == "session" and session is not None:
        i = affinity.pick(roomy, session, names, weights)
    else:
        i = _weighted(roomy, weights, rng)
    s = states[i]
    return Pick(i, probe=s.state == EJECTED)  # its ejection is over: this attempt probes it


def _weighted(candidates: list[int], weights: Sequence[float], rng: Rng) -> int:
    total = sum(max(weights[i], 0.0) for i in candidates)
    if total <= 0:
        return candidates[0]
    r = min(max(rng.random(), 0.0), 1.0) * total
    for i in candidates:
        r -= max(weights[i], 0.0)
        if r < 0:
            return i
    return candidates[-1]


def record(
    states: Sequence[DeploymentState],
    index: int,
    failure: Failure | None,
    rules: Rules,
    now: float,
    *,
    probe: bool = False,
    short_for: float | None = None,
) -> tuple[DeploymentState, Transition | None]:
    """The new state of deployment ``index`` after an attempt on it (``failure`` None: an
    answer; ``probe``: the attempt was :func:`choose`'s probe of an ejected deployment;
    ``short_for``: the answer's headers say it is short of headroom for that long)."""
    s = states[index]
    if failure is None:
        if not s.serving(now) and not (probe and s.state == EJECTED):
            # sent before it went out (or a probe, but it went out again since): it stays out
            short = max(s.short_until, now + short_for) if short_for else s.short_until
            return (s if short == s.short_until else replace(s, short_until=short)), None
        new = replace(
            s,
            until=0.0,
            state="",
            why="",
            streak=0,
            short_until=now + short_for if short_for else 0.0,
        )
        return new, (Transition("recovered", s.why) if s.state else None)
    category = failure.category
    seen = replace(s, last_error=category.value)
    if category in _COOL:
        hint = failure.retry_after
        seconds = min(rules.default_cooldown if hint is None else hint, rules.retry_after_cap)
        return _out(seen, COOLDOWN, category, seconds, now)
    if category in _TAKE_OUT:
        return _out(seen, OUT, category, rules.quota_cooldown, now)
    if category in _STREAK:
        streak = s.streak + 1
        if probe or (streak >= rules.eject_after and _may_eject(states, index, rules, now)):
            return _out(replace(seen, streak=streak), EJECTED, category, rules.eject_for, now)
        return replace(seen, streak=streak), None
    return seen, None


def probing(s: DeploymentState, now: float, lease: float) -> DeploymentState:
    """``s`` leased to the one probe :func:`choose` just picked: out of service for
    ``lease`` seconds (still ``EJECTED``, for the same reason), so that concurrent
    requests go to its siblings; :func:`record` of the probe then recovers or ejects it."""
    return replace(s, until=now + lease)


def _out(
    s: DeploymentState, state: str, category: Category, seconds: float, now: float
) -> tuple[DeploymentState, Transition]:
    until = max(s.until, now + seconds) if s.state == state else now + seconds
    return (
        replace(s, until=until, state=state, why=category.value, short_until=0.0),
        Transition(state, category.value, until - now),
    )


def _may_eject(states: Sequence[DeploymentState], index: int, rules: Rules, now: float) -> bool:
    """Outlier ejection never takes out more than ``max_ejected_percent`` of a model's
    deployments for server errors (a model-wide outage is the fallback chain's business)."""
    ejected = sum(
        1 for i, s in enumerate(states) if i != index and s.state == EJECTED and s.until > now
    )
    return (ejected + 1) * 100.0 <= rules.max_ejected_percent * len(states)


def sibling_in(
    states: Sequence[DeploymentState], failed: int, failure: Failure, now: float
) -> float | None:
    """Seconds until a deployment can take a retry of ``failure`` (0.0: one can now):
    another one, or the failed one itself once the cooldown this failure gave it ends
    (when every deployment is out, the earliest back); None when the failure is not one
    a sibling may answer, or the model has no other deployment. A failed deployment still
    in service (a first server error) while every sibling is out: None too, the retry
    backs off as usual (and goes to whichever serves then), never waiting out a
    sibling's cooldown."""
    if failure.category not in SIBLING_MAY_ANSWER or len(states) < 2:
        return None
    others = [max(0.0, s.until - now) for i, s in enumerate(states) if i != failed]
    mine = states[failed]
    if mine.serving(now):
        return 0.0 if min(others) == 0.0 else None
    return min([*others, mine.until - now])
