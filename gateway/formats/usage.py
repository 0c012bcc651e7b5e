"""Token counts, neutral between the formats, the readers of each format's usage block
(``gateway/translate/usage.py`` writes them; its docstring maps the fields), and what a
count must be for the gateway to bill it (:func:`plausible`; docs/recovery.md, "Tokens
and cost").

A count is a whole number from 0 to 2**63-1 (``12.0`` is 12). Anything else a provider
puts there (a string, a bool, NaN, a fraction, a negative number) is not a count: the
reader gives 0 and names the field in :attr:`Usage.invalid`, so that billing estimates it
rather than taking the 0. A field that is absent or null is 0 and not invalid.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

#: The largest token count taken from a provider (a signed 64-bit integer).
MAX_TOKENS = 2**63 - 1
#: The context window :func:`limit` takes for a model whose policy gives none: above
#: every model's we know of but one (Llama 4 Scout's 10M, which the factor covers).
DEFAULT_WINDOW = 2**21
#: How many context windows one answer's count may reach: a provider's own tool loop
#: (Anthropic's server tools, the Responses API's built-in ones) bills every model call
#: it made inside one answer, and ``n`` choices each take up to a window of output.
WINDOWS = 16

INPUT, OUTPUT, CACHE_READ, CACHE_CREATION, REASONING = (
    "input", "output", "cache_read", "cache_creation", "reasoning"
)  # fmt: skip


def count(value: Any) -> int | None:
    """A provider's token count, or None when ``value`` is not one: a string, a bool, NaN,
    a fraction, a negative number or one over 64 bits (a whole float, ``12.0``, is 12)."""
    if type(value) is int:
        return value if 0 <= value <= MAX_TOKENS else None
    if type(value) is float and value.is_integer() and 0 <= value <= MAX_TOKENS:
        return int(value)
    return None


def token_count(value: Any) -> int:
    """A provider's token count, or 0 when it is none (:func:`count`)."""
    n = count(value)
    return 0 if n is None else n


@dataclass(slots=True)
class Usage:
    """Token counts, neutral: ``input`` is every prompt token (OpenAI's ``prompt_tokens``,
    cached ones included); Anthropic's ``input_tokens`` excludes cache reads and writes.
    ``invalid``: the fields the provider gave as something that is not a count (each
    read as 0)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_creation: int = 0
    reasoning: int | None = None
    invalid: tuple[str, ...] = ()

    def add(self, other: Usage) -> None:
        """Add ``other``'s counts into these (a part of the same answer)."""
        self.input += other.input
        self.output += other.output
        self.cache_read += other.cache_read
        self.cache_creation += other.cache_creation
        if other.reasoning is not None:
            self.reasoning = (self.reasoning or 0) + other.reasoning
        if other.invalid:
            self.invalid = _names(self.invalid + other.invalid)


