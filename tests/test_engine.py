"""The engine loop on a virtual clock: fallback activation, stickiness, cooldown and probes.

A scripted attempter answers per model; waits advance a virtual clock; the state is the
real in-process backend. No sockets, no real sleeping.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from gateway.formats import CHAT
from gateway.observe.events import Events
from gateway.observe.metrics import Metrics
from gateway.observe.request_log import RequestLog
from gateway.policy.schema import Policy
from gateway.recovery.engine import recover
from gateway.recovery.seams import Env, Outcome, Request
from gateway.resilience.classify import classify_response
from gateway.resilience.decide import Progress, Retry
from gateway.resilience.failure import Failure
from gateway.routing.policyset import Deployed
from gateway.simulate import VirtualClock
from gateway.state.memory import MemoryState

pytestmark = pytest.mark.fast

BODY = b'{"error": {"message": "boom", "type": "server_error"}}'


class PerModel:
    """Each model answers from its own list of statuses (then 200)."""

    def __init__(self, clock: VirtualClock, **scripts: list[int]) -> None:
        self.clock = clock
        self.scripts = {m: list(s) for m, s in scripts.items()}
        self.calls: list[str] = []

    def deployments(self, model: str) -> tuple[list[Deployed], str]:
        return [Deployed(model, "p", None, model)], "ordered"

    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        self.calls.append(model)
        await asyncio.sleep(0)  # let concurrent requests interleave
        script = self.scripts.get(model, [])
        status = script.pop(0) if script else 200
        if status == 200:
            return Outcome(body=b"{}")
        f = classify_response(status, {}, BODY, now=self.clock.wall())
        return Outcome(f, status, BODY)

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None:
        self.clock.now += seconds


POLICY = Policy.model_validate(
    {"retry": {"max_retries": 5, "transient": {"base": 1, "jitter": 0}},
     "turn_retry": {"max": 0},
     "fallback": {"chain": ["b", "c"], "after_consecutive_server_errors": 2, "cooldown": 60}}
)  # fmt: skip


def setup() -> tuple[VirtualClock, Env]:
    clock = VirtualClock()
    env = Env(MemoryState(), Events(Metrics()), clock.monotonic, clock.wall, random.Random(0))
    return clock, env


async def run(env: Env, att: PerModel, model: str = "a") -> str:
    req = Request(CHAT, {"model": model}, model, "route", "team", POLICY, 1e9)
    log = RequestLog("r", 0.0)
    result = await recover(req, log, env, att)
    assert result.outcome.failure is None
    return log.answered_by


async def test_activation_stickiness_cooldown_probe() -> None:
    """2 failures move the route to b; b serves until the cooldown; a probe restores a."""
    clock, env = setup()
    att = PerModel(clock, a=[500, 500])
    assert await run(env, att) == "b"
    assert att.calls == ["a", "a", "b"]
    clock.now += 30
    att.calls.clear()
    assert await run(env, att) == "b"  # sticky during the cooldown
    assert att.calls == ["b"]
    clock.now += 31
    att.calls.clear()
    assert await run(env, att) == "a"  # the probe succeeds
    assert att.calls == ["a"]
    att.calls.clear()
    assert await run(env, att) == "a"


async def test_probe_failure_restarts_cooldown() -> None:
    """A failed probe goes back to the fallback and the cooldown starts again."""
    clock, env = setup()
    att = PerModel(clock, a=[500, 500, 500])
    await run(env, att)
    clock.now += 61
    att.calls.clear()
    assert await run(env, att) == "b"
    assert att.calls == ["a", "b"]
    clock.now += 59
    att.calls.clear()
    assert await run(env, att) == "b"
    assert att.calls == ["b"]


async def test_chain_of_three() -> None:
    """When b fails twice too, the route walks on to c."""
    clock, env = setup()
    att = PerModel(clock, a=[500, 500], b=[503, 503])
    assert await run(env, att) == "c"
    assert att.calls == ["a", "a", "b", "b", "c"]
    att.calls.clear()
    assert await run(env, att) == "c"


async def test_concurrent_requests_during_activation() -> None:
    """Requests in flight when the route moves end on the fallback; no model is hammered."""
    clock, env = setup()
    att = PerModel(clock, a=[500] * 6)
    answered = await asyncio.gather(*(run(env, att) for _ in range(3)))
    assert set(answered) == {"b"}
    assert att.calls.count("a") <= 4  # at most each request's first try plus the streak
    att.calls.clear()
    assert await run(env, att) == "b"
