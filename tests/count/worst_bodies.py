"""The request bodies the default limits allow (32 MiB, 10,000 messages, 25,000 content
blocks, 200,000 JSON objects and arrays, 200 levels) that cost the token estimate most.

``python -m tests.count.worst_bodies`` prints what each costs (the best of 5 runs) and
checks that each one is within the limits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.formats import MESSAGES, Format
from gateway.formats.endpoints import endpoint_of
from gateway.settings import GatewaySettings
from gateway.web.shapes import check_raw, check_shape

STRINGS = 6_000_000  # one-letter strings: 24 MB of JSON
ZEROS = 16_000_000  # the most values 32 MiB holds: 32 MB of JSON


def _messages(content: list[Any], **top: Any) -> tuple[Format, dict[str, Any]]:
    return MESSAGES, {"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": content}], **top}  # fmt: skip


def unknown_field() -> tuple[Format, dict[str, Any]]:
    """6 million one-letter strings in a field of a text block no format has."""
    return _messages([{"type": "text", "text": "hi", "x": ["a"] * STRINGS}])


def tool_input() -> tuple[Format, dict[str, Any]]:
    """The same strings as a tool call's arguments (a field the estimate sizes)."""
    use = {"type": "tool_use", "id": "t", "name": "f", "input": {"a": ["a"] * STRINGS}}
    return MESSAGES, {"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]}  # fmt: skip


def tool_schema() -> tuple[Format, dict[str, Any]]:
    """The same strings as an enum of a tool's schema."""
    schema = {"type": "object", "properties": {"a": {"enum": ["a"] * STRINGS}}}
    return _messages(
        [{"type": "text", "text": "hi"}], tools=[{"name": "f", "input_schema": schema}]
    )


def tool_input_zeros() -> tuple[Format, dict[str, Any]]:
    """16 million zeros as a tool call's arguments: the most JSON values a body holds."""
    use = {"type": "tool_use", "id": "t", "name": "f", "input": {"a": [0] * ZEROS}}
    return _messages([use])


def most_blocks() -> tuple[Format, dict[str, Any]]:
    """10,000 messages and 15,000 more blocks (25,000 in all), each of a type no format
    has (read field by field) holding every field the estimate reads."""
    limits = GatewaySettings().request_limits
    per = (limits.blocks - limits.messages) // limits.messages
    block = {"type": "x", "text": "a", "thinking": "a", "refusal": "a", "content": "a",
             "output": "a", "input": "a", "name": "a", "arguments": "a", "file_data": "a",
             "reasoning_content": "a", "function": {"name": "a", "arguments": "a"},
             "source": {"data": "a"}, "file": {"file_data": "a"}}  # fmt: skip
    messages = [{"role": "user", "content": [block] * per} for _ in range(limits.messages)]
    extra = limits.blocks - limits.messages - per * limits.messages
    messages[0]["content"] = messages[0]["content"] + [block] * max(extra, 0)
    return MESSAGES, {"model": "m", "max_tokens": 5, "messages": messages}


def wide_text() -> tuple[Format, dict[str, Any]]:
    """30 MB of Chinese text in one block (sized by its UTF-8 bytes)."""
    return _messages([{"type": "text", "text": "请" * 10_000_000}])


WORST: dict[str, Callable[[], tuple[Format, dict[str, Any]]]] = {
    "unknown_field": unknown_field,
    "tool_input": tool_input,
    "tool_schema": tool_schema,
    "tool_input_zeros": tool_input_zeros,
    "most_blocks": most_blocks,
    "wide_text": wide_text,
}


def allowed(fmt: Format, body: dict[str, Any]) -> bytes:
    """The body's bytes, checked to be within the default limits (raises if not)."""
    settings = GatewaySettings()
    raw = orjson.dumps(body)
    assert len(raw) <= settings.max_body_bytes, len(raw)
    check_raw(raw, settings.request_limits)
    check_shape(endpoint_of(fmt), orjson.loads(raw), settings.request_limits, len(raw))
    return raw


if __name__ == "__main__":
    from gateway.resilience.conversation import estimate_tokens

    for name, build in WORST.items():
        fmt, body = build()
        raw = allowed(fmt, body)
        times = []
        for _ in range(5):
            t = time.perf_counter()
            n = estimate_tokens(body, fmt)
            times.append(time.perf_counter() - t)
        print(f"{name:14} {len(raw) / 1e6:5.1f} MB  {n:>9} tokens  {min(times) * 1000:6.1f} ms")
