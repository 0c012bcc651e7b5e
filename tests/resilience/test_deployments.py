"""The choice of deployment and its state transitions (docs/recovery.md, Deployments), on
plain numbers: a fixed clock value and seeded randomness, no I/O."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gateway.errors import Category
from gateway.policy.schema import Policy
from gateway.resilience import deployments as dep
from gateway.resilience.decide import Progress, Retry, decide
from gateway.resilience.deployments import DeploymentState, Pick, Rules, Wait
from gateway.resilience.failure import Failure

pytestmark = pytest.mark.fast

UP = DeploymentState()
RULES = Rules(retry_after_cap=30.0, quota_cooldown=3600.0, eject_after=2, eject_for=60.0)
RATE = Failure(Category.rate_limit, 429, retry_after=20.0)
S500 = Failure(Category.server_error, 500)


def pick(states: list[DeploymentState], balance: str = "weighted", **kw: object) -> Pick | Wait:
    return dep.choose(
        states,
        kw.get("weights", [1.0] * len(states)),  # type: ignore[arg-type]
        balance,
        kw.get("tried", set()),  # type: ignore[arg-type]
        100.0,
        random.Random(0),
        kw.get("inflight", ()),  # type: ignore[arg-type]
    )


def test_weights_split_choices() -> None:
    rng = random.Random(7)
    counts = Counter(
        dep.choose([UP, UP], [1.0, 3.0], "weighted", set(), 0.0, rng).index  # type: ignore[union-attr]
        for _ in range(4000)
    )
    assert 0.70 < counts[1] / 4000 < 0.80  # 3 of 4


def test_ordered_keeps_to_the_first_serving() -> None:
    assert pick([UP, UP, UP], "ordered") == Pick(0)
    out = DeploymentState(until=130.0, state=dep.COOLDOWN, why="rate_limit")
    assert pick([out, UP, UP], "ordered") == Pick(1)


def test_least_busy_takes_the_fewest_in_flight() -> None:
    assert pick([UP, UP, UP], "least_busy", inflight=[3, 1, 2]) == Pick(1)


def test_a_retry_prefers_a_deployment_not_tried() -> None:
    for _ in range(20):
        assert pick([UP, UP], "weighted", tried={0}) == Pick(1)
    assert pick([UP, UP], "ordered", tried={0, 1}) == Pick(0)  # all tried: any serving one


def test_short_of_headroom_is_avoided_while_another_has_room() -> None:
    short = DeploymentState(short_until=150.0)
    assert pick([short, UP], "ordered") == Pick(1)
    assert pick([short, short], "ordered") == Pick(0)  # still serves when all are short
    assert pick([DeploymentState(short_until=90.0), UP], "ordered") == Pick(0)  # reset passed


def test_every_deployment_out_waits_for_the_earliest() -> None:
    a = DeploymentState(until=130.0, state=dep.COOLDOWN)
    b = DeploymentState(until=112.5, state=dep.COOLDOWN)
    assert pick([a, b]) == Wait(12.5, 1)


def test_rate_limit_cools_down_that_deployment_for_its_hint_capped() -> None:
    new, t = dep.record([UP, UP], 0, RATE, RULES, 100.0)
    assert (new.until, new.state, new.why) == (120.0, dep.COOLDOWN, "rate_limit")
    assert t == dep.Transition(dep.COOLDOWN, "rate_limit", 20.0)
    long = Failure(Category.server_overload, 529, retry_after=500.0)
    new, _ = dep.record([UP, UP], 0, long, RULES, 100.0)
    assert new.until == 130.0  # capped by retry_after_cap


def test_quota_and_auth_take_it_out_for_the_quota_cooldown() -> None:
    for category in (Category.quota_exhausted, Category.auth):
        new, t = dep.record([UP, UP], 1, Failure(category, 403), RULES, 100.0)
        assert (new.until, new.state) == (3700.0, dep.OUT)
        assert t is not None and t.kind == dep.OUT and t.why == category.value


def test_server_errors_eject_after_a_streak_then_a_probe() -> None:
    one, t = dep.record([UP, UP], 0, S500, RULES, 100.0)
    assert (one.streak, one.state, t) == (1, "", None)
    two, t = dep.record([one, UP], 0, S500, RULES, 101.0)
    assert (two.state, two.until) == (dep.EJECTED, 161.0)
    assert t is not None and t.kind == dep.EJECTED
    # after the cooldown the first pick is a probe; a failed probe ejects again at once
    later = dep.choose([two, UP], [1, 1], "ordered", set(), 170.0, random.Random(0))
    assert later == Pick(0, probe=True)
    again, t = dep.record([two, UP], 0, S500, RULES, 170.0, probe=True)
    assert again.state == dep.EJECTED and again.until == 230.0
    back, t = dep.record([two, UP], 0, None, RULES, 170.0, probe=True)
    assert back == DeploymentState(last_error="server_error")
    assert t == dep.Transition("recovered", "server_error")


def test_at_most_max_ejected_percent_are_ejected() -> None:
    ejected = DeploymentState(until=200.0, state=dep.EJECTED, streak=2)
    streak = DeploymentState(streak=1)
    new, t = dep.record([ejected, streak], 1, S500, RULES, 100.0)  # 2 of 2 would be 100 %
    assert (new.state, new.streak, t) == ("", 2, None)
    three = [ejected, streak, UP, UP]  # 2 of 4 = 50 %: allowed
    new, t = dep.record(three, 1, S500, RULES, 100.0)
    assert new.state == dep.EJECTED


def test_a_bad_request_does_not_touch_deployment_health() -> None:
    new, t = dep.record([UP, UP], 0, Failure(Category.invalid_request, 400), RULES, 100.0)
    assert (new.until, new.streak, t) == (0.0, 0, None)
    assert dep.sibling_in([UP, UP], 0, Failure(Category.invalid_request, 400), 100.0) is None


def test_sibling_in_is_the_wait_for_the_earliest_other_deployment() -> None:
    cooling = DeploymentState(until=120.0, state=dep.COOLDOWN)
    assert dep.sibling_in([cooling, UP], 0, RATE, 100.0) == 0.0
    assert dep.sibling_in([cooling, DeploymentState(until=105.0)], 0, RATE, 100.0) == 5.0
    assert dep.sibling_in([UP], 0, RATE, 100.0) is None  # one deployment: no sibling


def test_an_answer_sent_before_a_cooldown_leaves_it_cooling() -> None:
    """A request in flight when its deployment got a 429 answers later: the deployment
    stays in cooldown (no recovery), and only the headroom its headers report is kept."""
    cooling, _ = dep.record([UP, UP], 0, RATE, RULES, 100.0)  # until 120
    new, t = dep.record([cooling, UP], 0, None, RULES, 101.0)
    assert (new, t) == (cooling, None)
    assert pick([new, UP], "ordered") == Pick(1)
    short, t = dep.record([cooling, UP], 0, None, RULES, 101.0, short_for=40.0)
    assert (short.until, short.state, short.short_until, t) == (120.0, dep.COOLDOWN, 141.0, None)
    for out in (DeploymentState(until=3700.0, state=dep.OUT, why="auth"),
                DeploymentState(until=160.0, state=dep.EJECTED, why="server_error", streak=2)):  # fmt: skip
        assert dep.record([out, UP], 0, None, RULES, 101.0) == (out, None)
    # once the cooldown is over, an answer is a recovery
    back, t = dep.record([cooling, UP], 0, None, RULES, 121.0)
    assert back == DeploymentState(last_error="rate_limit")
    assert t == dep.Transition("recovered", "rate_limit")


def test_sibling_in_backs_off_as_usual_when_only_the_failed_one_serves() -> None:
    """A first server error leaves its deployment in service: with every sibling cooling
    down there is no sibling to wait for (None: the usual backoff), never their cooldown."""
    one, _ = dep.record([UP, UP, UP], 2, S500, RULES, 100.0)
    assert one.serving(100.0) and one.streak == 1
    a = DeploymentState(until=130.0, state=dep.COOLDOWN, why="rate_limit")
    b = DeploymentState(until=120.0, state=dep.COOLDOWN, why="rate_limit")
    assert dep.sibling_in([a, b, one], 2, S500, 100.0) is None
    assert dep.sibling_in([a, UP, one], 2, S500, 100.0) == 0.0  # one serves: at once
    own = DeploymentState(until=105.0, state=dep.COOLDOWN, why="rate_limit")
    assert dep.sibling_in([a, b, own], 2, RATE, 100.0) == 5.0  # every one out: the earliest
    assert dep.sibling_in([a, DeploymentState(until=103.0), own], 2, RATE, 100.0) == 3.0
    p = Progress(deadline=1000.0, chain=("m",))
    backoff = decide(p, S500, POLICY, 100.0, random.Random(0), sibling=None)
    assert isinstance(backoff, Retry) and not backoff.sibling and backoff.wait < 20.0


def test_one_probe_holds_an_ejected_deployment_for_its_lease() -> None:
    """After an ejection the first pick probes it and leases it: the next picks go to the
    sibling; the probe's answer recovers it, its failure ejects it again; an abandoned
    probe's lease runs out and the next pick probes."""
    ejected = DeploymentState(160.0, dep.EJECTED, "server_error", 2, last_error="server_error")
    first = dep.choose([ejected, UP], [1, 1], "ordered", set(), 170.0, random.Random(0))
    assert first == Pick(0, probe=True)
    leased = dep.probing(ejected, 170.0, 4.0)
    assert (leased.until, leased.state, leased.why) == (174.0, dep.EJECTED, "server_error")
    rng = random.Random(0)
    for _ in range(5):  # concurrent requests: the sibling, no second probe
        assert dep.choose([leased, UP], [1, 1], "ordered", set(), 171.0, rng) == Pick(1)
    assert dep.record([leased, UP], 0, None, RULES, 172.0) == (leased, None)  # not the probe
    back, t = dep.record([leased, UP], 0, None, RULES, 172.0, probe=True)
    assert back == DeploymentState(last_error="server_error")
    assert t == dep.Transition("recovered", "server_error")
    again, t = dep.record([leased, UP], 0, S500, RULES, 172.0, probe=True)
    assert (again.state, again.until) == (dep.EJECTED, 232.0)
    assert t is not None and t.kind == dep.EJECTED
    abandoned = dep.choose([leased, UP], [1, 1], "ordered", set(), 174.5, random.Random(0))
    assert abandoned == Pick(0, probe=True)
    # a probe whose deployment was cooled down since (a 429 meanwhile) leaves it cooling
    cooled = DeploymentState(until=200.0, state=dep.COOLDOWN, why="rate_limit")
    assert dep.record([cooled, UP], 0, None, RULES, 172.0, probe=True) == (cooled, None)


