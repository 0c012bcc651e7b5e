"""Per deployment, the share of prompt tokens its provider read from its prompt cache over
the last minutes: what ``GET /admin/deployments`` shows (docs/caching.md, "Seeing it").

Counted per minute (of the clock the request's duration is measured with) for the
deployments of models with several, as this process answered them: a request's prompt
tokens, and of them those read from and written to the cache. A minute older than
:data:`MINUTES` is forgotten when its slot is reused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.routing.policyset import Deployed

#: The minutes a share is taken over (the current one included).
MINUTES = 5


class _Minute:
    """One minute's counts of one deployment."""

    __slots__ = ("minute", "prompt", "read", "write")

    def __init__(self, minute: int) -> None:
        self.minute = minute
        self.prompt = 0
        self.read = 0
        self.write = 0


class CacheShare:
    """Prompt tokens and cache reads and writes per (model, deployment), per minute."""

    def __init__(self) -> None:
        self._slots: dict[tuple[str, str], list[_Minute]] = {}
        #: The models counted: those with several deployments (:meth:`follow`).
        self.models: frozenset[str] = frozenset()

    def follow(self, deployments: Mapping[str, Sequence[Deployed]]) -> None:
        """Count the models of ``deployments`` (model -> its deployments) that have
        several, from now on: a request to any other model costs one set lookup. The
        counts of a model or deployment gone from ``deployments`` go with it."""
        self.models = frozenset(m for m, deps in deployments.items() if len(deps) > 1)
        kept = {(m, d.name) for m in self.models for d in deployments[m]}
        for key in [k for k in self._slots if k not in kept]:
            del self._slots[key]

    def add(
        self, model: str, deployment: str, now: float, prompt: int, read: int, write: int
    ) -> None:
        """Count one request answered by ``deployment`` of ``model`` at ``now`` (seconds)."""
        minute = int(now // 60)
        slots = self._slots.get((model, deployment))
        if slots is None:
            slots = self._slots[model, deployment] = [_Minute(-1) for _ in range(MINUTES)]
        m = slots[minute % MINUTES]
        if m.minute != minute:
            m.minute, m.prompt, m.read, m.write = minute, 0, 0, 0
        m.prompt += prompt
        m.read += read
        m.write += write

    def describe(self, model: str, deployment: str, now: float) -> dict[str, Any] | None:
        """The last :data:`MINUTES` minutes of ``deployment``: its prompt tokens, those read
        from and written to the cache, and the share read (None when it answered nothing)."""
        slots = self._slots.get((model, deployment))
        if slots is None:
            return None
        oldest = int(now // 60) - MINUTES + 1
        kept = [m for m in slots if m.minute >= oldest]
        prompt = sum(m.prompt for m in kept)
        if not prompt:
            return None
        read = sum(m.read for m in kept)
        return {
            "minutes": MINUTES,
            "prompt_tokens": prompt,
            "cache_read_tokens": read,
            "cache_write_tokens": sum(m.write for m in kept),
            "cached_share": round(read / prompt, 4),
        }
