"""The decision function: given what happened so far, what does the engine do next?

Two questions are asked separately, as Envoy does: *may this failure be retried,
and how?* (here) and *is there budget left?* (the engine asks the state backend
after a :class:`Retry` and, when refused, turns it into ``GiveUp("retry_budget_exhausted")``).
Every "no" is a named reason, used as the log field.

Decisions::

    Retry(wait)           same model again after ``wait`` seconds (``turn=True``: the turn retry)
    Reroute(model, ...)   another model: the fallback chain, or a larger-context model
    Compact(strategy)     shrink the prompt with the next compaction strategy, then retry
    GiveUp(reason)        stop: the client gets the failure

Before an attempt, when every deployment of the model is out,
:func:`every_deployment_out` answers ``WaitForDeployment(seconds)`` (then choose
again; not a retry), a ``Reroute`` to the next model of the chain, or
``GiveUp("no_deployment")``.

The request's history is :class:`Progress`, mutated only through :func:`apply`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import Category
from gateway.policy.schema import Policy
from gateway.resilience.backoff import retry_wait
from gateway.resilience.failure import Failure, Rng


@dataclass(frozen=True, slots=True)
class Retry:
    wait: float
    retry_number: int  # 1 for the first retry on this model
    turn: bool = False
    sibling: bool = False  # to another deployment of the model


@dataclass(frozen=True, slots=True)
class Reroute:
    model: str
    reason: str
    chain_index: int | None = (
        None  # position in (primary, *fallback.chain); None: on_prompt_too_long
    )
    original_body: bool = False  # send the uncompacted request


@dataclass(frozen=True, slots=True)
class Compact:
    strategy: str


@dataclass(frozen=True, slots=True)
class GiveUp:
    reason: str


@dataclass(frozen=True, slots=True)
class WaitForDeployment:
    """Every deployment of the model is out: wait ``seconds`` for the earliest to be back,
    then choose again. It retries no failed attempt: not counted as a retry."""

    seconds: float


Decision = Retry | Reroute | Compact | GiveUp
NO_DEPLOYMENT = "no_deployment"  # GiveUp / Reroute reason: every deployment was out

FIRST_BYTE_TIMEOUT = "first_byte_timeout"  # Failure.stage of a model that stayed silent
DEADLINE_PASSED = "deadline_passed"  # Failure.stage of an attempt not made: no time was left
UNTRANSLATABLE = "untranslatable"  # Failure.stage: the request has no equivalent in the
# model's format (docs/translation.md, "Fields with no equivalent"); another model of
# the chain may take it as it is
_MOVE_ON = frozenset({Category.quota_exhausted, Category.auth})


@dataclass(slots=True)
class Progress:
    """One request's recovery history."""

    deadline: float  # monotonic seconds
    chain: tuple[str, ...]  # (requested model, *fallback.chain)
    chain_index: int = 0
    model: str = ""
    attempts: int = 0
    retries_on_model: int = 0
    turn_retries: int = 0
    strategies_done: int = 0
    ptl_models_tried: int = 0
    # what prompt recovery tried, for the message; and the current model's deployments
    # this request used. Immutable, grown by a new value: made on every request, they
    # cost no factory call, and the usual request never grows them.
    tried: tuple[str, ...] = ()
    deployment: int = 0  # the current model's deployment the attempt goes to
    deployments_tried: frozenset[int] = frozenset()  # of the current model

    def __post_init__(self) -> None:
        if not self.model:
            self.model = self.chain[self.chain_index]

    def next_in_chain(self) -> int | None:
        nxt = self.chain_index + 1
        return nxt if nxt < len(self.chain) else None


