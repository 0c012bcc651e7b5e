"""OpenAI chat completions (``openai``): ``messages`` with ``tool_calls`` and ``tool``
results, answers in ``choices`` (``finish_reason: length`` when cut). Legacy completions
and embeddings share its endpoints' errors and keys."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.formats.base import Format
from gateway.formats.chat_stream import ChatStream
from gateway.formats.parts import as_dict, plain_text, role
from gateway.formats.usage import Usage, from_chat


class Chat(ChatStream, Format):
    name = "chat"
    provider_api = "openai"
    paths = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
    base_path = "/v1"
    output_caps = ("max_completion_tokens", "max_tokens")
    usage_if_asked = True
    usage_key = "usage"

    def several_choices(self, request: Mapping[str, Any]) -> bool:
        n = request.get("n")
        return isinstance(n, int) and n > 1

    def opened_calls(self, entry: Any) -> list[str]:
        if not isinstance(entry, Mapping) or entry.get("role") != "assistant":
            return []
        calls = entry.get("tool_calls")
        if not isinstance(calls, list):
            return []
        ids = [tc.get("id") for tc in calls if isinstance(tc, Mapping)]
        return [i for i in ids if isinstance(i, str)]

    def closed_calls(self, entry: Any) -> list[str]:
        if isinstance(entry, Mapping) and entry.get("role") == "tool":
            call = entry.get("tool_call_id")
            return [call] if isinstance(call, str) else []
        return []

    def problems(self, items: Sequence[Any]) -> list[str]:
        problems: list[str] = []
        pending: set[str] | None = None  # None: not inside a tool block
        for i, entry in enumerate(items):
            if role(entry) == "tool":
                call = entry.get("tool_call_id")
                if pending is None:
                    problems.append(f"message {i}: tool result {call!r} outside a tool block")
                elif call not in pending:
                    problems.append(
                        f"message {i}: tool result {call!r} answers no pending tool call"
                    )
                else:
                    pending.discard(call)
                continue
            if pending:
                problems.append(f"message {i}: tool calls {sorted(pending)} have no result")
            pending = set(self.opened_calls(entry)) or None
        if pending:
            problems.append(f"end: tool calls {sorted(pending)} have no result")
        return problems

    def transcript_lines(self, entry: Any) -> list[str]:
        if not isinstance(entry, Mapping):
            return []
        who = role(entry) or "assistant"
        if who == "tool":
            return [f"tool result: {plain_text(entry.get('content'))}"]
        lines: list[str] = []
        if text := plain_text(entry.get("content")):
            lines.append(f"{who}: {text}")
        for call in entry.get("tool_calls") or []:
            function = call.get("function") or {}
            lines.append(
                f"assistant called {function.get('name')}({function.get('arguments', '')})"
            )
        return lines

    def snip_results(self, entry: Any, snip: Callable[[Any], Any]) -> Any:
        if isinstance(entry, Mapping) and role(entry) == "tool" and "content" in entry:
            return {**entry, "content": snip(entry["content"])}
        return entry

    def answer_text(self, response: Mapping[str, Any], sep: str = "") -> str:
        # chat content is one string (its legacy parts are joined as plain text is)
        content = as_dict(first_choice(response).get("message")).get("content")
        return plain_text(content) if content else ""

    def cut_at_length(self, response: Mapping[str, Any]) -> bool:
        choice = first_choice(response)
        message = as_dict(choice.get("message"))
        calls = message.get("tool_calls") or message.get("function_call")
        return choice.get("finish_reason") == "length" and not calls

    def text_answer(
        self, text: str, *, id: Any, model: Any, created: Any, index: int, item_id: Any
    ) -> dict[str, Any]:
        return {
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": index,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": None,
                }
            ],
        }

    def merge(self, merged: dict[str, Any], parts: Sequence[Mapping[str, Any]], text: str) -> None:
        choices = merged.get("choices")
        if not isinstance(choices, list) or not choices:
            merged["choices"] = choices = [{"index": 0, "message": {"role": "assistant"}}]
        if not isinstance(choices[0], dict):
            choices[0] = {"index": 0}
        choice = choices[0]
        if not isinstance(choice.get("message"), dict):
            choice["message"] = {"role": "assistant"}
        message = choice["message"]
        message["content"] = text
        reasoning = [
            as_dict(first_choice(p).get("message")).get("reasoning_content") for p in parts
        ]
        if any(isinstance(r, str) for r in reasoning):
            message["reasoning_content"] = "".join(r for r in reasoning if isinstance(r, str))
        choice["finish_reason"] = first_choice(parts[-1]).get("finish_reason")

    def event_cut(self, data: Any) -> bool:
        return any(
            isinstance(c, dict) and c.get("finish_reason") == "length"
            for c in data.get("choices") or ()
        )

    def answer_usage(self, block: dict[str, Any]) -> Usage:
        return from_chat(block)

    def event_usage(self, obj: dict[str, Any], so_far: Usage | None) -> Usage | None:
        u = obj.get("usage")
        return from_chat(u) if isinstance(u, dict) else None


def first_choice(response: Mapping[str, Any]) -> Mapping[str, Any]:
    """The first choice of a chat answer, or {}."""
    choices = response.get("choices")
    if isinstance(choices, list) and choices:
        first = choices[0]
        if type(first) is dict or isinstance(first, Mapping):  # a JSON answer's: a dict, quickly
            return first
    return {}


CHAT = Chat()
