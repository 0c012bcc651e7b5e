"""py-spy sampling of the gateway during load, and a text summary of the samples.

``record`` runs ``py-spy record --format raw`` (collapsed stacks: one line per unique
stack, frames separated by ``;``, then the sample count). ``summarise`` turns that
into three tables: functions by self time (the leaf frame), functions by inclusive
time (anywhere on the stack), and self time grouped by component (library or
gateway module). Only samples of a running thread are recorded (py-spy drops idle
ones by default), so the shares are shares of CPU time.
"""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from procs import pin_prefix

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def available() -> bool:
    return shutil.which("py-spy") is not None


def record(
    pid: int, seconds: float, out: Path, *, cpu: int | None, rate: int = 200, native: bool = True
) -> subprocess.Popen[bytes]:
    """Start sampling ``pid`` for ``seconds`` (returns at once; wait on the Popen)."""
    argv = [
        *pin_prefix(cpu),
        "py-spy",
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(1, round(seconds))),
        "--rate",
        str(rate),
        "--format",
        "raw",
        "--output",
        str(out),
    ]
    if native:
        argv.append("--native")
    else:
        argv.append("--nonblocking")
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _split(frame: str) -> tuple[str, str]:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip(), ""
    return m.group("func"), m.group("file")


def _short(path: str) -> str:
    for marker in ("site-packages/", "dist-packages/", "/work/main/", "lib/python3.11/"):
        i = path.find(marker)
        if i >= 0:
            return path[i + len(marker) :]
    return path


def component(path: str) -> str:
    """The library, or the gateway module, a frame's file belongs to."""
    p = _short(path)
    if p.startswith("gateway/"):
        return p.removesuffix(".py")
    if not p or ("/" not in p and not p.endswith(".py")):
        return f"native: {p or '?'}"
    head = p.split("/")[0]
    if head == "aiohttp":
        name = p.split("/")[-1].removesuffix(".py")
        if name.startswith("client") or name in ("connector", "http_writer", "streams"):
            return f"aiohttp/{name}"
        return f"aiohttp/{name}"
    if head.endswith(".py"):
        return f"stdlib/{head.removesuffix('.py')}"
    return head


# Buckets for "where the time goes": the first that matches a stack wins.
BUCKETS: list[tuple[str, tuple[str, ...]]] = [
    (
        "upstream HTTP client (gateway/upstream/client.py + gateway/http1.py or aiohttp's client)",
        ("(gateway/upstream/client.py", "(gateway/http1.py"),
    ),
    (
        "observability (gateway/observe: access log via structlog, Prometheus)",
        ("(gateway/observe/", "(structlog/", "(prometheus_client/"),
    ),
    (
        "upstream HTTP client, response parsing (aiohttp/client_proto.py, called by the loop)",
        ("(aiohttp/client_proto.py",),
    ),
    ("asyncio.timeout() contexts elsewhere (read_body)", ("(asyncio/timeouts.py",)),
    (
        "gateway request path (routes, handlers, engine, proxy, answer, state, policy)",
        ("(gateway/web/routes.py", "(gateway/middlewares.py"),
    ),
    ("HTTP server (gateway/server: parsing, writing) + event loop, outside the request path", ()),
]


def _bucket(stack: str) -> str:
    for name, needles in BUCKETS:
        if not needles or any(n in stack for n in needles):
            return name
    return BUCKETS[-1][0]


def summarise(raw: Path, top: int = 30) -> str:
    self_time: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    comp_self: Counter[str] = Counter()
    comp_incl: Counter[str] = Counter()
    buckets: Counter[str] = Counter()
    total = 0
    text = gzip.decompress(raw.read_bytes()).decode() if raw.suffix == ".gz" else raw.read_text()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        buckets[_bucket(stack)] += n
        frames = [f for f in stack.split(";") if f]
        # the first frame is "process ..." / "thread ..." labels in some py-spy versions
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        names = []
        comps = []
        for f in frames:
            func, path = _split(f)
            names.append(f"{func} ({_short(path)})" if path else func)
            comps.append(component(path))
        self_time[names[-1]] += n
        comp_self[comps[-1]] += n
        for name in set(names):
            incl[name] += n
        for c in set(comps):
            comp_incl[c] += n
    if not total:
        return "no samples\n"

    def table(title: str, c: Counter[str], k: int) -> list[str]:
        out = [f"## {title}", "", "| % of samples | samples | frame |", "|---:|---:|---|"]
        for name, n in c.most_common(k):
            out.append(f"| {100 * n / total:5.1f} | {n} | `{name}` |")
        return [*out, ""]

    gw_incl = Counter({k: v for k, v in incl.items() if "(gateway/" in k})
    lines = [f"py-spy samples: {total} (on-CPU only)", ""]
    lines += table(
        "Where the time goes (each sample in the first bucket whose frames it contains)",
        buckets,
        10,
    )
    lines += table(
        "Inclusive time by gateway function (where the gateway's request path spends)", gw_incl, 40
    )
    lines += table("Self time by component (leaf frame's library or gateway module)", comp_self, 25)
    lines += table("Inclusive time by component (anywhere on the stack)", comp_incl, 30)
    lines += table("Self time by function", self_time, top)
    lines += table("Inclusive time by function", incl, top)
    return "\n".join(lines) + "\n"
