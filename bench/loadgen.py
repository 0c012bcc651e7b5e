"""Load generators: wrk for plain requests, an asyncio (aiohttp) client for streams."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
from procs import pin_prefix

KEY = "bench-key"
MODEL = "bench-model"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "Say hello to the benchmark."}]}
STREAM_BODY = {**BODY, "stream": True}
CHUNKS = 20

# The same conversation in each client format, with the same output cap (Messages requires
# one), for bench/translation.py: CHAT_BODY is what MESSAGES_BODY is translated to.
_SAY = BODY["messages"]
CHAT_BODY = {"model": MODEL, "max_tokens": 256, "messages": _SAY}
MESSAGES_BODY = {"model": MODEL, "max_tokens": 256, "messages": _SAY}
RESPONSES_BODY = {"model": MODEL, "max_output_tokens": 256, "input": _SAY}

_LUA = """
wrk.method = "POST"
wrk.body = %(body)s
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %(key)s"

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%%d,"duration_us":%%d,"bytes":%%d,"connect":%%d,"read":%%d,' ..
    '"write":%%d,"status":%%d,"timeout":%%d,"p50_us":%%d,"p90_us":%%d,"p99_us":%%d,' ..
    '"mean_us":%%.1f,"max_us":%%d}\\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.mean, latency.max))
