"""What the client has been sent on one stream (docs/recovery.md, Streams): the
:class:`Transcript`.

It records the text, the ids (chat completion id, Anthropic message id, Responses
response and item ids), the indexes and the last Responses ``sequence_number``, so
that a resumed or continued answer can be spliced into the same stream
(:mod:`gateway.formats.splice`). :func:`partial_response` turns it into the earlier part of a
continuation request.

Pure: no aiohttp, asyncio, time or random.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from gateway.formats.parts import text_size
from gateway.formats.sse import DATA, DONE, FINAL, Event, Kind


class TranscriptRules(Protocol):
    """What a transcript asks of its stream's format (a :class:`~gateway.formats.Format`)."""

    def stream_read(self, t: Transcript, obj: dict[str, Any], hold: bool = False) -> bool: ...
    def stream_closes(self, t: Transcript, obj: dict[str, Any]) -> bool: ...
    def stream_resumable(self, t: Transcript) -> bool: ...
    def text_answer(
        self, text: str, *, id: Any, model: Any, created: Any, index: int, item_id: Any
    ) -> dict[str, Any]: ...


class TranscriptEndpoint(Protocol):
    """An endpoint as a transcript reads it (a :class:`gateway.formats.endpoints.Endpoint`):
    declared here, so that the stream objects load no format."""

    @property
    def value(self) -> str: ...
    @property
    def fmt(self) -> TranscriptRules: ...
    @property
    def text_key(self) -> str: ...
    @property
    def continuable(self) -> bool: ...


#: What reading an event with a field of the wrong type raises.
UNREADABLE = (AttributeError, TypeError, ValueError, KeyError, IndexError)


def sse_event(data: dict[str, Any], named: bool) -> bytes:
    head = b"event: " + str(data.get("type", "")).encode() + b"\n" if named else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


class Transcript:
    """What the client has been sent so far on one stream (fed every event the relay
    forwards). How an event is read is the endpoint's format's
    (:meth:`~gateway.formats.Format.stream_read`); the fields are what the formats record."""

    def __init__(self, endpoint: TranscriptEndpoint) -> None:
        self.endpoint = endpoint
        fmt = endpoint.fmt
        # the format's readers, bound once per stream
        self._read = fmt.stream_read
        self._closes = fmt.stream_closes
        self.text_key = endpoint.text_key  # where a chat choice holds its text
        self.parts: list[str] = []  # the text deltas (:attr:`text` joins them)
        # the other output sent (reasoning, refusals, tool calls), in the estimate's units
        self.other = 0
        self.id: str | None = None
        self.model: Any = None
        self.created: Any = None  # chat/completions ``created``; Responses ``created_at``
        self.fingerprint: Any = None  # chat ``system_fingerprint`` (None when absent)
        self.has_fingerprint = False
        self.choice_index: int | None = None
        self.multiple_choices = False
        self.tool = False  # a tool / function call was sent
        self.non_text = False  # a refusal or another non-text part was sent
        self.reasoning = False  # chat: reasoning deltas were sent
        self.closed = False  # the answer's closing or final events were sent
        self.unreadable = False  # an event with a field of the wrong type was sent
        self.open_other: set[int] = set()  # open non-text blocks / items
        self.next_index = 0  # after the last block (Anthropic) / output item (Responses)
        # Anthropic
        self.text_index: int | None = None  # the current (or last) text block
        self.text_open = False
        # Responses
        self.item_id: str | None = None  # the message item
        self.output_index: int | None = None
        self.content_index: int | None = None  # the output_text part
        self.part_open = False
        self.text_closed = False
        self.part_text: list[str] = []
        self.done_items: dict[int, Any] = {}
        self.sequence_number = -1

    @property
    def text(self) -> str:
        """The assistant text sent so far (all text deltas joined; a text of another type
        the provider sent is not text, and leaves the answer :attr:`unreadable`)."""
        parts = self.parts
        try:
            text = "".join(parts)
        except TypeError:
            self.unreadable = True
            text = "".join(p for p in parts if type(p) is str)
        self.parts = [text] if text else []
        return text

    @property
    def output(self) -> int:
        """The size of the output sent so far, text and :attr:`other`, in the token
        estimate's units (:func:`~gateway.formats.parts.text_size`)."""
        return text_size(self.text) + self.other

    @property
    def resumable(self) -> bool:
        """Whether a resumed stream can continue this one (see the module docstring)."""
        if (
            self.id is None
            or self.closed
            or self.tool
            or self.non_text
            or self.open_other
            or self.unreadable
        ):
            return False
        return self.endpoint.fmt.stream_resumable(self)

    def add(self, text: str) -> None:
        """Record a text delta (an empty one is none)."""
        if text:
            self.parts.append(text)

    def choose(self, index: Any) -> None:
        """Record the choice index an event is of (a second one: several choices)."""
        if index != self.choice_index:
            if self.choice_index is None:
                self.choice_index = index
            else:
                self.multiple_choices = True

    def observe(self, ev: Event) -> None:
        """Record one event the client was sent (``ev.data`` decoded, None for comments)."""
        kind = ev.kind
        if kind is DONE:
            self.closed = True
            return
        obj = ev.data
        if (kind is DATA or kind is FINAL) and isinstance(obj, dict):
            try:
                self._read(self, obj)  # not a comment, an error or a malformed event
            except UNREADABLE:
                self.unreadable = True

    def closes(self, ev: Event) -> bool:
        """True for an event that ends the answer's text.

        A relay that may continue an answer cut at the token limit holds these back
        until the final event tells whether it was cut: once one is sent, the stream
        is no longer resumable.
        """
        kind = ev.kind
        if kind is FINAL or kind is DONE:
            return True
        obj = ev.data
        try:
            return isinstance(obj, dict) and self._closes(self, obj)
        except UNREADABLE:
            self.unreadable = True
            return False

    def record(self, kind: Kind, obj: Any) -> bool:
        """:meth:`observe` the event of ``kind`` and data ``obj`` unless it :meth:`closes` the
        answer: then True, and nothing recorded (the relay holds it back). One call for the
        relay's usual event, which it does not make an :class:`Event` of."""
        if kind is not DATA:
            return kind is FINAL or kind is DONE  # a comment: nothing to record
        if not isinstance(obj, dict):
            return False
        try:  # costs nothing unless a provider sent a field of the wrong type
            return self._read(self, obj, True)
        except UNREADABLE:  # passed on as it came; what was sent can no longer be resumed
            self.unreadable = True
        return False


def partial_response(transcript: Transcript) -> dict[str, Any]:
    """A minimal non-streaming answer of the endpoint's format holding the text sent so far
    (:meth:`~gateway.formats.Format.text_answer`).

    It is what :func:`~gateway.resilience.continuation.continuation_request` needs as the
    earlier part.
    """
    t = transcript
    if not t.endpoint.continuable:
        raise ValueError(f"no continuation request for {t.endpoint.value}")
    return t.endpoint.fmt.text_answer(
        t.text,
        id=t.id,
        model=t.model,
        created=t.created,
        index=t.choice_index or 0,
        item_id=t.item_id,
    )
