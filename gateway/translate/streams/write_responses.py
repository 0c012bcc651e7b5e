"""The Responses stream writer: neutral stream calls -> OpenAI Responses events.

Besides ids and the open item, it keeps the running text of the open item and the
finished output items: its ``response.completed`` event must repeat the whole response
object (the only copy of the answer the translation keeps).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.formats import RESPONSES
from gateway.translate import stops
from gateway.translate.answers import call_item, message_item, reasoning_item, response_object
from gateway.translate.errors import UpstreamError
from gateway.translate.ir import Names
from gateway.translate.streams.write import Writer, base_id, dumps


class ResponsesWriter(Writer):
    """``response.created`` (status ``in_progress``) and ``response.in_progress``; output
    items (``message`` with ``output_text`` / ``refusal`` parts, ``reasoning`` with one
    summary part, ``function_call``) each between ``response.output_item.added`` and
    ``.done`` with their part and delta events; ``response.completed`` (or
    ``response.incomplete``) with the whole response object. Every event carries a
    ``sequence_number`` counting from 0."""

    __slots__ = (
        "_base",
        "_calls",
        "_content",
        "_item",
        "_item_id",
        "_item_idj",
        "_kind",
        "_oi",
        "_output",
        "_part",
        "_parts",
        "_rid",
        "_seq",
        "names",
    )

    def __init__(self, model: Any, include_usage: bool, created: int) -> None:
        super().__init__(model, include_usage, created)
        self._seq = 0
        self._base = ""
        self._rid = ""
        self._output: list[dict[str, Any]] = []  # finished items, in output_index order
        self._kind = ""  # message | reasoning | call: the open item
        self._oi = -1  # its output_index
        self._item_id = ""  # its id
        self._item_idj = b""  # and JSON-encoded
        self._item: dict[str, Any] = {}  # an open call: its item
        self._part = ""  # the open part of a message: output_text | refusal
        self._parts: list[str] = []  # the open part's (or reasoning's, or call's) text so far
        self._content: list[dict[str, Any]] = []  # the open message's finished parts
        self._calls: dict[Any, tuple[int, bytes, dict[str, Any], list[str]]] = {}
        self.names: Names | None = None  # the request's namespaced functions

    def _ev(self, etype: str, fields: dict[str, Any]) -> None:
        obj = {"type": etype, "sequence_number": self._seq, **fields}
        self._seq += 1
        self.out.append(b"event: " + etype.encode() + b"\ndata: " + dumps(obj) + b"\n\n")

    def _response(self, status: str, details: Any, output: list[dict[str, Any]]) -> Any:
        u = self.usage if status != "in_progress" else None
        return response_object(self._rid, self.model, self.created, status, details, output, u)

    def start(self, source_id: Any = None, created: Any = None) -> None:
        if self.started:
            return
        self.started = True
        if type(created) is int:  # not a bool: str(True) is no JSON
            self.created = created
        self._base = base_id(source_id)
        self._rid = "resp_" + self._base
        self._ev("response.created", {"response": self._response("in_progress", None, [])})
        self._ev("response.in_progress", {"response": self._response("in_progress", None, [])})

    # -- items
    def _open(self, kind: str, item: dict[str, Any]) -> None:
        if not self.started:
            self.start()
        self._close()
        self._kind = kind
        self._oi = len(self._output)
        self._item_id = item["id"]
        self._item_idj = dumps(self._item_id)
        self._parts = []
        self._ev("response.output_item.added", {"output_index": self._oi, "item": item})

    def _close(self) -> None:
        kind = self._kind
        if not kind:
            return
        if kind == "message":
            self._close_part()
            item = message_item(self._item_id, self._content)
        elif kind == "reasoning":
            text = "".join(self._parts)
            ids = {"item_id": self._item_id, "output_index": self._oi}
            self._ev(
                "response.reasoning_summary_text.done", {**ids, "summary_index": 0, "text": text}
            )
            part = {"type": "summary_text", "text": text}
            self._ev(
                "response.reasoning_summary_part.done", {**ids, "summary_index": 0, "part": part}
            )
            item = reasoning_item(self._item_id, text)
        else:
            item = self._item
            item["arguments"] = args = "".join(self._parts)
            ids = {"item_id": item["id"], "output_index": self._oi}
            self._ev("response.function_call_arguments.done", {**ids, "arguments": args})
        self._kind = ""
        self._output.append(item)
        self._ev("response.output_item.done", {"output_index": self._oi, "item": item})

    def _message(self, part: str) -> None:
        if self._kind != "message":
            n = sum(1 for o in self._output if o["type"] == "message")
            item_id = f"msg_{self._base}" if n == 0 else f"msg_{self._base}_{n}"
            item = {
                "id": item_id,
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            self._open("message", item)
            self._content = []
        if self._part != part:
            self._close_part()
            self._part = part
            self._parts = []
            empty = (
                {"type": "output_text", "text": "", "annotations": []}
                if part == "output_text"
                else {"type": "refusal", "refusal": ""}
            )
            self._ev("response.content_part.added", {**self._ids(), "part": empty})

    def _ids(self) -> dict[str, Any]:
        return {
            "item_id": self._item_id,
            "output_index": self._oi,
            "content_index": len(self._content),
        }

    def _close_part(self) -> None:
        if not self._part:
            return
        text = "".join(self._parts)
        ids = self._ids()
        if self._part == "output_text":
            self._ev("response.output_text.done", {**ids, "text": text, "logprobs": []})
            part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
        else:
            self._ev("response.refusal.done", {**ids, "refusal": text})
            part = {"type": "refusal", "refusal": text}
        self._ev("response.content_part.done", {**ids, "part": part})
        self._content.append(part)
        self._part = ""

    def _raw(self, etype: bytes, fields: bytes) -> None:
        """An event built from bytes (the hot path: deltas)."""
        self.out.append(
            b'event: %b\ndata: {"type":"%b","sequence_number":%d,%b}\n\n'
            % (etype, etype, self._seq, fields)
        )
        self._seq += 1

    def text(self, t: str) -> None:
        if self._kind != "message" or self._part != "output_text":
            self._message("output_text")
        self._parts.append(t)
        self._raw(
            b"response.output_text.delta",
            b'"item_id":%b,"output_index":%d,"content_index":%d,"delta":%b,"logprobs":[]'
            % (self._item_idj, self._oi, len(self._content), dumps(t)),
        )

    def refusal(self, t: str) -> None:
        if self._kind != "message" or self._part != "refusal":
            self._message("refusal")
        self._parts.append(t)
        self._raw(
            b"response.refusal.delta",
            b'"item_id":%b,"output_index":%d,"content_index":%d,"delta":%b'
            % (self._item_idj, self._oi, len(self._content), dumps(t)),
        )

    def reasoning(self, t: str) -> None:
        if self._kind != "reasoning":
            n = len(self._output)
            item_id = f"rs_{self._base}_{n}"
            self._open("reasoning", {"id": item_id, "type": "reasoning", "summary": []})
            part = {"type": "summary_text", "text": ""}
            ids = {"item_id": item_id, "output_index": self._oi, "summary_index": 0}
            self._ev("response.reasoning_summary_part.added", {**ids, "part": part})
        self._parts.append(t)
        self._raw(
            b"response.reasoning_summary_text.delta",
            b'"item_id":%b,"output_index":%d,"summary_index":0,"delta":%b'
            % (self._item_idj, self._oi, dumps(t)),
        )

    def tool_start(self, key: Any, call_id: str, name: str) -> None:
        item = call_item(call_id, name, "", self.names)
        item["status"] = "in_progress"
        self._open("call", dict(item))
        item["status"] = "completed"
        self._item = item
        self.tools[key] = self._oi
        self._calls[key] = (self._oi, self._item_idj, item, self._parts)

    def tool_args(self, key: Any, delta: str) -> None:
        call = self._calls.get(key)
        if call is None or not delta:
            return
        oi, item_id, item, parts = call
        parts.append(delta)
        if oi != self._oi or self._kind != "call":  # a late delta of a closed call
            item["arguments"] = "".join(parts)
        self._raw(
            b"response.function_call_arguments.delta",
            b'"item_id":%b,"output_index":%d,"delta":%b' % (item_id, oi, dumps(delta)),
        )

    def block_end(self) -> None:
        self._close()

    def end(self) -> None:
        if not self.started:
            self.start()
        self._close()
        self.done = True
        status, details = stops.to_responses(self.final_stop())
        etype = "response.completed" if status == "completed" else "response.incomplete"
        self._ev(etype, {"response": self._response(status, details, self._output)})

    def error(self, err: UpstreamError) -> None:
        self.done = True
        raw = RESPONSES.stream_error(err.openai_type, err.message, err.code, self._rid)
        for ev in raw.split(b"\n\n")[:-1]:  # the same events, numbered like the others
            head, _, data = ev.partition(b"\ndata: ")
            obj = orjson.loads(data)
            obj["sequence_number"] = self._seq
            self._seq += 1
            if obj.get("type") == "response.failed" and self.started:
                obj["response"]["created_at"] = self.created
                obj["response"]["model"] = self.model
            self.out.append(head + b"\ndata: " + dumps(obj) + b"\n\n")
