"""A wait that ends at the deadline leaves no time for the attempt it waits for.

The attempt after a wait is made only while time is left (the attempter refuses one
with the deadline reached: ``deadline_passed``), so a wait ending exactly at the
deadline is one past it: the request moves to the next model at once, or gives up,
as it does for a wait ending after the deadline. Table-tested at the boundary (a hint
just under, equal to, just over the time left), with and without a fallback, in the
pure decision function and in the engine loop on a virtual clock (no sleeping).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from gateway.errors import Category
from gateway.formats import CHAT
from gateway.observe.events import Events
from gateway.observe.metrics import Metrics
from gateway.observe.request_log import RequestLog
from gateway.policy.schema import Policy
from gateway.recovery.admission import past_deadline
from gateway.recovery.engine import recover
from gateway.recovery.seams import Env, Outcome, Request
from gateway.resilience.decide import (
    GiveUp,
    Progress,
    Reroute,
    Retry,
    WaitForDeployment,
    decide,
    every_deployment_out,
)
from gateway.resilience.failure import Failure
from gateway.routing.policyset import Deployed
from gateway.simulate import Scenario, VirtualClock, simulate
from gateway.state.memory import MemoryState

pytestmark = pytest.mark.fast

TOTAL = 30.0
NO_JITTER = Policy.model_validate(
    {"retry": {"rate_limit": {"retry_after_jitter": 0}}, "turn_retry": {"max": 0},
     "timeouts": {"total": TOTAL}}
)  # fmt: skip
TURN = Policy.model_validate(
    {"retry": {"max_retries": 0}, "turn_retry": {"on": ["server_error"], "wait": TOTAL}}
)
UNDER, EQUAL, OVER = TOTAL - 0.01, TOTAL, TOTAL + 0.01


class Zero:
    def random(self) -> float:
        return 0.0


def rate_limited(seconds: float) -> Failure:
    return Failure(Category.rate_limit, 429, "slow down", retry_after=seconds)


@pytest.mark.parametrize(
    ("hint", "chain", "expected"),
    [
        (UNDER, ("a",), Retry(UNDER, 1)),
        (EQUAL, ("a",), GiveUp("deadline")),
        (OVER, ("a",), GiveUp("deadline")),
        (UNDER, ("a", "b"), Retry(UNDER, 1)),
        (EQUAL, ("a", "b"), Reroute("b", "wait_past_deadline", chain_index=1)),
        (OVER, ("a", "b"), Reroute("b", "wait_past_deadline", chain_index=1)),
    ],
)
def test_decide_wait_that_ends_at_the_deadline(
    hint: float, chain: tuple[str, ...], expected: object
) -> None:
    p = Progress(deadline=TOTAL, chain=chain)
    assert decide(p, rate_limited(hint), NO_JITTER, 0.0, Zero()) == expected


@pytest.mark.parametrize(
    ("now", "expected"),
    [(-0.01, Retry(TOTAL, 1, turn=True)), (0.0, GiveUp("deadline")), (0.01, GiveUp("deadline"))],
)
def test_turn_retry_wait_that_ends_at_the_deadline(now: float, expected: object) -> None:
    f = Failure(Category.server_error, 500, "boom")
    assert decide(Progress(deadline=TOTAL, chain=("a",)), f, TURN, now, Zero()) == expected


@pytest.mark.parametrize(
    ("sibling", "expected"),
    [(UNDER, Retry(UNDER, 1, sibling=True)), (EQUAL, GiveUp("deadline"))],
)
def test_sibling_wait_that_ends_at_the_deadline(sibling: float, expected: object) -> None:
    p = Progress(deadline=TOTAL, chain=("a",))
    d = decide(p, rate_limited(100.0), NO_JITTER, 0.0, Zero(), sibling=sibling)
    assert d == expected


@pytest.mark.parametrize(
    ("seconds", "chain", "expected"),
    [
        (UNDER, ("a",), WaitForDeployment(UNDER)),
        (EQUAL, ("a",), GiveUp("no_deployment")),
        (EQUAL, ("a", "b"), Reroute("b", "no_deployment", chain_index=1)),
        (OVER, ("a", "b"), Reroute("b", "no_deployment", chain_index=1)),
    ],
)
def test_deployment_wait_that_ends_at_the_deadline(
    seconds: float, chain: tuple[str, ...], expected: object
) -> None:
    p = Progress(deadline=TOTAL, chain=chain)
    assert every_deployment_out(p, seconds, 0.0) == expected


class Scripted:
    """Each model answers from its own list (a Retry-After hint for a 429, or 500),
    then 200; an attempt with no time left is not made, as the live attempter's."""

    def __init__(self, clock: VirtualClock, deadline: float, **scripts: list[Any]) -> None:
        self.clock, self.deadline = clock, deadline
        self.scripts = {m: list(s) for m, s in scripts.items()}
        self.calls: list[tuple[str, float]] = []

    def deployments(self, model: str) -> tuple[list[Deployed], str]:
        return [Deployed(model, "p", None, model)], "ordered"

    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        await asyncio.sleep(0)
        if self.deadline - self.clock.now <= 0:
            return Outcome(past_deadline())
        self.calls.append((model, self.clock.now))
        script = self.scripts.get(model, [])
        step = script.pop(0) if script else 200
        if step == 200:
            return Outcome(body=b"{}")
        if step == 500:
            return Outcome(Failure(Category.server_error, 500, "boom"), 500)
        return Outcome(rate_limited(step), 429)

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None:
        self.clock.now += seconds


