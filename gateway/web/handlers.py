"""Thin endpoints: authenticate, parse, route, then hand over to the engine."""

from __future__ import annotations

import gc
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from gateway.errors import GatewayError, bad_request
from gateway.formats.body_parts import decode, restore
from gateway.formats.endpoints import ENDPOINT_OF, Endpoint
from gateway.live.attempter import HttpAttempter
from gateway.live.context import LiveRequest
from gateway.money.bill import Bill
from gateway.observe.request_log import RequestLog
from gateway.providers import PASSED_HEADERS
from gateway.recovery.admission import (
    admit,
    has_limits,
    prepare,
    request_for,
    resolve,
    within_budget,
)
from gateway.recovery.seams import Request
from gateway.routing.policyset import PolicySet
from gateway.settings import RequestLimits
from gateway.upstream.deadlines import Limit
from gateway.web.answer import answer
from gateway.web.bearer import bearer, bears
from gateway.web.shapes import check_parts, check_raw, check_shape

if TYPE_CHECKING:
    from gateway.web.gateway import Gateway

#: Bodies larger than this are parsed with the cyclic GC paused (see parse_body).
_BIG_BODY = 64 * 1024


def client_key(request: web.BaseRequest) -> str | None:
    key = bearer(request.headers)
    if key is None:
        key = request.headers.get("x-api-key")
    key = key or None
    if key is not None and not key.isascii() and not _encodable(key):
        # Header bytes that are not UTF-8 arrive as surrogate escapes: no team owns such a
        # key, and hashing it would raise. Answer 401 like any other unknown key.
        return "\ufffd"
    return key


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def authenticate(gw: Gateway, request: web.BaseRequest) -> str:
    """The caller's team, from its key (any key in demo mode)."""
    policies = gw.policies
    key = client_key(request)
    team = policies.team_for_key(key) if key else None
    if team is None and gw.settings.demo:
        team = policies.default_team
    if team is None:
        what = "no API key" if key is None else "an API key that no team owns"
        raise GatewayError(
            401,
            f"the request has {what}: send your gateway key as 'Authorization: Bearer KEY' "
            "or 'x-api-key: KEY'",
            code="invalid_api_key",
        )
    return team


def check_passed_headers(request: web.BaseRequest) -> None:
    """The provider headers that go upstream must be text: 400 for bytes that are not UTF-8.

    The server decodes header bytes with surrogate escapes; sent on as they are, the
    upstream client cannot encode them and the request would fail with a 500.
    """
    headers = request.headers
    for name in PASSED_HEADERS:  # ``in`` first: most requests have none of them
        if name in headers and not _encodable(headers[name]):
            raise bad_request(f"the {name} header is not valid UTF-8", name)


async def read_body(request: web.BaseRequest, max_bytes: int, read_timeout: float) -> bytes:
    """The request body, read only now (after the key was checked): at most ``max_bytes``
    (413 past it, before reading any of it when ``content-length`` says so) within
    ``read_timeout`` seconds (408). A client that sent ``Expect: 100-continue`` is told
    to go on only here, so a refused request never makes it send its body."""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise _too_large(max_bytes)
    content = request.content
    if content.is_eof():  # the usual case: the body came with the headers, no wait
        data = content.read_nowait()
        if len(data) > max_bytes:  # chunked: no content-length said so first
            raise _too_large(max_bytes)
        return data
    if request.headers.get("expect", "").lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    # One buffer, the pieces let go of as they come: a list of them would hold a large
    # body's megabytes in small blocks, which the C heap keeps once they are freed.
    body = bytearray()
    try:
        with Limit(read_timeout):
            while data := await content.readany():
                if len(body) + len(data) > max_bytes:
                    raise _too_large(max_bytes)
                body += data
                del data
    except TimeoutError:
        raise GatewayError(
            408,
            f"the request body did not arrive within {read_timeout:g} s",
            type="timeout_error",
            code="request_timeout",
            close=True,
        ) from None
    return bytes(body)


