"""A conversation of any format, seen as one list of entries through its
:class:`~gateway.formats.Format` (what compaction and continuation work on).

A conversation is the ``messages`` list of an OpenAI chat or Anthropic Messages
request, or the ``input`` list of an OpenAI Responses request (a string
``input`` is one user message): the format's ``entries``. Everything here is
read-only over the client's JSON body: no function mutates its argument.

Tool calls tie entries together: an OpenAI assistant message with
``tool_calls`` and its ``tool`` messages, an Anthropic ``tool_use`` block and the
``tool_result`` in the next user message, a Responses ``function_call`` (or any
``*_call`` item with a ``call_id``) and its ``*_call_output``. A *cut* between
two entries is allowed only where no call is left waiting for its result, so
whatever is dropped or kept on either side of a cut stays a valid conversation.
Which entry opens or closes a call is the format's (``opened_calls``,
``closed_calls``), and so are its own rules for a cut (``may_cut``): Anthropic
adds one (a cut lies between a user message and the assistant message after it,
so roles keep alternating), Responses another (a ``reasoning`` item stays with
the item it precedes).

Token estimate (:func:`estimate_tokens`): ``ceil(size / 4)`` over every text
a model reads, plus 4 tokens per entry, where a text's size is its length with each
character outside ASCII counted as its UTF-8 bytes (:func:`text_size`: Chinese and
Japanese 3, Cyrillic 2), since tokenizers give such text more tokens per character
(bench/count_error.py measures it). Counted: message text and content
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
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.formats import Format
from gateway.formats.parts import IMAGE_TYPES, plain_text, role
from gateway.formats.parts import text_size as text_size  # the estimate's unit, re-exported

__all__ = [
    "PINNED_ROLES", "allowed_cuts", "conversation_problems", "estimate_tokens",
    "fixed_chars", "groups", "is_valid_conversation", "plain_text", "role", "text_chars",
    "text_size", "tokens_for",
]  # fmt: skip

CHARS_PER_TOKEN = 4
ENTRY_OVERHEAD_TOKENS = 4
IMAGE_TOKENS = 1600

_NOT_TEXT = frozenset(
    {"type", "role", "id", "call_id", "tool_call_id", "tool_use_id", "signature",
     "encrypted_content", "cache_control", "status", "detail", "media_type"}
)  # fmt: skip
PINNED_ROLES = frozenset({"system", "developer"})


# ---- tool calls -----------------------------------------------------------------


def allowed_cuts(items: Sequence[Any], fmt: Format) -> list[bool]:
    """``cuts[i]`` is True when the conversation may be split before entry ``i`` (0..n):
    no tool call open across it, and the format allows it (:meth:`Format.may_cut`)."""
    n = len(items)
    blocked = [0] * (n + 2)
    opened: dict[str, int] = {}
    closed: dict[str, int] = {}
    for i, entry in enumerate(items):
        for call in fmt.opened_calls(entry):
            opened.setdefault(call, i)
        for call in fmt.closed_calls(entry):
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
        cuts[i] = running == 0 and fmt.may_cut(items[i - 1], items[i])
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
    """Size of model-visible text in a JSON value (see the module docstring)."""
    if isinstance(value, str):
        return text_size(value)
    if isinstance(value, Mapping):
        if value.get("type") in IMAGE_TYPES:
            return IMAGE_TOKENS * CHARS_PER_TOKEN
        total = 0
        for key, item in value.items():
            if key in _NOT_TEXT:
                continue
            if key == "input" and isinstance(item, Mapping):  # Anthropic tool_use arguments
                total += text_size(json.dumps(item, ensure_ascii=False, default=str))
            else:
                total += text_chars(item)
        return total
    if isinstance(value, list | tuple):
        return sum(text_chars(item) for item in value)
    return 0


def fixed_chars(body: Mapping[str, Any], fmt: Format) -> int:
    """Characters outside the conversation entries: system, instructions and tools."""
    total = sum(text_chars(body.get(key)) for key in fmt.fixed_keys)
    tools = body.get("tools")
    if tools:
        total += text_size(json.dumps(tools, ensure_ascii=False, default=str))
    return total


def tokens_for(chars: int, count: int) -> int:
    """The estimate rule: ``ceil(chars / 4) + 4 * entries``."""
    return math.ceil(chars / CHARS_PER_TOKEN) + ENTRY_OVERHEAD_TOKENS * count


def estimate_tokens(body: Mapping[str, Any], fmt: Format) -> int:
    """A cheap prompt-size estimate in tokens: ``ceil(size / 4) + 4 per entry``."""
    items = fmt.entries(body)
    chars = fixed_chars(body, fmt) + sum(text_chars(e) for e in items)
    return tokens_for(chars, len(items))


# ---- validity -------------------------------------------------------------------


def conversation_problems(body: Mapping[str, Any], fmt: Format) -> list[str]:
    """What makes this conversation one the provider would reject (empty when valid)."""
    return fmt.problems(fmt.entries(body))


def is_valid_conversation(body: Mapping[str, Any], fmt: Format) -> bool:
    """True when every tool call has its result where the format expects it."""
    return not conversation_problems(body, fmt)