@pytest.mark.parametrize(
    ("hint", "fallback", "answered_by", "calls"),
    [
        (UNDER, False, "a", [("a", 0.0), ("a", UNDER)]),
        (EQUAL, False, None, [("a", 0.0)]),
        (OVER, False, None, [("a", 0.0)]),
        (UNDER, True, "a", [("a", 0.0), ("a", UNDER)]),
        (EQUAL, True, "b", [("a", 0.0), ("b", 0.0)]),
        (OVER, True, "b", [("a", 0.0), ("b", 0.0)]),
    ],
)
async def test_engine_wait_that_ends_at_the_deadline(
    hint: float, fallback: bool, answered_by: str | None, calls: list[tuple[str, float]]
) -> None:
    """The engine loop on a virtual clock: a 429 whose hint is just under, equal to or
    just over the time left; the first waits and answers, the others move to the
    fallback at once (with one) or give up at once with the 429 (without)."""
    clock = VirtualClock()
    env = Env(MemoryState(), Events(Metrics()), clock.monotonic, clock.wall, random.Random(0))
    chain = {"fallback": {"chain": ["b"]}} if fallback else {}
    policy = NO_JITTER.model_validate({**NO_JITTER.model_dump(), **chain})
    req = Request(CHAT, {"model": "a"}, "a", "route", "team", policy, TOTAL)  # deadline
    att = Scripted(clock, TOTAL, a=[hint])
    result = await recover(req, RequestLog("r", 0.0), env, att)
    assert att.calls == calls
    if answered_by is None:
        assert result.reason == "deadline" and result.outcome.status == 429
    else:
        assert result.outcome.failure is None and result.progress.model == answered_by


async def test_simulate_falls_back_when_the_hint_is_the_time_left() -> None:
    """``simulate`` on a 30 s deadline, a 429 with Retry-After 30 and a fallback: the
    fallback answers at once (it used to wait 30 s, then find no time for either model)."""
    policy = NO_JITTER.model_validate({**NO_JITTER.model_dump(), "fallback": {"chain": ["b"]}})
    sim = await simulate(Scenario(policy, "r", "t", "a", "429:ra=30,500,500,200", 0))
    assert "retry in 30.00s" not in sim.timeline
    assert "deadline_passed" not in sim.timeline
    assert "fallback -> b" in sim.timeline
    assert "answered after 4 attempt(s)" in sim.timeline
    assert sim.models == ["a", "b", "b", "b"]
