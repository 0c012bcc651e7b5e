"""Each API's request reduced to the prompt cache's blocks (gateway/testing/cache_blocks.py):
the markers where the API puts them, keys without them, and the tokens the fake reports."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.testing.cache_blocks import (
    anthropic_blocks,
    chat_blocks,
    converse_blocks,
    marker_problem,
    request_blocks,
    responses_blocks,
)
from gateway.testing.conversation import parse_chat, parse_messages, parse_responses
from gateway.testing.converse_shapes import parse_converse
from gateway.testing.prompt_cache import prefixes

pytestmark = pytest.mark.fast

MARK = {"type": "ephemeral"}
TOOL = {"name": "read_file", "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}  # fmt: skip
MESSAGES: dict[str, Any] = {
    "model": "claude",
    "max_tokens": 100,
    "tools": [{**TOOL, "cache_control": MARK}],
    "system": [{"type": "text", "text": "You are terse. " * 7, "cache_control": MARK}],
    "messages": [
        {"role": "user", "content": "Read setup.py, please."},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "setup.py"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "print('hi')" * 3},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}},
            {"type": "text", "text": "What does it do?", "cache_control": MARK},
        ]},
    ],
}  # fmt: skip


def tokens(blocks: list[Any]) -> int:
    return prefixes(blocks)[-1].tokens if blocks else 0


def test_anthropic_blocks_in_prompt_order_with_their_markers() -> None:
    blocks = anthropic_blocks(MESSAGES)
    assert len(blocks) == 1 + 1 + 1 + 2 + 3
    assert [b.marked for b in blocks] == [True, True, False, False, False, False, False, True]
    assert blocks[0].chars == 0  # tools count no tokens, but are part of the prefix
    assert tokens(blocks) == parse_messages(MESSAGES).prompt_tokens


@pytest.mark.parametrize(
    "body",
    [
        {"system": "Be brief.", "messages": [{"role": "user", "content": "Hi" * 301}]},
        {"system": [{"type": "text", "text": "a" * 5}, "b" * 7], "messages": []},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "x" * 9}, "odd"]}]},
        {"messages": [{"role": "assistant", "content": [{"type": "tool_use", "input": None}]}]},
        {"messages": [{"role": "user", "content": None}, "not a message"]},
        MESSAGES,
    ],
)
def test_anthropic_tokens_are_the_fakes_prompt_tokens(body: dict[str, Any]) -> None:
    """At every block boundary the prefix's characters are what the fake's own parser
    counts, so the whole prompt is its prompt tokens (never more)."""
    assert tokens(anthropic_blocks(body)) == parse_messages(body).prompt_tokens


def test_anthropic_keys_ignore_markers_and_the_content_form() -> None:
    """Moving a marker keeps the prefix; a string content is the same prefix as one text
    block; another role is not."""
    plain = {"messages": [{"role": "user", "content": "Hello"}]}
    listed = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Hello", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}  # fmt: skip
    other = {"messages": [{"role": "assistant", "content": "Hello"}]}
    a, b, c = (anthropic_blocks(x)[0] for x in (plain, listed, other))
    assert a.key == b.key != c.key
    assert (a.marked, b.marked) == (False, True)
    stripped = json.loads(json.dumps(MESSAGES))
    for part in (
        stripped["tools"][0],
        stripped["system"][0],
        stripped["messages"][2]["content"][2],
    ):
        del part["cache_control"]
    assert [b.key for b in anthropic_blocks(MESSAGES)] == [
        b.key for b in anthropic_blocks(stripped)
    ]
    assert not any(b.marked for b in anthropic_blocks(stripped))


def test_too_many_anthropic_markers() -> None:
    four = {**MESSAGES, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a", "cache_control": MARK}]},
        {"role": "assistant", "content": [{"type": "text", "text": "b", "cache_control": MARK}]},
    ]}  # fmt: skip
    assert marker_problem("messages", four) is None
    five = {**four, "messages": [*four["messages"], {"role": "user", "content": [
        {"type": "text", "text": "c", "cache_control": MARK}]}]}  # fmt: skip
    assert marker_problem("messages", five) == (
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )
    assert marker_problem("chat", five) is None


CONVERSE: dict[str, Any] = {
    "toolConfig": {"tools": [
        {"toolSpec": {"name": "read_file", "inputSchema": {"json": {"type": "object"}}}},
        {"cachePoint": {"type": "default"}},
    ]},
    "system": [{"text": "You are terse. " * 9}, {"cachePoint": {"type": "default"}}],
    "messages": [
        {"role": "user", "content": [{"text": "Read setup.py"}]},
        {"role": "assistant", "content": [
            {"toolUse": {"toolUseId": "t1", "name": "read_file", "input": {"path": "setup.py"}}}]},
        {"role": "user", "content": [
            {"toolResult": {"toolUseId": "t1", "content": [{"text": "print('hi')"}]}},
            {"text": "And now?"},
            {"cachePoint": {"type": "default"}},
        ]},
    ],
}  # fmt: skip


def test_converse_cache_points_mark_the_block_before() -> None:
    blocks = converse_blocks(CONVERSE)
    assert len(blocks) == 6  # the cache points are no blocks
    assert [b.marked for b in blocks] == [True, True, False, False, False, True]
    assert tokens(blocks) == parse_converse(CONVERSE, stream=False).prompt_tokens
    assert marker_problem("converse", CONVERSE) is None
    five = {**CONVERSE, "messages": [
        *CONVERSE["messages"][:2],
        {"role": "user", "content": [{"text": "x"}, {"cachePoint": {"type": "default"}},
                                     {"text": "y"}, {"cachePoint": {"type": "default"}},
                                     {"text": "z"}, {"cachePoint": {"type": "default"}}]},
    ]}  # fmt: skip
    assert marker_problem("converse", five) == (
        "The model returned the following errors: "
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )


def test_converse_keys_do_not_hold_the_cache_points() -> None:
    """A cache point moved to the next turn leaves the earlier blocks' prefix the same."""
    later = json.loads(json.dumps(CONVERSE))
    later["messages"][2]["content"].pop()  # no cache point on this turn
    first, second = converse_blocks(CONVERSE), converse_blocks(later)
    assert [b.key for b in first] == [b.key for b in second]
    assert prefixes(first)[-1].digest == prefixes(second)[-1].digest


