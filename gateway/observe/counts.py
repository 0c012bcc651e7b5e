"""Per-request counts kept in plain Python, read at a scrape as prometheus_client shows them.

A ``Count`` or ``Observed`` holds what a ``Counter`` or ``Histogram`` child would (value or
bucket counts and sum, and when it was created); ``Family`` is the custom collector that
builds a metric from them at every scrape. The gateway's metrics: gateway/observe/metrics.py.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import NoReturn

from prometheus_client.metrics_core import CounterMetricFamily, Metric

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: The histograms' upper bounds, +Inf last, as ``Histogram`` keeps them; an observation ``v``
#: is counted at ``bisect_left(BOUNDS, v)``, the first bound ``>= v`` as ``observe()``'s
#: walk finds it; NaN at ``NAN``, a spare slot: summed, in no bucket, as ``observe()`` does.
BOUNDS = [*(float(b) for b in LATENCY_BUCKETS), math.inf]
NAN = len(BOUNDS)
#: The ``le`` label of each bound, as prometheus_client writes it (Go's float format; the
#: bounds are plain decimals below 1e6, where that is Python's ``repr``).
LE = [("+Inf" if b == math.inf else repr(b)) for b in BOUNDS]
# As prometheus_client decides it, from the environment when it is imported (documented:
# PROMETHEUS_DISABLE_CREATED_SERIES drops the _created series).
CREATED = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in (
    "true",
    "1",
    "t",
)


class Count:
    """One counter series: its value and when it was created."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value: float = 0
        self.created = time.time()


class Observed:
    """One histogram series: the sum of its observations and, per bound of ``BOUNDS``
    (then NaN), how many fell at it (not cumulative)."""

    __slots__ = ("counts", "created", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (NAN + 1)
        self.sum = 0.0
        self.created = time.time()


class Series:
    """The per-request series of one (team, model)."""

    __slots__ = ("by_status", "completion", "duration", "prompt", "ttfb")

    def __init__(self) -> None:
        self.by_status: dict[int, Count] = {}
        self.duration = Observed()
        self.ttfb: Observed | None = None
        self.prompt: Count | None = None
        self.completion: Count | None = None


class Family:
    """A custom collector (prometheus_client's ``Collector`` interface) for one metric:
    ``collect()`` builds it from the plain counts; ``describe()`` names it without samples,
    so that registering it fails as a plain metric's would if the name were taken."""

    __slots__ = ("_build", "_empty")

    def __init__(self, empty: Callable[[], Metric], build: Callable[[], Metric]) -> None:
        self._empty, self._build = empty, build

    def describe(self) -> list[Metric]:
        return [self._empty()]

    def collect(self) -> list[Metric]:
        return [self._build()]


def add_count(family: CounterMetricFamily, labels: list[str] | tuple[str, ...], c: Count) -> None:
    family.add_metric(labels, float(c.value), created=c.created if CREATED else None)


def negative() -> NoReturn:
    # as Counter.inc, which raised it from request_completed when it was called per request
    raise ValueError("Counters can only be incremented by non-negative amounts.")
