"""Fallback state transitions on a virtual clock (gateway.resilience.fallback)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.policy.schema import Fallback
from gateway.resilience.fallback import (
    INITIAL,
    PROBE_LEASE_MIN,
    Activated,
    Choice,
    FallbackState,
    Follow,
    Recovered,
    choose,
    model_at,
    next_index,
    probe_lease,
    record,
)

pytestmark = pytest.mark.fast

FB = Fallback(chain=("fb-1",), after_consecutive_server_errors=2, cooldown=60.0)
FB3 = Fallback(chain=("fb-1", "fb-2", "fb-3"), after_consecutive_server_errors=2, cooldown=60.0)


def fail(state: FallbackState, fb: Fallback, index: int, now: float, n: int = 1) -> FallbackState:
    for _ in range(n):
        state, _ = record(state, fb, index, "server_error", now, probe=False)
    return state


def activated(fb: Fallback = FB, now: float = 100.0) -> FallbackState:
    return fail(INITIAL, fb, 0, now, fb.after_consecutive_server_errors)


def test_primary_is_chosen_initially() -> None:
    """With no failures every request starts on the primary, and no state changes."""
    assert choose(INITIAL, FB, 0.0) == (INITIAL, Choice(0))


def test_activation_at_threshold() -> None:
    """Two consecutive server errors move the route to chain[0]."""
    s1, t1 = record(INITIAL, FB, 0, "server_error", 10.0, probe=False)
    assert t1 is None and s1.streak == 1 and s1.active == 0
    s2, t2 = record(s1, FB, 0, "server_error", 11.0, probe=False)
    assert t2 == Activated(0, 1, "consecutive_server_errors")
    assert s2 == FallbackState(active=1, streak=0, since=11.0, probe_until=0.0)


def test_threshold_is_configurable() -> None:
    """after_consecutive_server_errors=3 needs a third failure."""
    fb = Fallback(chain=("x",), after_consecutive_server_errors=3)
    s = fail(INITIAL, fb, 0, 1.0, 2)
    assert s.active == 0 and s.streak == 2
    assert record(s, fb, 0, "server_error", 2.0, probe=False)[1] == Activated(0, 1)


def test_stickiness() -> None:
    """Once activated, new requests start on the fallback until the cooldown passes."""
    s = activated(now=100.0)
    for now in (100.0, 120.0, 159.9):
        s, c = choose(s, FB, now)
        assert c == Choice(1)


def test_success_resets_streak() -> None:
    """A success between two failures means they are not consecutive."""
    s = fail(INITIAL, FB, 0, 1.0)
    s, t = record(s, FB, 0, "ok", 2.0, probe=False)
    assert t is None and s == INITIAL
    s = fail(s, FB, 0, 3.0)
    assert s.active == 0 and s.streak == 1


def test_other_outcomes_do_not_count() -> None:
    """4xx-like outcomes neither count toward the streak nor reset it."""
    s = fail(INITIAL, FB, 0, 1.0)
    s2, t = record(s, FB, 0, "other", 2.0, probe=False)
    assert t is None and s2 == s
    _, t3 = record(s2, FB, 0, "server_error", 3.0, probe=False)
    assert t3 == Activated(0, 1)
    assert record(INITIAL, FB, 0, "other", 1.0, probe=False) == (INITIAL, None)


def test_cooldown_gives_exactly_one_probe() -> None:
    """After the cooldown one request probes the primary; a concurrent one keeps the fallback."""
    s = activated(now=100.0)
    s, first = choose(s, FB, 160.0)
    assert first == Choice(0, probe=True)
    assert s.probe_until == 160.0 + probe_lease(FB)
    s, second = choose(s, FB, 161.0)
    assert second == Choice(1)


def test_probe_lease_bound() -> None:
    """The lease is max(cooldown, 30 s); a probe that never reports is replaced after it."""
    assert probe_lease(Fallback(cooldown=5.0)) == PROBE_LEASE_MIN
    assert probe_lease(Fallback(cooldown=300.0)) == 300.0
    fb = Fallback(chain=("x",), cooldown=5.0)
    s = activated(fb, now=0.0)
    s, c = choose(s, fb, 5.0)
    assert c.probe
    assert choose(s, fb, 34.9)[1] == Choice(1)
    assert choose(s, fb, 35.0)[1] == Choice(0, probe=True)


def test_probe_success_recovers() -> None:
    """A successful probe restores the primary and resets the state."""
    s = activated(now=100.0)
    s, c = choose(s, FB, 160.0)
    s, t = record(s, FB, c.index, "ok", 161.0, probe=c.probe)
    assert t == Recovered(1)
    assert s == INITIAL
    assert choose(s, FB, 162.0)[1] == Choice(0)


def test_probe_failure_restarts_cooldown() -> None:
    """A failed probe keeps the fallback, releases the lease and waits a full cooldown again."""
    s = activated(now=100.0)
    s, c = choose(s, FB, 160.0)
    assert c.probe
    s, t = record(s, FB, 0, "server_error", 165.0, probe=True)
    assert t is None
    assert s.active == 1 and s.since == 165.0 and s.probe_until == 0.0
    assert choose(s, FB, 224.9)[1] == Choice(1)
    assert choose(s, FB, 225.0)[1] == Choice(0, probe=True)


def test_probe_failure_does_not_walk_the_chain() -> None:
    """Failed probes on the primary never move the route past the active fallback."""
    s = activated(FB3, now=0.0)
    for k in range(5):
        s, c = choose(s, FB3, 60.0 * (k + 1) + k)
        assert c.probe
        s, t = record(s, FB3, 0, "server_error", 60.0 * (k + 1) + k, probe=True)
        assert t is None and s.active == 1


def test_inconclusive_probe_releases_the_lease() -> None:
    """A probe ending in a 4xx says nothing: the next request probes again."""
    s = activated(now=100.0)
    s, _ = choose(s, FB, 160.0)
    s, t = record(s, FB, 0, "other", 161.0, probe=True)
    assert t is None and s.active == 1 and s.since == 100.0
    assert choose(s, FB, 162.0)[1] == Choice(0, probe=True)


def test_chain_of_three_walks_on() -> None:
    """A fallback that fails in turn moves the route to the next model of the chain."""
    s = activated(FB3, now=0.0)
    assert s.active == 1
    s1, t1 = record(fail(s, FB3, 1, 1.0), FB3, 1, "server_error", 2.0, probe=False)
    assert t1 == Activated(1, 2) and s1.active == 2 and s1.since == 2.0
    s2, t2 = record(fail(s1, FB3, 2, 3.0), FB3, 2, "server_error", 4.0, probe=False)
    assert t2 == Activated(2, 3) and s2.active == 3


def test_last_model_stays() -> None:
    """Failures on the last model of the chain keep it active; the streak stops growing."""
    s = activated(FB, now=0.0)
    s = fail(s, FB, 1, 1.0, 10)
    assert s.active == 1 and s.streak == FB.after_consecutive_server_errors
    _, t = record(s, FB, 1, "server_error", 2.0, probe=False)
    assert t is None


def test_no_chain_never_activates() -> None:
    """A route without a fallback chain stays on the primary."""
    fb = Fallback()
    s = fail(INITIAL, fb, 0, 1.0, 5)
    assert s.active == 0
    assert choose(s, fb, 1000.0)[1] == Choice(0)


def test_stale_records_are_ignored() -> None:
    """Records on an index other than the active one change nothing (a late failure follows)."""
    s = activated(FB3, now=0.0)
    assert record(s, FB3, 0, "server_error", 1.0, probe=False) == (s, Follow(s.active))
    assert record(s, FB3, 0, "ok", 1.0, probe=False) == (s, None)  # only a probe recovers
    assert record(s, FB3, 2, "server_error", 1.0, probe=False) == (s, None)
    assert record(s, FB3, 9, "server_error", 1.0, probe=False) == (s, None)


def test_probe_record_on_primary_counts_normally() -> None:
    """A probe result arriving when the primary is already active is an ordinary record."""
    s, t = record(INITIAL, FB, 0, "server_error", 1.0, probe=True)
    assert t is None and s.streak == 1


def test_probe_lease_survives_a_chain_walk() -> None:
    """Walking the chain during a live probe keeps that probe's lease."""
    s = activated(FB3, now=0.0)
    s, c = choose(s, FB3, 60.0)
    assert c.probe
    s = fail(s, FB3, 1, 61.0, 2)
    assert s.active == 2 and s.probe_until == 60.0 + probe_lease(FB3)


