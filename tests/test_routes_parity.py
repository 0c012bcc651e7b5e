"""The gateway's route table (gateway/web/routes.py: dict lookups in place of aiohttp's
router, a speed seam of docs/performance.md) finds what aiohttp's ``UrlDispatcher`` finds
for the same routes: the same handler, 404 or 405 (with the same allowed methods), for
every path and method of a table that includes the near misses."""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from gateway.errors import GatewayError
from gateway.web import routes

pytestmark = pytest.mark.fast

PLAIN = {**routes.ROUTES, **routes.METRICS}
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")
NEAR_MISSES = (
    "/v1/unknown", "/v1/chat/completions/", "/v1/Chat/Completions", "/v1/models/x", "/v1",
    "/v1/", "/healthz/", "/HEALTHZ", "/healthzz", "/metricsx", "/admin", "/admin/", "",
    "/v1/chat/completions%20", "/%68ealthz", "/v1/chat%2Fcompletions", "//healthz",
    "/v1//chat/completions", "/readyz;x", "/v1/messages/../models", "/./healthz",
    "/admin%2Freload", "/admin%2fpolicies", "/v1/ch%61t/completions", "/metrics%25",
)  # fmt: skip
PATHS = (*routes.V1, *PLAIN, *NEAR_MISSES)


def dispatcher() -> web.UrlDispatcher:
    """aiohttp's router with the gateway's routes, GET also answering HEAD (``add_get``).
    Some of the gateway's handlers are plain functions that return their coroutine (the
    model endpoints: one frame less per request); aiohttp's router warns of those, which
    does not matter here: it only resolves paths, the gateway never registers them."""
    d = web.UrlDispatcher()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for path, methods in {**routes.V1, **PLAIN}.items():
            for method, handler in methods.items():
                if method == "GET":
                    d.add_get(path, handler)
                else:
                    d.add_route(method, path, handler)
    return d


async def aiohttp_says(d: web.UrlDispatcher, request: web.Request) -> tuple[Any, ...]:
    """(handler,) or (status, allowed methods) as aiohttp's router resolves ``request``."""
    match = await d.resolve(request)
    exc = match.http_exception
    if exc is None:  # a plain function's async wrapper names the function it wraps
        return (getattr(match.handler, "__wrapped__", match.handler),)
    allowed = getattr(exc, "allowed_methods", set())
    return (exc.status, frozenset(allowed))


def allow(headers: Any) -> frozenset[str]:
    return frozenset(m.strip() for m in headers.get("allow", "").split(",") if m.strip())


async def gateway_says(request: web.Request) -> tuple[Any, ...]:
    """(handler,) or (status, allowed methods) as the gateway's one handler routes it: the
    ``/v1/`` table, or the plain table through ``make_handler`` with handlers that answer
    who they are."""
    path = routes._route_path(request)
    if path.startswith("/v1/"):
        try:
            return (routes._v1_handler(request, path),)
        except GatewayError as e:
            return (e.status, allow(e.headers))

    def answers(handler: Any) -> Any:
        async def who(_gw: Any, _req: Any) -> web.StreamResponse:
            resp = web.Response()
            resp.handler = handler  # type: ignore[attr-defined]
            return resp

        return who

    table = {p: {m: answers(h) for m, h in ms.items()} for p, ms in PLAIN.items()}
    handle = routes.make_handler(SimpleNamespace(draining=False), table)  # type: ignore[arg-type]
    resp = await handle(request)
    found = getattr(resp, "handler", None)
    return (found,) if found is not None else (resp.status, allow(resp.headers))


@pytest.mark.parametrize("path", PATHS)
async def test_the_route_table_resolves_as_aiohttps_router(path: str) -> None:
    """Same handler, or same 404 / 405 and allowed methods, for every method on ``path``."""
    d = dispatcher()
    for method in METHODS:
        request = make_mocked_request(method, path or "/")
        want = await aiohttp_says(d, request)
        got = await gateway_says(request)
        assert got == want, (method, path)


async def test_the_table_has_every_route() -> None:
    """The parity table covers each route the gateway serves, and finds a handler for it."""
    d = dispatcher()
    found = 0
    for path in (*routes.V1, *PLAIN):
        for method in METHODS:
            (what, *_) = await aiohttp_says(d, make_mocked_request(method, path))
            found += callable(what)
    served = sum(len(m) + ("GET" in m) for m in (*routes.V1.values(), *PLAIN.values()))
    assert found == served
