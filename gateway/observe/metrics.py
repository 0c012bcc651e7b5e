"""The gateway's Prometheus metrics (SPEC §11); the only module that creates Prometheus objects.

Label values come from policy files (team, model, provider, strategy) or fixed sets
(category, status code), never raw from requests, so cardinality stays bounded.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

P = "llm_gateway_"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            P + "requests_total", "Requests answered", ["team", "model", "status"], registry=r
        )
        self.duration = Histogram(
            P + "request_duration_seconds",
            "Time from request to the last byte of the answer",
            ["team", "model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttfb = Histogram(
            P + "time_to_first_byte_seconds",
            "Time from request to the first byte sent to the client",
            ["team", "model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_attempts = Counter(
            P + "upstream_attempts_total",
            "Upstream attempts by outcome category (ok for success)",
            ["provider", "model", "category"],
            registry=r,
        )
        self.retries = Counter(
            P + "retries_total", "Retries scheduled", ["team", "model", "category"], registry=r
        )
        self.retry_wait = Counter(
            P + "retry_wait_seconds_total",
            "Seconds spent waiting before retries",
            ["team", "model"],
            registry=r,
        )
        self.fallbacks = Counter(
            P + "fallbacks_total",
            "Requests moved to a fallback model",
            ["team", "from_model", "to_model"],
            registry=r,
        )
        self.fallback_active = Gauge(
            P + "fallback_active",
            "1 while a route's model is replaced by a fallback",
            ["team", "model"],
            registry=r,
        )
        self.compactions = Counter(
            P + "compactions_total",
            "Prompt compaction steps",
            ["team", "model", "strategy", "outcome"],
            registry=r,
        )
        self.continuations = Counter(
            P + "continuations_total",
            "Continuations of answers cut at the token limit",
            ["team", "model"],
            registry=r,
        )
        self.tokens = Counter(
            P + "tokens_total",
            "Tokens reported by upstream usage",
            ["team", "model", "kind"],
            registry=r,
        )
        self.inflight = Gauge(P + "inflight_requests", "Requests in flight", registry=r)
        self.client_disconnects = Counter(
            P + "client_disconnects_total",
            "Clients that left before the answer ended",
            registry=r,
        )
        self.budget_exhausted = Counter(
            P + "retry_budget_exhausted_total",
            "Retries refused by the route's retry budget",
            ["team"],
            registry=r,
        )
        self.policy_reloads = Counter(
            P + "policy_reloads_total", "Policy reloads by outcome", ["outcome"], registry=r
        )
        self.stream_events_dropped = Counter(
            P + "stream_events_dropped_total",
            "Undecodable upstream stream events dropped",
            ["model"],
            registry=r,
        )
        self.state_degraded = Gauge(
            P + "state_backend_degraded",
            "1 while the shared state backend is unreachable",
            registry=r,
        )

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
