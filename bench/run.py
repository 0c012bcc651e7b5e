"""The llm-gateway benchmark: a proxy hop's cost, on loopback, against a fast fake upstream.

    python bench/run.py [--quick] [--duration S] [--litellm] [--profile] [--no-netns]

A benchmark, never a test: bounded in time, loopback only, everything it starts is
killed at the end (even on Ctrl-C). See bench/README.md for what each number means
and docs/performance.md for the method and the measured numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import gzip
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import litellm_peer  # noqa: E402
import loadgen  # noqa: E402
import procs  # noqa: E402
import pyspy  # noqa: E402

UPSTREAM_PORT, GATEWAY_PORT, LITELLM_PORT = 18090, 18080, 18070
POLICY_DIR = HERE / "policies"
RESULTS = HERE / "results"

GOALS = {  # name: (target, direction) ; "le" = measured must be <= target
    "cpu_us_per_req_c64": (150.0, "le", "gateway CPU per request, c=64", "µs"),
    "rps_c64": (6500.0, "ge", "gateway req/s on one core, c=64", "req/s"),
    "added_p50_ms_c1": (0.3, "le", "added latency p50, c=1", "ms"),
    "added_p99_ms_c1": (2.0, "le", "added latency p99, c=1", "ms"),
    "added_ttfb_p50_ms": (0.5, "le", "added time to first token p50, streams c=16", "ms"),
    "per_chunk_us": (20.0, "le", "per-chunk overhead (CPU)", "µs"),
    "rss_idle_mb": (60.0, "le", "RSS idle after start", "MB"),
    "rss_open_streams_mb": (150.0, "le", "RSS peak with 1,000 open streams", "MB"),
    "rss_growth_mb": (2.0, "le", "RSS growth, round 3 vs round 2 (after close)", "MB"),
    "streams_incomplete": (0.0, "le", "streams not complete (final chunk + [DONE])", ""),
    "request_errors": (0.0, "le", "wrk errors / non-2xx through the gateway", ""),
}


# The research machine's figures for the same minimal aiohttp proxy (measured before this
# project's benches existed): the goals were set against that machine. Measured beside the
# gateway in the same run, they give this machine's speed, so that goals on CPU can also
# be read scaled to it (absolute numbers across machines mean little; ratios in one run do).
RESEARCH_MINIMAL_PROXY_US_PER_REQ = 189.0
RESEARCH_MINIMAL_PROXY_US_PER_STREAM = 357.0
SCALED = {  # goal key -> which factor scales it, and how (CPU goals scale up, rates down)
    "cpu_us_per_req_c64": ("request", "mul"),
    "rps_c64": ("request", "div"),
    "per_chunk_us": ("stream", "mul"),
}


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- isolation ---------------------------------------------------------------------------


def _netns_prefix() -> list[str] | None:
    """``unshare`` arguments that give a private network namespace, or None."""
    if shutil.which("unshare") is None:
        return None
    candidates = [["unshare", "-n"]] if os.geteuid() == 0 else []
    candidates.append(["unshare", "-rn"])
    for c in candidates:
        try:
            ok = subprocess.run([*c, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        if ok:
            return c
    return None


def _enter_netns(
    args: argparse.Namespace, script: str | None = None, argv: list[str] | None = None
) -> None:
    """Re-exec ``script`` (default: this runner) with ``argv`` (default: this process's)
    inside a fresh network namespace (only loopback exists there)."""
    if args.no_netns or os.environ.get("BENCH_NETNS"):
        return
    prefix = _netns_prefix()
    if prefix is None:
        os.environ["BENCH_NETNS"] = "unavailable"
        say("NOTE: unshare --net is not permitted here; running on the host's loopback")
        return
    os.environ["BENCH_NETNS"] = "1"
    script = script or str(Path(__file__).resolve())
    argv = sys.argv[1:] if argv is None else argv
    os.execvp(prefix[0], [*prefix, "--", sys.executable, script, *argv])


def _loopback_up() -> str:
    state = os.environ.get("BENCH_NETNS", "")
    if state != "1":
        return (
            "host network (unshare not used)"
            if state == ""
            else "host network (unshare not permitted)"
        )
    try:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"cannot bring loopback up in the network namespace: {e}") from None
    return "private network namespace (unshare --net), loopback only"


# ---- helpers -----------------------------------------------------------------------------


def _cpu_times() -> dict[int, tuple[int, int]]:
    """Per-CPU (busy, total) jiffies from /proc/stat."""
    out: dict[int, tuple[int, int]] = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                name, *vals = line.split()
                v = [int(x) for x in vals]
                # busy = user + nice + system (irq/softirq/steal left out: loopback traffic's
                # softirq time is ours but not charged to our processes)
                out[int(name[3:])] = (v[0] + v[1] + v[2], sum(v[:8]))
    return out


def _busy(
    before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]
) -> dict[str, float]:
    res = {}
    for cpu, (b1, t1) in after.items():
        b0, t0 = before.get(cpu, (0, 0))
        res[f"cpu{cpu}"] = round((b1 - b0) / (t1 - t0), 3) if t1 > t0 else 0.0
    return res


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Phase:
    """CPU windows of the processes of interest, per-CPU busy share, and the CPU used by
    processes that are not part of the benchmark (a shared machine's noise), around a run."""

    def __init__(self, *pids: int) -> None:
        self.windows = [procs.CpuWindow(p) for p in pids]
        self.foreign_cpu_per_s = 0.0

    def __enter__(self) -> Phase:
        self.cpus0 = _cpu_times()
        self.own0 = _own_cpu()
        self.t0 = time.monotonic()
        for w in self.windows:
            w.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:  # interrupted: the processes may be gone already
            return
        for w in self.windows:
            w.stop()
        cpus1 = _cpu_times()
        self.busy = _busy(self.cpus0, cpus1)
        busy_s = sum(cpus1[c][0] - self.cpus0.get(c, (0, 0))[0] for c in cpus1) / procs.CLK_TCK
        ours = _own_cpu() - self.own0 + sum(w.cpu for w in self.windows)
        wall = time.monotonic() - self.t0
        self.foreign_cpu_per_s = max(0.0, busy_s - ours) / wall if wall else 0.0


def _policy_dir(upstream_port: int) -> Path:
    if upstream_port == UPSTREAM_PORT:
        return POLICY_DIR
    tmp = Path(tempfile.mkdtemp(prefix="bench-policies-"))
    for f in POLICY_DIR.glob("*.yaml"):
        text = f.read_text().replace(f"127.0.0.1:{UPSTREAM_PORT}", f"127.0.0.1:{upstream_port}")
        (tmp / f.name).write_text(text)
    return tmp


def _port(preferred: int) -> int:
    return preferred if procs.port_free(preferred) else procs.free_port()


def _check_answer(port: int) -> dict[str, str]:
    """One request through the gateway before loading it: 200, the right headers."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(loadgen.BODY).encode(),
        headers={"Authorization": f"Bearer {loadgen.KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
        if r.status != 200 or b"chat.completion" not in body:
            raise RuntimeError(f"sanity request failed: {r.status} {body[:200]!r}")
        return {k: v for k, v in r.headers.items() if k.lower().startswith("x-")}


def _git_commit() -> str:
    head = ROOT / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if not ref.startswith("ref: "):
            return ref[:12]
        name = ref[5:]
        p = ROOT / ".git" / name
        if p.exists():
            return p.read_text().strip()[:12]
        packed = ROOT / ".git" / "packed-refs"
        for line in packed.read_text().splitlines():
            if line.endswith(" " + name):
                return line.split()[0][:12]
    except OSError:
        pass
    return "?"


def _machine() -> dict[str, Any]:
    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    versions = {}
    for mod in ("aiohttp", "uvloop", "orjson", "structlog", "prometheus_client", "pydantic"):
        with contextlib.suppress(Exception):
            from importlib.metadata import version

            versions[mod] = version(mod)
    wrk_v = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0]
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "wrk": wrk_v.strip(),
        "packages": versions,
        "commit": _git_commit(),
    }


# ---- phases ------------------------------------------------------------------------------


# per phase at most max_wait_s, in the whole run at most total_budget_s of waiting
QUIET = {"max_wait_s": 0.0, "threshold": 0.25, "waited_s": 0.0, "total_budget_s": 120.0}


def other_load(pids: list[int], seconds: float = 0.5) -> float:
    """CPUs' worth used over ``seconds`` by processes that are not ours (while ours idle)."""
    ph = Phase(*pids)
    with ph:
        time.sleep(seconds)
    return ph.foreign_cpu_per_s


def wait_quiet(pids: list[int]) -> float:
    """Before a measured phase: wait (up to --wait-quiet s) until the machine's other load
    falls below the threshold; returns the other load measured last."""
    budget = max(0.0, QUIET["total_budget_s"] - QUIET["waited_s"])
    deadline = time.monotonic() + min(QUIET["max_wait_s"], budget)
    t0 = time.monotonic()
    load = other_load(pids)
    while load > QUIET["threshold"] and time.monotonic() < deadline:
        time.sleep(1.0)
        load = other_load(pids)
    waited = time.monotonic() - t0
    QUIET["waited_s"] += waited
    if load > QUIET["threshold"]:
        say(f"   machine busy: {load:.2f} CPUs used by other processes (measuring anyway)")
    elif waited > 1.5:
        say(f"   waited {waited:.0f} s for other processes to quiet down")
    return load


def run_wrk(
    label: str, port: int, c: int, seconds: float, load_cpu: int | None, pids: list[int]
) -> tuple[loadgen.WrkResult, Phase]:
    if QUIET["max_wait_s"]:
        wait_quiet(pids)
    ph = Phase(*pids)
    with ph:
        r = loadgen.wrk(port, c, seconds, cpu=load_cpu)
    w = ph.windows[0]
    r.cpu_s, r.cpu_util = w.cpu, w.utilisation
    r.foreign_cpu = ph.foreign_cpu_per_s
    r.cpu_us_per_req = 1e6 * w.cpu / r.requests if r.requests else float("nan")
    if len(ph.windows) > 1 and r.requests:
        r.upstream_cpu_us_per_req = 1e6 * ph.windows[1].cpu / r.requests
    say(
        f"{label:<22} c={c:<3} {r.rps:9.0f} req/s  p50 {r.p50_ms:6.3f} ms  p99 {r.p99_ms:6.3f} ms"
        f"  CPU {r.cpu_us_per_req:6.1f} µs/req ({100 * r.cpu_util:.0f}% of a core)"
        f"  errors {r.errors or 0}  cpus {ph.busy}  other load {ph.foreign_cpu_per_s:.2f} CPU"
    )
    return r, ph


def run_streams(
    label: str, port: int, c: int, seconds: float, pids: list[int]
) -> tuple[loadgen.StreamResult, Phase]:
    if QUIET["max_wait_s"]:
        wait_quiet(pids)
    ph = Phase(*pids)
    with ph:
        r = asyncio.run(loadgen.streams(port, c, seconds))
    w = ph.windows[0]
    n = r.streams + r.errors + c  # + the warm-up streams
    r.cpu_s, r.cpu_util = w.cpu, w.utilisation
    r.foreign_cpu = ph.foreign_cpu_per_s
    r.cpu_us_per_stream = 1e6 * w.cpu / n if n else float("nan")
    if len(ph.windows) > 1 and n:
        r.upstream_cpu_us_per_stream = 1e6 * ph.windows[1].cpu / n
    say(
        f"{label:<22} c={c:<3} {r.streams_per_s:7.0f} streams/s  first token p50 {r.ttft_p50_ms:6.3f} ms"
        f"  p99 {r.ttft_p99_ms:6.3f} ms  CPU {r.cpu_us_per_stream:7.1f} µs/stream"
        f"  complete {r.complete}/{r.streams} errors {r.errors}  cpus {ph.busy}"
        f"  other load {ph.foreign_cpu_per_s:.2f} CPU"
    )
    for e in r.examples:
        say(f"   e.g. {e}")
    return r, ph


def start_gateway(
    policy_dir: Path,
    port: int,
    level: str,
    cpu: int | None,
    log_path: Path,
    extra_env: dict[str, str] | None = None,
    prefix: list[str] | None = None,
) -> subprocess.Popen[Any]:
    """``llm-gateway serve`` on ``port``; ``prefix`` runs it under another program (valgrind),
    which is slow to start."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(extra_env or {})
    env.update(
        {
            "GATEWAY_LOG_LEVEL": level,
            "GATEWAY_LOG_FORMAT": "json",
            "GATEWAY_SHUTDOWN_GRACE_S": "1",
            "GATEWAY_STATE_URL": "",
            "BENCH_UPSTREAM_KEY": "sk-bench-upstream",
        }
    )
    log = log_path.open("wb")
    argv = [
        sys.executable,
        "-m",
        "gateway",
        "serve",
        "--policies",
        str(policy_dir),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
    ]
    argv = [*(prefix or []), *argv]
    p = procs.spawn(argv, cpu=cpu, env=env, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    procs.wait_http(p, port, "/readyz", 300 if prefix else 30, "the gateway")
    return p


def _count_lines(path: Path, needle: bytes) -> int:
    n = 0
    with path.open("rb") as f:
        for line in f:
            if needle in line:
                n += 1
    return n


def run(args: argparse.Namespace) -> dict[str, Any]:
    isolation = _loopback_up()
    ncpu = procs.cpu_count()
    if ncpu >= 2:
        gw_cpu, load_cpu = 1, 0
        pinning = "gateway on CPU 1; upstream, load generators and this runner on CPU 0"
        os.sched_setaffinity(0, {load_cpu})
    else:
        gw_cpu = load_cpu = None
        pinning = "NOT pinned: only one CPU available (the gateway shares it with the load)"
    say(f"isolation: {isolation}; pinning: {pinning}")
    D = args.duration
    warm = 1.0 if args.quick else 2.0
    out: dict[str, Any] = {
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "duration_s": D,
        "isolation": isolation,
        "pinning": pinning,
        "machine": _machine(),
        "stream_chunk_gap_ms": args.chunk_gap_ms,
        "hold_streams": args.hold_streams,
        "wait_quiet_s": args.wait_quiet,
    }
    tmp = Path(tempfile.mkdtemp(prefix="bench-run-"))
    up_port, gw_port = _port(UPSTREAM_PORT), _port(GATEWAY_PORT)
    policy_dir = _policy_dir(up_port)
    try:
        up = procs.spawn(
            [
                sys.executable,
                str(HERE / "upstream.py"),
                "--port",
                str(up_port),
                "--chunk-gap-ms",
                str(args.chunk_gap_ms),
            ],
            cpu=load_cpu,
        )
        procs.wait_http(up, up_port, "/v1/models", 15, "the bench upstream")

        # ---- direct ------------------------------------------------------------------
        say("direct: wrk and streams against the bench upstream")
        loadgen.wrk(up_port, 64, warm, cpu=load_cpu)
        d64, _ = run_wrk("direct", up_port, 64, D, load_cpu, [up.pid])
        d1, _ = run_wrk("direct", up_port, 1, D, load_cpu, [up.pid])
        ds, _ = run_streams("direct streams", up_port, 16, D, [up.pid])
        out["direct"] = {"c64": vars(d64), "c1": vars(d1), "streams": ds.dict()}

        # ---- calibration: a minimal aiohttp proxy on the gateway's CPU --------------------
        if not args.skip_calibration:
            cal_port = _port(18060)
            cal = procs.spawn(
                [
                    sys.executable,
                    str(HERE / "calibrate_proxy.py"),
                    "--port",
                    str(cal_port),
                    "--upstream",
                    f"http://127.0.0.1:{up_port}",
                ],
                cpu=gw_cpu,
            )
            procs.wait_http(cal, cal_port, "/readyz", 15, "the calibration proxy")
            loadgen.wrk(cal_port, 64, warm, cpu=load_cpu)
            c64, _ = run_wrk("minimal aiohttp proxy", cal_port, 64, D, load_cpu, [cal.pid, up.pid])
            c1, _ = run_wrk("minimal aiohttp proxy", cal_port, 1, D, load_cpu, [cal.pid, up.pid])
            cs, _ = run_streams("minimal proxy streams", cal_port, 16, D, [cal.pid, up.pid])
            cal_rss = procs.memory_mb(cal.pid)
            procs.stop(cal)
            out["calibration"] = {
                "c64": vars(c64),
                "c1": vars(c1),
                "streams": cs.dict(),
                "rss_mb": cal_rss,
            }

        # ---- gateway, access log on (info) ---------------------------------------------
        log_path = tmp / "gateway-info.log"
        gw = start_gateway(policy_dir, gw_port, "info", gw_cpu, log_path)
        time.sleep(1.0)
        idle = procs.memory_mb(gw.pid)
        say(
            f"gateway started (pid {gw.pid}); idle RSS {idle['VmRSS']:.1f} MB, {procs.threads(gw.pid)} threads"
        )
        headers = _check_answer(gw_port)
        say(f"sanity request OK: {headers}")
        loadgen.wrk(gw_port, 64, warm, cpu=load_cpu)
        g64, g64ph = run_wrk("gateway (log info)", gw_port, 64, D, load_cpu, [gw.pid, up.pid])
        g1, _ = run_wrk("gateway (log info)", gw_port, 1, D, load_cpu, [gw.pid, up.pid])
        gs, _ = run_streams("gateway streams", gw_port, 16, D, [gw.pid, up.pid])
        after_load = procs.memory_mb(gw.pid)
        say(
            f"gateway RSS after load {after_load['VmRSS']:.1f} MB (peak so far {after_load['VmHWM']:.1f} MB)"
        )
        rounds = []
        for i in range(3):
            r = asyncio.run(loadgen.hold_round(gw_port, up_port, gw.pid, args.hold_streams))
            rounds.append(r)
            say(
                f"hold round {i + 1}: {r.opened}/{r.n} open in {r.open_s:.1f} s, complete {r.complete};"
                f" RSS before {r.rss_before_mb:.1f}, open {r.rss_open_mb:.1f},"
                f" peak {r.rss_peak_mb:.1f}, after {r.rss_after_mb:.1f} MB"
            )
            for e in r.failures:
                say(f"   e.g. {e}")
        access_lines = _count_lines(log_path, b'"request_completed"')
        profile_txt = None
        if args.profile:
            profile_txt = _profile(gw.pid, gw_port, D, load_cpu, tmp, args.profile_native)
        procs.stop(gw)
        out["gateway"] = {
            "c64": vars(g64),
            "c1": vars(g1),
            "streams": gs.dict(),
            "cpu_busy_c64": g64ph.busy,
            "rss_idle_mb": idle["VmRSS"],
            "rss_after_load_mb": after_load["VmRSS"],
            "hold_rounds": [r.dict() for r in rounds],
            "access_log_lines": access_lines,
            "access_log_bytes": log_path.stat().st_size,
            "sanity_headers": headers,
        }

        # ---- gateway, access log off (warning) -----------------------------------------
        if not args.skip_log_compare:
            gw = start_gateway(policy_dir, gw_port, "warning", gw_cpu, tmp / "gateway-warning.log")
            loadgen.wrk(gw_port, 64, warm, cpu=load_cpu)
            q64, _ = run_wrk("gateway (log warning)", gw_port, 64, D, load_cpu, [gw.pid, up.pid])
            procs.stop(gw)
            out["gateway_log_warning"] = {"c64": vars(q64)}

        # ---- gateway with tracing on (OTLP/HTTP to a local sink) ------------------------
        if not args.skip_tracing:
            sink_port = _port(18099)
            sink = procs.spawn(
                [sys.executable, str(HERE / "otlp_sink.py"), "--port", str(sink_port)],
                cpu=load_cpu,
            )
            procs.wait_http(sink, sink_port, "/count", 15, "the OTLP sink")
            otel = {
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}",
                "OTEL_SERVICE_NAME": "llm-gateway-bench",
            }
            gw = start_gateway(
                policy_dir, gw_port, "info", gw_cpu, tmp / "gateway-traced.log", otel
            )
            loadgen.wrk(gw_port, 64, warm, cpu=load_cpu)
            t64, _ = run_wrk("gateway (traced)", gw_port, 64, D, load_cpu, [gw.pid, up.pid])
            procs.stop(gw)
            with urllib.request.urlopen(f"http://127.0.0.1:{sink_port}/count", timeout=5) as r:
                exported = json.loads(r.read())
            procs.stop(sink)
            out["gateway_traced"] = {"c64": vars(t64), "exported": exported}

        # ---- LiteLLM -------------------------------------------------------------------
        if args.litellm:
            out["litellm"] = _litellm(up_port, load_cpu, gw_cpu, D, warm, tmp)
        if profile_txt:
            out["profile_summary"] = profile_txt
        procs.stop(up)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
        if policy_dir != POLICY_DIR:
            shutil.rmtree(policy_dir, ignore_errors=True)
    return out


def _profile(
    pid: int, port: int, seconds: float, load_cpu: int | None, tmp: Path, native: bool
) -> str | None:
    if not pyspy.available():
        say("py-spy not found (pip install py-spy): no profile")
        return None
    raw = tmp / "profile.raw"
    say("profile: wrk c=64 with py-spy attached (numbers of this run are not reported)")
    for mode in dict.fromkeys((native, False)):
        if QUIET["max_wait_s"]:
            wait_quiet([pid])
        sampler = pyspy.record(pid, seconds, raw, cpu=load_cpu, native=mode)
        time.sleep(1.0)
        if sampler.poll() is not None:
            msg = (sampler.stdout.read() if sampler.stdout else b"").decode(errors="replace")
            say(f"py-spy {'--native ' if mode else ''}failed: {msg.strip()[:300]}")
            continue
        loadgen.wrk(port, 64, seconds, cpu=load_cpu)
        try:
            sampler.wait(seconds + 30)
        except subprocess.TimeoutExpired:
            sampler.kill()
        if raw.exists() and raw.stat().st_size:
            stamp = time.strftime("%Y-%m-%d-%H%M")
            RESULTS.mkdir(parents=True, exist_ok=True)
            text = pyspy.summarise(raw)
            header = (
                f"# py-spy profile of the gateway under wrk c=64 ({seconds:.0f} s, "
                f"{'with' if mode else 'without'} native frames)\n\n"
            )
            (RESULTS / f"{stamp}-profile.md").write_text(header + text)
            with (
                raw.open("rb") as src,
                gzip.open(RESULTS / f"{stamp}-profile.collapsed.gz", "wb") as dst,
            ):
                shutil.copyfileobj(src, dst)
            say(f"profile written to bench/results/{stamp}-profile.md (+ .collapsed.gz stacks)")
            return header + text
    return None


def _litellm(
    up_port: int, load_cpu: int | None, gw_cpu: int | None, D: float, warm: float, tmp: Path
) -> dict[str, Any]:
    exe = litellm_peer.executable()
    if not exe.exists():
        say("LiteLLM is not installed (the install runs before entering the netns): skipped")
        return {"skipped": "not installed"}
    port = _port(LITELLM_PORT)
    cfg = litellm_peer.write_config(up_port)
    log = (tmp / "litellm.log").open("wb")
    p = procs.spawn(
        litellm_peer.argv(cfg, port),
        cpu=gw_cpu,
        env=litellm_peer.env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    res: dict[str, Any] = {"version": litellm_peer.version()}
    try:
        procs.wait_http(p, port, "/health/liveliness", 240, "LiteLLM")
        time.sleep(2.0)
        # uvicorn may run the app in a child process: measure the process that listens
        pid = _listener_pid(port) or p.pid
        res["pid_note"] = "listening process" if pid != p.pid else "launcher process"
        res["rss_idle_mb"] = procs.memory_mb(pid)["VmRSS"]
        loadgen.wrk(port, 64, warm, cpu=load_cpu)
        l64, _ = run_wrk("litellm", port, 64, D, load_cpu, [pid, _upid(up_port)])
        l1, _ = run_wrk("litellm", port, 1, D, load_cpu, [pid, _upid(up_port)])
        ls, _ = run_streams("litellm streams", port, 16, D, [pid, _upid(up_port)])
        mem = procs.memory_mb(pid)
        res.update(
            {
                "c64": vars(l64),
                "c1": vars(l1),
                "streams": ls.dict(),
                "rss_after_load_mb": mem["VmRSS"],
                "rss_peak_mb": mem["VmHWM"],
            }
        )
    except Exception as e:  # a peer must never break our own run
        say(f"LiteLLM run failed, skipped: {e}")
        tail = (tmp / "litellm.log").read_bytes()[-2000:].decode(errors="replace")
        res["skipped"] = f"{e}\n{tail}"
    finally:
        procs.stop(p)
        cfg.unlink(missing_ok=True)
    return res


def _listener_pid(port: int) -> int | None:
    """The pid owning the listening socket on ``port`` (from /proc/net/tcp + fds)."""
    inode = None
    with open("/proc/net/tcp") as f:
        for line in list(f)[1:]:
            parts = line.split()
            if parts[3] == "0A" and int(parts[1].split(":")[1], 16) == port:
                inode = parts[9]
                break
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return int(pid)
    return None


_UPID: dict[int, int] = {}


def _upid(port: int) -> int:
    if port not in _UPID:
        _UPID[port] = _listener_pid(port) or 0
    return _UPID[port]


# ---- report ------------------------------------------------------------------------------


def derive(out: dict[str, Any]) -> dict[str, Any]:
    d, g = out["direct"], out["gateway"]
    rounds = g["hold_rounds"]
    per_req = g["c64"]["cpu_us_per_req"]
    per_stream = g["streams"]["cpu_us_per_stream"]
    m = {
        "cpu_us_per_req_c64": per_req,
        "rps_c64": g["c64"]["rps"],
        "capacity_rps_one_core": 1e6 / per_req if per_req else float("nan"),
        "added_p50_ms_c1": g["c1"]["p50_ms"] - d["c1"]["p50_ms"],
        "added_p99_ms_c1": g["c1"]["p99_ms"] - d["c1"]["p99_ms"],
        "added_ttfb_p50_ms": g["streams"]["ttft_p50_ms"] - d["streams"]["ttft_p50_ms"],
        "added_ttfb_p99_ms": g["streams"]["ttft_p99_ms"] - d["streams"]["ttft_p99_ms"],
        "added_first_byte_p50_ms": g["streams"]["ttfb_p50_ms"] - d["streams"]["ttfb_p50_ms"],
        "per_chunk_us": (per_stream - per_req) / loadgen.CHUNKS,
        "rss_idle_mb": g["rss_idle_mb"],
        "rss_open_streams_mb": max(r["rss_peak_mb"] for r in rounds),
        "rss_growth_mb": rounds[-1]["rss_after_mb"] - rounds[-2]["rss_after_mb"],
        "rss_growth_round1_to_3_mb": rounds[-1]["rss_after_mb"] - rounds[0]["rss_after_mb"],
        "streams_incomplete": (g["streams"]["incomplete"] + g["streams"]["errors"])
        + sum(r["n"] - r["complete"] for r in rounds),
        "request_errors": sum(g["c64"]["errors"].values()) + sum(g["c1"]["errors"].values()),
    }
    if "gateway_log_warning" in out:
        q = out["gateway_log_warning"]["c64"]
        m["access_log_cpu_us_per_req"] = per_req - q["cpu_us_per_req"]
    if "gateway_traced" in out:
        m["tracing_cpu_us_per_req"] = out["gateway_traced"]["c64"]["cpu_us_per_req"] - per_req
    cal = out.get("calibration")
    if cal:
        m["machine_factor_request"] = (
            cal["c64"]["cpu_us_per_req"] / RESEARCH_MINIMAL_PROXY_US_PER_REQ
        )
        m["machine_factor_stream"] = (
            cal["streams"]["cpu_us_per_stream"] / RESEARCH_MINIMAL_PROXY_US_PER_STREAM
        )
    return m


def _f(x: float, nd: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,.{nd}f}"


def _meets(v: float | None, target: float, how: str) -> bool:
    return v is not None and not math.isnan(v) and (v <= target if how == "le" else v >= target)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def report(out: dict[str, Any], m: dict[str, Any]) -> str:
    d, g = out["direct"], out["gateway"]
    q = out.get("gateway_log_warning")
    lit = out.get("litellm") if out.get("litellm") and "c64" in out.get("litellm", {}) else None
    mach = out["machine"]
    L: list[str] = []
    L.append(
        f"# llm-gateway benchmark, {out['started']} ({out['mode']} mode, {out['duration_s']:.0f} s per phase)"
    )
    L.append("")
    L.append(
        f"- machine: {mach['cpu']}, {mach['cpus']} CPUs, Linux {mach['kernel']}, Python {mach['python']}, {mach['wrk']}"
    )
    L.append(
        f"- packages: {', '.join(f'{k} {v}' for k, v in mach['packages'].items())}; gateway commit {mach['commit']}"
    )
    L.append(f"- isolation: {out['isolation']}; pinning: {out['pinning']}")
    L.append(
        f"- upstream: bench/upstream.py (raw asyncio protocol, canned answer; streams of {loadgen.CHUNKS} chunks"
        f" + [DONE], {out['stream_chunk_gap_ms']:g} ms apart); gateway policy: bench/policies (standard policy,"
        " fallback chain, team limits on); access log: JSON at info level, to a file"
    )
    L.append("")
    L.append("## Plain requests (wrk, 1 thread, POST /v1/chat/completions)")
    L.append("")
    L.append(
        "| | c=64 req/s | c=64 p50 ms | c=64 p99 ms | c=1 req/s | c=1 p50 ms | c=1 p99 ms | CPU µs/req c=64 | CPU µs/req c=1 | CPU use c=64 | other load c=64/c=1 |"
    )
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def row(name: str, r64: dict[str, Any], r1: dict[str, Any] | None) -> str:
        c1 = [_f(r1["rps"], 0), _f(r1["p50_ms"], 3), _f(r1["p99_ms"], 3)] if r1 else ["", "", ""]
        cpu1 = _f(r1["cpu_us_per_req"]) if r1 else ""
        return (
            f"| {name} | {_f(r64['rps'], 0)} | {_f(r64['p50_ms'], 3)} | {_f(r64['p99_ms'], 3)} | "
            + " | ".join(c1)
            + f" | {_f(r64['cpu_us_per_req'])} | {cpu1} | {100 * r64['cpu_util']:.0f}% |"
            + f" {r64.get('foreign_cpu', 0):.2f}"
            + (f" / {r1.get('foreign_cpu', 0):.2f}" if r1 else "")
            + " |"
        )

    L.append(row("direct (bench upstream)", d["c64"], d["c1"]))
    cal = out.get("calibration")
    if cal:
        L.append(row("minimal aiohttp proxy (floor)", cal["c64"], cal["c1"]))
    L.append(row("gateway (access log on)", g["c64"], g["c1"]))
    if q:
        L.append(row("gateway (log level warning)", q["c64"], None))
    tr = out.get("gateway_traced")
    if tr:
        L.append(row("gateway (tracing on, OTLP/HTTP)", tr["c64"], None))
    if lit:
        L.append(row(f"LiteLLM {lit.get('version', '')}", lit["c64"], lit["c1"]))
    L.append(
        f"| ratio gateway/direct | {_ratio(g['c64']['rps'], d['c64']['rps'])} | {_ratio(g['c64']['p50_ms'], d['c64']['p50_ms'])} |"
        f" {_ratio(g['c64']['p99_ms'], d['c64']['p99_ms'])} | {_ratio(g['c1']['rps'], d['c1']['rps'])} |"
        f" {_ratio(g['c1']['p50_ms'], d['c1']['p50_ms'])} | {_ratio(g['c1']['p99_ms'], d['c1']['p99_ms'])} |"
        f" {_ratio(g['c64']['cpu_us_per_req'], d['c64']['cpu_us_per_req'])} | {_ratio(g['c1']['cpu_us_per_req'], d['c1']['cpu_us_per_req'])} | | |"
    )
    if cal:
        L.append(
            f"| ratio gateway/minimal proxy | {_ratio(g['c64']['rps'], cal['c64']['rps'])} | {_ratio(g['c64']['p50_ms'], cal['c64']['p50_ms'])} |"
            f" {_ratio(g['c64']['p99_ms'], cal['c64']['p99_ms'])} | {_ratio(g['c1']['rps'], cal['c1']['rps'])} |"
            f" {_ratio(g['c1']['p50_ms'], cal['c1']['p50_ms'])} | {_ratio(g['c1']['p99_ms'], cal['c1']['p99_ms'])} |"
            f" {_ratio(g['c64']['cpu_us_per_req'], cal['c64']['cpu_us_per_req'])} | {_ratio(g['c1']['cpu_us_per_req'], cal['c1']['cpu_us_per_req'])} | | |"
        )
    if lit:
        L.append(
            f"| ratio LiteLLM/gateway | {_ratio(lit['c64']['rps'], g['c64']['rps'])} | {_ratio(lit['c64']['p50_ms'], g['c64']['p50_ms'])} |"
            f" {_ratio(lit['c64']['p99_ms'], g['c64']['p99_ms'])} | {_ratio(lit['c1']['rps'], g['c1']['rps'])} |"
            f" {_ratio(lit['c1']['p50_ms'], g['c1']['p50_ms'])} | {_ratio(lit['c1']['p99_ms'], g['c1']['p99_ms'])} |"
            f" {_ratio(lit['c64']['cpu_us_per_req'], g['c64']['cpu_us_per_req'])} | {_ratio(lit['c1']['cpu_us_per_req'], g['c1']['cpu_us_per_req'])} | | |"
        )
    L.append("")
    L.append(
        f"CPU busy during the gateway c=64 run: {g['cpu_busy_c64']} (CPU 1 = gateway, CPU 0 = load side)."
        f" Upstream CPU per request through the gateway: {_f(g['c64']['upstream_cpu_us_per_req'])} µs."
        f" One core's capacity at the measured CPU cost: {_f(m['capacity_rps_one_core'], 0)} req/s."
    )
    noisy = max(
        [
            g["c64"].get("foreign_cpu", 0),
            g["c1"].get("foreign_cpu", 0),
            g["streams"].get("foreign_cpu", 0),
            d["c64"].get("foreign_cpu", 0),
        ]
    )
    L.append(
        f"Other load on the machine (processes outside the benchmark, user+system time) during the gateway phases: up to {noisy:.2f} CPUs"
        + (
            " -- the machine was shared during this run; compare ratios, not absolute numbers."
            if noisy > 0.1
            else "."
        )
    )
    if "access_log_cpu_us_per_req" in m:
        L.append(
            f"Access log cost (info minus warning, c=64): {_f(m['access_log_cpu_us_per_req'])} µs CPU per request."
        )
    L.append(
        f"Access log lines written: {g['access_log_lines']:,} ({g['access_log_bytes'] / max(1, g['access_log_lines']):.0f} bytes each)."
    )
    if "tracing_cpu_us_per_req" in m:
        ex = out["gateway_traced"]["exported"]
        L.append(
            f"Tracing cost (traced minus not configured, c=64): {_f(m['tracing_cpu_us_per_req'])} µs CPU"
            f" per request (two spans per request, sampled always; {ex['exports']:,} OTLP exports,"
            f" {ex['bytes'] / 1e6:.1f} MB, to a local sink)."
        )
    L.append("")
    L.append(f"## Streams ({loadgen.CHUNKS} chunks + [DONE], asyncio aiohttp client, c=16)")
    L.append("")
    L.append(
        "| | streams/s | first token p50 ms | first token p99 ms | first byte p50 ms | stream p50 ms | complete | CPU µs/stream | per-chunk µs | other load |"
    )
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def srow(name: str, s: dict[str, Any], per_chunk: str) -> str:
        return (
            f"| {name} | {_f(s['streams_per_s'], 0)} | {_f(s['ttft_p50_ms'], 3)} | {_f(s['ttft_p99_ms'], 3)} |"
            f" {_f(s['ttfb_p50_ms'], 3)} | {_f(s['total_p50_ms'], 2)} | {s['complete']}/{s['streams']} |"
            f" {_f(s['cpu_us_per_stream'])} | {per_chunk} | {s.get('foreign_cpu', 0):.2f} |"
        )

    L.append(srow("direct (bench upstream)", d["streams"], ""))
    if cal:
        cper = (cal["streams"]["cpu_us_per_stream"] - cal["c64"]["cpu_us_per_req"]) / loadgen.CHUNKS
        L.append(srow("minimal aiohttp proxy (floor)", cal["streams"], _f(cper)))
    L.append(srow("gateway", g["streams"], _f(m["per_chunk_us"])))
    if lit:
        lper = (lit["streams"]["cpu_us_per_stream"] - lit["c64"]["cpu_us_per_req"]) / loadgen.CHUNKS
        L.append(srow("LiteLLM", lit["streams"], _f(lper)))
    gs, ds = g["streams"], d["streams"]

    def sratio(name: str, a: dict[str, Any], b: dict[str, Any]) -> str:
        return (
            f"| {name} | {_ratio(a['streams_per_s'], b['streams_per_s'])} | {_ratio(a['ttft_p50_ms'], b['ttft_p50_ms'])} |"
            f" {_ratio(a['ttft_p99_ms'], b['ttft_p99_ms'])} | {_ratio(a['ttfb_p50_ms'], b['ttfb_p50_ms'])} |"
            f" {_ratio(a['total_p50_ms'], b['total_p50_ms'])} | | {_ratio(a['cpu_us_per_stream'], b['cpu_us_per_stream'])} | | |"
        )

    L.append(sratio("ratio gateway/direct", gs, ds))
    if lit:
        L.append(sratio("ratio LiteLLM/gateway", lit["streams"], gs))
    L.append("")
    L.append(
        "First token = the first chunk with content. The upstream sends a role-only chunk first and the"
        " gateway holds such preamble chunks until the first content chunk (so an error right after them"
        " is still recovered invisibly); first byte through the gateway therefore is the first token,"
        f" while direct it is the role chunk, {out['stream_chunk_gap_ms']:g} ms earlier."
    )
    L.append(
        f"Added time to first token: p50 {_f(m['added_ttfb_p50_ms'], 3)} ms, p99 {_f(m['added_ttfb_p99_ms'], 3)} ms"
        f" (added time to first byte p50 {_f(m['added_first_byte_p50_ms'], 3)} ms)."
        f" Per-chunk overhead = (CPU per stream {_f(gs['cpu_us_per_stream'])} µs - CPU per request at c=64"
        f" {_f(g['c64']['cpu_us_per_req'])} µs) / {loadgen.CHUNKS}."
    )
    L.append("")
    L.append(
        f"## Gateway memory (RSS, MB; {out['hold_streams']:,} streams held open by the upstream after their first chunk)"
    )
    L.append("")
    L.append(
        f"Idle after start: {_f(g['rss_idle_mb'])} MB; after the load phases: {_f(g['rss_after_load_mb'])} MB."
    )
    if lit and "rss_idle_mb" in lit:
        L.append(
            f"LiteLLM: idle {_f(lit['rss_idle_mb'])} MB, after its load phases {_f(lit['rss_after_load_mb'])} MB (peak {_f(lit['rss_peak_mb'])} MB)."
        )
    L.append("")
    L.append(
        "| round | opened | complete | time to open s | before | all open | peak | after close |"
    )
    L.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(g["hold_rounds"], 1):
        L.append(
            f"| {i} | {r['opened']} | {r['complete']} | {_f(r['open_s'], 2)} | {_f(r['rss_before_mb'])} | {_f(r['rss_open_mb'])} |"
            f" {_f(r['rss_peak_mb'])} | {_f(r['rss_after_mb'])} |"
        )
    L.append("")
    L.append(
        f"Growth after close: round 1 to 3 {_f(m['rss_growth_round1_to_3_mb'])} MB, round 2 to 3 {_f(m['rss_growth_mb'])} MB."
        " Round 1 sets the high-water mark (the allocator keeps freed arenas, and the gateway's upstream pool"
        " keeps up to 1,000 idle keep-alive connections for 30 s); a leak shows as growth in every round."
    )
    L.append("")
    L.append("## Goals")
    L.append("")
    factors = {"request": m.get("machine_factor_request"), "stream": m.get("machine_factor_stream")}
    if factors["request"]:
        L.append(
            f"This machine runs the minimal aiohttp proxy at {factors['request']:.2f}x the research"
            f" machine's CPU per request ({RESEARCH_MINIMAL_PROXY_US_PER_REQ:g} µs there) and"
            f" {factors['stream'] or float('nan'):.2f}x its CPU per stream"
            f" ({RESEARCH_MINIMAL_PROXY_US_PER_STREAM:g} µs there); the goals were set on that"
            " machine, so CPU goals are also shown scaled by these factors."
        )
        L.append("")
    L.append("| goal | target | measured | | target scaled to this machine | |")
    L.append("|---|---:|---:|---|---:|---|")
    for key, (target, how, text, unit) in GOALS.items():
        v = m.get(key)
        sign = "<=" if how == "le" else ">="
        nd = 0 if unit in ("req/s", "") else (3 if unit == "ms" else 1)
        if key == "rss_open_streams_mb":
            text = f"RSS peak with {out['hold_streams']:,} open streams"
        scaled_cell, scaled_ok = "", ""
        if key in SCALED and factors[SCALED[key][0]]:
            f = factors[SCALED[key][0]]
            scaled = target * f if SCALED[key][1] == "mul" else target / f
            scaled_cell = f"{sign} {_f(scaled, nd)} {unit}"
            scaled_ok = "PASS" if _meets(v, scaled, how) else "MISS"
        L.append(
            f"| {text} | {sign} {_f(target, nd)} {unit} | {_f(v, nd)} {unit} |"
            f" {'PASS' if _meets(v, target, how) else 'MISS'} | {scaled_cell} | {scaled_ok} |"
        )
    if lit:
        L.append("")
        L.append(
            f"vs LiteLLM in the same run: {_ratio(lit['c64']['cpu_us_per_req'], g['c64']['cpu_us_per_req'])} less CPU per request,"
            f" {_ratio(g['c64']['rps'], lit['c64']['rps'])} the requests per second at c=64."
        )
    return "\n".join(L) + "\n"


def main() -> int:
    if sys.argv[1:3] == ["--phase", "workers"]:  # 1 and 2 worker processes: bench/workers.py
        import workers

        return int(workers.main(sys.argv[3:]))
    if sys.argv[1:3] == ["--phase", "ratios"]:  # floor and gateway interleaved: ratios.py
        import ratios

        return int(ratios.main(sys.argv[3:]))
    if sys.argv[1:3] == ["--phase", "clouds"]:  # cloud vs plain providers: bench/clouds.py
        import clouds

        return int(clouds.main(sys.argv[3:]))
    if sys.argv[1:3] == ["--phase", "translation"]:  # translated vs same-format: translation.py
        import translation

        return int(translation.main(sys.argv[3:]))
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="a few seconds per phase (smoke run)")
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds per measured phase (default 15, quick 3)",
    )
    p.add_argument(
        "--litellm",
        action="store_true",
        help="also measure the LiteLLM proxy (installs it into bench/.venv-litellm)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="run an extra c=64 phase under py-spy and write its top entries",
    )
    p.add_argument(
        "--no-netns", action="store_true", help="do not enter a private network namespace"
    )
    p.add_argument(
        "--skip-log-compare", action="store_true", help="skip the log-level-warning gateway run"
    )
    p.add_argument(
        "--skip-tracing", action="store_true", help="skip the gateway run with tracing on"
    )
    p.add_argument(
        "--skip-calibration", action="store_true", help="skip the minimal-aiohttp-proxy rows"
    )
    p.add_argument(
        "--hold-streams",
        type=int,
        default=1000,
        help="streams held open in each RSS round (default 1000)",
    )
    p.add_argument(
        "--chunk-gap-ms",
        type=float,
        default=1.0,
        help="gap between the upstream's stream chunks (default 1)",
    )
    p.add_argument(
        "--no-save", action="store_true", help="print only; write nothing to bench/results"
    )
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=None,
        metavar="S",
        help="before each measured phase wait up to S s for other processes to use < 0.25 CPU"
        " (default 30, quick 0)",
    )
    p.add_argument(
        "--wait-budget",
        type=float,
        default=120.0,
        metavar="S",
        help="total waiting for quiet per run (default 120)",
    )
    p.add_argument("--profile-native", action="store_true", help="py-spy with native (C) frames")
    args = p.parse_args()
    if args.duration is None:
        args.duration = 3.0 if args.quick else 15.0
    if args.wait_quiet is None:
        args.wait_quiet = 0.0 if args.quick else 30.0
    QUIET["max_wait_s"] = args.wait_quiet
    QUIET["total_budget_s"] = args.wait_budget
    for tool in ("wrk",):
        if shutil.which(tool) is None:
            print(f"bench: '{tool}' not found (apt-get install {tool})", file=sys.stderr)
            return 2
    if not os.environ.get("BENCH_NETNS"):  # before entering the netns: these need the network
        if args.litellm:
            litellm_peer.ensure_installed(say)
        if args.profile and not pyspy.available():
            say("installing py-spy for --profile")
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=False)
    _enter_netns(args)
    procs.install_cleanup()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        out = run(args)
    except KeyboardInterrupt:
        say("interrupted: children stopped")
        return 130
    finally:
        procs.stop_all()
    out["waited_for_quiet_s"] = round(QUIET["waited_s"], 1)
    m = derive(out)
    out["derived"] = m
    text = report(out, m)
    print(text)
    if not args.no_save:
        RESULTS.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y-%m-%d-%H%M") + ("-quick" if args.quick else "")
        (RESULTS / f"{stamp}.md").write_text(text)
        (RESULTS / f"{stamp}.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
        say(f"written: bench/results/{stamp}.md and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
