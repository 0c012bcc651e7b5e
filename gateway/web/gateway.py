"""The :class:`Gateway`: everything a request needs (settings, policies, upstream, state,
events), and the servers that serve it.

No request logic lives here, and no route: what a port serves (the handlers, the policy
file watcher) is given by the app that assembles a gateway (gateway/web/app.py), so the
routes may name the gateway without a cycle. Which policy dir is loaded and how its
providers are reached comes from gateway/web/policy_env.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from gateway.errors import PolicyError, Problem
from gateway.formats.endpoints import Endpoint
from gateway.live.context import LiveConfig
from gateway.money.budgets import describe, team_budgets
from gateway.observe import logs, tracing
from gateway.observe.events import Events
from gateway.observe.metrics import Metrics
from gateway.policy.schema import Budget
from gateway.providers import Wiring, wiring_of
from gateway.recovery.seams import Env
from gateway.routing.load import load_policy_dir
from gateway.routing.policyset import PolicySet
from gateway.settings import GatewaySettings
from gateway.state import open_state, share_deployments
from gateway.state.base import StateBackend
from gateway.upstream.client import AnswerLimits, Upstream
from gateway.web.cloud_credentials import CloudCredentials
from gateway.web.concurrency import TeamSlots
from gateway.web.listener import Listener, request_factory
from gateway.web.policy_env import egress_of, policy_dir_of, warn_egress

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


@dataclass(frozen=True, slots=True)
class Serving:
    """What a gateway serves, given by the app that assembles it: the one handler of a
    port over a table of paths (``api``: with the ``/v1/`` endpoints), the main port's
    paths and the metrics paths, and the policy file watcher."""

    handler: Callable[..., Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]]
    routes: Mapping[str, Any]
    metrics: Mapping[str, Any]
    watch: Callable[[Gateway], Coroutine[Any, Any, None]]


class Gateway:
    """Everything a request needs, and the server that serves it."""

    def __init__(
        self, settings: GatewaySettings, policies: PolicySet, metrics: Metrics, serving: Serving
    ) -> None:
        self.settings = settings
        self.serving = serving
        self.policies = policies
        self._egress = egress_of(policies)  # raises PolicyError: the set cannot be reached
        # per provider and key variable of the current set, made on use
        self._wiring: dict[tuple[str, str | None], Wiring] = {}
        self.policy_dir = policy_dir_of(settings)
        self.metrics = metrics
        self.events = Events(metrics)
        self.events.cache_share.follow(policies.deployments)
        self.upstream = Upstream(
            AnswerLimits(
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
        self.drain_reported = False  # /readyz has answered 503 since the drain began
        # Streams being relayed: (response, endpoint). A drain that runs out of time ends
        # each with its error event, so no client sees a stream cut silently.
        self.streams: set[tuple[web.StreamResponse, Endpoint]] = set()
        self.inflight = 0  # /v1/ requests being answered
        self.team_slots = TeamSlots()  # per team with limits.max_concurrent
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
        self.budgets: dict[str, Budget] = team_budgets(policies.teams)  # of the current set
        metrics.budgets = lambda: (
            (team, b["spent_usd"], b["limit_usd"])
            for team, b in describe(self.state.spending, self.budgets, time.time()).items()
        )
        # the cloud providers' credentials (gateway/upstream), looked for at start (in the
        # background) and on reload
        self.credentials = CloudCredentials(
            self.env.board, lambda: self.policies, timeout=settings.cloud_token_timeout_s
        )
        self.tracing = tracing.configure(os.environ)  # None unless OTEL_* asks for traces
        # what every request's live path uses (gateway/live/context.py), built once
        self.live = LiveConfig(
            self.upstream, self.events, self.wiring, settings.client_write_timeout_s,
            self.streams, self.tracing,
        )  # fmt: skip

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
        self.events.cache_share.follow(new.deployments)
        self.budgets = team_budgets(new.teams)
        self.state.track(self.budgets, time.time())
        self.credentials.reload(new)
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
            from gateway.testing.sim import SimProvider

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
            w = wiring_of(
                p,
                base,
                key,
                e.proxy if e else None,
                e.ssl if e else True,
                self.credentials.get(provider),
            )
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
        self.state.track(self.budgets, time.time())  # their totals read from now on
        self.deployment_sync = share_deployments(self.settings.state_url, self.env.board)
        if self.deployment_sync is not None:
            await self.deployment_sync.start()
        if self.policies.uses_sim:
            await self.ensure_sim()
        self.credentials.start(self.policies)  # in the background: the port opens now
        serving = self.serving
        self._watcher = asyncio.create_task(serving.watch(self))
        separate = self.settings.metrics_port is not None
        paths = serving.routes if separate else {**serving.routes, **serving.metrics}
        w = self.worker
        try:
            handler = serving.handler(self, paths)
            self.port = (await self._listen(handler, host, port, w.socks if w else None)).port
            if separate:
                mhost = self.settings.metrics_host or host
                handler = serving.handler(self, serving.metrics, api=False)
                mport = self.settings.metrics_port
                self.metrics_port = (
                    await self._listen(handler, mhost, mport, w.metrics_socks if w else None)
                ).port
        except OSError:
            await self.stop()
            raise
        if not separate and (w is None or w.index == 0):  # said once, not once per worker
            warn_public_metrics(self.settings)
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
            request_factory=request_factory(asyncio.get_running_loop()),  # upgrade: close
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
        await self.credentials.close()
        await self.state.close()
        await self.upstream.close()
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.shutdown)  # exports what is buffered


#: What ``/metrics`` shows, as the start-up warning names it.
METRICS_SHOW = (
    "every team's name, budget and spend; requests, tokens, cost, retries and fallbacks"
    " per team and model; the deployments and their states"
)


def warn_public_metrics(settings: GatewaySettings) -> None:
    """``/metrics`` is on the public port (no ``GATEWAY_METRICS_PORT``): a warning, since
    whoever reaches the port reads it (or whoever has the token, with one)."""
    log.warning(
        "metrics_on_public_port",
        shows=METRICS_SHOW,
        token_required=bool(settings.metrics_token),
        fix="set GATEWAY_METRICS_PORT (deploy/ uses 9100) so that only Prometheus reaches it",
    )
