"""The value every recovery decision starts from: what failed, and what the server hinted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gateway.errors import Category


class Rng(Protocol):
    """A random source; ``random.Random`` fits, tests pass a fixed one."""

    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed upstream attempt, classified.

    ``retry_after`` is the server's wait hint in seconds (from retry-after-ms,
    Retry-After, the body or rate-limit reset headers), before jitter and cap.
    ``prompt_tokens`` / ``context_limit`` come from prompt-too-long messages.
    ``message`` is the provider's error message (never prompt content).
    """

    category: Category
    status: int | None = None
    message: str = ""
    code: str | None = None
    retry_after: float | None = None
    prompt_tokens: int | None = None
    context_limit: int | None = None

    @property
    def is_rate_limit(self) -> bool:
        return self.category is Category.rate_limit
