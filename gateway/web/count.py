"""``POST /v1/messages/count_tokens``: Anthropic's token count, ``{"input_tokens": N}``.

The caller's key, team, model allowance, route and limits apply as for ``/v1/messages``
(a count takes a request from ``requests_per_minute`` and a ``max_concurrent`` slot, but
no tokens: it produces none). It is free of the team's budget: a provider does not bill
a count, and a count costs the gateway no more than the request's parse (the estimate
reads only the fields a provider counts, :mod:`gateway.resilience.conversation`).
The count is the provider's where a deployment of the model has a count endpoint,
else the gateway's estimate (gateway/live/counting.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.errors import bad_request
from gateway.formats import MESSAGES
from gateway.formats.endpoints import endpoint_of
from gateway.live.counting import CountAttempter, counts, estimate, without_compaction
from gateway.observe.request_log import RequestLog
from gateway.recovery.admission import admit, has_limits, prepare, request_for, resolve
from gateway.recovery.engine import recover
from gateway.web.answer import fail
from gateway.web.handlers import (
    check_passed_headers,
    holding_slot,
    live_request,
    parse_body,
    read_body,
)

if TYPE_CHECKING:
    from gateway.web.gateway import Gateway

PATH = "/v1/messages/count_tokens"
#: The endpoint whose rules a count follows (its body's shape, its routes).
_MESSAGES = endpoint_of(MESSAGES)


def count_tokens(
    gw: Gateway, request: web.BaseRequest, log: RequestLog
) -> Awaitable[web.StreamResponse]:
    """The prompt's input tokens, counted where the model is served or estimated."""
    return holding_slot(gw, request, log, _count)


async def _count(
    gw: Gateway, request: web.BaseRequest, log: RequestLog, team: str
) -> web.StreamResponse:
    policies = gw.policies
    check_passed_headers(request)
    settings = gw.settings
    raw = await read_body(request, settings.max_body_bytes, settings.client_read_timeout_s)
    body = parse_body(raw, _MESSAGES, settings.request_limits)
    if "messages" not in body:
        raise bad_request("messages: Field required", "messages")
    spec, route = resolve(policies, team, body.get("model"), _MESSAGES, _MESSAGES.value, log)
    model: str = body["model"]
    limits = policies.teams[team].limits
    if has_limits(limits):
        await admit(gw.state, team, limits, time.time())
    if not any(counts(policies, d) for d in policies.deployments[model]):
        out = estimate(body)
        log.answered_by = model
    else:
        req = request_for(MESSAGES, body, route, spec.context_window, log.started, request.headers)
        req = await prepare(without_compaction(req), log, gw.env)
        ctx = live_request(gw, policies, request, req, log, _MESSAGES, False)
        attempter = CountAttempter(ctx, log)
        result = await recover(req, log, gw.env, attempter)
        out = result.outcome
        if out.failure is not None:
            return await fail(ctx, attempter, result, log)
    log.status = 200
    headers = log.headers()
    headers.update(out.headers)
    headers["content-type"] = "application/json"
    log.ttfb = time.monotonic() - log.started
    return web.Response(body=out.body, headers=headers)
