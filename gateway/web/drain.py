"""Running a started gateway until SIGTERM/SIGINT, then its graceful drain.

On SIGTERM/SIGINT ``/readyz`` turns 503 at once, new requests are still served for
``min(5, grace/3)`` s (so load balancers can notice; less once ``/readyz`` has answered
503 and nothing is in flight: the readiness grace has passed), then the listener closes and
in-flight requests and streams get up to ``GATEWAY_SHUTDOWN_GRACE_S`` to finish;
streams still running then end with an error event; the process exits 0. SIGINT
(Ctrl-C) with no request in flight skips the accept window and exits at once.
With ``GATEWAY_WORKERS`` > 1 each worker process runs ``run`` on its parent's sockets
(gateway/web/workers.py), drains the same way and logs ``worker_started`` / ``worker_stopped``
where a single process logs ``gateway_started`` / ``gateway_stopped``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
from typing import TYPE_CHECKING, Any

import structlog

from gateway.settings import GatewaySettings
from gateway.web.listener import requests_arriving
from gateway.web.policy_env import warn_egress

if TYPE_CHECKING:
    from gateway.web.gateway import Gateway

log = structlog.get_logger("gateway")


#: The longest time new requests are still accepted after SIGTERM (at most a third of the grace).
ACCEPT_WINDOW_MAX_S = 5.0


def drain_timeline(grace_s: float) -> tuple[float, float]:
    """(accept window, in-flight wait) of a drain: new requests are served for the first
    ``min(5 s, grace / 3)``, then the listener closes and in-flight requests get up to
    ``grace`` more to finish; what still runs then is cancelled."""
    return min(ACCEPT_WINDOW_MAX_S, grace_s / 3), grace_s


async def run(gw: Gateway, settings: GatewaySettings) -> int:
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
        await accept_window(gw, window)  # keep serving while load balancers notice /readyz
        await _drain(gw, inflight_s, who)
        drain_s = round(loop.time() - started, 3)
        log.info("gateway_stopped" if w is None else "worker_stopped", **who, drain_s=drain_s)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
    return 0


#: How often the accept window looks whether it can end early.
_LOOK_S = 0.02


async def accept_window(gw: Gateway, window: float) -> None:
    """Keep serving new requests for ``window`` seconds, or less: as soon as ``/readyz`` has
    answered 503 since the signal (whoever routes by readiness has been told: the readiness
    grace has passed) and nothing is in flight, nor on its way on an open connection (a
    new one, or a request head not handled yet)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + window
    while (left := end - loop.time()) > 0:
        if gw.drain_reported and not gw.inflight and not requests_arriving():
            return
        await asyncio.sleep(min(_LOOK_S, left))


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
                        endpoint.fmt.stream_error(
                            "api_error",
                            "the gateway is shutting down: retry the request",
                            "gateway_shutdown",
                        )
                    )
                    await out.write_eof()
    await gw.stop()
