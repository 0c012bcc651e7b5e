"""The recovery loops' declared seams (gateway/recovery/seams.py): the live path reports
through its own emitter, and ``simulate`` plugs in beside it, never inside it.

``simulate`` passes its timeline recorder as ``Env.events``, the parameter the live
gateway passes :class:`~gateway.observe.events.Events` through. These tests show that
the live path's events never pass through simulate code: the live gateway loads none,
a live request's events call none, and the recorder is not a subclass of the emitter.
(That ``llm-gateway simulate`` prints what it printed is for its own tests:
tests/integration/test_simulate*.py.)
"""

from __future__ import annotations

import random
import subprocess
import sys
import typing
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from gateway.errors import Category
from gateway.formats import CHAT
from gateway.observe.events import Events
from gateway.observe.metrics import Metrics
from gateway.observe.request_log import RequestLog
from gateway.policy.schema import Policy
from gateway.recovery.engine import recover
from gateway.recovery.seams import Env, Outcome, RecoveryEvents, Request
from gateway.resilience.classify import classify_response
from gateway.resilience.decide import Progress, Retry
from gateway.resilience.failure import Failure
from gateway.routing.policyset import Deployed
from gateway.state.memory import MemoryState

# Marked fast test by test: the fresh-interpreter tests below start a subprocess.

ROOT = Path(__file__).resolve().parents[1]
SIMULATE = str(Path("gateway", "simulate"))
LIVE_GATEWAY = """
import asyncio, sys
from pathlib import Path
from gateway.observe.events import Events
from gateway.observe.metrics import Metrics
from gateway.routing.load import load_policy_dir
from gateway.settings import GatewaySettings
from gateway.web.app import create_app

async def main():
    gw = create_app(GatewaySettings(), policies=load_policy_dir(Path("policies")), metrics=Metrics())
    assert type(gw.env.events) is Events, type(gw.env.events)

asyncio.run(main())
loaded = sorted(m for m in sys.modules if m.startswith("gateway.simulate"))
assert not loaded, loaded
"""


def test_the_live_gateway_loads_no_simulate_code() -> None:
    """The gateway's Env reports through the live emitter itself, and serving loads no
    module of gateway/simulate/ (a fresh interpreter: this one has them loaded)."""
    done = subprocess.run(
        [sys.executable, "-c", LIVE_GATEWAY], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.fast
def test_the_recorder_wraps_the_emitter_and_overrides_none_of_it() -> None:
    """simulate's recorder is no subclass of the live emitter (whose class tree is its
    own), and it declares every event of the seam itself."""
    from gateway.simulate.attempter import TimelineRecorder

    assert not issubclass(TimelineRecorder, Events)
    assert [c.__module__ for c in Events.__mro__] == ["gateway.observe.events", "builtins"]
    declared = {n for n in vars(RecoveryEvents) if not n.startswith("_")}
    assert declared and declared <= set(vars(TimelineRecorder))
    assert declared <= set(vars(Events)) | {"upstream_attempt"}


class Clock:
    # not gateway.simulate's VirtualClock: the test below checks that no simulate code runs
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now


class Answers:
    """Model ``a`` (two deployments) fails with 500s; the chain's ``b`` answers."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.todo = {"a": [500] * 6, "b": [200]}

    def deployments(self, model: str) -> tuple[list[Deployed], str]:
        return [Deployed(n, "p", None, model) for n in ("d0", "d1")], "ordered"

    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        status = self.todo[model].pop(0) if self.todo[model] else 200
        if status == 200:
            return Outcome(body=b"{}")
        raw = b'{"error": {"message": "no", "type": "server_error"}}'
        return Outcome(classify_response(status, {}, raw, now=self.clock.wall()), status, raw)

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None:
        self.clock.now += seconds


@pytest.mark.fast
async def test_a_live_requests_events_call_no_simulate_code() -> None:
    """Retries, deployments out, the route's fallback: every event a live request reports
    runs in the live emitter, and no function of gateway/simulate/ is called."""
    clock = Clock()
    events = Events(Metrics())
    env = Env(MemoryState(), events, clock.monotonic, clock.wall, random.Random(0))
    policy = Policy.model_validate(
        {"retry": {"transient": {"base": 1, "jitter": 0}},
         "fallback": {"chain": ["b"], "after_consecutive_server_errors": 2}}
    )  # fmt: skip
    req = Request(CHAT, {"model": "a"}, "a", "route", "team", policy, 1e9)
    log = RequestLog("r", 0.0)
    called: set[tuple[str, str]] = set()  # (file, function)

    def note(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            called.add((frame.f_code.co_filename, frame.f_code.co_name))

    sys.setprofile(note)
    try:
        result = await recover(req, log, env, Answers(clock))
    finally:
        sys.setprofile(None)
    assert result.outcome.failure is None and log.answered_by == "b"
    emitted = {n for f, n in called if f.endswith(str(Path("gateway", "observe", "events.py")))}
    assert {"api_retry", "deployment_attempt", "fallback"} <= emitted
    assert not [(f, n) for f, n in called if SIMULATE in f]


@pytest.mark.fast
def test_the_seam_names_what_the_loops_report() -> None:
    """Every event the live emitter has for a request's recovery is one of the seam's,
    with the same parameters, so the two cannot drift apart."""
    import inspect

    for name in (n for n in vars(RecoveryEvents) if not n.startswith("_")):
        seam = inspect.signature(getattr(RecoveryEvents, name))
        live = inspect.signature(getattr(Events, name))
        assert list(seam.parameters) == list(live.parameters), name
    assert typing.get_type_hints(Env)["events"] is RecoveryEvents
    assert Category.server_error.counts_toward_fallback