CHAT: dict[str, Any] = {
    "model": "gpt",
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "messages": [
        {"role": "developer", "content": "Be brief. " * 30},
        {"role": "user", "content": [{"type": "text", "text": "Call f."}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        "junk",
    ],
}  # fmt: skip
RESPONSES: dict[str, Any] = {
    "model": "gpt",
    "instructions": "Be brief. " * 30,
    "tools": [{"type": "function", "name": "f", "parameters": {}}],
    "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Call f."}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
        {"type": "reasoning", "summary": []},
    ],
}


def test_openai_blocks_and_tokens() -> None:
    chat = chat_blocks(CHAT)
    assert len(chat) == 1 + 5 and not any(b.marked for b in chat)
    assert tokens(chat) == parse_chat(CHAT).prompt_tokens
    resp = responses_blocks(RESPONSES)
    assert len(resp) == 1 + 1 + 4
    assert tokens(resp) == parse_responses(RESPONSES).prompt_tokens
    short = responses_blocks({"input": "Hello there"})
    assert tokens(short) == parse_responses({"input": "Hello there"}).prompt_tokens == 3


def test_which_apis_cache_and_how() -> None:
    assert request_blocks("messages", MESSAGES) == (anthropic_blocks(MESSAGES), True)
    assert request_blocks("converse", CONVERSE) == (converse_blocks(CONVERSE), True)
    assert request_blocks("chat", CHAT) == (chat_blocks(CHAT), False)
    assert request_blocks("responses", RESPONSES) == (responses_blocks(RESPONSES), False)
    assert request_blocks("completions", {"prompt": "x"}) is None
    assert request_blocks("embeddings", {"input": "x"}) is None
