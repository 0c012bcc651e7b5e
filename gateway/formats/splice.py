"""Splicing a resumed upstream stream into the client's ongoing stream (docs/recovery.md,
Streams).

When a streamed answer breaks after some of it reached the client (or ends cut at
the token limit and is to be continued), the gateway starts a new upstream stream
and must make the client see one well-formed stream: the same ids and indexes,
no second preamble, and no character repeated or lost.

:class:`Transcript` records what the client has been sent on one stream: the text,
the ids (chat completion id, Anthropic message id, Responses response and item
ids), the indexes and the last Responses ``sequence_number``. :class:`Splice`
rewrites the events of a resumed stream so that they continue it:

- ``regenerate=False``: the resumed request carried the partial answer back
  (prefill or instruction form, :func:`~gateway.resilience.continuation.continuation_request`),
  so the new text is appended as it comes. Anthropic: the partial text was sent
  with its trailing whitespace trimmed; when the continuation starts with the
  whitespace the client already has, that whitespace is not sent again (the
  leading whitespace run of the continuation is dropped when it is not an
  extension of the whitespace already sent; see :class:`~gateway.formats.overlap.Pipe`);
- ``regenerate=True``: the new stream answers from scratch; its text is held back
  until it covers the text already sent, then only what follows is passed on. A
  regenerated text that differs from it, or ends before covering it, is
  :class:`Diverged`.

A :class:`Splice` keeps its transcript up to date with every event it lets
through (as rewritten), so a stream can be resumed again after a second failure:
do not :meth:`Transcript.observe` the spliced events yourself. The relay handles
``Kind.error`` and ``Kind.malformed`` events before feeding a splice (a splice
drops them); comments and ``[DONE]`` pass as they are.

What the client keeps seeing: the original ids, ``created`` and ``model`` (also
when the resume ran on the fallback model), the original choice / block / item
indexes, one preamble (the resumed stream's role chunk, ``message_start``, pings
before its text, ``response.created`` / ``in_progress`` / the message's
``output_item.added`` / ``content_part.added`` are dropped, and so are reasoning
deltas, thinking blocks and reasoning items that come before the resumed text
once the client has seen output). Responses ``sequence_number`` continues from
the last one sent, and the ``.done`` events and ``response.completed`` carry the
whole text and the original ids (``response.output`` is every item the client
saw completed). The usage a resumed stream reports is written as the sum of the
answer's parts (``base``, the parts before it, plus what this stream reported so far:
:meth:`Splice.total`): the chat usage chunk, Anthropic's ``message_delta`` (its input
counts too, since the resumed ``message_start`` is dropped) and the Responses final
event's ``response.usage``; the other events pass as they are.

An answer cut at the token limit can only be continued if its closing events
(:meth:`Transcript.closes`: the chat finish chunk, Anthropic's text
``content_block_stop`` / ``message_delta`` / ``message_stop``, the Responses
``.done`` events of the message and ``response.completed`` / ``incomplete``) were
held back: the relay keeps everything from the first closing event until the
final one, and drops it when it continues the answer. Exception: after an
Anthropic text block was closed, the continuation goes into a new text block.

Pure: no aiohttp, asyncio, time or random.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from gateway.formats.overlap import Diverged, Out, Pipe
from gateway.formats.sse import Event, Kind
from gateway.formats.transcript import (
    Transcript,
    TranscriptEndpoint,
    TranscriptRules,
    partial_response,
    sse_event,
)
from gateway.formats.usage import Usage

__all__ = ["Diverged", "Splice", "Transcript", "partial_response"]


class SpliceRules(TranscriptRules, Protocol):
    """What a splice asks of its stream's format (a :class:`~gateway.formats.Format`)."""

    @property
    def named_events(self) -> bool: ...
    @property
    def sequenced(self) -> bool: ...
    @property
    def trims_prefill(self) -> bool: ...
    def splice_event(self, s: Splice, obj: dict[str, Any], kind: Kind) -> Out | Diverged: ...


class SpliceEndpoint(TranscriptEndpoint, Protocol):
    """An endpoint as a splice reads it (a :class:`gateway.formats.endpoints.Endpoint`):
    declared here, so that the stream objects load no format."""

    @property
    def fmt(self) -> SpliceRules: ...


