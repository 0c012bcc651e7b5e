"""Stream readers: one decoded upstream event -> calls on a :class:`~.write.Writer`.

A reader keeps only what the next event needs to be understood: which source block or
item index is what kind of content, the tool calls seen, and whether the final event
came. Pieces with no equivalent in the neutral stream are dropped here, one rule each
(see the package docstring).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.formats.usage import Usage
from gateway.translate import stops, usage
from gateway.translate.errors import from_anthropic, from_openai, read_error
from gateway.translate.fields import args_text, is_text, name_of
from gateway.translate.streams.write import Writer

Obj = dict[str, Any]


class Reader:
    __slots__ = ("final", "w")

    #: The events' type is only in their name (``event:``): :meth:`feed_named` is called.
    named = False

    def __init__(self, w: Writer) -> None:
        self.w = w
        self.final = False  # the upstream's final event arrived

    def feed(self, obj: Obj) -> None:
        raise NotImplementedError

    def feed_named(self, name: bytes, obj: Obj) -> None:
        """One event of a :attr:`named` reader: its name and decoded data."""
        raise NotImplementedError

    def done_marker(self) -> None:
        """``data: [DONE]``."""

    def settle(self) -> None:
        """Put the usage read so far into the writer (a reader that defers reading it:
        Gemini's, whose every chunk repeats the counts so far)."""


# ---------------------------------------------------------------- chat completions


class ChatReader(Reader):
    """Chunks of choice 0 (other choices are dropped). The finish chunk makes the stream
    complete; the answer is closed on the usage chunk that follows it, on ``[DONE]``, or
    when the body ends (:meth:`StreamTranslator.finish`)."""

    __slots__ = ("_calls",)

    def __init__(self, w: Writer) -> None:
        super().__init__(w)
        self._calls: dict[Any, str] = {}  # tool call index -> id

    def feed(self, obj: Obj) -> None:
        w = self.w
        choices = obj.get("choices")
        if "error" in obj and not choices:
            err = read_error(obj, "chat")
            if err is not None:
                w.error(err)
                return
        if not w.started:
            w.start(obj.get("id"), obj.get("created"))
        if choices:
            for c in choices:
                if c.get("index", 0) == 0:
                    self._choice(c)
        u = obj.get("usage")
        if u:
            w.usage = usage.from_chat(u)
            if self.final:
                w.end()

    def _choice(self, c: Obj) -> None:
        w = self.w
        delta = c.get("delta")
        if delta:
            r = delta.get("reasoning_content") or delta.get("reasoning")
            if r and type(r) is str:
                w.reasoning(r)
            t = delta.get("content")
            if t and type(t) is str:
                w.text(t)
            elif t and type(t) is list:
                self._parts(t)
            t = delta.get("refusal")
            if t and type(t) is str:
                w.refusal(t)
            calls = delta.get("tool_calls")
            if calls:
                for tc in calls:
                    self._call(tc)
        reason = c.get("finish_reason")
        if reason:
            w.stop = stops.from_chat(reason)
            self.final = True

    def _parts(self, parts: list[Any]) -> None:
        """Content as a list of parts (Mistral): text, and thinking as a list of texts."""
        for p in parts:
            kind = p.get("type")
            if kind == "text" and is_text(p.get("text")):
                self.w.text(p["text"])
            elif kind == "thinking":
                for q in p.get("thinking") or ():
                    if is_text(q.get("text")):
                        self.w.reasoning(q["text"])

    def _call(self, tc: Obj) -> None:
        index = tc.get("index")
        call_id = tc.get("id")
        if index is None:  # providers that leave the index out: a new id is a new call
            new = call_id is not None and call_id not in self._calls.values()
            index = len(self._calls) if new or not self._calls else len(self._calls) - 1
        fn = tc.get("function") or {}
        if index not in self._calls:
            call_id = name_of(call_id, f"call_{index}")
            self._calls[index] = call_id
            self.w.tool_start(index, call_id, name_of(fn.get("name")))
        args = fn.get("arguments")
        if args:
            self.w.tool_args(index, args_text(args))

    def done_marker(self) -> None:
        if self.final and not self.w.done:
            self.w.end()


# ---------------------------------------------------------------- Anthropic Messages


class AnthropicReader(Reader):
    """``text``, ``thinking`` (with its signature) and ``tool_use`` blocks; other blocks
    (``redacted_thinking``, server tools and their results) and ``citations_delta`` are
    dropped."""

    __slots__ = ("_kinds", "_on")

    def __init__(self, w: Writer) -> None:
        super().__init__(w)
        self._kinds: dict[Any, str] = {}  # block index -> text | thinking | tool
        self._on: dict[Any, Callable[[Obj], None]] = {
            "content_block_delta": self._delta,
            "content_block_start": self._start,
            "content_block_stop": self._stop,
            "message_start": self._message_start,
            "message_delta": self._message_delta,
            "message_stop": self._message_stop,
            "ping": self._ping,
            "error": self._error,
        }

    def feed(self, obj: Obj) -> None:
        on = self._on.get(obj.get("type"))
        if on is not None:
            on(obj)

    def _message_start(self, obj: Obj) -> None:
        m = obj.get("message") or {}
        u = m.get("usage")
        if u:
            self.w.usage = usage.from_anthropic(u)
        self.w.start(m.get("id"))

    def _start(self, obj: Obj) -> None:
        index = obj.get("index")
        block = obj.get("content_block") or {}
        kind = block.get("type")
        w = self.w
        if kind == "text":
            self._kinds[index] = "text"
            if is_text(block.get("text")):
                w.text(block["text"])
        elif kind == "thinking":
            self._kinds[index] = "thinking"
            if is_text(block.get("thinking")):
                w.reasoning(block["thinking"])
            if is_text(block.get("signature")):
                w.signature(block["signature"])
        elif kind == "tool_use":
            self._kinds[index] = "tool"
            w.tool_start(
                index, name_of(block.get("id"), f"toolu_{index}"), name_of(block.get("name"))
            )
            if block.get("input"):
                w.tool_args(index, args_text(block["input"]))

    def _delta(self, obj: Obj) -> None:
        kind = self._kinds.get(obj.get("index"))
        if kind is None:
            return
        d = obj.get("delta") or {}
        dtype = d.get("type")
        w = self.w
        if dtype == "text_delta":
            if kind == "text" and is_text(d.get("text")):
                w.text(d["text"])
        elif dtype == "input_json_delta":
            if kind == "tool" and is_text(d.get("partial_json")):
                w.tool_args(obj["index"], d["partial_json"])
        elif dtype == "thinking_delta":
            if kind == "thinking" and is_text(d.get("thinking")):
                w.reasoning(d["thinking"])
        elif dtype == "signature_delta" and kind == "thinking" and is_text(d.get("signature")):
            w.signature(d["signature"])

    def _stop(self, obj: Obj) -> None:
        if obj.get("index") in self._kinds:
            self.w.block_end()

    def _message_delta(self, obj: Obj) -> None:
        w = self.w
        d = obj.get("delta") or {}
        if is_text(d.get("stop_reason")):
            w.stop = d["stop_reason"]
            w.stop_sequence = d["stop_sequence"] if is_text(d.get("stop_sequence")) else None
        u = obj.get("usage")
        if u:
            if w.usage is None:
                w.usage = Usage()
            usage.update_anthropic(w.usage, u)

    def _message_stop(self, obj: Obj) -> None:
        self.final = True
        self.w.end()

    def _ping(self, obj: Obj) -> None:
        self.w.ping()

    def _error(self, obj: Obj) -> None:
        self.w.error(from_anthropic(obj.get("error")))


# ---------------------------------------------------------------- OpenAI Responses


class ResponsesReader(Reader):
    """``message`` items (``output_text`` and ``refusal`` parts), ``reasoning`` items (their
    summary, or their reasoning text; summary parts joined by a blank line) and
    ``function_call`` items; other items (built-in tools' calls, their results) and
    annotations are dropped."""

    __slots__ = ("_calls", "_kinds", "_on", "_summary")

    def __init__(self, w: Writer) -> None:
        super().__init__(w)
        self._kinds: dict[Any, str] = {}  # output_index -> message | reasoning | call
        self._calls: dict[Any, int] = {}  # output_index of a call -> argument chars seen
        self._summary: dict[Any, Any] = {}  # output_index of reasoning -> last summary_index
        self._on: dict[Any, Callable[[Obj], None]] = {
            "response.output_text.delta": self._text,
            "response.function_call_arguments.delta": self._args,
            "response.reasoning_summary_text.delta": self._reasoning,
            "response.reasoning_text.delta": self._reasoning,
            "response.refusal.delta": self._refusal,
            "response.output_item.added": self._added,
            "response.output_item.done": self._done,
            "response.function_call_arguments.done": self._args_done,
            "response.created": self._created,
            "response.completed": self._completed,
            "response.incomplete": self._completed,
            "response.failed": self._failed,
            "error": self._error,
        }

    def feed(self, obj: Obj) -> None:
        on = self._on.get(obj.get("type"))
        if on is not None:
            on(obj)

    def _created(self, obj: Obj) -> None:
        r = obj.get("response") or {}
        self.w.start(r.get("id"), r.get("created_at"))

    def _added(self, obj: Obj) -> None:
        index = obj.get("output_index")
        item = obj.get("item") or {}
        kind = item.get("type")
        if kind == "message":
            self._kinds[index] = "message"
        elif kind == "reasoning":
            self._kinds[index] = "reasoning"
        elif kind == "function_call":
            self._kinds[index] = "call"
            call_id = name_of(item.get("call_id")) or name_of(item.get("id"), f"call_{index}")
            self.w.tool_start(index, call_id, name_of(item.get("name")))
            self._calls[index] = 0
            self._more_args(index, item.get("arguments"))

    def _text(self, obj: Obj) -> None:
        if self._kinds.get(obj.get("output_index")) == "message" and is_text(obj.get("delta")):
            self.w.text(obj["delta"])

    def _refusal(self, obj: Obj) -> None:
        if self._kinds.get(obj.get("output_index")) == "message" and is_text(obj.get("delta")):
            self.w.refusal(obj["delta"])

    def _reasoning(self, obj: Obj) -> None:
        index = obj.get("output_index")
        delta = obj.get("delta")
        if self._kinds.get(index) != "reasoning" or not is_text(delta):
            return
        part = obj.get("summary_index", obj.get("content_index"))
        last = self._summary.get(index, part)
        if part != last:
            self.w.reasoning("\n\n")
        self._summary[index] = part
        self.w.reasoning(delta)

    def _args(self, obj: Obj) -> None:
        index = obj.get("output_index")
        delta = obj.get("delta")
        if index in self._calls and is_text(delta):
            self._calls[index] += len(delta)
            self.w.tool_args(index, delta)

    def _more_args(self, index: Any, full: Any) -> None:
        """The arguments of a call's ``.done`` event beyond the deltas seen (a provider that
        sends them only whole)."""
        seen = self._calls.get(index)
        if seen is not None and isinstance(full, str) and len(full) > seen:
            self._calls[index] = len(full)
            self.w.tool_args(index, full[seen:])

    def _args_done(self, obj: Obj) -> None:
        self._more_args(obj.get("output_index"), obj.get("arguments"))

    def _done(self, obj: Obj) -> None:
        index = obj.get("output_index")
        if index not in self._kinds:
            return
        if index in self._calls:
            self._more_args(index, (obj.get("item") or {}).get("arguments"))
        self.w.block_end()

    def _completed(self, obj: Obj) -> None:
        r = obj.get("response") or {}
        w = self.w
        if not self._kinds:  # nothing streamed: the output only in the final object
            self._replay(r.get("output") or ())
        u = r.get("usage")
        if u:
            w.usage = usage.from_responses(u)
        w.stop = stops.from_responses(r.get("status"), r.get("incomplete_details"), bool(w.tools))
        self.final = True
        w.end()

    def _replay(self, output: Any) -> None:
        for i, item in enumerate(output):
            kind = item.get("type")
            if kind == "message":
                for c in item.get("content") or ():
                    if c.get("type") == "output_text" and is_text(c.get("text")):
                        self.w.text(c["text"])
                    elif c.get("type") == "refusal" and is_text(c.get("refusal")):
                        self.w.refusal(c["refusal"])
            elif kind == "reasoning":
                summary = item.get("summary") or ()
                text = "\n\n".join(s["text"] for s in summary if is_text(s.get("text")))
                if text:
                    self.w.reasoning(text)
            elif kind == "function_call":
                call_id = name_of(item.get("call_id")) or name_of(item.get("id"), f"call_{i}")
                self.w.tool_start(("final", i), call_id, name_of(item.get("name")))
                self.w.tool_args(("final", i), args_text(item.get("arguments")))
            else:
                continue
            self.w.block_end()

    def _failed(self, obj: Obj) -> None:
        err = (obj.get("response") or {}).get("error")
        self.w.error(from_openai(err if isinstance(err, dict) else {}))

    def _error(self, obj: Obj) -> None:
        err = read_error(obj, "responses")
        self.w.error(err if err is not None else from_openai({}))


READERS: dict[str, type[Reader]] = {
    "chat": ChatReader,
    "messages": AnthropicReader,
    "responses": ResponsesReader,
}
