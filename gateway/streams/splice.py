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
  extension of the whitespace already sent; see :class:`~gateway.streams.overlap.Pipe`);
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
saw completed). Usage is the resumed stream's own (the broken stream never told
its count).

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

import copy
from dataclasses import dataclass, field
from typing import Any

from gateway.providers import Endpoint
from gateway.streams.overlap import Diverged, Pipe
from gateway.streams.sse import Event, Kind
from gateway.streams.transcript import Transcript, partial_response, sse_event

__all__ = ["Diverged", "Splice", "Transcript", "partial_response"]


@dataclass(slots=True)
class _Out:
    """What to send for one upstream event: rewritten events, then (``raw``) the event as is."""

    events: list[tuple[dict[str, Any], Kind]] = field(default_factory=list)
    raw: bool = False


class Splice:
    """Adapts a resumed upstream stream so that it continues the client's stream."""

    def __init__(self, transcript: Transcript, endpoint: Endpoint, *, regenerate: bool) -> None:
        if endpoint is not transcript.endpoint:
            raise ValueError("the splice and the transcript must be of the same endpoint")
        if endpoint is Endpoint.embeddings:
            raise ValueError("embeddings are not streamed")
        self.t = transcript
        self.endpoint = endpoint
        self.regenerate = regenerate
        self.pipe = Pipe(transcript.text, regenerate, trim=endpoint.fmt.trims_prefill)
        self.diverged: Diverged | None = None
        self._done = False
        self._passed = False  # an event of the resumed stream reached the client
        self._had_output = bool(transcript.text) or transcript.reasoning
        # Anthropic: resumed block index -> client index; dropped resumed blocks
        self._map: dict[int, int] = {}
        self._drop: set[int] = set()
        self._text_block: int | None = None  # the resumed block that continues the text
        self._text_ended = False
        self._next = transcript.next_index
        self._had_blocks = transcript.next_index > 0
        # Responses
        self._msg: int | None = None  # resumed output_index of the continuing message
        self._part: int | None = None  # resumed content_index of its output_text part
        self._part_to: int | None = None  # the client's content_index for it
        self._msg_id: str | None = transcript.item_id
        self._next_output = transcript.next_output
        self._had_items = transcript.next_output > 0

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
        if self.endpoint is Endpoint.messages:
            out = self._messages(obj, ev.kind)
        elif self.endpoint is Endpoint.responses:
            out = self._responses(obj, ev.kind)
        else:
            out = self._chat(obj, ev.kind)
        if isinstance(out, Diverged):
            self.diverged = out
            return out
        if ev.kind is Kind.final:
            self._done = True
        named = self.endpoint in (Endpoint.messages, Endpoint.responses)
        chunks = []
        for data, kind in out.events:
            if self.endpoint is Endpoint.responses:
                data["sequence_number"] = self.t.sequence_number + 1
            raw = sse_event(data, named)
            self.t.observe(Event(raw, kind, data))
            chunks.append(raw)
        if out.raw:
            self.t.observe(ev)
            chunks.append(ev.raw)
        self._passed = self._passed or bool(chunks)
        return b"".join(chunks)

    # --- chat and legacy completions ---

    def _chat(self, obj: dict[str, Any], kind: Kind) -> _Out | Diverged:
        data = copy.copy(obj)
        t = self.t
        if t.id is not None:
            data["id"], data["created"], data["model"] = t.id, t.created, t.model
            if t.has_fingerprint:
                data["system_fingerprint"] = t.fingerprint
        choices = data.get("choices")
        if not isinstance(choices, list):
            return _Out([(data, kind)])
        kept = []
        for c in choices:
            if not isinstance(c, dict):
                continue
            c = copy.copy(c)
            if t.choice_index is not None:
                c["index"] = t.choice_index
            got = self._chat_choice(c)
            if isinstance(got, Diverged):
                return got
            if got:
                kept.append(c)
        if not kept and (choices or data.get("usage") is None):
            return _Out()
        data["choices"] = kept
        return _Out([(data, kind)])

    def _chat_choice(self, c: dict[str, Any]) -> bool | Diverged:
        """Rewrite one choice in place; False when nothing of it is left to send."""
        key = "text" if self.endpoint is Endpoint.completions else "content"
        flush_now = False
        holder: dict[str, Any]
        if self.endpoint is Endpoint.completions:
            holder = c
        else:
            delta = c.get("delta")
            holder = dict(delta) if isinstance(delta, dict) else {}
            c["delta"] = holder
            holder.pop("role", None)
            if holder.get("refusal") is None:
                holder.pop("refusal", None)
            if self._had_output:
                for name in ("reasoning_content", "reasoning"):
                    holder.pop(name, None)
            if holder.get("tool_calls") or holder.get("function_call"):
                if self.regenerate and not self.pipe.settled:
                    return Diverged("regenerated answer calls a tool before covering the text sent")
                flush_now = True
        text = holder.get(key)
        out = ""
        if isinstance(text, str) and text:
            got = self.pipe.push(text)
            if isinstance(got, Diverged):
                return got
            out = got
        if c.get("finish_reason") or flush_now:
            tail = self.pipe.flush()
            if isinstance(tail, Diverged):
                return tail
            out += tail
        if isinstance(text, str) or out:
            if out != text:
                c["logprobs"] = None
            if out or self.endpoint is Endpoint.completions:
                holder[key] = out
            else:
                holder.pop(key, None)
        if c.get("finish_reason"):
            return True
        if self.endpoint is Endpoint.completions:
            return bool(out)
        return any(v is not None for v in holder.values())

    # --- Anthropic Messages ---

    def _messages(self, obj: dict[str, Any], kind: Kind) -> _Out | Diverged:
        etype = obj.get("type")
        index = obj.get("index")
        if etype == "message_start" or (etype == "ping" and not self._passed):
            return _Out()  # a ping before anything passed is part of the preamble
        if etype == "content_block_start" and isinstance(index, int):
            return self._block_start(obj, index, kind)
        if etype in ("content_block_delta", "content_block_stop") and isinstance(index, int):
            if index in self._drop:
                return _Out()
            if index not in self._map:
                self._map[index] = self._next
                self._next += 1
            data = {**obj, "index": self._map[index]}
            if index != self._text_block:
                return _Out([(data, kind)])
            if etype == "content_block_stop":
                return self._end_text([(data, kind)])
            delta = obj.get("delta") or {}
            if delta.get("type") != "text_delta":
                return _Out([(data, kind)])
            got = self.pipe.push(delta.get("text") or "")
            if isinstance(got, Diverged):
                return got
            if not got:
                return _Out()
            data["delta"] = {**delta, "text": got}
            return _Out([(data, kind)])
        if etype in ("message_delta", "message_stop"):
            out = self._end_text([])
            if not isinstance(out, Diverged):
                out.raw = True
            return out
        return _Out(raw=True)

    def _text_delta(self, client_index: int, text: str) -> tuple[dict[str, Any], Kind]:
        delta = {"type": "text_delta", "text": text}
        return {"type": "content_block_delta", "index": client_index, "delta": delta}, Kind.data

    def _block_start(self, obj: dict[str, Any], index: int, kind: Kind) -> _Out | Diverged:
        block = obj.get("content_block") or {}
        btype = block.get("type")
        if btype == "text" and self._text_block is None:
            self._text_block = index
            events: list[tuple[dict[str, Any], Kind]] = []
            if self.t.text_open and self.t.text_index is not None:
                self._map[index] = self.t.text_index
            else:
                self._map[index] = self._next
                self._next += 1
                start = {**obj, "index": self._map[index], "content_block": {**block, "text": ""}}
                events.append((start, kind))
            got = self.pipe.push(block.get("text") or "")
            if isinstance(got, Diverged):
                return got
            if got:
                events.append(self._text_delta(self._map[index], got))
            return _Out(events)
        if self._text_block is None:
            if btype in ("thinking", "redacted_thinking") and self._had_blocks:
                self._drop.add(index)
                return _Out()
            if self.regenerate and not self.pipe.settled:
                return Diverged(f"regenerated answer starts a {btype} block before the text sent")
        self._map[index] = self._next
        self._next += 1
        return _Out([({**obj, "index": self._map[index]}, kind)])

    def _end_text(self, events: list[tuple[dict[str, Any], Kind]]) -> _Out | Diverged:
        """Flush what the pipe holds before the text block (or the message) ends."""
        if self._text_ended:
            return _Out(events)
        self._text_ended = True
        tail = self.pipe.flush()
        if isinstance(tail, Diverged):
            return tail
        if tail and self._text_block is not None:
            events = [self._text_delta(self._map[self._text_block], tail), *events]
        return _Out(events)

    # --- OpenAI Responses ---

    def _responses(self, obj: dict[str, Any], kind: Kind) -> _Out | Diverged:
        etype = obj.get("type")
        oi = obj.get("output_index")
        t = self.t
        if etype in ("response.created", "response.in_progress", "response.queued"):
            return _Out()
        if etype == "response.output_item.added" and isinstance(oi, int):
            return self._item_added(obj, oi, kind)
        if isinstance(oi, int) and oi in self._drop:
            return _Out()
        data = dict(obj)
        if isinstance(oi, int):
            if oi not in self._map:
                self._map[oi] = self._next_output
                self._next_output += 1
            data["output_index"] = self._map[oi]
        ours = isinstance(oi, int) and oi == self._msg
        if ours and "item_id" in data:
            data["item_id"] = self._msg_id
        mine = ours and obj.get("content_index") == self._part
        if etype == "response.content_part.added" and ours:
            part = obj.get("part") or {}
            if part.get("type") == "output_text" and self._part is None:
                self._part = obj.get("content_index")
                if t.part_open:
                    self._part_to = t.content_index
                    return _Out()
                self._part_to = self._part
            return _Out([(data, kind)])
        if mine:
            data["content_index"] = self._part_to
        if etype == "response.output_text.delta" and mine:
            got = self.pipe.push(obj.get("delta") or "")
            if isinstance(got, Diverged):
                return got
            if not got:
                return _Out()
            if got != obj.get("delta"):
                data["logprobs"] = []
            data["delta"] = got
            return _Out([(data, kind)])
        if etype == "response.output_text.done" and mine:
            return self._text_done(data, kind)
        if etype == "response.content_part.done" and mine:
            data["part"] = {**(obj.get("part") or {}), "text": "".join(t.part_text)}
            return _Out([(data, kind)])
        if etype == "response.output_item.done" and ours:
            item = dict(obj.get("item") or {})
            item["id"] = self._msg_id
            item["content"] = [
                {**p, "text": "".join(t.part_text)}
                if isinstance(p, dict) and p.get("type") == "output_text"
                else p
                for p in item.get("content") or []
            ]
            data["item"] = item
            return _Out([(data, kind)])
        if etype in ("response.completed", "response.incomplete"):
            if self.regenerate and not self.pipe.settled:
                return Diverged("regenerated answer ended before covering the text sent")
            return _Out([(self._final(data), kind)])
        return _Out([(data, kind)])

    def _item_added(self, obj: dict[str, Any], oi: int, kind: Kind) -> _Out | Diverged:
        item = obj.get("item") or {}
        itype = item.get("type")
        if itype == "message" and self._msg is None:
            self._msg = oi
            if self.t.item_id is not None and not self.t.text_closed:
                self._map[oi] = self.t.output_index if self.t.output_index is not None else 0
                return _Out()
            self._msg_id = item.get("id")
            self._map[oi] = self._next_output
            self._next_output += 1
            return _Out([({**obj, "output_index": self._map[oi]}, kind)])
        if self._msg is None:
            if itype == "reasoning" and self._had_items:
                self._drop.add(oi)
                return _Out()
            if self.regenerate and not self.pipe.settled:
                return Diverged(f"regenerated answer starts a {itype} item before the text sent")
        self._map[oi] = self._next_output
        self._next_output += 1
        return _Out([({**obj, "output_index": self._map[oi]}, kind)])

    def _text_done(self, data: dict[str, Any], kind: Kind) -> _Out | Diverged:
        tail = self.pipe.flush()
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
            events.append((delta, Kind.data))
        whole = "".join(self.t.part_text) + tail
        events.append(({**data, "text": whole}, kind))
        return _Out(events)

    def _final(self, data: dict[str, Any]) -> dict[str, Any]:
        t = self.t
        response = dict(data.get("response") or {})
        if t.id is not None:
            response["id"] = t.id
            response["created_at"] = t.created
            response["model"] = t.model
        if t.done_items:
            response["output"] = [t.done_items[k] for k in sorted(t.done_items)]
        if "output_text" in response:
            response["output_text"] = t.text
        data["response"] = response
        return data