def _names(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def _read(block: Any, key: str, name: str, bad: list[str]) -> int:
    """The count at ``block[key]``: 0 when absent; when not a count, 0 and ``name`` in
    ``bad``."""
    value = block.get(key)
    if type(value) is int and 0 <= value <= MAX_TOKENS:
        return value
    if value is None:
        return 0
    n = count(value)
    if n is None:
        bad.append(name)
        return 0
    return n


def _given(block: Any, key: str, name: str, bad: list[str]) -> int | None:
    """A count that may be absent: None when it is, or when it is not a count (then
    ``name`` in ``bad``)."""
    value = block.get(key)
    if value is None:
        return None
    n = count(value)
    if n is None:
        bad.append(name)
    return n


def _named(u: Usage, bad: list[str]) -> Usage:
    if bad:
        u.invalid = _names(u.invalid + tuple(bad))
    return u


def from_chat(u: Any) -> Usage:
    # Read on every chat answer: the counts a usage block leaves out cost no call.
    bad: list[str] = []
    p, c = u.get("prompt_tokens"), u.get("completion_tokens")
    usage = Usage(
        p if type(p) is int and 0 <= p <= MAX_TOKENS else _read(u, "prompt_tokens", INPUT, bad),
        c
        if type(c) is int and 0 <= c <= MAX_TOKENS
        else _read(u, "completion_tokens", OUTPUT, bad),
    )
    details = u.get("prompt_tokens_details")
    if details and details.get("cached_tokens") is not None:
        usage.cache_read = _read(details, "cached_tokens", CACHE_READ, bad)
    elif u.get("prompt_cache_hit_tokens") is not None:  # DeepSeek's name for it
        usage.cache_read = _read(u, "prompt_cache_hit_tokens", CACHE_READ, bad)
    if details and details.get("cache_write_tokens") is not None:
        usage.cache_creation = _read(details, "cache_write_tokens", CACHE_CREATION, bad)
    out = u.get("completion_tokens_details")
    if out:
        usage.reasoning = _given(out, "reasoning_tokens", REASONING, bad)
    return _named(usage, bad) if bad else usage


def from_anthropic(u: Any) -> Usage:
    bad: list[str] = []
    read = _read(u, "cache_read_input_tokens", CACHE_READ, bad)
    written = _read(u, "cache_creation_input_tokens", CACHE_CREATION, bad)
    details = u.get("output_tokens_details") or {}
    thinking = _given(details, "thinking_tokens", REASONING, bad)
    uncached = _read(u, "input_tokens", INPUT, bad)
    output = _read(u, "output_tokens", OUTPUT, bad)
    return _named(Usage(uncached + read + written, output, read, written, thinking), bad)


def update_anthropic(usage: Usage, u: Any) -> None:
    """A ``message_delta`` usage over the ``message_start`` one (its counts are totals). A
    count the delta leaves out stands as it was; one it gives as something that is not a
    count stands as it was too, and is named :attr:`Usage.invalid`."""
    bad: list[str] = []
    output = _given(u, "output_tokens", OUTPUT, bad)
    if output is not None:
        usage.output = output
    details = u.get("output_tokens_details")
    if isinstance(details, dict) and (
        thinking := _given(details, "thinking_tokens", REASONING, bad)
    ):
        usage.reasoning = thinking
    uncached = _given(u, "input_tokens", INPUT, bad)
    read = _given(u, "cache_read_input_tokens", CACHE_READ, bad)
    written = _given(u, "cache_creation_input_tokens", CACHE_CREATION, bad)
    _named(usage, bad)
    if uncached is None and read is None and written is None:
        return
    if uncached is None:
        uncached = max(usage.input - usage.cache_read - usage.cache_creation, 0)
    usage.cache_read = read if read is not None else usage.cache_read
    usage.cache_creation = written if written is not None else usage.cache_creation
    usage.input = uncached + usage.cache_read + usage.cache_creation


def from_converse(u: Any) -> Usage:
    bad: list[str] = []
    read = _read(u, "cacheReadInputTokens", CACHE_READ, bad)
    written = _read(u, "cacheWriteInputTokens", CACHE_CREATION, bad)
    uncached = _read(u, "inputTokens", INPUT, bad)
    output = _read(u, "outputTokens", OUTPUT, bad)
    return _named(Usage(uncached + read + written, output, read, written), bad)


def from_gemini(u: Any) -> Usage:
    """Gemini's ``usageMetadata``: ``promptTokenCount`` counts every prompt token, the
    cached ones (``cachedContentTokenCount``) included, and ``toolUsePromptTokenCount``
    the results of its own tools; ``candidatesTokenCount`` is the answer without its
    thinking, ``thoughtsTokenCount`` the thinking (billed as output)."""
    # Read on every Gemini answer and stream chunk: a block without cache, tool or
    # thinking counts (its totals and per-modality details aside) takes no call per count.
    p, c = u.get("promptTokenCount"), u.get("candidatesTokenCount")
    if (
        type(p) is int and type(c) is int and 0 <= p <= MAX_TOKENS and 0 <= c <= MAX_TOKENS
        and "thoughtsTokenCount" not in u and "cachedContentTokenCount" not in u
        and "toolUsePromptTokenCount" not in u
    ):  # fmt: skip
        return Usage(p, c)
    bad: list[str] = []
    thoughts = _given(u, "thoughtsTokenCount", REASONING, bad)
    usage = Usage(
        _read(u, "promptTokenCount", INPUT, bad) + _read(u, "toolUsePromptTokenCount", INPUT, bad),
        _read(u, "candidatesTokenCount", OUTPUT, bad) + (thoughts or 0),
        _read(u, "cachedContentTokenCount", CACHE_READ, bad),
        0,
        thoughts,
    )
    return _named(usage, bad)


def from_responses(u: Any) -> Usage:
    bad: list[str] = []
    details = u.get("input_tokens_details") or {}
    out = u.get("output_tokens_details") or {}
    usage = Usage(
        _read(u, "input_tokens", INPUT, bad),
        _read(u, "output_tokens", OUTPUT, bad),
        _read(details, "cached_tokens", CACHE_READ, bad),
        _read(details, "cache_write_tokens", CACHE_CREATION, bad),
        _given(out, "reasoning_tokens", REASONING, bad),
    )
    return _named(usage, bad)


# ---- what the gateway bills -------------------------------------------------------------


def limit(window: int | None) -> int:
    """The largest count one answer of a model with this context window can report
    (:data:`WINDOWS` windows; :data:`DEFAULT_WINDOW` when the window is not known)."""
    return WINDOWS * (window or DEFAULT_WINDOW)


def plausible(
    u: Usage, most: int, guess: Callable[[], Usage]
) -> tuple[Usage, bool, tuple[str, ...]]:
    """``u`` as the gateway bills it, whether a count of it is the gateway's estimate, and
    the fields the provider cannot have meant (its error, to be said).

    A prompt or output count that is not a count (:attr:`Usage.invalid`) or is over
    ``most`` (:func:`limit`) is a provider error: that count is ``guess()``'s (called only
    then; an invalid output count, at least the count before it), and a prompt's cache
    counts go with it. A prompt of 0 tokens is no count (a
    request always has some; a translated answer says 0 for a count the provider did not
    give): estimated without being an error, and so is the output when it is 0 too. Cache
    reads and writes are clamped to the prompt (together at most all of it), and reasoning
    tokens to the output; an invalid cache count is 0 (the prompt priced as uncached).
    """
    if (
        not u.invalid
        and 0 < u.input <= most
        and u.output <= most
        and u.cache_read + u.cache_creation <= u.input
        and (u.reasoning is None or u.reasoning <= u.output)
    ):
        return u, False, ()  # the usual answer: no copy
    wrong = [f for f in u.invalid if f != REASONING]
    fixed = replace(u, invalid=())
    estimated = bool(wrong)
    bad_input = INPUT in wrong or u.input > most
    bad_output = OUTPUT in wrong or u.output > most
    if bad_input or bad_output or not u.input:
        g = guess()
        if bad_input or not u.input:
            fixed.input, fixed.cache_read, fixed.cache_creation = g.input, 0, 0
            estimated = True
            if bad_input and INPUT not in wrong:
                wrong.append(INPUT)
        if bad_output or not (u.input or u.output):  # no counts at all: no usage
            # an invalid count left the one before it (message_start's): at least that
            fixed.output = g.output if u.output > most else max(g.output, u.output)
            fixed.reasoning = None
            estimated = True
            if bad_output and OUTPUT not in wrong:
                wrong.append(OUTPUT)
    if fixed.cache_read > fixed.input:
        fixed.cache_read = fixed.input
        wrong.append(CACHE_READ)
    if fixed.cache_creation > fixed.input - fixed.cache_read:
        fixed.cache_creation = fixed.input - fixed.cache_read
        wrong.append(CACHE_CREATION)
    if fixed.reasoning is not None and fixed.reasoning > fixed.output:
        fixed.reasoning = fixed.output
    return fixed, estimated or bool(wrong), _names(tuple(wrong))
