# long: the compaction strategies and the summary request share the walks over a body's entries
"""Prompt-too-long recovery: make a request smaller, one strategy at a time.

The engine applies ``policy.strategies`` in order, cumulatively: each strategy
gets the body the previous one returned, and the request is retried after each.
:func:`compact` returns ``None`` when a strategy would not make the request
smaller, so the same prompt is never sent twice at the same size.

``snip_tool_results``
    Tool results (OpenAI ``tool`` messages, Anthropic ``tool_result`` blocks,
    Responses ``*_call_output`` items) outside the last ``keep_recent`` entries and
    longer than ``tool_result_max_chars`` keep their head and tail around a marker
    ``[... 12345 characters cut by llm-gateway ...]``; a snipped result is at most
    ``tool_result_max_chars`` long, marker included, so snipping again changes
    nothing. With ``target_tokens`` the limit is halved (down to 256 characters)
    until the estimate fits.
``drop_middle``
    Keeps the system/developer messages, everything up to the first user message
    and the last ``keep_recent`` entries (widened back to a tool-call boundary, so
    the kept window never starts with an orphan result); drops whole groups from
    the middle, an assistant turn always together with its tool results, and
    leaves one short note where they were: a user message for OpenAI and
    Responses, a text block appended to the user message before the gap for
    Anthropic (roles keep alternating). With ``target_tokens`` it drops the oldest
    groups until the estimate fits, otherwise the whole middle.
``summarize``
    Like ``drop_middle`` with the whole middle, but the note carries a summary
    written by a model. That needs a model call, so :func:`compact` does not do
    it (it returns None); the engine does: :func:`summary_request` builds the
    call (in the summarize model's format), :func:`summary_text` reads the
    answer, :func:`apply_summary` puts it in place.

Sizes are :func:`estimate_tokens` (see :mod:`gateway.resilience.conversation`).
Nothing here mutates its input: every result is a new body.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.formats import CHAT, Format
from gateway.policy.schema import Compaction
from gateway.resilience.conversation import (
    PINNED_ROLES,
    allowed_cuts,
    conversation_problems,
    estimate_tokens,
    fixed_chars,
    groups,
    is_valid_conversation,
    plain_text,
    role,
    text_chars,
    text_size,
    tokens_for,
)

__all__ = [
    "Compacted",
    "apply_summary",
    "compact",
    "conversation_problems",
    "estimate_tokens",
    "is_valid_conversation",
    "snip_text",
    "summary_input_chars",
    "summary_request",
    "summary_text",
    "target_tokens_for",
]

SNIP_MARKER = "\n[... {n} characters cut by llm-gateway ...]\n"
SNIP_FLOOR_CHARS = 256
TARGET_MARGIN = 0.10
NOTE_PREFIX = "[llm-gateway "
DROP_NOTE = (
    "[llm-gateway removed {n} earlier messages here to fit the model's context window; "
    "the conversation continues below.]"
)
SUMMARY_NOTE = (
    "[llm-gateway replaced {n} earlier messages here with this summary to fit the model's "
    "context window.]\n{summary}"
)
SUMMARY_MAX_TOKENS = 2048
SUMMARY_INPUT_MAX_CHARS = 200_000
SUMMARY_OVERHEAD_CHARS = 2_000  # instructions, task and framing beside the transcript
SUMMARY_INSTRUCTIONS = (
    "You compress the middle part of a long conversation between a user and an AI agent "
    "so that the agent can carry on without it. Write a faithful, compact summary, in the "
    "conversation's language, of what was asked, what was done (files read or changed, "
    "commands run, tools called and what they returned), decisions taken, facts learned, "
    "errors met and how they were fixed, and what is still open. Keep exact identifiers, "
    "file paths, numbers and error messages. Answer with the summary only, no preamble."
)


@dataclass(frozen=True)
class Compacted:
    """A smaller body and what it took; the fields of the ``prompt_too_long_recovery`` event."""

    body: dict[str, Any]
    strategy: str
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int


def compact(
    body: Mapping[str, Any],
    fmt: Format,
    strategy: str,
    policy: Compaction,
    *,
    target_tokens: int | None = None,
) -> Compacted | None:
    """Apply one strategy; None when it would not make the request smaller.

    ``summarize`` needs a model call, so it is not done here and returns None:
    the engine makes the call with :func:`summary_request`, :func:`summary_text`
    and :func:`apply_summary` (proactive compaction, which makes no calls, skips it).
    An unknown strategy raises ValueError.
    """
    if strategy == "snip_tool_results":
        return _snip_tool_results(body, fmt, policy, target_tokens)
    if strategy == "drop_middle":
        return _drop_middle(body, fmt, policy, target_tokens)
    if strategy == "summarize":
        return None
    raise ValueError(f"unknown compaction strategy {strategy!r}")


def target_tokens_for(
    failure_prompt_tokens: int | None,
    context_limit: int | None,
    requested_output: int | None,
    estimate: int,
) -> int | None:
    """The size to compact to, in :func:`estimate_tokens` units; None when unknown.

    The provider's room for the prompt is ``context_limit - requested_output``;
    we aim 10 % under it and scale by ``estimate / failure_prompt_tokens`` so
    our estimate and the provider's count agree (no scaling when the error gave
    no prompt count). 0 means no prompt fits beside the requested output.
    """
    if context_limit is None:
        return None
    room = context_limit - (requested_output or 0)
    if room <= 0:
        return 0
    scale = estimate / failure_prompt_tokens if failure_prompt_tokens else 1.0
    return max(0, math.floor(room * (1 - TARGET_MARGIN) * scale))


# ---- snip_tool_results ----------------------------------------------------------


def snip_text(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` (marker included): head, marker, tail."""
    if len(text) <= max_chars:
        return text
    keep = max(0, max_chars - len(SNIP_MARKER.format(n=len(text))))
    head = (keep + 1) // 2
    tail = keep - head
    cut = len(text) - head - tail
    return text[:head] + SNIP_MARKER.format(n=cut) + text[len(text) - tail :]


