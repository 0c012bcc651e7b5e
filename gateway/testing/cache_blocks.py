"""A request body as the prompt cache sees it: its blocks in prompt order, with their
cache markers (:class:`~gateway.testing.prompt_cache.Block`), per API format.

- Anthropic Messages (and the Bedrock InvokeModel and Vertex rawPredict bodies): each
  tool, the system (a string, or each of its blocks), then each content block of each
  message (a string content is one text block); a block's marker is its
  ``cache_control``. Explicit: only marked prefixes are written.
- Bedrock Converse: each ``toolConfig.tools`` entry, each ``system`` entry, then each
  content entry of each message; a ``{"cachePoint": ...}`` entry is no block but marks
  the block before it. Explicit.
- OpenAI chat and Responses: the tools, then each message (each ``instructions`` /
  ``input`` item). Automatic: every prefix is written.
- Gemini ``generateContent``: each ``tools`` entry, the ``systemInstruction``, then each
  part of each content (keyed with its role). Automatic, as Gemini's implicit cache.

A block's key is its JSON with the markers taken out (a message's block with its role),
so a string content and the same text as one text block are one prefix. Its characters
are those the fake provider's own parser counts in it (:mod:`gateway.testing.conversation`,
tools none), so the last prefix's tokens are the request's prompt tokens.

Anthropic takes at most 4 markers in a request and Bedrock at most 4 cache points:
:func:`marker_problem` says what they answer to more.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from gateway.testing.conversation import parse_chat, parse_messages, parse_responses
from gateway.testing.converse_shapes import parse_converse
from gateway.testing.gemini_shapes import field, parse_gemini
from gateway.testing.prompt_cache import Block

#: The most cache markers Anthropic (and Bedrock) take in one request.
MAX_MARKERS = 4
_TOO_MANY = "A maximum of {} blocks with cache_control may be provided. Found {}."


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _unmarked(value: Any) -> Any:
    """``value`` without any ``cache_control`` (at any depth)."""
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    return (v for v in _list(value) if isinstance(v, dict))


# --- Anthropic Messages ---------------------------------------------------------------


def _anthropic_parts(body: dict[str, Any]) -> Iterator[tuple[Any, int, Any]]:
    """``(keyed value, chars, the block)`` of each block, in prompt order."""
    for tool in _dicts(body.get("tools")):
        yield {"tool": tool}, 0, tool
    system = body.get("system")
    if isinstance(system, list):
        for part in system:
            text = {"type": "text", "text": part} if isinstance(part, str) else part
            yield {"system": text}, parse_messages({"system": [part]}).prompt_chars, part
    elif system is not None:
        text = {"type": "text", "text": system} if isinstance(system, str) else system
        yield {"system": text}, parse_messages({"system": system}).prompt_chars, system
    for msg in _dicts(body.get("messages")):
        role, content = msg.get("role", "user"), msg.get("content")
        if isinstance(content, str):  # one text block, as Anthropic reads it
            content = [{"type": "text", "text": content}]
        for block in _list(content):
            chars = parse_messages({"messages": [{"role": role, "content": [block]}]}).prompt_chars
            yield {"role": role, "block": block}, chars, block


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and block.get("cache_control") is not None


def anthropic_blocks(body: dict[str, Any]) -> list[Block]:
    """The blocks of a Messages body (markers: ``cache_control``)."""
    return [
        Block(_key(_unmarked(keyed)), chars, _marked(block))
        for keyed, chars, block in _anthropic_parts(body)
    ]


def anthropic_markers(body: dict[str, Any]) -> int:
    """How many blocks of a Messages body carry ``cache_control``."""
    return sum(_marked(block) for _, _, block in _anthropic_parts(body))


# --- Bedrock Converse -----------------------------------------------------------------


def _converse_entries(body: dict[str, Any]) -> Iterator[tuple[Any, int, bool]]:
    """``(keyed value, chars, is a cache point)`` of each entry, in prompt order."""
    config = body.get("toolConfig")
    tools = config.get("tools") if isinstance(config, dict) else None
    for tool in _dicts(tools):
        yield {"tool": tool}, 0, "cachePoint" in tool
    for part in _dicts(body.get("system")):
        chars = parse_converse({"system": [part], "messages": []}, stream=False).prompt_chars
        yield {"system": part}, chars, "cachePoint" in part
    for msg in _dicts(body.get("messages")):
        role = msg.get("role")
        for entry in _dicts(msg.get("content")):
            one = {"role": role, "content": [entry]}
            chars = parse_converse({"messages": [one]}, stream=False).prompt_chars
            yield {"role": role, "block": entry}, chars, "cachePoint" in entry


def converse_blocks(body: dict[str, Any]) -> list[Block]:
    """The blocks of a Converse body; a cache point marks the block before it."""
    blocks: list[Block] = []
    for keyed, chars, point in _converse_entries(body):
        if not point:
            blocks.append(Block(_key(keyed), chars))
        elif blocks:
            blocks[-1] = Block(blocks[-1].key, blocks[-1].chars, True)
    return blocks


def converse_markers(body: dict[str, Any]) -> int:
    """How many cache points a Converse body holds."""
    return sum(point for _, _, point in _converse_entries(body))


# --- OpenAI chat and Responses --------------------------------------------------------


def _tool_blocks(body: dict[str, Any]) -> list[Block]:
    return [Block(_key({"tool": tool}), 0) for tool in _list(body.get("tools"))]


def chat_blocks(body: dict[str, Any]) -> list[Block]:
    """The blocks of a chat completions body: its tools, then each message."""
    blocks = _tool_blocks(body)
    for msg in _list(body.get("messages")):
        chars = parse_chat({"messages": [msg]}).prompt_chars if isinstance(msg, dict) else 0
        blocks.append(Block(_key(msg), chars))
    return blocks


def responses_blocks(body: dict[str, Any]) -> list[Block]:
    """The blocks of a Responses body: its tools, the instructions, then each input item."""
    blocks = _tool_blocks(body)
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        blocks.append(Block(_key({"instructions": instructions}), len(instructions)))
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in _list(items):
        chars = parse_responses({"input": [item]}).prompt_chars if isinstance(item, dict) else 0
        blocks.append(Block(_key(item), chars))
    return blocks


# --- Gemini ----------------------------------------------------------------------------


def gemini_blocks(body: dict[str, Any]) -> list[Block]:
    """The blocks of a Gemini body: its tools, its system instruction, then each part of
    each content."""
    blocks = _tool_blocks(body)
    system = field(body, "systemInstruction")
    if system is not None:
        chars = parse_gemini({"systemInstruction": system}).prompt_chars
        blocks.append(Block(_key({"system": system}), chars))
    for content in _dicts(field(body, "contents")):
        role = content.get("role", "user")
        for part in _list(field(content, "parts")):
            one = {"role": role, "parts": [part]}
            blocks.append(Block(_key(one), parse_gemini({"contents": [one]}).prompt_chars))
    return blocks


#: Per API (as the fakes name them): the blocks of a body, and whether the cache is
#: explicit (only marked prefixes written).
REDUCERS: dict[str, tuple[Callable[[dict[str, Any]], list[Block]], bool]] = {
    "messages": (anthropic_blocks, True),
    "converse": (converse_blocks, True),
    "chat": (chat_blocks, False),
    "responses": (responses_blocks, False),
    "gemini": (gemini_blocks, False),
}


def request_blocks(api: str, body: dict[str, Any]) -> tuple[list[Block], bool] | None:
    """The blocks of a request to ``api`` and whether its cache is explicit; ``None``: the
    API has no prompt cache (legacy completions, embeddings)."""
    reducer = REDUCERS.get(api)
    if reducer is None:
        return None
    reduce, explicit = reducer
    return reduce(body), explicit


def marker_problem(api: str, body: Any) -> str | None:
    """What Anthropic (``messages``) or Bedrock (``converse``) answers to a body with more
    than :data:`MAX_MARKERS` cache markers, or ``None``."""
    if not isinstance(body, dict):
        return None
    if api == "messages":
        found = anthropic_markers(body)
    elif api == "converse":
        found = converse_markers(body)
    else:
        return None
    if found <= MAX_MARKERS:
        return None
    message = _TOO_MANY.format(MAX_MARKERS, found)
    return message if api == "messages" else "The model returned the following errors: " + message


__all__ = [
    "MAX_MARKERS",
    "anthropic_blocks",
    "anthropic_markers",
    "chat_blocks",
    "converse_blocks",
    "converse_markers",
    "gemini_blocks",
    "marker_problem",
    "request_blocks",
    "responses_blocks",
]
