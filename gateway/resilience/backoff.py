"""Server wait hints and computed backoff waits (docs/recovery.md, Backoff).

Pure: "now" (wall-clock epoch seconds) and the random source are parameters.

Hint precedence, first usable source wins::

    retry-after-ms            milliseconds, float ok
    retry-after               seconds (float ok) or an HTTP date, relative to now
    a wait in the body        Gemini "retryDelay": "38s"; "try again in 5.289s" / "6m0s";
                              "Please retry after 37 seconds"; "请在20秒后重试"
    rate-limit reset headers  x-ratelimit-reset-{requests,tokens} (Go durations, relative);
                              anthropic-ratelimit-*-reset (RFC 3339, absolute)

A value that is negative, NaN, infinite, over :data:`MAX_HINT_S` or unparsable is
ignored and the next source is tried; it never becomes a wait of 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from gateway.errors import Category
from gateway.policy.schema import RetryPolicy
from gateway.resilience.failure import Failure, Rng

MAX_HINT_S = 7 * 86400.0
"""Hints longer than a week are treated as garbage, not as a wait."""

_MAX_N = 1 << 30  # retry numbers beyond this behave the same (and math.sqrt stays in range)
_MAX_EXP = 1000  # 2.0**1000 is finite; anything past any cap anyway

_NUM = r"\d{1,12}(?:\.\d{1,12})?"
_SECONDS = re.compile(rf"^\s*({_NUM})\s*$")
_GO_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_GO_PART = re.compile(rf"({_NUM})(h|ms|us|µs|ns|m|s)")
_GO_DURATION = re.compile(rf"^\s*(?:{_NUM}(?:h|ms|us|µs|ns|m|s))+\s*$")
_WORD_UNIT = {
    "ms": 1e-3, "msec": 1e-3, "msecs": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "毫秒": 1e-3, "秒": 1.0, "秒钟": 1.0, "分": 60.0, "分钟": 60.0, "小时": 3600.0,
}  # fmt: skip
# A duration inside a retry phrase: Go style ("5.289s", "6m0s", "12ms") or "37 seconds".
_DUR = (
    rf"(?P<go>(?:{_NUM}(?:h|ms|us|µs|ns|m|s))+)(?![a-z])"
    rf"|(?P<n>{_NUM})\s*(?P<u>milliseconds?|msecs?|seconds?|secs?|minutes?|mins?|hours?|hrs?)\b"
)
_BODY_HINTS = (
    re.compile(rf'"retryDelay"\s*:\s*"(?P<go>{_NUM}s)"'),  # google.rpc.RetryInfo
    re.compile(rf"(?:try|retry)\s+(?:again\s+)?(?:in|after)\s+(?:about\s+)?(?:{_DUR})", re.I),
    re.compile(rf"\bwait\s+(?:for\s+)?(?:{_DUR})", re.I),
    re.compile(
        rf"(?P<n>{_NUM})\s*(?P<u>毫秒|秒钟|秒|分钟|分|小时)\s*(?:之后|后)\s*再?(?:重试|再试|尝试|试)"
    ),
)

# (reset header, remaining header, parser kind); a dimension whose remaining is 0 is
# the one that was hit, so its reset is preferred.
_RESET_HEADERS = (
    ("x-ratelimit-reset-requests", "x-ratelimit-remaining-requests", "go"),
    ("x-ratelimit-reset-tokens", "x-ratelimit-remaining-tokens", "go"),
    ("anthropic-ratelimit-requests-reset", "anthropic-ratelimit-requests-remaining", "rfc3339"),
    ("anthropic-ratelimit-tokens-reset", "anthropic-ratelimit-tokens-remaining", "rfc3339"),
    (
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-input-tokens-remaining",
        "rfc3339",
    ),
    (
        "anthropic-ratelimit-output-tokens-reset",
        "anthropic-ratelimit-output-tokens-remaining",
        "rfc3339",
    ),
)


def _usable(seconds: float | None) -> float | None:
    if seconds is None or not math.isfinite(seconds) or not 0.0 <= seconds <= MAX_HINT_S:
        return None
    return seconds


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return value if isinstance(value, str) else None


def _seconds(value: str) -> float | None:
    m = _SECONDS.match(value)
    return float(m.group(1)) if m else None


def go_duration(value: str) -> float | None:
    """``"6m0s"`` -> 360.0, ``"12ms"`` -> 0.012, ``"1h2m3s"`` -> 3723.0; other text -> None."""
    if not _GO_DURATION.match(value):
        return None
    return sum(float(n) * _GO_UNIT[u] for n, u in _GO_PART.findall(value))


def _aware_timestamp(dt: datetime) -> float:
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def _http_date(value: str, now: float) -> float | None:
    try:
        return _aware_timestamp(parsedate_to_datetime(value)) - now
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _rfc3339(value: str, now: float) -> float | None:
    try:
        return _aware_timestamp(datetime.fromisoformat(value.strip())) - now
    except (TypeError, ValueError, OverflowError):
        return None


def _retry_after(value: str, now: float) -> float | None:
    seconds = _seconds(value)
    return _usable(seconds if seconds is not None else _http_date(value, now))


def body_hint(body_text: str) -> float | None:
    """The first usable wait named in an error body, in seconds, or None."""
    for pattern in _BODY_HINTS:
        for m in pattern.finditer(body_text):
            groups = m.groupdict()
            if groups.get("go"):
                seconds = go_duration(groups["go"])
            else:
                seconds = float(groups["n"]) * _WORD_UNIT[groups["u"].lower()]
            if (usable := _usable(seconds)) is not None:
                return usable
    return None


def reset_hint(headers: Mapping[str, str], now: float) -> float | None:
    """The wait until the exhausted rate-limit dimension resets, from reset headers.

    Dimensions reported with 0 remaining are the ones that were hit: the longest of
    their resets is the wait. Without such a report the shortest reset is used (an
    optimistic retry costs one attempt; a pessimistic one costs minutes).
    """
    exhausted: list[float] = []
    others: list[float] = []
    for reset_name, remaining_name, kind in _RESET_HEADERS:
        value = _header(headers, reset_name)
        if value is None:
            continue
        seconds = go_duration(value) if kind == "go" else _rfc3339(value, now)
        if (usable := _usable(seconds)) is None:
            continue
        remaining = _seconds(_header(headers, remaining_name) or "")
        (exhausted if remaining == 0 else others).append(usable)
    if exhausted:
        return max(exhausted)
    return min(others) if others else None


#: A rate-limit dimension with less than this share of its limit left is short of headroom.
HEADROOM_LOW = 0.05


def headroom_reset(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds until the rate-limit dimension a *successful* answer reports as (nearly)
    used up resets: remaining 0, or under :data:`HEADROOM_LOW` of its limit when the
    limit is sent too (``x-ratelimit-limit-*``, ``anthropic-ratelimit-*-limit``). None
    when every dimension has room, or the provider sends no such headers."""
    short: list[float] = []
    for reset_name, remaining_name, kind in _RESET_HEADERS:
        remaining = _seconds(_header(headers, remaining_name) or "")
        if remaining is None:
            continue
        limit_name = (
            remaining_name.replace("remaining", "limit")
            if remaining_name.startswith("x-")
            else remaining_name.removesuffix("remaining") + "limit"
        )
        limit = _seconds(_header(headers, limit_name) or "")
        if remaining > 0 and (limit is None or remaining >= HEADROOM_LOW * limit):
            continue
        value = _header(headers, reset_name)
        if value is None:
            continue
        seconds = go_duration(value) if kind == "go" else _rfc3339(value, now)
        if (usable := _usable(seconds)) is not None:
            short.append(usable)
    return max(short) if short else None


