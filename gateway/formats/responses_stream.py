"""How the client's OpenAI Responses stream is read and a resumed one spliced into it
(:class:`ResponsesStream`, the stream rules of :data:`gateway.formats.RESPONSES`).

Typed, numbered events (``sequence_number``): ``response.created`` (the ids), output
items by ``output_index`` (``output_item.added`` / ``.done``), the message item's
``output_text`` part (``content_part.added``, ``output_text.delta`` / ``.done``,
``content_part.done``), and a final ``response.completed`` / ``incomplete``. A resumed
stream's items are renumbered after the client's, its message continues the open one,
and the ``.done`` events and the final response carry the whole text. Pure.
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

_PREAMBLE = ("response.created", "response.in_progress", "response.queued")
_FINAL = ("response.completed", "response.incomplete")
_TEXT_DONE = ("response.output_text.done", "response.content_part.done")
_CLOSED = (*_FINAL, "response.failed")
_TEXT_DELTA = "response.output_text.delta"
_REFUSAL = "response.refusal.delta"
#: The events whose ``delta`` is what the model wrote: text, or other output (the usual
#: event first: a tuple, tested in order)
_WRITTEN = (
    _TEXT_DELTA, _REFUSAL, "response.function_call_arguments.delta",
    "response.reasoning_text.delta", "response.reasoning_summary_text.delta",
    "response.custom_tool_call_input.delta", "response.mcp_call_arguments.delta",
    "response.code_interpreter_call_code.delta",
)  # fmt: skip


class ResponsesStream:
    """OpenAI Responses streams: see the module docstring."""

    def stream_read(self, t: Transcript, obj: dict[str, Any], hold: bool = False) -> bool:
        if hold and self.stream_closes(t, obj):
            return True
        seq = obj.get("sequence_number")
        if isinstance(seq, int):
            t.sequence_number = max(t.sequence_number, seq)
        etype = obj.get("type")
        oi = obj.get("output_index")
        if etype in _PREAMBLE:
            if t.id is None:
                _read_ids(t, obj)
        elif etype == "response.output_item.added" and isinstance(oi, int):
            self._read_item_added(t, obj, oi)
        elif etype == "response.content_part.added" and oi == t.output_index:
            _read_part_added(t, obj)
        elif etype == _TEXT_DELTA:
            text = obj.get("delta") or ""
            t.add(text)
            if oi == t.output_index and obj.get("content_index") == t.content_index:
                t.part_text.append(text)
        elif etype in _WRITTEN:  # output besides the text
            t.other += self.stream_output(obj)
            if etype == _REFUSAL:
                t.non_text = True
        elif etype in _TEXT_DONE and oi == t.output_index:
            t.part_open, t.text_closed = False, True
        elif etype == "response.output_item.done" and isinstance(oi, int):
            _read_item_done(t, obj, oi)
        elif etype in _CLOSED:
            t.closed = True
        if isinstance(etype, str) and "function_call" in etype:
            t.tool = True
        return False

    def _read_item_added(self, t: Transcript, obj: dict[str, Any], oi: int) -> None:
        """An output item opened: the message (whose text the transcript follows), or any
        other item (a tool call, reasoning: output besides the text)."""
        t.next_index = max(t.next_index, oi + 1)
        item = obj.get("item") or {}
        kind = item.get("type")
        if kind == "message":
            t.item_id, t.output_index = item.get("id"), oi
            t.content_index, t.part_open, t.text_closed = None, False, False
            return
        if is_tool(kind):
            t.tool = True
        else:
            t.open_other.add(oi)
        t.other += self.stream_output(obj)

    def stream_output(self, obj: dict[str, Any]) -> int:
        etype = obj.get("type")
        if type(etype) is str:  # else not an event of the model's output
            if etype in _WRITTEN:
                delta = obj.get("delta")
                return text_size(delta) if type(delta) is str else 0
            if etype == "response.output_item.added":
                item = obj.get("item")
                return sizes(item, ("name",)) if type(item) is dict else 0  # a call's name
        return 0

    def stream_closes(self, t: Transcript, obj: dict[str, Any]) -> bool:
        etype = obj.get("type")
        if etype in _TEXT_DONE:
            return obj.get("output_index") == t.output_index
        if etype == "response.output_item.done":
            return (obj.get("item") or {}).get("type") == "message"
        return etype in _FINAL

    def stream_resumable(self, t: Transcript) -> bool:
        return not t.text_closed

    def splice_event(self, s: Splice, obj: dict[str, Any], kind: Kind) -> Out | Diverged:
        etype = obj.get("type")
        oi = obj.get("output_index")
        t = s.t
        if etype == "response.output_item.added" and isinstance(oi, int):
            return _item_added(s, obj, oi, kind)
        if etype in _PREAMBLE or (isinstance(oi, int) and oi in s.drop):
            return Out()
        data = dict(obj)
        if isinstance(oi, int):  # renumbered after the client's items
            data["output_index"] = s.map[oi] if oi in s.map else _new_index(s, oi)
        ours = isinstance(oi, int) and oi == s.msg
        if ours and "item_id" in data:
            data["item_id"] = s.msg_id
        mine = ours and obj.get("content_index") == s.part
        if etype == "response.content_part.added" and ours:
            return _part_added(s, obj, data, kind)
        if mine:
            data["content_index"] = s.part_to
        if etype == "response.output_text.delta" and mine:
            got = s.pipe.push(obj.get("delta") or "")
            if isinstance(got, Diverged):
                return got
            if not got:
                return Out()
            if got != obj.get("delta"):
                data["logprobs"] = []
            data["delta"] = got
            return Out([(data, kind)])
        if etype == "response.output_text.done" and mine:
            return _text_done(s, data, kind)
        if etype == "response.content_part.done" and mine:
            data["part"] = {**(obj.get("part") or {}), "text": "".join(t.part_text)}
            return Out([(data, kind)])
        if etype == "response.output_item.done" and ours:
            data["item"] = _message_done(s, obj)
            return Out([(data, kind)])
        if etype in _FINAL:
            return _ended(s, data, kind)
        return Out([(data, kind)])


def _read_ids(t: Transcript, obj: dict[str, Any]) -> None:
    """The response's id, time and model, from the first event of the stream's preamble."""
    response = obj.get("response") or {}
    t.id = response.get("id")
    t.created = response.get("created_at")
    t.model = response.get("model")


def _read_part_added(t: Transcript, obj: dict[str, Any]) -> None:
    """A content part opened in the message: its text part, or output that is not text."""
    part = obj.get("part") or {}
    if part.get("type") == "output_text" and t.content_index is None:
        t.content_index, t.part_open = obj.get("content_index"), True
        t.part_text = []
    else:
        t.non_text = True


def _read_item_done(t: Transcript, obj: dict[str, Any], oi: int) -> None:
    """An output item closed: kept whole for the final response."""
    t.done_items[oi] = obj.get("item")
    t.open_other.discard(oi)
    if oi == t.output_index:
        t.text_closed = True


def _item_added(s: Splice, obj: dict[str, Any], oi: int, kind: Kind) -> Out | Diverged:
    item = obj.get("item") or {}
    itype = item.get("type")
    if itype == "message" and s.msg is None:
        s.msg = oi
        if s.t.item_id is not None and not s.t.text_closed:
            s.map[oi] = s.t.output_index if s.t.output_index is not None else 0
            return Out()
        s.msg_id = item.get("id")
        return s.renumbered(obj, "output_index", oi, kind)
    if s.msg is None:
        reasoning = itype == "reasoning"
        return s.before_text(obj, "output_index", oi, kind, f"{itype} item", reasoning)
    return s.renumbered(obj, "output_index", oi, kind)


def _new_index(s: Splice, oi: int) -> int:
    """The number of the resumed stream's item ``oi``, first seen: the next after the
    client's items."""
    s.map[oi] = n = s.next_index
    s.next_index += 1
    return n


