"""The ``summarize`` compaction step's own call: whether to make a try, and on which
deployment of the summary model (docs/compaction.md, ``summarize``). Pure: the engine
asks :func:`next_try` before every try, with what :func:`gateway.resilience.deployments.choose`
answered for it, and carries out the answer.

The call has its own deadline (``compaction.summarize_timeout`` for every try together,
never past the request's) and at most :data:`TRIES` tries. After a failure it is tried
again when a retry can help the failure, or when the failure belongs to one deployment
(a revoked key, an exhausted quota) and another deployment serves now; it never waits
for a deployment that is out.

Outcomes::

    Ask(pick, within)    call the deployment ``pick``; the answer is due within ``within`` s
    NoSummary(error)     the step fails: ``error`` is the event's ``error`` field
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.resilience.decide import NO_DEPLOYMENT
from gateway.resilience.deployments import SIBLING_MAY_ANSWER, Pick, Wait
from gateway.resilience.failure import Failure

TRIES = 2  # the summary call and at most one retry
TIMEOUT = "timeout"  # the call's deadline passed


@dataclass(frozen=True, slots=True)
class Ask:
    pick: Pick  # the deployment of the summary model (``probe``: its ejection is over)
    within: float  # seconds left before the call's deadline


@dataclass(frozen=True, slots=True)
class NoSummary:
    error: str  # a failure category, TIMEOUT or NO_DEPLOYMENT


def next_try(
    tries: int, last: Failure | None, failed: int, pick: Pick | Wait, left: float
) -> Ask | NoSummary:
    """The next try of the summary call: ``tries`` made so far, ``last`` the failure of
    the last one (None before the first) on deployment ``failed``, ``pick`` the deployment
    choice for this try, ``left`` the seconds before the call's deadline."""
    if last is not None:
        if tries >= TRIES:
            return NoSummary(last.category.value)
        elsewhere = isinstance(pick, Pick) and pick.index != failed
        if last.category.never_retried and not (elsewhere and last.category in SIBLING_MAY_ANSWER):
            return NoSummary(last.category.value)
    if left <= 0:
        return NoSummary(TIMEOUT)
    if isinstance(pick, Wait):
        return NoSummary(NO_DEPLOYMENT if last is None else last.category.value)
    return Ask(pick, left)
