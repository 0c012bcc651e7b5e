"""Per-request counts kept in plain Python, read at a scrape as prometheus_client shows them.

A ``Count`` or ``Observed`` holds what a ``Counter`` or ``Histogram`` child would (value or
bucket counts and sum, and when it was created); ``Family`` is the custom collector that
builds a metric from them at every scrape. ``Counts`` is one process's; with workers each
writes its own to a file once a second (``dump``) and the worker that answers a scrape
adds the others' (``load``, ``add``). The gateway's metrics: gateway/observe/metrics.py.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from typing import Any, NoReturn

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

    def add(self, other: Count) -> None:
        self.value += other.value
        self.created = min(self.created, other.created)


class Observed:
    """One histogram series: the sum of its observations and, per bound of ``BOUNDS``
    (then NaN), how many fell at it (not cumulative)."""

    __slots__ = ("counts", "created", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (NAN + 1)
        self.sum = 0.0
        self.created = time.time()

    def add(self, other: Observed) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.sum += other.sum
        self.created = min(self.created, other.created)


class Series:
    """The per-request series of one (team, model); ``cost`` and ``recovery_cost`` in USD."""

    __slots__ = ("by_status", "completion", "cost", "duration", "prompt", "recovery_cost", "ttfb")

    def __init__(self) -> None:
        self.by_status: dict[int, Count] = {}
        self.duration = Observed()
        self.ttfb: Observed | None = None
        self.prompt: Count | None = None
        self.completion: Count | None = None
        self.cost: Count | None = None
        self.recovery_cost: Count | None = None

    def add(self, other: Series) -> None:
        for status, c in other.by_status.items():
            self.by_status.setdefault(status, Count()).add(c)
        self.duration.add(other.duration)
        if other.ttfb is not None:
            self.ttfb = self.ttfb or Observed()
            self.ttfb.add(other.ttfb)
        for name in _COUNTED:
            theirs = getattr(other, name)
            if theirs is not None:
                mine = getattr(self, name)
                if mine is None:
                    mine = Count()
                    setattr(self, name, mine)
                mine.add(theirs)


#: The :class:`Series` counters a request adds to only when not 0.
_COUNTED = ("prompt", "completion", "cost", "recovery_cost")


class Counts:
    """The per-request counts of one process (or of several, added up): ``series`` by
    (team, model), ``attempts`` by (provider, model, category)."""

    __slots__ = ("attempts", "series")

    def __init__(self) -> None:
        self.series: dict[tuple[str, str], Series] = {}
        self.attempts: dict[tuple[str, str, str], Count] = {}

    def add(self, other: Counts) -> None:
        for key, s in other.series.items():
            self.series.setdefault(key, Series()).add(s)
        for key3, c in other.attempts.items():
            self.attempts.setdefault(key3, Count()).add(c)

    def dump(self) -> bytes:
        """The counts as a file's content (JSON, where NaN and infinite sums survive)."""
        series = [
            [team, model, [[st, c.value, c.created] for st, c in s.by_status.items()],
             _observed_row(s.duration), _observed_row(s.ttfb),
             _count_row(s.prompt), _count_row(s.completion),
             _count_row(s.cost), _count_row(s.recovery_cost)]
            for (team, model), s in self.series.items()
        ]  # fmt: skip
        attempts = [[*key, c.value, c.created] for key, c in self.attempts.items()]
        return json.dumps({"series": series, "attempts": attempts}).encode()

    @classmethod
    def load(cls, data: bytes) -> Counts:
        """What :meth:`dump` wrote."""
        doc = json.loads(data)
        new = cls()
        for row in doc["series"]:
            team, model, by_status, duration, ttfb, prompt, completion, cost, recovery = row
            s = new.series[team, model] = Series()
            s.by_status = {st: _count_of(value, created) for st, value, created in by_status}
            s.duration = _observed_of(*duration)
            s.ttfb = None if ttfb is None else _observed_of(*ttfb)
            s.prompt = None if prompt is None else _count_of(*prompt)
            s.completion = None if completion is None else _count_of(*completion)
            s.cost = None if cost is None else _count_of(*cost)
            s.recovery_cost = None if recovery is None else _count_of(*recovery)
        for provider, model, category, value, created in doc["attempts"]:
            new.attempts[provider, model, category] = _count_of(value, created)
        return new


def _count_row(c: Count | None) -> list[float] | None:
    return None if c is None else [c.value, c.created]


def _observed_row(h: Observed | None) -> list[Any] | None:
    return None if h is None else [h.counts, h.sum, h.created]


def _count_of(value: float, created: float) -> Count:
    c = Count()
    c.value, c.created = value, created
    return c


def _observed_of(counts: list[int], total: float, created: float) -> Observed:
    h = Observed()
    h.counts, h.sum, h.created = counts, total, created
    return h


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


def add_count(
    family: CounterMetricFamily, labels: list[str] | tuple[str, ...], c: Count, created: bool
) -> None:
    family.add_metric(labels, float(c.value), created=c.created if created else None)


def negative() -> NoReturn:
    # as Counter.inc, which raised it from request_completed when it was called per request
    raise ValueError("Counters can only be incremented by non-negative amounts.")
