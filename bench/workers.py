"""The workers phase: throughput and CPU per request with 1 and 2 worker processes.

    python bench/workers.py [--quick] [--duration S] [--no-netns] [--no-save]
    python bench/run.py --phase workers [...]          (the same)

Three gateway configurations in one run, the same bench upstream and wrk (1 thread,
c=64, plus c=256 for the two-core case), the access log on as in bench/run.py:

1. ``--workers 1``: one process pinned to CPU 1; upstream, wrk and this runner on CPU 0
   (bench/run.py's pinning);
2. ``--workers 2`` pinned to CPU 1: both workers share the one core of (1), so the
   CPU per request is what workers mode itself costs (multiprocess metrics files,
   one more process);
3. ``--workers 2`` on CPUs 0 and 1: what a second core gives. The machine has two
   cores, so the load side (upstream, wrk, runner: pinned to CPU 0) shares CPU 0 with
   one worker: nothing can be pinned apart here, and the busy share of each CPU is
   printed to show it.

CPU per request counts the supervisor and every worker (``/proc/<pid>/stat``). The
gateway processes are pinned by the CPU affinity they inherit: the runner sets its own
(``os.sched_setaffinity``) to the gateway's CPUs while it starts the gateway, then back
to CPU 0; the upstream and wrk are started with ``taskset -c 0``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402
import procs  # noqa: E402
import run as bench  # noqa: E402

CONFIGS = [  # (name, workers, gateway CPUs, wrk connections)
    ("1 worker, CPU 1", 1, {1}, (64,)),
    ("2 workers, CPU 1", 2, {1}, (64,)),
    ("2 workers, CPUs 0+1", 2, {0, 1}, (64, 256)),
]


def tree(pid: int) -> list[int]:
    """``pid`` and its children (the supervisor and its workers)."""
    out = [pid]
    with contextlib.suppress(OSError):
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        out += [int(k) for k in kids]
    return out


@contextlib.contextmanager
def affinity(cpus: set[int]) -> Iterator[None]:
    """The runner on ``cpus`` meanwhile: what it starts inherits them."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def measure(name: str, port: int, pids: list[int], c: int, seconds: float) -> dict[str, Any]:
    if bench.QUIET["max_wait_s"]:
        bench.wait_quiet(pids)
    ph = bench.Phase(*pids)
    with ph:
        r = loadgen.wrk(port, c, seconds, cpu=0)
    gateway = ph.windows[:-1]  # the last is the upstream's
    cpu = sum(w.cpu for w in gateway)
    row = {
        "config": name,
        "c": c,
        "rps": r.rps,
        "p50_ms": r.p50_ms,
        "p99_ms": r.p99_ms,
        "requests": r.requests,
        "errors": r.errors or 0,
        "cpu_s": cpu,
        "cpu_us_per_req": 1e6 * cpu / r.requests if r.requests else float("nan"),
        "gateway_cores": cpu / ph.windows[0].wall if ph.windows[0].wall else 0.0,
        "per_process_cpu_s": {str(w.pid): round(w.cpu, 3) for w in gateway},
        "upstream_cpu_us_per_req": 1e6 * ph.windows[-1].cpu / max(1, r.requests),
        "busy": ph.busy,
        "other_load": ph.foreign_cpu_per_s,
    }
    bench.say(
        f"{name:<20} c={c:<3} {r.rps:8.0f} req/s  p50 {r.p50_ms:6.3f} ms  p99 {r.p99_ms:6.3f} ms"
        f"  CPU {row['cpu_us_per_req']:6.1f} µs/req ({row['gateway_cores']:.2f} cores)"
        f"  per process {row['per_process_cpu_s']}  cpus {ph.busy}  errors {row['errors']}"
        f"  other load {ph.foreign_cpu_per_s:.2f}"
    )
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    isolation = bench._loopback_up()
    if procs.cpu_count() < 2:
        raise SystemExit("the workers phase needs 2 CPUs")
    os.sched_setaffinity(0, {0})
    seconds = args.duration
    tmp = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    up_port = bench._port(bench.UPSTREAM_PORT)
    policy_dir = bench._policy_dir(up_port)
    argv = [sys.executable, str(HERE / "upstream.py"), "--port", str(up_port)]
    up = procs.spawn(argv, cpu=0)
    procs.wait_http(up, up_port, "/v1/models", 15, "the bench upstream")
    rows = []
    for name, n, cpus, conns in CONFIGS:
        port = bench._port(bench.GATEWAY_PORT)
        with affinity(cpus):
            gw = bench.start_gateway(
                policy_dir,
                port,
                "info",
                None,
                tmp / f"gateway-{n}-{len(cpus)}.log",
                extra_env={"GATEWAY_WORKERS": str(n)},
            )
        time.sleep(1.0)
        pids = tree(gw.pid)
        assert len(pids) == (n + 1 if n > 1 else 1), pids
        bench._check_answer(port)
        loadgen.wrk(port, 64, 1.0 if args.quick else 2.0, cpu=0)  # warm-up
        for c in conns:
            rows.append(measure(name, port, [*pids, up.pid], c, seconds))
        procs.stop(gw)
    procs.stop(up)
    return {
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "duration_s": seconds,
        "isolation": isolation,
        "machine": bench._machine(),
        "pinning": "upstream, wrk (1 thread) and the runner on CPU 0 (taskset -c 0,"
        " sched_setaffinity); the gateway's CPUs per row",
        "rows": rows,
    }


