"""The loop that carries out the recovery decisions for the attempts of one request.

``recover`` asks :func:`gateway.resilience.decide.decide` what to do after each
failed attempt and carries the answer out through an :class:`Attempter` (which
sends and sleeps). The proxy's attempter talks HTTP and writes keepalives;
``llm-gateway simulate`` plugs in a scripted one on a virtual clock, so both
run this loop. A follow-up request (a continuation, a stream resumed:
gateway/recovery/continuing.py) goes through ``recover`` again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from gateway.errors import Category, GatewayError
from gateway.formats import Format
from gateway.formats.body_parts import LONG, Parts
from gateway.formats.body_parts import encode as encode_parts
from gateway.money.pricing import Price
from gateway.observe.events import Events
from gateway.observe.request_log import RequestLog
from gateway.policy.schema import Policy
from gateway.recovery.compacting import compact_step, summarize
from gateway.recovery.deployment_choice import ONLY, Deployments
from gateway.resilience import deployments as dep
from gateway.resilience import fallback
from gateway.resilience.decide import (
    GiveUp,
    Progress,
    Reroute,
    Retry,
    WaitForDeployment,
    apply,
    decide,
    every_deployment_out,
)
from gateway.resilience.failure import Failure, Rng
from gateway.routing.policyset import Deployed
from gateway.state.base import StateBackend
from gateway.state.deployments import DeploymentBoard


@dataclass(slots=True)
class Outcome:
    """What one attempt produced: a success (body or open stream) or a classified failure."""

    failure: Failure | None = None
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)
    stream: Any = None  # the attempter's open stream on a streaming success
    data: Any = None  # the decoded JSON body, when the attempter decoded it

    def json(self) -> dict[str, Any] | None:
        """The answer as a JSON object: ``data`` when the attempter decoded it, else the
        body decoded; None when it is not a JSON object."""
        return self.data if self.data is not None else json_object(self.body)


def json_object(body: bytes) -> dict[str, Any] | None:
    """``body`` decoded when it is a JSON object, else None (not JSON, or not an object)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


@dataclass(slots=True)
class Request:
    """The parts of a client request that recovery reads or changes."""

    fmt: Format  # the client's format: how the body holds the conversation and its answer
    body: dict[str, Any]
    model: str  # the public model asked for
    route_id: str
    team: str
    policy: Policy
    deadline: float  # monotonic
    context_window: int | None = None  # of the model asked for; sizes compaction
    size: int = 0  # bytes of the client's body: a large one is encoded as it is sent

    def encode(self, body: dict[str, Any], upstream_model: str) -> bytes | Parts:
        """What goes upstream: always the body the gateway decided on, encoded again.

        Never the client's bytes: a body with a key twice (``"model"`` allowed, then
        ``"model"`` not allowed) decodes differently in different parsers; re-encoding
        (about 2 µs for a typical request) makes the provider see exactly one of each key.
        A request that may hold a long string (:data:`~gateway.formats.body_parts.LONG` bytes or
        more) is encoded as its long strings are sent (:mod:`gateway.formats.body_parts`): never
        whole beside the decoded body it came from. A body that cannot be encoded (nested
        past orjson's 254 levels: the edge keeps a client's body and its tool-call
        arguments within ``max_json_depth``, so only a translation could) is the client's
        400 in its own format, never a 500.
        """
        if body.get("model") != upstream_model:
            body = {**body, "model": upstream_model}
        try:
            return encode_parts(body, self.body) if self.size >= LONG else orjson.dumps(body)
        except orjson.JSONEncodeError as e:  # the edge's checks keep a client's body encodable
            raise GatewayError(
                400,
                f"the request cannot be sent on in the provider's format ({e})",
                code="request_not_encodable",
            ) from None


class Attempter(Protocol):
    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        """One attempt on ``model``, through its deployment ``progress.deployment``."""
        ...

    def deployments(self, model: str) -> tuple[Sequence[Deployed], str]:
        """The deployments of ``model`` and its ``balance`` rule (docs/policies.md,
        Deployments)."""
        ...

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None: ...

    def price(self, model: str, deployment: int) -> Price | None:
        """What ``model`` costs on its deployment ``deployment`` (None: not priced)."""
        ...

    # The ``summarize`` compaction step's own call
    # (see :func:`gateway.recovery.compacting.summarize`).
    def model_info(self, model: str, deployment: int) -> tuple[Format, int | None]:
        """The format ``ask`` speaks to ``model`` on its deployment ``deployment``, and the
        model's context window when known."""
        ...

    async def ask(
        self, model: str, fmt: Format, body: dict[str, Any], within: float, deployment: int
    ) -> Outcome:
        """One JSON request the gateway makes itself, to the deployment ``deployment`` of
        ``model``: never streamed (whatever the client asked), bounded by ``within``
        seconds, not one of the request's attempts."""
        ...


@dataclass(slots=True)
class Env:
    state: StateBackend
    events: Events
    monotonic: Callable[[], float]
    wall: Callable[[], float]
    rng: Rng
    board: DeploymentBoard = field(default_factory=DeploymentBoard)


@dataclass(slots=True)
class Result:
    outcome: Outcome
    progress: Progress
    reason: str = ""  # GiveUp reason when the outcome is a failure
    body: dict[str, Any] = field(default_factory=dict)  # the request body last sent


def _outcome_label(f: Failure | None) -> str:
    if f is None:
        return "ok"
    return "server_error" if f.category.counts_toward_fallback else "other"


