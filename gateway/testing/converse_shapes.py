"""Bedrock's Converse API for the fake Bedrock: the request read as the fake provider's
:class:`~gateway.testing.conversation.Conversation`, and the answer written as Converse's
JSON body and ConverseStream's events.

A Converse body: ``messages`` (each a ``role`` and a list of content blocks: ``text``,
``toolUse`` ``{toolUseId, name, input}``, ``toolResult`` ``{toolUseId, content, status}``,
``image``, ``document``, ...), ``system`` (blocks), ``inferenceConfig`` (``maxTokens``,
``temperature``, ``topP``, ``stopSequences``), ``toolConfig`` (``tools`` of ``toolSpec``
``{name, description, inputSchema: {json}}``, ``toolChoice``); the model is in the URL.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.testing.answer import FakeAnswer, FakeEvent, dump
from gateway.testing.conversation import Conversation, ToolSpec, Turn

#: Converse's stop reasons for the fake provider's (OpenAI's) finish reasons.
CONVERSE_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "content_filtered",
}
#: The content blocks a Converse message may hold.
BLOCKS = frozenset(
    {"text", "image", "document", "video", "toolUse", "toolResult", "guardContent",
     "cachePoint", "reasoningContent", "citationsContent"}
)  # fmt: skip
#: The padding ConverseStream events carry (as Bedrock's, letters of varying length).
PADDING = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"


def problem(body: Any) -> str | None:
    """What Bedrock's validation says of a Converse body, or None: it is sound."""
    if not isinstance(body, dict):
        return "Malformed input request, please reformat your input and try again."
    for key in ("model", "stream"):
        if key in body:
            return f"Malformed input request: extraneous key [{key}] is not permitted."
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return (
            "A conversation must start with a user message. "
            "Try again with a conversation that starts with a user message."
        )
    for i, msg in enumerate(messages):
        content = msg.get("content") if isinstance(msg, dict) else None
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            return (
                f"1 validation error detected: Value at 'messages.{i + 1}.member.role' "
                "failed to satisfy constraint: Member must satisfy enum value set"
            )
        if not isinstance(content, list) or not all(
            isinstance(b, dict) and len(b) == 1 and next(iter(b)) in BLOCKS for b in content
        ):
            return f"The content field in the Message object at messages.{i} is invalid."
        for j, block in enumerate(content):
            text = block.get("text")
            if isinstance(text, str) and (not text or text.isspace()):
                return (
                    f"The text field in the ContentBlock object at messages.{i}.content.{j} is "
                    "blank. Add text to the text field, and try again."
                )
    tool_blocks = any(
        "toolUse" in b or "toolResult" in b for m in messages for b in m.get("content", ())
    )
    if tool_blocks and not body.get("toolConfig"):
        return (
            "The toolConfig field must be defined when using toolUse and toolResult content blocks."
        )
    return None


def _text(blocks: Any) -> str:
    """The text of a list of Converse content blocks (a tool result's too)."""
    out = []
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str):
            out.append(block["text"])
        elif "json" in block:
            out.append(json.dumps(block["json"]))
    return "".join(out)


def parse_converse(body: dict[str, Any], *, stream: bool) -> Conversation:
    """A Converse body (sound by :func:`problem`) as the fake provider's conversation."""
    turns: list[Turn] = []
    system = _text(body.get("system"))
    if system:
        turns.append(Turn("system", system))
    for msg in body["messages"]:
        said: list[str] = []
        for block in msg["content"]:
            if isinstance(block.get("text"), str):
                said.append(block["text"])
            elif isinstance(block.get("toolUse"), dict):
                turns.append(Turn("assistant", json.dumps(block["toolUse"].get("input", {})), True))
            elif isinstance(block.get("toolResult"), dict):
                turns.append(Turn("tool", _text(block["toolResult"].get("content"))))
        if said or not msg["content"]:
            turns.append(Turn(msg["role"], "".join(said)))
    config = _dict(body.get("toolConfig"))
    tools = [
        ToolSpec(spec["name"], (spec.get("inputSchema") or {}).get("json") or {})
        for t in config.get("tools") or []
        if isinstance(t, dict)
        and isinstance(spec := t.get("toolSpec"), dict)
        and isinstance(spec.get("name"), str)
    ]
    limits = _dict(body.get("inferenceConfig"))
    max_tokens = limits.get("maxTokens")
    return Conversation(
        turns=turns,
        tools=tools,
        tool_choice=_tool_choice(config.get("toolChoice")),
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
        stream=stream,
    )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _tool_choice(choice: Any) -> str | None:
    """``{"auto": {}}`` None, ``{"any": {}}`` required, ``{"tool": {"name": n}}`` n."""
    if not isinstance(choice, dict):
        return None
    if "any" in choice:
        return "required"
    tool = choice.get("tool")
    return tool.get("name") if isinstance(tool, dict) else None


def _usage(a: FakeAnswer) -> dict[str, int]:
    """Converse's usage: ``inputTokens`` without the tokens read from or written to the
    cache, which come next to it when there are any (as Bedrock leaves them out of a
    request that uses no cache); ``totalTokens`` counts them."""
    usage = {
        "inputTokens": a.uncached_tokens,
        "outputTokens": a.completion_tokens,
        "totalTokens": a.prompt_tokens + a.completion_tokens,
    }
    if a.cache_read or a.cache_write:
        usage["cacheReadInputTokens"] = a.cache_read
        usage["cacheWriteInputTokens"] = a.cache_write
    return usage


def converse_json(a: FakeAnswer, latency_ms: int) -> dict[str, Any]:
    """The Converse answer: the message, its stop reason, usage and metrics."""
    if a.tool_call is not None:
        use = {"toolUseId": a.tool_call.call_id, "name": a.tool_call.name,
               "input": json.loads(a.tool_call.arguments)}  # fmt: skip
        content: list[dict[str, Any]] = [{"toolUse": use}]
    else:
        content = [{"text": a.text}]
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": CONVERSE_STOP.get(a.finish, a.finish),
        "usage": _usage(a),
        "metrics": {"latencyMs": latency_ms},
    }


def converse_events(a: FakeAnswer, latency_ms: int) -> list[FakeEvent]:
    """messageStart, contentBlockStart (a tool use), deltas, contentBlockStop,
    messageStop, metadata; each ``FakeEvent.event`` is the ConverseStream event type."""

    def event(etype: str, data: dict[str, Any], delta: bool = False) -> FakeEvent:
        return FakeEvent(dump({**data, "p": PADDING[: 4 + len(dump(data)) % 24]}), etype, delta)

    events = [event("messageStart", {"role": "assistant"})]
    if a.tool_call is not None:
        start = {"toolUse": {"toolUseId": a.tool_call.call_id, "name": a.tool_call.name}}
        events.append(event("contentBlockStart", {"start": start, "contentBlockIndex": 0}))
    for piece in a.pieces:
        delta = {"toolUse": {"input": piece}} if a.tool_call else {"text": piece}
        events.append(event("contentBlockDelta", {"delta": delta, "contentBlockIndex": 0}, True))
    events.append(event("contentBlockStop", {"contentBlockIndex": 0}))
    events.append(event("messageStop", {"stopReason": CONVERSE_STOP.get(a.finish, a.finish)}))
    events.append(event("metadata", {"usage": _usage(a), "metrics": {"latencyMs": latency_ms}}))
    return events


__all__ = ["CONVERSE_STOP", "converse_events", "converse_json", "parse_converse", "problem"]