def report(out: dict[str, Any]) -> str:
    rows = out["rows"]
    base = next(r for r in rows if r["config"].startswith("1 worker"))
    lines = [
        f"# llm-gateway workers benchmark, {out['started']} ({out['duration_s']:.0f} s per row)",
        "",
        f"Machine: {out['machine'].get('cpu', '?')}, {out['machine'].get('cpus')} CPUs;"
        f" {out['isolation']}. Pinning: {out['pinning']}.",
        "",
        "| gateway | c | req/s | vs 1 worker | CPU µs/req (all processes) | gateway cores busy"
        " | CPU0 / CPU1 busy | p50 / p99 ms | errors | other load |",
        "|---|---:|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['c']} | {r['rps']:,.0f} | {r['rps'] / base['rps']:.2f}x"
            f" | {r['cpu_us_per_req']:.1f} | {r['gateway_cores']:.2f}"
            f" | {r['busy'].get('cpu0', 0):.2f} / {r['busy'].get('cpu1', 0):.2f}"
            f" | {r['p50_ms']:.2f} / {r['p99_ms']:.2f} | {r['errors']} | {r['other_load']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="3 s per row")
    p.add_argument("--duration", type=float, help="seconds per row (default 15, quick 3)")
    p.add_argument("--no-netns", action="store_true", help="stay on the host's loopback")
    p.add_argument("--no-save", action="store_true", help="do not write bench/results/")
    p.add_argument("--wait-quiet", type=float, default=None, help="see bench/run.py")
    args = p.parse_args(argv)
    args.duration = args.duration or (3.0 if args.quick else 15.0)
    bench.QUIET["max_wait_s"] = (
        (0.0 if args.quick else 20.0) if args.wait_quiet is None else args.wait_quiet
    )
    if not args.no_netns and not os.environ.get("BENCH_NETNS"):  # as bench/run.py does
        prefix = bench._netns_prefix()
        os.environ["BENCH_NETNS"] = "1" if prefix else "unavailable"
        if prefix:
            rest = argv if argv is not None else sys.argv[1:]
            os.execvp(prefix[0], [*prefix, "--", sys.executable, str(Path(__file__)), *rest])
    procs.install_cleanup()
    try:
        out = run(args)
    except KeyboardInterrupt:
        return 130
    finally:
        procs.stop_all()
    text = report(out)
    print(text)
    if not args.no_save:
        bench.RESULTS.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y-%m-%d-%H%M") + ("-quick" if args.quick else "")
        (bench.RESULTS / f"{stamp}-workers.md").write_text(text)
        (bench.RESULTS / f"{stamp}-workers.json").write_text(json.dumps(out, indent=2) + "\n")
        bench.say(f"written: bench/results/{stamp}-workers.md and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
