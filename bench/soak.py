"""A bounded soak: mixed traffic through the fault proxy for a fixed time (default 60 s).

    python bench/soak.py [--seconds 60] [--fault-rate 0.05] [--concurrency 16] [--seed 1]

The fake provider, the fault-injecting TCP proxy (tests/chaos/faultproxy.py) and
the gateway run in this process; clients send every endpoint, JSON and SSE, with
a few scripted 429/5xx on top of the injected transport faults. Every answer is
judged like the chaos tests judge it (tests/chaos/test_chaos.py: ``verdict``):

- served: answered without recovery;  recovered: answered after retry/fallback;
- failed properly: an error in the endpoint's format (HTTP or in-stream);
- lost: anything else (hang, cut stream, broken connection, wrong format) -- must be 0.

Every 10 s it prints the running counts, p99 latency, RSS and open fds, and at the
end a summary; exit status 1 if any request was lost. Not run by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.chaos.test_chaos import (
    KINDS,
    Tally,
    one_request,
    open_fds,
    scripted_errors,
    start_rig,
    stop_rig,
)
from tests.harness import PROVIDER_KEY, PROVIDER_KEY_ENV


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def p99(xs: list[float]) -> float:
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def line(t: float, tally: Tally) -> str:
    o = tally.outcomes
    return (
        f"t={t:5.1f}s requests={tally.requests} served={o['ok']} recovered={o['recovered']} "
        f"failed_properly={o['failed_properly']} lost={o['lost']} "
        f"p99={p99(tally.latencies) * 1000:.0f}ms rss={rss_mib():.1f}MiB fds={open_fds()}"
    )


async def soak(seconds: float, fault_rate: float, concurrency: int, seed: int) -> int:
    import os

    os.environ.setdefault(PROVIDER_KEY_ENV, PROVIDER_KEY)
    rng = random.Random(seed)
    rss0, fds0 = rss_mib(), open_fds()
    with tempfile.TemporaryDirectory() as tmp:
        rig = await start_rig(Path(tmp), seed, fault_rate=fault_rate)
        tally = Tally()
        start = time.monotonic()
        end = start + seconds
        samples: list[str] = []
        try:
            async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=concurrency)
            ) as session:

                async def client(i: int) -> None:
                    r = random.Random(seed * 1000 + i)
                    while time.monotonic() < end:
                        path, model, stream = r.choice(KINDS)
                        await one_request(session, rig.gw.url, path, model, stream, tally)

                async def scripted() -> None:
                    while time.monotonic() < end:
                        scripted_errors(rig.fake, rng, 1)
                        rig.fake.requests.clear()  # the fake's own records: not the gateway's RSS
                        await asyncio.sleep(0.5)

                async def report() -> None:
                    while time.monotonic() < end:
                        await asyncio.sleep(min(10.0, max(0.0, end - time.monotonic())))
                        samples.append(line(time.monotonic() - start, tally))
                        print(samples[-1], flush=True)

                await asyncio.gather(*(client(i) for i in range(concurrency)), scripted(), report())
        finally:
            await stop_rig(rig)
    await asyncio.sleep(0.3)
    elapsed = time.monotonic() - start
    o = tally.outcomes
    print()
    print(f"soak: {elapsed:.0f} s, {concurrency} clients, fault rate {fault_rate}, seed {seed}")
    print(f"  faults injected : {rig.proxy.injected} {dict(rig.proxy.counts)}")
    print(f"  requests        : {tally.requests} ({tally.requests / elapsed:.0f}/s)")
    print(f"  served          : {o['ok']}")
    print(f"  recovered       : {o['recovered']}")
    print(f"  failed properly : {o['failed_properly']}")
    print(f"  lost            : {o['lost']}")
    print(f"  p99 latency     : {p99(tally.latencies) * 1000:.0f} ms")
    print(f"  RSS             : {rss0:.1f} MiB before, {rss_mib():.1f} MiB after")
    print(f"  open fds        : {fds0} before, {open_fds()} after")
    for lost in tally.lost[:10]:
        print("  LOST:", lost)
    return 1 if o["lost"] else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--fault-rate", type=float, default=0.05)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.seconds > 600:
        ap.error("a soak is bounded: at most 600 s")
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # errors only
    return asyncio.run(soak(args.seconds, args.fault_rate, args.concurrency, args.seed))


if __name__ == "__main__":
    raise SystemExit(main())
