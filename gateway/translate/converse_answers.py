"""A Bedrock Converse JSON answer <-> the neutral :class:`Answer`. The reader is what the
gateway uses (the answer is then written for the client by :mod:`gateway.translate.answers`);
the writer serves who plays a Converse provider (``simulate``'s summary call, the tests).

``output.message.content`` blocks: ``text``, ``toolUse`` (``toolUseId``, ``name``,
``input``) and ``reasoningContent.reasoningText`` (``text``, ``signature``) are kept;
``reasoningContent.redactedContent``, server tools' uses and results (a ``toolUse`` with
a ``type``, ``toolResult``), images, documents and citations are not. ``stopReason``
through :func:`gateway.translate.stops.from_converse`, ``usage`` through
:func:`gateway.translate.usage.from_converse`. A Converse answer has no id (AWS names the
request in a header): the answer gets a random one, as a stream does.

Reference: https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html
"""

from __future__ import annotations

from typing import Any

from gateway.formats.usage import Usage
from gateway.translate import stops, usage
from gateway.translate.fields import id_at, input_at, object_at, objects_at, text_at
from gateway.translate.ir import Answer, Dropped, Part, Reasoning, Refusal, Text, ToolCall
from gateway.translate.requests.common import call_input
from gateway.translate.streams.write import base_id


def read_converse(body: dict[str, Any]) -> Answer:
    message = (body.get("output") or {}).get("message") or {}
    parts: list[Part] = []
    for i, b in enumerate(objects_at(message.get("content"), "output.message.content")):
        if "text" in b:
            if text := text_at(b["text"], "content[].text"):
                parts.append(Text(text))
        elif "toolUse" in b:
            use = object_at(b["toolUse"], "content[].toolUse")
            if use.get("type") is not None:
                continue  # a server tool's use: not the client's to run
            parts.append(ToolCall(
                id_at(use.get("toolUseId"), "content[].toolUse.toolUseId", f"tooluse_{i}"),
                text_at(use.get("name"), "content[].toolUse.name") or "",
                input_at(use.get("input"), "content[].toolUse.input"),
            ))  # fmt: skip
        elif "reasoningContent" in b:
            r = object_at(b["reasoningContent"], "content[].reasoningContent")
            where = "content[].reasoningContent.reasoningText"
            if rt := object_at(r.get("reasoningText"), where):  # (redactedContent: not kept)
                text = text_at(rt.get("text"), where + ".text") or ""
                parts.append(
                    Reasoning(text, text_at(rt.get("signature"), where + ".signature") or None)
                )
    u = body.get("usage")
    return Answer(
        base_id(None),
        None,
        parts,
        stops.from_converse(body.get("stopReason")),
        usage.from_converse(u) if isinstance(u, dict) else None,
    )


#: The Converse ``stopReason`` of a neutral stop (the inverse of
#: :data:`gateway.translate.stops.FROM_CONVERSE`; ``refusal`` is a guardrail's).
_STOP_REASONS = {"refusal": "guardrail_intervened", "pause_turn": "end_turn"}


def write_converse(a: Answer) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for p in a.parts:
        if isinstance(p, Text | Refusal):
            content.append({"text": p.text})
        elif isinstance(p, Reasoning):
            text = {"text": p.text, **({"signature": p.signature} if p.signature else {})}
            content.append({"reasoningContent": {"reasoningText": text}})
        elif isinstance(p, ToolCall):
            use = {"toolUseId": p.id, "name": p.name, "input": call_input(p, Dropped())}
            content.append({"toolUse": use})
    stop = a.stop or "end_turn"
    out: dict[str, Any] = {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": _STOP_REASONS.get(stop, stop),
        "metrics": {"latencyMs": 0},
    }
    u = a.usage or Usage()  # Converse always says it
    out["usage"] = {
        "inputTokens": max(u.input - u.cache_read - u.cache_creation, 0),
        "outputTokens": u.output,
        "totalTokens": u.input + u.output,
        "cacheReadInputTokens": u.cache_read,
        "cacheWriteInputTokens": u.cache_creation,
    }
    return out


__all__ = ["read_converse", "write_converse"]
