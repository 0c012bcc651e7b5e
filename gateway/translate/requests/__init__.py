"""Request translation: a client's body -> the provider's body, and what was dropped.

Each format has a reader (body -> :class:`~gateway.translate.ir.Conv`) and a writer
(``Conv`` -> body); a translation is one read and one write. Formats: ``openai`` (Chat
Completions), ``responses`` (OpenAI Responses), ``anthropic`` (Messages), ``converse``
(Bedrock Converse) and ``gemini`` (Gemini's generateContent; its reader is
:mod:`~gateway.translate.requests.gemini_read`, so that a Gemini client may call any
model): Converse has a writer only, no client speaks it.

Every field follows one rule: **mapped** (carried, renamed where the formats differ),
**dropped** (not sent; its name goes into :class:`~gateway.translate.ir.Dropped`, which
becomes the ``x-gateway-dropped`` header and the access log field) or **refused** (a 400
in the client's format naming the field: :class:`~gateway.errors.Refused`), refused
only where sending the request without it would silently change what the answer means.
A field no rule names is dropped and named.

The rule of each field and direction is in docs/translation.md ("Fields with no
equivalent" and the tables under "Requests"); the readers and writers of this package
follow it, and tests/translate/ checks it. :class:`~gateway.translate.ir.Caps` lets a
writer drop sampling fields or write adaptive thinking for models that need it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.errors import Refused
from gateway.translate.ir import DEFAULT_CAPS, Caps, Conv, Dropped
from gateway.translate.requests import anthropic, chat, converse, gemini, gemini_read, responses

READERS: dict[str, Callable[[dict[str, Any], Dropped], Conv]] = {
    "chat": chat.read,
    "responses": responses.read,
    "messages": anthropic.read,
    "gemini": gemini_read.read,
}


def write(
    conv: Conv,
    provider: str,
    drops: Dropped,
    max_output_tokens: int | None,
    caps: Caps = DEFAULT_CAPS,
) -> dict[str, Any]:
    """The body for ``provider`` ("chat", "responses", "messages", "converse" or "gemini");
    ``max_output_tokens`` is the model's own output cap (None when unknown)."""
    if not conv.tools:  # none offered, or every one dropped (built-in tools)
        conv.tools = None
        if conv.tool_choice in ("auto", "none"):
            conv.tool_choice = None  # the same without tools; providers refuse it alone
    if conv.tool_choice == "tool" and conv.tool_name not in {t.name for t in conv.tools or ()}:
        raise Refused("tool_choice", f"{conv.tool_name!r} is not available on this model")
    if max_output_tokens is not None and conv.max_tokens is not None:
        # a cap above what the model can write means the same as the model's own cap
        conv.max_tokens = min(conv.max_tokens, max_output_tokens)
    if provider == "messages":
        return anthropic.write(conv, drops, max_output_tokens, caps)
    if provider == "responses":
        return responses.write(conv, drops, caps)
    if provider == "converse":
        return converse.write(conv, drops, max_output_tokens, caps)
    if provider == "gemini":
        return gemini.write(conv, drops, max_output_tokens, caps)
    return chat.write(conv, drops, caps)


def translate(
    body: dict[str, Any],
    client: str,
    provider: str,
    max_output_tokens: int | None = None,
    caps: Caps = DEFAULT_CAPS,
) -> tuple[dict[str, Any], Conv, Dropped]:
    """One request from the ``client`` format to the ``provider`` format: the new body, the
    neutral form (its ``include_usage`` etc. are for the answer's translation) and the
    names dropped. Raises :class:`~gateway.errors.Refused`."""
    drops = Dropped()
    conv = READERS[client](body, drops)
    return write(conv, provider, drops, max_output_tokens, caps), conv, drops


__all__ = ["READERS", "translate", "write"]
