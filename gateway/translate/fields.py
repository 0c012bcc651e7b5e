"""What a translator takes of a provider's field, whatever its type.

A provider's answer is input like any other: a field may come as a number, an object or
``null`` where text belongs. What the client gets in its own format is always of its
SDK's types. Two rules, one for each way an answer comes:

- **A stream event** (:func:`is_text`, :func:`args_text`, :func:`name_of`): part of the
  answer is already the client's, so a field of the wrong type is passed over: a text
  that is not a non-empty string is no text, arguments that are neither a string nor an
  object are none, an id or a name that is not text (a number is written as one) is the
  reader's default. The stream goes on.
- **A JSON answer** (the ``*_at`` readers): nothing is sent yet, so nothing of it is
  dropped silently. A field that is absent or ``null`` is absent (a chat message's
  ``content`` of ``null`` is no text); a field of any other wrong type raises
  :class:`WrongType`, and the answer is a broken provider's: retried like a server error
  (:class:`gateway.errors.Malformed`).
"""

from __future__ import annotations

from typing import Any, TypeGuard

import orjson

from gateway.errors import WrongType

__all__ = [
    "args_text",
    "arguments_at",
    "id_at",
    "input_at",
    "is_text",
    "name_of",
    "object_at",
    "objects_at",
    "text_at",
]

# ---------------------------------------------------------------- stream events


def is_text(value: Any) -> TypeGuard[str]:
    """A piece of text worth passing on: a non-empty string."""
    return type(value) is str and value != ""


def args_text(value: Any) -> str:
    """Tool-call arguments as JSON text (some providers send an object)."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode() if isinstance(value, dict | list) and value else ""


def name_of(value: Any, default: str = "") -> str:
    """An id or a name: text (a number is written as one), else ``default``."""
    if isinstance(value, str) and value:
        return value
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else default


# ---------------------------------------------------------------- JSON answers


def _wrong(value: Any, where: str, want: str) -> WrongType:
    return WrongType(f"{where} is {type(value).__name__}, not {want}")


def text_at(value: Any, where: str) -> str | None:
    """An optional text field: the string, or None when absent or ``null``."""
    if value is None or type(value) is str:
        return value
    raise _wrong(value, where, "text")


def id_at(value: Any, where: str, default: str) -> str:
    """An id: text (a number is written as one); ``default`` when absent, ``null`` or
    empty."""
    if type(value) is str:
        return value or default
    if value is None:
        return default
    if type(value) is int:
        return str(value)
    raise _wrong(value, where, "text")


def arguments_at(value: Any, where: str) -> str:
    """A call's arguments as JSON text (an object, as some providers send it, written as
    one); ``"{}"`` when absent, ``null`` or empty."""
    if type(value) is str:
        return value or "{}"
    if value is None:
        return "{}"
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    raise _wrong(value, where, "JSON text")


def input_at(value: Any, where: str) -> str:
    """A call's input that is an object (Anthropic's, Converse's) as JSON text; ``"{}"``
    when absent or ``null``."""
    if value is None:
        return "{}"
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    raise _wrong(value, where, "an object")


def object_at(value: Any, where: str) -> dict[str, Any]:
    """An object (a call's ``function``, a block's body); empty when absent or ``null``."""
    if value is None:
        return {}
    if type(value) is not dict:
        raise _wrong(value, where, "an object")
    return value


def objects_at(value: Any, where: str) -> list[dict[str, Any]]:
    """A list of objects (blocks, items, parts, calls); empty when absent or ``null``."""
    if value is None:
        return []
    if type(value) is not list:
        raise _wrong(value, where, "a list")
    for v in value:
        if type(v) is not dict:
            raise _wrong(v, where + "[]", "an object")
    return value
