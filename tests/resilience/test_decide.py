"""The decision function as tables: what the engine does after each kind of failure."""

from __future__ import annotations

import pytest

from gateway.errors import Category
from gateway.policy.schema import Policy
from gateway.resilience.decide import (
    FIRST_BYTE_TIMEOUT,
    UNTRANSLATABLE,
    Compact,
    GiveUp,
    Progress,
    Reroute,
    Retry,
    apply,
    decide,
)
from gateway.resilience.failure import Failure

pytestmark = pytest.mark.fast


class Fixed:
    def __init__(self, value: float = 0.0) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


def policy(**kw: object) -> Policy:
    return Policy.model_validate(kw)


def progress(chain: tuple[str, ...] = ("a",), deadline: float = 600.0) -> Progress:
    return Progress(deadline=deadline, chain=chain)


def f(cat: Category, status: int | None = 500, **kw: object) -> Failure:
    return Failure(cat, status, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "cat", [Category.invalid_request, Category.content_filter, Category.prompt_too_long]
)
def test_never_retried_without_recovery(cat: Category) -> None:
    """Invalid requests and content filters give up at once; no chain, no compaction left."""
    p = policy(compaction={"enabled": False})
    assert decide(progress(), f(cat, 400), p, 0.0, Fixed()) == GiveUp(
        "prompt_too_long" if cat is Category.prompt_too_long else "not_retryable"
    )


@pytest.mark.parametrize("cat", [Category.quota_exhausted, Category.auth])
def test_quota_and_auth_move_to_next_model(cat: Category) -> None:
    """Quota and auth failures skip retries and walk the chain (or give up at its end)."""
    p = policy(fallback={"chain": ["b"]})
    assert decide(progress(("a", "b")), f(cat, 429), p, 0.0, Fixed()) == Reroute(
        "b", cat.value, chain_index=1
    )
    assert decide(progress(), f(cat, 429), p, 0.0, Fixed()) == GiveUp("not_retryable")


def test_404_model_not_found_may_fall_back() -> None:
    """A 404 from upstream moves to the next model when there is one."""
    d = decide(progress(("a", "b")), f(Category.invalid_request, 404), Policy(), 0.0, Fixed())
    assert isinstance(d, Reroute) and d.model == "b"


def test_conflict_retried_once() -> None:
    """A 409 is retried once, even though `conflict` is not in retry.on."""
    pr = progress()
    d = decide(pr, f(Category.conflict, 409), Policy(), 0.0, Fixed())
    assert d == Retry(1.0, 1)
    apply(pr, d)
    assert decide(pr, f(Category.conflict, 409), Policy(), 0.0, Fixed()) == GiveUp(
        "retries_exhausted"
    )


def test_transient_sequence_then_turn_retry_then_give_up() -> None:
    """1, 2, 4, 8 s with no jitter; then the turn retry's wait once; then give up."""
    p = policy(retry={"max_retries": 4})
    pr = progress()
    waits = []
    for _ in range(6):
        d = decide(pr, f(Category.server_error), p, 0.0, Fixed())
        if isinstance(d, GiveUp):
            break
        assert isinstance(d, Retry)
        waits.append((d.wait, d.turn))
        apply(pr, d)
    assert waits == [(1.0, False), (2.0, False), (4.0, False), (8.0, False), (10.0, True)]
    assert d == GiveUp("retries_exhausted")


def test_rate_limit_not_in_turn_retry() -> None:
    """Turn retry only covers its `on` categories: exhausted rate limits give up."""
    p = policy(retry={"max_retries": 0})
    assert decide(progress(), f(Category.rate_limit, 429), p, 0.0, Fixed()) == GiveUp(
        "retries_exhausted"
    )


def test_exhausted_retries_walk_the_chain() -> None:
    """When retries on a model run out and the chain has a next model, go there."""
    p = policy(retry={"max_retries": 0}, fallback={"chain": ["b"]})
    d = decide(progress(("a", "b")), f(Category.rate_limit, 429), p, 0.0, Fixed())
    assert d == Reroute("b", "retries_exhausted", chain_index=1)