def test_shortened_chain_resets_to_primary() -> None:
    """A state pointing past a chain shortened by a reload is treated as the primary."""
    s = activated(FB3, now=0.0)
    s = fail(s, FB3, 1, 1.0, 2)
    s = fail(s, FB3, 2, 1.0, 2)
    assert s.active == 3
    assert choose(s, FB, 2.0) == (INITIAL, Choice(0))


def test_next_index_and_model_at() -> None:
    """Index helpers walk the chain and name its models."""
    assert [next_index(FB3, i) for i in range(4)] == [1, 2, 3, None]
    assert next_index(Fallback(), 0) is None
    assert [model_at("p", FB3, i) for i in range(4)] == ["p", "fb-1", "fb-2", "fb-3"]
    with pytest.raises(IndexError):
        model_at("p", FB3, 4)
    with pytest.raises(IndexError):
        model_at("p", FB3, -1)


# ---- properties ---------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("choose"), st.floats(0, 120)),
        st.tuples(
            st.just("record"),
            st.floats(0, 120),
            st.integers(-1, 4),
            st.sampled_from(["ok", "server_error", "other"]),
            st.booleans(),
        ),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    ops=_ops,
    chain_len=st.integers(0, 3),
    threshold=st.integers(1, 3),
    cooldown=st.sampled_from([0.0, 5.0, 40.0, 60.0]),
)
def test_random_sequences_keep_invariants(
    ops: list[tuple[object, ...]], chain_len: int, threshold: int, cooldown: float
) -> None:
    """Any choose/record sequence keeps indexes in the chain and never probes twice per lease."""
    fb = Fallback(
        chain=tuple(f"m{i}" for i in range(chain_len)),
        after_consecutive_server_errors=threshold,
        cooldown=cooldown,
    )
    s = INITIAL
    now = 0.0
    last_probe: float | None = None  # when the live probe was taken, until a probe result
    for op in ops:
        now += float(op[1])  # type: ignore[arg-type]
        if op[0] == "choose":
            s, c = choose(s, fb, now)
            assert 0 <= c.index <= chain_len
            if c.probe:
                assert c.index == 0
                assert last_probe is None or now >= last_probe + probe_lease(fb)
                last_probe = now
        else:
            _, _, index, outcome, probe = op
            s, t = record(s, fb, int(index), str(outcome), now, probe=bool(probe))  # type: ignore[call-overload]
            if probe:
                last_probe = None
            if isinstance(t, Activated):
                assert t.to_index == t.from_index + 1
        assert 0 <= s.active <= chain_len
        assert s.streak <= threshold


def test_probe_choice_names_the_fallback_to_return_to() -> None:
    """A probe's Choice carries the active fallback, where a failed probe's request goes."""
    fb = Fallback(chain=("b", "c"), cooldown=10)
    state = FallbackState(active=2, since=0.0)
    _, choice = choose(state, fb, 11.0)
    assert choice == Choice(0, probe=True)
    assert choice.back_to == 2
