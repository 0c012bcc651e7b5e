"""How one upstream stream segment ended, and whether it stopped at the output limit.

Pure: the live relay (``gateway/live/relay.py``) and ``llm-gateway simulate`` both ask
these, so a simulated stream ends as a live one does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gateway.errors import Category
from gateway.formats.endpoints import Endpoint
from gateway.formats.sse import Event
from gateway.resilience.classify import transport_failure
from gateway.resilience.decide import DEADLINE_PASSED
from gateway.resilience.failure import Failure

#: The failure's message when the request's own deadline broke the stream.
DEADLINE_MESSAGE = "the request's deadline passed mid-stream"


def verdict(
    complete: bool,
    failure: Failure | None,
    diverged: bool,
    broken: tuple[Category, str] | None = None,
    deadline_passed: bool = False,
) -> Failure | None:
    """The segment's failure, None when it is complete.

    ``failure`` is an error event's; ``broken`` what stopped the reading (a reset, a
    silence, the deadline: ``deadline_passed``, then a final failure, never resumed).
    A stream that ends without its final event failed; a diverged resume did."""
    if broken is not None and not complete:
        failure = transport_failure(*broken)
        if deadline_passed:
            failure = replace(failure, stage=DEADLINE_PASSED)
    if diverged:
        return failure or transport_failure(Category.connection, "resume diverged")
    if failure is None and not complete:
        return transport_failure(
            Category.connection, "upstream stream ended before its final event"
        )
    return failure


def cut_at_length(events: Iterable[Event], ep: Endpoint) -> bool:
    """One of the (closing) events says the answer stopped at the output token limit
    (the endpoint's format decides: :meth:`gateway.formats.Format.event_cut`)."""
    cut = ep.fmt.event_cut
    return any(type(ev.data) is dict and cut(ev.data) for ev in events)
