"""The gateway's Prometheus metrics (SPEC §11); the only module that creates Prometheus objects.

Label values come from policy files (team, model, provider, strategy) or fixed sets
(category, status code), never raw from requests, so cardinality stays bounded.

The per-request series (requests, duration, time to first byte, tokens, upstream attempts)
are counted in plain Python under one lock and folded into the Prometheus children when the
registry collects (every scrape, ``render()``, ``get_sample_value``): a Prometheus ``inc()``
or ``observe()`` takes its own lock and walks the buckets in Python, about a microsecond
each, five of them per request. What a scrape sees is the same: children are created when
the request is counted, as before, and every count is folded in before any sample is read.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric

P = "llm_gateway_"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# Multiprocess mode collects the children's mmap files, never this registry: fold at once there.
_FOLD_AT_ONCE = bool(getattr(values.ValueClass, "_multiprocess", True))


class _Folding(MetricWrapperBase):
    """A metric that folds the pending per-request counts in before it is collected."""

    _fold: Callable[[], None] | None = None

    def collect(self) -> Iterable[Metric]:
        if self._fold is not None:
            self._fold()
        return super().collect()


class _Counter(_Folding, Counter):
    pass


class _Histogram(_Folding, Histogram):
    pass


class _Count:
    """A counter child and what is counted for it but not yet folded in."""

    __slots__ = ("child", "value")

    def __init__(self, child: Any) -> None:
        self.child = child
        self.value: float = 0

    def fold(self) -> None:
        if self.value:
            self.child.inc(self.value)
            self.value = 0


class _Observed:
    """A histogram child and its observations not yet folded in: their sum and, per bucket,
    how many fell in it. :meth:`Metrics.request_done` adds ``v`` at the index
    ``bisect_left(bounds, v)``, the first bound ``>= v`` as ``observe()``'s walk finds it;
    NaN goes to the spare last slot: summed, in no bucket, as ``observe()`` does.
    Folding adds to the child's ``_sum`` and ``_buckets`` values (prometheus_client has no
    public call to add n observations at once); tests/test_observe_fast.py checks the
    result against plain ``observe()`` calls, sample for sample."""

    __slots__ = ("bounds", "child", "counts", "nan", "sum")

    def __init__(self, child: Any) -> None:
        self.child = child
        self.bounds: list[float] = list(child._upper_bounds)
        self.nan = len(self.bounds)
        self.counts = [0] * (self.nan + 1)
        self.sum = 0.0

    def fold(self) -> None:
        counts, child = self.counts, self.child
        if self.sum or any(counts):
            child._sum.inc(self.sum)
            buckets = child._buckets
            for i in range(self.nan):
                if counts[i]:
                    buckets[i].inc(counts[i])
            self.counts = [0] * (self.nan + 1)
            self.sum = 0.0


class _Series:
    """The per-request series of one (team, model)."""

    __slots__ = ("by_status", "completion", "duration", "prompt", "ttfb")

    def __init__(self, duration: _Observed) -> None:
        self.by_status: dict[int, _Count] = {}
        self.duration = duration
        self.ttfb: _Observed | None = None
        self.prompt: _Count | None = None
        self.completion: _Count | None = None


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = _Counter(
            P + "requests_total", "Requests answered", ["team", "model", "status"], registry=r
        )
        self.duration = _Histogram(
            P + "request_duration_seconds",
            "Time from request to the last byte of the answer",
            ["team", "model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttfb = _Histogram(
            P + "time_to_first_byte_seconds",
            "Time from request to the first byte sent to the client",
            ["team", "model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_attempts = _Counter(
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
        self.tokens = _Counter(
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

        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], _Series] = {}
        self._attempts: dict[tuple[str, str, str], _Count] = {}
        for m in (self.requests, self.duration, self.ttfb, self.upstream_attempts, self.tokens):
            m._fold = self.fold

    # ---- the per-request hot path ------------------------------------------------------
    def request_done(
        self,
        team: str,
        model: str,
        status: int,
        duration: float,
        ttfb: float | None,
        prompt_tokens: int,
        completion_tokens: int,
    ) -> None:
        """Count one answered request: ``requests_total``, ``request_duration_seconds``,
        ``time_to_first_byte_seconds`` (when there was a first byte) and ``tokens_total``
        (the kinds that are non-zero)."""
        lock = self._lock
        lock.acquire()  # not ``with``: the same, cheaper by a third on this path
        try:
            s = self._series.get((team, model))
            if s is None:
                s = self._series[team, model] = _Series(
                    _Observed(self.duration.labels(team, model))
                )
            c = s.by_status.get(status)
            if c is None:
                c = s.by_status[status] = _Count(self.requests.labels(team, model, str(status)))
            c.value += 1
            h = s.duration  # counted as _Observed says
            h.sum += duration
            h.counts[bisect_left(h.bounds, duration) if duration == duration else h.nan] += 1
            if ttfb is not None:
                t = s.ttfb
                if t is None:
                    t = s.ttfb = _Observed(self.ttfb.labels(team, model))
                t.sum += ttfb
                t.counts[bisect_left(t.bounds, ttfb) if ttfb == ttfb else t.nan] += 1
            if prompt_tokens:
                if prompt_tokens < 0:
                    _negative()
                if s.prompt is None:
                    s.prompt = _Count(self.tokens.labels(team, model, "prompt"))
                s.prompt.value += prompt_tokens
            if completion_tokens:
                if completion_tokens < 0:
                    _negative()
                if s.completion is None:
                    s.completion = _Count(self.tokens.labels(team, model, "completion"))
                s.completion.value += completion_tokens
        finally:
            lock.release()
        if _FOLD_AT_ONCE:
            self.fold()

    def upstream_attempt(self, provider: str, model: str, category: str) -> None:
        """Count one upstream attempt in ``upstream_attempts_total``."""
        key = (provider, model, category)
        lock = self._lock
        lock.acquire()
        try:
            c = self._attempts.get(key)
            if c is None:
                c = self._attempts[key] = _Count(self.upstream_attempts.labels(*key))
            c.value += 1
        finally:
            lock.release()
        if _FOLD_AT_ONCE:
            self.fold()

    def fold(self) -> None:
        """Fold the pending per-request counts into the Prometheus children (idempotent)."""
        with self._lock:
            for s in self._series.values():
                for c in s.by_status.values():
                    c.fold()
                s.duration.fold()
                for part in (s.ttfb, s.prompt, s.completion):
                    if part is not None:
                        part.fold()
            for c in self._attempts.values():
                c.fold()

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _negative() -> NoReturn:
    # as Counter.inc, which raised it from request_completed when it was called per request
    raise ValueError("Counters can only be incremented by non-negative amounts.")
