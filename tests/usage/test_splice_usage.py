"""A resumed stream's usage events tell the client the answer's parts summed
(gateway/formats/splice.py and each format's ``splice_event``): pure, no sockets."""

from __future__ import annotations

import orjson
import pytest

from gateway.formats import sse
from gateway.formats.endpoints import Endpoint
from gateway.formats.splice import Splice
from gateway.formats.usage import Usage, from_anthropic, from_chat, from_responses, update_anthropic
from tests.test_resume import ENDPOINTS, T, answer, check, continuation, cut, parse, upstream

pytestmark = pytest.mark.fast

BASE = Usage(100, 16, cache_read=30, cache_creation=5, reasoning=2)  # the parts before


def client_usage(body: bytes, endpoint: Endpoint) -> Usage:
    """The usage the client's SDK ends up with, read from its whole stream."""
    objs = [e.data for e in parse(body, endpoint) if isinstance(e.data, dict)]
    if endpoint is Endpoint.chat:
        (u,) = [o["usage"] for o in objs if o.get("usage")]
        return from_chat(u)
    if endpoint is Endpoint.messages:
        (start,) = [o for o in objs if o["type"] == "message_start"]
        usage = from_anthropic(start["message"]["usage"])
        for o in objs:
            if o["type"] == "message_delta":
                update_anthropic(usage, o["usage"])
        return usage
    (final,) = [o for o in objs if o["type"] == "response.completed"]
    return from_responses(final["response"]["usage"])


def resumed(endpoint: Endpoint, base: Usage | None) -> tuple[bytes, Usage]:
    """A stream cut after 3 deltas and continued; the client's bytes and the resumed
    stream's own usage (as the relay reads it and hands it to the splice)."""
    t, head = cut(endpoint, T, 3)
    rest = continuation(endpoint, T, t.text)
    sp = Splice(t, endpoint, regenerate=False, base=base)
    own: Usage | None = None
    out = [head]
    for ev, _ in upstream(endpoint, answer(endpoint, rest, new=True)):
        u = sse.usage_of(ev.data, endpoint, own)
        if u is not None:
            own = sp.usage = u
        got = sp.feed(ev)
        assert isinstance(got, bytes)
        out.append(got)
    assert own is not None
    return b"".join(out), own


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_the_resumed_usage_events_carry_the_sum(endpoint: Endpoint) -> None:
    """The client's final usage is the earlier parts' plus the resumed stream's, cache reads
    and writes included; the stream is still the whole answer, well formed."""
    body, own = resumed(endpoint, BASE)
    assert check(body, endpoint) == T
    got = client_usage(body, endpoint)
    assert (got.input, got.output) == (BASE.input + own.input, BASE.output + own.output)
    assert (got.cache_read, got.cache_creation) == (30, 5)
    if endpoint is not Endpoint.messages:  # Anthropic has no reasoning count
        assert got.reasoning == 2 + (own.reasoning or 0)


def test_the_chat_total_is_the_sum_too() -> None:
    """The chat usage chunk's total_tokens is its prompt plus completion, summed."""
    body, own = resumed(Endpoint.chat, BASE)
    (u,) = [e.data["usage"] for e in parse(body, Endpoint.chat) if (e.data or {}).get("usage")]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] == 126 + own.output


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_without_a_base_usage_passes_as_it_came(endpoint: Endpoint) -> None:
    """A splice given no earlier parts leaves the usage events as the provider sent them."""
    body, own = resumed(endpoint, None)
    got = client_usage(body, endpoint)
    if endpoint is Endpoint.messages:  # the resumed message_start is dropped: the original's
        assert got.output == own.output
    else:
        assert (got.input, got.output) == (own.input, own.output)
    assert (got.cache_read, got.cache_creation) == (0, 0)


def test_a_resumed_message_delta_with_usage_of_the_wrong_type_still_passes() -> None:
    """A provider's ``message_delta`` whose ``usage`` is not an object: the spliced event
    carries the parts' sum all the same, and the stream goes on (no unreadable event)."""
    t, _ = cut(Endpoint.messages, T, 3)
    sp = Splice(t, Endpoint.messages, regenerate=False, base=BASE)
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": "x"}
    (event,) = parse(
        b"event: message_delta\ndata: " + orjson.dumps(delta) + b"\n\n", Endpoint.messages
    )
    got = sp.feed(event)
    assert isinstance(got, bytes)
    (out,) = [e.data for e in parse(got, Endpoint.messages) if e.data]
    assert out["usage"]["output_tokens"] == BASE.output
