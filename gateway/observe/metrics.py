# long: one class, Metrics: every metric declared, counted per request, collected per scrape
"""The gateway's Prometheus metrics (docs/operations.md, Metrics); the only module that
creates Prometheus objects.

Label values come from policy files (team, model, provider, strategy) or fixed sets
(category, status code), never raw from requests, so cardinality stays bounded.

The per-request series (requests, duration, time to first byte, tokens, cost, upstream
attempts) are counted in plain Python under one lock (gateway/observe/counts.py) and exposed
by custom collectors (prometheus_client's ``Collector`` interface: ``collect()`` builds a
``CounterMetricFamily`` / ``HistogramMetricFamily`` from the counts at every scrape,
``render()``, ``get_sample_value``): a Prometheus ``inc()`` or ``observe()`` takes its own
lock and walks the buckets in Python, about a microsecond each, five of them per request
(in multiprocess mode each is a write to a memory-mapped file, 13 µs per request). A scrape
sees what the plain ``Counter`` / ``Histogram`` objects showed: the same names, types,
help, labels, buckets and ``_created`` series, a series from the request that first
counted it (tests/test_observe_fast.py compares every sample with plain ``inc()`` /
``observe()`` calls).

The same code counts and collects with one process and with workers. In prometheus_client's
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set, as ``llm-gateway serve --workers N``
sets it for its workers: gateway/web/workers.py) each worker also writes its counts to
``counts_<pid>.json`` in that directory once a second and when it stops (:meth:`Metrics.flush`),
and the worker that answers a scrape writes its own file first and adds up every worker's
file (files only, each of which only grows: a counter never goes back whichever worker
answers): another worker's requests show up to a second late, and a worker killed outright
loses at most its last second. prometheus_client's own files cannot take these counts: its public
API adds to a histogram one ``observe()`` at a time. The other metrics are plain Prometheus
objects, in multiprocess mode written to its files by prometheus_client and added up by its
``MultiProcessCollector`` (:meth:`Metrics.render`); there the in-flight gauge is moved by
the gateway per request (not read when scraped) and the gauges say how the processes'
values combine (``livesum`` for in-flight requests, ``livemax`` for the others), and no
``_created`` series is exported, the per-request ones included.

``deployment_up`` is read, not kept: at every scrape it is built from what
:attr:`Metrics.deployments_up` answers (the gateway's deployment board and current policy
set; with workers, the board of the worker that answers), so it is 1 again when a cooldown
simply ends, and a state received from another replica shows.
"""

from __future__ import annotations

import glob
import os
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable

import structlog
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from gateway.observe.counts import (
    BOUNDS,
    CREATED,
    LE,
    NAN,
    Count,
    Counts,
    Family,
    Observed,
    Series,
    add_count,
    negative,
)

log = structlog.get_logger("gateway.metrics")
P = "llm_gateway_"
# As prometheus_client decides it, from the environment when it is imported (documented:
# multiprocess mode; the _created series: gateway/observe/counts.py).
_MULTIPROCESS_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get(
    "prometheus_multiproc_dir"  # noqa: SIM112 (the old name prometheus_client still reads)
)

_REQUESTS = (P + "requests_total", "Requests answered", ("team", "model", "status"))
_DURATION = (
    P + "request_duration_seconds",
    "Time from request to the last byte of the answer",
    ("team", "model"),
)
_TTFB = (
    P + "time_to_first_byte_seconds",
    "Time from request to the first byte sent to the client",
    ("team", "model"),
)
_ATTEMPTS = (
    P + "upstream_attempts_total",
    "Upstream attempts by outcome category (ok for success)",
    ("provider", "model", "category"),
)
_TOKENS = (P + "tokens_total", "Tokens reported by upstream usage", ("team", "model", "kind"))
_COST = (
    P + "cost_usd_total",
    "What answers (kind answer) and recovery attempts (kind recovery) cost, USD",
    ("team", "model", "kind"),
)
_DEPLOYMENT_UP = (
    P + "deployment_up",
    "1 while a deployment of a model with several is in service, 0 while it is out"
    " (cooldown, quota, auth, ejection)",
    ("model", "deployment"),
)
_BUDGET_SPENT = (
    P + "budget_spent_usd",
    "USD a team with a budget spent in its current period, as this process knows it",
    ("team",),
)
_BUDGET_LIMIT = (P + "budget_limit_usd", "A team's budget per period (USD)", ("team",))
#: (model, deployment, in service) for every deployment of the models with several.
DeploymentsUp = Callable[[], Iterable[tuple[str, str, bool]]]
#: (team, spent, limit) in USD for every team with a budget.
Budgets = Callable[[], Iterable[tuple[str, float, float]]]
_Kind = type[CounterMetricFamily] | type[GaugeMetricFamily] | type[HistogramMetricFamily]


