"""Which handler answers a request, and what every ``/v1/`` request gets around it:
a request id, the access log, the in-flight gauge, errors in the caller's API format.

This is the one handler of aiohttp's low-level ``web.Server`` (``gateway/web/gateway.py``): a
dict lookup instead of aiohttp's router and middleware chain, which the gateway's
handful of fixed paths does not need.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from aiohttp import web

from gateway import formats
from gateway.errors import ClientStalled, GatewayError
from gateway.formats.endpoints import Endpoint
from gateway.observe.request_log import RequestLog
from gateway.upstream.deadlines import Limit
from gateway.web import admin, count, handlers
from gateway.web.listener import GUARDS

if TYPE_CHECKING:
    from gateway.web.gateway import Gateway

Handler = Callable[["Gateway", web.BaseRequest], Awaitable[web.StreamResponse]]
V1Handler = Callable[["Gateway", web.BaseRequest, RequestLog], Awaitable[web.StreamResponse]]
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
# New request ids: a random per-process prefix and a counter (uuid4 costs a system call).
_ID_PREFIX = os.urandom(8).hex()
_ids = itertools.count(1)


def _new_id_prefix() -> None:
    global _ID_PREFIX, _ids
    _ID_PREFIX, _ids = os.urandom(8).hex(), itertools.count(1)


os.register_at_fork(after_in_child=_new_id_prefix)  # workers are forked: gateway/web/workers.py
#: A complete answer larger than this is written inside the handler, bounded by the
#: client write timeout (smaller ones fit the socket buffers and never wait).
_BIG_ANSWER = 256 * 1024

V1: dict[str, dict[str, V1Handler]] = {
    **{ep.value: {"POST": handlers.completion} for ep in Endpoint},
    count.PATH: {"POST": count.count_tokens},
    "/v1/models": {"GET": handlers.models},
}
ROUTES: dict[str, dict[str, Handler]] = {
    "/": {"GET": handlers.root},
    "/healthz": {"GET": handlers.healthz},
    "/readyz": {"GET": handlers.readyz},
    "/admin/reload": {"POST": admin.reload},
    "/admin/policies": {"GET": admin.policies},
    "/admin/deployments": {"GET": admin.deployments},
    "/admin/budgets": {"GET": admin.budgets},
}
METRICS: dict[str, dict[str, Handler]] = {"/metrics": {"GET": handlers.metrics}}
_ENDPOINTS = ", ".join(f"POST {p}" for p in (*Endpoint, count.PATH)) + ", GET /v1/models"


def error_response(err: GatewayError, path: str, log: RequestLog | None) -> web.Response:
    headers = dict(err.headers)
    if log is not None:
        log.status = err.status
        log.error = err.code or err.type or str(err.status)
        headers.update(log.headers())
    headers["content-type"] = "application/json"
    resp = web.Response(
        body=err.body_bytes(formats.of_path(path)), status=err.status, headers=headers
    )
    if err.close:
        resp.force_close()  # the rest of the body was not read: no keep-alive
    return resp


def _method_of(request: web.BaseRequest) -> str:
    return "GET" if request.method == "HEAD" else request.method


def make_handler(
    gw: Gateway, routes: dict[str, dict[str, Handler]], *, api: bool = True
) -> Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]:
    """The server's one handler: route, then answer. ``routes`` are the plain paths this
    listener serves (``/metrics`` joins them unless it has a port of its own); ``api``:
    it serves the ``/v1/`` endpoints too (not on the metrics port: 404 there)."""

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        guard = GUARDS.get(request.transport)
        if guard is not None:
            guard.begin()  # the head is in: the connection's bytes are the body's now
        try:
            path = _route_path(request)
            if api and path.startswith("/v1/"):
                return await _v1(gw, request, path)
            methods = routes.get(path)
            if methods is None:
                return web.Response(status=404, text="404: Not Found\n")
            handler = methods.get(_method_of(request))
            if handler is None:
                return web.Response(
                    status=405, text="405: Method Not Allowed\n", headers=_allow(methods)
                )
            resp = await handler(gw, request)
            if gw.draining:
                resp.force_close()
            return resp
        finally:
            if guard is not None:
                guard.end()

    return handle


def _route_path(request: web.BaseRequest) -> str:
    """The path the tables match, as aiohttp's router matches it: decoded, but an encoded
    ``/`` or ``%`` kept encoded (yarl's ``path_safe``), so ``/admin%2Freload`` is no route
    (tests/test_routes_parity.py)."""
    return request.rel_url.path_safe if "%" in request.raw_path else request.path


def _allow(methods: Mapping[str, object]) -> dict[str, str]:
    """The ``allow`` header of a 405: the path's methods (HEAD wherever GET is)."""
    names = [*methods, "HEAD"] if "GET" in methods else list(methods)
    return {"allow": ", ".join(names)}


def _v1_handler(request: web.BaseRequest, path: str) -> V1Handler:
    methods = V1.get(path)
    if methods is None:
        raise GatewayError(
            404,
            f"{request.method} {request.path} is not an endpoint of this gateway; "
            f"it serves {_ENDPOINTS}",
            code="unknown_endpoint",
        )
    handler = methods.get(_method_of(request))
    if handler is None:  # the gateway's own answer, not the provider's
        raise GatewayError(
            405,
            f"{request.method} is not allowed on {request.path}; "
            f"use {' or '.join(methods)} (it serves {_ENDPOINTS})",
            type="invalid_request_error",
            code="method_not_allowed",
            headers=_allow(methods),
        )
    return handler


async def _v1(gw: Gateway, request: web.BaseRequest, path: str) -> web.StreamResponse:
    rid = request.headers.get("x-request-id", "")
    if not (rid and _REQUEST_ID.match(rid)):
        rid = f"{_ID_PREFIX}{next(_ids):08x}"
    log = RequestLog(rid, time.monotonic(), path)  # by position: a keyword costs a dict
    if gw.tracing is not None:
        gw.tracing.request(request.method, request.path, request.headers, log)
    gw.request_started()
    answered = False
    try:
        resp = await _v1_handler(request, path)(gw, request, log)
        if gw.draining:
            resp.force_close()  # keep-alive connections close after their answer
        if isinstance(resp, web.Response) and not resp.prepared:
            body = resp.body
            if isinstance(body, bytes) and len(body) > _BIG_ANSWER:
                await _write_bounded(request, resp, gw.settings.client_write_timeout_s)
        answered = True
        return resp
    except GatewayError as err:
        answered = True
        resp = error_response(err, request.path, log)
        if err.close:  # answered before the body was read: the client sees EOF at once
            with contextlib.suppress(ConnectionError):
                await resp.prepare(request)
                await resp.write_eof()
                t = request.transport
                if t is not None and t.can_write_eof():
                    t.write_eof()  # aiohttp still drains what arrives, then closes
        return resp
    except asyncio.CancelledError:
        # The client left and aiohttp cancelled the handler.
        log.status = 499
        gw.events.client_disconnected(log)
        raise
    except ConnectionError:
        # The client left (or stopped reading) while we were writing to it.
        log.status = 499
        gw.events.client_disconnected(log)
        resp = web.Response(status=499)
        resp.force_close()
        return resp
    finally:
        gw.request_finished()
        log.close()
        if answered:  # the access log and metrics once the answer is out: no added latency
            asyncio.get_running_loop().call_soon(_completed, gw, log)
        else:
            _completed(gw, log)


def _completed(gw: Gateway, log: RequestLog) -> None:
    gw.events.request_completed(log, time.monotonic())
    if log.span is not None and gw.tracing is not None:
        gw.tracing.finish(log)


async def _write_bounded(request: web.BaseRequest, resp: web.Response, seconds: float) -> None:
    """Write a large complete answer now; a client that takes none of it for ``seconds``
    is gone (its connection is dropped, and what it did not read with it)."""
    try:
        with Limit(seconds):
            await resp.prepare(request)
            await resp.write_eof()
    except TimeoutError:
        if request.transport is not None:
            request.transport.abort()
        raise ClientStalled(f"the client read nothing for {seconds:g} s") from None
