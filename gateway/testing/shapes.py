"""Wire shapes of the fake provider: JSON bodies and SSE events of each API.

Everything here is pure: an :class:`Answer` (what the model "said") goes in, dicts
and :class:`Event` lists come out. The shapes follow the real APIs closely enough
for the official ``openai`` and ``anthropic`` SDKs, including their stream
accumulators (``client.chat.completions.stream``, ``client.responses.stream``,
``client.messages.stream``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import struct
from dataclasses import dataclass
from typing import Any

FINGERPRINT = "fp_fake"


@dataclass(frozen=True)
class ToolCall:
    """A tool call the fake model makes: arguments are a JSON string."""

    name: str
    arguments: str
    call_id: str


@dataclass(frozen=True)
class Answer:
    """What the fake model answers to one request.

    ``finish`` uses OpenAI chat names (``stop``, ``length``, ``tool_calls``,
    ``content_filter``); builders translate it for the other APIs.
    """

    id: str
    model: str
    text: str
    finish: str
    prompt_tokens: int
    completion_tokens: int
    created: int
    chunks: int = 8
    tool_call: ToolCall | None = None

    @property
    def pieces(self) -> list[str]:
        """The content deltas of a stream: the text (or tool arguments) in pieces."""
        source = self.tool_call.arguments if self.tool_call else self.text
        return split_pieces(source, self.chunks)


@dataclass(frozen=True)
class Event:
    """One SSE event. ``delta`` marks content deltas (what stream faults count)."""

    data: str
    event: str | None = None
    delta: bool = False
    done: bool = False

    def encode(self) -> bytes:
        head = f"event: {self.event}\n" if self.event else ""
        return f"{head}data: {self.data}\n\n".encode()


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def split_pieces(text: str, n: int) -> list[str]:
    """``text`` in at most ``n`` near-equal non-empty pieces (none for empty text)."""
    if not text:
        return []
    n = max(1, min(n, len(text)))
    size = math.ceil(len(text) / n)
    return [text[i : i + size] for i in range(0, len(text), size)]


# --- OpenAI chat completions ---------------------------------------------------------


def _chat_usage(a: Answer) -> dict[str, Any]:
    return {
        "prompt_tokens": a.prompt_tokens,
        "completion_tokens": a.completion_tokens,
        "total_tokens": a.prompt_tokens + a.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_json(a: Answer) -> dict[str, Any]:
    """A ``chat.completion`` body."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if a.tool_call else a.text,
        "refusal": None,
        "annotations": [],
    }
    if a.tool_call:
        message["tool_calls"] = [
            {
                "id": a.tool_call.call_id,
                "type": "function",
                "function": {"name": a.tool_call.name, "arguments": a.tool_call.arguments},
            }
        ]
    return {
        "id": a.id,
        "object": "chat.completion",
        "created": a.created,
        "model": a.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": a.finish}],
        "usage": _chat_usage(a),
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }


