"""What the engine does about a prompt that is too long: one compaction step, the
``summarize`` step (the one strategy that calls a model) and proactive compaction.

:func:`gateway.recovery.engine.recover` calls :func:`compact_step` and :func:`summarize` when
:func:`gateway.resilience.decide.decide` answers ``Compact``; the request handler calls
:func:`compact_ahead` before the first attempt. The strategies themselves are pure
(:mod:`gateway.resilience.compaction`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gateway.observe.request_log import RequestLog
from gateway.recovery.billing import bill_answer
from gateway.recovery.deployment_choice import ONLY, Deployments
from gateway.resilience import compaction, summary_call
from gateway.resilience.decide import Progress
from gateway.resilience.failure import Failure

if TYPE_CHECKING:
    from gateway.formats import Format
    from gateway.recovery.seams import Attempter, Env, RecoveryEvents, Request


def compact_step(
    req: Request,
    body: dict[str, Any],
    strategy: str,
    f: Failure,
    p: Progress,
    log: RequestLog,
    events: RecoveryEvents,
) -> dict[str, Any]:
    """One compaction step; the body unchanged (and the step skipped) when it cannot shrink."""
    estimate = compaction.estimate_tokens(body, req.fmt)
    requested = req.fmt.requested_output(body)
    limit = f.context_limit or req.context_window
    target = compaction.target_tokens_for(f.prompt_tokens, limit, requested, estimate)
    c = compaction.compact(body, req.fmt, strategy, req.policy.compaction, target_tokens=target)
    if c is None:
        events.prompt_too_long_recovery(log, p.model, strategy, "skipped")
        return body
    p.tried += (strategy,)
    _applied(c, "applied", p.model, log, events)
    return c.body


def _applied(
    c: compaction.Compacted,
    outcome: str,
    model: str,
    log: RequestLog,
    events: RecoveryEvents,
    **extra: Any,
) -> None:
    log.used("compaction")
    events.prompt_too_long_recovery(
        log, model, c.strategy, outcome,
        messages_before=c.messages_before, messages_after=c.messages_after,
        tokens_before=c.tokens_before, tokens_after=c.tokens_after, **extra,
    )  # fmt: skip


# ---- summarize: the one strategy that calls a model ------------------------------------


async def summarize(
    req: Request,
    body: dict[str, Any],
    f: Failure,
    p: Progress,
    log: RequestLog,
    env: Env,
    attempter: Attempter,
) -> dict[str, Any]:
    """The ``summarize`` step: the middle replaced by a summary that a model wrote.

    The model is ``compaction.summarize_model``, else the request's current model.
    Its call goes through ``attempter.ask`` on the deployment that
    :func:`gateway.resilience.summary_call.next_try` names (one that serves, chosen as
    for an attempt): JSON even for a streaming client, its own deadline
    (``compaction.summarize_timeout`` for both tries, never past the request's), one
    retry after a failure that a retry or another deployment can help; it is an
    upstream attempt in the metrics but not one of the request's attempts. The body
    comes back unchanged, and the next strategy runs, when the step is skipped (no
    middle, or the summary would not make the prompt smaller) or failed.
    """
    comp, events, fmt = req.policy.compaction, env.events, req.fmt
    if compaction.apply_summary(body, fmt, comp, ".") is None:  # nothing a summary can replace
        events.prompt_too_long_recovery(log, p.model, "summarize", "skipped")
        return body
    model = comp.summarize_model or p.model
    text, error = await _summary(req, body, f, p, model, log, env, attempter)
    if text:
        c = compaction.apply_summary(body, fmt, comp, text)
        if c is None:
            events.prompt_too_long_recovery(
                log, p.model, "summarize", "skipped", summary_model=model
            )
            return body
        p.tried += ("summarize",)
        _applied(c, "applied", p.model, log, events, summary_model=model)
        return c.body
    events.prompt_too_long_recovery(
        log, p.model, "summarize", "failed", summary_model=model, error=error,
        messages_before=len(fmt.entries(body)),
        tokens_before=compaction.estimate_tokens(body, fmt),
    )  # fmt: skip
    return body


async def _summary(
    req: Request,
    body: dict[str, Any],
    f: Failure,
    p: Progress,
    model: str,
    log: RequestLog,
    env: Env,
    attempter: Attempter,
) -> tuple[str, str]:
    """The summary ``model`` wrote of ``body``'s middle, and "" (or "" and why it failed:
    a failure category, the step's timeout, no deployment, an empty summary). Each try
    goes where :func:`gateway.resilience.summary_call.next_try` says; an answer is
    billed as recovery."""
    deps = Deployments.of(model, attempter, env, req)
    deadline = min(env.monotonic() + req.policy.compaction.summarize_timeout, req.deadline)
    asks: dict[str, dict[str, Any]] = {}  # the summary request, per format name
    tried: set[int] = set()
    last: Failure | None = None
    tries = failed = 0
    while True:
        pick = ONLY if deps is None else deps.choose(tried)
        step = summary_call.next_try(tries, last, failed, pick, deadline - env.monotonic())
        if isinstance(step, summary_call.NoSummary):
            return "", step.error
        summary_fmt, window = attempter.model_info(model, step.pick.index)
        ask = asks.get(summary_fmt.name)
        if ask is None:
            ask = asks[summary_fmt.name] = _summary_request(
                body, f, p, req, model, summary_fmt, window
            )
        tries += 1
        call = attempter.ask(model, summary_fmt, ask, step.within, step.pick.index)
        if deps is None:
            out = await call
        else:
            out, _ = await deps.call(step.pick, call, req.team, log)
            tried.add(step.pick.index)
        if out.failure is not None:
            last, failed = out.failure, step.pick.index
            continue
        answer = out.json()
        if answer is not None:  # the summary is billed: recovery, the client never sees it
            price = attempter.price(model, step.pick.index)
            bill_answer(
                req.bill, log, summary_fmt, answer, ask, price, model, recovery=True, window=window
            )
        text = compaction.summary_text(answer, summary_fmt)
        return (text, "") if text else ("", "empty_summary")


def _summary_request(
    body: dict[str, Any],
    f: Failure,
    p: Progress,
    req: Request,
    model: str,
    summary_fmt: Format,
    window: int | None,
) -> dict[str, Any]:
    """The summary request in ``summary_fmt``, sized to the summary model's window (the limit
    the failure gave, when the model is the one that refused)."""
    scale = 1.0
    if model == p.model:  # the model that just said how much fits
        window = f.context_limit or window
        if f.prompt_tokens:
            scale = compaction.estimate_tokens(body, req.fmt) / f.prompt_tokens
    ask = compaction.summary_request(
        body, req.fmt, req.policy.compaction, model, summary_fmt=summary_fmt,
        max_input_chars=compaction.summary_input_chars(window, scale),
    )  # fmt: skip
    assert ask is not None  # apply_summary found a middle
    return ask


def compact_ahead(req: Request, window: int, log: RequestLog, events: RecoveryEvents) -> Request:
    """Proactive compaction: shrink a prompt that already exceeds the model's window."""
    comp = req.policy.compaction
    requested = req.fmt.requested_output(req.body) or 0
    target = int((window - requested) * 0.9)
    body = req.body
    tokens = compaction.estimate_tokens(body, req.fmt)
    for strategy in comp.strategies:
        if tokens <= target:
            break
        c = compaction.compact(body, req.fmt, strategy, comp, target_tokens=target)
        if c is None:
            continue
        _applied(c, "proactive", req.model, log, events)
        body, tokens = c.body, c.tokens_after
    if body is req.body:
        return req
    return replace(req, body=body)
