"""The loop that carries out the recovery decisions for the attempts of one request.

``recover`` asks :func:`gateway.resilience.decide.decide` what to do after each
failed attempt and carries the answer out through an
:class:`~gateway.recovery.seams.Attempter` (which sends and sleeps). The proxy's
attempter talks HTTP and writes keepalives; ``llm-gateway simulate`` plugs in a scripted
one on a virtual clock, so both run this loop. A follow-up request (a continuation, a
stream resumed: gateway/recovery/continuing.py) goes through ``recover`` again. What the
loop takes and acts through is declared in :mod:`gateway.recovery.seams`.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import Category
from gateway.observe.request_log import RequestLog
from gateway.recovery.compacting import compact_step, summarize
from gateway.recovery.deployment_choice import ONLY, Deployments
from gateway.recovery.seams import Attempter, Env, Outcome, RecoveryEvents, Request, Result
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
from gateway.resilience.failure import Failure


def _outcome_label(f: Failure | None) -> str:
    if f is None:
        return "ok"
    return "server_error" if f.category.counts_toward_fallback else "other"


async def recover(req: Request, log: RequestLog, env: Env, attempter: Attempter) -> Result:
    """Attempt, decide, act, until an answer or a named reason to give up.

    Each attempt goes to the deployment :class:`Deployments` chooses; on a route with a
    fallback chain its outcome is noted in the route's state; a failure
    is decided on and acted upon by :func:`_after_failure` until the next attempt is due.
    The usual request (one deployment, no chain, the first attempt answers) takes none of
    those steps."""
    fb = req.policy.fallback
    key = ""  # the route's fallback state: only a route with a chain has one
    probe = False
    start = back_to = 0
    if fb.chain:
        key = f"{req.route_id}|{req.model}"
        choice = await env.state.choose(key, fb, env.wall())
        start, probe, back_to = choice.index, choice.probe, choice.back_to
        if start:
            log.used("fallback")
    p = Progress(req.deadline, (req.model, *fb.chain), start)  # deadline, chain, chain_index
    body = req.body
    on_chain = True  # False after moving to an on_prompt_too_long model
    while True:
        deps = Deployments.of(p.model, attempter, env, req)
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
            p.deployments_tried |= {pick.index}
        activated: int | None = None
        if key and on_chain and sibling != 0.0:  # a sibling answers: not the model's
            label = _outcome_label(out.failure)  # noted in the route's fallback state
            t = await env.state.record(key, fb, p.chain_index, label, env.wall(), probe=probe)
            activated = _announce(t, req, env.events, log)
            if probe and label == "server_error":
                activated = back_to  # the primary is still down: back to the fallback now
            probe = False
        if out.failure is None:
            log.answered_by = p.model
            return Result(out, p, "", body)  # outcome, progress, reason, body
        hints = (activated, sibling)
        acted = await _after_failure(req, out, body, on_chain, hints, p, log, env, attempter)
        if isinstance(acted, Result):
            return acted
        body, on_chain = acted


async def _after_failure(
    req: Request,
    out: Outcome,
    body: dict[str, Any],
    on_chain: bool,
    hints: tuple[int | None, float | None],
    p: Progress,
    log: RequestLog,
    env: Env,
    attempter: Attempter,
) -> Result | tuple[dict[str, Any], bool]:
    """Decide and act on the failed attempt ``out`` until the next attempt is due: the body
    it sends and whether the request is still on its chain; or the give-up's Result.

    ``hints``: the chain index the route just moved to, and the seconds until a sibling
    deployment can take a retry; both count for the first decision only. A compaction
    step that cannot shrink the body is skipped and the next decision taken."""
    f = out.failure
    assert f is not None
    activated, sibling = hints
    policy = req.policy
    while True:  # decide until an action that needs another attempt
        d = decide(p, f, policy, env.monotonic(), env.rng, activated=activated, sibling=sibling)
        activated = sibling = None  # one sibling retry per failure
        if (
            isinstance(d, Retry)
            and not d.turn
            and not await env.state.spend_retry(req.route_id, policy.retry.allowance, env.wall())
        ):
            env.events.retry_budget_exhausted(log, p.model, f)
            d = GiveUp("retry_budget_exhausted")
        apply(p, d)
        if isinstance(d, GiveUp):
            log.answered_by = p.model
            env.events.gave_up(log, p.model, d.reason, f)
            return Result(out, p, reason=d.reason, body=body)
        if isinstance(d, Retry):
            await _retry(d, f, p, req, log, env, attempter)
            return body, on_chain
        if isinstance(d, Reroute):
            log.used("fallback")
            env.events.fallback(log, p.chain[0] if on_chain else req.model, d.model, d.reason)
            return (req.body, False) if d.original_body else (body, on_chain)
        if d.strategy == "summarize":
            compacted = await summarize(req, body, f, p, log, env, attempter)
        else:
            compacted = compact_step(req, body, d.strategy, f, p, log, env.events)
        if compacted is not body:
            return compacted, on_chain


async def _retry(
    d: Retry, f: Failure, p: Progress, req: Request, log: RequestLog, env: Env, att: Attempter
) -> None:
    """The retry ``d`` reported, then its wait."""
    log.used("retry")
    if d.turn:
        env.events.turn_retry(log, p.model, d.wait, f)
    else:
        max_retries = req.policy.retry.max_retries
        env.events.api_retry(log, p.model, d.retry_number, max_retries, d.wait, f)
    await att.sleep(d.wait, d, f)


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
    t: fallback.Transition | None, req: Request, events: RecoveryEvents, log: RequestLog
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
