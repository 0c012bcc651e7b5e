"""Token counts, neutral between the formats (``gateway/translate/usage.py`` reads and
writes each format's own)."""

from __future__ import annotations

from dataclasses import dataclass


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