async def recover(req: Request, log: RequestLog, env: Env, attempter: Attempter) -> Result:
    """Attempt, decide, act, until an answer or a named reason to give up."""
    policy, fb = req.policy, req.policy.fallback
    key = f"{req.route_id}|{req.model}"
    probe = False
    start = back_to = 0
    if fb.chain:
        choice = await env.state.choose(key, fb, env.wall())
        start, probe, back_to = choice.index, choice.probe, choice.back_to
        if start:
            log.used("fallback")
    p = Progress(req.deadline, (req.model, *fb.chain), start)  # deadline, chain, chain_index
    body = req.body
    on_chain = True  # False after moving to an on_prompt_too_long model
    while True:
        deps = Deployments.of(p.model, attempter, env, policy)
        pick = ONLY if deps is None else deps.choose(p.deployments_tried)
        if isinstance(pick, dep.Wait):  # every deployment is out: wait, move on or stop
            gone = await _every_deployment_out(p, pick, req, log, env, attempter, on_chain)
            if gone is not None:
                return gone
            continue
        p.attempts += 1
        log.attempts += 1
        p.deployment = pick.index
        if deps is None:
            out = await attempter.send(p.model, body, p)
            sibling = None
        else:
            out, sibling = await deps.call(pick, attempter.send(p.model, body, p), req.team, log)
            p.deployments_tried.add(pick.index)
        f = out.failure
        activated: int | None = None
        if fb.chain and on_chain and sibling != 0.0:  # a sibling answers: not the model's
            label = _outcome_label(f)
            t = await env.state.record(key, fb, p.chain_index, label, env.wall(), probe=probe)
            activated = _announce(t, req, env.events, log)
            if probe and label == "server_error":
                activated = back_to  # the primary is still down: back to the fallback now
            probe = False
        if f is None:
            log.answered_by = p.model
            return Result(out, p, "", body)  # outcome, progress, reason, body
        while True:  # decide until an action that needs another attempt
            d = decide(p, f, policy, env.monotonic(), env.rng, activated=activated, sibling=sibling)
            sibling = None  # one sibling retry per failure
            activated = None
            allowance = policy.retry.allowance
            if (
                isinstance(d, Retry)
                and not d.turn
                and not await env.state.spend_retry(req.route_id, allowance, env.wall())
            ):
                env.events.retry_budget_exhausted(log, p.model, f)
                d = GiveUp("retry_budget_exhausted")
            apply(p, d)
            if isinstance(d, GiveUp):
                log.answered_by = p.model
                env.events.gave_up(log, p.model, d.reason, f)
                return Result(out, p, reason=d.reason, body=body)
            if isinstance(d, Retry):
                log.used("retry")
                if d.turn:
                    env.events.turn_retry(log, p.model, d.wait, f)
                else:
                    env.events.api_retry(
                        log, p.model, d.retry_number, policy.retry.max_retries, d.wait, f
                    )
                await attempter.sleep(d.wait, d, f)
                break
            if isinstance(d, Reroute):
                log.used("fallback")
                env.events.fallback(log, p.chain[0] if on_chain else req.model, d.model, d.reason)
                if d.original_body:
                    body, on_chain = req.body, False
                break
            if d.strategy == "summarize":
                compacted = await summarize(req, body, f, p, log, env, attempter)
            else:
                compacted = compact_step(req, body, d.strategy, f, p, log, env.events)
            if compacted is not body:
                body = compacted
                break


async def _every_deployment_out(
    p: Progress,
    wait: dep.Wait,
    req: Request,
    log: RequestLog,
    env: Env,
    attempter: Attempter,
    on_chain: bool,
) -> Result | None:
    """Every deployment of ``p.model`` is out: carry out
    :func:`gateway.resilience.decide.every_deployment_out` (None: choose again; a give-up:
    the client's 429).

    The wait is an ``api_retry`` event (category ``rate_limit``, ``error`` naming the
    wait), counted in ``retry_wait_seconds_total`` but not in ``retries_total``: it waits
    for a deployment, it retries no failed attempt (one that failed was counted already)."""
    out = f"every deployment of {p.model} is out of service for {wait.seconds:.1f} s"
    f = Failure(Category.rate_limit, 429, out, retry_after=wait.seconds)
    d = every_deployment_out(p, wait.seconds, env.monotonic(), on_chain=on_chain)
    if isinstance(d, WaitForDeployment):
        retry = Retry(d.seconds, p.retries_on_model)  # how the wait is shown: not applied
        max_retries = req.policy.retry.max_retries
        env.events.api_retry(
            log, p.model, retry.retry_number, max_retries, d.seconds, f, reason=out
        )
        await attempter.sleep(d.seconds, retry, f)
        return None
    if isinstance(d, Reroute):
        log.used("fallback")
        env.events.fallback(log, p.model, d.model, d.reason)
        apply(p, d)
        return None
    log.answered_by = p.model
    env.events.gave_up(log, p.model, d.reason, f)
    return Result(Outcome(f, status=429), p, reason=d.reason, body=req.body)


def _announce(
    t: fallback.Transition | None, req: Request, events: Events, log: RequestLog
) -> int | None:
    if isinstance(t, fallback.Activated):
        to_model = fallback.model_at(req.model, req.policy.fallback, t.to_index)
        events.fallback_model_activated(req.team, req.model, to_model, t.reason, log)
        return t.to_index
    if isinstance(t, fallback.Recovered):
        events.fallback_model_recovered(req.team, req.model)
    if isinstance(t, fallback.Follow):
        return t.index
    return None