def _too_large(max_bytes: int) -> GatewayError:
    return GatewayError(
        413,
        f"request body is larger than the gateway's limit of {max_bytes} bytes",
        code="request_too_large",
        close=True,
    )


def parse_body(raw: bytes, endpoint: Endpoint, limits: RequestLimits) -> dict[str, Any]:
    """The request body, parsed and checked (:mod:`gateway.web.shapes`): a 400 naming the
    field of the wrong type or the limit exceeded, before anything goes upstream."""
    check_raw(raw, limits)  # before parsing: a body of millions of tiny values
    # The cyclic GC would run over and over while orjson and the validation build a big
    # body's objects (none of which can form a cycle): paused, they take a third of the time.
    paused = len(raw) > _BIG_BODY and gc.isenabled()
    if paused:
        gc.disable()
    try:
        try:
            # the long strings of a large body are held apart, copied once, and checked
            # as the marks that stand for them (gateway/formats/body_parts.py): no more copies
            outline, strings = decode(raw)
        except orjson.JSONDecodeError as e:
            raise bad_request(f"the request body is not valid JSON: {e}") from None
        body = _checked(outline, endpoint, limits, len(raw))
        if strings:  # put back; one that has no place (a long key): decoded whole
            restored = restore(body, strings)
            if restored is None:
                body = _checked(orjson.loads(raw), endpoint, limits, len(raw))
            else:  # a long string may be a tool call's arguments, read as JSON
                body = restored
                check_parts(endpoint, body, limits)
    finally:
        if paused:
            gc.enable()
    return body


def _checked(body: Any, endpoint: Endpoint, limits: RequestLimits, size: int) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    check_shape(endpoint, body, limits, size)
    return body


def completion(
    gw: Gateway, request: web.BaseRequest, log: RequestLog
) -> Awaitable[web.StreamResponse]:
    """Every model endpoint: chat, responses, completions, embeddings, messages."""
    return holding_slot(gw, request, log, _completion)


Serve = Callable[["Gateway", web.BaseRequest, RequestLog, str], Awaitable[web.StreamResponse]]


def holding_slot(
    gw: Gateway, request: web.BaseRequest, log: RequestLog, serve: Serve
) -> Awaitable[web.StreamResponse]:
    """``serve`` the caller's team (its key checked first, here: a bad key raises before
    anything is awaited). A team with ``limits.max_concurrent`` holds one of its slots
    (gateway/web/concurrency.py) from the key check, before its body is read, until the
    answer or the stream is done.

    Plain functions, not coroutines: they hand back ``serve``'s own coroutine, so the
    usual request does not pass through two more frames each time it waits."""
    team = log.team = authenticate(gw, request)
    limit = gw.policies.teams[team].limits.max_concurrent
    if limit is None:
        return serve(gw, request, log, team)
    gw.team_slots.take(team, limit)  # 429 at once when they are all taken
    return _in_slot(gw, request, log, team, serve)


async def _in_slot(
    gw: Gateway, request: web.BaseRequest, log: RequestLog, team: str, serve: Serve
) -> web.StreamResponse:
    """``serve`` in the slot its team took; the slot is given back however it ends."""
    try:
        return await serve(gw, request, log, team)
    finally:
        gw.team_slots.give_back(team)


