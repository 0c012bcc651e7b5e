"""Turning a recovery result into the client's answer: JSON, a relayed stream, or an error.

Bodies and stream events pass through as the provider sent them. A stream is
complete only when the upstream's final event arrived; a stream that breaks
after the first byte ends with the endpoint's error event, never silently.
"""

from __future__ import annotations

import math
import re
import time
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from gateway.errors import Category, GatewayError, exhausted
from gateway.formats.endpoints import Endpoint
from gateway.formats.usage import INPUT, Usage, from_chat, from_responses, limit
from gateway.live.attempter import HttpAttempter
from gateway.live.context import LiveRequest
from gateway.live.relay import end, relay
from gateway.live.stream_head import OpenStream
from gateway.observe.request_log import RequestLog
from gateway.observe.tracing import finish_reasons
from gateway.recovery.billing import bill_answer, checked
from gateway.recovery.continuing import continue_answer
from gateway.recovery.engine import recover
from gateway.recovery.seams import Env, Result
from gateway.resilience.conversation import text_size, tokens_for
from gateway.resilience.decide import DEADLINE_PASSED
from gateway.resilience.failure import Failure

if TYPE_CHECKING:
    from gateway.money.bill import Bill
    from gateway.money.pricing import Price

#: The ``usage`` object of an embeddings answer, from its key: one level of nesting (its
#: details) and a few kilobytes at most (``[^{}]`` never crosses a brace: linear time).
_USAGE = re.compile(rb'"usage"\s*:\s*(\{[^{}]{0,4096}(?:\{[^{}]{0,4096}\}[^{}]{0,4096}){0,8}\})')
#: How many ``"usage"`` strings of an answer are looked at before it is said to have none.
_USAGE_LOOKS = 8
#: Read from the class once (on Python 3.11 ``Endpoint.embeddings`` costs a slow lookup).
_EMBEDDINGS = Endpoint.embeddings


async def answer(
    ctx: LiveRequest, attempter: HttpAttempter, log: RequestLog, env: Env
) -> web.StreamResponse:
    req = ctx.req
    result = await recover(req, log, env, attempter)
    out = result.outcome
    if out.failure is not None:
        return await fail(ctx, attempter, result, log)
    if isinstance(out.stream, OpenStream):
        return await relay(ctx, attempter, out.stream, log, env, result)
    body = out.body
    data = out.json() if ctx.endpoint is not _EMBEDDINGS else None
    model = result.progress.model
    # the usual answer is complete: decided here, without entering the continuation loop
    if ctx.endpoint.continuable and data is not None and req.fmt.cut_at_length(data):
        prefill = ctx.policies.models[model].prefill
        body, data = await continue_answer(attempter, req, result, data, log, env, prefill=prefill)
    else:
        price = ctx.price(model, result.progress.deployment)
        window = ctx.policies.models[model].context_window
        if data is None:
            _bill_embeddings(req.bill, log, body, result.body, price, model, window)
        else:
            bill_answer(req.bill, log, req.fmt, data, result.body, price, model, window=window)
    if log.span is not None and data is not None:
        log.finish_reasons = tuple(finish_reasons(data))
    log.status = 200
    headers = log.headers()
    headers["content-type"] = out.content_type.split(";")[0]
    bill = req.bill
    if bill.unpriced is None:  # what the request cost, recovery included (docs/reference.md)
        headers["x-gateway-cost-usd"] = f"{bill.cost_usd + bill.recovery_cost_usd:.8f}"
    log.ttfb = time.monotonic() - log.started
    return web.Response(body=body, headers=headers)


def _bill_embeddings(
    bill: Bill,
    log: RequestLog,
    body: bytes,
    sent: dict[str, Any],
    price: Price | None,
    model: str,
    window: int | None,
) -> None:
    """Count an embeddings answer: its prompt tokens (:func:`embedding_usage`), checked as
    every answer's are (each input may fill the model's window), else estimated from the
    request ``sent``."""
    inputs = sent.get("input")
    most = limit(window) * (len(inputs) if isinstance(inputs, list) and inputs else 1)
    u = embedding_usage(body)
    if u is None:
        bill.add(embedding_estimate(sent), price, model, False, True)
        return
    u, estimated = checked(log, u, model, most, lambda: embedding_estimate(sent))
    bill.add(u, price, model, False, estimated)


