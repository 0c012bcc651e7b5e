"""A provider's prompt cache, as the fake providers model it: prefixes of a request, kept
per deployment for a few minutes, reported as tokens read and written.

A request is reduced to *blocks* (:mod:`gateway.testing.cache_blocks`): each a stable key
(its JSON without cache markers), the characters the fake provider counts in it, and
whether it carries a cache marker. The prefix ending at a block is identified by one
digest chained over the keys so far (BLAKE2b); its tokens are the fake provider's rule
over the characters so far, ``ceil(chars / 4)``, so the last prefix's tokens are the
request's prompt tokens as the fake reports them.

:meth:`PromptCache.use` answers ``(read, write)`` in tokens, in one of two modes:

- *explicit* (Anthropic Messages, Bedrock InvokeModel and Converse, Vertex rawPredict):
  only the prefixes ending at a marked block are written. The read is the longest
  prefix cached that ends at one of the :data:`LOOKBACK` (20) block boundaries up to a
  marker (Anthropic looks back that far from each marker, no further); the write is the
  last marker's prefix minus the read, when that prefix has at least ``minimum`` tokens.
  No marker: ``(0, 0)``.
- *automatic* (OpenAI chat and Responses): every prefix of at least ``minimum`` tokens is
  written; the read is the longest prefix cached; the write is always 0 (OpenAI reports
  none).

So ``read + write`` never exceeds the request's prompt tokens. An entry lives ``ttl``
seconds after it was last written or read (Anthropic's ephemeral cache: 5 minutes,
refreshed by each read). Entries are kept per *scope*, one deployment's cache (the fakes
use their API key and model); expired entries are dropped as a scope is used, and a
scope keeps at most ``max_entries`` (the oldest go first), the cache at most
``max_scopes`` scopes. Pure: no I/O, the clock is injected.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

#: Anthropic's smallest cacheable prefix for Claude Sonnet, in tokens.
MINIMUM_TOKENS = 1024
#: Anthropic's ephemeral cache lifetime, in seconds.
TTL_S = 300.0
#: The block boundaries before a marker (itself included) Anthropic looks for a hit at.
LOOKBACK = 20


@dataclass(frozen=True)
class Block:
    """One block of a request's prefix: its stable ``key``, the ``chars`` the fake provider
    counts in it (tool definitions: 0), and whether it carries a cache marker."""

    key: str
    chars: int
    marked: bool = False


@dataclass(frozen=True)
class Prefix:
    """The prefix of a request ending at one block: its digest and tokens."""

    digest: bytes
    tokens: int
    marked: bool


def prefixes(blocks: Sequence[Block]) -> list[Prefix]:
    """The prefix ending at each block, in order."""
    out: list[Prefix] = []
    digest, chars = b"", 0
    for block in blocks:
        digest = hashlib.blake2b(digest + block.key.encode(), digest_size=16).digest()
        chars += block.chars
        out.append(Prefix(digest, math.ceil(chars / 4), block.marked))
    return out


class PromptCache:
    """A provider's prefix cache, per scope (see the module docstring)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        ttl: float = TTL_S,
        minimum: int = MINIMUM_TOKENS,
        *,
        max_entries: int = 4096,
        max_scopes: int = 1024,
    ) -> None:
        self.clock = clock
        self.ttl = ttl
        self.minimum = minimum
        self.max_entries = max_entries
        self.max_scopes = max_scopes
        # scope -> {prefix digest: expiry}, each in the order last written or read
        self._scopes: OrderedDict[Hashable, OrderedDict[bytes, float]] = OrderedDict()

    def use(self, scope: Hashable, blocks: Sequence[Block], explicit: bool) -> tuple[int, int]:
        """Send a request of ``blocks`` through the cache of ``scope``: ``(read, write)``
        tokens, the entries read refreshed and the ones written stored."""
        now = self.clock()
        entries = self._entries(scope, now)
        chain = prefixes(blocks)
        looked = chain
        if explicit:
            marks = [i for i, p in enumerate(chain) if p.marked]
            if not marks:
                return 0, 0
            chain = chain[: marks[-1] + 1]
            near = {j for m in marks for j in range(max(m - LOOKBACK + 1, 0), m + 1)}
            looked = [p for j, p in enumerate(chain) if j in near]
        hit = next((p for p in reversed(looked) if entries.get(p.digest, now) > now), None)
        read = hit.tokens if hit is not None else 0
        stored = [p for p in chain if p.tokens >= self.minimum and (p.marked or not explicit)]
        write = 0
        if explicit and chain[-1].tokens >= self.minimum:
            write = max(chain[-1].tokens - read, 0)
        for p in [hit, *stored] if hit is not None else stored:
            self._keep(entries, p.digest, now)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)
        return read, write

    def clear(self) -> None:
        """Forget every entry of every scope."""
        self._scopes.clear()

    def __len__(self) -> int:
        """The entries held, expired ones not yet dropped included."""
        return sum(len(e) for e in self._scopes.values())

    def _entries(self, scope: Hashable, now: float) -> OrderedDict[bytes, float]:
        """The live entries of ``scope`` (expired ones dropped), the scope made recent."""
        entries = self._scopes.pop(scope, None)
        if entries is None:
            entries = OrderedDict()
        while entries and next(iter(entries.values())) <= now:
            entries.popitem(last=False)
        self._scopes[scope] = entries
        while len(self._scopes) > self.max_scopes:
            self._scopes.popitem(last=False)
        return entries

    def _keep(self, entries: OrderedDict[bytes, float], digest: bytes, now: float) -> None:
        entries[digest] = now + self.ttl
        entries.move_to_end(digest)


__all__ = ["MINIMUM_TOKENS", "TTL_S", "Block", "Prefix", "PromptCache", "prefixes"]
