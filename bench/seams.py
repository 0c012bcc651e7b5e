"""What each speed seam saves: the gateway's own code against the library it stands in for.

    python bench/seams.py [--repeat N]

Four places where the gateway does by hand what a library does (docs/performance.md,
"The speed seams"), each timed in-process under uvloop against that library doing the
same work, as many times as a request (or a stream chunk) does it:

- the per-request metrics (``gateway/observe/metrics.py``, plain counts read by custom
  collectors) against prometheus_client's ``Counter`` and ``Histogram`` objects;
- the access line (``gateway/observe/logs.py`` ``FastJson``) against structlog's chain
  rendering the same ``request_completed`` event, once per request;
- ``gateway/deadlines.Limit`` against ``asyncio.timeout``: three limits set and cleared
  per request (first byte, the answer's body, the handler's), and per stream chunk the
  relay moves its one limit twice (``Limit.set`` against ``Timeout.reschedule``);
- the route table (``gateway/web/routes.py``, two dict lookups) against aiohttp's
  ``UrlDispatcher.resolve`` for the same paths.

Each figure is the median of ``--repeat`` runs, in ns of CPU time (the process's, not the
clock's: steadier on a shared machine) per use; the parity of each seam
with its library is held by tests (tests/test_observe_fast.py, tests/test_deadlines.py,
tests/test_routes_parity.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PER_REQUEST_LIMITS = 3  # first byte, the answer's body read, the handler's body read
PER_CHUNK_SETS = 2  # the relay's one limit: the read's, then the write's


def _best(run: Callable[[int], float], n: int, repeat: int) -> float:
    """ns per use: the median of ``repeat`` runs of ``n`` uses."""
    run(n // 10)  # warm-up
    return statistics.median(run(n) for _ in range(repeat)) / n * 1e9


def access_line(repeat: int) -> tuple[float, float]:
    """The access line of one request: FastJson, then structlog's chain (fast path off)."""
    from gateway.observe import logs
    from gateway.observe.events import Events
    from gateway.observe.metrics import Metrics
    from gateway.observe.request_log import RequestLog

    out = open(os.devnull, "w")  # noqa: SIM115 (the log's sink for the whole run)
    real, sys.stdout = sys.stdout, out
    try:
        logs.configure("info", "json")
    finally:
        sys.stdout = real
    ev = Events(Metrics())
    r = RequestLog("req-0123456789abcdef", 10.0)
    r.team, r.route, r.model, r.answered_by, r.provider = (
        "team-a", "/v1/chat/completions", "gpt-test", "gpt-test", "fake")  # fmt: skip
    r.status, r.attempts, r.ttfb, r.prompt_tokens, r.completion_tokens = 200, 1, 0.012, 12, 34

    m = Metrics()

    def pass_per_request(count: Callable[[], None]) -> Callable[[int], float]:
        async def run(n: int) -> float:  # a loop pass per request, as when serving
            t = time.process_time()
            for _ in range(n):
                count()
                await asyncio.sleep(0)  # the pass whose end writes the batched line
            return time.process_time() - t

        return lambda n: asyncio.run(run(n))

    timed = pass_per_request(lambda: ev.request_completed(r, 10.25))
    fast = _best(timed, 20_000, repeat)
    saved, logs.fast_json = logs.fast_json, None
    try:
        chain = _best(timed, 20_000, repeat)
    finally:
        logs.fast_json = saved
    # both also count the metrics (the same code) and pass the loop: subtract those
    counted = _best(
        pass_per_request(lambda: m.request_done("team-a", "gpt-test", 200, 0.25, 0.012, 12, 34)),
        20_000,
        repeat,
    )
    return fast - counted, chain - counted


def limits(repeat: int) -> dict[str, float]:
    """A limit set and cleared around a wait, and one moved, with Limit and asyncio.timeout."""
    from gateway.upstream.deadlines import Limit

    async def block_limit(n: int) -> float:
        t = time.process_time()
        for _ in range(n):
            with Limit(30.0):
                pass
        return time.process_time() - t

    async def block_timeout(n: int) -> float:
        t = time.process_time()
        for _ in range(n):
            async with asyncio.timeout(30.0):  # noqa: ASYNC100 (the block's own cost)
                pass
        return time.process_time() - t

    async def move_limit(n: int) -> float:
        with Limit(30.0) as lim:
            t = time.process_time()
            for _ in range(n):
                lim.set(30.0)
            return time.process_time() - t

    async def move_timeout(n: int) -> float:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(30.0) as cm:  # noqa: ASYNC100 (moving it is measured)
            t = time.process_time()
            for _ in range(n):
                cm.reschedule(loop.time() + 30.0)
            return time.process_time() - t

    def on_loop(fn: Callable[[int], Any]) -> Callable[[int], float]:
        return lambda n: asyncio.run(fn(n))

    return {
        "block_limit": _best(on_loop(block_limit), 20_000, repeat),
        "block_timeout": _best(on_loop(block_timeout), 20_000, repeat),
        "move_limit": _best(on_loop(move_limit), 50_000, repeat),
        "move_timeout": _best(on_loop(move_timeout), 50_000, repeat),
    }