async def _completion(
    gw: Gateway, request: web.BaseRequest, log: RequestLog, team: str
) -> web.StreamResponse:
    path = request.path  # the endpoint's value (``endpoint.value`` is a slow property on 3.11)
    endpoint = ENDPOINT_OF[path]
    policies = gw.policies  # one consistent set for the whole request (as authenticate's)
    check_passed_headers(request)
    settings = gw.settings
    # The raw bytes are not kept: a stream would hold them beside the decoded body for as
    # long as it runs, and prompts run to megabytes.
    raw = await read_body(request, settings.max_body_bytes, settings.client_read_timeout_s)
    size = len(raw)
    body = parse_body(raw, endpoint, settings.request_limits)
    del raw
    spec, route = resolve(policies, team, body.get("model"), endpoint, path, log)
    if gw.sim_url is None and policies.uses_sim:
        await gw.ensure_sim()  # a reload added the built-in sim provider
    team_spec = policies.teams[team]
    limits, budget = team_spec.limits, team_spec.budget
    if budget is not None:  # refused, or served by a downgrade model, once spent
        asked = (spec, route, body)
        book, now = gw.state.spending, time.time()
        spec, route, body = within_budget(policies, book, budget, asked, endpoint, path, log, now)
    limited = has_limits(limits)
    bill = log.bill = Bill()  # added to as parts are billed; the access log reports it
    try:
        if limited:
            await admit(gw.state, team, limits, time.time())
        req = request_for(  # by position: keywords would build a dict of them
            endpoint.fmt, body, route, spec.context_window, log.started, request.headers, size,
            bill,
        )  # fmt: skip
        req = await prepare(req, log, gw.env)
        stream = body.get("stream") is True
        ctx = LiveRequest(  # by position (keywords would build a dict of them)
            gw.live, policies, endpoint, request, req, stream, log.request_id,
            None if log.span is None else gw.tracing, log.traceparent,
        )  # fmt: skip
        return await answer(ctx, HttpAttempter(ctx, log), log, gw.env)
    finally:  # what the request cost and used, also when it failed or its client left
        if budget is not None and (cost := bill.cost()):
            gw.state.charge(team, budget, cost, time.time())
        if limited and (tokens := bill.tokens()):  # the answer's and the recovery's
            await gw.state.add_tokens(team, limits, tokens, time.time())


def live_request(
    gw: Gateway,
    policies: PolicySet,
    request: web.BaseRequest,
    req: Request,
    log: RequestLog,
    endpoint: Endpoint,
    stream: bool,
) -> LiveRequest:
    """The live path's context of a request to ``endpoint`` under ``policies`` (the set
    the request began with), on the gateway's parts (its upstream client, events, tracing).
    Called by position: keywords would build a dict of them."""
    return LiveRequest(
        gw.live,
        policies,
        endpoint,
        request,
        req,
        stream,
        log.request_id,
        None if log.span is None else gw.tracing,
        log.traceparent,
    )


async def models(gw: Gateway, request: web.BaseRequest, log: RequestLog) -> web.Response:
    """The models the caller's team may use, in a list both OpenAI and Anthropic SDKs read."""
    team = authenticate(gw, request)
    names = gw.policies.team_models(team)
    data = [
        {
            "id": n,
            "object": "model",
            "created": 0,
            "owned_by": gw.policies.models[n].providers[0],
            "type": "model",
            "display_name": n,
            "created_at": "1970-01-01T00:00:00Z",
        }
        for n in names
    ]
    log.team = team
    log.status = 200
    body = {
        "object": "list",
        "data": data,
        "has_more": False,
        "first_id": names[0] if names else None,
        "last_id": names[-1] if names else None,
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def root(gw: Gateway, request: web.BaseRequest) -> web.Response:
    return web.Response(text="llm-gateway\n")


async def healthz(gw: Gateway, request: web.BaseRequest) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(gw: Gateway, request: web.BaseRequest) -> web.Response:
    if gw.draining:
        gw.drain_reported = True  # whoever routes by readiness has been told (drain.py)
        return web.Response(status=503, text="draining\n")
    if not gw.credentials.started:  # the first cloud tokens, for a few seconds at most
        return web.Response(status=503, text="starting\n")
    return web.Response(text="ready\n")


async def metrics(gw: Gateway, request: web.BaseRequest) -> web.Response:
    """Prometheus text; with ``GATEWAY_METRICS_TOKEN`` set, only for its bearer."""
    token = gw.settings.metrics_token
    if token and not bears(request.headers, token):
        return web.Response(
            status=401,
            text="401: /metrics needs 'Authorization: Bearer $GATEWAY_METRICS_TOKEN'\n",
            headers={"www-authenticate": 'Bearer realm="llm-gateway metrics"'},
        )
    gw.metrics.state_degraded.set(1 if getattr(gw.state, "degraded", False) else 0)
    body, content_type = gw.metrics.render()
    return web.Response(body=body, headers={"content-type": content_type})
