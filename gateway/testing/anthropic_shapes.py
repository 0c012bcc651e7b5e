"""Anthropic Messages wire shapes of the fake provider: the ``message`` body and its
SSE events, with OpenAI finish reasons translated to Anthropic stop reasons.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.testing.answer import FakeAnswer, FakeEvent, dump

#: Anthropic's refusal of tool blocks in a request that defines no tools.
TOOLS_REQUIRED = "Requests which include `tool_use` or `tool_result` blocks must define tools."


def tool_blocks_without_tools(body: dict[str, Any]) -> bool:
    """Whether a Messages body holds ``tool_use`` or ``tool_result`` blocks but defines no
    ``tools``: Anthropic refuses it (:data:`TOOLS_REQUIRED`)."""
    if body.get("tools"):
        return False
    messages = body.get("messages")
    for m in messages if isinstance(messages, list) else ():
        content = m.get("content") if isinstance(m, dict) else None
        for b in content if isinstance(content, list) else ():
            if isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result"):
                return True
    return False


ANTHROPIC_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


def _anthropic_usage(a: FakeAnswer, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": a.uncached_tokens,
        "cache_creation_input_tokens": a.cache_write,
        "cache_read_input_tokens": a.cache_read,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def messages_json(a: FakeAnswer, done: bool = True) -> dict[str, Any]:
    """A Messages ``message``; ``done=False`` gives the ``message_start`` snapshot."""
    content: list[dict[str, Any]] = []
    if done and a.tool_call:
        content.append(
            {
                "type": "tool_use",
                "id": a.tool_call.call_id,
                "name": a.tool_call.name,
                "input": json.loads(a.tool_call.arguments),
            }
        )
    elif done:
        content.append({"type": "text", "text": a.text})
    return {
        "id": a.id,
        "type": "message",
        "role": "assistant",
        "model": a.model,
        "content": content,
        "stop_reason": ANTHROPIC_STOP.get(a.finish, a.finish) if done else None,
        "stop_sequence": None,
        "usage": _anthropic_usage(a, a.completion_tokens if done else 1),
    }


def messages_events(a: FakeAnswer) -> list[FakeEvent]:
    """message_start, content_block_start, ping, deltas, block stop, message_delta, stop."""

    def event(data: dict[str, Any], delta: bool = False) -> FakeEvent:
        return FakeEvent(dump(data), event=data["type"], delta=delta)

    events = [event({"type": "message_start", "message": messages_json(a, False)})]
    block: dict[str, Any]
    if a.tool_call:
        block = {"type": "tool_use", "id": a.tool_call.call_id, "name": a.tool_call.name}
        block["input"] = {}
    else:
        block = {"type": "text", "text": ""}
    events.append(event({"type": "content_block_start", "index": 0, "content_block": block}))
    events.append(event({"type": "ping"}))
    for piece in a.pieces:
        delta = (
            {"type": "input_json_delta", "partial_json": piece}
            if a.tool_call
            else {"type": "text_delta", "text": piece}
        )
        events.append(event({"type": "content_block_delta", "index": 0, "delta": delta}, True))
    events.append(event({"type": "content_block_stop", "index": 0}))
    stop = ANTHROPIC_STOP.get(a.finish, a.finish)
    message_delta = {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": a.completion_tokens},
    }
    events.append(event(message_delta))
    events.append(event({"type": "message_stop"}))
    return events