def router(repeat: int) -> tuple[float, float]:
    """Finding the handler of ``POST /v1/chat/completions``: the route table, then aiohttp's
    UrlDispatcher with the same routes."""
    from aiohttp import web
    from aiohttp.test_utils import make_mocked_request

    from gateway.web import routes

    table = {**routes.V1, **routes.ROUTES, **routes.METRICS}
    dispatcher = web.UrlDispatcher()
    for path, methods in table.items():
        for method, handler in methods.items():
            dispatcher.add_route(method, path, handler)
    req = make_mocked_request("POST", "/v1/chat/completions")

    def by_table(n: int) -> float:
        t = time.process_time()
        for _ in range(n):
            m = table.get(req.path)
            assert m is not None
            m.get(req.method)
        return time.process_time() - t

    async def by_dispatcher(n: int) -> float:
        t = time.process_time()
        for _ in range(n):
            await dispatcher.resolve(req)
        return time.process_time() - t

    return (
        _best(by_table, 100_000, repeat),
        _best(lambda n: asyncio.run(by_dispatcher(n)), 50_000, repeat),
    )


def metrics(repeat: int) -> tuple[float, float]:
    """A request's metrics: the plain counts (``Metrics.request_done`` and
    ``upstream_attempt``), then the same series as prometheus_client's ``Counter`` and
    ``Histogram`` objects fed as the gateway fed them before."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from gateway.observe.counts import LATENCY_BUCKETS
    from gateway.observe.metrics import Metrics

    m = Metrics()

    def counts(n: int) -> float:
        t = time.process_time()
        for _ in range(n):
            m.request_done("team-a", "gpt-test", 200, 0.25, 0.012, 12, 34)
            m.upstream_attempt("fake", "gpt-test", "ok")
        return time.process_time() - t

    r = CollectorRegistry()
    requests = Counter("r", "r", ["team", "model", "status"], registry=r)
    duration = Histogram("d", "d", ["team", "model"], buckets=LATENCY_BUCKETS, registry=r)
    ttfb = Histogram("t", "t", ["team", "model"], buckets=LATENCY_BUCKETS, registry=r)
    tokens = Counter("k", "k", ["team", "model", "kind"], registry=r)
    attempts = Counter("a", "a", ["provider", "model", "category"], registry=r)

    def plain(n: int) -> float:
        t = time.process_time()
        for _ in range(n):
            requests.labels("team-a", "gpt-test", "200").inc()
            duration.labels("team-a", "gpt-test").observe(0.25)
            ttfb.labels("team-a", "gpt-test").observe(0.012)
            tokens.labels("team-a", "gpt-test", "prompt").inc(12)
            tokens.labels("team-a", "gpt-test", "completion").inc(34)
            attempts.labels("fake", "gpt-test", "ok").inc()
        return time.process_time() - t

    return _best(counts, 50_000, repeat), _best(plain, 50_000, repeat)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=7, help="runs per figure (median)")
    args = p.parse_args(argv)
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    fast, chain = access_line(args.repeat)
    lim = limits(args.repeat)
    table, dispatcher = router(args.repeat)
    counted, plain = metrics(args.repeat)
    req_saved = (
        (plain - counted)
        + (chain - fast)
        + PER_REQUEST_LIMITS * (lim["block_timeout"] - lim["block_limit"])
        + (dispatcher - table)
    )
    print(f"# the speed seams against their libraries ({loop}, Python {sys.version.split()[0]},"
          f" pid {os.getpid()}), ns, medians of {args.repeat}")  # fmt: skip
    print()
    print("| seam | the gateway's | the library's | uses | saved |")
    print("|---|---:|---:|---|---:|")
    print(f"| metrics: plain counts / Counter and Histogram | {counted:.0f} | {plain:.0f}"
          f" | 1 per request | {plain - counted:.0f} per request |")  # fmt: skip
    print(f"| access line: FastJson / structlog chain | {fast:.0f} | {chain:.0f} | 1 per request"
          f" | {chain - fast:.0f} per request |")  # fmt: skip
    bt, bl = lim["block_timeout"], lim["block_limit"]
    print(f"| a limit set and cleared: Limit / asyncio.timeout | {bl:.0f} | {bt:.0f}"
          f" | {PER_REQUEST_LIMITS} per request | {PER_REQUEST_LIMITS * (bt - bl):.0f} per request |")  # fmt: skip
    mt, ml = lim["move_timeout"], lim["move_limit"]
    print(f"| a limit moved: Limit.set / Timeout.reschedule | {ml:.0f} | {mt:.0f}"
          f" | {PER_CHUNK_SETS} per chunk | {PER_CHUNK_SETS * (mt - ml):.0f} per chunk |")  # fmt: skip
    print(f"| the route: dict lookups / UrlDispatcher.resolve | {table:.0f} | {dispatcher:.0f}"
          f" | 1 per request | {dispatcher - table:.0f} per request |")  # fmt: skip
    print()
    print(f"together: {req_saved / 1e3:.1f} µs per request,"
          f" {PER_CHUNK_SETS * (mt - ml) / 1e3:.2f} µs per chunk")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
