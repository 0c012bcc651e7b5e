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
(bench/count_error.py measures it). Counted, and nothing else: the top-level Anthropic
and Converse ``system`` and Responses ``instructions``; an entry's and a content part's
text fields (``content``, ``text``, ``thinking``, ``refusal``, ``reasoning_content``,
``output``, a string ``input``), tool names and call arguments, the data of a document or
file part; Converse ``toolUse``, ``toolResult`` and ``reasoningContent`` blocks alike; an
Anthropic ``tool_use.input`` (Converse ``toolUse.input``) and the ``tools`` definitions
(Converse ``toolConfig``) as the bytes of their JSON. Parts are read where a provider reads them:
an entry's ``content``, ``output``, ``summary`` and ``tool_calls``, and the ``content``
of a part inside those (a tool result's blocks), the levels whose blocks the request
limits count (:mod:`gateway.web.shapes`). Any other field (ids, roles, types,
signatures, encrypted reasoning, a field no format has) is never read, so its size
costs nothing: the worst body the limits allow is estimated in about 40 ms, most of it
one encode of a tool input of 6 million strings
(``python -m tests.count.worst_bodies``). Each image
counts as 1,600 tokens whatever its size: Anthropic's count for the largest image it
takes without scaling it down (``width * height / 750`` at about 1.15 megapixels), more
than OpenAI's and Bedrock's for the same image, so a prompt of images is not
underestimated. The estimate only has to move the same way as the provider's count;
:func:`~gateway.resilience.compaction.target_tokens_for` rescales it with the count from
the error message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.formats import Format
from gateway.formats.parts import IMAGE_TYPES, plain_text, role, sizes
from gateway.formats.parts import text_size as text_size  # the estimate's unit, re-exported

__all__ = [
    "PINNED_ROLES", "allowed_cuts", "conversation_problems", "estimate_tokens",
    "fixed_chars", "groups", "is_valid_conversation", "plain_text", "role", "text_chars",
    "text_size", "tokens_for",
]  # fmt: skip

CHARS_PER_TOKEN = 4
ENTRY_OVERHEAD_TOKENS = 4
IMAGE_TOKENS = 1600

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


def text_chars(entry: Any) -> int:
    """Size of the model-read text of one conversation entry (see the module docstring)."""
    if type(entry) is dict:
        return _part_chars(entry, 2)
    return text_size(entry) if type(entry) is str else 0


def fixed_chars(body: Mapping[str, Any], fmt: Format) -> int:
    """Characters outside the conversation entries: system, instructions and tools."""
    total = 0
    for key in fmt.fixed_keys:
        value = body.get(key)
        if type(value) is str:
            total += text_size(value)
        elif type(value) is list:  # system blocks
            total += _parts_chars(value, 0)
        elif type(value) is dict:  # Converse toolConfig
            total += json_size(value)
    tools = body.get("tools")
    if tools:
        total += json_size(tools)
    return total


def json_size(value: Any) -> int:
    """The size of a JSON value as the estimate counts it: the bytes of its encoding (the
    UTF-8 of every string in it, and the JSON around), in one encode and no Python walk."""
    try:
        return len(orjson.dumps(value))
    except orjson.JSONEncodeError:  # not JSON (a value no parsed body holds)
        return 0


#: The fields of an entry or part whose string value a model reads.
_TEXT_FIELDS = frozenset({"content", "text", "thinking", "refusal", "reasoning_content",
                          "output", "input", "name", "arguments", "file_data"})  # fmt: skip
#: Objects a part carries its text in, and which of their fields (a chat tool call's
#: function, a document's source, a chat file part's file; Converse's reasoning).
_INNER_FIELDS = {"function": ("name", "arguments"), "source": ("data",),
                 "file": ("file_data",), "reasoningContent": ()}  # fmt: skip
#: The fields of an entry that hold parts; those of a part (a tool result's blocks).
_PART_LISTS = (frozenset({"content", "output", "summary", "tool_calls"}), frozenset({"content"}))
#: Every field read: a set (not frozenset), so that ``keys() & _READ`` loops over the
#: smaller of the two (a part's few keys, or these for an object of many).
_READ = {*_TEXT_FIELDS, *_INNER_FIELDS, "summary", "tool_calls", "toolUse", "toolResult"}
#: Part types that are text alone (the common case, one lookup).
_TEXT_TYPES = frozenset({"text", "input_text", "output_text", "summary_text"})
_IMAGE_CHARS = IMAGE_TOKENS * CHARS_PER_TOKEN


def _part_chars(value: dict[str, Any], lists: int) -> int:
    """An entry (``lists`` 2) or a part (1: its ``content`` list is read; 0: none): the
    fixed set of fields above, never the object's other keys."""
    kind = value.get("type")
    if type(kind) is str:
        if kind in _TEXT_TYPES:
            text = value.get("text")
            return text_size(text) if type(text) is str else 0
        if kind in IMAGE_TYPES:
            return _IMAGE_CHARS
    elif type(value.get("image")) is dict:  # a Converse image block
        return _IMAGE_CHARS
    total = 0
    for key in value.keys() & _READ:
        item = value[key]
        kind = type(item)
        if kind is str:
            if key in _TEXT_FIELDS:
                total += text_size(item)
        elif kind is list:
            if lists and key in _PART_LISTS[2 - lists]:
                total += _parts_chars(item, lists - 1)
        elif kind is dict:
            total += _object_chars(key, item, lists)
    return total


def _object_chars(key: str, item: dict[str, Any], lists: int) -> int:
    """A field of a part that is an object: a tool call's input (its JSON), a chat call's
    function, a document's source, a file; Converse's toolUse (its name and input),
    toolResult (its blocks, where ``lists`` allows) and reasoningContent (its text)."""
    if key == "input":  # Anthropic tool_use arguments
        return json_size(item)
    if key == "toolUse":
        name, arguments = item.get("name"), item.get("input")
        size = text_size(name) if type(name) is str else 0
        return size + (json_size(arguments) if arguments is not None else 0)
    if key == "toolResult":
        content = item.get("content")
        return _parts_chars(content, 0) if lists and type(content) is list else 0
    fields = _INNER_FIELDS.get(key, ())
    if key == "reasoningContent":
        reasoning = item.get("reasoningText")
        if type(reasoning) is not dict:
            return 0
        item, fields = reasoning, ("text",)
    return sizes(item, fields)


def _parts_chars(parts: list[Any], lists: int) -> int:
    total = 0
    for part in parts:
        if type(part) is dict:
            total += _part_chars(part, lists)
        elif type(part) is str:
            total += text_size(part)
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
