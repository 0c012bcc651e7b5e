"""The summary call's decisions (gateway/resilience/summary_call.py) and the decision when
every deployment is out (decide.every_deployment_out), on a virtual clock."""

from __future__ import annotations

import pytest

from gateway.errors import Category
from gateway.resilience import deployments as dep
from gateway.resilience.decide import (
    NO_DEPLOYMENT,
    GiveUp,
    Progress,
    Reroute,
    WaitForDeployment,
    every_deployment_out,
)
from gateway.resilience.deployments import DeploymentState, Pick, Wait
from gateway.resilience.failure import Failure
from gateway.resilience.summary_call import TIMEOUT, Ask, NoSummary, next_try

pytestmark = pytest.mark.fast

AUTH = Failure(Category.auth, 401)
S500 = Failure(Category.server_error, 500)
BAD = Failure(Category.invalid_request, 400)
UP = DeploymentState()
RULES = dep.Rules(quota_cooldown=3600.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def random(self) -> float:
        return 0.0


def play(
    states: list[DeploymentState], answers: dict[int, list[Failure | None]], *, timeout: float
) -> tuple[list[int], str, list[DeploymentState]]:
    """The summary call as the engine makes it, every try taking one second of the clock:
    the deployments tried, how it ended (``ok`` or the NoSummary's error), the states after."""
    clock = Clock()
    deadline = clock.now + timeout
    tried: list[int] = []
    last: Failure | None = None
    failed = 0
    while True:
        pick = dep.choose(states, [1.0] * len(states), "ordered", set(tried), clock.now, clock)
        step = next_try(len(tried), last, failed, pick, deadline - clock.now)
        if isinstance(step, NoSummary):
            return tried, step.error, states
        i = step.pick.index
        tried.append(i)
        clock.now += 1.0
        outcome = answers[i].pop(0)
        states[i], _ = dep.record(states, i, outcome, RULES, clock.now)
        if outcome is None:
            return tried, "ok", states
        last, failed = outcome, i


def test_a_deployment_that_is_out_is_not_asked() -> None:
    """Deployment 0 out for an hour: the summary goes to deployment 1 at once."""
    out = DeploymentState(until=1000.0 + 3600, state=dep.OUT, why="auth")
    assert play([out, UP], {1: [None]}, timeout=30)[:2] == ([1], "ok")


def test_a_refused_key_moves_the_retry_to_the_other_deployment() -> None:
    """A 401 on deployment 0 takes it out; the one retry goes to deployment 1."""
    tried, end, states = play([UP, UP], {0: [AUTH], 1: [None]}, timeout=30)
    assert (tried, end) == ([0, 1], "ok")
    assert states[0].state == dep.OUT and not states[0].serving(1002.0)


def test_a_refused_key_with_no_other_deployment_stops() -> None:
    """One deployment: an auth failure is not retried (a retry cannot help it)."""
    assert play([UP], {0: [AUTH]}, timeout=30)[:2] == ([0], "auth")


def test_a_bad_request_fails_everywhere_and_is_not_retried() -> None:
    """An invalid request is not the deployment's fault: no second deployment is asked."""
    assert play([UP, UP], {0: [BAD], 1: [None]}, timeout=30)[:2] == ([0], "invalid_request")


def test_two_tries_at_most() -> None:
    """Server errors on both deployments: two tries, then the step fails with the last one."""
    answers: dict[int, list[Failure | None]] = {0: [S500], 1: [S500]}
    assert play([UP, UP], answers, timeout=30)[:2] == ([0, 1], "server_error")


def test_the_call_deadline_covers_every_try() -> None:
    """A retry that would start after the call's deadline is not made: the step times out."""
    assert play([UP], {0: [S500, None]}, timeout=1.0)[:2] == ([0], TIMEOUT)


def test_every_deployment_out_stops_without_a_call() -> None:
    """Every deployment out: no try, ``no_deployment``; after a failure, that failure."""
    assert next_try(0, None, 0, Wait(5.0, 0), 30.0) == NoSummary(NO_DEPLOYMENT)
    assert next_try(1, S500, 0, Wait(5.0, 0), 30.0) == NoSummary("server_error")
    assert next_try(0, None, 0, Pick(1, probe=True), 30.0) == Ask(Pick(1, probe=True), 30.0)


def test_every_deployment_out_waits_when_the_deadline_allows() -> None:
    """The earliest deployment back before the deadline: wait for it (not a retry)."""
    p = Progress(deadline=100.0, chain=("a", "b"))
    assert every_deployment_out(p, 5.0, 90.0) == WaitForDeployment(5.0)


def test_every_deployment_out_past_the_deadline_moves_on_or_gives_up() -> None:
    """Back only after the deadline: the next model of the chain, else ``no_deployment``;
    a request that left the chain (a larger-context model) gives up."""
    p = Progress(deadline=100.0, chain=("a", "b"))
    assert every_deployment_out(p, 20.0, 90.0) == Reroute("b", NO_DEPLOYMENT, chain_index=1)
    assert every_deployment_out(p, 20.0, 90.0, on_chain=False) == GiveUp(NO_DEPLOYMENT)
    last = Progress(deadline=100.0, chain=("a", "b"), chain_index=1)
    assert every_deployment_out(last, 20.0, 90.0) == GiveUp(NO_DEPLOYMENT)