def _snip_value(value: Any, max_chars: int) -> Any:
    """A tool result payload with each long text snipped (str, or a list of text parts)."""
    if isinstance(value, str):
        return snip_text(value, max_chars)
    if isinstance(value, list):
        out = []
        for part in value:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                part = {**part, "text": snip_text(part["text"], max_chars)}
            out.append(part)
        return out
    return value


def _snip_entry(entry: Any, fmt: Format, max_chars: int) -> Any:
    return fmt.snip_results(entry, lambda value: _snip_value(value, max_chars))


def _snip_tool_results(
    body: Mapping[str, Any], fmt: Format, policy: Compaction, target: int | None
) -> Compacted | None:
    items = fmt.entries(body)
    before = estimate_tokens(body, fmt)
    protected = max(0, len(items) - policy.keep_recent)
    limit = policy.tool_result_max_chars
    floor = min(limit, SNIP_FLOOR_CHARS)
    while True:
        new_items = [
            _snip_entry(e, fmt, limit) if i < protected else e for i, e in enumerate(items)
        ]
        new_body = _with_entries(body, fmt, new_items)
        after = estimate_tokens(new_body, fmt)
        if target is None or after <= target or limit <= floor:
            break
        limit = max(floor, limit // 2)
    if after >= before:
        return None
    return Compacted(new_body, "snip_tool_results", len(items), len(new_items), before, after)


# ---- drop_middle and summarize --------------------------------------------------


@dataclass(frozen=True)
class _Middle:
    """The droppable groups between the kept head and the kept recent window."""

    groups: tuple[tuple[int, int], ...]


def _middle(items: Sequence[Any], fmt: Format, keep_recent: int) -> _Middle:
    n = len(items)
    first_user = next((i for i, e in enumerate(items) if role(e) == "user"), None)
    if first_user is None:
        return _Middle(())
    cuts = allowed_cuts(items, fmt)
    head_end = first_user + 1
    while head_end < n and not cuts[head_end]:
        head_end += 1
    tail_start = max(0, n - keep_recent)
    while tail_start > 0 and not cuts[tail_start]:
        tail_start -= 1
    if tail_start <= head_end:
        return _Middle(())
    droppable = tuple(
        (s, e)
        for s, e in groups(cuts, head_end, tail_start)
        if not (e - s == 1 and (role(items[s]) in PINNED_ROLES or _is_note(items[s])))
    )
    return _Middle(droppable)


def _is_note(entry: Any) -> bool:
    """A note an earlier strategy left: kept like a system message, never dropped again."""
    return role(entry) == "user" and plain_text(entry.get("content")).startswith(NOTE_PREFIX)


def _note_extra_chars(items: Sequence[Any], fmt: Format, first: int, note: str) -> int:
    """Characters the note adds (Anthropic: joined to the user message before the gap)."""
    if fmt.alternating and isinstance(items[first - 1].get("content"), str):
        return len(note) + 2
    return len(note)


def _replace_middle(
    body: Mapping[str, Any], fmt: Format, items: Sequence[Any], drop: set[int], note: str
) -> dict[str, Any]:
    first = min(drop)
    out: list[Any] = []
    for i, entry in enumerate(items):
        if i == first and not fmt.alternating:
            out.append({"role": "user", "content": note})
        if i not in drop:
            out.append(entry)
    if fmt.alternating:
        host = out[first - 1]  # a user message (cuts lie between user and assistant), kept
        content = host.get("content")
        if isinstance(content, str):
            joined: Any = f"{content}\n\n{note}"
        else:
            joined = [*(content or []), {"type": "text", "text": note}]
        out[first - 1] = {**host, "content": joined}
    return _with_entries(body, fmt, out)


def _drop_middle(
    body: Mapping[str, Any], fmt: Format, policy: Compaction, target: int | None
) -> Compacted | None:
    items = fmt.entries(body)
    middle = _middle(items, fmt, policy.keep_recent)
    if not middle.groups:
        return None
    before = estimate_tokens(body, fmt)
    sizes = [text_chars(e) for e in items]
    total = fixed_chars(body, fmt) + sum(sizes)
    first = middle.groups[0][0]
    extra_entry = 0 if fmt.alternating else 1
    chosen = len(middle.groups)
    if target is not None:
        dropped_chars = dropped_count = 0
        for k, (s, e) in enumerate(middle.groups, start=1):
            dropped_chars += sum(sizes[s:e])
            dropped_count += e - s
            note = DROP_NOTE.format(n=dropped_count)
            chars = total - dropped_chars + _note_extra_chars(items, fmt, first, note)
            estimate = tokens_for(chars, len(items) - dropped_count + extra_entry)
            if estimate <= target and estimate < before:
                chosen = k
                break
    drop = {i for s, e in middle.groups[:chosen] for i in range(s, e)}
    new_body = _replace_middle(body, fmt, items, drop, DROP_NOTE.format(n=len(drop)))
    return _result(new_body, fmt, "drop_middle", len(items), before)


def _result(
    new_body: dict[str, Any], fmt: Format, strategy: str, count_before: int, before: int
) -> Compacted | None:
    after = estimate_tokens(new_body, fmt)
    if after >= before:
        return None
    return Compacted(new_body, strategy, count_before, len(fmt.entries(new_body)), before, after)


def summary_input_chars(context_window: int | None, scale: float = 1.0) -> int:
    """How much transcript a summary request may carry for a model with ``context_window``.

    The window less the summary's own ``max_tokens``, 10 % margin, in the estimate's
    size (:func:`text_size`: characters, one outside ASCII as its UTF-8 bytes; 4 per
    estimated token; ``scale`` converts provider tokens into estimate units, as in
    :func:`target_tokens_for`), less room for the instructions and the task; at most
    200,000, at least 1,000. No window: 200,000.
    """
    if context_window is None:
        return SUMMARY_INPUT_MAX_CHARS
    room = (context_window - SUMMARY_MAX_TOKENS) * (1 - TARGET_MARGIN) * scale * 4
    return max(1_000, min(SUMMARY_INPUT_MAX_CHARS, math.floor(room) - SUMMARY_OVERHEAD_CHARS))


def summary_request(
    body: Mapping[str, Any],
    fmt: Format,
    policy: Compaction,
    model: str,
    *,
    summary_fmt: Format = CHAT,
    max_input_chars: int = SUMMARY_INPUT_MAX_CHARS,
) -> dict[str, Any] | None:
    """A request asking ``model`` to summarise the middle of ``body``; None if there is none.

    The middle is what ``drop_middle`` would drop without a target. Each entry is
    rendered as lines of transcript (``user: ...``, ``assistant called
    grep({...})``, ``tool result: ...``), each line snipped to
    ``tool_result_max_chars``, the whole transcript to a size of ``max_input_chars``; the
    first user message goes along as context. ``summary_fmt`` is the format the
    summarize model is called in (:meth:`~gateway.formats.Format.summary_request` puts
    the instructions where it keeps a system text). Never streamed, ``temperature: 0``, at most
    2,048 output tokens.
    """
    items = fmt.entries(body)
    middle = _middle(items, fmt, policy.keep_recent)
    if not middle.groups:
        return None
    limit = policy.tool_result_max_chars
    lines = [
        snip_text(line, limit)
        for s, e in middle.groups
        for entry in items[s:e]
        for line in fmt.transcript_lines(entry)
    ]
    joined = "\n".join(lines)
    transcript = snip_text(joined, _chars_within(joined, max_input_chars))
    task = next((plain_text(e.get("content")) for e in items if role(e) == "user"), "")
    prompt = (
        f"The task the user gave at the start (context only):\n<task>\n{snip_text(task, limit)}"
        f"\n</task>\n\nThe part of the conversation to summarise:\n<transcript>\n{transcript}"
        "\n</transcript>"
    )
    return summary_fmt.summary_request(model, SUMMARY_INSTRUCTIONS, prompt, SUMMARY_MAX_TOKENS)


def _chars_within(text: str, size: int) -> int:
    """How many characters of ``text`` make a size of about ``size`` (its average)."""
    whole = text_size(text)
    return size if whole <= len(text) else size * len(text) // whole


def summary_text(answer: Any, summary_fmt: Format) -> str:
    """The text of a summary answer (decoded JSON in ``summary_fmt``), its text blocks
    one per line; "" if it has none. Reasoning and tool calls are ignored."""
    if not isinstance(answer, Mapping):
        return ""
    return summary_fmt.answer_text(answer, sep="\n").strip()


def apply_summary(
    body: Mapping[str, Any], fmt: Format, policy: Compaction, summary_text: str
) -> Compacted | None:
    """The body with the middle replaced by a note with ``summary_text``; None if not smaller."""
    items = fmt.entries(body)
    middle = _middle(items, fmt, policy.keep_recent)
    summary = summary_text.strip()
    if not middle.groups or not summary:
        return None
    before = estimate_tokens(body, fmt)
    drop = {i for s, e in middle.groups for i in range(s, e)}
    note = SUMMARY_NOTE.format(n=len(drop), summary=summary)
    new_body = _replace_middle(body, fmt, items, drop, note)
    return _result(new_body, fmt, "summarize", len(items), before)


# ---- shared ---------------------------------------------------------------------


def _with_entries(body: Mapping[str, Any], fmt: Format, items: list[Any]) -> dict[str, Any]:
    """A deep copy of ``body`` holding ``items`` as its conversation."""
    new_body = {key: value for key, value in body.items() if key != fmt.entries_key}
    new_body[fmt.entries_key] = items
    return copy.deepcopy(new_body)
