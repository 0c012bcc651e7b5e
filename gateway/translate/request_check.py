"""A request checked before the translators read it: every field they read, nested, of
its JSON type (:mod:`gateway.translate.request_models`), else a 400 naming the field's
path (``param`` in the OpenAI format: ``messages[2].content[0].image_url.url``).

Translation reads the whole conversation (content parts of every kind, tool calls and
results, tools, ``tool_choice``, image and file sources); a field of the wrong type
would otherwise raise deep inside a translator. A request relayed in its own format is
not checked here: the gateway reads only a few of its fields (checked at the edge,
:mod:`gateway.web.shapes`) and the provider judges the rest, as it would without the
gateway. The check costs about as much as parsing the body once, so it is paid only by
requests that are translated.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from gateway.errors import GatewayError, bad_request, wrong_type
from gateway.translate.gemini_models import GEMINI_ADAPTER
from gateway.translate.request_models import ADAPTERS, ARRAY, TAG, TEXT

__all__ = ["check"]

#: Output caps: a positive integer, whatever pydantic calls the error.
_CAPS = (
    "max_tokens", "max_completion_tokens", "max_output_tokens", "generationConfig.maxOutputTokens"
)  # fmt: skip


def check(body: dict[str, Any], source: str) -> None:
    """Raise a 400 :class:`GatewayError` naming the first field of ``body`` (format
    ``source``: ``chat``, ``responses``, ``messages`` or ``gemini``) the translators would
    read with the wrong JSON type; return ``None`` for a sound body. The body is not
    changed."""
    try:
        _ADAPTERS[source].validate_python(body)
    except ValidationError as e:
        raise _refusal(e) from None


_ADAPTERS: dict[str, TypeAdapter[Any]] = {**ADAPTERS, "gemini": GEMINI_ADAPTER}


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "dict_type": "an object",
    "typed_dict_type": "an object",
    "list_type": "an array",
    "greater_than_equal": "a positive integer",
    "text_or_array": "a string or an array",
}

#: Where a field's own words say more: (path with ``[]`` for indexes, error type).
_PHRASES = {
    ("messages", "list_type"): "an array of message objects",
    ("messages[]", "dict_type"): "a message object",
    ("system", "text_or_array"): "a string or an array of content blocks",
    ("contents", "list_type"): "an array of Content objects",
    ("contents[]", "dict_type"): "a Content object",
}
_INDEX = re.compile(r"\[\d+\]")


def _refusal(error: ValidationError) -> GatewayError:
    first, loc, kind = _applicable(error.errors(include_url=False, include_context=False))
    path, value = _path(loc), first["input"]
    if kind == "missing":
        return bad_request(f"'{path}' is required", path)
    expected = _PHRASES.get((_INDEX.sub("[]", path), kind)) or _EXPECTED.get(kind, first["msg"])
    if path in _CAPS:
        expected = "a positive integer"
    return wrong_type(path, expected, value)


def _applicable(errors: list[ErrorDetails]) -> tuple[ErrorDetails, tuple[Any, ...], str]:
    """The first error, its location and type; where it is a string-or-array union's
    (both branches fail), the error of the array branch when the value is an array, else
    ``text_or_array`` at the union's place."""
    first, start = errors[0], 0
    while True:
        loc = first["loc"]
        k = next((i for i in range(start, len(loc)) if loc[i] == TEXT), None)
        if k is None:
            return first, loc, first["type"]
        prefix = loc[:k]
        inside = [
            e for e in errors if len(e["loc"]) > k + 1 and e["loc"][: k + 1] == (*prefix, ARRAY)
        ]
        if not inside:
            return first, prefix, "text_or_array"
        errors, first, start = inside, inside[0], k + 1


def _path(loc: tuple[int | str, ...]) -> str:
    """``('messages', 2, 'content', '~list', 0)`` -> ``messages[2].content[0]``."""
    out = ""
    for part in loc:
        if type(part) is int:
            out += f"[{part}]"
        elif not part.startswith(TAG):  # type: ignore[union-attr]
            out += f".{part}" if out else str(part)
    return out
