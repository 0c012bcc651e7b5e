"""OpenAI Responses (``responses``): an ``input`` list of items (a string is one user
message), ``*_call`` items answered by ``*_call_output`` items, top-level
``instructions``; answers cut with ``status: incomplete`` for ``max_output_tokens``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from gateway.formats.base import Format
from gateway.formats.parts import (
    as_dict,
    as_list,
    is_type,
    item_type,
    plain_text,
    role,
    text_of,
)  # fmt: skip
from gateway.formats.responses_stream import ResponsesStream
from gateway.formats.usage import Usage, from_responses

_FINAL = frozenset({"response.completed", "response.incomplete"})


class Responses(ResponsesStream, Format):
    name = "responses"
    provider_api = "openai"
    paths = ("/v1/responses",)
    base_path = "/v1"
    entries_key = "input"
    fixed_keys = ("instructions",)
    output_caps = ("max_output_tokens",)
    output_cap = "max_output_tokens"
    final_events = _FINAL
    named_events = True
    sequenced = True

    def entries(self, body: Mapping[str, Any]) -> list[Any]:
        value = body.get("input")
        if isinstance(value, str):
            return [{"role": "user", "content": value}]
        return list(value) if isinstance(value, list) else []

    def summary_request(
        self, model: str, instructions: str, prompt: str, max_tokens: int
    ) -> dict[str, Any]:
        return {
            "model": model,
            "instructions": instructions,
            "input": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_output_tokens": max_tokens,
            "stream": False,
        }

    def opened_calls(self, entry: Any) -> list[str]:
        kind = item_type(entry) or ""
        if kind.endswith("_call") and "call_id" in entry:
            return [entry["call_id"]] if isinstance(entry["call_id"], str) else []
        return []

    def closed_calls(self, entry: Any) -> list[str]:
        kind = item_type(entry) or ""
        if kind.endswith("_call_output") and "call_id" in entry:
            return [entry["call_id"]] if isinstance(entry["call_id"], str) else []
        return []

    def may_cut(self, before: Any, after: Any) -> bool:
        return item_type(before) != "reasoning"  # a reasoning item stays with the next one

    def problems(self, items: Sequence[Any]) -> list[str]:
        problems: list[str] = []
        opened: set[str] = set()
        answered: set[str] = set()
        for i, entry in enumerate(items):
            for call in self.closed_calls(entry):
                if call not in opened:
                    problems.append(f"item {i}: output for {call!r} has no call before it")
                answered.add(call)
            opened.update(self.opened_calls(entry))
        for call in sorted(opened - answered):
            problems.append(f"call {call!r} has no output")
        return problems

    def transcript_lines(self, entry: Any) -> list[str]:
        if not isinstance(entry, Mapping):
            return []
        kind = item_type(entry) or ""
        if kind == "message":
            return [f"{role(entry) or 'assistant'}: {plain_text(entry.get('content'))}"]
        if kind.endswith("_call_output"):
            return [f"tool result: {plain_text(entry.get('output'))}"]
        if kind.endswith("_call"):
            arguments = entry.get("arguments", entry.get("input", entry.get("action", "")))
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False, default=str)
            return [f"assistant called {entry.get('name', kind)}({arguments})"]
        return []

    def snip_results(self, entry: Any, snip: Callable[[Any], Any]) -> Any:
        if (item_type(entry) or "").endswith("_call_output") and "output" in entry:
            return {**entry, "output": snip(entry["output"])}
        return entry

    def answer_text(self, response: Mapping[str, Any], sep: str = "") -> str:
        return sep.join(
            text_of(part)
            for item in as_list(response.get("output"))
            if is_type(item, "message")
            for part in as_list(item.get("content"))
            if is_type(part, "output_text")
        )

    def cut_at_length(self, response: Mapping[str, Any]) -> bool:
        details = as_dict(response.get("incomplete_details"))
        calls = any(
            isinstance(item, Mapping) and str(item.get("type", "")).endswith("_call")
            for item in as_list(response.get("output"))
        )
        return (
            response.get("status") == "incomplete"
            and details.get("reason") == "max_output_tokens"
            and not calls
        )

    def text_answer(
        self, text: str, *, id: Any, model: Any, created: Any, index: int, item_id: Any
    ) -> dict[str, Any]:
        return {
            "id": id,
            "object": "response",
            "created_at": created,
            "model": model,
            "status": "incomplete",
            "incomplete_details": None,
            "output": [
                {
                    "id": item_id,
                    "type": "message",
                    "role": "assistant",
                    "status": "incomplete",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
        }

    def merge(self, merged: dict[str, Any], parts: Sequence[Mapping[str, Any]], text: str) -> None:
        last = parts[-1]
        output: list[Any] = []
        placed = False
        last_message = next(
            (i for i in reversed(as_list(last.get("output"))) if is_type(i, "message")), None
        )
        for item in as_list(merged.get("output")):
            if not is_type(item, "message"):
                output.append(item)
            elif not placed:
                template: Mapping[str, Any] = next(
                    (p for p in as_list(item.get("content")) if is_type(p, "output_text")), {}
                )
                item = {**item, "content": [{**template, "type": "output_text", "text": text}]}
                if last_message is not None and "status" in last_message:
                    item["status"] = last_message["status"]
                output.append(item)
                placed = True
        if not placed:
            output.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            )
        merged["output"] = output
        merged["status"] = last.get("status")
        merged["incomplete_details"] = last.get("incomplete_details")
        if "output_text" in merged:
            merged["output_text"] = text

    def event_cut(self, data: Any) -> bool:
        if data.get("type") != "response.incomplete":
            return False
        details = (data.get("response") or {}).get("incomplete_details") or {}
        return details.get("reason") == "max_output_tokens"

    def answer_usage(self, block: dict[str, Any]) -> Usage:
        return from_responses(block)

    def event_usage(self, obj: dict[str, Any], so_far: Usage | None) -> Usage | None:
        if obj.get("type") in _FINAL:
            return from_responses((obj.get("response") or {}).get("usage") or {})
        return None

    def stream_error(
        self, etype: str, message: str, code: str | None = None, response_id: str = ""
    ) -> bytes:
        """``event: error`` (the OpenAI SDK raises on it) followed by ``response.failed``
        (what the Codex CLI reads to report why a stream failed)."""
        err = {"type": etype, "code": code or etype, "message": message, "param": None}
        body = {"type": "error", "error": err, "code": code or etype, "message": message}
        failed = {
            "type": "response.failed",
            "response": {
                "id": response_id or "resp_gateway_error",
                "object": "response",
                "status": "failed",
                "output": [],
                "error": {"code": code or etype, "message": message},
            },
        }
        return (
            b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"
            b"event: response.failed\ndata: " + orjson.dumps(failed) + b"\n\n"
        )


RESPONSES = Responses()