end
"""


def _lua_script(body: dict[str, Any] | None = None) -> str:
    fd, path = tempfile.mkstemp(prefix="bench-wrk-", suffix=".lua")
    with os.fdopen(fd, "w") as f:
        f.write(_LUA % {"body": json.dumps(json.dumps(BODY if body is None else body)), "key": KEY})
    return path


@dataclass
class WrkResult:
    connections: int
    seconds: float
    requests: int
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    errors: dict[str, int]
    cpu_s: float = 0.0  # CPU of the process under test during the run (filled by the runner)
    cpu_util: float = 0.0
    foreign_cpu: float = 0.0  # CPUs' worth used by processes outside the benchmark
    cpu_us_per_req: float = 0.0
    upstream_cpu_us_per_req: float = 0.0

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def wrk(
    port: int,
    connections: int,
    seconds: float,
    *,
    cpu: int | None,
    path: str = "/v1/chat/completions",
    around: Callable[[], Any] | None = None,
    body: dict[str, Any] | None = None,
) -> WrkResult:
    """Run wrk (1 thread) and parse the Lua ``done`` summary. ``body``: the JSON POSTed
    (default :data:`BODY`, the chat request); ``path`` the endpoint it goes to."""
    script = _lua_script(body)
    try:
        argv = [
            *pin_prefix(cpu),
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "5s",
            "-s",
            script,
            f"http://127.0.0.1:{port}{path}",
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    finally:
        os.unlink(script)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCHJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
    d = json.loads(line[len("BENCHJSON ") :])
    secs = d["duration_us"] / 1e6
    return WrkResult(
        connections=connections,
        seconds=secs,
        requests=d["requests"],
        rps=d["requests"] / secs if secs else 0.0,
        p50_ms=d["p50_us"] / 1000,
        p90_ms=d["p90_us"] / 1000,
        p99_ms=d["p99_us"] / 1000,
        mean_ms=d["mean_us"] / 1000,
        max_ms=d["max_us"] / 1000,
        errors={k: d[k] for k in ("connect", "read", "write", "status", "timeout") if d[k]},
    )


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


@dataclass
class StreamResult:
    concurrency: int
    seconds: float
    streams: int
    complete: int
    incomplete: int
    errors: int
    streams_per_s: float
    ttfb_p50_ms: float
    ttfb_p99_ms: float
    ttft_p50_ms: float  # time to the first chunk with content (the gateway holds role-only chunks)
    ttft_p99_ms: float
    total_p50_ms: float
    total_p99_ms: float
    chunks_seen: int
    examples: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    cpu_util: float = 0.0
    foreign_cpu: float = 0.0
    cpu_us_per_stream: float = 0.0
    per_chunk_us: float = 0.0
    upstream_cpu_us_per_stream: float = 0.0

    def dict(self) -> dict[str, Any]:
        return asdict(self)


def is_complete(data: bytes) -> bool:
    """The final chunk (finish_reason) arrived and the stream ended with [DONE]."""
    return b'"finish_reason":"stop"' in data and data.rstrip().endswith(b"data: [DONE]")


def is_complete_messages(data: bytes) -> bool:
    """An Anthropic Messages stream: the stop reason (``message_delta``) arrived and the
    stream ended with ``message_stop``."""
    return b'"stop_reason":"end_turn"' in data and data.rstrip().endswith(
        b'event: message_stop\ndata: {"type":"message_stop"}'
    )


def is_complete_responses(data: bytes) -> bool:
    """A Responses stream: it ended with ``response.completed`` (status completed)."""
    last = data.rstrip().rsplit(b"\n\n", 1)[-1]
    return last.startswith(b"event: response.completed\n") and b'"status":"completed"' in last


def _headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}


_CONTENT = re.compile(rb'"content":"[^"]')


@dataclass(frozen=True)
class StreamFormat:
    """What the stream client sends and checks for one client format."""

    path: str
    body: dict[str, Any]
    complete: Callable[[bytes], bool]
    content: re.Pattern[bytes]  # a piece with a text token in it (first token)


STREAM_FORMATS = {
    "openai": StreamFormat("/v1/chat/completions", STREAM_BODY, is_complete, _CONTENT),
    "anthropic": StreamFormat(
        "/v1/messages",
        {**MESSAGES_BODY, "stream": True},
        is_complete_messages,
        re.compile(rb'"text_delta","text":"[^"]'),
    ),
    "responses": StreamFormat(
        "/v1/responses",
        {**RESPONSES_BODY, "stream": True},
        is_complete_responses,
        re.compile(rb'"type":"response.output_text.delta"'),
    ),
}


async def _one_stream(
    session: aiohttp.ClientSession, url: str, payload: bytes, content: re.Pattern[bytes] = _CONTENT
) -> tuple[float, float, float, bytes, int]:
    """(time to first byte, time to first content token, total, body, status)."""
    t0 = time.perf_counter()
    ttfb = ttft = float("nan")
    parts: list[bytes] = []
    async with session.post(url, data=payload, headers=_headers()) as r:
        status = r.status
        async for piece in r.content.iter_any():
            if not parts:
                ttfb = time.perf_counter() - t0
            if ttft != ttft and content.search(piece):  # nan: not seen yet
                ttft = time.perf_counter() - t0
            parts.append(piece)
    return ttfb, ttft, time.perf_counter() - t0, b"".join(parts), status


async def streams(
    port: int,
    concurrency: int,
    seconds: float,
    fmt: str = "openai",
    body: dict[str, Any] | None = None,
    query: str = "",
) -> StreamResult:
    """``concurrency`` workers open streams back to back for ``seconds``. ``fmt``: the client's
    format (:data:`STREAM_FORMATS`: ``openai`` chat completions, the default, ``anthropic``
    Messages, ``responses``), which says the endpoint, the body (``body`` replaces it) and
    what a complete stream ends with. ``chunks_seen`` counts ``data:`` lines (SSE events).
    ``query`` goes on the URL (``chunks=100``: the bench upstream's stream length)."""
    spec = STREAM_FORMATS[fmt]
    url = f"http://127.0.0.1:{port}{spec.path}" + (f"?{query}" if query else "")
    payload = json.dumps(spec.body if body is None else body).encode()
    complete, content = spec.complete, spec.content
    ttfbs: list[float] = []
    ttfts: list[float] = []
    totals: list[float] = []
    counts = {"streams": 0, "complete": 0, "incomplete": 0, "errors": 0, "chunks": 0}
    examples: list[str] = []
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(
        connector=connector, auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:
        # warm the pool (connections made before the clock starts)
        await asyncio.gather(
            *(_one_stream(session, url, payload, content) for _ in range(concurrency))
        )
        end = time.monotonic() + seconds
        t_start = time.monotonic()

        async def worker() -> None:
            while time.monotonic() < end:
                try:
                    ttfb, ttft, total, data, status = await _one_stream(
                        session, url, payload, content
                    )
                except (TimeoutError, aiohttp.ClientError, OSError) as e:
                    counts["errors"] += 1
                    if len(examples) < 3:
                        examples.append(repr(e))
                    continue
                counts["streams"] += 1
                if status == 200 and complete(data):
                    counts["complete"] += 1
                    ttfbs.append(ttfb)
                    ttfts.append(ttft)
                    totals.append(total)
                    counts["chunks"] += data.count(b"data: ")
                else:
                    counts["incomplete"] += 1
                    if len(examples) < 3:
                        examples.append(f"status {status}: {data[-300:]!r}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - t_start
    return StreamResult(
        concurrency=concurrency,
        seconds=elapsed,
        streams=counts["streams"],
        complete=counts["complete"],
        incomplete=counts["incomplete"],
        errors=counts["errors"],
        streams_per_s=counts["streams"] / elapsed,
        ttfb_p50_ms=_pct(ttfbs, 50) * 1000,
        ttfb_p99_ms=_pct(ttfbs, 99) * 1000,
        ttft_p50_ms=_pct(ttfts, 50) * 1000,
        ttft_p99_ms=_pct(ttfts, 99) * 1000,
        total_p50_ms=_pct(totals, 50) * 1000,
        total_p99_ms=_pct(totals, 99) * 1000,
        chunks_seen=counts["chunks"],
        examples=examples,
    )


@dataclass
class HoldRound:
    n: int
    opened: int  # streams whose first content chunk arrived while held
    complete: int
    open_s: float  # time to get every stream's first chunk
    rss_before_mb: float
    rss_open_mb: float  # all streams open and held
    rss_peak_mb: float  # highest VmRSS polled during the round
    rss_after_mb: float  # streams finished, client connections closed, 1 s later
    threads_open: int = 0
    failures: list[str] = field(default_factory=list)  # a few of the streams' errors

    def dict(self) -> dict[str, Any]:
        return asdict(self)


async def hold_round(
    gw_port: int,
    upstream_port: int,
    gw_pid: int,
    n: int,
    *,
    settle_s: float = 1.0,
    open_timeout: float = 30.0,  # well below the policy's stream_idle (60 s)
) -> HoldRound:
    """Open ``n`` streams the upstream holds after their first content chunk; measure the gateway's
    RSS while all are open, release them, close the client side, measure again."""
    from procs import memory_mb, threads

    hold_id = f"{os.getpid()}-{time.monotonic_ns()}"
    url = f"http://127.0.0.1:{gw_port}/v1/chat/completions?hold={hold_id}"
    payload = json.dumps(STREAM_BODY).encode()
    rss_before = memory_mb(gw_pid)["VmRSS"]
    peak = rss_before
    first = 0
    all_open = asyncio.Event()
    stop_poll = False

    async def poll() -> None:
        nonlocal peak
        while not stop_poll:
            peak = max(peak, memory_mb(gw_pid)["VmRSS"])
            await asyncio.sleep(0.05)

    async def one(session: aiohttp.ClientSession) -> bool:
        nonlocal first
        parts: list[bytes] = []
        async with session.post(url, data=payload, headers=_headers()) as r:
            async for piece in r.content.iter_any():
                if not parts:
                    first += 1
                    if first == n:
                        all_open.set()
                parts.append(piece)
        return r.status == 200 and is_complete(b"".join(parts))

    poller = asyncio.create_task(poll())
    connector = aiohttp.TCPConnector(limit=0)
    t0 = time.monotonic()
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_read=120),
        cookie_jar=aiohttp.DummyCookieJar(),
    )
    try:
        tasks = []
        for i in range(n):
            tasks.append(asyncio.create_task(one(session)))
            if i % 100 == 99:
                await asyncio.sleep(0.05)  # stay under the listen backlog
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_open.wait(), open_timeout)
        open_s = time.monotonic() - t0
        await asyncio.sleep(0.5)
        rss_open = memory_mb(gw_pid)["VmRSS"]
        nthreads = threads(gw_pid)
        opened = first
        await asyncio.to_thread(_release, upstream_port, hold_id)
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await session.close()
    await asyncio.sleep(settle_s)
    stop_poll = True
    await poller
    rss_after = memory_mb(gw_pid)["VmRSS"]
    return HoldRound(
        n=n,
        opened=opened,
        complete=sum(1 for r in results if r is True),
        open_s=open_s,
        rss_before_mb=rss_before,
        rss_open_mb=rss_open,
        rss_peak_mb=max(peak, rss_open),
        rss_after_mb=rss_after,
        threads_open=nthreads,
        failures=[repr(r)[:200] for r in results if r is not True][:3],
    )


def _release(upstream_port: int, hold_id: str) -> None:
    from procs import http_get

    http_get(upstream_port, f"/_bench/release?hold={hold_id}")


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")
