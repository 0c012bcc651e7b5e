"""Policy reload (file watch, SIGHUP, ``POST /admin/reload``) and the admin endpoints.

A reload parses and validates the whole directory, then swaps the new set in at
once; a request keeps the set it started with. A bad set is rejected whole and
the old one keeps serving.
"""

from __future__ import annotations

import asyncio
import hmac
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from gateway.errors import GatewayError
from gateway.state_keys import GATEWAY

if TYPE_CHECKING:
    from gateway.app import Gateway

WATCH_INTERVAL_S = 1.0


def _require_admin(request: web.Request) -> Gateway:
    gw = request.app[GATEWAY]
    expected = gw.settings.admin_key
    if not expected:
        raise web.HTTPNotFound(text="admin endpoints are disabled: set GATEWAY_ADMIN_KEY\n")
    auth = request.headers.get("authorization", "")
    given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    if not hmac.compare_digest(given.encode(), expected.encode()):
        err = GatewayError(401, "admin endpoints need 'Authorization: Bearer $GATEWAY_ADMIN_KEY'")
        raise web.HTTPUnauthorized(body=err.body_bytes("openai"), content_type="application/json")
    return gw


def _snapshot(gw: Gateway) -> dict[str, object]:
    return {
        "policy_dir": str(gw.policy_dir),
        "files": dict(gw.policies.files),
        "counts": gw.policies.counts(),
        "last_error": gw.last_reload_error,
        "fallbacks": {
            k: {"active": s.active, "streak": s.streak}
            for k, s in gw.state.fallback_snapshot().items()
        },
    }


async def reload(request: web.Request) -> web.Response:
    gw = _require_admin(request)
    ok = gw.reload("admin")
    body = {"reloaded": ok, **_snapshot(gw)}
    return web.Response(
        body=orjson.dumps(body), status=200 if ok else 422, content_type="application/json"
    )


async def policies(request: web.Request) -> web.Response:
    gw = _require_admin(request)
    return web.Response(body=orjson.dumps(_snapshot(gw)), content_type="application/json")


def fingerprint(root: Path) -> tuple[tuple[str, int, int], ...]:
    """What changes when any policy file changes (path, mtime, size), cheap to compute."""
    out = []
    for p in sorted(root.rglob("*")):
        if p.suffix in (".yaml", ".yml") and p.is_file():
            st = p.stat()
            out.append((str(p), st.st_mtime_ns, st.st_size))
    return tuple(out)


async def watch(gw: Gateway, interval: float = WATCH_INTERVAL_S) -> None:
    """Reload when the policy files change; debounced: the change must hold for one interval."""
    seen = fingerprint(gw.policy_dir)
    pending: tuple[tuple[str, int, int], ...] | None = None
    while True:
        await asyncio.sleep(interval)
        try:
            now = fingerprint(gw.policy_dir)
        except OSError:
            continue
        if now == seen:
            pending = None
        elif now == pending:
            seen, pending = now, None
            gw.reload("file_change")
        else:
            pending = now