def decide(
    p: Progress,
    f: Failure,
    policy: Policy,
    now: float,
    rng: Rng,
    *,
    activated: int | None = None,
    sibling: float | None = None,
) -> Decision:
    """What to do after the failed attempt ``f`` (``activated``: the route just moved
    there; ``sibling``: seconds until another deployment of the model can take the retry,
    from :func:`gateway.resilience.deployments.sibling_in`)."""
    if f.category is Category.prompt_too_long:
        return _prompt_too_long(p, policy)
    if (
        sibling is not None
        and (f.category in _MOVE_ON or policy.retries_on(f.category))
        and p.retries_on_model < policy.retry.max_retries
        and leaves_time(now, sibling, p.deadline)
    ):  # a failure of one deployment: a sibling takes the retry, as soon as one can
        return Retry(sibling, p.retries_on_model + 1, sibling=True)
    if activated is not None and activated > p.chain_index and activated < len(p.chain):
        return _reroute(p, activated, "consecutive_server_errors")
    nxt = p.next_in_chain()
    if f.stage == UNTRANSLATABLE:
        return _reroute(p, nxt, UNTRANSLATABLE) if nxt is not None else GiveUp("not_retryable")
    if f.category in _MOVE_ON or (f.category is Category.invalid_request and f.status == 404):
        return _reroute(p, nxt, f.category.value) if nxt is not None else GiveUp("not_retryable")
    if f.category is Category.conflict:
        if p.retries_on_model >= 1:
            return GiveUp("retries_exhausted")
    elif f.category.never_retried or not policy.retries_on(f.category):
        return GiveUp("not_retryable")
    if f.stage == FIRST_BYTE_TIMEOUT and nxt is not None:
        return _reroute(p, nxt, FIRST_BYTE_TIMEOUT)
    if p.retries_on_model >= policy.retry.max_retries:
        if nxt is not None:
            return _reroute(p, nxt, "retries_exhausted")
        return _turn_retry(p, f, policy, now)
    wait = retry_wait(f, p.retries_on_model + 1, policy.retry, rng)
    if not leaves_time(now, wait, p.deadline):
        if nxt is not None:
            return _reroute(p, nxt, "wait_past_deadline")
        return GiveUp("deadline")
    return Retry(wait, p.retries_on_model + 1)


def leaves_time(now: float, wait: float, deadline: float) -> bool:
    """Whether a wait of ``wait`` seconds from ``now`` leaves time for the attempt it
    waits for: it ends before the deadline. An attempt is made only while time is left
    (one with none is not sent: ``deadline_passed``), so a wait that ends at the deadline
    is one past it, and never started (docs/recovery.md, Deadline)."""
    return now + wait < deadline


def every_deployment_out(
    p: Progress, seconds: float, now: float, *, on_chain: bool = True
) -> WaitForDeployment | Reroute | GiveUp:
    """Every deployment of ``p.model`` is out, the earliest back in ``seconds``: wait for
    it when the deadline allows, else the next model of the chain (``on_chain``: the
    request still follows it), else give up."""
    if leaves_time(now, seconds, p.deadline):
        return WaitForDeployment(seconds)
    nxt = p.next_in_chain() if on_chain else None
    if nxt is not None:
        return _reroute(p, nxt, NO_DEPLOYMENT)
    return GiveUp(NO_DEPLOYMENT)


def _reroute(p: Progress, index: int, reason: str) -> Reroute:
    return Reroute(p.chain[index], reason, chain_index=index)


def _turn_retry(p: Progress, f: Failure, policy: Policy, now: float) -> Decision:
    turn = policy.turn_retry
    if f.category.value not in turn.on or p.turn_retries >= turn.max:
        return GiveUp("retries_exhausted")
    if not leaves_time(now, turn.wait, p.deadline):
        return GiveUp("deadline")
    return Retry(turn.wait, p.retries_on_model + 1, turn=True)


def _prompt_too_long(p: Progress, policy: Policy) -> Decision:
    comp = policy.compaction
    if comp.enabled and p.strategies_done < len(comp.strategies):
        return Compact(comp.strategies[p.strategies_done])
    bigger = policy.fallback.on_prompt_too_long
    if p.ptl_models_tried < len(bigger):
        return Reroute(bigger[p.ptl_models_tried], "prompt_too_long", original_body=True)
    return GiveUp("prompt_too_long")


def apply(p: Progress, d: Decision) -> None:
    """Advance the history by a decision the engine is about to carry out."""
    if isinstance(d, Retry):
        p.retries_on_model += 1
        if d.turn:
            p.turn_retries += 1
    elif isinstance(d, Reroute):
        p.model = d.model
        p.retries_on_model = 0
        p.deployment = 0
        p.deployments_tried = frozenset()
        if d.chain_index is not None:
            p.chain_index = d.chain_index
        else:
            p.ptl_models_tried += 1
            p.tried += (f"model {d.model}",)
    elif isinstance(d, Compact):
        p.strategies_done += 1
