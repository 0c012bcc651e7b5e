"""OpenAI wire shapes of the fake provider: chat completions, legacy completions,
embeddings and the model list (JSON bodies and SSE events; Responses has its own module).
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from typing import Any

from gateway.testing.answer import FakeAnswer, FakeEvent, dump

FINGERPRINT = "fp_fake"


# --- OpenAI chat completions ---------------------------------------------------------


def _chat_usage(a: FakeAnswer) -> dict[str, Any]:
    return {
        "prompt_tokens": a.prompt_tokens,
        "completion_tokens": a.completion_tokens,
        "total_tokens": a.prompt_tokens + a.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": a.cache_read, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def chat_json(a: FakeAnswer) -> dict[str, Any]:
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


def chat_events(a: FakeAnswer, include_usage: bool) -> list[FakeEvent]:
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

    events: list[FakeEvent] = []
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
        events.append(FakeEvent(dump(chunk(first))))
        for piece in a.pieces:
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
            events.append(FakeEvent(dump(chunk(delta)), delta=True))
    else:
        events.append(FakeEvent(dump(chunk({"role": "assistant", "content": "", "refusal": None}))))
        for piece in a.pieces:
            events.append(FakeEvent(dump(chunk({"content": piece})), delta=True))
    events.append(FakeEvent(dump(chunk({}, a.finish))))
    if include_usage:
        last = chunk({})
        last["choices"] = []
        last["usage"] = _chat_usage(a)
        events.append(FakeEvent(dump(last)))
    events.append(FakeEvent("[DONE]", done=True))
    return events


# --- OpenAI legacy completions -------------------------------------------------------


def completion_json(a: FakeAnswer) -> dict[str, Any]:
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


def completion_events(a: FakeAnswer, include_usage: bool) -> list[FakeEvent]:
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

    events = [FakeEvent(dump(chunk(piece)), delta=True) for piece in a.pieces]
    events.append(FakeEvent(dump(chunk("", a.finish))))
    if include_usage:
        last = chunk("")
        last["choices"] = []
        last["usage"] = completion_json(a)["usage"]
        events.append(FakeEvent(dump(last)))
    events.append(FakeEvent("[DONE]", done=True))
    return events


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
