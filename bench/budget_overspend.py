"""How far a team overspends its budget with N replicas sharing it through Redis.

    python bench/budget_overspend.py [--replicas 2,3] [--concurrency 8,32] [--latency-ms 50]
                                     [--budget-usd 1] [--no-save]

Starts a real ``redis-server`` (no persistence), the scripted fake provider (in this
process) answering every request after ``--latency-ms`` with priced usage, and
``max(--replicas)`` gateway processes (``GATEWAY_STATE_URL`` on that Redis). Each
(N replicas, M clients) run uses its own team with a budget of ``--budget-usd`` per day:
M clients send chat requests round-robin over the first N replicas, each client sending
its next request as soon as its last is answered, until each is refused with
``budget_exceeded``. Then the replicas flush, and the run reports the limit, the total
spent (the team's key in Redis), the overspend in USD and in requests (each request
costs the same), the requests answered, and the bound of docs/operations.md
("Budgets") for that run. The table is printed and saved to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from redis.asyncio import Redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import procs  # noqa: E402

from gateway.money.budgets import MICRO, period_of  # noqa: E402
from gateway.routing.policyset import hash_key  # noqa: E402
from gateway.state.redis_sync import SYNC_INTERVAL_S  # noqa: E402
from gateway.testing import FakeProvider, SlowFirstByte  # noqa: E402

RESULTS = HERE / "results"
PRICE = {"input": 1000, "output": 1000}  # USD per million tokens
BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "Say hello"}]}


def policies(root: Path, fake_url: str, teams: list[str], budget: float) -> Path:
    platform = {
        "providers": {
            "fake": {"api": "openai", "base_url": fake_url + "/v1", "api_key_env": "FAKE_KEY"}
        },
        "models": {"gpt-test": {"provider": "fake", "upstream_model": "fake-model",
                                "price": PRICE}},
        "policies": {"bench": {"retry": {"max_retries": 0}, "turn_retry": {"max": 0}}},
    }  # fmt: skip
    team_files = {
        t: {"teams": {t: {"keys": [hash_key(f"key-{t}")], "models": ["gpt-test"],
                          "routes": [{"match": {"model": "*"}, "policy": "bench"}],
                          "budget": {"usd": budget, "per": "day"}}}}
        for t in teams
    }  # fmt: skip
    (root / "teams").mkdir(parents=True, exist_ok=True)
    (root / "platform.yaml").write_text(yaml.safe_dump(platform, sort_keys=False))
    for t, data in team_files.items():
        (root / "teams" / f"{t}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def start_redis(port: int, workdir: Path) -> subprocess.Popen[Any]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("bench: redis-server not found (apt-get install redis-server)")
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(workdir)]  # fmt: skip
    return procs.spawn(argv, cpu=None)


def start_gateway(policy_dir: Path, port: int, state_url: str) -> subprocess.Popen[Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GATEWAY_"))}
    env.update({"GATEWAY_LOG_LEVEL": "warning", "GATEWAY_STATE_URL": state_url,
                "FAKE_KEY": "sk-fake", "PYTHONPATH": str(HERE.parent)})  # fmt: skip
    argv = [sys.executable, "-m", "gateway", "serve", "--policies", str(policy_dir),
            "--port", str(port), "--host", "127.0.0.1"]  # fmt: skip
    return procs.spawn(argv, cpu=None, env=env)


async def client(
    s: aiohttp.ClientSession, urls: list[str], first: int, team: str, out: dict[str, int]
) -> None:
    """Send requests until refused for the budget; count what was answered and refused."""
    i = first
    headers = {"authorization": f"Bearer key-{team}"}
    while True:
        url = urls[i % len(urls)]
        i += 1
        async with s.post(url + "/v1/chat/completions", json=BODY, headers=headers) as r:
            data = await r.json()
            if r.status == 200:
                out["answered"] += 1
                continue
            if r.status == 429 and data["error"]["code"] == "budget_exceeded":
                out["refused"] += 1
                return
            raise RuntimeError(f"unexpected answer {r.status}: {data}")


async def one_run(
    urls: list[str], team: str, m: int, budget: float, redis: Redis, cost: float
) -> dict[str, Any]:
    out = {"answered": 0, "refused": 0}
    started = time.monotonic()
    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(client(s, urls, i, team, out) for i in range(m)))
    took = time.monotonic() - started
    await asyncio.sleep(10 * SYNC_INTERVAL_S)  # every replica flushed
    key = f"llm-gateway:spend:{team}:{period_of('day', time.time()).key}"
    spent = int(await redis.get(key) or 0) / MICRO
    over = max(0.0, spent - budget)
    return {
        "replicas": len(urls),
        "clients": m,
        "limit_usd": budget,
        "spent_usd": round(spent, 4),
        "overspend_usd": round(over, 4),
        "overspend_requests": round(over / cost, 1),
        "answered": out["answered"],
        "seconds": round(took, 2),
    }


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    ns = [int(x) for x in args.replicas.split(",")]
    ms = [int(x) for x in args.concurrency.split(",")]
    runs = [(n, m) for n in ns for m in ms]
    teams = [f"bench-{n}-{m}" for n, m in runs] + ["bench-probe"]
    workdir = Path(tempfile.mkdtemp(prefix="budget-bench-"))
    procs.install_cleanup()
    rows: list[dict[str, Any]] = []
    async with FakeProvider() as fake:
        fake.script("fake-model", [SlowFirstByte(args.latency_ms / 1000)] * 100_000)
        root = policies(workdir / "policies", fake.url, teams, args.budget_usd)
        rport = procs.free_port()
        start_redis(rport, workdir)
        redis = Redis.from_url(f"redis://127.0.0.1:{rport}/0")
        for _ in range(100):
            try:
                await redis.ping()
                break
            except Exception:
                await asyncio.sleep(0.05)
        ports = [procs.free_port() for _ in range(max(ns))]
        gws = [start_gateway(root, p, f"redis://127.0.0.1:{rport}/0") for p in ports]
        for g, p in zip(gws, ports, strict=True):
            procs.wait_http(g, p, "/readyz", 30, "the gateway")
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        try:
            # the cost of one request: one request of a probe team, read back from Redis
            probe = await one_run(urls[:1], "bench-probe", 1, args.budget_usd, redis, 1.0)
            cost = probe["spent_usd"] / probe["answered"]
            for n, m in runs:
                row = await one_run(urls[:n], f"bench-{n}-{m}", m, args.budget_usd, redis, cost)
                row["cost_per_request_usd"] = round(cost, 6)
                row["bound_requests"] = bound(n, m, args.latency_ms / 1000)
                rows.append(row)
                print(row, flush=True)
        finally:
            await redis.aclose()
            for g in gws:
                procs.stop(g)
            procs.stop_all()
            shutil.rmtree(workdir, ignore_errors=True)
    return rows


def bound(n: int, m: int, latency: float) -> int:
    """docs/operations.md's bound, in requests: the M requests in flight when the limit is
    crossed, plus what the clients start before every replica has seen it (two sync
    intervals and a round trip; here each client starts a request every ``latency``)."""
    window = 2 * SYNC_INTERVAL_S + 0.005
    return m + math.ceil(m * window / latency)


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = (
        "| replicas N | clients M | limit USD | spent USD | overspend USD | overspend requests "
        "| bound (requests) | answered |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    body = "".join(
        f"| {r['replicas']} | {r['clients']} | {r['limit_usd']:g} | {r['spent_usd']:.4f} "
        f"| {r['overspend_usd']:.4f} | {r['overspend_requests']:g} | {r['bound_requests']} "
        f"| {r['answered']} |\n"
        for r in rows
    )
    cost = rows[0]["cost_per_request_usd"] if rows else 0
    return (
        f"Upstream latency {args.latency_ms} ms, {cost:g} USD per request, "
        f"sync interval {SYNC_INTERVAL_S * 1000:g} ms.\n\n" + head + body
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", default="2,3")
    p.add_argument("--concurrency", default="8,32")
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--budget-usd", type=float, default=1.0)
    p.add_argument("--no-save", action="store_true")
    args = p.parse_args()
    rows = asyncio.run(measure(args))
    text = table(rows, args)
    print(text)
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d-%H%M")
        (RESULTS / f"{stamp}-budget-overspend.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
