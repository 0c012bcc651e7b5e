"""Anthropic Messages (``anthropic``): ``messages`` whose roles alternate, ``tool_use``
blocks answered by ``tool_result`` blocks in the next user message, a top-level
``system``; answers cut with ``stop_reason: max_tokens``; ``max_tokens`` is required."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import orjson

from gateway.formats.base import ErrorLike, Format
from gateway.formats.messages_stream import MessagesStream
from gateway.formats.parts import as_list, blocks, is_type, plain_text, role, text_of
from gateway.formats.usage import Usage, from_anthropic, update_anthropic

#: The version header the gateway sends; a client's own replaces it.
VERSION = "2023-06-01"


class Messages(MessagesStream, Format):
    name = "messages"
    provider_api = "anthropic"
    paths = ("/v1/messages",)
    fixed_keys = ("system",)
    output_caps = ("max_tokens",)  # required by the API: every request is capped
    alternating = True
    trims_prefill = True
    final_events = frozenset({"message_stop"})
    named_events = True

    def auth_headers(self, key: str | None) -> dict[str, str]:
        headers = {"x-api-key": key} if key else {}
        headers["anthropic-version"] = VERSION
        return headers

    def prefill_allowed(self, request: Mapping[str, Any]) -> bool:
        """Not with extended thinking on."""
        thinking = request.get("thinking")
        return not (isinstance(thinking, Mapping) and thinking.get("type") != "disabled")

    def summary_request(
        self, model: str, instructions: str, prompt: str, max_tokens: int
    ) -> dict[str, Any]:
        return {
            "model": model,
            "system": instructions,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": max_tokens,
            "stream": False,
        }

    def opened_calls(self, entry: Any) -> list[str]:
        if not isinstance(entry, Mapping) or entry.get("role") != "assistant":
            return []
        ids = [b.get("id") for b in blocks(entry) if is_type(b, "tool_use")]
        return [i for i in ids if isinstance(i, str)]

    def closed_calls(self, entry: Any) -> list[str]:
        if not isinstance(entry, Mapping) or entry.get("role") != "user":
            return []
        ids = [b.get("tool_use_id") for b in blocks(entry) if is_type(b, "tool_result")]
        return [i for i in ids if isinstance(i, str)]

    def problems(self, items: Sequence[Any]) -> list[str]:
        return turn_problems(self, items, "tool_use", "tool_result")

    def transcript_lines(self, entry: Any) -> list[str]:
        if not isinstance(entry, Mapping):
            return []
        who = role(entry) or "assistant"
        lines: list[str] = []
        content = entry.get("content")
        for block in content if isinstance(content, list) else [content]:
            if isinstance(block, str):
                lines.append(f"{who}: {block}")
            elif not isinstance(block, Mapping):
                continue
            elif block.get("type") == "text":
                lines.append(f"{who}: {block.get('text', '')}")
            elif block.get("type") == "tool_use":
                arguments = json.dumps(block.get("input"), ensure_ascii=False, default=str)
                lines.append(f"assistant called {block.get('name')}({arguments})")
            elif block.get("type") == "tool_result":
                lines.append(f"tool result: {plain_text(block.get('content'))}")
        return lines

    def snip_results(self, entry: Any, snip: Callable[[Any], Any]) -> Any:
        if not (isinstance(entry, Mapping) and role(entry) == "user"):
            return entry
        if not isinstance(entry.get("content"), list):
            return entry
        new_blocks = []
        for block in blocks(entry):
            if is_type(block, "tool_result"):
                block = {**block, "content": snip(block.get("content"))}
            new_blocks.append(block)
        return {**entry, "content": new_blocks}

    def answer_text(self, response: Mapping[str, Any], sep: str = "") -> str:
        return sep.join(text_of(b) for b in as_list(response.get("content")) if is_type(b, "text"))

    def cut_at_length(self, response: Mapping[str, Any]) -> bool:
        tool_use = any(is_type(b, "tool_use") for b in as_list(response.get("content")))
        return response.get("stop_reason") == "max_tokens" and not tool_use

    def text_answer(
        self, text: str, *, id: Any, model: Any, created: Any, index: int, item_id: Any
    ) -> dict[str, Any]:
        return {
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": None,
            "stop_sequence": None,
        }

    def merge(self, merged: dict[str, Any], parts: Sequence[Mapping[str, Any]], text: str) -> None:
        content = [b for b in as_list(merged.get("content")) if not is_type(b, "text")]
        template: Mapping[str, Any] = next(
            (b for b in as_list(merged.get("content")) if is_type(b, "text")), {}
        )
        content.append({**template, "type": "text", "text": text})
        merged["content"] = content
        merged["stop_reason"] = parts[-1].get("stop_reason")
        merged["stop_sequence"] = parts[-1].get("stop_sequence")

    def event_cut(self, data: Any) -> bool:
        return (
            data.get("type") == "message_delta"
            and (data.get("delta") or {}).get("stop_reason") == "max_tokens"
        )

    def answer_usage(self, block: dict[str, Any]) -> Usage:
        return from_anthropic(block)

    def event_usage(self, obj: dict[str, Any], so_far: Usage | None) -> Usage | None:
        etype = obj.get("type")
        if etype == "message_start":
            return from_anthropic((obj.get("message") or {}).get("usage") or {})
        if etype == "message_delta":  # cumulative counts; input ones too when known late
            usage = Usage() if so_far is None else replace(so_far)
            update_anthropic(usage, obj.get("usage") or {})
            return usage
        return None

    def error_body(self, err: ErrorLike) -> dict[str, object]:
        return err.anthropic_body()

    def stream_error(
        self, etype: str, message: str, code: str | None = None, response_id: str = ""
    ) -> bytes:
        body = {"type": "error", "error": {"type": etype, "message": message}}
        return b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"


def turn_problems(fmt: Format, items: Sequence[Any], use: str, result: str) -> list[str]:
    """What a provider whose turns alternate (user first) and whose tool calls are answered
    in the next user turn rejects: :meth:`Format.problems` of Messages and Converse (``use``
    and ``result`` name their call and result blocks)."""
    problems: list[str] = []
    if not items:
        return ["no messages"]
    if role(items[0]) != "user":
        problems.append(f"message 0: the first message is {role(items[0])!r}, not 'user'")
    for i, entry in enumerate(items):
        if role(entry) not in ("user", "assistant"):
            problems.append(f"message {i}: role {role(entry)!r}")
        if i and role(entry) == role(items[i - 1]):
            problems.append(f"message {i}: two {role(entry)!r} messages in a row")
        uses = set(fmt.opened_calls(entry))
        nxt = items[i + 1] if i + 1 < len(items) else None
        answered = set(fmt.closed_calls(nxt)) if role(nxt) == "user" else set()
        for call in sorted(uses - answered):
            problems.append(f"message {i}: {use} {call!r} has no {result} in the next message")
        previous = set(fmt.opened_calls(items[i - 1])) if i else set()
        for call in sorted(set(fmt.closed_calls(entry)) - previous):
            problems.append(f"message {i}: {result} {call!r} has no {use} just before it")
    return problems


MESSAGES = Messages()
