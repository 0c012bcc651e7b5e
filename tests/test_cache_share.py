"""The per-deployment cached share of ``/admin/deployments`` (gateway/observe/cache_share.py):
a window of minutes, models with several deployments only, counts dropped with their
model on a reload."""

from __future__ import annotations

import pytest

from gateway.observe.cache_share import MINUTES, CacheShare
from gateway.routing.policyset import Deployed

pytestmark = pytest.mark.fast


def deployed(*names: str) -> tuple[Deployed, ...]:
    return tuple(Deployed(n, n, None, "m") for n in names)


def test_the_share_is_of_the_last_minutes_only() -> None:
    share = CacheShare()
    share.follow({"agent": deployed("a", "b"), "solo": deployed("x")})
    assert share.models == frozenset({"agent"})
    share.add("agent", "a", 0.0, 1000, 900, 0)
    share.add("agent", "a", 61.0, 1000, 0, 1000)
    seen = share.describe("agent", "a", 61.0)
    assert seen == {"minutes": MINUTES, "prompt_tokens": 2000, "cache_read_tokens": 900,
                    "cache_write_tokens": 1000, "cached_share": 0.45}  # fmt: skip
    # the first minute leaves the window; the second is the only one left
    later = share.describe("agent", "a", 60.0 * MINUTES + 1)
    assert later is not None and later["prompt_tokens"] == 1000
    assert later["cached_share"] == 0.0
    # a minute's slot reused MINUTES minutes on starts from nothing
    share.add("agent", "a", 60.0 * MINUTES, 500, 500, 0)
    again = share.describe("agent", "a", 60.0 * MINUTES)
    assert again is not None and again["prompt_tokens"] == 1500
    assert share.describe("agent", "b", 61.0) is None
    assert share.describe("agent", "a", 60.0 * (2 * MINUTES + 1)) is None


def test_a_reload_drops_the_counts_of_what_is_gone() -> None:
    share = CacheShare()
    share.follow({"agent": deployed("a", "b")})
    share.add("agent", "a", 0.0, 100, 50, 0)
    share.add("agent", "b", 0.0, 100, 50, 0)
    share.follow({"agent": deployed("a", "c")})
    assert share.describe("agent", "a", 0.0) is not None
    assert share.describe("agent", "b", 0.0) is None
    share.follow({"agent": deployed("a")})  # one deployment left: not counted
    assert share.models == frozenset()
    assert share.describe("agent", "a", 0.0) is None
