"""JSON answers: the provider's answer -> the neutral :class:`Answer` -> the client's.

What an answer keeps across formats: the text (several text blocks become one), tool
calls with their ids (towards Anthropic made ``[A-Za-z0-9_-]``; arguments that are not a
JSON object become ``{}``), reasoning (chat ``reasoning_content`` / ``reasoning`` <->
Anthropic ``thinking`` <-> Responses ``reasoning`` items; an Anthropic signature rides in
a Responses item's ``encrypted_content``, sealed, and is lost in chat), refusals (chat
``refusal`` <-> Responses ``refusal`` parts; Anthropic text), the stop reason
(:mod:`~gateway.translate.stops`), usage (:mod:`~gateway.translate.usage`), ``model``.
Not kept: chat ``created`` when the provider gives none (the engine should set
``Answer.created`` to the time it answered; 0 otherwise), ``system_fingerprint``,
``logprobs``, Anthropic ``stop_sequence`` towards OpenAI (its stop is ``stop``), OpenAI
item ids (Responses item ids are made from the answer's id: ``msg_<id>``,
``rs_<id>_<n>``, ``fc_<call id>``), Anthropic ``redacted_thinking`` and server-tool
blocks, annotations / citations. An answer without usage gets zero usage in Anthropic's
form (its ``Message`` requires one) and none elsewhere.

A field of the wrong type (:mod:`gateway.translate.fields`): absent or ``null`` is
absent; any other wrong type raises :class:`~gateway.errors.WrongType`, and the
answer is a broken provider's (retried), never written with a value of the wrong type.
"""

from __future__ import annotations

from typing import Any

from gateway.formats.usage import Usage
from gateway.translate import stops, usage
from gateway.translate.fields import (
    arguments_at,
    id_at,
    input_at,
    is_text,
    object_at,
    objects_at,
    text_at,
)
from gateway.translate.ir import (
    Answer,
    Dropped,
    Names,
    Part,
    Reasoning,
    Refusal,
    Text,
    ToolCall,
    seal_signature,
    unseal_signature,
)
from gateway.translate.requests.anthropic import tool_id
from gateway.translate.requests.common import call_input

# ---------------------------------------------------------------- reading


def read_chat(body: dict[str, Any]) -> Answer:
    choices = body.get("choices") or [{}]
    choice = choices[0]
    msg = choice.get("message") or {}
    parts: list[Part] = []
    reasoning = msg.get("reasoning_content")  # extensions (DeepSeek's, OpenRouter's): read
    if not is_text(reasoning):  # when they are text
        reasoning = msg.get("reasoning")
    if is_text(reasoning):
        parts.append(Reasoning(reasoning))
    content = msg.get("content")
    if type(content) is list:  # Mistral's parts: text, and thinking as a list of texts
        for p in objects_at(content, "message.content"):
            if p.get("type") == "text" and (text := text_at(p.get("text"), "content[].text")):
                parts.append(Text(text))
            elif p.get("type") == "thinking":
                for q in objects_at(p.get("thinking"), "content[].thinking"):
                    if thought := text_at(q.get("text"), "content[].thinking[].text"):
                        parts.append(Reasoning(thought))
    elif text := text_at(content, "message.content"):
        parts.append(Text(text))
    if refusal := text_at(msg.get("refusal"), "message.refusal"):
        parts.append(Refusal(refusal))
    for i, call in enumerate(objects_at(msg.get("tool_calls"), "message.tool_calls")):
        fn = object_at(call.get("function"), "message.tool_calls[].function")
        parts.append(ToolCall(
            id_at(call.get("id"), "tool_calls[].id", f"call_{i}"),
            text_at(fn.get("name"), "tool_calls[].function.name") or "",
            arguments_at(fn.get("arguments"), "tool_calls[].function.arguments"),
        ))  # fmt: skip
    u = body.get("usage")
    return Answer(
        id_at(body.get("id"), "id", ""),
        body.get("model"),
        parts,
        stops.from_chat(choice.get("finish_reason")),
        usage.from_chat(u) if isinstance(u, dict) else None,
        _time(body.get("created")),
    )


def read_anthropic(body: dict[str, Any]) -> Answer:
    parts: list[Part] = []
    for i, b in enumerate(objects_at(body.get("content"), "content")):
        kind = b.get("type")
        if kind == "text":
            if text := text_at(b.get("text"), "content[].text"):
                parts.append(Text(text))
        elif kind == "thinking":
            thinking = text_at(b.get("thinking"), "content[].thinking") or ""
            parts.append(
                Reasoning(thinking, text_at(b.get("signature"), "content[].signature") or None)
            )
        elif kind == "tool_use":
            parts.append(ToolCall(
                id_at(b.get("id"), "content[].id", f"toolu_{i}"),
                text_at(b.get("name"), "content[].name") or "",
                input_at(b.get("input"), "content[].input"),
            ))  # fmt: skip
    u = body.get("usage")
    return Answer(
        id_at(body.get("id"), "id", ""),
        body.get("model"),
        parts,
        text_at(body.get("stop_reason"), "stop_reason") or "end_turn",
        usage.from_anthropic(u) if isinstance(u, dict) else None,
        stop_sequence=text_at(body.get("stop_sequence"), "stop_sequence") or None,
    )