def _part_added(s: Splice, obj: dict[str, Any], data: dict[str, Any], kind: Kind) -> Out:
    """A content part opened in the resumed message: its text part continues the client's
    open one (the event dropped), or numbers after it."""
    part = obj.get("part") or {}
    if part.get("type") == "output_text" and s.part is None:
        s.part = obj.get("content_index")
        if s.t.part_open:
            s.part_to = s.t.content_index
            return Out()
        s.part_to = s.part
    return Out([(data, kind)])


def _message_done(s: Splice, obj: dict[str, Any]) -> dict[str, Any]:
    """The message item closed: the client's id, and its text part's whole text."""
    item = dict(obj.get("item") or {})
    item["id"] = s.msg_id
    text = "".join(s.t.part_text)
    item["content"] = [
        {**p, "text": text} if isinstance(p, dict) and p.get("type") == "output_text" else p
        for p in item.get("content") or []
    ]
    return item


def _text_done(s: Splice, data: dict[str, Any], kind: Kind) -> Out | Diverged:
    tail = s.pipe.flush()
    if isinstance(tail, Diverged):
        return tail
    events: list[tuple[dict[str, Any], Kind]] = []
    if tail:
        delta: dict[str, Any] = {
            "type": "response.output_text.delta",
            "item_id": data.get("item_id"),
            "output_index": data.get("output_index"),
            "content_index": data.get("content_index"),
            "delta": tail,
            "logprobs": [],
        }
        events.append((delta, DATA))
    whole = "".join(s.t.part_text) + tail
    events.append(({**data, "text": whole}, kind))
    return Out(events)


def responses_usage(block: dict[str, Any], u: Usage) -> dict[str, Any]:
    """A Responses ``usage`` block with the counts of ``u`` written over the provider's."""
    cached: dict[str, Any] = {"cached_tokens": u.cache_read}
    if u.cache_creation:
        cached["cache_write_tokens"] = u.cache_creation
    out = {
        **block,
        "input_tokens": u.input,
        "output_tokens": u.output,
        "total_tokens": u.input + u.output,
        "input_tokens_details": {**(block.get("input_tokens_details") or {}), **cached},
    }
    if u.reasoning is not None:
        done = block.get("output_tokens_details") or {}
        out["output_tokens_details"] = {**done, "reasoning_tokens": u.reasoning}
    return out


def _ended(s: Splice, data: dict[str, Any], kind: Kind) -> Out | Diverged:
    """The final event, with the client's ids and the whole output; a regenerated answer
    that ends before covering the text already sent has diverged."""
    if s.regenerate and not s.pipe.settled:
        return Diverged("regenerated answer ended before covering the text sent")
    return Out([(_final(s, data), kind)])


def _final(s: Splice, data: dict[str, Any]) -> dict[str, Any]:
    t = s.t
    response = dict(data.get("response") or {})
    if t.id is not None:
        response["id"] = t.id
        response["created_at"] = t.created
        response["model"] = t.model
    if t.done_items:
        response["output"] = [t.done_items[k] for k in sorted(t.done_items)]
    if "output_text" in response:
        response["output_text"] = t.text
    if s.base is not None and isinstance(usage := response.get("usage"), dict):
        response["usage"] = responses_usage(usage, s.total())
    data["response"] = response
    return data
