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
from typing import TYPE_CHECKING, TypeVar, dataclass_transform

from aiohttp import web

from gateway.formats import Format
from gateway.formats.endpoints import Endpoint
from gateway.observe.events import Events
from gateway.observe.tracing import Tracing
from gateway.providers import Wiring
from gateway.recovery.seams import Request
from gateway.routing.policyset import PolicySet
from gateway.upstream.client import Upstream

if TYPE_CHECKING:
    from gateway.money.pricing import Price
    from gateway.translate import convert as translate

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def frozen(cls: type[T]) -> type[T]:
    """A dataclass with slots, frozen to the type checker (mypy refuses a write to a field)
    but not at run time, for the objects made on the request path: a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``, some 1.5k instructions a
    field (measured under callgrind: 30k a request for :class:`LiveRequest` and
    :class:`~gateway.live.exchange.Attempt`), where a plain one stores it in a slot."""
    return dataclass(slots=True)(cls)


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
    max_event_bytes: int = field(init=False)  # the largest upstream stream event taken

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_event_bytes", self.upstream.limits.max_event_bytes)


@frozen
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
    # the gateway's tracing when the request has a recording span (its attempts are
    # traced, its finish reasons collected), else None
    tracing: Tracing | None
    traceparent: str | None  # traced but not sampled: the context that goes upstream

    def price(self, model: str, deployment: int) -> Price | None:
        """What ``model`` costs on its deployment ``deployment`` (None: not priced)."""
        prices = self.policies.price_lists[model]
        return prices[deployment] if deployment < len(prices) else prices[0]