def server_hint(
    headers: Mapping[str, str], body_text: str, now: float, *, reset_headers: bool = True
) -> float | None:
    """The server's wait hint in seconds, or None: the first usable of ``retry-after-ms``,
    ``retry-after``, a wait in the body, the rate-limit reset headers (docs/recovery.md,
    Backoff).

    ``reset_headers=False`` skips the rate-limit reset headers, which providers send
    on every response and which only mean "wait" on a rate limit.
    """
    if (ms := _header(headers, "retry-after-ms")) is not None:
        seconds = _seconds(ms)
        if (usable := _usable(None if seconds is None else seconds / 1000.0)) is not None:
            return usable
    ra = _header(headers, "retry-after")
    if ra is not None and (usable := _retry_after(ra, now)) is not None:
        return usable
    if body_text and (usable := body_hint(body_text)) is not None:
        return usable
    return reset_hint(headers, now) if reset_headers else None


def _unit(value: float) -> float:
    """A random draw forced into [0, 1] (NaN -> 0), whatever the source returned."""
    return min(max(value, 0.0), 1.0) if value == value else 0.0


def _finite(value: float, fallback: float) -> float:
    if math.isfinite(value) and value >= 0.0:
        return value
    return fallback if math.isfinite(fallback) and fallback >= 0.0 else 0.0


def retry_wait(failure: Failure, retry_number: int, retry: RetryPolicy, rng: Rng) -> float:
    """Seconds to wait before retry ``retry_number`` (1 = the first retry).

    A server hint (any category) gets up to ``retry_after_jitter`` added and is capped
    at ``retry_after_cap``; a rate limit without a hint waits
    ``clamp(base*sqrt(n) + U(0, jitter), base, cap)``; everything else waits
    ``min(base * 2**(n-1) * (1 + U(0, jitter)), cap)``. Jitter only ever adds.
    """
    r = _unit(rng.random())
    n = min(max(retry_number, 1), _MAX_N)
    rl = retry.rate_limit
    hint = failure.retry_after
    if hint is not None and math.isfinite(hint) and hint >= 0.0:
        wait = min(hint * (1.0 + rl.retry_after_jitter * r), rl.retry_after_cap)
        return _finite(wait, rl.retry_after_cap)
    if failure.category is Category.rate_limit:
        wait = min(max(rl.base * math.sqrt(n) + r * rl.jitter, rl.base), rl.cap)
        return _finite(wait, rl.cap)
    tr = retry.transient
    grown = tr.base * 2.0 ** min(n - 1, _MAX_EXP)
    wait = min(grown * (1.0 + tr.jitter * r), tr.cap)
    return _finite(wait, tr.cap)
