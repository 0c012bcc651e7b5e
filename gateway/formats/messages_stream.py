"""How the client's Anthropic Messages stream is read and a resumed one spliced into it
(:class:`MessagesStream`, the stream rules of :data:`gateway.formats.MESSAGES`).

Typed events: ``message_start`` (the id and model), content blocks by ``index``
(``content_block_start`` / ``_delta`` / ``_stop``; text in ``text_delta`` deltas),
``message_delta`` (the stop reason) and ``message_stop``. A resumed stream's blocks are
renumbered after the client's, its text block continues the open one. Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.formats.event_kinds import DATA, Kind
from gateway.formats.overlap import Diverged, Out
from gateway.formats.parts import is_tool, sizes, text_size

if TYPE_CHECKING:
    from gateway.formats.splice import Splice
    from gateway.formats.transcript import Transcript
    from gateway.formats.usage import Usage

_ENDS = ("message_delta", "message_stop")
#: What the model wrote in a content delta, by the delta's type
_WRITTEN = {"text_delta": "text", "input_json_delta": "partial_json", "thinking_delta": "thinking"}
_STARTED = ("text", "name")  # ... and in a block's start: its text, a tool's name


class MessagesStream:
    """Anthropic Messages streams: see the module docstring."""

    def stream_read(self, t: Transcript, obj: dict[str, Any], hold: bool = False) -> bool:
        if hold and self.stream_closes(t, obj):
            return True
        etype = obj.get("type")
        if etype == "message_start":
            message = obj.get("message") or {}
            if t.id is None:
                t.id = message.get("id")
                t.model = message.get("model")
        elif etype == "content_block_start":
            index = obj.get("index", 0)
            t.next_index = max(t.next_index, index + 1)
            kind = (obj.get("content_block") or {}).get("type")
            if kind == "text":
                t.text_index, t.text_open = index, True
                t.add((obj.get("content_block") or {}).get("text") or "")
            else:
                if is_tool(kind):
                    t.tool = True
                else:
                    t.open_other.add(index)
                t.other += self.stream_output(obj)
        elif etype == "content_block_delta":
            delta = obj.get("delta") or {}
            if obj.get("index") == t.text_index and delta.get("type") == "text_delta":
                t.add(delta.get("text") or "")
            else:
                t.other += self.stream_output(obj)
        elif etype == "content_block_stop":
            index = obj.get("index")
            if index == t.text_index:
                t.text_open = False
            if isinstance(index, int):
                t.open_other.discard(index)
        elif etype in _ENDS:
            t.closed = True
        return False

    def stream_output(self, obj: dict[str, Any]) -> int:
        etype = obj.get("type")
        if etype == "content_block_delta":
            delta = obj.get("delta")
            if type(delta) is dict and type(dtype := delta.get("type")) is str:
                value = delta.get(_WRITTEN.get(dtype, ""))
                if type(value) is str:
                    return text_size(value)
        elif etype == "content_block_start":
            block = obj.get("content_block")
            if type(block) is dict:
                return sizes(block, _STARTED)
        return 0

    def stream_closes(self, t: Transcript, obj: dict[str, Any]) -> bool:
        etype = obj.get("type")
        if etype == "content_block_stop":
            return obj.get("index") == t.text_index and t.text_open
        return etype in _ENDS

    def stream_resumable(self, t: Transcript) -> bool:
        return True

    def splice_event(self, s: Splice, obj: dict[str, Any], kind: Kind) -> Out | Diverged:
        etype = obj.get("type")
        index = obj.get("index")
        if etype == "message_start" or (etype == "ping" and not s.passed):
            return Out()  # a ping before anything passed is part of the preamble
        if etype == "content_block_start" and isinstance(index, int):
            return _block_start(s, obj, index, kind)
        if etype in ("content_block_delta", "content_block_stop") and isinstance(index, int):
            if index in s.drop:
                return Out()
            if index not in s.map:
                s.map[index] = s.next_index
                s.next_index += 1
            data = {**obj, "index": s.map[index]}
            if index != s.text_block:
                return Out([(data, kind)])
            if etype == "content_block_stop":
                return _end_text(s, [(data, kind)])
            delta = obj.get("delta") or {}
            if delta.get("type") != "text_delta":
                return Out([(data, kind)])
            got = s.pipe.push(delta.get("text") or "")
            if isinstance(got, Diverged):
                return got
            if not got:
                return Out()
            data["delta"] = {**delta, "text": got}
            return Out([(data, kind)])
        if etype in _ENDS:
            if etype == "message_delta" and s.base is not None:  # the parts' usage summed
                given = obj.get("usage")
                usage = anthropic_usage(given if isinstance(given, dict) else {}, s.total())
                return _end_text(s, [({**obj, "usage": usage}, kind)])
            out = _end_text(s, [])
            if not isinstance(out, Diverged):
                out.raw = True
            return out
        return Out(raw=True)


def anthropic_usage(block: dict[str, Any], u: Usage) -> dict[str, Any]:
    """A ``message_delta`` usage with the counts of ``u`` written over the provider's: the
    input ones too (they replace what ``message_start`` told the client)."""
    return {
        **block,
        "input_tokens": max(u.input - u.cache_read - u.cache_creation, 0),
        "cache_creation_input_tokens": u.cache_creation,
        "cache_read_input_tokens": u.cache_read,
        "output_tokens": u.output,
    }


def _text_delta(client_index: int, text: str) -> tuple[dict[str, Any], Kind]:
    delta = {"type": "text_delta", "text": text}
    return {"type": "content_block_delta", "index": client_index, "delta": delta}, DATA


def _block_start(s: Splice, obj: dict[str, Any], index: int, kind: Kind) -> Out | Diverged:
    block = obj.get("content_block") or {}
    btype = block.get("type")
    if btype == "text" and s.text_block is None:
        s.text_block = index
        events: list[tuple[dict[str, Any], Kind]] = []
        if s.t.text_open and s.t.text_index is not None:
            s.map[index] = s.t.text_index
        else:
            s.map[index] = s.next_index
            s.next_index += 1
            start = {**obj, "index": s.map[index], "content_block": {**block, "text": ""}}
            events.append((start, kind))
        got = s.pipe.push(block.get("text") or "")
        if isinstance(got, Diverged):
            return got
        if got:
            events.append(_text_delta(s.map[index], got))
        return Out(events)
    if s.text_block is None:
        thinking = btype in ("thinking", "redacted_thinking")
        return s.before_text(obj, "index", index, kind, f"{btype} block", thinking)
    return s.renumbered(obj, "index", index, kind)


def _end_text(s: Splice, events: list[tuple[dict[str, Any], Kind]]) -> Out | Diverged:
    """Flush what the pipe holds before the text block (or the message) ends."""
    if s.text_ended:
        return Out(events)
    s.text_ended = True
    tail = s.pipe.flush()
    if isinstance(tail, Diverged):
        return tail
    if tail and s.text_block is not None:
        events = [_text_delta(s.map[s.text_block], tail), *events]
    return Out(events)
