"""The composition root: ``create_app`` wires settings, policies, upstream, state and events.

No request logic lives here. ``serve`` runs the app with graceful drain: on
SIGTERM/SIGINT ``/readyz`` turns 503 at once, new requests are still served for
``min(5, grace/3)`` s (so load balancers can notice), then the listener closes and
in-flight requests and streams get up to ``GATEWAY_SHUTDOWN_GRACE_S`` to finish;
streams still running then end with an error event; the process exits 0. SIGINT
(Ctrl-C) with no request in flight skips the accept window and exits at once.
With ``GATEWAY_WORKERS`` > 1 each worker process runs ``_run`` on its parent's sockets
(gateway/web/workers.py), drains the same way and logs ``worker_started`` / ``worker_stopped``
where a single process logs ``gateway_started`` / ``gateway_stopped``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from gateway import egress
from gateway.engine import Env
from gateway.observe import logs, tracing
from gateway.observe.events import Events
from gateway.observe.metrics import Metrics
from gateway.policy.load import PolicyError, Problem, bundled_policy_dir, load_policy_dir
from gateway.policy.policyset import PolicySet
from gateway.providers import Endpoint, Wiring, wire
from gateway.settings import GatewaySettings
from gateway.state import open_state, share_deployments
from gateway.state.base import StateBackend
from gateway.streams import sse
from gateway.upstream import Limits, Upstream
from gateway.web import reload, routes
from gateway.web.listener import Listener

#: How long unread request bytes are drained after an early answer (a 401 or 413 before
#: the body), before the connection closes: closing with unread input would send a RST
#: that can destroy the answer in flight.
LINGER_S = 2.0

log = structlog.get_logger("gateway")


@dataclass(frozen=True)
class Worker:
    """A worker's share of its parent (gateway/web/workers.py): the listening sockets the
    parent bound, its number, and what to call once it serves and on ``/admin/reload``."""

    index: int
    socks: list[socket.socket]
    metrics_socks: list[socket.socket] | None
    ready: Callable[[], None]
    admin_reloaded: Callable[[], None]


class Gateway:
    """Everything a request needs, and the server that serves it."""

    def __init__(self, settings: GatewaySettings, policies: PolicySet, metrics: Metrics) -> None:
        self.settings = settings
        self.policies = policies
        self._egress = egress_of(policies)  # raises PolicyError: the set cannot be reached
        # per provider and key variable of the current set, made on use
        self._wiring: dict[tuple[str, str | None], Wiring] = {}
        self.policy_dir = policy_dir_of(settings)
        self.metrics = metrics
        self.events = Events(metrics)
        self.upstream = Upstream(
            Limits(
                max_field_bytes=settings.upstream_max_field_bytes,
                max_headers=settings.upstream_max_headers,
                max_body_bytes=settings.upstream_max_body_bytes,
                max_event_bytes=settings.upstream_max_event_bytes,
            )
        )
        self.state: StateBackend = open_state("")
        self.deployment_sync: Any = None  # shares deployment states when state is in Redis
        self.sim_url: str | None = None
        self._sim: Any = None  # the SimProvider, once started
        self.draining = False
        # Streams being relayed: (response, endpoint). A drain that runs out of time ends
        # each with its error event, so no client sees a stream cut silently.
        self.streams: set[tuple[web.StreamResponse, Endpoint]] = set()
        self.inflight = 0  # /v1/ requests being answered
        # read when scraped; with workers (multiprocess metrics) moved per request instead
        self._inflight_gauge = metrics.inflight if metrics.multiprocess else None
        if self._inflight_gauge is None:
            metrics.inflight.set_function(lambda: self.inflight)
        self.worker: Worker | None = None  # set in a worker process
        self._idle: asyncio.Future[None] | None = None  # a drain waiting for inflight == 0
        self._listeners: list[Listener] = []  # the main port first
        self.port = 0
        self.metrics_port: int | None = None  # bound when GATEWAY_METRICS_PORT is set
        self._watcher: asyncio.Task[None] | None = None
        self.last_reload_error: str | None = None
        self.env = Env(self.state, self.events, time.monotonic, time.time, random.Random())
        # deployment_up is read from the board, for the current policy set, when scraped
        metrics.deployments_up = lambda: self.env.board.up(self.policies.deployments, time.time())
        self.tracing = tracing.configure(os.environ)  # None unless OTEL_* asks for traces

    def reload(self, trigger: str) -> bool:
        """Load the policy dir again and swap it in whole; on any problem keep the old set.

        Synchronous on purpose: the swap is one assignment with no await around it, so a
        request (which reads ``self.policies`` once, at its start) sees either the old
        set or the new one, never a mix, and keeps it to its end.
        """
        new, problems = self._load()
        if new is not None:
            try:
                reach = egress_of(new)
            except PolicyError as e:
                new, problems = None, e.problems
        if new is None:
            self.last_reload_error = "\n".join(str(p) for p in problems)
            for p in problems:
                self.events.policy_rejected(p.file, p.line, p.message, trigger)
            self.events.policy_reload_rejected()
            self._admin_reloaded(trigger)
            return False
        self.policies, self._egress, self._wiring = new, reach, {}
        self.last_reload_error = None
        self.events.policy_reloaded(len(new.files), trigger)
        warn_egress(new)
        self._admin_reloaded(trigger)
        return True

    def _admin_reloaded(self, trigger: str) -> None:
        if trigger == "admin" and self.worker is not None:
            self.worker.admin_reloaded()  # the other workers reload too (SIGHUP)

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

    # ---- requests in flight (for drain) ----------------------------------------------
    def request_started(self) -> None:
        self.inflight += 1
        if self._inflight_gauge is not None:
            self._inflight_gauge.inc()

    def request_finished(self) -> None:
        self.inflight -= 1
        if self._inflight_gauge is not None:
            self._inflight_gauge.dec()
        if not self.inflight and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def wait_idle(self, seconds: float) -> bool:
        """Wait until no request is in flight; False when ``seconds`` ran out."""
        if not self.inflight:
            return True
        self._idle = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(seconds):
                await self._idle
        except TimeoutError:
            return False
        finally:
            self._idle = None
        return True

    def wiring(self, provider: str, key_env: str | None = None) -> Wiring:
        """How ``provider`` of the current set is called with the key in ``key_env`` (one of
        its ``api_key_env``; read from the environment once per set): URLs, headers with
        the key, proxy and TLS."""
        w = self._wiring.get((provider, key_env))
        if w is None:
            p = self.policies.providers[provider]
            base = self.sim_url if p.api == "sim" and self.sim_url else p.base_url
            key = os.environ.get(key_env) if key_env else None
            e = self._egress.get(provider)
            w = wire(p, base, key, e.proxy if e else None, e.ssl if e else True)
            if p.api != "sim" or self.sim_url:
                self._wiring[(provider, key_env)] = w
        return w

    # ---- life cycle -------------------------------------------------------------------
    async def start(self, host: str, port: int) -> int:
        """Open the upstream pool, the state backend, the watcher; listen. The port served."""
        logs.quiet_client_protocol_errors()  # a malformed request is the client's fault
        await self.upstream.start()
        self.state = open_state(
            self.settings.state_url, reconnect_interval=self.settings.state_reconnect_s
        )
        self.env.state = self.state
        self.deployment_sync = share_deployments(self.settings.state_url, self.env.board)
        if self.deployment_sync is not None:
            await self.deployment_sync.start()
        if self.policies.uses_sim:
            await self.ensure_sim()
        self._watcher = asyncio.create_task(reload.watch(self))
        separate = self.settings.metrics_port is not None
        paths = routes.ROUTES if separate else {**routes.ROUTES, **routes.METRICS}
        w = self.worker
        try:
            handler = routes.make_handler(self, paths)
            self.port = (await self._listen(handler, host, port, w.socks if w else None)).port
            if separate:
                mhost = self.settings.metrics_host or host
                handler = routes.make_handler(self, routes.METRICS)
                mport = self.settings.metrics_port
                self.metrics_port = (
                    await self._listen(handler, mhost, mport, w.metrics_socks if w else None)
                ).port
        except OSError:
            await self.stop()
            raise
        return self.port

    @property
    def open_connections(self) -> int:
        """Client connections open now, on every port (aiohttp's count)."""
        return sum(len(listener.server.connections) for listener in self._listeners)

    async def _listen(
        self, handler: Any, host: str, port: int | None, socks: list[socket.socket] | None
    ) -> Listener:
        s = self.settings
        server = web.Server(
            handler,
            handler_cancellation=True,  # a client that leaves cancels its upstream request
            access_log=None,  # the gateway writes its own (request_completed)
            keepalive_timeout=s.client_header_timeout_s,
            max_line_size=s.max_header_field_bytes,
            max_field_size=s.max_header_field_bytes,
            max_headers=s.max_headers,
            lingering_time=LINGER_S,
        )
        listener = await Listener.open(
            server, host, port or 0, max_header_bytes=s.max_header_bytes, socks=socks
        )
        self._listeners.append(listener)
        return listener

    async def stop_listening(self) -> None:
        """No new connections on the main port (drain); the metrics port stays. Idle
        keep-alive connections close now, busy ones after their current answer."""
        if self._listeners:
            await self._listeners[0].stop_accepting()

    async def stop(self) -> None:
        """Close every connection (running requests are cancelled), then the resources."""
        for listener in self._listeners:
            await listener.close(grace_s=0.5)
        self._listeners.clear()
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        if self._sim is not None:
            await self._sim.stop()
            self._sim, self.sim_url = None, None
        if self.deployment_sync is not None:
            await self.deployment_sync.close()
        await self.state.close()
        await self.upstream.close()
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.shutdown)  # exports what is buffered


