"""What the fake model answers (:class:`FakeAnswer`, :class:`FakeToolCall`) and the SSE
:class:`FakeEvent` every stream shape is written as: the input and output types that the
per-API shape modules share.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FakeToolCall:
    """A tool call the fake model makes: arguments are a JSON string."""

    name: str
    arguments: str
    call_id: str


@dataclass(frozen=True)
class FakeAnswer:
    """What the fake model answers to one request.

    ``finish`` uses OpenAI chat names (``stop``, ``length``, ``tool_calls``,
    ``content_filter``); builders translate it for the other APIs. ``prompt_tokens``
    counts every prompt token; ``cache_read`` and ``cache_write`` are the parts of it
    read from and written to the provider's prompt cache (each API reports them its way:
    OpenAI's ``cached_tokens`` inside its total, Anthropic's and Converse's next to the
    uncached rest).
    """

    id: str
    model: str
    text: str
    finish: str
    prompt_tokens: int
    completion_tokens: int
    created: int
    chunks: int = 8
    tool_call: FakeToolCall | None = None
    cache_read: int = 0
    cache_write: int = 0

    @property
    def uncached_tokens(self) -> int:
        """The prompt tokens neither read from the cache nor written to it."""
        return max(self.prompt_tokens - self.cache_read - self.cache_write, 0)

    @property
    def pieces(self) -> list[str]:
        """The content deltas of a stream: the text (or tool arguments) in pieces."""
        source = self.tool_call.arguments if self.tool_call else self.text
        return split_pieces(source, self.chunks)


@dataclass(frozen=True)
class FakeEvent:
    """One SSE event. ``delta`` marks content deltas (what stream faults count)."""

    data: str
    event: str | None = None
    delta: bool = False
    done: bool = False

    def encode(self) -> bytes:
        head = f"event: {self.event}\n" if self.event else ""
        return f"{head}data: {self.data}\n\n".encode()


def dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def split_pieces(text: str, n: int) -> list[str]:
    """``text`` in at most ``n`` near-equal non-empty pieces (none for empty text)."""
    if not text:
        return []
    n = max(1, min(n, len(text)))
    size = math.ceil(len(text) / n)
    return [text[i : i + size] for i in range(0, len(text), size)]
