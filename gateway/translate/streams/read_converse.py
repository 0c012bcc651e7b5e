"""The Bedrock ConverseStream reader: one decoded event -> calls on a
:class:`~gateway.translate.streams.write.Writer`.

ConverseStream's events reach the gateway as SSE events named by their type (each AWS
event-stream frame becomes ``event: <type>`` with the frame's JSON payload as ``data``,
maybe with a ``"p"`` padding field), so this reader is given the event's name with its
payload (:meth:`ConverseReader.feed_named`):

    messageStart        {"role"}                                   -> the client's start
    contentBlockStart   {"contentBlockIndex", "start": {"toolUse": {"toolUseId", "name"}}}
    contentBlockDelta   {"contentBlockIndex", "delta": {"text"} | {"toolUse": {"input"}}
                         | {"reasoningContent": {"text"} | {"signature"}}}
    contentBlockStop    {"contentBlockIndex"}
    messageStop         {"stopReason"}                             -> the stop; complete
    metadata            {"usage", "metrics"}                       -> usage; the end
    error               {"type": "error", "error": {"type", "message"}} (an exception frame)

A text or reasoning block has no ``contentBlockStart``: its first delta opens it. The
usage comes in ``metadata``, after ``messageStop``: the client's closing events wait for
it, and a body that ends after ``messageStop`` without it is closed at
:meth:`~gateway.translate.streams.StreamTranslator.finish`. An exception event of
another name (``throttlingException`` with ``{"message"}``, as AWS names it) is an
error too. ``reasoningContent.redactedContent``, citation deltas and the blocks of
server tools (a ``toolUse`` start with a ``type``, a ``toolResult`` start) are dropped.

Reference: https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.translate import stops, usage
from gateway.translate.errors import from_aws
from gateway.translate.fields import args_text, is_text, name_of
from gateway.translate.streams.read import Obj, Reader
from gateway.translate.streams.write import Writer


class ConverseReader(Reader):
    """ConverseStream events, by name: see the module docstring."""

    __slots__ = ("_kinds", "_on", "_usage")

    named = True

    def __init__(self, w: Writer) -> None:
        super().__init__(w)
        self._kinds: dict[Any, str] = {}  # contentBlockIndex -> text | reasoning | tool
        self._usage = False  # the metadata event came
        self._on: dict[bytes, Callable[[Obj], None]] = {
            b"contentBlockDelta": self._delta,
            b"contentBlockStart": self._start,
            b"contentBlockStop": self._stop,
            b"messageStart": self._message_start,
            b"messageStop": self._message_stop,
            b"metadata": self._metadata,
            b"error": self._error,
        }

    def feed_named(self, name: bytes, obj: Obj) -> None:
        on = self._on.get(name)
        if on is not None:
            on(obj)
        elif name.endswith(b"Exception"):  # an exception frame named as AWS names it
            self.w.error(from_aws({"type": name.decode(), "message": obj.get("message")}))

    def _message_start(self, obj: Obj) -> None:
        self.w.start()

    def _start(self, obj: Obj) -> None:
        index = obj.get("contentBlockIndex")
        use = (obj.get("start") or {}).get("toolUse")
        if use and use.get("type") is None:  # a server tool's use (and result): not the client's
            self._kinds[index] = "tool"
            self.w.tool_start(
                index, name_of(use.get("toolUseId"), f"tooluse_{index}"), name_of(use.get("name"))
            )

    def _delta(self, obj: Obj) -> None:
        index = obj.get("contentBlockIndex")
        d = obj.get("delta") or {}
        kind = self._kinds.get(index)
        w = self.w
        t = d.get("text")
        if t is not None:
            if kind is None:
                kind = self._kinds[index] = "text"
            if kind == "text" and is_text(t):
                w.text(t)
        elif "toolUse" in d:
            if kind == "tool":
                w.tool_args(index, args_text((d["toolUse"] or {}).get("input")))
        elif "reasoningContent" in d:
            if kind is None:
                kind = self._kinds[index] = "reasoning"
            r = d["reasoningContent"] or {}
            if kind != "reasoning":
                return
            if is_text(r.get("text")):
                w.reasoning(r["text"])
            if is_text(r.get("signature")):
                w.signature(r["signature"])

    def _stop(self, obj: Obj) -> None:
        if obj.get("contentBlockIndex") in self._kinds:
            self.w.block_end()

    def _message_stop(self, obj: Obj) -> None:
        self.w.stop = stops.from_converse(obj.get("stopReason"))
        self.final = True
        if self._usage:  # the metadata came first: nothing more to wait for
            self.w.end()

    def _metadata(self, obj: Obj) -> None:
        u = obj.get("usage")
        if u:
            self.w.usage = usage.from_converse(u)
        self._usage = True
        if self.final:
            self.w.end()

    def _error(self, obj: Obj) -> None:
        err = obj.get("error")
        self.w.error(from_aws(err if isinstance(err, dict) else obj))


__all__ = ["ConverseReader"]
