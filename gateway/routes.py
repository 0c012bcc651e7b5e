"""Which handler answers a request, and what every ``/v1/`` request gets around it:
a request id, the access log, the in-flight gauge, errors in the caller's API format."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gateway import admin, handlers
from gateway.errors import GatewayError
from gateway.observe.events import RequestLog
from gateway.providers import Endpoint
from gateway.server import Request, Response, StreamResponse

if TYPE_CHECKING:
    from gateway.app import Gateway

Answer = Response | StreamResponse
Handler = Callable[["Gateway", Request], Awaitable[Answer]]
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
# New request ids: a random per-process prefix and a counter (uuid4 costs a system call).
_ID_PREFIX = os.urandom(8).hex()
_ids = itertools.count(1)

ROUTES: dict[str, dict[str, Handler]] = {
    **{ep.value: {"POST": handlers.completion} for ep in Endpoint},
    "/v1/models": {"GET": handlers.models},
    "/": {"GET": handlers.root},
    "/healthz": {"GET": handlers.healthz},
    "/readyz": {"GET": handlers.readyz},
    "/metrics": {"GET": handlers.metrics},
    "/admin/reload": {"POST": admin.reload},
    "/admin/policies": {"GET": admin.policies},
}
_ENDPOINTS = ", ".join(f"POST {ep.value}" for ep in Endpoint) + ", GET /v1/models"


def _format_of(path: str) -> str:
    return "anthropic" if path.startswith("/v1/messages") else "openai"


def error_response(err: GatewayError, path: str, log: RequestLog | None) -> Response:
    headers = dict(err.headers)
    if log is not None:
        log.status = err.status
        log.error = err.code or err.type or str(err.status)
        headers.update(log.headers())
    resp = Response(
        body=err.body_bytes(_format_of(path)),
        status=err.status,
        headers=headers,
        content_type="application/json",
    )
    if err.status in (408, 413):
        resp.force_close()  # the rest of the body was not read: no keep-alive
    return resp


def _find(request: Request) -> Handler | GatewayError:
    methods = ROUTES.get(request.path)
    if methods is not None:
        handler = methods.get("GET" if request.method == "HEAD" else request.method)
        if handler is not None:
            return handler
        status = 405
    else:
        status = 404
    return GatewayError(
        status,
        f"{request.method} {request.path} is not an endpoint of this gateway; "
        f"it serves {_ENDPOINTS}",
        code="unknown_endpoint",
    )


def make_handler(gw: Gateway) -> Callable[[Request], Awaitable[Answer]]:
    """The server's one handler: route, then answer."""

    async def handle(request: Request) -> Answer:
        if request.path.startswith("/v1/"):
            return await _v1(gw, request)
        found = _find(request)
        if isinstance(found, GatewayError):
            phrase = "Not Found" if found.status == 404 else "Method Not Allowed"
            return Response(text=f"{found.status}: {phrase}\n", status=found.status)
        return await found(gw, request)

    return handle


async def _v1(gw: Gateway, request: Request) -> Answer:
    rid = request.headers.get("x-request-id", "")
    if not (rid and _REQUEST_ID.match(rid)):
        rid = f"{_ID_PREFIX}{next(_ids):08x}"
    log = request.log = RequestLog(rid, time.monotonic())
    gw.metrics.inflight.inc()
    answered = False
    try:
        if request.rejected is not None:  # the server refused the body (413, 408)
            status, message = request.rejected
            raise GatewayError(
                status,
                message,
                type="timeout_error" if status == 408 else None,
                code="request_timeout" if status == 408 else None,
            )
        found = _find(request)
        if isinstance(found, GatewayError):
            raise found
        answer = await found(gw, request)
        answered = True
        return answer
    except GatewayError as err:
        answered = True
        return error_response(err, request.path, log)
    except asyncio.CancelledError:
        # The client left and the server cancelled the handler.
        log.status = 499
        gw.events.client_disconnected(log)
        raise
    except ConnectionError:
        # The client left while we were writing to it.
        log.status = 499
        gw.events.client_disconnected(log)
        resp = Response(status=499)
        resp.force_close()
        return resp
    finally:
        gw.metrics.inflight.dec()
        if log.status == 0:
            log.status = 500
        if answered:  # the access log and metrics once the answer is out: no added latency
            request.after = lambda: gw.events.request_completed(log, time.monotonic())
        else:
            gw.events.request_completed(log, time.monotonic())
