"""The only loop that acts on recovery decisions.

``recover`` asks :func:`gateway.resilience.decide.decide` what to do after each
failed attempt and carries the answer out through an :class:`Attempter` (which
sends and sleeps). The proxy's attempter talks HTTP and writes keepalives;
``llm-gateway simulate`` plugs in a scripted one on a virtual clock, so both
run exactly this code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson

from gateway.observe.events import Events, RequestLog
from gateway.policy.schema import Policy
from gateway.resilience import compaction, fallback
from gateway.resilience.decide import (
    GiveUp,
    Progress,
    Reroute,
    Retry,
    apply,
    decide,
)
from gateway.resilience.failure import Failure, Rng
from gateway.state.base import StateBackend


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


@dataclass(slots=True)
class Request:
    """The parts of a client request that recovery reads or changes."""

    api: str  # "openai" | "anthropic" | "responses" (message shapes for compaction)
    body: dict[str, Any]
    model: str  # the public model asked for
    route_id: str
    team: str
    policy: Policy
    deadline: float  # monotonic
    context_window: int | None = None  # of the model asked for; sizes compaction

    def encode(self, body: dict[str, Any], upstream_model: str) -> bytes:
        """What goes upstream: always the body the gateway decided on, encoded again.

        Never the client's bytes: a body with a key twice (``"model"`` allowed, then
        ``"model"`` not allowed) decodes differently in different parsers; re-encoding
        (about 2 µs for a typical request) makes the provider see exactly one of each key.
        """
        if body.get("model") != upstream_model:
            body = {**body, "model": upstream_model}
        return orjson.dumps(body)


class Attempter(Protocol):
    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome: ...

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None: ...


@dataclass(slots=True)
class Env:
    state: StateBackend
    events: Events
    monotonic: Callable[[], float]
    wall: Callable[[], float]
    rng: Rng


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
    p = Progress(deadline=req.deadline, chain=(req.model, *fb.chain), chain_index=start)
    body = req.body
    on_chain = True  # False after moving to an on_prompt_too_long model
    while True:
        p.attempts += 1
        log.attempts += 1
        out = await attempter.send(p.model, body, p)
        f = out.failure
        activated: int | None = None
        if fb.chain and on_chain:
            label = _outcome_label(f)
            t = await env.state.record(key, fb, p.chain_index, label, env.wall(), probe=probe)
            activated = _announce(t, req, env.events, log)
            if probe and label == "server_error":
                activated = back_to  # the primary is still down: back to the fallback now
            probe = False
        if f is None:
            log.answered_by = p.model
            return Result(out, p, body=body)
        while True:  # decide until an action that needs another attempt
            d = decide(p, f, policy, env.monotonic(), env.rng, activated=activated)
            activated = None
            budget = policy.retry.budget
            if (
                isinstance(d, Retry)
                and not d.turn
                and not await env.state.spend_retry(req.route_id, budget, env.wall())
            ):
                env.events.retry_budget_exhausted(log, p.model, f)
                d = GiveUp("retry_budget_exhausted")
            apply(p, d)
            if isinstance(d, GiveUp):
                log.answered_by = p.model
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
            compacted = _compact(req, body, d.strategy, f, p, log, env.events)
            if compacted is not body:
                body = compacted
                break


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


def _compact(
    req: Request,
    body: dict[str, Any],
    strategy: str,
    f: Failure,
    p: Progress,
    log: RequestLog,
    events: Events,
) -> dict[str, Any]:
    """One compaction step; the body unchanged (and the step skipped) when it cannot shrink."""
    estimate = compaction.estimate_tokens(body, req.api)
    requested = _requested_output(body)
    limit = f.context_limit or req.context_window
    target = compaction.target_tokens_for(f.prompt_tokens, limit, requested, estimate)
    c = compaction.compact(body, req.api, strategy, req.policy.compaction, target_tokens=target)
    if c is None:
        events.prompt_too_long_recovery(log, p.model, strategy, "skipped")
        return body
    p.tried.append(strategy)
    _applied(c, "applied", p.model, log, events)
    return c.body


def _applied(
    c: compaction.Compacted, outcome: str, model: str, log: RequestLog, events: Events
) -> None:
    log.used("compaction")
    events.prompt_too_long_recovery(
        log, model, c.strategy, outcome,
        messages_before=c.messages_before, messages_after=c.messages_after,
        tokens_before=c.tokens_before, tokens_after=c.tokens_after,
    )  # fmt: skip


def compact_ahead(req: Request, window: int, log: RequestLog, events: Events) -> Request:
    """Proactive compaction: shrink a prompt that already exceeds the model's window."""
    comp = req.policy.compaction
    requested = _requested_output(req.body) or 0
    target = int((window - requested) * 0.9)
    body = req.body
    tokens = compaction.estimate_tokens(body, req.api)
    for strategy in comp.strategies:
        if tokens <= target:
            break
        c = compaction.compact(body, req.api, strategy, comp, target_tokens=target)
        if c is None:
            continue
        _applied(c, "proactive", req.model, log, events)
        body, tokens = c.body, c.tokens_after
    if body is req.body:
        return req
    return replace(req, body=body)


def _requested_output(body: Mapping[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        v = body.get(name)
        if isinstance(v, int):
            return v
    return None
