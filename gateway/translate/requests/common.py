"""What the request readers and writers share: stop sequences and reasoning effort."""

from __future__ import annotations

from typing import Any

#: Anthropic thinking budget for an OpenAI reasoning effort (budget_tokens >= 1024).
BUDGET_OF_EFFORT = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768}
#: Anthropic ``output_config.effort`` (low, medium, high, xhigh, max) for an OpenAI effort
#: (none, minimal, low, medium, high, xhigh), where the names differ; and back.
EFFORT_TO_ANTHROPIC = {"minimal": "low"}
EFFORT_FROM_ANTHROPIC = {"max": "xhigh"}


def effort_of_budget(budget: int) -> str:
    """The OpenAI reasoning effort for an Anthropic thinking budget (the inverse of
    :data:`BUDGET_OF_EFFORT` on its values: under 4096 low, under 16384 medium, else high)."""
    if budget < 4096:
        return "low"
    if budget < 16384:
        return "medium"
    return "high"


def read_stop(value: Any) -> tuple[list[str] | None, bool]:
    """Chat ``stop`` (a string or a list) -> (list, was a string)."""
    if value is None:
        return None, False
    if isinstance(value, str):
        return [value], True
    return list(value), False
