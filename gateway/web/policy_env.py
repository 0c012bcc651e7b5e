"""Where a policy set comes from and how its providers are reached from this process: the
policy dir (the bundled policies in demo mode) and each provider's egress (proxy, TLS),
read from the environment once per set; an environment proxy or certificate that will
not do rejects the set like a policy problem. Used by the gateway (gateway/web/gateway.py),
its start (gateway/web/drain.py) and the supervisor's check (gateway/web/workers.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from gateway.errors import EgressError, PolicyError, Problem
from gateway.routing.load import bundled_policy_dir
from gateway.routing.policyset import PolicySet
from gateway.settings import GatewaySettings
from gateway.upstream import egress

log = structlog.get_logger("gateway")


def egress_of(policies: PolicySet) -> dict[str, egress.Egress]:
    """How each provider of a set is reached (proxy, TLS), read from the environment once.
    An environment proxy that is not http:// or a certificate that will not load rejects
    the set, like any policy problem."""
    out: dict[str, egress.Egress] = {}
    for name, p in policies.providers.items():
        try:
            out[name] = egress.egress_for(p, p.base_url, os.environ)
        except EgressError as e:
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
