"""Request id, access log, in-flight gauge, and errors rendered in the caller's API format."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.errors import GatewayError
from gateway.observe.events import RequestLog
from gateway.providers import Endpoint
from gateway.state_keys import GATEWAY, LOG

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
# New request ids: a random per-process prefix and a counter (uuid4 costs a system call).
_ID_PREFIX = os.urandom(8).hex()
_ids = itertools.count(1)


def _format_of(path: str) -> str:
    return "anthropic" if path.startswith("/v1/messages") else "openai"


def error_response(err: GatewayError, path: str, log: RequestLog | None) -> web.Response:
    headers = dict(err.headers)
    if log is not None:
        log.status = err.status
        log.error = err.code or err.type or str(err.status)
        headers.update(log.headers())
    resp = web.Response(
        body=err.body_bytes(_format_of(path)),
        status=err.status,
        headers=headers,
        content_type="application/json",
    )
    if err.status in (408, 413):
        resp.force_close()  # the rest of the body was not read: no keep-alive
    return resp


async def _send_and_close(request: web.Request, resp: web.Response) -> web.Response:
    """Answer, then end our side of the connection at once (FIN), so the client sees the
    whole answer and EOF without waiting. aiohttp then reads and drops whatever the client
    still sends for at most its ``lingering_time`` (10 s) before closing: closing with
    unread input would send a RST that can destroy the answer in flight."""
    resp.force_close()
    await resp.prepare(request)
    await resp.write_eof()
    transport = request.transport
    if transport is not None and transport.can_write_eof():
        transport.write_eof()
    return resp


@web.middleware
async def gateway_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith("/v1/"):
        return await handler(request)
    gw = request.app[GATEWAY]
    rid = request.headers.get("x-request-id", "")
    if not (rid and _REQUEST_ID.match(rid)):
        rid = f"{_ID_PREFIX}{next(_ids):08x}"
    log = RequestLog(rid, time.monotonic())
    request[LOG] = log
    gw.metrics.inflight.inc()
    try:
        return await handler(request)
    except GatewayError as err:
        resp = error_response(err, request.path, log)
        if err.status == 408:  # a slow client (see handlers.read_body)
            return await _send_and_close(request, resp)
        return resp
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed) as e:
        paths = ", ".join(f"POST {ep.value}" for ep in Endpoint) + ", GET /v1/models"
        unknown = GatewayError(
            e.status,
            f"{request.method} {request.path} is not an endpoint of "
            f"this gateway; it serves {paths}",
            code="unknown_endpoint",
        )
        return error_response(unknown, request.path, log)
    except web.HTTPRequestEntityTooLarge:
        limit = gw.settings.max_body_bytes
        too_large = GatewayError(
            413, f"request body is larger than the gateway's limit of {limit} bytes"
        )
        return error_response(too_large, request.path, log)
    except asyncio.CancelledError:
        # The client left and aiohttp cancelled the handler.
        log.status = 499
        gw.events.client_disconnected(log)
        raise
    except ConnectionError:
        # The client left while we were writing to it, before aiohttp cancelled the handler
        # (aiohttp's ClientConnectionResetError is a ConnectionResetError). Re-raised, aiohttp
        # would log "Error handling request" and try a 500; returned, its write fails and
        # aiohttp drops the connection quietly as a premature disconnection.
        log.status = 499
        gw.events.client_disconnected(log)
        return web.Response(status=499)
    finally:
        gw.metrics.inflight.dec()
        if log.status == 0:
            log.status = 500
        gw.events.request_completed(log, time.monotonic())