def embedding_usage(body: bytes) -> Usage | None:
    """The prompt tokens of an embeddings answer, wherever its ``usage`` sits, or None
    when it has none. Found by its key from the end (where providers put it), without
    decoding the vectors around it: they hold no ``"`` (numbers, or base64 text), so a
    ``"usage"`` followed by ``:`` is a key. A count that is not one is named invalid."""
    end = len(body)
    for _ in range(_USAGE_LOOKS):
        at = body.rfind(b'"usage"', 0, end)
        if at < 0:
            return None
        m = _USAGE.match(body, at)
        if m is not None:
            try:
                block = orjson.loads(m.group(1))
                other = "prompt_tokens" not in block and "input_tokens" in block
                read = from_responses if other else from_chat
                u = read(block)
            except (orjson.JSONDecodeError, AttributeError, TypeError):
                return Usage(invalid=(INPUT,))  # a usage that is not one: estimated
            return Usage(u.input, invalid=(INPUT,) if INPUT in u.invalid else ())
        end = at
    return None


def embedding_estimate(sent: dict[str, Any]) -> Usage:
    """The prompt tokens of an embeddings request, estimated as a conversation's text is
    (``ceil(size / 4)``); an input given as token ids counts one token each."""
    raw = sent.get("input")
    chars = tokens = 0
    for item in raw if isinstance(raw, list) else (raw,):
        if isinstance(item, str):
            chars += text_size(item)
        elif isinstance(item, list):
            tokens += len(item)
        elif isinstance(item, int):
            tokens += 1
    return Usage(tokens_for(chars, 0) + tokens)


async def fail(
    ctx: LiveRequest, att: HttpAttempter, result: Result, log: RequestLog
) -> web.StreamResponse:
    out = result.outcome
    f = out.failure
    assert f is not None
    log.error = f"{f.category.value}: {result.reason}"
    err = _gateway_error(f, result)
    if att.response is not None:  # already committed (keepalives): only an in-band event is left
        _, etype = exhausted(f.category)
        await att.response.write(
            ctx.endpoint.fmt.stream_error(
                etype,
                err.message if err else f"upstream failed ({f.category.value}): {f.message}"[:500],
                f.code,
            )
        )
        await end(att.response, ctx.live.write_timeout)
        return att.response
    headers = log.headers()
    headers["x-should-retry"] = "false"
    if err is not None:
        log.status = err.status
        headers.update(err.headers)
        headers["content-type"] = "application/json"
        body = err.body_bytes(ctx.endpoint.fmt)
        return web.Response(body=body, status=err.status, headers=headers)
    # The provider answered: pass its body on as it said it. A server-side failure that
    # recovery could not get past is the gateway's 502/503/504 (docs/recovery.md, "What the
    # client sees"), whatever 5xx (or 529) the provider used; everything else keeps the
    # provider's status.
    server_side = out.status >= 500 and f.category.counts_toward_fallback
    status = exhausted(f.category)[0] if server_side else out.status
    log.status = status
    if out.status == 429 and f.category is Category.rate_limit:
        # What the client should honour: the server's hint, else our own rate-limit floor.
        wait = f.retry_after if f.retry_after is not None else ctx.req.policy.retry.rate_limit.base
        headers["retry-after"] = str(max(1, math.ceil(wait)))
    headers["content-type"] = out.content_type.split(";")[0]
    return web.Response(body=out.body, status=status, headers=headers)


def _gateway_error(f: Failure, result: Result) -> GatewayError | None:
    """The gateway's own error for failures it must word itself; None to pass the upstream's."""
    attempts = result.progress.attempts
    if f.category is Category.auth:
        return GatewayError(
            502,
            (
                f"the provider rejected the gateway's credentials for model "
                f"{result.progress.model!r} (HTTP {f.status})"
                if f.status
                else f"the gateway has no usable credentials for model {result.progress.model!r}"
            )
            + "; this is a gateway configuration problem, not your API key",
            type="upstream_auth_error",
            code="upstream_auth_error",
        )
    if f.category is Category.prompt_too_long and result.reason == "prompt_too_long":
        tried = ", ".join(result.progress.tried) or "nothing (no compaction applies)"
        return GatewayError(
            400,
            f"prompt is too long for model {result.progress.model!r} even after recovery "
            f"(tried: {tried}): {f.message}",
            type="invalid_request_error",
            code="context_length_exceeded",
            param="messages",
        )
    if f.status is None or f.status == 0 or result.outcome.status == 0:
        # no HTTP answer to pass on (a connection failure, or an error as the stream's
        # first event): the gateway's own 502, or 504 for a timeout, typed by category
        if result.reason == "deadline" or f.stage == DEADLINE_PASSED:
            status, etype = exhausted(Category.timeout)
            return GatewayError(
                status,
                f"no answer from upstream before the request's deadline "
                f"after {attempts} attempt(s): {f.message}",
                type=etype,
            )
        _, etype = exhausted(f.category)
        status = 504 if f.category is Category.timeout else 502
        return GatewayError(
            status, f"upstream failed after {attempts} attempt(s): {f.message}", type=etype
        )
    if not result.outcome.body:  # nothing to pass on: word it ourselves
        return GatewayError(f.status, f.message or f"upstream answered HTTP {f.status}")
    return None
