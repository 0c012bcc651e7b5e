"""The provider's stream events simulate needs, in the client's format: made by the
scripted fake provider's own shapes (``gateway/testing``) and classified as the
relay classifies them, so the live verdicts apply to them unchanged."""

from __future__ import annotations

from gateway.formats import sse
from gateway.formats.endpoints import Endpoint
from gateway.policy.schema import Policy
from gateway.resilience.classify import classify_error_event
from gateway.resilience.failure import Failure
from gateway.testing import shapes


def error_event(ep: Endpoint, policy: Policy, now: float) -> tuple[bytes, Failure]:
    """The provider's error event in a stream of ``ep`` (as the scripted fake provider
    sends it), and its failure as the gateway classifies it."""
    ev = sse.classify_event(shapes.stream_error_event(ep.name, None, 0).encode(), ep)
    return ev.raw, classify_error_event(ev.data, rules=policy.classify, now=now)


def closing_events(ep: Endpoint, finish: str) -> list[sse.Event]:
    """The events that end a stream of ``ep`` (as the scripted fake provider sends them),
    classified as the relay classifies them."""
    a = shapes.FakeAnswer("sim", "sim", "x", finish, 1, 1, 0, chunks=1)
    if ep is Endpoint.messages:
        shaped = shapes.messages_events(a)
    elif ep is Endpoint.responses:
        shaped = shapes.responses_events(a, {})
    else:
        shaped = shapes.chat_events(a, include_usage=False)
    return [sse.classify_event(e.encode(), ep) for e in shaped[-3:]]
