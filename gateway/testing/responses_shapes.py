"""OpenAI Responses wire shapes of the fake provider: the ``response`` object and its
typed, sequence-numbered SSE events.
"""

from __future__ import annotations

from typing import Any

from gateway.testing.answer import FakeAnswer, FakeEvent, dump


def _responses_status(a: FakeAnswer) -> tuple[str, dict[str, Any] | None]:
    if a.finish == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if a.finish == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def _responses_item(a: FakeAnswer, done: bool) -> dict[str, Any]:
    status, _ = _responses_status(a)
    item_status = status if done else "in_progress"
    if a.tool_call:
        return {
            "id": "fc_" + a.id.removeprefix("resp_"),
            "type": "function_call",
            "status": item_status,
            "arguments": a.tool_call.arguments if done else "",
            "call_id": a.tool_call.call_id,
            "name": a.tool_call.name,
        }
    return {
        "id": "msg_" + a.id.removeprefix("resp_"),
        "type": "message",
        "status": item_status,
        "role": "assistant",
        "content": [_output_text(a.text)] if done else [],
    }


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def responses_json(a: FakeAnswer, body: dict[str, Any], done: bool = True) -> dict[str, Any]:
    """A ``response`` object; ``done=False`` gives the in-progress snapshot of a stream."""
    status, incomplete = _responses_status(a)
    return {
        "id": a.id,
        "object": "response",
        "created_at": a.created,
        "status": status if done else "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": incomplete if done else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": a.model,
        "output": [_responses_item(a, True)] if done else [],
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": (
            {
                "input_tokens": a.prompt_tokens,
                "input_tokens_details": {"cached_tokens": a.cache_read},
                "output_tokens": a.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": a.prompt_tokens + a.completion_tokens,
            }
            if done
            else None
        ),
        "user": None,
        "metadata": {},
    }


def responses_events(a: FakeAnswer, body: dict[str, Any]) -> list[FakeEvent]:
    """The Responses event sequence, each event with ``event:`` and ``sequence_number``."""
    raw: list[tuple[dict[str, Any], bool]] = []

    def add(kind: str, is_delta: bool = False, /, **fields: Any) -> None:
        raw.append(({"type": kind, **fields}, is_delta))

    add("response.created", response=responses_json(a, body, done=False))
    add("response.in_progress", response=responses_json(a, body, done=False))
    item = _responses_item(a, done=False)
    where = {"item_id": item["id"], "output_index": 0}
    add("response.output_item.added", output_index=0, item=item)
    if a.tool_call:
        for piece in a.pieces:
            add("response.function_call_arguments.delta", True, **where, delta=piece)
        add(
            "response.function_call_arguments.done",
            **where,
            name=a.tool_call.name,
            arguments=a.tool_call.arguments,
        )
    else:
        part = {**where, "content_index": 0}
        add("response.content_part.added", **part, part=_output_text(""))
        for piece in a.pieces:
            add("response.output_text.delta", True, **part, delta=piece, logprobs=[])
        add("response.output_text.done", **part, text=a.text, logprobs=[])
        add("response.content_part.done", **part, part=_output_text(a.text))
    add("response.output_item.done", output_index=0, item=_responses_item(a, done=True))
    final = responses_json(a, body)
    add(f"response.{final['status']}", response=final)
    events = []
    for seq, (data, delta) in enumerate(raw):
        data["sequence_number"] = seq
        events.append(FakeEvent(dump(data), event=data["type"], delta=delta))
    return events