def egress_of(policies: PolicySet) -> dict[str, egress.Egress]:
    """How each provider of a set is reached (proxy, TLS), read from the environment once.
    An environment proxy that is not http:// or a certificate that will not load rejects
    the set, like any policy problem."""
    out: dict[str, egress.Egress] = {}
    for name, p in policies.providers.items():
        try:
            out[name] = egress.egress_for(p, p.base_url, os.environ)
        except egress.EgressError as e:
            raise PolicyError([Problem("environment", 0, f"provider {name!r}: {e}")]) from None
    return out


def warn_egress(policies: PolicySet) -> None:
    for line in egress.warnings(policies.providers, os.environ):
        log.warning("egress_warning", message=line)


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
) -> Gateway:
    """Build the gateway; policies are loaded now, so a bad set fails here, not later.
    ``await gw.start(host, port)`` serves it, ``await gw.stop()`` ends it."""
    settings = settings or GatewaySettings()
    if policies is None:
        policies = load_policy_dir(policy_dir_of(settings))
    return Gateway(settings, policies, metrics or Metrics())


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
        gw = create_app(settings)
    except PolicyError as e:
        for p in e.problems:
            log.error("policy_rejected", file=p.file, line=p.line, message=p.message)
        print(str(e), file=sys.stderr, flush=True)
        return 1
    return asyncio.run(_run(gw, settings))


