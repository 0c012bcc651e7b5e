"""What the live path is given, once: the gateway's parts (:class:`LiveConfig`, per process),
one request's context (:class:`LiveRequest`), and an attempt's translation (:class:`Crossing`).

They are passed down from where the facts are known (the composition root, the request's
handler), never read back from the access-log record nor reached for through another
object. The lowest module of :mod:`gateway.live`: the others import it, it imports none
of them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.formats import Format
from gateway.observe.events import Events
from gateway.observe.tracing import Tracing
from gateway.providers import Endpoint, Wiring
from gateway.recovery.engine import Request
from gateway.routing.policyset import PolicySet
from gateway.upstream.client import Upstream

if TYPE_CHECKING:
    from gateway.money.pricing import Price
    from gateway.translate import convert as translate


@dataclass(frozen=True, slots=True)
class Crossing:
    """An attempt whose deployment speaks another format than the client's endpoint: the
    request goes out translated (into ``upstream_fmt``), what comes back is translated to
    ``client_fmt``."""

    upstream_fmt: Format
    client_fmt: Format
    model: str  # the public model name, which a translated answer names
    # a Responses client's namespaced functions, flattened upstream: named back in answers
    names: translate.Names = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LiveConfig:
    """The gateway's parts every request's live path uses, built once per process."""

    upstream: Upstream
    events: Events
    wiring: Callable[[str, str | None], Wiring]  # a provider's way there, per key variable
    write_timeout: float  # a client that reads nothing this long is gone
    streams: set[tuple[web.StreamResponse, Endpoint]]  # streams being relayed (a drain ends them)
    tracing: Tracing | None = None
    # the clock of the waits between attempts and of their keepalives
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    @property
    def max_event_bytes(self) -> int:
        """The largest upstream stream event taken (``upstream_max_event_bytes``)."""
        return self.upstream.limits.max_event_bytes


@dataclass(frozen=True, slots=True)
class LiveRequest:
    """One request's live path: what its attempts, its waits and its relay need, built once
    by the request's handler and passed down. The team, the route, the route's policy and
    the deadline are ``req``'s (the engine's request)."""

    live: LiveConfig
    policies: PolicySet  # the set the request began with
    endpoint: Endpoint
    client: web.BaseRequest  # the client's request: its headers, query and transport
    req: Request
    stream: bool
    request_id: str  # sent upstream as x-request-id; names a stream's error event
    traced: bool  # a recording span: attempts are traced, finish reasons collected
    traceparent: str | None  # traced but not sampled: the context that goes upstream

    def price(self, model: str, deployment: int) -> Price | None:
        """What ``model`` costs on its deployment ``deployment`` (None: not priced)."""
        prices = self.policies.price_lists[model]
        return prices[deployment] if deployment < len(prices) else prices[0]
