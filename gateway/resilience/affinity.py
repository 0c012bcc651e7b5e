"""Which session a request belongs to, and where a session's turns go (docs/caching.md).

An agent resends its whole transcript every turn; the provider's prompt cache makes the
repeated prefix cheap, but only on the deployment that cached it. A model whose
deployments are chosen by ``balance: weighted`` with ``affinity: session`` (the default)
keeps each session on one deployment by rendezvous hashing: every deployment gets a score
from the session and its own name, the highest score that can serve now wins. Every
replica and worker computes the same ranking with no shared state; over many sessions the
load follows the weights; a deployment that cannot serve is skipped and the session goes
to the next one of its own ranking, and back to the first once it serves again.

Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

import hashlib
import math
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
    """The session ``session`` of ``team`` as a 64-bit number: one team's value never
    lands where another team's does (the team is hashed with it)."""
    data = f"{team}\x00{session}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


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
    return "conversation:" + hashlib.blake2b(data, digest_size=16).hexdigest()


def label(session: int) -> str:
    """What the access log says of a session: 12 hex digits of its digest, never the
    value."""
    return f"{session >> 16:012x}"


def salt(name: str) -> int:
    """A deployment's own 64-bit number, from its name (the same on every replica)."""
    found = _salts.get(name)
    if found is None:
        found = _salts[name] = int.from_bytes(
            hashlib.blake2b(name.encode(), digest_size=8).digest(), "big"
        )
    return found


_salts: dict[str, int] = {}


def _mix(x: int) -> int:
    """A 64-bit mix (splitmix64's finalizer): every bit of the input moves every bit."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def score(session: int, salt_: int, weight: float) -> float:
    """The rendezvous score of a deployment for a session: the highest wins. Weighted as
    ``-weight / ln(u)`` with ``u`` uniform in (0, 1): a deployment of twice the weight
    wins twice as many sessions."""
    if weight <= 0:
        return -math.inf
    u = (_mix(session ^ salt_) + 0.5) / 18446744073709551616.0  # 2**64
    return -weight / math.log(u)


def ranked(session: int, names: Sequence[str], weights: Sequence[float]) -> list[int]:
    """The deployments (their indexes) in the session's order of preference."""
    scores = [score(session, salt(n), w) for n, w in zip(names, weights, strict=True)]
    return sorted(range(len(names)), key=lambda i: (-scores[i], i))


def pick(candidates: Sequence[int], session: int, names: Sequence[str],
         weights: Sequence[float]) -> int:  # fmt: skip
    """The candidate the session ranks highest (``candidates``: indexes into ``names``)."""
    best, best_score = candidates[0], -math.inf
    for i in candidates:
        s = score(session, salt(names[i]), weights[i])
        if s > best_score:
            best, best_score = i, s
    return best
