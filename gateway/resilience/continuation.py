"""Output recovery: continue an answer cut at the token limit, then merge the parts.

An answer is *cut* when the provider stopped it at the output limit and it is
not a tool call (OpenAI chat ``finish_reason: length``, Anthropic ``stop_reason:
max_tokens``, Responses ``status: incomplete`` for ``max_output_tokens``). The
engine asks the same model for the rest, up to ``max_continuations`` times, and
answers the client once: :func:`merge_parts` joins the text, sums the usage and
keeps the first part's id, model and creation time.

Not continued (:func:`should_continue`):

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

from gateway.resilience.conversation import check_api, plain_text

RESUME_INSTRUCTION = (
    "Your previous reply was cut off by the output token limit. Continue it from the exact "
    "character where it stopped, even in the middle of a word or sentence. Do not repeat "
    "anything already written, do not recap or summarise, and add no preamble."
)

_CLIENT_CAPS = {
    "openai": ("max_tokens", "max_completion_tokens"),
    "anthropic": ("max_tokens",),
    "responses": ("max_output_tokens",),
}


def answer_text(response: Mapping[str, Any], api: str) -> str:
    """The answer's text: the first choice's content, the text blocks, or the output text.
    A part of the wrong type (a number for a text, a string for a block) is no text."""
    check_api(api)
    if api == "openai":
        content = _dict(_first_choice(response).get("message")).get("content")
        return plain_text(content) if content else ""
    if api == "anthropic":
        return "".join(_text(b) for b in _list(response.get("content")) if _is(b, "text"))
    return "".join(
        _text(part)
        for item in _list(response.get("output"))
        if _is(item, "message")
        for part in _list(item.get("content"))
        if _is(part, "output_text")
    )


def cut_at_length(response: Mapping[str, Any], api: str) -> bool:
    """True when the answer stopped at the output token limit and is not a tool call.
    An answer whose fields have the wrong types is not cut: it is passed on as it came."""
    check_api(api)
    if api == "openai":
        choice = _first_choice(response)
        message = _dict(choice.get("message"))
        calls = message.get("tool_calls") or message.get("function_call")
        return choice.get("finish_reason") == "length" and not calls
    if api == "anthropic":
        tool_use = any(_is(b, "tool_use") for b in _list(response.get("content")))
        return response.get("stop_reason") == "max_tokens" and not tool_use
    details = _dict(response.get("incomplete_details"))
    calls = any(
        isinstance(item, Mapping) and str(item.get("type", "")).endswith("_call")
        for item in _list(response.get("output"))
    )
    return (
        response.get("status") == "incomplete"
        and details.get("reason") == "max_output_tokens"
        and not calls
    )


def client_capped_output(request: Mapping[str, Any], api: str) -> bool:
    """True when the request sets its own output limit (always, for Anthropic)."""
    check_api(api)
    return any(request.get(name) is not None for name in _CLIENT_CAPS[api])


def continuation_request(
    request: Mapping[str, Any],
    parts: Sequence[Mapping[str, Any]],
    api: str,
    *,
    prefill: bool,
) -> dict[str, Any]:
    """The follow-up request asking for what comes after the text of ``parts``.

    A trailing assistant message in the client's request (its own prefill) is
    extended rather than repeated.
    """
    check_api(api)
    body = copy.deepcopy(dict(request))
    key = "input" if api == "responses" else "messages"
    items = body.get(key)
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    items = list(items) if isinstance(items, list) else []
    text = join_texts([answer_text(p, api) for p in parts], api)
    if items and isinstance(items[-1], Mapping) and items[-1].get("role") == "assistant":
        text = plain_text(items[-1].get("content")) + text
        items = items[:-1]
    thinking = body.get("thinking")
    if api == "anthropic" and isinstance(thinking, Mapping) and thinking.get("type") != "disabled":
        prefill = False
    if api == "anthropic":
        text = text.rstrip()
    items.append({"role": "assistant", "content": text})
    if not prefill:
        items.append({"role": "user", "content": RESUME_INSTRUCTION})
    body[key] = items
    return body


def join_texts(texts: Sequence[str], api: str) -> str:
    """Concatenate part texts. Anthropic: a part that starts with whitespace replaces the
    trailing whitespace of the text before it (trimmed from what the model was shown)."""
    joined = ""
    for text in texts:
        if api == "anthropic" and joined[-1:].isspace() and text[:1].isspace():
            joined = joined.rstrip()
        joined += text
    return joined


def merge_parts(parts: Sequence[Mapping[str, Any]], api: str) -> dict[str, Any]:
    """One answer from its parts: the first part's identity, joined text, summed usage,
    and the stop reason of the last part."""
    check_api(api)
    if not parts:
        raise ValueError("merge_parts needs at least one part")
    merged = copy.deepcopy(dict(parts[0]))
    last = parts[-1]
    text = join_texts([answer_text(p, api) for p in parts], api)
    if api == "openai":
        _merge_openai(merged, parts, text)
    elif api == "anthropic":
        content = [b for b in _list(merged.get("content")) if not _is(b, "text")]
        template: Mapping[str, Any] = next(
            (b for b in _list(merged.get("content")) if _is(b, "text")), {}
        )
        content.append({**template, "type": "text", "text": text})
        merged["content"] = content
        merged["stop_reason"] = last.get("stop_reason")
        merged["stop_sequence"] = last.get("stop_sequence")
    else:
        _merge_responses(merged, last, text)
    usages = [p["usage"] for p in parts if isinstance(p.get("usage"), Mapping)]
    if usages:
        merged["usage"] = _sum_usage(usages)
    return merged


def _merge_openai(merged: dict[str, Any], parts: Sequence[Mapping[str, Any]], text: str) -> None:
    choices = merged.get("choices")
    if not isinstance(choices, list) or not choices:
        merged["choices"] = choices = [{"index": 0, "message": {"role": "assistant"}}]
    if not isinstance(choices[0], dict):
        choices[0] = {"index": 0}
    choice = choices[0]
    if not isinstance(choice.get("message"), dict):
        choice["message"] = {"role": "assistant"}
    message = choice["message"]
    message["content"] = text
    reasoning = [_dict(_first_choice(p).get("message")).get("reasoning_content") for p in parts]
    if any(isinstance(r, str) for r in reasoning):
        message["reasoning_content"] = "".join(r for r in reasoning if isinstance(r, str))
    choice["finish_reason"] = _first_choice(parts[-1]).get("finish_reason")


def _merge_responses(merged: dict[str, Any], last: Mapping[str, Any], text: str) -> None:
    output: list[Any] = []
    placed = False
    last_message = next((i for i in reversed(_list(last.get("output"))) if _is(i, "message")), None)
    for item in _list(merged.get("output")):
        if not _is(item, "message"):
            output.append(item)
        elif not placed:
            template: Mapping[str, Any] = next(
                (p for p in _list(item.get("content")) if _is(p, "output_text")), {}
            )
            item = {**item, "content": [{**template, "type": "output_text", "text": text}]}
            if last_message is not None and "status" in last_message:
                item["status"] = last_message["status"]
            output.append(item)
            placed = True
    if not placed:
        output.append(
            {
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    merged["output"] = output
    merged["status"] = last.get("status")
    merged["incomplete_details"] = last.get("incomplete_details")
    if "output_text" in merged:
        merged["output_text"] = text


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


def _first_choice(response: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = response.get("choices")
    if isinstance(choices, list) and choices:
        first = choices[0]
        if type(first) is dict or isinstance(first, Mapping):  # a JSON answer's: a dict, quickly
            return first
    return {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(part: Mapping[str, Any]) -> str:
    text = part.get("text")
    return text if isinstance(text, str) else ""


def _is(value: Any, kind: str) -> bool:
    return isinstance(value, Mapping) and value.get("type") == kind
