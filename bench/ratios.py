"""The gateway against the minimal aiohttp proxy, in interleaved rounds, and the guards.

    python bench/ratios.py [--quick] [--rounds N] [--duration S] [--no-instructions]
                           [--no-netns] [--no-save]
    python bench/run.py --phase ratios ...

``bench/run.py`` measures the minimal proxy and then the gateway, one after the other; on
a shared machine the CPU cost of the same process moves by a third between minutes, so
the ratio of two phases minutes apart carries that drift. Here both run side by side
(same upstream, same policy set, the gateway with its access log on) and take turns,
round after round, the order alternating; each round gives a ratio, and the figure is
the median of the rounds' ratios. Per target and round: wrk c=64 (CPU per request), and
the stream client c=16 with streams of 20 and of 100 chunks (``?chunks=`` on the bench
upstream). The cost of a chunk is the slope between the two stream lengths, so that what
a stream costs once (its head, its response) is not spread over its chunks; the older
figure, (CPU per 20-chunk stream - CPU per request) / 20, is printed too.

With valgrind installed (Debian package ``valgrind``), each target also runs under
callgrind for a fixed number of requests and streams: instructions per request and per
chunk do not depend on the machine's load, so they show a change that the CPU figures'
noise hides (they leave out the kernel's share, which both targets pay alike).

The guards (docs/performance.md) end the report, and the exit status is 1 when one is
crossed: instructions per request at most 1.45x the minimal proxy's, per chunk at most
1.75x, the gateway's idle RSS at most 60 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import aiohttp  # noqa: E402
import loadgen  # noqa: E402
import procs  # noqa: E402
import run as bench  # noqa: E402

RESULTS = HERE / "results"
#: The guards (docs/performance.md): gateway / minimal aiohttp proxy in instructions per
#: request and per chunk, and the gateway's idle RSS; a change must not cross them.
GUARD_REQUEST, GUARD_CHUNK, GUARD_RSS_MB = 1.45, 1.75, 60.0
SHORT, LONG = 20, 100  # stream lengths (chunks) for the per-chunk slope
TARGETS = ("minimal proxy", "gateway")


def start_floor(up_port: int, port: int, cpu: int | None, prefix: list[str] | None = None) -> Any:
    argv = [sys.executable, str(HERE / "calibrate_proxy.py"), "--port", str(port),
            "--upstream", f"http://127.0.0.1:{up_port}"]  # fmt: skip
    log = (tempfile.gettempdir() + "/bench-ratios-floor.log") if prefix else os.devnull
    with open(log, "wb") as f:
        p = procs.spawn([*(prefix or []), *argv], cpu=cpu, stdout=f, stderr=subprocess.STDOUT)
    procs.wait_http(p, port, "/readyz", 300 if prefix else 15, "the minimal proxy")
    return p


def one_round(name: str, pid: int, port: int, d: float, load_cpu: int | None) -> dict[str, float]:
    w, _ = bench.run_wrk(name, port, 64, d, load_cpu, [pid])
    row = {"cpu_us_per_req": w.cpu_us_per_req, "rps": w.rps}
    for n in (SHORT, LONG):
        ph = bench.Phase(pid)
        with ph:
            s = asyncio.run(loadgen.streams(port, 16, d, query=f"chunks={n}"))
        streams = s.streams + s.errors + 16  # + the warm-up streams, as bench/run.py counts
        row[f"cpu_us_per_stream_{n}"] = 1e6 * ph.windows[0].cpu / streams
        row[f"incomplete_{n}"] = s.streams - s.complete + s.errors
        bench.say(f"{name:<14} {n:3d} chunks c=16 {s.streams_per_s:6.0f} streams/s  CPU"
                  f" {row[f'cpu_us_per_stream_{n}']:8.1f} µs/stream  complete"
                  f" {s.complete}/{s.streams} errors {s.errors}")  # fmt: skip
    row["per_chunk_slope_us"] = (row[f"cpu_us_per_stream_{LONG}"] -
                                 row[f"cpu_us_per_stream_{SHORT}"]) / (LONG - SHORT)  # fmt: skip
    row["per_chunk_old_us"] = (row[f"cpu_us_per_stream_{SHORT}"] - w.cpu_us_per_req) / SHORT
    return row


# ---- instructions (callgrind) ------------------------------------------------------------

BODY = {"model": "bench-model", "messages": [{"role": "user", "content": "Say hello."}]}


#: Under callgrind a proxy runs some 50x slower: chunks 1 ms apart pile up and are read
#: many to a read, which is not what a model's stream does. The instruction counts read
#: streams whose chunks come this far apart, few at once, so that each is read alone.
IR_GAP_MS, IR_STREAMS_AT_ONCE = 25, 4


async def _fixed_load(
    port: int, n: int, chunks: int | None, c: int = 8, gap_ms: float | None = None
) -> None:
    body = BODY if chunks is None else {**BODY, "stream": True,
                                        "stream_options": {"include_usage": True}}  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    if chunks is not None:
        url += f"?chunks={chunks}"
        if gap_ms is not None:
            url += f"&gap_ms={gap_ms:g}"
    headers = {"authorization": f"Bearer {loadgen.KEY}"}
    left = iter(range(n))
    async with aiohttp.ClientSession() as s:

        async def worker() -> None:
            for _ in left:
                async with s.post(url, json=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"HTTP {r.status}")

        await asyncio.gather(*(worker() for _ in range(c)))


def _dump(pid: int, out: Path) -> int:
    """Dump callgrind's counters (they restart from zero) and return the instructions."""
    before = set(glob.glob(f"{out}*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], capture_output=True, check=False)
    for _ in range(1200):
        new = set(glob.glob(f"{out}*")) - before
        if new:
            time.sleep(0.3)  # let it finish writing
            for line in Path(new.pop()).read_text().splitlines():
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
        time.sleep(0.1)
    raise RuntimeError("callgrind wrote no dump")


def instructions(policy_dir: Path, up_port: int, tmp: Path, n: int, ns: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in TARGETS:
        out = tmp / f"callgrind-{name.replace(' ', '-')}.out"
        prefix = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                  "--dump-line=no"]  # fmt: skip
        port = bench._port(18100 + len(found))
        if name == "gateway":
            p = bench.start_gateway(policy_dir, port, "info", None, tmp / "gw-callgrind.log",
                                    prefix=prefix)  # fmt: skip
        else:
            p = start_floor(up_port, port, None, prefix)
        bench.say(f"{name} under callgrind: {n} requests, {ns} streams of {SHORT} and {LONG}")
        asyncio.run(_fixed_load(port, 100, None))  # warm-up
        asyncio.run(_fixed_load(port, 20, SHORT))
        _dump(p.pid, out)
        asyncio.run(_fixed_load(port, n, None))
        req = _dump(p.pid, out) / n
        asyncio.run(_fixed_load(port, ns, SHORT, IR_STREAMS_AT_ONCE, IR_GAP_MS))
        short = _dump(p.pid, out) / ns
        asyncio.run(_fixed_load(port, ns, LONG, IR_STREAMS_AT_ONCE, IR_GAP_MS))
        long = _dump(p.pid, out) / ns
        procs.stop(p)
        found[name] = {"ir_per_req": req, "ir_per_stream_short": short,
                       "ir_per_stream_long": long,
                       "ir_per_chunk": (long - short) / (LONG - SHORT)}  # fmt: skip
        bench.say(f"   {req / 1e3:.1f}k instructions per request,"
                  f" {found[name]['ir_per_chunk'] / 1e3:.1f}k per chunk")  # fmt: skip
    return found


# ---- the run -----------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    isolation = bench._loopback_up()
    if procs.cpu_count() >= 2:
        cpu, load_cpu = 1, 0
        pinning = "proxy under test on CPU 1; upstream, load generators and runner on CPU 0"
        os.sched_setaffinity(0, {load_cpu})
    else:
        cpu = load_cpu = None
        pinning = "NOT pinned: only one CPU available"
    bench.say(f"isolation: {isolation}; pinning: {pinning}")
    out: dict[str, Any] = {
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "duration_s": args.duration,
        "isolation": isolation,
        "pinning": pinning,
        "machine": bench._machine(),
    }
    tmp = Path(tempfile.mkdtemp(prefix="bench-ratios-"))
    up_port = bench._port(bench.UPSTREAM_PORT)
    policy_dir = bench._policy_dir(up_port)
    up = procs.spawn([sys.executable, str(HERE / "upstream.py"), "--port", str(up_port),
                      "--chunk-gap-ms", "1"], cpu=load_cpu)  # fmt: skip
    procs.wait_http(up, up_port, "/v1/models", 15, "the bench upstream")
    floor_port, gw_port = bench._port(18060), bench._port(bench.GATEWAY_PORT)
    targets = {
        "minimal proxy": (start_floor(up_port, floor_port, cpu), floor_port),
        "gateway": (bench.start_gateway(policy_dir, gw_port, "info", cpu, tmp / "gw.log"), gw_port),
    }
    bench._check_answer(gw_port)
    time.sleep(1.0)
    out["rss_idle_mb"] = {n: procs.memory_mb(p.pid)["VmRSS"] for n, (p, _) in targets.items()}
    for _name, (_p, port) in targets.items():
        loadgen.wrk(port, 64, 1.0 if args.quick else 2.0, cpu=load_cpu)
    rounds: dict[str, list[dict[str, float]]] = {n: [] for n in targets}
    for r in range(args.rounds):
        order = TARGETS if r % 2 == 0 else TARGETS[::-1]
        bench.say(f"round {r + 1} of {args.rounds}: {' then '.join(order)}")
        for name in order:
            p, port = targets[name]
            rounds[name].append(one_round(name, p.pid, port, args.duration, load_cpu))
    for p, _ in targets.values():
        procs.stop(p)
    out["rounds"] = rounds
    if not args.no_instructions:
        if shutil.which("valgrind") and shutil.which("callgrind_control"):
            out["instructions"] = instructions(policy_dir, up_port, tmp, args.ir_requests,
                                               args.ir_streams)  # fmt: skip
        else:
            out["instructions"] = None
            bench.say("valgrind not found: no instruction counts (apt-get install valgrind)")
    procs.stop(up)
    return out


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summarise(out: dict[str, Any]) -> dict[str, Any]:
    f, g = out["rounds"]["minimal proxy"], out["rounds"]["gateway"]
    ratio = {k: [b[k] / a[k] for a, b in zip(f, g, strict=True)]
             for k in ("cpu_us_per_req", "per_chunk_slope_us", "per_chunk_old_us")}  # fmt: skip
    return {
        "median": {
            name: {k: _med([r[k] for r in rows]) for k in rows[0]}
            for name, rows in out["rounds"].items()
        },
        "ratio": {k: _med(v) for k, v in ratio.items()},
        "ratio_rounds": ratio,
    }


def report(out: dict[str, Any]) -> str:
    s = out["summary"] = summarise(out)
    m, ratio = s["median"], s["ratio"]
    mach = out["machine"]
    L = [
        f"# gateway / minimal aiohttp proxy, interleaved rounds, {out['started']}",
        "",
        f"- machine: {mach.get('cpu', '?')}, {mach.get('cpus', '?')} CPUs,"
        f" Python {mach.get('python', '?')}; gateway commit {mach.get('commit', '?')}",
        f"- isolation: {out['isolation']}; pinning: {out['pinning']}",
        f"- {len(out['rounds']['gateway'])} rounds of {out['duration_s']:g} s per phase,"
        " the order alternating; medians, and the median of the rounds' ratios",
        "",
        "| | CPU µs/req c=64 | CPU µs per 20-chunk stream | per 100-chunk stream"
        " | per chunk (slope) | per chunk, (stream - request) / 20 | RSS idle MB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in TARGETS:
        r = m[name]
        L.append(
            f"| {name} | {r['cpu_us_per_req']:.1f} | {r[f'cpu_us_per_stream_{SHORT}']:.0f}"
            f" | {r[f'cpu_us_per_stream_{LONG}']:.0f} | {r['per_chunk_slope_us']:.1f}"
            f" | {r['per_chunk_old_us']:.1f} | {out['rss_idle_mb'][name]:.1f} |"
        )
    L.append(
        f"| **gateway / minimal proxy** | **{ratio['cpu_us_per_req']:.2f}x** | | |"
        f" **{ratio['per_chunk_slope_us']:.2f}x** | {ratio['per_chunk_old_us']:.2f}x | |"
    )
    rr = s["ratio_rounds"]
    L += [
        "",
        "Ratios per round: per request "
        + ", ".join(f"{x:.2f}" for x in rr["cpu_us_per_req"])
        + "; per chunk (slope) "
        + ", ".join(f"{x:.2f}" for x in rr["per_chunk_slope_us"])
        + ".",
    ]
    ir = out.get("instructions")
    if ir:
        f, g = ir["minimal proxy"], ir["gateway"]
        L += [
            "",
            "## Instructions (callgrind, user space, independent of the machine's load)",
            "",
            "| | per request | per chunk (slope) |",
            "|---|---:|---:|",
            f"| minimal proxy | {f['ir_per_req'] / 1e3:.0f}k | {f['ir_per_chunk'] / 1e3:.1f}k |",
            f"| gateway | {g['ir_per_req'] / 1e3:.0f}k | {g['ir_per_chunk'] / 1e3:.1f}k |",
            f"| gateway / minimal proxy | {g['ir_per_req'] / f['ir_per_req']:.2f}x"
            f" | {g['ir_per_chunk'] / f['ir_per_chunk']:.2f}x |",
        ]
    L += [
        "",
        "Guards: "
        + "; ".join(f"{what} {'PASS' if ok else 'FAIL'}" for what, ok in guards(out))
        + ".",
    ]
    return "\n".join(L) + "\n"


def guards(out: dict[str, Any]) -> list[tuple[str, bool]]:
    """Each guard, said with its measured value, and whether it holds (the instruction
    guards only when callgrind ran)."""
    rss = out["rss_idle_mb"]["gateway"]
    found = [(f"idle RSS {rss:.1f} MB <= {GUARD_RSS_MB:g} MB", rss <= GUARD_RSS_MB)]
    ir = out.get("instructions")
    if ir:
        f, g = ir["minimal proxy"], ir["gateway"]
        req, chunk = g["ir_per_req"] / f["ir_per_req"], g["ir_per_chunk"] / f["ir_per_chunk"]
        found += [
            (f"instructions per request {req:.2f}x <= {GUARD_REQUEST}x", req <= GUARD_REQUEST),
            (f"per chunk {chunk:.2f}x <= {GUARD_CHUNK}x", chunk <= GUARD_CHUNK),
        ]
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 rounds of 2 s")
    p.add_argument("--rounds", type=int, default=None, help="rounds per target (5)")
    p.add_argument("--duration", type=float, default=None, help="seconds per phase (5)")
    p.add_argument("--no-instructions", action="store_true", help="skip the callgrind counts")
    p.add_argument("--ir-requests", type=int, default=400, help="requests under callgrind")
    p.add_argument("--ir-streams", type=int, default=8, help="streams of each length")
    p.add_argument("--no-netns", action="store_true", help="no private network namespace")
    p.add_argument("--no-save", action="store_true", help="print only")
    args = p.parse_args(argv)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.duration = args.duration or (2.0 if args.quick else 5.0)
    if shutil.which("wrk") is None:
        print("bench: 'wrk' not found", file=sys.stderr)
        return 2
    bench._enter_netns(args, str(Path(__file__).resolve()), sys.argv[1:] if argv is None else argv)
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
        stamp = dt.datetime.now().strftime("%Y-%m-%d-%H%M") + "-ratios"
        (RESULTS / f"{stamp}.md").write_text(text)
        (RESULTS / f"{stamp}.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
        bench.say(f"written: bench/results/{stamp}.md and .json")
    return 0 if all(ok for _, ok in guards(out)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
