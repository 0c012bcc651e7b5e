"""Readers of a JSON body's parts that every format uses: a message's role and content
blocks, a Responses item's type, the readable text of a content value.
Read-only and forgiving: a part of the wrong JSON type reads as absent."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: Content part types that are images (each counts as a fixed number of tokens).
IMAGE_TYPES = frozenset({"image", "image_url", "input_image"})


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


def is_type(value: Any, kind: str) -> bool:
    """``value`` is a JSON object whose ``type`` is ``kind``."""
    return isinstance(value, Mapping) and value.get("type") == kind


_TOOL_SUFFIXES = ("tool_use", "_call", "tool_result")


def is_tool(kind: Any) -> bool:
    """A block or item type that is a tool call or result (``tool_use``, ``*_call``, ...)."""
    return isinstance(kind, str) and kind.endswith(_TOOL_SUFFIXES)


def text_size(text: str) -> int:
    """The size of a text in the token estimate's units: its length, a character outside
    ASCII counted as its UTF-8 bytes (2 for Cyrillic or an accented letter, 3 for Chinese)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def sizes(obj: Mapping[str, Any], keys: tuple[str, ...]) -> int:
    """The :func:`text_size` of the string values of ``obj`` under ``keys``, summed."""
    n = 0
    for key in keys:
        value = obj.get(key)
        if type(value) is str:
            n += text_size(value)
    return n


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> Mapping[str, Any]:
    # a JSON answer's objects are dicts: tested first, quickly (a Mapping test is an ABC's)
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def text_of(part: Mapping[str, Any]) -> str:
    """A part's ``text`` when it is a string, else ""."""
    text = part.get("text")
    return text if isinstance(text, str) else ""


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
        if value.get("type") in IMAGE_TYPES:
            yield "[image]"
        elif isinstance(value.get("text"), str):
            yield value["text"]
        elif "content" in value:
            yield from _texts(value["content"])
