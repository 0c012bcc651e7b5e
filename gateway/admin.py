"""Policy reload (file watch, SIGHUP, ``POST /admin/reload``) and the admin endpoints.

A reload parses and validates the whole directory, then swaps the new set in at
once; a request keeps the set it started with. A bad set is rejected whole and
the old one keeps serving.

The admin endpoints exist only when ``GATEWAY_ADMIN_KEY`` is set (404 otherwise,
so an unconfigured gateway does not even reveal them) and need
``Authorization: Bearer $GATEWAY_ADMIN_KEY`` (401 otherwise; compared in
constant time).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.app import Gateway

#: What a directory's policy files look like to the watcher: (relative path, mtime_ns, size).
Fingerprint = tuple[tuple[str, int, int], ...]


def _refused(gw: Gateway, request: web.BaseRequest) -> web.Response | None:
    """404 when the admin endpoints are off, 401 without the admin key, else None."""
    expected = gw.settings.admin_key
    if not expected:
        return web.Response(
            status=404, text="admin endpoints are disabled: set GATEWAY_ADMIN_KEY\n"
        )
    auth = request.headers.get("authorization", "")
    given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    if not hmac.compare_digest(given.encode("utf-8", "backslashreplace"), expected.encode("utf-8")):
        err = GatewayError(401, "admin endpoints need 'Authorization: Bearer $GATEWAY_ADMIN_KEY'")
        return web.Response(
            body=err.body_bytes("openai"),
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
    """``GET /admin/policies``: the active set's files and hashes, counts, the last reload error."""
    if refused := _refused(gw, request):
        return refused
    return web.Response(body=orjson.dumps(_snapshot(gw)), content_type="application/json")


def _policy_paths(root: Path) -> list[tuple[str, Path]]:
    """The files the loader reads, by relative path (hidden files and folders skipped)."""
    if root.is_file():
        return [(root.name, root)]
    found: list[tuple[str, Path]] = []
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue  # e.g. the ..data folders of a Kubernetes ConfigMap mount
        if p.suffix in (".yaml", ".yml") and p.is_file():
            found.append((rel.as_posix(), p))
    return sorted(found)


def fingerprint(root: Path) -> Fingerprint:
    """What changes when any policy file changes (path, mtime, size), cheap to compute."""
    out = []
    for rel, p in _policy_paths(root):
        st = p.stat()  # follows symlinks, so a swapped ConfigMap target shows
        out.append((rel, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _content_hashes(root: Path) -> dict[str, str]:
    """sha256 per file, as :attr:`PolicySet.files` holds them."""
    return {rel: hashlib.sha256(p.read_bytes()).hexdigest() for rel, p in _policy_paths(root)}


def _active_already(gw: Gateway) -> bool:
    """True when the files hold exactly the active set (e.g. SIGHUP already loaded them)."""
    if gw.last_reload_error is not None:
        return False  # reload so that the error clears (or is reported again)
    try:
        return _content_hashes(gw.policy_dir) == dict(gw.policies.files)
    except OSError:
        return False


async def watch(gw: Gateway, interval: float | None = None) -> None:
    """Reload when the policy files change, debounced.

    The directory is polled every ``interval`` seconds (``GATEWAY_RELOAD_WATCH_S``;
    0 turns the watcher off). A change is loaded once the fingerprint has held still
    for one whole interval, so an editor's partial writes are never loaded and a
    storm of writes gives one reload after it settles: at most one reload per two
    intervals. A settled change whose content is already active (a SIGHUP or
    ``/admin/reload`` loaded it) is not loaded a second time.
    """
    if interval is None:
        interval = gw.settings.reload_watch_s
    if interval <= 0:
        return
    seen: Fingerprint | None = None  # unknown: the first settled look compares contents
    pending: Fingerprint | None = None
    while True:
        await asyncio.sleep(interval)
        try:
            now = fingerprint(gw.policy_dir)
        except OSError:
            continue  # a file vanished while we looked; look again next time
        if now == seen:
            pending = None
        elif now == pending:
            seen, pending = now, None
            if not _active_already(gw):
                gw.reload("file_change")
        else:
            pending = now
