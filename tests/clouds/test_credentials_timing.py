"""When cloud credentials are fetched again: the pure timing, on a virtual clock."""

from __future__ import annotations

import math

import pytest

from gateway.upstream.refresh import RETRY_CAP, refresh_delay, retry_delay, unusable_at

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("lifetime", "ahead"),
    [(3600.0, 360.0), (600.0, 60.0), (86400.0, 8640.0), (100.0, 50.0), (2.0, 1.0)],
)
def test_a_token_is_refreshed_ahead_of_its_expiry(lifetime: float, ahead: float) -> None:
    """A tenth of the life left ahead, at least a minute, at most half of what is left."""
    assert refresh_delay(1000.0 + lifetime, 1000.0) == pytest.approx(lifetime - ahead)


def test_no_expiry_is_never_refreshed_and_a_past_one_at_once() -> None:
    """Static credentials wait forever; an expired or expiring-now token is fetched now."""
    assert math.isinf(refresh_delay(None, 5.0))
    assert refresh_delay(5.0, 5.0) == 0.0
    assert refresh_delay(4.0, 5.0) == 0.0


def test_a_failed_fetch_is_retried_with_a_doubling_capped_wait() -> None:
    """1, 2, 4, ... seconds up to the cap, when no credential is held."""
    waits = [retry_delay(n, None, 0.0) for n in range(1, 10)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert retry_delay(10_000, None, 0.0) == RETRY_CAP


def test_a_retry_never_waits_past_the_held_token() -> None:
    """While the old token lasts the retry comes no later than its expiry; after, the
    backoff alone."""
    assert retry_delay(6, 103.0, 100.0) == 3.0
    assert retry_delay(1, 103.0, 100.0) == 1.0
    assert retry_delay(3, 99.0, 100.0) == 4.0


def _simulate(lifetime: float, down: tuple[float, float], until: float) -> list[float]:
    """Fetch times of a credential kept fresh on a virtual clock, the token service down
    during ``down``; returns the times no valid token was held, sampled every 0.5 s."""
    now, expires_at, failures = 0.0, lifetime, 0
    gaps: list[float] = []
    sample = 0.0
    while now < until:
        delay = (
            retry_delay(failures, expires_at, now) if failures else refresh_delay(expires_at, now)
        )
        wake = now + delay
        while sample < min(wake, until):
            if sample >= expires_at:
                gaps.append(sample)
            sample += 0.5
        now = wake
        if down[0] <= now < down[1]:
            failures += 1
        else:
            failures, expires_at = 0, now + lifetime
    return gaps


def test_hourly_tokens_stay_valid_for_a_day() -> None:
    """With hourly tokens and a healthy service, a valid token is held at every moment."""
    assert _simulate(3600.0, (0.0, 0.0), 86400.0) == []


def test_an_outage_shorter_than_the_refresh_margin_is_not_seen() -> None:
    """The service down for five minutes around the refresh point: the old token carries
    over, the retries find the service back before it expires."""
    assert _simulate(3600.0, (3200.0, 3500.0), 20000.0) == []


def test_a_longer_outage_is_seen_only_while_it_lasts() -> None:
    """Down for an hour: no token from the old one's expiry until a retry after the
    service is back (within the capped backoff), valid tokens again after."""
    gaps = _simulate(3600.0, (3200.0, 7200.0), 20000.0)
    assert gaps[0] == 3600.0
    assert 7199.5 <= gaps[-1] < 7200.0 + RETRY_CAP
    assert len(gaps) == (gaps[-1] - gaps[0]) / 0.5 + 1  # one stretch, no flicker


@pytest.mark.parametrize(
    ("started", "timeout", "held", "expires_at", "unusable"),
    [
        (100.0, 5.0, False, None, 105.0),  # the first token: the time limit
        (100.0, 0.5, False, 90.0, 100.5),  # nothing held (an expiry is not looked at)
        (100.0, 5.0, True, 130.0, 130.0),  # a refresh: the held token's expiry
        (100.0, 5.0, True, 101.0, 101.0),  # ... also before the time limit
        (100.0, 5.0, True, 99.0, 99.0),  # held but already expired: at once
        (100.0, 5.0, True, None, math.inf),  # one that never expires: never
    ],
)
def test_a_fetch_with_no_answer_leaves_nothing_usable_at(
    started: float, timeout: float, held: bool, expires_at: float | None, unusable: float
) -> None:
    """A first fetch that has not answered makes the credential unusable once it is
    ``timeout`` old; a refresh that has not answered, once the held token expires."""
    assert unusable_at(started, timeout, held, expires_at) == unusable