def _counts_file(directory: str, pid: int) -> str:
    return os.path.join(directory, f"counts_{pid}.json")


def _read_counts(path: str) -> Counts | None:
    """A process's counts file; None when it is gone or cannot be read (logged: a broken
    file must not break every scrape)."""
    try:
        with open(path, "rb") as f:
            return Counts.load(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as e:
        log.warning("metrics_counts_unreadable", path=path, error=str(e))
        return None


class Metrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, multiprocess_dir: str | None = None
    ) -> None:
        """``multiprocess_dir``: prometheus_client's multiprocess directory, where this
        process writes its per-request counts (:meth:`flush`) and finds the others'; by
        default ``PROMETHEUS_MULTIPROC_DIR`` as prometheus_client read it."""
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        where = multiprocess_dir if multiprocess_dir is not None else _MULTIPROCESS_DIR
        #: Multiprocess mode: the in-flight gauge is set by the gateway (a function cannot be
        #: read from another process), and a scrape shows every process's counts added up.
        self.multiprocess = where is not None
        self._dir = where
        self._with_created = CREATED and not self.multiprocess  # as MultiProcessCollector shows
        self._combined: CollectorRegistry | None = None
        self._lock = threading.Lock()
        self._own = Counts()  # this process's; the hot path reaches its dicts directly
        if where is not None:  # a process with a dead worker's pid goes on from its counts
            self._own.add(_read_counts(_counts_file(where, os.getpid())) or Counts())
        self._series = self._own.series
        self._attempts = self._own.attempts
        self._families: list[Family] = []
        self._snapshot: Counts | None = None  # the counts of the scrape being rendered
        #: Read at every scrape for ``deployment_up`` (set by the gateway; None: no series).
        self.deployments_up: DeploymentsUp | None = None
        #: Read at every scrape for the budget gauges (set by the gateway; None: no series).
        self.budgets: Budgets | None = None
        # Registered in this order, as /metrics lists them; the per-request ones as
        # collectors of the counts above.
        self._add_requests(r)
        self._add_recovery(r)
        self._add_process(r)

    def _add_requests(self, r: CollectorRegistry) -> None:
        """Requests, their attempts, retries and fallbacks."""
        counter, histogram = CounterMetricFamily, HistogramMetricFamily
        self.requests = self._family(_REQUESTS, counter, self._collect_requests)
        self.duration = self._family(_DURATION, histogram, self._collect_duration)
        self.ttfb = self._family(_TTFB, histogram, self._collect_ttfb)
        self.upstream_attempts = self._family(_ATTEMPTS, counter, self._collect_attempts)
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
            multiprocess_mode="livemax",  # workers: active on any of them
        )

    def _add_recovery(self, r: CollectorRegistry) -> None:
        """Deployments, budgets, compaction and continuation; tokens and cost."""
        counter = CounterMetricFamily
        self.deployment_up = self._family(
            _DEPLOYMENT_UP, GaugeMetricFamily, self._collect_deployment_up
        )
        self._family(_BUDGET_SPENT, GaugeMetricFamily, lambda: self._collect_budgets(1))
        self._family(_BUDGET_LIMIT, GaugeMetricFamily, lambda: self._collect_budgets(2))
        self.deployment_attempts = Counter(
            P + "deployment_attempts_total",
            "Upstream attempts per deployment of models with several, by outcome",
            ["model", "deployment", "outcome"],
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
        self.tokens = self._family(_TOKENS, counter, self._collect_tokens)
        # counted only for requests whose provider read or wrote its prompt cache
        self.cached_tokens = Counter(
            P + "cached_tokens_total",
            "Prompt tokens read from (kind read) or written to (kind write) a provider's"
            " prompt cache",
            ["team", "model", "deployment", "kind"],
            registry=r,
        )
        self.cost = self._family(_COST, counter, self._collect_cost)

    def _add_process(self, r: CollectorRegistry) -> None:
        """What the process as a whole sees: requests in flight, clients gone, reloads,
        recovery stopped, the shared state."""
        self.inflight = Gauge(
            P + "inflight_requests", "Requests in flight", registry=r, multiprocess_mode="livesum"
        )
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
        self.recovery_stops = Counter(
            P + "recovery_stops_total",
            "Recovery that stopped, by decision (give_up, continuation, resume) and reason",
            ["decision", "reason"],
            registry=r,
        )
        self.state_degraded = Gauge(
            P + "state_backend_degraded",
            "1 while the shared state backend is unreachable",
            registry=r,
            multiprocess_mode="livemax",
        )

    def _family(
        self, spec: tuple[str, str, tuple[str, ...]], kind: _Kind, build: Callable[[], Metric]
    ) -> Family:
        """A collector for ``spec`` (name, help, label names) of ``kind``, registered."""
        name, doc, labels = spec

        def empty() -> Metric:
            return kind(name, doc, labels=labels)

        family = Family(empty, build)
        self.registry.register(family)
        self._families.append(family)
        return family

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
        cost_usd: float = 0.0,
        recovery_cost_usd: float = 0.0,
    ) -> None:
        """Count one answered request: ``requests_total``, ``request_duration_seconds``,
        ``time_to_first_byte_seconds`` (when there was a first byte), ``tokens_total`` and
        ``cost_usd_total`` (the kinds that are over 0)."""
        lock = self._lock
        lock.acquire()  # not ``with``: the same, cheaper by a third on this path
        try:
            s = self._series.get((team, model))
            if s is None:
                s = self._series[team, model] = Series()
            c = s.by_status.get(status)
            if c is None:
                c = s.by_status[status] = Count()
            c.value += 1
            h = s.duration  # counted as BOUNDS says
            h.sum += duration
            h.counts[bisect_left(BOUNDS, duration) if duration == duration else NAN] += 1
            if ttfb is not None:
                t = s.ttfb
                if t is None:
                    t = s.ttfb = Observed()
                t.sum += ttfb
                t.counts[bisect_left(BOUNDS, ttfb) if ttfb == ttfb else NAN] += 1
            if prompt_tokens:
                if prompt_tokens < 0:
                    negative()
                if s.prompt is None:
                    s.prompt = Count()
                s.prompt.value += prompt_tokens
            if completion_tokens:
                if completion_tokens < 0:
                    negative()
                if s.completion is None:
                    s.completion = Count()
                s.completion.value += completion_tokens
            if cost_usd > 0:
                if s.cost is None:
                    s.cost = Count()
                s.cost.value += cost_usd
            if recovery_cost_usd > 0:
                if s.recovery_cost is None:
                    s.recovery_cost = Count()
                s.recovery_cost.value += recovery_cost_usd
        finally:
            lock.release()

    def upstream_attempt(self, provider: str, model: str, category: str) -> None:
        """Count one upstream attempt in ``upstream_attempts_total``."""
        key = (provider, model, category)
        lock = self._lock
        lock.acquire()
        try:
            c = self._attempts.get(key)
            if c is None:
                c = self._attempts[key] = Count()
            c.value += 1
        finally:
            lock.release()

    # ---- with workers: this process's counts out, every process's in -----------------
    def flush(self) -> None:
        """Multiprocess mode: write this process's counts to its file in the multiprocess
        directory (whole: a reader sees the last file or the one before); a no-op alone.
        Called once a second, when the process stops (gateway/web/workers.py) and before
        a scrape is answered. A file that cannot be written is logged, not raised: the
        counts stay in memory and the next flush tries again."""
        if self._dir is None:
            return
        with self._lock:
            data = self._own.dump()
        path = _counts_file(self._dir, os.getpid())
        try:
            with open(path + ".tmp", "wb") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
        except FileNotFoundError:  # the supervisor removed the directory: the process ends
            pass
        except OSError as e:
            log.warning("metrics_flush_failed", path=path, error=str(e))

    def _counts(self) -> Counts:
        """This process's counts; in multiprocess mode every process's last file added up,
        this one's written first (a worker that died included: its counts stay, as its
        counters' do). Files only: each only grows, so a counter never goes back whichever
        worker answers the scrape."""
        if self._dir is None:
            total = Counts()
            with self._lock:
                total.add(self._own)
            return total
        self.flush()
        total = Counts()
        for path in glob.glob(os.path.join(glob.escape(self._dir), "counts_*.json")):
            found = _read_counts(path)
            if found is not None:
                total.add(found)
        return total

    def _current(self) -> Counts:
        """The counts a collector shows: those of the scrape being rendered (read once for
        all its families, so they agree), else read now."""
        return self._snapshot if self._snapshot is not None else self._counts()

    def cached(self, team: str, model: str, deployment: str, read: int, write: int) -> None:
        """Count a request's prompt-cache tokens in ``cached_tokens_total`` (the kinds over
        0; called only when one is)."""
        if read:
            self.cached_tokens.labels(team, model, deployment, "read").inc(read)
        if write:
            self.cached_tokens.labels(team, model, deployment, "write").inc(write)

    def recovery_stopped(self, decision: str, reason: str) -> None:
        """Count one "no" of the recovery decisions in ``recovery_stops_total``."""
        self.recovery_stops.labels(decision, reason).inc()

    # ---- the collectors (every scrape) -------------------------------------------------
    def _collect_requests(self) -> Metric:
        name, doc, labels = _REQUESTS
        family = CounterMetricFamily(name, doc, labels=labels)
        created = self._with_created
        for (team, model), s in self._current().series.items():
            for status, c in s.by_status.items():
                add_count(family, [team, model, str(status)], c, created)
        return family

    def _collect_duration(self) -> Metric:
        return self._collect_histogram(_DURATION, lambda s: s.duration)

    def _collect_ttfb(self) -> Metric:
        return self._collect_histogram(_TTFB, lambda s: s.ttfb)

    def _collect_histogram(
        self, spec: tuple[str, str, tuple[str, ...]], part: Callable[[Series], Observed | None]
    ) -> Metric:
        name, doc, labels = spec
        family = HistogramMetricFamily(name, doc, labels=labels)
        for (team, model), s in self._current().series.items():
            h = part(s)
            if h is None:
                continue
            buckets: list[tuple[str, float]] = []
            acc = 0.0
            for le, n in zip(LE, h.counts, strict=False):  # NaN's slot is in no bucket
                acc += n
                buckets.append((le, acc))
            family.add_metric([team, model], buckets, h.sum)
            if self._with_created:
                family.add_sample(name + "_created", {"team": team, "model": model}, h.created)
        return family

    def _collect_attempts(self) -> Metric:
        name, doc, labels = _ATTEMPTS
        family = CounterMetricFamily(name, doc, labels=labels)
        for key, c in self._current().attempts.items():
            add_count(family, key, c, self._with_created)
        return family

    def _collect_tokens(self) -> Metric:
        return self._collect_kinds(_TOKENS, (("prompt", "prompt"), ("completion", "completion")))

    def _collect_cost(self) -> Metric:
        return self._collect_kinds(_COST, (("cost", "answer"), ("recovery_cost", "recovery")))

    def _collect_kinds(
        self, spec: tuple[str, str, tuple[str, ...]], kinds: tuple[tuple[str, str], ...]
    ) -> Metric:
        """A counter of ``spec`` by team, model and kind: per (:class:`Series` attribute,
        its ``kind`` label) of ``kinds``, the series that counted it."""
        name, doc, labels = spec
        family = CounterMetricFamily(name, doc, labels=labels)
        created = self._with_created
        for (team, model), s in self._current().series.items():
            for attr, kind in kinds:
                c = getattr(s, attr)
                if c is not None:
                    add_count(family, [team, model, kind], c, created)
        return family

    def _collect_deployment_up(self) -> Metric:
        name, doc, labels = _DEPLOYMENT_UP
        family = GaugeMetricFamily(name, doc, labels=labels)
        if self.deployments_up is not None:
            for model, deployment, up in self.deployments_up():
                family.add_metric([model, deployment], 1.0 if up else 0.0)
        return family

    def _collect_budgets(self, which: int) -> Metric:
        name, doc, labels = _BUDGET_SPENT if which == 1 else _BUDGET_LIMIT
        family = GaugeMetricFamily(name, doc, labels=labels)
        if self.budgets is not None:
            for team, spent, limit in self.budgets():
                family.add_metric([team], spent if which == 1 else limit)
        return family

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type (in multiprocess mode: of
        every process, added up)."""
        registry = self.registry
        if self._dir is not None:
            if self._combined is None:
                self._combined = CollectorRegistry()
                # prometheus_client's files, then the collectors of the counts
                multiprocess.MultiProcessCollector(self._combined, path=self._dir)  # type: ignore[no-untyped-call]
                for family in self._families:
                    self._combined.register(family)
            registry = self._combined
        self._snapshot = self._counts()  # one read for every family of this scrape
        try:
            return generate_latest(registry), CONTENT_TYPE_LATEST
        finally:
            self._snapshot = None


def process_gone(pid: int) -> None:
    """A worker exited (multiprocess mode): its live gauges go, its counts stay."""
    multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
