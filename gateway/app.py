"""The composition root: ``create_app`` wires settings, policies, upstream, state and events.

No request logic lives here. ``serve`` runs the app with graceful drain: on
SIGTERM/SIGINT ``/readyz`` turns 503 at once, new requests are still served for
a short while (so load balancers can notice), in-flight requests and streams get
the rest of ``GATEWAY_SHUTDOWN_GRACE_S``, then the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import structlog
from aiohttp import web

from gateway import admin, handlers
from gateway.engine import Env
from gateway.middlewares import gateway_middleware
from gateway.observe import logs
from gateway.observe.events import Events
from gateway.observe.metrics import Metrics
from gateway.policy.load import PolicyError, bundled_policy_dir, load_policy_dir
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
        self.draining = False
        self.last_reload_error: str | None = None
        self.env = Env(self.state, self.events, time.monotonic, time.time, random.Random())

    def reload(self, trigger: str) -> bool:
        """Load the policy dir again and swap it in whole; on any problem keep the old set."""
        try:
            new = load_policy_dir(self.policy_dir)
        except PolicyError as e:
            self.last_reload_error = str(e)
            for p in e.problems:
                self.events.policy_rejected(p.file, p.line, p.message, trigger)
            return False
        self.policies = new
        self.last_reload_error = None
        self.events.policy_reloaded(len(new.files), trigger)
        return True


def policy_dir_of(settings: GatewaySettings) -> Path:
    return bundled_policy_dir() if settings.demo else Path(settings.policy_dir)


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
    sim = None
    if any(p.api == "sim" for p in gw.policies.providers.values()):
        from gateway.providers.sim import SimProvider

        sim = SimProvider()
        await sim.start()
        gw.sim_url = sim.url
    watcher = asyncio.create_task(admin.watch(gw))
    yield
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher
    if sim is not None:
        await sim.stop()
    await gw.state.close()
    await gw.upstream.close()


def serve(settings: GatewaySettings) -> int:
    """Run until SIGTERM/SIGINT, then drain and exit 0."""
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
        print(str(e), flush=True)
        return 1
    asyncio.run(_run(app, settings))
    return 0


async def _run(app: web.Application, settings: GatewaySettings) -> None:
    gw = app[GATEWAY]
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=settings.shutdown_grace_s,
        keepalive_timeout=75,
    )
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, reuse_address=True)
    await site.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: gw.reload("sighup"))
    log.info(
        "gateway_started",
        host=settings.host,
        port=settings.port,
        demo=settings.demo,
        policy_dir=str(gw.policy_dir),
        teams=len(gw.policies.teams),
        models=len(gw.policies.models),
    )
    await stop.wait()
    gw.draining = True
    grace = settings.shutdown_grace_s
    accept = min(5.0, grace / 3)
    log.info("gateway_draining", grace_s=grace, accept_s=accept)
    await asyncio.sleep(accept)  # keep serving while load balancers see /readyz fail
    await runner.cleanup()  # stops listening, waits for in-flight up to the rest of the grace
    log.info("gateway_stopped")
