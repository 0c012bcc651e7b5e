"""Prompt-cache markers on translated requests (gateway/translate/cache_marks.py): where they
go, how many, and when none are added."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.formats import CHAT, CONVERSE, MESSAGES, RESPONSES
from gateway.translate import cache_marks, convert

pytestmark = pytest.mark.fast

TOOL = {
    "type": "function",
    "function": {"name": "read", "parameters": {"type": "object", "properties": {}}},
}


def chat_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "read the file"},
        ],
        "tools": [TOOL],
        **extra,
    }


def translated(body: dict[str, Any], target: Any = MESSAGES, source: Any = CHAT) -> dict[str, Any]:
    out, _ = convert.request(body, source, target, max_output_tokens=1024)
    return out


def markers(body: dict[str, Any]) -> list[str]:
    """Where the cache_control markers of a Messages body are."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        found += [f"system[{i}]" for i, b in enumerate(system) if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        if isinstance(m["content"], list):
            found += [
                f"messages[{i}][{j}]" for j, b in enumerate(m["content"]) if "cache_control" in b
            ]
    return found


def test_after_the_tools_the_system_and_on_the_last_message() -> None:
    body = translated(chat_body())
    n = cache_marks.mark(body, "messages", "claude-sonnet-4-5", lambda: 5000)
    last = len(body["messages"]) - 1
    assert n == 3
    assert markers(body) == ["tools[0]", "system[0]", f"messages[{last}][0]"]
    assert body["system"][0] == {
        "type": "text",
        "text": "You are a coding agent.",
        "cache_control": {"type": "ephemeral"},
    }
    assert body["messages"][last]["content"][0]["text"] == "read the file"


def test_never_more_than_the_provider_takes() -> None:
    """Three at most (Anthropic and Bedrock refuse a fifth), whatever the conversation."""
    long = chat_body()
    long["messages"] += [{"role": "user", "content": f"turn {i}"} for i in range(30)]
    body = translated(long)
    assert cache_marks.mark(body, "messages", "claude-sonnet-4-5", lambda: 90_000) <= 3
    assert len(markers(body)) <= 4


def test_below_the_models_minimum_none() -> None:
    body = translated(chat_body())
    assert cache_marks.mark(body, "messages", "claude-sonnet-4-5", lambda: 1023) == 0
    assert markers(body) == []
    # Haiku 4.5 caches from 4,096 tokens, Haiku 3.5 from 2,048
    assert cache_marks.mark(body, "messages", "claude-haiku-4-5-20251001", lambda: 3000) == 0
    assert cache_marks.mark(body, "messages", "claude-3-5-haiku-20241022", lambda: 3000) == 3


def test_a_request_with_its_own_marker_is_left_alone() -> None:
    body = {
        "model": "m",
        "max_tokens": 10,
        "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    assert cache_marks.mark(body, "messages", "claude-sonnet-4-5", lambda: 5000) == 0
    assert markers(body) == ["system[0]"]
    assert body["messages"][0]["content"] == "hi"


def test_thinking_blocks_are_passed_over() -> None:
    body = {
        "messages": [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "x"},
                    {"type": "thinking", "thinking": "t", "signature": "s"},
                ],
            }
        ]
    }
    assert cache_marks.mark(body, "messages", "claude-opus-4-1", lambda: 5000) == 1
    assert "cache_control" in body["messages"][0]["content"][0]
    assert "cache_control" not in body["messages"][0]["content"][1]


def test_the_estimate_is_taken_only_when_needed() -> None:
    calls = []

    def estimate() -> int:
        calls.append(1)
        return 5000

    own = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x",
           "cache_control": {"type": "ephemeral"}}]}]}  # fmt: skip
    cache_marks.mark(own, "messages", "claude-sonnet-4-5", estimate)
    cache_marks.mark(translated(chat_body()), "converse", "meta.llama3-70b", estimate)
    cache_marks.mark(translated(chat_body()), "chat", "gpt-4o", estimate)
    assert calls == []


def test_converse_cache_points() -> None:
    body = translated(chat_body(), CONVERSE)
    n = cache_marks.mark(body, "converse", "us.anthropic.claude-sonnet-4-5-v1:0", lambda: 5000)
    assert n == 3
    point = {"cachePoint": {"type": "default"}}
    assert body["toolConfig"]["tools"][-1] == point
    assert body["system"][-1] == point
    assert body["messages"][-1]["content"][-1] == point
    assert body["messages"][-1]["content"][0] == {"text": "read the file"}
    # once marked, a second pass adds none
    assert cache_marks.mark(body, "converse", "anthropic.claude-3-7", lambda: 5000) == 0


def test_converse_models_without_a_cache_get_none_and_nova_no_tools_point() -> None:
    body = translated(chat_body(), CONVERSE)
    assert cache_marks.mark(body, "converse", "meta.llama3-1-70b-instruct-v1:0", lambda: 9e9) == 0
    assert cache_marks.mark(body, "converse", "amazon.nova-pro-v1:0", lambda: 5000) == 2
    assert body["toolConfig"]["tools"][-1] != {"cachePoint": {"type": "default"}}


def test_responses_client_to_messages() -> None:
    source = {
        "model": "m",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "hello"}],
    }
    body = translated(source, MESSAGES, RESPONSES)
    assert cache_marks.mark(body, "messages", "claude-sonnet-4-5", lambda: 2000) == 2
    assert markers(body) == ["system[0]", "messages[0][0]"]