def read_responses(body: dict[str, Any]) -> Answer:
    parts: list[Part] = []
    calls = False
    for n, item in enumerate(objects_at(body.get("output"), "output")):
        kind = item.get("type")
        if kind == "message":
            for c in objects_at(item.get("content"), "output[].content"):
                at = "output[].content[]"
                if c.get("type") == "output_text" and (text := text_at(c.get("text"), at)):
                    parts.append(Text(text))
                elif c.get("type") == "refusal" and (refusal := text_at(c.get("refusal"), at)):
                    parts.append(Refusal(refusal))
        elif kind == "function_call":
            calls = True
            call_id = id_at(item.get("call_id"), "output[].call_id", "")
            parts.append(ToolCall(
                call_id or id_at(item.get("id"), "output[].id", f"call_{n}"),
                text_at(item.get("name"), "output[].name") or "",
                arguments_at(item.get("arguments"), "output[].arguments"),
            ))  # fmt: skip
        elif kind == "reasoning":
            summary = objects_at(item.get("summary"), "output[].summary")
            text = "".join(text_at(s.get("text"), "output[].summary[].text") or "" for s in summary)
            parts.append(Reasoning(text, unseal_signature(item.get("encrypted_content"))))
    u = body.get("usage")
    stop = stops.from_responses(body.get("status"), body.get("incomplete_details"), calls)
    return Answer(
        id_at(body.get("id"), "id", ""),
        body.get("model"),
        parts,
        stop,
        usage.from_responses(u) if isinstance(u, dict) else None,
        _time(body.get("created_at")),
    )


def _time(value: Any) -> int | None:
    """A provider's ``created`` time when it is an integer (not a bool, not a string)."""
    return value if type(value) is int else None


READERS = {"chat": read_chat, "messages": read_anthropic, "responses": read_responses}

# ---------------------------------------------------------------- writing


def write_chat(a: Answer) -> dict[str, Any]:
    texts = [p.text for p in a.parts if isinstance(p, Text)]
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    refusals = [p.text for p in a.parts if isinstance(p, Refusal)]
    msg["refusal"] = "".join(refusals) if refusals else None
    reasoning = [p.text for p in a.parts if isinstance(p, Reasoning)]
    if reasoning:
        msg["reasoning_content"] = "".join(reasoning)
    calls = [
        {"id": p.id, "type": "function", "function": {"name": p.name, "arguments": p.arguments}}
        for p in a.parts
        if isinstance(p, ToolCall)
    ]
    if calls:
        msg["tool_calls"] = calls
    body: dict[str, Any] = {
        "id": a.id,
        "object": "chat.completion",
        "created": a.created or 0,
        "model": a.model,
        "choices": [
            {"index": 0, "message": msg, "logprobs": None, "finish_reason": stops.to_chat(a.stop)}
        ],
    }
    if a.usage is not None:
        body["usage"] = usage.to_chat(a.usage)
    return body


def write_anthropic(a: Answer) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for p in a.parts:
        if isinstance(p, Text | Refusal):
            content.append({"type": "text", "text": p.text})
        elif isinstance(p, Reasoning):
            content.append({"type": "thinking", "thinking": p.text, "signature": p.signature or ""})
        elif isinstance(p, ToolCall):
            args = call_input(p, Dropped())
            content.append({"type": "tool_use", "id": tool_id(p.id), "name": p.name, "input": args})
    return {
        "id": a.id,
        "type": "message",
        "role": "assistant",
        "model": a.model,
        "content": content,
        "stop_reason": a.stop or "end_turn",
        "stop_sequence": a.stop_sequence,
        "usage": usage.to_anthropic(a.usage or Usage()),
    }


def write_responses(a: Answer, names: Names | None = None) -> dict[str, Any]:
    """``names``: the request's namespaced functions (``responses.namespaces``), whose calls
    are named back in their namespace."""
    output: list[dict[str, Any]] = []
    content: list[dict[str, Any]] = []
    for p in a.parts:
        if isinstance(p, Text):
            content.append({"type": "output_text", "text": p.text, "annotations": []})
        elif isinstance(p, Refusal):
            content.append({"type": "refusal", "refusal": p.text})
        elif isinstance(p, Reasoning):
            output.append(reasoning_item(f"rs_{a.id}_{len(output)}", p.text, p.signature))
        elif isinstance(p, ToolCall):
            output.append(call_item(p.id, p.name, p.arguments, names))
    if content:
        output.insert(
            sum(1 for o in output if o["type"] == "reasoning"),
            message_item(f"msg_{a.id}", content),
        )
    status, details = stops.to_responses(a.stop)
    return response_object(a.id, a.model, a.created or 0, status, details, output, a.usage)


def message_item(item_id: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": content,
    }


def call_item(
    call_id: str, name: str, arguments: str, names: Names | None = None
) -> dict[str, Any]:
    """A Responses function call; one of a namespace tool's functions (in ``names``, as the
    other formats call it) is named in its namespace again."""
    item = {
        "id": f"fc_{call_id}",
        "type": "function_call",
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }
    if names and name in names:
        item["namespace"], item["name"] = names[name]
    return item


def reasoning_item(item_id: str, text: str, signature: str | None = None) -> dict[str, Any]:
    """A Responses reasoning item; an Anthropic thinking ``signature`` rides in
    ``encrypted_content`` (sealed, see :func:`~gateway.translate.ir.seal_signature`) so that
    the client's next request can hand the thinking back to the Anthropic model."""
    item: dict[str, Any] = {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
    }
    if signature:
        item["encrypted_content"] = seal_signature(signature)
    return item


def response_object(
    rid: str,
    model: Any,
    created: int,
    status: str,
    details: dict[str, str] | None,
    output: list[dict[str, Any]],
    u: Usage | None,
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": details,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage.to_responses(u) if u is not None else None,
    }


WRITERS = {"chat": write_chat, "messages": write_anthropic, "responses": write_responses}
