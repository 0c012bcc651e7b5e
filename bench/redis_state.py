"""The gateway with Redis recovery state beside in-process state, in one run.

    python bench/redis_state.py [--quick] [--duration S] [--no-netns] [--no-save]

Same isolation, pinning, upstream, policy set and load generators as ``bench/run.py``
(whose helpers it uses): the gateway on CPU 1; the upstream, wrk, the stream client,
this runner and a real ``redis-server`` (started here, no persistence, like the
``redis`` service of ``deploy/``) on CPU 0. Two gateways run on the same upstream,
``GATEWAY_STATE_URL`` empty (in-process state) and ``GATEWAY_STATE_URL=redis://...``,
and take turns for ``--rounds`` rounds (the order alternating; medians), so that the
machine's drift falls on both alike. Per state and round: wrk c=64 and c=1, the stream
client c=16, and the Redis commands the gateway sent per request (``INFO commandstats``
before and after each phase). The bench policy set has team limits and a fallback
chain, so every request pays admission, the fallback choice and its record, the
retry-budget count and the token count: the whole happy path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402
import procs  # noqa: E402
import run as bench  # noqa: E402

RESULTS = HERE / "results"
GOAL_CPU_RATIO = 1.25  # Redis state: at most 25 % more gateway CPU per request
GOAL_ADDED_P50_MS = 0.3  # and at most 0.3 ms more at p50, c=1


def _redis_cmd(port: int, *words: str) -> bytes:
    """One RESP command on a fresh connection; the raw reply (small replies only)."""
    payload = f"*{len(words)}\r\n".encode()
    for w in words:
        payload += f"${len(w.encode())}\r\n{w}\r\n".encode()
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(payload)
        data = b""
        s.settimeout(0.5)
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
            if data.startswith(b"+") or (data.startswith(b"$") and data.endswith(b"\r\n\r\n")):
                break
    return data


def commandstats(port: int) -> dict[str, int]:
    """Calls per command since the server started (``INFO commandstats``)."""
    raw = _redis_cmd(port, "INFO", "commandstats").decode(errors="replace")
    out: dict[str, int] = {}
    for line in raw.splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[8:].split(":", 1)
            calls = dict(kv.split("=", 1) for kv in rest.split(","))
            out[name] = int(calls["calls"])
    return out


def _diff(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: v - a.get(k, 0) for k, v in b.items() if v - a.get(k, 0) > 0}


def start_redis(port: int, cpu: int | None, workdir: Path) -> subprocess.Popen[Any]:
    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("bench: redis-server not found (apt-get install redis-server)")
    argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(workdir)]  # fmt: skip
    p = procs.spawn(argv, cpu=cpu)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            if _redis_cmd(port, "PING").startswith(b"+PONG"):
                return p
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("redis-server did not answer PING")


def start_gateway(
    policy_dir: Path, port: int, cpu: int | None, log_path: Path, state_url: str
) -> subprocess.Popen[Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GATEWAY_"))}
    env.update(
        {
            "GATEWAY_LOG_LEVEL": "info",
            "GATEWAY_LOG_FORMAT": "json",
            "GATEWAY_SHUTDOWN_GRACE_S": "1",
            "GATEWAY_STATE_URL": state_url,
            "BENCH_UPSTREAM_KEY": "sk-bench-upstream",
        }
    )
    argv = [sys.executable, "-m", "gateway", "serve", "--policies", str(policy_dir),
            "--port", str(port), "--host", "127.0.0.1"]  # fmt: skip
    with log_path.open("wb") as log:
        p = procs.spawn(argv, cpu=cpu, env=env, stdout=log, stderr=subprocess.STDOUT)
    procs.wait_http(p, port, "/readyz", 30, "the gateway")
    return p


def measure(args: argparse.Namespace) -> dict[str, Any]:
    isolation = bench._loopback_up()
    if procs.cpu_count() >= 2:
        gw_cpu, load_cpu = 1, 0
        pinning = "gateway on CPU 1; upstream, redis-server, load generators and runner on CPU 0"
        os.sched_setaffinity(0, {load_cpu})
    else:
        gw_cpu = load_cpu = None
        pinning = "NOT pinned: only one CPU available"
    bench.say(f"isolation: {isolation}; pinning: {pinning}")
    D, warm = args.duration, (1.0 if args.quick else 2.0)
    out: dict[str, Any] = {
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "duration_s": D,
        "isolation": isolation,
        "pinning": pinning,
        "commit": bench._git_commit(),
    }
    tmp = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    up_port, gw_port = bench._port(bench.UPSTREAM_PORT), bench._port(bench.GATEWAY_PORT)
    redis_port = bench._port(18379)
    policy_dir = bench._policy_dir(up_port)
    try:
        up = procs.spawn(
            [sys.executable, str(HERE / "upstream.py"), "--port", str(up_port),
             "--chunk-gap-ms", "1"],
            cpu=load_cpu,
        )  # fmt: skip
        procs.wait_http(up, up_port, "/v1/models", 15, "the bench upstream")
        redis = start_redis(redis_port, load_cpu, tmp)
        bench.say("direct: c=1 and streams against the bench upstream")
        loadgen.wrk(up_port, 1, warm, cpu=load_cpu)
        d1, _ = bench.run_wrk("direct", up_port, 1, D, load_cpu, [up.pid])
        ds, _ = bench.run_streams("direct streams", up_port, 16, D, [up.pid])
        out["direct"] = {"c1": vars(d1), "streams": ds.dict()}
        url = f"redis://127.0.0.1:{redis_port}/0"
        gateways = {}
        for i, (name, state_url) in enumerate((("memory", ""), ("redis", url))):
            port = bench._port(gw_port + i)
            gw = start_gateway(policy_dir, port, gw_cpu, tmp / f"gw-{name}.log", state_url)
            bench._check_answer(port)
            loadgen.wrk(port, 64, warm, cpu=load_cpu)
            gateways[name] = (gw, port)
        # The two gateways take turns, round after round (the order alternating), so that
        # the machine's drift (these machines are shared) falls on both alike; medians.
        rounds: dict[str, list[dict[str, Any]]] = {"memory": [], "redis": []}
        for n in range(args.rounds):
            order = ("memory", "redis") if n % 2 == 0 else ("redis", "memory")
            for name in order:
                gw, port = gateways[name]
                row: dict[str, Any] = {}
                for key, c in (("c64", 64), ("c1", 1)):
                    before = commandstats(redis_port)
                    r, _ = bench.run_wrk(
                        f"gateway {name} state (round {n + 1})", port, c, D, load_cpu,
                        [gw.pid, redis.pid],
                    )  # fmt: skip
                    cmds = _diff(before, commandstats(redis_port))
                    r.redis_commands = cmds
                    r.redis_commands_per_req = sum(cmds.values()) / r.requests if r.requests else 0
                    r.redis_cpu_us_per_req = getattr(r, "upstream_cpu_us_per_req", None)
                    row[key] = vars(r)
                    bench.say(
                        f"   redis commands per request {r.redis_commands_per_req:.2f}: {cmds}"
                    )
                st, _ = bench.run_streams(f"gateway {name} streams (round {n + 1})", port, 16, D,
                                          [gw.pid])  # fmt: skip
                row["streams"] = st.dict()
                rounds[name].append(row)
        for name, (gw, _port) in gateways.items():
            procs.stop(gw)
            out[name] = _median_row(rounds[name])
            out[name]["rounds"] = rounds[name]
        procs.stop(redis)
        procs.stop(up)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
        if policy_dir != bench.POLICY_DIR:
            shutil.rmtree(policy_dir, ignore_errors=True)
    return out


def _median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose c=64 CPU per request is the median, its figures as they were (one
    real round, not a mix of rounds); c=1 and streams from their own median rounds."""
    out: dict[str, Any] = {}
    for key, field in (("c64", "cpu_us_per_req"), ("c1", "cpu_us_per_req"),
                       ("streams", "cpu_us_per_stream")):  # fmt: skip
        ordered = sorted(rows, key=lambda r: r[key][field])
        out[key] = ordered[len(ordered) // 2][key]
    return out


def _f(v: Any, nd: int = 1) -> str:
    return "n/a" if v is None else f"{v:,.{nd}f}"


def report(out: dict[str, Any]) -> str:
    d1, ds = out["direct"]["c1"], out["direct"]["streams"]
    L = [
        f"# Redis state vs in-process state ({out['started']}, {out['mode']},"
        f" {out['duration_s']:g} s per phase, commit {out['commit']})",
        "",
        f"Isolation: {out['isolation']}. Pinning: {out['pinning']}.",
        "",
        "| state | req/s c=64 | CPU µs/req c=64 | CPU µs/req c=1 | p50 ms c=64 | added p50 ms c=1"
        " | added first token p50 ms | added first byte p50 ms | Redis cmds/req | Redis CPU µs/req"
        " | other load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in ("memory", "redis"):
        r = out[name]
        L.append(
            f"| {'in-process' if name == 'memory' else 'Redis'} | {_f(r['c64']['rps'], 0)}"
            f" | {_f(r['c64']['cpu_us_per_req'])} | {_f(r['c1']['cpu_us_per_req'])}"
            f" | {_f(r['c64']['p50_ms'], 3)} | {_f(r['c1']['p50_ms'] - d1['p50_ms'], 3)}"
            f" | {_f(r['streams']['ttft_p50_ms'] - ds['ttft_p50_ms'], 3)}"
            f" | {_f(r['streams']['ttfb_p50_ms'] - ds['ttfb_p50_ms'], 3)}"
            f" | {_f(r['c64']['redis_commands_per_req'], 2)}"
            f" | {_f(r['c64']['redis_cpu_us_per_req']) if name == 'redis' else ''}"
            f" | {max(r['c64'].get('foreign_cpu', 0), r['c1'].get('foreign_cpu', 0)):.2f} |"
        )
    m, rd = out["memory"], out["redis"]
    ratio = rd["c64"]["cpu_us_per_req"] / m["c64"]["cpu_us_per_req"]
    ratio1 = rd["c1"]["cpu_us_per_req"] / m["c1"]["cpu_us_per_req"]
    extra = rd["c1"]["p50_ms"] - m["c1"]["p50_ms"]
    L += [
        "",
        f"Medians of {len(rd.get('rounds', [1]))} interleaved rounds per state. CPU µs per"
        " request at c=64, per round: in-process "
        + ", ".join(f"{r['c64']['cpu_us_per_req']:.0f}" for r in m.get("rounds", []))
        + "; Redis "
        + ", ".join(f"{r['c64']['cpu_us_per_req']:.0f}" for r in rd.get("rounds", []))
        + ".",
        "",
        f"Redis commands at c=64 (the median round): {rd['c64']['redis_commands']}.",
        "",
        f"- CPU per request, Redis / in-process: c=64 {ratio:.2f}x, c=1 {ratio1:.2f}x"
        f" (goal <= {GOAL_CPU_RATIO:.2f}x:"
        f" {'PASS' if ratio <= GOAL_CPU_RATIO else 'MISS'} at c=64,"
        f" {'PASS' if ratio1 <= GOAL_CPU_RATIO else 'MISS'} at c=1)",
        f"- p50 at c=1, Redis minus in-process: {extra:+.3f} ms"
        f" (goal <= {GOAL_ADDED_P50_MS} ms: {'PASS' if extra <= GOAL_ADDED_P50_MS else 'MISS'})",
        "- p50 at c=64, Redis minus in-process:"
        f" {rd['c64']['p50_ms'] - m['c64']['p50_ms']:+.3f} ms",
    ]
    return "\n".join(L) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 s per phase")
    p.add_argument("--duration", type=float, default=None, help="seconds per phase (10)")
    p.add_argument("--no-netns", action="store_true", help="no private network namespace")
    p.add_argument("--no-save", action="store_true", help="print only")
    p.add_argument("--rounds", type=int, default=3, help="rounds per state, interleaved (3)")
    args = p.parse_args()
    args.duration = args.duration or (3.0 if args.quick else 10.0)
    for tool in ("wrk", "redis-server"):
        if shutil.which(tool) is None:
            print(f"bench: '{tool}' not found", file=sys.stderr)
            return 2
    bench._enter_netns(args, str(Path(__file__).resolve()))
    procs.install_cleanup()
    try:
        out = measure(args)
    except KeyboardInterrupt:
        return 130
    finally:
        procs.stop_all()
    text = report(out)
    print(text)
    if not args.no_save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y-%m-%d-%H%M") + "-redis"
        (RESULTS / f"{stamp}.md").write_text(text)
        (RESULTS / f"{stamp}.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
        bench.say(f"written: bench/results/{stamp}.md and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