def test_success_with_headroom_headers_marks_it_short() -> None:
    new, t = dep.record([UP, UP], 0, None, RULES, 100.0, short_for=4.0)
    assert new.short_until == 104.0 and t is None


# ---- decide with a sibling ----------------------------------------------------------

POLICY = Policy.model_validate({"retry": {"max_retries": 2}})


def test_decide_retries_on_a_sibling_at_once_instead_of_waiting() -> None:
    p = Progress(deadline=1000.0, chain=("m",))
    assert decide(p, RATE, POLICY, 0.0, random.Random(0), sibling=0.0) == Retry(
        0.0, 1, sibling=True
    )
    plain = decide(p, RATE, POLICY, 0.0, random.Random(0))
    assert isinstance(plain, Retry) and plain.wait >= 20.0  # without one: the hint


def test_decide_sends_quota_and_auth_to_a_sibling_but_counts_them() -> None:
    p = Progress(deadline=1000.0, chain=("m",))
    quota = Failure(Category.quota_exhausted, 429)
    assert decide(p, quota, POLICY, 0.0, random.Random(0), sibling=0.0) == Retry(
        0.0, 1, sibling=True
    )
    p.retries_on_model = 2  # max_retries spent: no more siblings either
    assert not isinstance(decide(p, quota, POLICY, 0.0, random.Random(0), sibling=0.0), Retry)


def test_decide_waits_for_a_sibling_only_within_the_deadline() -> None:
    p = Progress(deadline=10.0, chain=("m",))
    assert decide(p, RATE, POLICY, 0.0, random.Random(0), sibling=4.0) == Retry(
        4.0, 1, sibling=True
    )
    late = decide(p, RATE, POLICY, 0.0, random.Random(0), sibling=40.0)
    assert not (isinstance(late, Retry) and late.sibling)
