"""The composition root: ``create_app`` wires settings, policies, upstream, state and events.

No request logic lives here. ``serve`` runs the app with graceful drain: on
SIGTERM/SIGINT ``/readyz`` turns 503 at once, new requests are still served for
``min(5, grace/3)`` s (so load balancers can notice), then the listener closes and
in-flight requests and streams get up to ``GATEWAY_SHUTDOWN_GRACE_S`` to finish;
streams still running then end with an error event; the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from gateway import admin, handlers, streaming
from gateway.engine import Env
from gateway.middlewares import gateway_middleware
from gateway.observe import logs
from gateway.observe.events import Events
from gateway.observe.metrics import Metrics
from gateway.policy.load import PolicyError, Problem, bundled_policy_dir, load_policy_dir
from gateway.policy.policyset import PolicySet
from gateway.providers import Endpoint
from gateway.settings import GatewaySettings
from gateway.state import open_state
from gateway.state.base import StateBackend
from gateway.state_keys import GATEWAY
from gateway.upstream import Upstream

log = structlog.get_logger("gateway")


class Gateway:
    """Everything a request needs, held by the app under one typed key."""

    def __init__(self, settings: GatewaySettings, policies: PolicySet, metrics: Metrics) -> None:
        self.settings = settings
        self.policies = policies
        self.policy_dir = policy_dir_of(settings)
        self.metrics = metrics
        self.events = Events(metrics)
        self.upstream = Upstream()
        self.state: StateBackend = open_state("")
        self.sim_url: str | None = None
        self._sim: Any = None  # the SimProvider, once started
        self.draining = False
        # Streams being relayed: (response, endpoint). A drain that runs out of time ends
        # each with its error event, so no client sees a stream cut silently.
        self.streams: set[tuple[web.StreamResponse, Endpoint]] = set()
        self.last_reload_error: str | None = None
        self.env = Env(self.state, self.events, time.monotonic, time.time, random.Random())

    def reload(self, trigger: str) -> bool:
        """Load the policy dir again and swap it in whole; on any problem keep the old set.

        Synchronous on purpose: the swap is one assignment with no await around it, so a
        request (which reads ``self.policies`` once, at its start) sees either the old
        set or the new one, never a mix, and keeps it to its end.
        """
        new, problems = self._load()
        if new is None:
            self.last_reload_error = "\n".join(str(p) for p in problems)
            for p in problems:
                self.events.policy_rejected(p.file, p.line, p.message, trigger)
            self.events.policy_reload_rejected()
            return False
        self.policies = new
        self.last_reload_error = None
        self.events.policy_reloaded(len(new.files), trigger)
        return True

    def _load(self) -> tuple[PolicySet | None, list[Problem]]:
        try:
            new = load_policy_dir(self.policy_dir)
        except PolicyError as e:
            return None, e.problems
        except Exception as e:  # never let a reload take the process down
            return None, [Problem(self.policy_dir.as_posix(), 0, f"cannot load: {e!r}")]
        return new, []

    async def ensure_sim(self) -> str:
        """Start the built-in sim provider on first use (also when a reload adds one)."""
        if self._sim is None:
            from gateway.providers.sim import SimProvider

            sim = SimProvider()
            await sim.start()
            if self._sim is None:
                self._sim = sim
                self.sim_url = sim.url
            else:  # started concurrently by another request
                await sim.stop()
        assert self.sim_url is not None
        return self.sim_url


def policy_dir_of(settings: GatewaySettings) -> Path:
    """The policy dir; in demo mode with no dir of its own, the bundled policies."""
    path = Path(settings.policy_dir)
    if settings.demo and not path.is_dir():
        return bundled_policy_dir()
    return path


def create_app(
    settings: GatewaySettings | None = None,
    *,
    policies: PolicySet | None = None,
    metrics: Metrics | None = None,
) -> web.Application:
    """Build the application; policies are loaded now, so a bad set fails here, not later."""
    settings = settings or GatewaySettings()
    if policies is None:
        policies = load_policy_dir(policy_dir_of(settings))
    gw = Gateway(settings, policies, metrics or Metrics())
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[gateway_middleware])
    app[GATEWAY] = gw
    for endpoint in Endpoint:
        app.router.add_post(endpoint.value, handlers.completion)
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_get("/", handlers.root)  # also answers HEAD
    app.router.add_get("/healthz", handlers.healthz)
    app.router.add_get("/readyz", handlers.readyz)
    app.router.add_get("/metrics", handlers.metrics)
    app.router.add_post("/admin/reload", admin.reload)
    app.router.add_get("/admin/policies", admin.policies)
    app.cleanup_ctx.append(_resources)
    return app


async def _resources(app: web.Application) -> AsyncIterator[None]:
    gw = app[GATEWAY]
    await gw.upstream.start()
    gw.state = open_state(gw.settings.state_url, reconnect_interval=gw.settings.state_reconnect_s)
    gw.env.state = gw.state
    if any(p.api == "sim" for p in gw.policies.providers.values()):
        await gw.ensure_sim()
    watcher = asyncio.create_task(admin.watch(gw))
    yield
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    if gw._sim is not None:
        await gw._sim.stop()
    await gw.state.close()
    await gw.upstream.close()


#: The longest time new requests are still accepted after SIGTERM (at most a third of the grace).
ACCEPT_WINDOW_MAX_S = 5.0


def drain_timeline(grace_s: float) -> tuple[float, float]:
    """(accept window, in-flight wait) of a drain: new requests are served for the first
    ``min(5 s, grace / 3)``, then the listener closes and in-flight requests get up to
    ``grace`` more to finish; what still runs then is cancelled."""
    return min(ACCEPT_WINDOW_MAX_S, grace_s / 3), grace_s


def serve(settings: GatewaySettings) -> int:
    """Run until SIGTERM/SIGINT, then drain and return 0 (1 when it cannot start)."""
    logs.configure(settings.log_level, settings.log_format)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is optional on some platforms
        pass
    try:
        app = create_app(settings)
    except PolicyError as e:
        for p in e.problems:
            log.error("policy_rejected", file=p.file, line=p.line, message=p.message)
        print(str(e), file=sys.stderr, flush=True)
        return 1
    return asyncio.run(_run(app, settings))


async def _run(app: web.Application, settings: GatewaySettings) -> int:
    gw = app[GATEWAY]
    accept_s, inflight_s = drain_timeline(settings.shutdown_grace_s)
    runner = web.AppRunner(
        app,
        handler_cancellation=True,  # a client that goes away cancels its upstream request
        access_log=None,
        # Server.shutdown waits this long for in-flight handlers to finish by themselves;
        # _drain bounds the whole wait to the same time.
        shutdown_timeout=inflight_s,
        keepalive_timeout=75,
    )
    await runner.setup()
    # Everything allocated so far lives as long as the process: keep it out of the
    # collector's way, and collect the young generation less often (fewer pauses per request).
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)
    site = web.TCPSite(runner, settings.host, settings.port, reuse_address=True)
    try:
        await site.start()
    except OSError as e:
        log.error("gateway_start_failed", host=settings.host, port=settings.port, error=str(e))
        await runner.cleanup()
        return 1
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[str] = []

    def on_stop(sig: signal.Signals) -> None:
        if stop.is_set():
            log.warning("gateway_signal_ignored", signal=sig.name, reason="already draining")
            return
        received.append(sig.name)
        stop.set()

    def on_hup() -> None:
        gw.reload("sighup")

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop, sig)
    loop.add_signal_handler(signal.SIGHUP, on_hup)
    log.info(
        "gateway_started",
        host=settings.host,
        port=runner.addresses[0][1],  # the real port when 0 asked for any free one
        demo=settings.demo,
        policy_dir=str(gw.policy_dir),
        policy_version=gw.policies.version,
        teams=len(gw.policies.teams),
        models=len(gw.policies.models),
    )
    missing = gw.policies.missing_provider_env(os.environ)
    if missing:  # requests to those providers will fail upstream as 401 -> 502
        log.warning("provider_key_missing", env=missing)
    try:
        await stop.wait()
        started = loop.time()
        gw.draining = True  # /readyz answers 503 from now on
        log.info(
            "gateway_draining",
            signal=received[0],
            grace_s=settings.shutdown_grace_s,
            accept_s=accept_s,
        )
        await asyncio.sleep(accept_s)  # keep serving while load balancers notice /readyz
        await _drain(runner, inflight_s, gw)
        log.info("gateway_stopped", drain_s=round(loop.time() - started, 3))
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
    return 0


async def _drain(runner: web.AppRunner, inflight_s: float, gw: Gateway) -> None:
    """Stop listening, let in-flight requests finish for up to ``inflight_s``, cancel the rest.

    ``runner.cleanup`` closes idle keep-alive connections, then waits
    for busy ones; aiohttp's own wait can run to twice its timeout (it waits once, then
    again after a soft cancel), so the bound is enforced here: connections still busy
    after ``inflight_s`` are closed, which cancels their handlers.
    """
    for site in list(runner.sites):
        await site.stop()  # no new connections from here on
    server = runner.server
    busy = 0 if server is None else len(server.connections)
    log.info("gateway_listener_closed", open_connections=busy, inflight_wait_s=inflight_s)
    cleanup = asyncio.ensure_future(runner.cleanup())
    done, _ = await asyncio.wait({cleanup}, timeout=inflight_s + 0.05)
    if not done and server is not None:
        left = list(server.connections)
        log.warning("gateway_drain_timeout", cancelled_connections=len(left))
        for out, endpoint in list(gw.streams):
            with contextlib.suppress(Exception):
                await out.write(
                    streaming.error_event(
                        endpoint,
                        "api_error",
                        "the gateway is shutting down: retry the request",
                        "gateway_shutdown",
                    )
                )
        for conn in left:
            conn.force_close()
    await cleanup