class Splice:
    """Adapts a resumed upstream stream so that it continues the client's stream. How
    each event is rewritten is the endpoint's format's
    (:meth:`~gateway.formats.Format.splice_event`); the fields are its state."""

    def __init__(
        self,
        transcript: Transcript,
        endpoint: SpliceEndpoint,
        *,
        regenerate: bool,
        base: Usage | None = None,
    ) -> None:
        if endpoint is not transcript.endpoint:
            raise ValueError("the splice and the transcript must be of the same endpoint")
        if endpoint.value == "/v1/embeddings":
            raise ValueError("embeddings are not streamed")
        fmt = endpoint.fmt
        self.t = transcript
        self.regenerate = regenerate
        # the usage of the answer's parts before this stream (None: usage passes as it
        # comes), and what this stream reported so far (set by the relay as it reads it)
        self.base = base
        self.usage: Usage | None = None
        self._rewrite = fmt.splice_event  # bound once per stream
        self._named = fmt.named_events
        self._sequenced = fmt.sequenced
        self.pipe = Pipe(transcript.text, regenerate, trim=fmt.trims_prefill)
        self.diverged: Diverged | None = None
        self._done = False
        self.passed = False  # an event of the resumed stream reached the client
        self.had_output = bool(transcript.text) or transcript.reasoning
        # resumed block (Anthropic) / output item (Responses) index -> client index; the
        # dropped ones; the client's next index
        self.map: dict[int, int] = {}
        self.drop: set[int] = set()
        self.next_index = transcript.next_index
        self.had_parts = transcript.next_index > 0  # the client was sent blocks / items
        # Anthropic
        self.text_block: int | None = None  # the resumed block that continues the text
        self.text_ended = False
        # Responses
        self.msg: int | None = None  # resumed output_index of the continuing message
        self.part: int | None = None  # resumed content_index of its output_text part
        self.part_to: int | None = None  # the client's content_index for it
        self.msg_id: str | None = transcript.item_id

    def renumbered(self, obj: dict[str, Any], key: str, index: int, kind: Kind) -> Out:
        """The block / item at ``index`` (the event's ``key``) numbered after the client's."""
        self.map[index] = self.next_index
        self.next_index += 1
        return Out([({**obj, key: self.map[index]}, kind)])

    def before_text(
        self, obj: dict[str, Any], key: str, index: int, kind: Kind, what: str, reasoning: bool
    ) -> Out | Diverged:
        """A block / item (``what``) the resumed stream starts before its text: reasoning
        is dropped once the client was sent blocks / items, a regenerated answer that is
        yet to cover the text sent diverges, anything else is :meth:`renumbered`."""
        if reasoning and self.had_parts:
            self.drop.add(index)
            return Out()
        if self.regenerate and not self.pipe.settled:
            return Diverged(f"regenerated answer starts a {what} before the text sent")
        return self.renumbered(obj, key, index, kind)

    def total(self) -> Usage:
        """The answer's usage so far: the parts before this stream and this stream's."""
        total = Usage() if self.usage is None else replace(self.usage)
        if self.base is not None:
            total.add(self.base)
        return total

    @property
    def done(self) -> bool:
        """The new stream's final event was passed on."""
        return self._done

    def feed(self, ev: Event) -> bytes | Diverged:
        """The bytes to send to the client for one event of the resumed stream."""
        if self.diverged is not None:
            return self.diverged
        if ev.kind in (Kind.error, Kind.malformed):
            return b""
        if ev.kind is Kind.comment:
            return ev.raw
        if ev.kind is Kind.done:
            self.t.observe(ev)
            return ev.raw
        obj = ev.data
        if not isinstance(obj, dict):
            return b""
        out: Out | Diverged = self._rewrite(self, obj, ev.kind)
        if isinstance(out, Diverged):
            self.diverged = out
            return out
        if ev.kind is Kind.final:
            self._done = True
        named = self._named
        chunks = []
        for data, kind in out.events:
            if self._sequenced:
                data["sequence_number"] = self.t.sequence_number + 1
            raw = sse_event(data, named)
            self.t.observe(Event(raw, kind, data))
            chunks.append(raw)
        if out.raw:
            self.t.observe(ev)
            chunks.append(ev.raw)
        self.passed = self.passed or bool(chunks)
        return b"".join(chunks)
