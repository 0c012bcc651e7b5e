"""The policy file watcher: reload when the files change, debounced.

Polls the policy directory's fingerprint (path, mtime, size of each policy file: cheap)
and asks :meth:`gateway.web.gateway.Gateway.reload` once a change has settled. SIGHUP and
``POST /admin/reload`` (:mod:`gateway.web.admin`) reload at once.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.web.gateway import Gateway

#: What a directory's policy files look like to the watcher: (relative path, mtime_ns, size).
Fingerprint = tuple[tuple[str, int, int], ...]


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
