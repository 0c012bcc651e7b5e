"""Output recovery: continue an answer cut at the token limit, then merge the parts.

An answer is *cut* when the provider stopped it at the output limit and it is
not a tool call (OpenAI chat ``finish_reason: length``, Anthropic ``stop_reason:
max_tokens``, Responses ``status: incomplete`` for ``max_output_tokens``). The
engine asks the same model for the rest, up to ``max_continuations`` times, and
answers the client once: :func:`merge_parts` joins the text, sums the usage and
keeps the first part's id, model and creation time.

Not continued (:func:`gateway.resilience.followup.continuation`):

- when the client capped the output itself and ``respect_client_max_tokens`` is
  true: OpenAI ``max_tokens`` / ``max_completion_tokens``, Responses
  ``max_output_tokens``. Anthropic requests always carry ``max_tokens`` (the API
  requires it), so every Anthropic request counts as capped: Anthropic answers
  are continued only under ``respect_client_max_tokens: false``;
- when the cut answer has no text (the budget went to reasoning; a first part of
  only whitespace counts as none), or the client asked for several choices
  (``n > 1``).

The follow-up request (:func:`continuation_request`) carries the text so far as
the final assistant message (*prefill*, for models marked ``prefill: true``;
Anthropic prefill with extended thinking is not allowed, so there it falls back
to the instruction form), or as an assistant message followed by a short user
instruction to resume mid-sentence. Anthropic rejects a prefill that ends in
whitespace, so for Anthropic the partial text is always sent with its trailing
whitespace trimmed, and :func:`join_texts` drops that whitespace when the next
part starts with the whitespace the model wrote again.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.formats import Format

RESUME_INSTRUCTION = (
    "Your previous reply was cut off by the output token limit. Continue it from the exact "
    "character where it stopped, even in the middle of a word or sentence. Do not repeat "
    "anything already written, do not recap or summarise, and add no preamble."
)


def continuation_request(
    request: Mapping[str, Any],
    parts: Sequence[Mapping[str, Any]],
    fmt: Format,
    *,
    prefill: bool,
) -> dict[str, Any]:
    """The follow-up request asking for what comes after the text of ``parts``.

    A trailing assistant message in the client's request (its own prefill) is
    extended rather than repeated.
    """
    body = copy.deepcopy(dict(request))
    items = fmt.entries(body)
    text = join_texts([fmt.answer_text(p) for p in parts], fmt)
    own = fmt.assistant_text(items[-1]) if items else None
    if own is not None:
        text = own + text
        items = items[:-1]
    prefill = prefill and fmt.prefill_allowed(body)
    if fmt.trims_prefill:
        text = text.rstrip()
    items.append(fmt.text_turn("assistant", text))
    if not prefill:
        items.append(fmt.text_turn("user", RESUME_INSTRUCTION))
    body[fmt.entries_key] = items
    return body


def join_texts(texts: Sequence[str], fmt: Format) -> str:
    """Concatenate part texts. Where the format trims a prefill (Anthropic), a part that
    starts with whitespace replaces the trailing whitespace of the text before it
    (trimmed from what the model was shown)."""
    joined = ""
    trims = fmt.trims_prefill
    for text in texts:
        if trims and joined[-1:].isspace() and text[:1].isspace():
            joined = joined.rstrip()
        joined += text
    return joined


def merge_parts(parts: Sequence[Mapping[str, Any]], fmt: Format) -> dict[str, Any]:
    """One answer from its parts: the first part's identity, joined text, summed usage,
    and the stop reason of the last part."""
    if not parts:
        raise ValueError("merge_parts needs at least one part")
    merged = copy.deepcopy(dict(parts[0]))
    fmt.merge(merged, parts, join_texts([fmt.answer_text(p) for p in parts], fmt))
    key = fmt.answer_usage_key
    usages = [p[key] for p in parts if isinstance(p.get(key), Mapping)]
    if usages:
        merged[key] = _sum_usage(usages)
    return merged


def _sum_usage(usages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Numbers summed key by key (nested details too); other values from the first part."""
    total: dict[str, Any] = copy.deepcopy(dict(usages[0]))
    for usage in usages[1:]:
        _add_into(total, usage)
    return total


def _add_into(total: dict[str, Any], usage: Mapping[str, Any]) -> None:
    for key, value in usage.items():
        current = total.get(key)
        if _number(value) and (_number(current) or current is None):
            total[key] = (current or 0) + value
        elif isinstance(value, Mapping) and isinstance(current, dict):
            _add_into(current, value)
        elif key not in total or current is None:
            total[key] = copy.deepcopy(value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
