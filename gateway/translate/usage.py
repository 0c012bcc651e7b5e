"""Token usage between the formats.

OpenAI's ``prompt_tokens`` / ``input_tokens`` count every prompt token, cached ones
included (``cached_tokens`` says how many were read from the cache); Anthropic's
``input_tokens`` counts only the uncached ones, next to ``cache_read_input_tokens``
and ``cache_creation_input_tokens``. The neutral :class:`Usage` keeps OpenAI's total:

    Usage.input        = anth input_tokens + cache_read_input_tokens
                         + cache_creation_input_tokens
                       = chat prompt_tokens = resp input_tokens
    Usage.cache_read   = anth cache_read_input_tokens = OpenAI cached_tokens
    Usage.cache_creation = anth cache_creation_input_tokens = OpenAI cache_write_tokens
    anth input_tokens  = Usage.input - cache_read - cache_creation  (never below 0)
    Usage.output       = chat completion_tokens = resp output_tokens = anth output_tokens
                         (reasoning / thinking tokens included in all three)
    Usage.reasoning    = OpenAI reasoning_tokens = anth output_tokens_details.thinking_tokens
    total_tokens       = input + output

Gemini's ``usageMetadata`` counts as OpenAI does (``promptTokenCount`` with
``cachedContentTokenCount`` inside it) but keeps the thinking apart:
``candidatesTokenCount`` + ``thoughtsTokenCount`` = Usage.output.

Bedrock Converse counts as Anthropic does (``inputTokens`` without
``cacheReadInputTokens`` and ``cacheWriteInputTokens``; ``outputTokens``); it is only read.

OpenAI's ``cached_tokens`` and ``cache_write_tokens`` (``prompt_tokens_details`` /
``input_tokens_details``) are parts of its prompt total; a provider that reports no
cache writes counts as 0 written. A count that is not a whole number from 0 to 2**63-1
(a string, a fraction, a bool, negative, larger) is written as 0 and read as 0 named in
:attr:`Usage.invalid` (:mod:`gateway.formats.usage`), which billing estimates.

References: https://platform.openai.com/docs/api-reference/chat/object (usage),
https://docs.anthropic.com/en/api/messages (usage),
https://platform.openai.com/docs/api-reference/responses/object (usage),
https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_TokenUsage.html.
"""

from __future__ import annotations

from typing import Any

from gateway.formats.usage import (
    Usage,
    from_anthropic,
    from_chat,
    from_converse,
    from_gemini,
    from_responses,
    update_anthropic,
)

__all__ = [
    "from_anthropic",
    "from_chat",
    "from_converse",
    "from_gemini",
    "from_responses",
    "to_anthropic",
    "to_chat",
    "to_gemini",
    "to_responses",
    "update_anthropic",
]


def to_chat(u: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input + u.output,
        "prompt_tokens_details": {
            "cached_tokens": u.cache_read,
            "cache_write_tokens": u.cache_creation,
        },
    }
    if u.reasoning is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": u.reasoning}
    return out


def to_anthropic(u: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "input_tokens": max(u.input - u.cache_read - u.cache_creation, 0),
        "output_tokens": u.output,
        "cache_creation_input_tokens": u.cache_creation,
        "cache_read_input_tokens": u.cache_read,
    }
    if u.reasoning is not None:
        out["output_tokens_details"] = {"thinking_tokens": u.reasoning}
    return out


def to_responses(u: Usage) -> dict[str, Any]:
    return {
        "input_tokens": u.input,
        "input_tokens_details": {
            "cached_tokens": u.cache_read,
            "cache_write_tokens": u.cache_creation,
        },
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning or 0},
        "total_tokens": u.input + u.output,
    }


def to_gemini(u: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "promptTokenCount": u.input,
        "candidatesTokenCount": max(u.output - (u.reasoning or 0), 0),
        "totalTokenCount": u.input + u.output,
    }
    if u.cache_read:
        out["cachedContentTokenCount"] = u.cache_read
    if u.reasoning:
        out["thoughtsTokenCount"] = u.reasoning
    return out
