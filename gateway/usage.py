"""Token counts, neutral between the formats, and the readers of each format's usage
block (``gateway/translate/usage.py`` writes them; its docstring maps the fields)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The largest token count taken from a provider (a signed 64-bit integer).
MAX_TOKENS = 2**63 - 1


def token_count(value: Any) -> int:
    """A provider's token count, or 0 when it is none: a string, a float, a bool, a
    negative number or one over 64 bits is not counted (never logged, never a metric)."""
    return value if type(value) is int and 0 <= value <= MAX_TOKENS else 0


_int = token_count


@dataclass(slots=True)
class Usage:
    """Token counts, neutral: ``input`` is every prompt token (OpenAI's ``prompt_tokens``,
    cached ones included); Anthropic's ``input_tokens`` excludes cache reads and writes."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_creation: int = 0
    reasoning: int | None = None

    def add(self, other: Usage) -> None:
        """Add ``other``'s counts into these (a part of the same answer)."""
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_creation += other.cache_creation
        if other.reasoning is not None:
            self.reasoning = (self.reasoning or 0) + other.reasoning


def _maybe(value: Any) -> int | None:
    """A count that may be absent (reasoning tokens): None stays None."""
    return None if value is None else _int(value)


def from_chat(u: Any) -> Usage:
    # Read on every chat answer: the counts a usage block leaves out cost no call.
    p, c = u.get("prompt_tokens"), u.get("completion_tokens")
    usage = Usage(
        p if type(p) is int and 0 <= p <= MAX_TOKENS else 0,
        c if type(c) is int and 0 <= c <= MAX_TOKENS else 0,
    )
    details = u.get("prompt_tokens_details")
    cached = None
    if details:
        cached = details.get("cached_tokens")
        if (written := details.get("cache_write_tokens")) is not None:
            usage.cache_creation = _int(written)
    if cached is None:
        cached = u.get("prompt_cache_hit_tokens")  # DeepSeek's name for it
    if cached is not None:
        usage.cache_read = _int(cached)
    out = u.get("completion_tokens_details")
    if out and (reasoning := out.get("reasoning_tokens")) is not None:
        usage.reasoning = _int(reasoning)
    return usage


def from_anthropic(u: Any) -> Usage:
    read = _int(u.get("cache_read_input_tokens"))
    written = _int(u.get("cache_creation_input_tokens"))
    details = u.get("output_tokens_details") or {}
    thinking = _maybe(details.get("thinking_tokens"))
    uncached = _int(u.get("input_tokens"))
    return Usage(uncached + read + written, _int(u.get("output_tokens")), read, written, thinking)


def update_anthropic(usage: Usage, u: Any) -> None:
    """A ``message_delta`` usage over the ``message_start`` one (its counts are totals). A
    count the delta leaves out, or gives as something that is not a count, stands as it
    was."""
    output = _given(u.get("output_tokens"))
    if output is not None:
        usage.output = output
    details = u.get("output_tokens_details")
    if isinstance(details, dict) and (thinking := _given(details.get("thinking_tokens"))):
        usage.reasoning = thinking
    uncached = _given(u.get("input_tokens"))
    read = _given(u.get("cache_read_input_tokens"))
    written = _given(u.get("cache_creation_input_tokens"))
    if uncached is None and read is None and written is None:
        return
    if uncached is None:
        uncached = max(usage.input - usage.cache_read - usage.cache_creation, 0)
    usage.cache_read = read if read is not None else usage.cache_read
    usage.cache_creation = written if written is not None else usage.cache_creation
    usage.input = uncached + usage.cache_read + usage.cache_creation


def _given(value: Any) -> int | None:
    """A count, or None when ``value`` is absent or is not one (:func:`token_count`)."""
    return value if type(value) is int and token_count(value) == value else None


def from_converse(u: Any) -> Usage:
    read = _int(u.get("cacheReadInputTokens"))
    written = _int(u.get("cacheWriteInputTokens"))
    uncached = _int(u.get("inputTokens"))
    return Usage(uncached + read + written, _int(u.get("outputTokens")), read, written)


def from_responses(u: Any) -> Usage:
    details = u.get("input_tokens_details") or {}
    out = u.get("output_tokens_details") or {}
    return Usage(
        _int(u.get("input_tokens")),
        _int(u.get("output_tokens")),
        _int(details.get("cached_tokens")),
        _int(details.get("cache_write_tokens")),
        _maybe(out.get("reasoning_tokens")),
    )