def test_wait_past_deadline_is_not_started() -> None:
    """A wait that would cross the deadline gives up now, or moves to the fallback."""
    hint = f(Category.rate_limit, 429, retry_after=30.0)
    assert decide(progress(deadline=5.0), hint, Policy(), 0.0, Fixed()) == GiveUp("deadline")
    d = decide(progress(("a", "b"), deadline=5.0), hint, Policy(), 0.0, Fixed())
    assert d == Reroute("b", "wait_past_deadline", chain_index=1)


def test_retry_after_honoured_with_jitter_and_cap() -> None:
    """A 3 s hint waits 3 s (+ up to 10 %); a 900 s hint is capped at 300 s."""
    d = decide(progress(), f(Category.rate_limit, 429, retry_after=3.0), Policy(), 0.0,
               Fixed(0.5))  # fmt: skip
    assert isinstance(d, Retry) and d.wait == pytest.approx(3.15)
    d = decide(progress(deadline=1e6), f(Category.rate_limit, 429, retry_after=900.0), Policy(),
               0.0, Fixed(0.99))  # fmt: skip
    assert d == Retry(300.0, 1)


def test_first_byte_timeout_moves_to_fallback() -> None:
    """A silent model is not waited out again when there is a fallback."""
    silent = Failure(Category.timeout, None, "silent", stage=FIRST_BYTE_TIMEOUT)
    d = decide(progress(("a", "b")), silent, Policy(), 0.0, Fixed())
    assert d == Reroute("b", FIRST_BYTE_TIMEOUT, chain_index=1)
    assert isinstance(decide(progress(), silent, Policy(), 0.0, Fixed()), Retry)


def test_a_provider_code_never_stands_for_the_gateways_own_stage() -> None:
    """A 504 whose body says code "first_byte_timeout" is a timeout like any other: only the
    gateway's own stage marker moves a request to the fallback at once."""
    said = Failure(Category.timeout, 504, "upstream said so", code=FIRST_BYTE_TIMEOUT)
    assert isinstance(decide(progress(("a", "b")), said, Policy(), 0.0, Fixed()), Retry)


def test_route_activation_reroutes_the_current_request() -> None:
    """When this failure activated the route's fallback, this request follows it."""
    d = decide(progress(("a", "b")), f(Category.server_error), Policy(), 0.0, Fixed(),
               activated=1)  # fmt: skip
    assert d == Reroute("b", "consecutive_server_errors", chain_index=1)


def test_prompt_too_long_sequence_is_bounded() -> None:
    """Each strategy once, then each larger model (original body), then a 400: never a loop."""
    p = policy(fallback={"on_prompt_too_long": ["big", "bigger"]})
    pr = progress()
    seen = []
    for _ in range(10):
        d = decide(pr, f(Category.prompt_too_long, 400), p, 0.0, Fixed())
        seen.append(d)
        if isinstance(d, GiveUp):
            break
        apply(pr, d)
    assert seen == [
        Compact("snip_tool_results"),
        Compact("drop_middle"),
        Reroute("big", "prompt_too_long", original_body=True),
        Reroute("bigger", "prompt_too_long", original_body=True),
        GiveUp("prompt_too_long"),
    ]
    assert pr.tried == ("model big", "model bigger")


def test_a_request_a_model_cannot_take_moves_on_along_the_chain() -> None:
    """A request with no equivalent in a model's format (a translation refusal) is not
    retried there: the next model of the chain takes it; with none left, it is final."""
    refused = Failure(Category.invalid_request, 400, "n: no equivalent", stage=UNTRANSLATABLE)
    d = decide(progress(("a", "b")), refused, Policy(), 0.0, Fixed())
    assert d == Reroute("b", UNTRANSLATABLE, chain_index=1)
    assert decide(progress(), refused, Policy(), 0.0, Fixed()) == GiveUp("not_retryable")
