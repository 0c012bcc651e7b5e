"""The in-process backend and the backend factory."""

from __future__ import annotations

import pytest

from gateway.policy.schema import Fallback, RetryAllowance, TeamLimits
from gateway.resilience.fallback import FallbackState
from gateway.state import MemoryState, StateBackend, open_state
from gateway.state import memory as memory_mod

pytestmark = pytest.mark.fast

FB = Fallback(chain=("x",))


def test_open_state_memory() -> None:
    """An empty GATEWAY_STATE_URL gives in-process state that satisfies the interface."""
    backend = open_state("")
    assert isinstance(backend, MemoryState)
    assert isinstance(backend, StateBackend)


def test_open_state_rejects_unknown_scheme_without_echoing_the_url() -> None:
    """A URL of an unknown scheme is an error that does not repeat the URL (passwords)."""
    with pytest.raises(ValueError, match="unsupported scheme 'memcached'") as info:
        open_state("memcached://user:hunter2@host:11211")
    assert "hunter2" not in str(info.value)


async def test_snapshot_is_a_copy() -> None:
    """Changing the snapshot does not change the backend."""
    s = MemoryState()
    for t in (1.0, 2.0):
        await s.record("k", FB, 0, "server_error", t, probe=False)
    snap = s.fallback_snapshot()
    snap.clear()
    assert s.fallback_snapshot() == {"k": FallbackState(active=1, since=2.0)}


async def test_default_fallback_states_are_not_kept() -> None:
    """Keys whose state returns to the default are dropped (the dict stays bounded)."""
    s = MemoryState()
    await s.record("k", FB, 0, "server_error", 1.0, probe=False)
    assert "k" in s.fallbacks
    await s.record("k", FB, 0, "ok", 2.0, probe=False)
    assert s.fallbacks == {}
    await s.choose("k2", FB, 3.0)
    assert s.fallbacks == {}


async def test_idle_windows_are_swept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past SWEEP_AT routes or teams, idle windows are dropped before a new one is added."""
    monkeypatch.setattr(memory_mod, "SWEEP_AT", 3)
    s = MemoryState()
    limits = TeamLimits(requests_per_minute=5)
    for i in range(3):
        await s.note_request(f"r{i}", 0.0)
        await s.admit(f"t{i}", limits, 0.0)
    await s.note_request("r-new", 100.0)
    await s.spend_retry("r-new2", RetryAllowance(), 100.0)
    await s.admit("t-new", limits, 100.0)
    assert set(s.allowances) == {"r-new", "r-new2"}
    assert set(s.teams) == {"t-new"}
    await s.close()