def chat_events(a: Answer, include_usage: bool) -> list[Event]:
    """``chat.completion.chunk`` events: role chunk, deltas, finish chunk, usage, [DONE]."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": a.id,
            "object": "chat.completion.chunk",
            "created": a.created,
            "model": a.model,
            "service_tier": "default",
            "system_fingerprint": FINGERPRINT,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            out["usage"] = None
        return out

    events: list[Event] = []
    tc = a.tool_call
    if tc:
        first = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "index": 0,
                    "id": tc.call_id,
                    "type": "function",
                    "function": {"name": tc.name, "arguments": ""},
                }
            ],
            "refusal": None,
        }
        events.append(Event(_dump(chunk(first))))
        for piece in a.pieces:
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
            events.append(Event(_dump(chunk(delta)), delta=True))
    else:
        events.append(Event(_dump(chunk({"role": "assistant", "content": "", "refusal": None}))))
        for piece in a.pieces:
            events.append(Event(_dump(chunk({"content": piece})), delta=True))
    events.append(Event(_dump(chunk({}, a.finish))))
    if include_usage:
        last = chunk({})
        last["choices"] = []
        last["usage"] = _chat_usage(a)
        events.append(Event(_dump(last)))
    events.append(Event("[DONE]", done=True))
    return events


# --- OpenAI legacy completions -------------------------------------------------------


def completion_json(a: Answer) -> dict[str, Any]:
    """A ``text_completion`` body."""
    return {
        "id": a.id,
        "object": "text_completion",
        "created": a.created,
        "model": a.model,
        "choices": [{"text": a.text, "index": 0, "logprobs": None, "finish_reason": a.finish}],
        "usage": {
            "prompt_tokens": a.prompt_tokens,
            "completion_tokens": a.completion_tokens,
            "total_tokens": a.prompt_tokens + a.completion_tokens,
        },
        "system_fingerprint": FINGERPRINT,
    }


def completion_events(a: Answer, include_usage: bool) -> list[Event]:
    """Legacy completion stream: text chunks, finish chunk, optional usage, [DONE]."""

    def chunk(text: str, finish: str | None = None) -> dict[str, Any]:
        return {
            "id": a.id,
            "object": "text_completion",
            "created": a.created,
            "model": a.model,
            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}],
            "system_fingerprint": FINGERPRINT,
        }

    events = [Event(_dump(chunk(piece)), delta=True) for piece in a.pieces]
    events.append(Event(_dump(chunk("", a.finish))))
    if include_usage:
        last = chunk("")
        last["choices"] = []
        last["usage"] = completion_json(a)["usage"]
        events.append(Event(_dump(last)))
    events.append(Event("[DONE]", done=True))
    return events


# --- OpenAI Responses ----------------------------------------------------------------


def _responses_status(a: Answer) -> tuple[str, dict[str, Any] | None]:
    if a.finish == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if a.finish == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def _responses_item(a: Answer, done: bool) -> dict[str, Any]:
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


def responses_json(a: Answer, body: dict[str, Any], done: bool = True) -> dict[str, Any]:
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
                "input_tokens_details": {"cached_tokens": 0},
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


def responses_events(a: Answer, body: dict[str, Any]) -> list[Event]:
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
        events.append(Event(_dump(data), event=data["type"], delta=delta))
    return events


# --- Anthropic Messages --------------------------------------------------------------

ANTHROPIC_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


def _anthropic_usage(a: Answer, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": a.prompt_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def messages_json(a: Answer, done: bool = True) -> dict[str, Any]:
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


def messages_events(a: Answer) -> list[Event]:
    """message_start, content_block_start, ping, deltas, block stop, message_delta, stop."""

    def event(data: dict[str, Any], delta: bool = False) -> Event:
        return Event(_dump(data), event=data["type"], delta=delta)

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


# --- in-stream errors ----------------------------------------------------------------


def stream_error_event(api: str, payload: dict[str, Any] | None, sequence_number: int) -> Event:
    """The API's own in-stream error event (see :class:`~gateway.testing.ErrorEventAfter`)."""
    if api == "messages":
        data = payload or {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
        }
        return Event(_dump(data), event="error")
    error = {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
        "param": None,
        "code": "server_error",
    }
    if api == "responses":
        data = payload or {"type": "error", "sequence_number": sequence_number, "error": error}
        return Event(_dump(data), event="error")
    return Event(_dump(payload or {"error": error}))


# --- embeddings and models -----------------------------------------------------------


def embedding_vector(text: str, dimensions: int) -> list[float]:
    """A deterministic unit-ish vector for ``text`` (from its sha256)."""
    out: list[float] = []
    counter = 0
    while len(out) < dimensions:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        out.extend((b - 127.5) / 127.5 for b in digest)
        counter += 1
    return [round(x, 6) for x in out[:dimensions]]


def embeddings_json(
    model: str, inputs: list[str], dimensions: int, encoding_format: str | None
) -> dict[str, Any]:
    """A ``list`` of ``embedding`` objects (floats, or base64 float32 as the SDK asks)."""
    data = []
    for index, text in enumerate(inputs):
        vector = embedding_vector(text, dimensions)
        embedding: Any = vector
        if encoding_format == "base64":
            embedding = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": embedding})
    tokens = sum(math.ceil(len(t) / 4) for t in inputs)
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def models_json(names: list[str]) -> dict[str, Any]:
    """The OpenAI model list."""
    return {
        "object": "list",
        "data": [
            {"id": n, "object": "model", "created": 1700000000, "owned_by": "fake-provider"}
            for n in names
        ],
    }
