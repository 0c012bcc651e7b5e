"""Server wait hints and computed backoff waits, on a fixed random source and no clock."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import Category
from gateway.policy.schema import RateLimitBackoff, RetryPolicy, TransientBackoff
from gateway.resilience.backoff import MAX_HINT_S, go_duration, retry_wait, server_hint
from gateway.resilience.failure import Failure

pytestmark = pytest.mark.fast

NOW = 1_750_000_000.0
ALMOST_1 = math.nextafter(1.0, 0.0)
DEFAULT = RetryPolicy()


class FixedRng:
    """A random source that always returns the same draw."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def http_date(at: float) -> str:
    return format_datetime(datetime.fromtimestamp(at, UTC), usegmt=True)


def rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


# ---- server hints --------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({"retry-after-ms": "1500", "retry-after": "7"}, "", 1.5),
        ({"retry-after-ms": "250.5"}, "", 0.2505),
        ({"retry-after-ms": "abc", "retry-after": "7"}, "", 7.0),
        ({"retry-after-ms": "-5", "retry-after": "7"}, "", 7.0),
        ({"retry-after": "2.5"}, "", 2.5),
        ({"retry-after": " 30 "}, "", 30.0),
        ({"retry-after": "0"}, "", 0.0),
        ({"retry-after": http_date(NOW + 120)}, "", 120.0),
        ({"retry-after": "7"}, "Please try again in 20s.", 7.0),
    ],
)  # fmt: skip
def test_header_hints(headers: dict[str, str], body: str, expected: float) -> None:
    """retry-after-ms beats RetryPolicy-After (seconds or HTTP date), which beats the body."""
    assert server_hint(headers, body, NOW) == pytest.approx(expected)


@pytest.mark.parametrize(
    "value",
    ["-1", "nan", "NaN", "inf", "-inf", "1e3", "99999999999", "", "soon", "0x10",
     http_date(NOW - 60), "Wed, 99 Foo 2015 07:28:00 GMT", "1_000"],
)  # fmt: skip
def test_unusable_retry_after_falls_through(value: str) -> None:
    """Negative, NaN, absurd, past or unparsable RetryPolicy-After values are skipped, never 0."""
    assert server_hint({"retry-after": value}, "", NOW) is None
    assert server_hint({"retry-after": value}, "try again in 20s", NOW) == 20.0


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "38s"}', 38.0),
        ('{"retryDelay":"45.837906927s"}', 45.837906927),
        ("Please try again in 20s.", 20.0),
        ("Requested 4351. Please try again in 5.289s. Need more tokens?", 5.289),
        ("tier. Please retry after 37 seconds. Please go here", 37.0),
        ("concurrency: 1, please try again after 1 seconds", 1.0),
        ("Quota exceeded. Please retry in 47.434392449s.", 47.434392449),
        ("Please try again in 6m0s.", 360.0),
        ("Please try again in 1h2m3s.", 3723.0),
        ("Please try again in 12ms.", 0.012),
        ("Please try again in 2 minutes", 120.0),
        ("Please wait 3 seconds before retrying", 3.0),
        ("请在20秒后重试", 20.0),
        ("并发数过高，20秒后重试", 20.0),
        ("请1.5秒后再试", 1.5),
        ("请 2 分钟之后重试", 120.0),
        # the retryDelay field beats the message's own hint
        ('{"message": "Please retry in 47.4s.", "details": [{"retryDelay": "38s"}]}', 38.0),
    ],
)  # fmt: skip
def test_body_hints(body: str, expected: float) -> None:
    """Waits written in the body (Gemini retryDelay, English and Chinese phrases) are found."""
    assert server_hint({}, body, NOW) == pytest.approx(expected)


