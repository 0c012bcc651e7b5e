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
    ``message`` is the provider's error message (never prompt content). ``code`` is the
    provider's error code, or one the gateway shows for its own failures. ``stage`` is
    set by the gateway only, never from what a provider sent: where an attempt failed when
    decisions depend on it (``first_byte_timeout``: the model stayed silent;
    ``deadline_passed``: no attempt was made, no time was left, or the deadline ended a
    stream).
    """

    category: Category
    status: int | None = None
    message: str = ""
    code: str | None = None
    retry_after: float | None = None
    prompt_tokens: int | None = None
    context_limit: int | None = None
    stage: str | None = None

    @property
    def is_rate_limit(self) -> bool:
        return self.category is Category.rate_limit