async def _run(gw: Gateway, settings: GatewaySettings) -> int:
    accept_s, inflight_s = drain_timeline(settings.shutdown_grace_s)
    w = gw.worker
    who: dict[str, Any] = {} if w is None else {"worker": w.index, "pid": os.getpid()}
    try:
        port = await gw.start(settings.host, settings.port)
    except OSError as e:
        log.error("gateway_start_failed", host=settings.host, port=settings.port, error=str(e))
        return 1
    # Everything allocated so far lives as long as the process: keep it out of the
    # collector's way, and collect the young generation less often (fewer pauses per request).
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[str] = []

    def on_stop(sig: signal.Signals) -> None:
        if stop.is_set():
            log.warning("gateway_signal_ignored", **who, signal=sig.name, reason="already draining")
            return
        received.append(sig.name)
        stop.set()

    def on_hup() -> None:
        gw.reload("sighup")

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop, sig)
    loop.add_signal_handler(signal.SIGHUP, on_hup)
    log.info(
        "gateway_started" if w is None else "worker_started",
        **who,
        host=settings.host,
        port=port,  # the real port when 0 asked for any free one
        demo=settings.demo,
        policy_dir=str(gw.policy_dir),
        policy_version=gw.policies.version,
        teams=len(gw.policies.teams),
        models=len(gw.policies.models),
    )
    if w is not None:
        w.ready()  # its signals reach it from here on
    if w is None or w.index == 0:  # said once, not once per worker
        warn_egress(gw.policies)
        missing = gw.policies.missing_provider_env(os.environ)
        if missing:  # requests to those providers will fail upstream as 401 -> 502
            log.warning("provider_key_missing", env=missing)
    try:
        await stop.wait()
        started = loop.time()
        gw.draining = True  # /readyz answers 503 from now on
        # Ctrl-C with nothing in flight is a person at a terminal: no load balancer needs the
        # accept window, and nothing needs the grace. SIGTERM (orchestrators) always keeps it.
        window = 0.0 if received[0] == "SIGINT" and not gw.inflight else accept_s
        log.info(
            "gateway_draining",
            **who,
            signal=received[0],
            grace_s=settings.shutdown_grace_s,
            accept_s=window,
        )
        if window:
            await asyncio.sleep(window)  # keep serving while load balancers notice /readyz
        await _drain(gw, inflight_s, who)
        drain_s = round(loop.time() - started, 3)
        log.info("gateway_stopped" if w is None else "worker_stopped", **who, drain_s=drain_s)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
    return 0


async def _drain(gw: Gateway, inflight_s: float, who: dict[str, Any]) -> None:
    """Stop listening, let in-flight requests finish for up to ``inflight_s``, cancel the rest.

    Answers given while draining close their connection; idle keep-alive connections
    close at the end. Streams still running when the time is up end with a
    ``gateway_shutdown`` error event, so no client sees a stream cut silently.
    """
    await gw.stop_listening()  # no new connections from here on
    log.info(
        "gateway_listener_closed", **who, inflight_requests=gw.inflight, inflight_wait_s=inflight_s
    )
    if not await gw.wait_idle(inflight_s):
        log.warning("gateway_drain_timeout", **who, cancelled_requests=gw.inflight)
        for out, endpoint in list(gw.streams):
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await out.write(
                        sse.error_event(
                            endpoint,
                            "api_error",
                            "the gateway is shutting down: retry the request",
                            "gateway_shutdown",
                        )
                    )
                    await out.write_eof()
    await gw.stop()