@pytest.mark.parametrize(
    "body",
    ["Please try again later.", "latency was 1.5s", "请稍后再试", "retry in a moment",
     "try again in 99999999999s", "try again in -5s", "Limit: 3 / min", "20秒"],
)  # fmt: skip
def test_no_body_hint(body: str) -> None:
    """Numbers outside a retry phrase, absurd waits and vague advice are not hints."""
    assert server_hint({}, body, NOW) is None


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, 1.0),
        (
            {"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s",
             "x-ratelimit-remaining-tokens": "0", "x-ratelimit-remaining-requests": "59"},
            360.0,
        ),
        ({"x-ratelimit-reset-requests": "12ms"}, 0.012),
        ({"x-ratelimit-reset-tokens": "1h2m3s"}, 3723.0),
        ({"x-ratelimit-reset-tokens": "2m59.56s"}, 179.56),
        ({"x-ratelimit-reset-requests": "soon"}, None),
        ({"x-ratelimit-reset-requests": "-1s"}, None),
        ({"anthropic-ratelimit-requests-reset": rfc3339(NOW + 30)}, 30.0),
        ({"anthropic-ratelimit-tokens-reset": "2025-06-15T15:07:10+00:00"}, 30.0),
        (
            {"anthropic-ratelimit-requests-reset": rfc3339(NOW + 5),
             "anthropic-ratelimit-output-tokens-reset": rfc3339(NOW + 50),
             "anthropic-ratelimit-output-tokens-remaining": "0"},
            50.0,
        ),
        ({"anthropic-ratelimit-requests-reset": rfc3339(NOW - 30)}, None),
        ({"anthropic-ratelimit-requests-reset": "not a date"}, None),
        ({"anthropic-ratelimit-requests-reset": "2025-08-21T12:40:59"}, None),  # naive = UTC, past
    ],
)  # fmt: skip
def test_reset_headers(headers: dict[str, str], expected: float | None) -> None:
    """Reset headers: Go durations (OpenAI) and RFC 3339 (Anthropic); the exhausted one wins."""
    got = server_hint(headers, "", NOW)
    assert got == (None if expected is None else pytest.approx(expected))


def test_reset_headers_come_last_and_can_be_skipped() -> None:
    """A body hint beats reset headers; reset_headers=False ignores them entirely."""
    headers = {"x-ratelimit-reset-requests": "9s"}
    assert server_hint(headers, "try again in 2s", NOW) == 2.0
    assert server_hint(headers, "", NOW, reset_headers=False) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1s", 1.0), ("6m0s", 360.0), ("12ms", 0.012), ("1h2m3s", 3723.0), ("1.5h", 5400.0),
     ("5", None), ("", None), ("1 s", None), ("s", None)],
)  # fmt: skip
def test_go_duration(value: str, expected: float | None) -> None:
    """Go duration strings parse to seconds; anything else is None."""
    got = go_duration(value)
    assert got == (None if expected is None else pytest.approx(expected))


def test_hint_bound_is_a_week() -> None:
    """A hint of exactly MAX_HINT_S is kept, one second more is garbage."""
    assert server_hint({"retry-after": str(int(MAX_HINT_S))}, "", NOW) == MAX_HINT_S
    assert server_hint({"retry-after": str(int(MAX_HINT_S) + 1)}, "", NOW) is None


# ---- computed waits ------------------------------------------------------------


def waits(failure: Failure, rng: float, retry: RetryPolicy = DEFAULT, n: int = 7) -> list[float]:
    return [retry_wait(failure, i, retry, FixedRng(rng)) for i in range(1, n + 1)]


