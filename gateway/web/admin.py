"""The admin endpoints: ``POST /admin/reload``, ``GET /admin/policies``,
``GET /admin/deployments`` and ``GET /admin/budgets``.

A reload (here, on SIGHUP, or by the file watcher of :mod:`gateway.web.reload`) parses and
validates the whole directory, then swaps the new set in at once; a request keeps the
set it started with. A bad set is rejected whole and the old one keeps serving.

The admin endpoints exist only when ``GATEWAY_ADMIN_KEY`` is set (404 otherwise,
so an unconfigured gateway does not even reveal them) and need
``Authorization: Bearer $GATEWAY_ADMIN_KEY`` (401 otherwise; compared in
constant time).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from gateway import formats
from gateway.errors import GatewayError
from gateway.money import pricing
from gateway.money.budgets import describe
from gateway.web.bearer import bears

if TYPE_CHECKING:
    from gateway.web.gateway import Gateway


def _refused(gw: Gateway, request: web.BaseRequest) -> web.Response | None:
    """404 when the admin endpoints are off, 401 without the admin key, else None."""
    expected = gw.settings.admin_key
    if not expected:
        return web.Response(
            status=404, text="admin endpoints are disabled: set GATEWAY_ADMIN_KEY\n"
        )
    if not bears(request.headers, expected):
        err = GatewayError(401, "admin endpoints need 'Authorization: Bearer $GATEWAY_ADMIN_KEY'")
        return web.Response(
            body=err.body_bytes(formats.DEFAULT),
            status=401,
            headers={
                "www-authenticate": 'Bearer realm="llm-gateway admin"',
                "content-type": "application/json",
            },
        )
    return None


def _snapshot(gw: Gateway) -> dict[str, object]:
    return {
        "policy_dir": str(gw.policy_dir),
        **gw.policies.describe(),  # version, file hashes, providers, models, teams: no keys
        "counts": gw.policies.counts(),
        "last_error": gw.last_reload_error,
        "draining": gw.draining,
        "fallbacks": {
            k: {"active": s.active, "streak": s.streak}
            for k, s in gw.state.fallback_snapshot().items()
        },
    }


async def reload(gw: Gateway, request: web.BaseRequest) -> web.Response:
    """``POST /admin/reload``: 200 with the new set, or 422 with ``last_error`` (old set kept)."""
    if refused := _refused(gw, request):
        return refused
    ok = gw.reload("admin")
    body = {"reloaded": ok, **_snapshot(gw)}
    return web.Response(
        body=orjson.dumps(body), status=200 if ok else 422, content_type="application/json"
    )


async def policies(gw: Gateway, request: web.BaseRequest) -> web.Response:
    """``GET /admin/policies``: the active set's files and hashes, counts, the last reload
    error, and each model's price per deployment with its source (policy, genai-prices or
    none)."""
    if refused := _refused(gw, request):
        return refused
    body = {**_snapshot(gw), "prices": pricing.shown(gw.policies.prices)}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def deployments(gw: Gateway, request: web.BaseRequest) -> web.Response:
    """``GET /admin/deployments``: per model, each deployment's state as this replica sees
    it (up, or cooling down / out / ejected until when and why; in flight here; the last
    error category; short of headroom until; its prompt cache over the last minutes).
    Names only, never a key."""
    if refused := _refused(gw, request):
        return refused
    now = time.time()
    board = gw.env.board
    models = {
        model: {
            "balance": gw.policies.models[model].balance,
            "deployments": _with_cache(
                gw, model, board.describe(model, [d.name for d in deps], now)
            ),
        }
        for model, deps in gw.policies.deployments.items()
    }
    body = {"now": now, "models": models}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _with_cache(gw: Gateway, model: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with each deployment's prompt cache over the last minutes (``cache``: its
    prompt tokens, those read from and written to the cache, and the share read), when it
    answered in them."""
    share, now = gw.events.cache_share, time.monotonic()
    for row in rows:
        seen = share.describe(model, row["deployment"], now)
        if seen is not None:
            row["cache"] = seen
    return rows


async def budgets(gw: Gateway, request: web.BaseRequest) -> web.Response:
    """``GET /admin/budgets``: per team with a budget, its period, what it spent and has
    left, when it resets and its state (``ok`` / ``warned`` / ``spent``), as this replica
    knows it; ``shared``: counted with the other replicas (through Redis)."""
    if refused := _refused(gw, request):
        return refused
    now = time.time()
    teams = describe(gw.state.spending, gw.budgets, now)
    shared = gw.state.shared
    body = {"now": now, "teams": {t: {**b, "shared": shared} for t, b in teams.items()}}
    return web.Response(body=orjson.dumps(body), content_type="application/json")
