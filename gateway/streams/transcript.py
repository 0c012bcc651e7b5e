"""What the client has been sent on one stream (docs/recovery.md, Streams): the
:class:`Transcript`.

It records the text, the ids (chat completion id, Anthropic message id, Responses
response and item ids), the indexes and the last Responses ``sequence_number``, so
that a resumed or continued answer can be spliced into the same stream
(:mod:`gateway.streams.splice`). :func:`partial_response` turns it into the earlier part of a
continuation request.

Pure: no aiohttp, asyncio, time or random.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import orjson

from gateway.providers import Endpoint
from gateway.streams.sse import DATA, DONE, FINAL, Event, Kind

_TOOL_SUFFIXES = ("tool_use", "_call", "tool_result")
#: What reading an event with a field of the wrong type raises.
UNREADABLE = (AttributeError, TypeError, ValueError, KeyError, IndexError)
_CHOICE = itemgetter("index", "delta", "finish_reason")  # of a chat choice


def is_tool(kind: Any) -> bool:
    return isinstance(kind, str) and kind.endswith(_TOOL_SUFFIXES)


def sse_event(data: dict[str, Any], named: bool) -> bytes:
    head = b"event: " + str(data.get("type", "")).encode() + b"\n" if named else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


class Transcript:
    """What the client has been sent so far on one stream (fed every event the relay forwards)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        # which reader applies, decided once (an enum member lookup is slow on 3.11)
        self._messages = endpoint is Endpoint.messages
        self._responses = endpoint is Endpoint.responses
        self._completions = endpoint is Endpoint.completions
        self._typed = self._messages or self._responses  # else chat or completions: choices
        self._parts: list[str] = []
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
        # Anthropic
        self.text_index: int | None = None  # the current (or last) text block
        self.text_open = False
        self.next_index = 0
        # Responses
        self.item_id: str | None = None  # the message item
        self.output_index: int | None = None
        self.content_index: int | None = None  # the output_text part
        self.part_open = False
        self.text_closed = False
        self.part_text: list[str] = []
        self.next_output = 0
        self.done_items: dict[int, Any] = {}
        self.sequence_number = -1

    @property
    def text(self) -> str:
        """The assistant text sent so far (all text deltas joined; a text of another type
        the provider sent is not text, and leaves the answer :attr:`unreadable`)."""
        parts = self._parts
        try:
            text = "".join(parts)
        except TypeError:
            self.unreadable = True
            text = "".join(p for p in parts if type(p) is str)
        self._parts = [text] if text else []
        return text

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
        if self.endpoint in (Endpoint.chat, Endpoint.completions):
            return not self.multiple_choices and not (self.reasoning and not self.text)
        if self.endpoint is Endpoint.responses:
            return not self.text_closed
        return self.endpoint is Endpoint.messages

    def _add(self, text: str) -> None:
        if text:
            self._parts.append(text)

    def observe(self, ev: Event) -> None:
        """Record one event the client was sent (``ev.data`` decoded, None for comments)."""
        kind = ev.kind
        if kind is DONE:
            self.closed = True
            return
        obj = ev.data
        if (kind is DATA or kind is FINAL) and isinstance(obj, dict):
            try:
                self._read(obj)  # not a comment, an error or a malformed event
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
            return isinstance(obj, dict) and self._closes(obj)
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
            if self._typed:
                if self._closes(obj):
                    return True
                self._read(obj)
                return False
            choices = obj.get("choices")  # chat, inline (the usual event): what _closes says
            if not choices and isinstance(choices, list) and obj.get("usage") is not None:
                return True
            self._observe_chat(obj, choices)
        except UNREADABLE:  # passed on as it came; what was sent can no longer be resumed
            self.unreadable = True
        return False

    def _read(self, obj: dict[str, Any]) -> None:
        if self._messages:
            self._observe_messages(obj)
        elif self._responses:
            self._observe_responses(obj)
        else:
            self._observe_chat(obj, obj.get("choices"))

    def _closes(self, obj: dict[str, Any]) -> bool:
        if self._messages:
            etype = obj.get("type")
            if etype == "content_block_stop":
                return obj.get("index") == self.text_index and self.text_open
            return etype in ("message_delta", "message_stop")
        if self._responses:
            etype = obj.get("type")
            if etype in ("response.output_text.done", "response.content_part.done"):
                return obj.get("output_index") == self.output_index
            if etype == "response.output_item.done":
                return (obj.get("item") or {}).get("type") == "message"
            return etype in ("response.completed", "response.incomplete")
        choices = obj.get("choices")
        return isinstance(choices, list) and not choices and obj.get("usage") is not None

    # --- chat and legacy completions ---

    def _observe_chat(self, obj: dict[str, Any], choices: Any) -> None:
        """Record a chat (or legacy completions) chunk; ``choices``: its ``choices``."""
        if self.id is None and isinstance(obj.get("id"), str):
            self.id = obj["id"]
            self.created = obj.get("created")
            self.model = obj.get("model")
            self.has_fingerprint = "system_fingerprint" in obj
            self.fingerprint = obj.get("system_fingerprint")
        if not choices:
            if isinstance(choices, list) and obj.get("usage") is not None:
                self.closed = True
            return
        if not isinstance(choices, list):
            return
        if self._completions:
            self._observe_texts(choices)
            return
        for c in choices:
            try:  # the usual choice has these keys: a C call fetches the three
                index, delta, finish = _CHOICE(c)
            except (KeyError, TypeError):  # a key missing, or not a dict at all
                self._observe_choice(c)
                continue
            if index != self.choice_index:
                self._choose(index)
            if finish:
                self.closed = True
            if isinstance(delta, dict):
                content = delta.get("content")
                if isinstance(content, str):
                    if content:
                        self._parts.append(content)
                    if len(delta) == 1:
                        continue  # the usual chunk: text and nothing else
                self._observe_delta(delta)

    def _observe_choice(self, c: Any) -> None:
        """A chat choice in any shape (the general path of :meth:`_observe_chat`)."""
        if not isinstance(c, dict):
            return
        self._choose(c.get("index", 0))
        if c.get("finish_reason"):
            self.closed = True
        delta = c.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str):
                self._add(content)
            self._observe_delta(delta)

    def _choose(self, index: Any) -> None:
        if index != self.choice_index:
            if self.choice_index is None:
                self.choice_index = index
            else:
                self.multiple_choices = True

    def _observe_delta(self, delta: dict[str, Any]) -> None:
        if delta.get("tool_calls") or delta.get("function_call"):
            self.tool = True
        if delta.get("refusal"):
            self.non_text = True
        if delta.get("reasoning_content") or delta.get("reasoning"):
            self.reasoning = True

    def _observe_texts(self, choices: list[Any]) -> None:
        """The choices of a legacy completions chunk: text, no delta."""
        for c in choices:
            if not isinstance(c, dict):
                continue
            self._choose(c.get("index", 0))
            if c.get("finish_reason"):
                self.closed = True
            if isinstance(c.get("text"), str):
                self._add(c["text"])

    # --- Anthropic Messages ---

    def _observe_messages(self, obj: dict[str, Any]) -> None:
        etype = obj.get("type")
        if etype == "message_start":
            message = obj.get("message") or {}
            if self.id is None:
                self.id = message.get("id")
                self.model = message.get("model")
        elif etype == "content_block_start":
            index = obj.get("index", 0)
            self.next_index = max(self.next_index, index + 1)
            kind = (obj.get("content_block") or {}).get("type")
            if kind == "text":
                self.text_index, self.text_open = index, True
                self._add((obj.get("content_block") or {}).get("text") or "")
            elif is_tool(kind):
                self.tool = True
            else:
                self.open_other.add(index)
        elif etype == "content_block_delta":
            delta = obj.get("delta") or {}
            if obj.get("index") == self.text_index and delta.get("type") == "text_delta":
                self._add(delta.get("text") or "")
        elif etype == "content_block_stop":
            index = obj.get("index")
            if index == self.text_index:
                self.text_open = False
            if isinstance(index, int):
                self.open_other.discard(index)
        elif etype in ("message_delta", "message_stop"):
            self.closed = True

    # --- OpenAI Responses ---

    def _observe_responses(self, obj: dict[str, Any]) -> None:
        seq = obj.get("sequence_number")
        if isinstance(seq, int):
            self.sequence_number = max(self.sequence_number, seq)
        etype = obj.get("type")
        oi = obj.get("output_index")
        if etype in ("response.created", "response.in_progress", "response.queued"):
            response = obj.get("response") or {}
            if self.id is None:
                self.id = response.get("id")
                self.created = response.get("created_at")
                self.model = response.get("model")
        elif etype == "response.output_item.added" and isinstance(oi, int):
            self.next_output = max(self.next_output, oi + 1)
            item = obj.get("item") or {}
            kind = item.get("type")
            if kind == "message":
                self.item_id, self.output_index = item.get("id"), oi
                self.content_index, self.part_open, self.text_closed = None, False, False
            elif is_tool(kind):
                self.tool = True
            else:
                self.open_other.add(oi)
        elif etype == "response.content_part.added" and oi == self.output_index:
            part = obj.get("part") or {}
            if part.get("type") == "output_text" and self.content_index is None:
                self.content_index, self.part_open = obj.get("content_index"), True
                self.part_text = []
            else:
                self.non_text = True
        elif etype == "response.output_text.delta":
            text = obj.get("delta") or ""
            self._add(text)
            if oi == self.output_index and obj.get("content_index") == self.content_index:
                self.part_text.append(text)
        elif etype in ("response.output_text.done", "response.content_part.done"):
            if oi == self.output_index:
                self.part_open, self.text_closed = False, True
        elif etype == "response.output_item.done" and isinstance(oi, int):
            self.done_items[oi] = obj.get("item")
            self.open_other.discard(oi)
            if oi == self.output_index:
                self.text_closed = True
        elif etype == "response.refusal.delta":
            self.non_text = True
        elif etype in ("response.completed", "response.incomplete", "response.failed"):
            self.closed = True
        if isinstance(etype, str) and "function_call" in etype:
            self.tool = True


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
