"""A streamed answer's head: what an attempt reads of a stream before it counts.

An attempt that streams is read up to its first event that is not a preamble (a comment,
a role-only chunk, ``message_start``...), at most :data:`MAX_HELD` events, within the
first-byte timeout. The stream ending, going silent or sending an error event there is a
failed attempt, recovered invisibly (the client has been sent nothing), and recovery
cost when its provider reported counts before it failed (:func:`reported`; an
Anthropic stream's ``message_start`` counts the prompt); past it, the relay
(:mod:`gateway.live.relay`) sends the held events and the rest.

The events are whole and in the client's format from the start: the splitter of an
attempt (:func:`splitter_for`) cuts the provider's bytes into events, translates them
when the provider speaks another format, and reads Bedrock's AWS event-stream frames.
Also here: a chat stream's usage chunk, which the gateway asks for when the client did
not (:func:`asks_usage`, :func:`with_usage`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.errors import Category, UpstreamFailure
from gateway.formats import sse
from gateway.formats.endpoints import Endpoint
from gateway.resilience.classify import transport_failure
from gateway.resilience.decide import FIRST_BYTE_TIMEOUT
from gateway.resilience.failure import Failure
from gateway.upstream.client import MAPPED, Response, failure
from gateway.upstream.deadlines import Limit

if TYPE_CHECKING:
    from gateway.formats.eventstream import EventStreamSplitter
    from gateway.formats.usage import Usage
    from gateway.live.context import Crossing
    from gateway.observe.tracing import StreamTrace
    from gateway.translate import convert as translate

    Splitter = sse.Splitter | translate.TranslatingSplitter | EventStreamSplitter

__all__ = [
    "MAX_HELD",
    "USAGE_CHUNK",
    "OpenStream",
    "asks_usage",
    "read_head",
    "reported",
    "splitter_for",
    "with_usage",
]

MAX_HELD = 64  # preamble events held back before the first real one, at most

#: The endpoints whose streams carry usage only when asked (``stream_options``).
USAGE_CHUNK = frozenset({Endpoint.chat, Endpoint.completions})


@dataclass(slots=True)
class OpenStream:
    """A streaming answer whose first events were read; the relay sends the rest."""

    resp: Response
    splitter: Splitter  # whole events, in the client's format
    head: list[sse.Event]
    trace: StreamTrace | None = None  # the attempt's span, ended by the relay (when traced)
    hide_usage: bool = False  # the usage chunk was the gateway's request: counted, not sent


def splitter_for(crossing: Crossing | None, eventstream: bool) -> Splitter:
    """What cuts an attempt's stream into the client's events: SSE as it comes; translated
    (``crossing``), with the usage chunk always written (the gateway counts it); out of AWS
    event-stream frames (``eventstream``: Bedrock)."""
    splitter: Splitter
    inner: translate.TranslatingSplitter | None = None
    if crossing is None:
        splitter = sse.Splitter()
    else:
        from gateway.translate import convert as translate

        splitter = inner = translate.TranslatingSplitter(
            crossing.upstream_fmt, crossing.client_fmt, crossing.model, True, crossing.names
        )
    if eventstream:  # Bedrock: AWS event-stream frames, as SSE events of the format
        from gateway.formats.eventstream import EventStreamSplitter

        splitter = EventStreamSplitter(inner)
    return splitter


async def read_head(
    resp: Response,
    splitter: Splitter,
    endpoint: Endpoint,
    first_byte: float,
    cap: int,
    head: list[sse.Event],
) -> Failure | None:
    """Read the stream's events into ``head`` up to its first that is not a preamble (or
    :data:`MAX_HELD`), within ``first_byte`` seconds; a failure (the response closed) when
    the stream ends or goes silent before, or holds an event over ``cap`` bytes (``head``
    then holds what came before it: :func:`reported` reads its counts)."""
    content = resp.content
    try:
        with Limit(first_byte):
            while all(sse.is_preamble(e) for e in head) and len(head) < MAX_HELD:
                piece = await content.readany()
                if not piece:
                    raise UpstreamFailure(
                        Category.connection,
                        "upstream stream ended before its first event",
                        "first_byte",
                    )
                head.extend(sse.classify_event(r, endpoint) for r in splitter.feed(piece))
                if len(splitter.pending) > cap:
                    raise UpstreamFailure(
                        Category.connection, f"upstream event over {cap} bytes", "first_byte"
                    )
    except (TimeoutError, UpstreamFailure, *MAPPED) as e:
        resp.close()
        if isinstance(e, TimeoutError):
            return Failure(
                Category.timeout,
                None,
                "no event before the first-byte timeout",
                code=FIRST_BYTE_TIMEOUT,
                stage=FIRST_BYTE_TIMEOUT,
            )
        u = failure(e, "first_byte")
        return transport_failure(u.category, u.message)
    return None


def reported(splitter: Splitter, events: Iterable[sse.Event], endpoint: Endpoint) -> Usage | None:
    """The counts an attempt's provider reported in its stream so far (None: none): those
    a translating splitter read, else those the stream's ``events`` carry (in the client's
    format, as the provider sent them: an Anthropic ``message_start``'s input tokens)."""
    u = splitter.usage
    if u is None:
        for e in events:
            if e.data is not None and (v := sse.usage_of(e.data, endpoint, u)) is not None:
                u = v
    return u


def asks_usage(body: dict[str, Any]) -> bool:
    """Whether a chat or completions stream request asks for the usage chunk."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def with_usage(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` asking for the stream's usage chunk (its other stream options kept)."""
    options = body.get("stream_options")
    kept = options if isinstance(options, dict) else {}
    return {**body, "stream_options": {**kept, "include_usage": True}}
