"""Which session a request belongs to, and where a session's turns go (docs/caching.md).

An agent resends its whole transcript every turn; the provider's prompt cache makes the
repeated prefix cheap, but only on the deployment that cached it. A model whose
deployments are chosen by ``balance: weighted`` with ``affinity: session`` (the default)
keeps each session on one deployment by rendezvous hashing: every deployment gets a score
from the session and its own name, the highest score that can serve now wins. The
session's team-scoped digest falls in one of :data:`BUCKETS` buckets, and each bucket's
ranking is computed once per set of deployments: a choice costs a lookup. Every
replica and worker computes the same ranking with no shared state; over many sessions the
load follows the weights; a deployment that cannot serve is skipped and the session goes
to the next one of its own ranking, and back to the first once it serves again.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

#: Where a client names its session, in the order they are looked at: the gateway's own
#: header, Claude Code's, the Codex CLI's (then the body's ``prompt_cache_key``).
SESSION_HEADERS = ("x-gateway-session", "x-claude-code-session-id", "session-id")
#: The body fields of a conversation's stable start, besides its entries up to the first
#: user turn: the system text (Messages, Converse), the instructions (Responses), tools.
_START_FIELDS = ("system", "instructions", "tools", "toolConfig")
#: At most this many characters of a named session are read (a longer one is cut).
MAX_SESSION = 256
#: Sessions fall in this many buckets; each bucket's ranking of a model's deployments is
#: computed once, so a choice is a lookup. The buckets' first choices follow the weights
#: to within about 7 % of each weight's share (measured for 1:1:1, 1:1:2 and 1:3).
BUCKETS = 1024
#: At most this many sets of deployments keep their rankings (policy reloads that change
#: a model's deployments or weights make new sets; the oldest are dropped).
MAX_TABLES = 64
_BUCKET_SHIFT = 32 - 10
_MASK = (1 << 64) - 1


def named(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The session the client named (:data:`SESSION_HEADERS`, then the body's
    ``prompt_cache_key``), or None."""
    for name in SESSION_HEADERS:
        if name in headers and (value := headers[name]):
            return value[:MAX_SESSION]
    key = body.get("prompt_cache_key")
    return key[:MAX_SESSION] if isinstance(key, str) and key else None


def digest(team: str, session: str) -> int:
    """The session ``session`` of ``team`` as a 32-bit number (CRC-32: the same on every
    platform and replica): one team's value never lands where another team's does (the
    team is hashed with it)."""
    return zlib.crc32(f"{team}\x00{session}".encode("utf-8", "surrogatepass"))


def conversation(body: Mapping[str, Any], entries_key: str) -> str:
    """A session for a request that names none: a digest of its conversation's stable
    start (the system text, the instructions, the tools, and the entries up to and with
    the first user turn), which the turns of one conversation share."""
    entries = body.get(entries_key)
    head: list[Any] = []
    if isinstance(entries, list):
        for entry in entries:
            head.append(entry)
            if isinstance(entry, dict) and entry.get("role") == "user":
                break
    elif isinstance(entries, str):  # a Responses input given as one text
        head.append(entries)
    start = [body.get(name) for name in _START_FIELDS]
    try:
        data = orjson.dumps([start, head])
    except TypeError:  # pragma: no cover - a decoded body always encodes
        data = repr([start, head]).encode()
    return f"conversation:{zlib.crc32(data):08x}:{len(data)}"


def label(session: int) -> str:
    """What the access log says of a session: its 8 hex digits, never the value."""
    return f"{session:08x}"


def bucket(session: int) -> int:
    """The session's bucket: the top bits of its multiplicative hash, one of
    :data:`BUCKETS`."""
    return ((session * 0x9E3779B1) & 0xFFFFFFFF) >> _BUCKET_SHIFT


def ranked(session: int, names: Sequence[str], weights: Sequence[float]) -> tuple[int, ...]:
    """The deployments (their indexes) in the session's order of preference."""
    key = (tuple(names), tuple(weights))
    table = _tables.get(key)
    if table is None:
        if len(_tables) >= MAX_TABLES:  # reloads made new sets: drop the oldest
            del _tables[next(iter(_tables))]
        table = _tables[key] = _table(key[0], key[1])
    return table[bucket(session)]


def pick(candidates: Sequence[int], session: int, names: Sequence[str],
         weights: Sequence[float]) -> int:  # fmt: skip
    """The candidate the session ranks highest (``candidates``: indexes into ``names``)."""
    for i in ranked(session, names, weights):
        if i in candidates:
            return i
    return candidates[0]  # pragma: no cover - every index is ranked


def _table(names: tuple[str, ...], weights: tuple[float, ...]) -> tuple[tuple[int, ...], ...]:
    """Every bucket's ranking of the deployments: rendezvous (highest random weight) of
    the bucket and each deployment's name, computed once per set of deployments (a few
    milliseconds) so that a request's choice is a lookup."""
    salts = [salt(n) for n in names]
    out = []
    for b in range(BUCKETS):
        scores = [_score(b, s, w) for s, w in zip(salts, weights, strict=True)]
        out.append(tuple(sorted(range(len(names)), key=lambda i: (-scores[i], i))))
    return tuple(out)


def salt(name: str) -> int:
    """A deployment's own 64-bit number, from its name (the same on every replica)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def _mix(x: int) -> int:
    """A 64-bit mix (splitmix64's finalizer): every bit of the input moves every bit."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _score(b: int, salt_: int, weight: float) -> float:
    """The rendezvous score of a deployment for a bucket: the highest wins. Weighted as
    ``-weight / ln(u)`` with ``u`` uniform in (0, 1): a deployment of twice the weight
    wins twice as many buckets."""
    if weight <= 0:
        return -math.inf
    u = (_mix(_mix(b) ^ salt_) + 0.5) / 18446744073709551616.0  # 2**64
    return -weight / math.log(u)


#: Each set of deployments' rankings, by bucket (a few per policy set).
_tables: dict[tuple[tuple[str, ...], tuple[float, ...]], tuple[tuple[int, ...], ...]] = {}