@pytest.mark.parametrize(
    ("category", "rng", "expected"),
    [
        (Category.server_error, 0.0, [1, 2, 4, 8, 16, 32, 32]),
        (Category.server_error, ALMOST_1, [1.25, 2.5, 5, 10, 20, 32, 32]),
        (Category.server_error, 0.5, [1.125, 2.25, 4.5, 9, 18, 32, 32]),
        (Category.server_overload, 0.0, [1, 2, 4, 8, 16, 32, 32]),
        (Category.timeout, 0.0, [1, 2, 4, 8, 16, 32, 32]),
        (Category.connection, 0.0, [1, 2, 4, 8, 16, 32, 32]),
        (Category.conflict, 0.0, [1, 2, 4, 8, 16, 32, 32]),
    ],
)  # fmt: skip
def test_transient_sequence(category: Category, rng: float, expected: list[float]) -> None:
    """Transient waits double from 1 s to the 32 s cap; jitter adds up to 25 %, still capped."""
    assert waits(Failure(category), rng) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("rng", "expected"),
    [
        (0.0, [8 * math.sqrt(n) for n in range(1, 8)]),
        (ALMOST_1, [8 * math.sqrt(n) + 5 for n in range(1, 8)]),
    ],
)
def test_rate_limit_sequence(rng: float, expected: list[float]) -> None:
    """Rate-limit waits are 8*sqrt(n) plus up to 5 s of jitter."""
    assert waits(Failure(Category.rate_limit), rng) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("n", "rng", "expected"),
    [(1, 0.0, 8.0), (4, 0.0, 16.0), (56, 0.0, 8 * math.sqrt(56)), (57, 0.0, 60.0),
     (49, ALMOST_1, 60.0), (10**6, 0.0, 60.0), (0, 0.0, 8.0), (-3, ALMOST_1, 13.0)],
)  # fmt: skip
def test_rate_limit_clamped(n: int, rng: float, expected: float) -> None:
    """Rate-limit waits stay within [base, cap] = [8, 60]; retry numbers below 1 count as 1."""
    assert retry_wait(Failure(Category.rate_limit), n, DEFAULT, FixedRng(rng)) == pytest.approx(
        expected
    )


@pytest.mark.parametrize(
    ("category", "hint", "rng", "expected"),
    [
        (Category.rate_limit, 10.0, 0.0, 10.0),
        (Category.rate_limit, 10.0, ALMOST_1, 11.0),
        (Category.rate_limit, 2.0, 0.0, 2.0),  # the hint beats the 8 s rate-limit base
        (Category.rate_limit, 290.0, ALMOST_1, 300.0),
        (Category.rate_limit, 1000.0, 0.0, 300.0),
        (Category.rate_limit, 0.0, ALMOST_1, 0.0),
        (Category.server_overload, 120.0, ALMOST_1, 132.0),  # a 503 RetryPolicy-After is honoured too
        (Category.server_error, 0.5, 0.0, 0.5),
    ],
)  # fmt: skip
def test_retry_after_honoured(category: Category, hint: float, rng: float, expected: float) -> None:
    """A server hint is waited out with up to +10 % jitter, capped at 300 s, in any category."""
    failure = Failure(category, retry_after=hint)
    for n in (1, 5, 10**9):
        assert retry_wait(failure, n, DEFAULT, FixedRng(rng)) == pytest.approx(expected)


@pytest.mark.parametrize("hint", [float("nan"), float("inf"), -1.0])
def test_unusable_failure_hint_uses_computed_backoff(hint: float) -> None:
    """A NaN, infinite or negative retry_after on a Failure is ignored."""
    assert (
        retry_wait(Failure(Category.server_error, retry_after=hint), 3, DEFAULT, FixedRng(0)) == 4
    )


def test_policy_numbers_are_used() -> None:
    """Base, cap and jitter come from the route's policy."""
    retry = RetryPolicy(
        transient=TransientBackoff(base=0.5, cap=4.0, jitter=0.0),
        rate_limit=RateLimitBackoff(base=2.0, cap=3.0, jitter=0.0, retry_after_cap=5.0),
    )
    assert waits(Failure(Category.server_error), 0.7, retry, 5) == [0.5, 1, 2, 4, 4]
    assert waits(Failure(Category.rate_limit), 0.7, retry, 3) == pytest.approx([2, math.sqrt(8), 3])
    assert retry_wait(Failure(Category.rate_limit, retry_after=9), 1, retry, FixedRng(0)) == 5


