"""The three request shapes compaction works on, seen as one list of entries.

A conversation is the ``messages`` list of an OpenAI chat or Anthropic Messages
request, or the ``input`` list of an OpenAI Responses request (a string
``input`` is one user message). Everything here is read-only over the client's
JSON body: no function mutates its argument.

Tool calls tie entries together: an OpenAI assistant message with
``tool_calls`` and its ``tool`` messages, an Anthropic ``tool_use`` block and the
``tool_result`` in the next user message, a Responses ``function_call`` (or any
``*_call`` item with a ``call_id``) and its ``*_call_output``. A *cut* between
two entries is allowed only where no call is left waiting for its result, so
whatever is dropped or kept on either side of a cut stays a valid conversation.
Anthropic adds one rule (a cut lies between a user message and the assistant
message after it, so roles keep alternating), Responses another (a ``reasoning``
item stays with the item it precedes).

Token estimate (:func:`estimate_tokens`): ``ceil(chars / 4)`` over every text
a model reads, plus 4 tokens per entry. Counted: message text and content
parts, the top-level Anthropic ``system`` and Responses ``instructions``, tool
call names and arguments (Anthropic ``tool_use.input`` as its JSON), tool
results, reasoning summaries, and the JSON of the ``tools`` definitions.
Not counted: ids, roles, types, signatures and encrypted reasoning. Each image
counts as 1,600 tokens whatever its size. The estimate only has to move the
same way as the provider's count; :func:`~gateway.resilience.compaction.target_tokens_for`
rescales it with the count from the error message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

APIS = ("openai", "anthropic", "responses")

CHARS_PER_TOKEN = 4
ENTRY_OVERHEAD_TOKENS = 4
IMAGE_TOKENS = 1600

_IMAGE_TYPES = frozenset({"image", "image_url", "input_image"})
_NOT_TEXT = frozenset(
    {"type", "role", "id", "call_id", "tool_call_id", "tool_use_id", "signature",
     "encrypted_content", "cache_control", "status", "detail", "media_type"}
)  # fmt: skip
PINNED_ROLES = frozenset({"system", "developer"})


def check_api(api: str) -> None:
    """Raise ``ValueError`` for an API name this module does not know."""
    if api not in APIS:
        raise ValueError(f"unknown api {api!r}: expected one of {', '.join(APIS)}")


def entries_key(api: str) -> str:
    """The body key holding the conversation: ``input`` for Responses, else ``messages``."""
    return "input" if api == "responses" else "messages"


def entries(body: Mapping[str, Any], api: str) -> list[Any]:
    """The conversation's entries (a new list; the entries themselves are not copied)."""
    check_api(api)
    value = body.get(entries_key(api))
    if api == "responses" and isinstance(value, str):
        return [{"role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def role(entry: Any) -> str | None:
    """The entry's role, or None (Responses call items have none)."""
    if isinstance(entry, Mapping):
        value = entry.get("role")
        return value if isinstance(value, str) else None
    return None


def item_type(entry: Any) -> str | None:
    """The Responses item type; a bare ``{"role": ..., "content": ...}`` is a ``message``."""
    if not isinstance(entry, Mapping):
        return None
    value = entry.get("type")
    if isinstance(value, str):
        return value
    return "message" if "role" in entry else None


def blocks(entry: Any) -> list[Any]:
    """The content blocks of a message (an empty list for string content)."""
    if isinstance(entry, Mapping):
        content = entry.get("content")
        if isinstance(content, list):
            return content
    return []


# ---- tool calls -----------------------------------------------------------------


def opened_calls(entry: Any, api: str) -> list[str]:
    """The call ids this entry opens (tool calls waiting for a result)."""
    ids: list[Any] = []
    if not isinstance(entry, Mapping):
        return []
    if api == "openai":
        if entry.get("role") == "assistant" and isinstance(entry.get("tool_calls"), list):
            ids = [tc.get("id") for tc in entry["tool_calls"] if isinstance(tc, Mapping)]
    elif api == "anthropic":
        if entry.get("role") == "assistant":
            ids = [b.get("id") for b in blocks(entry) if _is_type(b, "tool_use")]
    else:
        kind = item_type(entry) or ""
        if kind.endswith("_call") and "call_id" in entry:
            ids = [entry["call_id"]]
    return [i for i in ids if isinstance(i, str)]


def closed_calls(entry: Any, api: str) -> list[str]:
    """The call ids this entry answers (tool results)."""
    ids: list[Any] = []
    if not isinstance(entry, Mapping):
        return []
    if api == "openai":
        if entry.get("role") == "tool":
            ids = [entry.get("tool_call_id")]
    elif api == "anthropic":
        if entry.get("role") == "user":
            ids = [b.get("tool_use_id") for b in blocks(entry) if _is_type(b, "tool_result")]
    else:
        kind = item_type(entry) or ""
        if kind.endswith("_call_output") and "call_id" in entry:
            ids = [entry["call_id"]]
    return [i for i in ids if isinstance(i, str)]


def _is_type(block: Any, kind: str) -> bool:
    return isinstance(block, Mapping) and block.get("type") == kind


def allowed_cuts(items: Sequence[Any], api: str) -> list[bool]:
    """``cuts[i]`` is True when the conversation may be split before entry ``i`` (0..n)."""
    n = len(items)
    blocked = [0] * (n + 2)
    opened: dict[str, int] = {}
    closed: dict[str, int] = {}
    for i, entry in enumerate(items):
        for call in opened_calls(entry, api):
            opened.setdefault(call, i)
        for call in closed_calls(entry, api):
            closed[call] = i
    for call, start in opened.items():
        end = closed.get(call)
        if end is not None and end > start:
            blocked[start + 1] += 1
            blocked[end + 1] -= 1
    cuts = [True] * (n + 1)
    running = 0
    for i in range(1, n):
        running += blocked[i]
        ok = running == 0
        if api == "anthropic":
            ok = ok and role(items[i - 1]) == "user" and role(items[i]) == "assistant"
        elif api == "responses":
            ok = ok and item_type(items[i - 1]) != "reasoning"
        cuts[i] = ok
    return cuts


def groups(cuts: Sequence[bool], start: int, end: int) -> list[tuple[int, int]]:
    """The ``[s, e)`` segments between allowed cuts inside ``[start, end)``."""
    out: list[tuple[int, int]] = []
    s = start
    for i in range(start + 1, end + 1):
        if cuts[i] or i == end:
            out.append((s, i))
            s = i
    return out


# ---- size -----------------------------------------------------------------------


def text_chars(value: Any) -> int:
    """Characters of model-visible text in a JSON value (see the module docstring)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        if value.get("type") in _IMAGE_TYPES:
            return IMAGE_TOKENS * CHARS_PER_TOKEN
        total = 0
        for key, item in value.items():
            if key in _NOT_TEXT:
                continue
            if key == "input" and isinstance(item, Mapping):  # Anthropic tool_use arguments
                total += len(json.dumps(item, ensure_ascii=False, default=str))
            else:
                total += text_chars(item)
        return total
    if isinstance(value, list | tuple):
        return sum(text_chars(item) for item in value)
    return 0


def fixed_chars(body: Mapping[str, Any], api: str) -> int:
    """Characters outside the conversation entries: system, instructions and tools."""
    total = 0
    if api == "anthropic":
        total += text_chars(body.get("system"))
    elif api == "responses":
        total += text_chars(body.get("instructions"))
    tools = body.get("tools")
    if tools:
        total += len(json.dumps(tools, ensure_ascii=False, default=str))
    return total


def tokens_for(chars: int, count: int) -> int:
    """The estimate rule: ``ceil(chars / 4) + 4 * entries``."""
    return math.ceil(chars / CHARS_PER_TOKEN) + ENTRY_OVERHEAD_TOKENS * count


def estimate_tokens(body: Mapping[str, Any], api: str) -> int:
    """A cheap prompt-size estimate in tokens: ``ceil(chars / 4) + 4 per entry``."""
    items = entries(body, api)
    chars = fixed_chars(body, api) + sum(text_chars(e) for e in items)
    return tokens_for(chars, len(items))


# ---- validity -------------------------------------------------------------------


def conversation_problems(body: Mapping[str, Any], api: str) -> list[str]:
    """What makes this conversation one the provider would reject (empty when valid)."""
    items = entries(body, api)
    if api == "openai":
        return _openai_problems(items)
    if api == "anthropic":
        return _anthropic_problems(items)
    return _responses_problems(items)


def is_valid_conversation(body: Mapping[str, Any], api: str) -> bool:
    """True when every tool call has its result where the API expects it (see the module doc)."""
    return not conversation_problems(body, api)


def _openai_problems(items: Sequence[Any]) -> list[str]:
    problems: list[str] = []
    pending: set[str] | None = None  # None: not inside a tool block
    for i, entry in enumerate(items):
        if role(entry) == "tool":
            call = entry.get("tool_call_id")
            if pending is None:
                problems.append(f"message {i}: tool result {call!r} outside a tool block")
            elif call not in pending:
                problems.append(f"message {i}: tool result {call!r} answers no pending tool call")
            else:
                pending.discard(call)
            continue
        if pending:
            problems.append(f"message {i}: tool calls {sorted(pending)} have no result")
        pending = set(opened_calls(entry, "openai")) or None
    if pending:
        problems.append(f"end: tool calls {sorted(pending)} have no result")
    return problems


def _anthropic_problems(items: Sequence[Any]) -> list[str]:
    problems: list[str] = []
    if not items:
        return ["no messages"]
    if role(items[0]) != "user":
        problems.append(f"message 0: the first message is {role(items[0])!r}, not 'user'")
    for i, entry in enumerate(items):
        if role(entry) not in ("user", "assistant"):
            problems.append(f"message {i}: role {role(entry)!r}")
        if i and role(entry) == role(items[i - 1]):
            problems.append(f"message {i}: two {role(entry)!r} messages in a row")
        uses = set(opened_calls(entry, "anthropic"))
        answered = set(closed_calls(items[i + 1], "anthropic")) if i + 1 < len(items) else set()
        if i + 1 < len(items) and role(items[i + 1]) != "user":
            answered = set()
        for call in sorted(uses - answered):
            problems.append(
                f"message {i}: tool_use {call!r} has no tool_result in the next message"
            )
        previous = set(opened_calls(items[i - 1], "anthropic")) if i else set()
        for call in sorted(set(closed_calls(entry, "anthropic")) - previous):
            problems.append(f"message {i}: tool_result {call!r} has no tool_use just before it")
    return problems


def _responses_problems(items: Sequence[Any]) -> list[str]:
    problems: list[str] = []
    opened: set[str] = set()
    answered: set[str] = set()
    for i, entry in enumerate(items):
        for call in closed_calls(entry, "responses"):
            if call not in opened:
                problems.append(f"item {i}: output for {call!r} has no call before it")
            answered.add(call)
        opened.update(opened_calls(entry, "responses"))
    for call in sorted(opened - answered):
        problems.append(f"call {call!r} has no output")
    return problems


# ---- text -----------------------------------------------------------------------


def plain_text(content: Any) -> str:
    """The readable text of a content value: a string, or text parts joined by newlines."""
    if isinstance(content, str):
        return content
    return "\n".join(_texts(content))


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts(item)
    elif isinstance(value, Mapping):
        if value.get("type") in _IMAGE_TYPES:
            yield "[image]"
        elif isinstance(value.get("text"), str):
            yield value["text"]
        elif "content" in value:
            yield from _texts(value["content"])


def transcript_lines(entry: Any, api: str) -> list[str]:
    """The entry as lines of a plain-text transcript (for the summary request)."""
    if not isinstance(entry, Mapping):
        return []
    who = role(entry) or "assistant"
    lines: list[str] = []
    if api == "openai":
        if who == "tool":
            lines.append(f"tool result: {plain_text(entry.get('content'))}")
        else:
            if text := plain_text(entry.get("content")):
                lines.append(f"{who}: {text}")
            for call in entry.get("tool_calls") or []:
                function = call.get("function") or {}
                lines.append(
                    f"assistant called {function.get('name')}({function.get('arguments', '')})"
                )
    elif api == "anthropic":
        content = entry.get("content")
        for block in content if isinstance(content, list) else [content]:
            if isinstance(block, str):
                lines.append(f"{who}: {block}")
            elif not isinstance(block, Mapping):
                continue
            elif block.get("type") == "text":
                lines.append(f"{who}: {block.get('text', '')}")
            elif block.get("type") == "tool_use":
                arguments = json.dumps(block.get("input"), ensure_ascii=False, default=str)
                lines.append(f"assistant called {block.get('name')}({arguments})")
            elif block.get("type") == "tool_result":
                lines.append(f"tool result: {plain_text(block.get('content'))}")
    else:
        kind = item_type(entry) or ""
        if kind == "message":
            lines.append(f"{who}: {plain_text(entry.get('content'))}")
        elif kind.endswith("_call_output"):
            lines.append(f"tool result: {plain_text(entry.get('output'))}")
        elif kind.endswith("_call"):
            arguments = entry.get("arguments", entry.get("input", entry.get("action", "")))
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False, default=str)
            lines.append(f"assistant called {entry.get('name', kind)}({arguments})")
    return lines
