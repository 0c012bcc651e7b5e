"""The composition root: ``create_app`` assembles a :class:`~gateway.web.gateway.Gateway`
from the settings, the policies and what its ports serve (the routes, the policy file
watcher).

No request logic lives here. ``serve`` runs the app until SIGTERM/SIGINT, then drains it
(gateway/web/drain.py).
"""

from __future__ import annotations

import asyncio
import sys

import structlog

from gateway.errors import PolicyError
from gateway.observe import logs
from gateway.observe.metrics import Metrics
from gateway.routing.load import load_policy_dir
from gateway.routing.policyset import PolicySet
from gateway.settings import GatewaySettings
from gateway.web import reload, routes
from gateway.web.drain import run
from gateway.web.gateway import Gateway, Serving
from gateway.web.policy_env import policy_dir_of

log = structlog.get_logger("gateway")


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
    serving = Serving(routes.make_handler, routes.ROUTES, routes.METRICS, reload.watch)
    return Gateway(settings, policies, metrics or Metrics(), serving)


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
    return asyncio.run(run(gw, settings))