@pytest.mark.parametrize("draw", [float("nan"), -1.0, 2.0, float("inf")])
def test_misbehaving_rng_is_contained(draw: float) -> None:
    """A random source outside [0, 1) still gives waits within their bounds."""
    for category in (Category.server_error, Category.rate_limit):
        for n in (1, 3, 10**12):
            wait = retry_wait(Failure(category), n, DEFAULT, FixedRng(draw))
            assert 1.0 <= wait <= 60.0


def test_huge_retry_numbers() -> None:
    """Astronomical retry numbers neither overflow nor exceed the caps."""
    for n in (10**6, 2**64, 10**400):
        assert retry_wait(Failure(Category.timeout), n, DEFAULT, FixedRng(ALMOST_1)) == 32.0
        assert retry_wait(Failure(Category.rate_limit), n, DEFAULT, FixedRng(0.0)) == 60.0


# ---- properties ----------------------------------------------------------------

_PROPS = settings(max_examples=200, derandomize=True, deadline=None)
_durations = st.floats(min_value=0.0, max_value=1000.0)


@_PROPS
@given(
    n=st.integers(min_value=1, max_value=10**6),
    draw=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
    category=st.sampled_from(list(Category)),
    hint=st.none() | st.floats(min_value=0.0, max_value=MAX_HINT_S),
    rl_base=_durations,
    rl_extra=_durations,
    rl_jitter=_durations,
    tr_base=_durations,
    tr_extra=_durations,
    tr_jitter=st.floats(min_value=0.0, max_value=1.0),
)
def test_every_wait_is_bounded(
    n: int,
    draw: float,
    category: Category,
    hint: float | None,
    rl_base: float,
    rl_extra: float,
    rl_jitter: float,
    tr_base: float,
    tr_extra: float,
    tr_jitter: float,
) -> None:
    """Every wait is finite, >= 0, <= its cap, and never below the hint or base unless capped."""
    rl_cap, tr_cap = rl_base + rl_extra, tr_base + tr_extra  # the schema rejects cap < base
    retry = RetryPolicy(
        rate_limit=RateLimitBackoff(base=rl_base, cap=rl_cap, jitter=rl_jitter),
        transient=TransientBackoff(base=tr_base, cap=tr_cap, jitter=tr_jitter),
    )
    wait = retry_wait(Failure(category, retry_after=hint), n, retry, FixedRng(draw))
    assert math.isfinite(wait) and wait >= 0.0
    if hint is not None:
        cap = retry.rate_limit.retry_after_cap
        assert min(hint, cap) <= wait <= cap
    elif category is Category.rate_limit:
        assert min(rl_base, rl_cap) <= wait <= rl_cap
    else:
        floor = tr_base * 2.0 ** min(n - 1, 1000)
        assert min(floor, tr_cap) * (1 - 1e-12) <= wait <= tr_cap


_HEADER_NAMES = [
    "retry-after", "retry-after-ms", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens",
    "x-ratelimit-remaining-tokens", "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-requests-remaining",
]  # fmt: skip


@_PROPS
@given(
    headers=st.dictionaries(
        st.sampled_from(_HEADER_NAMES),
        st.text(max_size=30)
        | st.floats(allow_nan=True, allow_infinity=True).map(str)
        | st.integers(-(10**12), 10**12).map(str),
    ),
    body=st.text(max_size=80) | st.builds("try again in {}s".format, st.floats()),
    n=st.integers(min_value=1, max_value=10**6),
    draw=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_any_header_value_gives_a_sane_wait(
    headers: dict[str, str], body: str, n: int, draw: float
) -> None:
    """Any header or body text gives no hint or one in [0, a week]; the wait honours it."""
    hint = server_hint(headers, body, NOW)
    assert hint is None or (math.isfinite(hint) and 0.0 <= hint <= MAX_HINT_S)
    wait = retry_wait(Failure(Category.rate_limit, retry_after=hint), n, DEFAULT, FixedRng(draw))
    assert math.isfinite(wait) and 0.0 <= wait <= 300.0
    if hint is not None:
        assert wait >= min(hint, 300.0)
    else:
        assert wait >= 8.0
