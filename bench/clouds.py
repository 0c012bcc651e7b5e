"""What a cloud provider's attempt costs through the gateway, next to a plain provider's,
in one run against one gateway process (docs/performance.md, "Cloud providers").

    python bench/clouds.py [--quick] [--duration S] [--rounds N] [--no-vertex]
                           [--wait-quiet S] [--no-netns] [--no-save]
    python bench/run.py --phase clouds [...]          (the same)

Same isolation, pinning and bench upstream as ``bench/run.py`` (whose helpers it uses):
a private network namespace; the gateway (``serve``, access log on at info) on CPU 1;
the bench upstream, wrk, the stream client, this runner and the local token services on
CPU 0. The upstream answers the clouds' paths with the same canned answers (Anthropic
Messages on ``/v1/messages``, Bedrock's ``/model/{id}/invoke`` and Vertex's
``:rawPredict``; a chat completion on Azure's deployment path), so each pair below
differs only in what the gateway does for the cloud:

- requests, ``/v1/messages``: a plain Anthropic provider (static key) against Bedrock
  (the model's URL, the body reshaped, a SigV4 signature per attempt with awscrt from
  static keys in the gateway's environment) and Vertex (a Google access token from a
  service-account file whose ``token_uri`` is the local fake token service);
- requests, ``/v1/chat/completions``: a plain OpenAI provider against Azure OpenAI with a
  Microsoft Entra ID token (managed identity: ``IDENTITY_ENDPOINT`` at the local fake);
- streams, ``/v1/messages``: the same Anthropic events as Anthropic's SSE from the plain
  provider and as Bedrock's event stream (``invoke-with-response-stream``, each event in
  a ``chunk`` frame, base64) from Bedrock; streams of 20 and 100 events, the cost of a
  chunk being the slope between the two lengths.

Per round: wrk c=64 of every request target, then the stream client (c=16) of both
stream targets at both lengths; the order rotates from round to round; the figures are
medians over the rounds, and the differences also per round (paired). Before the load,
``bench/auth_cost.py`` runs on the gateway's CPU: ``authorize`` alone, in-process.

The guards (docs/performance.md), in instructions under callgrind, which do not move
with the machine's load as CPU time does: a SigV4-signed attempt (Bedrock) at most
+250k instructions over a plain one, a Vertex or Azure attempt (a held token) at most
+60k, an event-stream chunk at most 1.25x an SSE chunk. They end the report, each with
PASS or FAIL, and the exit status is 1 when one fails (without callgrind: not judged).
The CPU figures are printed beside them, without a verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# the checkout's gateway (the fake token services, the event-stream frames of the bench
# upstream), here and in every child process, whatever else this machine has installed
sys.path.insert(1, str(HERE.parent))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HERE.parent), os.environ.get("PYTHONPATH", "")) if p
)

import loadgen  # noqa: E402
import procs  # noqa: E402
import run as bench  # noqa: E402

#: The guards, in instructions (docs/performance.md): what a cloud attempt may add over
#: the plain attempt it is compared with, by target, and an event-stream chunk's cost
#: over an SSE chunk's.
GUARD_ADDED_IR = {"bedrock": 250_000, "vertex": 60_000, "azure": 60_000}
GUARD_CHUNK_RATIO = 1.25
SHORT, LONG = 20, 100  # stream lengths (events) for the per-chunk slope

#: request target -> (endpoint, model, the plain target it is compared with, label)
REQUESTS: dict[str, tuple[str, str, str | None, str]] = {
    "anthropic": ("/v1/messages", "bench-claude", None, "Anthropic, static key (plain)"),
    "bedrock": ("/v1/messages", "bench-claude-bedrock", "anthropic",
                "Bedrock InvokeModel, SigV4 (awscrt)"),
    "vertex": ("/v1/messages", "bench-claude-vertex", "anthropic",
               "Vertex rawPredict, Google token"),
    "openai": ("/v1/chat/completions", "bench-gpt", None, "OpenAI, static key (plain)"),
    "azure": ("/v1/chat/completions", "bench-gpt-azure", "openai",
              "Azure OpenAI, Entra ID token"),
}  # fmt: skip
#: stream target -> label; the plain one's length is the query, Bedrock's the model id
STREAMS = {"sse": "Anthropic SSE (plain)", "eventstream": "Bedrock event stream"}
SHAPE = {"/v1/messages": b'"type":"message"', "/v1/chat/completions": b'"object":"chat.completion"'}

# fake, static AWS keys: the bench upstream checks no signature, the gateway makes one
AWS_KEY_ID, AWS_SECRET = "AKIABENCH00000000001", "bench/secret/" + "0" * 27


def policy_dir(upstream_port: int) -> Path:
    """bench/policies/bench.yaml (its policy, team and route) with the providers and
    models of this phase added, all at the bench upstream."""
    root = f"http://127.0.0.1:{upstream_port}"
    providers = {
        "bench-anthropic": {"api": "anthropic", "base_url": root,
                            "api_key_env": "BENCH_UPSTREAM_KEY"},
        "bench-bedrock": {"api": "bedrock", "region": "us-east-1", "base_url": root},
        "bench-vertex": {"api": "vertex", "project": "bench", "region": "us-east5",
                         "base_url": root},
        "bench-azure": {"api": "azure", "base_url": root},
    }  # fmt: skip
    window = {"context_window": 200000}
    models = {
        "bench-claude": {"provider": "bench-anthropic", "upstream_model": "claude-bench",
                         **window},
        "bench-claude-bedrock": {"provider": "bench-bedrock",
                                 "upstream_model": "anthropic.claude-bench", **window},
        "bench-claude-vertex": {"provider": "bench-vertex",
                                "upstream_model": "claude-bench@20250101", **window},
        "bench-gpt": {"provider": "bench", "upstream_model": "bench-model", **window},
        "bench-gpt-azure": {"provider": "bench-azure", "upstream_model": "bench-deployment",
                            **window},
    }  # fmt: skip
    for n in (SHORT, LONG):  # Bedrock's stream length rides in the model id
        models[f"bench-claude-bedrock-{n}"] = {
            "provider": "bench-bedrock",
            "upstream_model": f"anthropic.claude-bench-chunks-{n}",
            **window,
        }
    text = (bench.POLICY_DIR / "bench.yaml").read_text()
    text = text.replace(f"127.0.0.1:{bench.UPSTREAM_PORT}", f"127.0.0.1:{upstream_port}")
    lines = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in providers.items())
    text = text.replace("\nmodels:\n", "\n" + lines + "\nmodels:\n", 1)
    lines = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in models.items())
    text = text.replace("\nmodels:\n", "\nmodels:\n" + lines, 1)
    tmp = Path(tempfile.mkdtemp(prefix="bench-clouds-policies-"))
    (tmp / "bench.yaml").write_text(text)
    return tmp


# ---- the local token services (a thread of this runner, on CPU 0) -------------------------


class TokenServices:
    """The fake Azure managed-identity endpoint and Google token service, served by an
    event loop in a thread of this runner for as long as the gateway runs."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env: dict[str, str] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._services: list[Any] = []

    def __enter__(self) -> TokenServices:
        from gateway.testing.fake_azure_identity import FakeAzureIdentity
        from gateway.testing.fake_google_token import FakeGoogleToken

        self._thread.start()
        azure, google = FakeAzureIdentity(), FakeGoogleToken()
        for s in (azure, google):
            asyncio.run_coroutine_threadsafe(s.start(), self._loop).result(10)
            self._services.append(s)
        self.azure, self.google = azure, google
        self.env = {
            "IDENTITY_ENDPOINT": azure.endpoint,
            "IDENTITY_HEADER": azure.secret,
            "GOOGLE_APPLICATION_CREDENTIALS": str(google.service_account_file(self.folder)),
        }
        return self

    def tokens_issued(self) -> dict[str, int]:
        return {"azure": len(self.azure.issued), "google": len(self.google.issued)}

    def __exit__(self, *_: object) -> None:
        for s in self._services:
            asyncio.run_coroutine_threadsafe(s.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def gateway_env(tmp: Path, tokens: TokenServices) -> dict[str, str]:
    """The gateway's cloud environment: static AWS keys, the token services; nothing of
    this machine's own cloud configuration (the runner's environment loses it too)."""
    from_machine = [
        k
        for k in os.environ
        if k.startswith(("AWS_", "AZURE_", "GOOGLE_", "GCE_", "IDENTITY_", "MSI_", "IMDS_"))
    ]
    for k in from_machine:  # fmt: skip
        del os.environ[k]
    return {
        "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "no-aws-credentials"),
        "AWS_CONFIG_FILE": str(tmp / "no-aws-config"),
        "AZURE_CONFIG_DIR": str(tmp / "no-azure"),
        "CLOUDSDK_CONFIG": str(tmp / "no-gcloud"),
        "GCE_METADATA_IP": "127.0.0.1:9",
        **tokens.env,
    }


# ---- in-process: authorize alone (bench/auth_cost.py, on the gateway's CPU) ------------


def auth_cost(cpu: int | None, quick: bool) -> dict[str, Any]:
    argv = [*procs.pin_prefix(cpu), sys.executable, str(HERE / "auth_cost.py"),
            "--repeat", "5" if quick else "7", "--count", "1000" if quick else "3000"]  # fmt: skip
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    rows: dict[str, dict[str, float]] = {}
    for line in p.stdout.splitlines():
        parts = line.rsplit(None, 2)
        if len(parts) == 3:
            try:
                rows[parts[0].strip()] = {"us": float(parts[1]), "over_plain_us": float(parts[2])}
            except ValueError:
                continue
    if not rows:
        bench.say(f"auth_cost.py gave nothing ({p.returncode}): {p.stderr[-500:]}")
    return {"rows": rows, "output": p.stdout}


# ---- measured phases ---------------------------------------------------------------------


def _body(target: str, stream: bool = False) -> dict[str, Any]:
    path, model, _, _ = REQUESTS[target]
    base = loadgen.MESSAGES_BODY if path == "/v1/messages" else loadgen.CHAT_BODY
    return {**base, "model": model, **({"stream": True} if stream else {})}


def run_wrk(
    target: str, port: int, d: float, load_cpu: int | None, pids: list[int]
) -> dict[str, Any]:
    path = REQUESTS[target][0]
    if bench.QUIET["max_wait_s"]:
        bench.wait_quiet(pids)
    ph = bench.Phase(*pids)
    with ph:
        r = loadgen.wrk(port, 64, d, cpu=load_cpu, path=path, body=_body(target))
    w = ph.windows[0]
    r.cpu_s, r.cpu_util, r.foreign_cpu = w.cpu, w.utilisation, ph.foreign_cpu_per_s
    r.cpu_us_per_req = 1e6 * w.cpu / r.requests if r.requests else float("nan")
    bench.say(
        f"{target:<12} c=64 {r.rps:8.0f} req/s  p50 {r.p50_ms:6.3f} ms  CPU"
        f" {r.cpu_us_per_req:6.1f} µs/req ({100 * r.cpu_util:.0f}% of a core)"
        f"  errors {r.error_count}  cpus {ph.busy}  other load {ph.foreign_cpu_per_s:.2f}"
    )
    return {**vars(r), "busy": ph.busy}


def _stream_args(kind: str, n: int) -> tuple[dict[str, Any], str]:
    """The body and query of a stream of ``n`` events from the plain provider (its length
    in the query, which goes along) or from Bedrock (in the model id: a cloud's URL is
    its own)."""
    if kind == "sse":
        return _body("anthropic", True), f"chunks={n}"
    return {**loadgen.MESSAGES_BODY, "model": f"bench-claude-bedrock-{n}", "stream": True}, ""


def run_streams(kind: str, n: int, port: int, d: float, pids: list[int]) -> dict[str, Any]:
    if bench.QUIET["max_wait_s"]:
        bench.wait_quiet(pids)
    body, query = _stream_args(kind, n)
    ph = bench.Phase(*pids)
    with ph:
        r = asyncio.run(loadgen.streams(port, 16, d, fmt="anthropic", body=body, query=query))
    n_streams = r.streams + r.errors + 16  # + the warm-up streams, as bench/run.py counts
    cpu_us = 1e6 * ph.windows[0].cpu / n_streams
    events = r.chunks_seen / r.complete if r.complete else 0.0
    bench.say(
        f"{kind:<12} {n:3d} events c=16 {r.streams_per_s:6.0f} streams/s  CPU {cpu_us:8.1f}"
        f" µs/stream  complete {r.complete}/{r.streams} errors {r.errors}  {events:.0f}"
        f" events/stream  other load {ph.foreign_cpu_per_s:.2f}"
    )
    for e in r.examples:
        bench.say(f"   e.g. {e}")
    return {"cpu_us_per_stream": cpu_us, "streams_per_s": r.streams_per_s,
            "incomplete": r.incomplete + r.errors, "events_per_stream": events,
            "foreign_cpu": ph.foreign_cpu_per_s, "ttft_p50_ms": r.ttft_p50_ms}  # fmt: skip


def _post(
    port: int, path: str, body: dict[str, Any], query: str = ""
) -> tuple[int, dict[str, str], bytes]:
    import urllib.request

    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}" + (f"?{query}" if query else ""),
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {loadgen.KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, dict(r.headers.items()), r.read()


def check_answers(port: int, targets: list[str]) -> dict[str, Any]:
    """One request per target and one stream per stream target and length before the
    load: 200, the answer's shape, complete streams of the right number of events."""
    seen: dict[str, Any] = {}
    for target in targets:
        path = REQUESTS[target][0]
        status, headers, body = _post(port, path, _body(target))
        if status != 200 or SHAPE[path] not in body:
            raise RuntimeError(f"{target}: sanity request failed: {status} {body[:300]!r}")
        gw = {k: v for k, v in headers.items() if k.lower().startswith("x-gateway")}
        seen[target] = {"bytes": len(body), "headers": gw}
        bench.say(f"sanity {target}: 200, {len(body)} bytes; {gw}")
    for kind in STREAMS:
        for n in (SHORT, LONG):
            body, query = _stream_args(kind, n)
            status, _, data = _post(port, "/v1/messages", body, query)
            events = data.count(b"data: ")
            if status != 200 or not loadgen.is_complete_messages(data) or events != n:
                raise RuntimeError(f"{kind} {n}: sanity stream: {status}, {events} events,"
                                   f" {data[-300:]!r}")  # fmt: skip
            seen[f"{kind}-{n}"] = {"events": events}
        bench.say(f"sanity {kind} streams: complete, {SHORT} and {LONG} events")
    return seen


# ---- instructions (callgrind): steady where CPU time is not ------------------------------


async def _fixed(
    port: int, n: int, path: str, body: dict[str, Any], c: int = 8, query: str = ""
) -> None:
    """``n`` requests (or streams) of ``body`` to ``path``, ``c`` at once, each read whole."""
    import aiohttp

    url = f"http://127.0.0.1:{port}{path}" + (f"?{query}" if query else "")
    headers = {"authorization": f"Bearer {loadgen.KEY}"}
    left = iter(range(n))
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            for _ in left:
                async with session.post(url, json=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"HTTP {r.status} on {path}")

        await asyncio.gather(*(worker() for _ in range(c)))


def instructions(
    args: argparse.Namespace, targets: list[str], env: dict[str, str], tmp: Path, cpu: int | None
) -> dict[str, Any]:
    """The gateway under callgrind, against an upstream whose chunks come 25 ms apart (as
    bench/ratios.py does, so that each is read alone), for a fixed load: instructions per
    request of every target, per stream of both lengths of both framings."""
    import ratios

    up_port = bench._port(18190)
    up = procs.spawn(
        [sys.executable, str(HERE / "upstream.py"), "--port", str(up_port),
         "--chunk-gap-ms", str(ratios.IR_GAP_MS)],
        cpu=cpu,
    )  # fmt: skip
    procs.wait_http(up, up_port, "/v1/models", 15, "the bench upstream")
    pdir = policy_dir(up_port)
    out_file = tmp / "callgrind-gateway.out"
    prefix = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
              "--dump-line=no"]  # fmt: skip
    port = bench._port(18191)
    gw = bench.start_gateway(pdir, port, "info", None, tmp / "gw-callgrind.log", extra_env=env,
                             prefix=prefix)  # fmt: skip
    found: dict[str, Any] = {"requests": args.ir_requests, "streams": args.ir_streams}
    try:
        bench.say(f"gateway under callgrind: {args.ir_requests} requests per target,"
                  f" {args.ir_streams} streams of {SHORT} and {LONG} events per framing")  # fmt: skip
        for target in targets:  # warm every path
            asyncio.run(_fixed(port, 40, REQUESTS[target][0], _body(target)))
        for kind in STREAMS:
            body, query = _stream_args(kind, SHORT)
            asyncio.run(_fixed(port, 8, "/v1/messages", body, 8, query))
        ratios._dump(gw.pid, out_file)
        for target in targets:
            asyncio.run(_fixed(port, args.ir_requests, REQUESTS[target][0], _body(target)))
            found[target] = ratios._dump(gw.pid, out_file) / args.ir_requests
            if args.keep_callgrind:  # the dump just written, for callgrind_annotate
                keep = Path(args.keep_callgrind)
                keep.mkdir(parents=True, exist_ok=True)
                last = max(tmp.glob("callgrind-gateway.out*"), key=lambda f: f.stat().st_mtime)
                shutil.copy(last, keep / f"callgrind-{target}.out")
            bench.say(f"   {target:<12} {found[target] / 1e3:7.1f}k instructions per request")
        for kind in STREAMS:
            for n in (SHORT, LONG):
                body, query = _stream_args(kind, n)
                asyncio.run(_fixed(port, args.ir_streams, "/v1/messages", body,
                                   ratios.IR_STREAMS_AT_ONCE, query))  # fmt: skip
                found[f"{kind}-{n}"] = ratios._dump(gw.pid, out_file) / args.ir_streams
            found[f"{kind}-per-chunk"] = (found[f"{kind}-{LONG}"] - found[f"{kind}-{SHORT}"]) / (
                LONG - SHORT
            )
            bench.say(f"   {kind:<12} {found[f'{kind}-per-chunk'] / 1e3:7.1f}k instructions"
                      " per chunk")  # fmt: skip
    finally:
        procs.stop(gw)
        procs.stop(up)
        shutil.rmtree(pdir, ignore_errors=True)
    return found


def measure(args: argparse.Namespace) -> dict[str, Any]:
    isolation = bench._loopback_up()
    if procs.cpu_count() >= 2:
        gw_cpu, load_cpu = 1, 0
        pinning = "gateway on CPU 1; upstream, load generators, token services and runner on CPU 0"
        os.sched_setaffinity(0, {load_cpu})
    else:
        gw_cpu = load_cpu = None
        pinning = "NOT pinned: only one CPU available"
    bench.say(f"isolation: {isolation}; pinning: {pinning}")
    targets = [t for t in REQUESTS if not (args.no_vertex and t == "vertex")]
    out: dict[str, Any] = {
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "duration_s": args.duration,
        "rounds": args.rounds,
        "targets": targets,
        "isolation": isolation,
        "pinning": pinning,
        "commit": bench._git_commit(),
        "machine": bench._machine(),
        "loadavg_before": os.getloadavg(),
    }
    tmp = Path(tempfile.mkdtemp(prefix="bench-clouds-"))
    up_port, gw_port = bench._port(bench.UPSTREAM_PORT), bench._port(bench.GATEWAY_PORT)
    pdir = policy_dir(up_port)
    try:
        with TokenServices(tmp) as tokens:
            env = gateway_env(tmp, tokens)
            os.environ.update({k: v for k, v in env.items() if k.startswith(("AWS_", "IDENT",
                                                                             "GOOGLE_"))})  # fmt: skip
            bench.say("bench/auth_cost.py on the gateway's CPU: authorize alone, in-process")
            out["auth_cost"] = auth_cost(gw_cpu, args.quick)
            for line in out["auth_cost"]["output"].splitlines():
                bench.say("   " + line)
            up = procs.spawn(
                [sys.executable, str(HERE / "upstream.py"), "--port", str(up_port),
                 "--chunk-gap-ms", "1"],
                cpu=load_cpu,
            )  # fmt: skip
            procs.wait_http(up, up_port, "/v1/models", 15, "the bench upstream")
            gw = bench.start_gateway(pdir, gw_port, "info", gw_cpu, tmp / "gateway.log",
                                     extra_env=env)  # fmt: skip
            out["sanity"] = check_answers(gw_port, targets)
            pids = [gw.pid, up.pid]
            warm = 1.0 if args.quick else 2.0
            for target in targets:  # every path warm (imports, caches, pools, tokens)
                loadgen.wrk(gw_port, 64, warm, cpu=load_cpu, path=REQUESTS[target][0],
                            body=_body(target))  # fmt: skip
            rounds: list[dict[str, Any]] = []
            kinds = list(STREAMS)
            for i in range(args.rounds):
                order = targets[i % len(targets) :] + targets[: i % len(targets)]
                sorder = kinds if i % 2 == 0 else kinds[::-1]
                bench.say(f"round {i + 1}/{args.rounds}: {', '.join(order)}; {', '.join(sorder)}")
                row: dict[str, Any] = {}
                for target in order:
                    row[target] = run_wrk(target, gw_port, args.duration, load_cpu, pids)
                for kind in sorder:
                    for n in (SHORT, LONG):
                        row[f"{kind}-{n}"] = run_streams(kind, n, gw_port, args.duration, pids)
                rounds.append(row)
            out["rounds_raw"] = rounds
            out["tokens_issued"] = tokens.tokens_issued()
            out["rss_mb"] = procs.memory_mb(gw.pid)
            out["loadavg_after"] = os.getloadavg()
            procs.stop(gw)
            procs.stop(up)
            log = (tmp / "gateway.log").read_bytes()
            out["access_log_lines"] = log.count(b'"request_completed"')
            out["secrets_in_log"] = sum(s.encode() in log for s in (AWS_SECRET,))
            if not args.no_instructions and shutil.which("callgrind_control"):
                out["instructions"] = instructions(args, targets, env, tmp, load_cpu)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(pdir, ignore_errors=True)
    out["derived"] = derive(out)
    return out


# ---- derived figures and the report --------------------------------------------------------


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def derive(out: dict[str, Any]) -> dict[str, Any]:
    rounds, targets = out["rounds_raw"], out["targets"]
    m: dict[str, Any] = {"requests": {}, "streams": {}}
    for t in targets:
        cpu = [r[t]["cpu_us_per_req"] for r in rounds]
        row: dict[str, Any] = {
            "cpu_us_per_req": _med(cpu),
            "rps": _med([r[t]["rps"] for r in rounds]),
            "p50_ms": _med([r[t]["p50_ms"] for r in rounds]),
            "errors": sum(sum(r[t]["errors"].values()) for r in rounds),
            "foreign_cpu": max(r[t]["foreign_cpu"] for r in rounds),
            "rounds_cpu_us_per_req": cpu,
        }
        plain = REQUESTS[t][2]
        if plain is not None:
            diffs = [r[t]["cpu_us_per_req"] - r[plain]["cpu_us_per_req"] for r in rounds]
            row["added_us"] = row["cpu_us_per_req"] - _med(
                [r[plain]["cpu_us_per_req"] for r in rounds]
            )
            row["rounds_added_us"] = diffs
            row["paired_median_added_us"] = _med(diffs)
        m["requests"][t] = row
    for kind in STREAMS:
        slopes = [
            (r[f"{kind}-{LONG}"]["cpu_us_per_stream"] - r[f"{kind}-{SHORT}"]["cpu_us_per_stream"])
            / (LONG - SHORT)
            for r in rounds
        ]
        m["streams"][kind] = {
            f"cpu_us_per_stream_{n}": _med([r[f"{kind}-{n}"]["cpu_us_per_stream"] for r in rounds])
            for n in (SHORT, LONG)
        }
        s = m["streams"][kind]
        s["per_chunk_us"] = (s[f"cpu_us_per_stream_{LONG}"] - s[f"cpu_us_per_stream_{SHORT}"]) / (
            LONG - SHORT
        )
        s["rounds_per_chunk_us"] = slopes
        s["incomplete"] = sum(r[f"{kind}-{n}"]["incomplete"] for r in rounds for n in (SHORT, LONG))
        s["foreign_cpu"] = max(
            r[f"{kind}-{n}"]["foreign_cpu"] for r in rounds for n in (SHORT, LONG)
        )
    sse, es = m["streams"]["sse"], m["streams"]["eventstream"]
    ratios = [
        b / a for a, b in zip(sse["rounds_per_chunk_us"], es["rounds_per_chunk_us"], strict=True)
    ]
    m["chunk_ratio"] = es["per_chunk_us"] / sse["per_chunk_us"]
    m["rounds_chunk_ratio"] = ratios
    m["paired_median_chunk_ratio"] = _med(ratios)
    m["other_load_max"] = max(
        [r["foreign_cpu"] for r in m["requests"].values()]
        + [s["foreign_cpu"] for s in m["streams"].values()]
    )
    return m


def ir_ratio(ir: dict[str, Any]) -> float:
    return float(ir["eventstream-per-chunk"] / ir["sse-per-chunk"])


def guards(out: dict[str, Any]) -> list[tuple[str, bool]]:
    """Each guard, said with its measured value, and whether it holds; none without the
    instruction counts (callgrind did not run)."""
    ir = out.get("instructions")
    if not ir:
        return []
    found = []
    for t in out["targets"]:
        plain = REQUESTS[t][2]
        if plain is None:
            continue
        added, most = ir[t] - ir[plain], GUARD_ADDED_IR[t]
        found.append(
            (f"{t} attempt {added / 1e3:+.1f}k instructions over {plain} <= +{most / 1e3:g}k",
             added <= most)
        )  # fmt: skip
    ratio = ir_ratio(ir)
    found.append(
        (f"an event-stream chunk {ratio:.2f}x an SSE chunk <= {GUARD_CHUNK_RATIO}x",
         ratio <= GUARD_CHUNK_RATIO)
    )  # fmt: skip
    return found


def report(out: dict[str, Any]) -> str:
    m, mach = out["derived"], out["machine"]
    L = [
        f"# Cloud providers' cost ({out['started']}, {out['mode']}, {out['rounds']} rounds of"
        f" {out['duration_s']:g} s per phase, commit {out['commit']})",
        "",
        f"- machine: {mach['cpu']}, {mach['cpus']} CPUs, Linux {mach['kernel']},"
        f" Python {mach['python']}, {mach['wrk']}; load average before"
        f" {out['loadavg_before'][0]:.2f}, after {out['loadavg_after'][0]:.2f}",
        f"- isolation: {out['isolation']}; pinning: {out['pinning']}",
        "- one gateway process (`serve`, access log at info); the bench upstream answers every"
        " provider's path with the same canned answer",
        f"- tokens the gateway fetched from the local token services: {out['tokens_issued']}",
        "",
        "Medians over the rounds; the targets' order rotates from round to round.",
        "",
        "## An attempt (wrk c=64, 1 thread)",
        "",
        "| provider | endpoint | req/s | CPU µs/req | + vs plain | paired median"
        " | per round | errors | other load |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for t in out["targets"]:
        r = m["requests"][t]
        added = f"{r['added_us']:+.1f}" if "added_us" in r else ""
        paired = f"{r['paired_median_added_us']:+.1f}" if "added_us" in r else ""
        per = ", ".join(f"{x:+.0f}" for x in r["rounds_added_us"]) if "added_us" in r else ""
        L.append(
            f"| {REQUESTS[t][3]} | `{REQUESTS[t][0]}` | {r['rps']:,.0f} | {r['cpu_us_per_req']:.1f}"
            f" | {added} | {paired} | {per} | {r['errors']} | {r['foreign_cpu']:.2f} |"
        )
    rows = out.get("auth_cost", {}).get("rows", {})
    if rows:
        L += [
            "",
            "`authorize` alone, in-process on the gateway's CPU (`bench/auth_cost.py`, a Bedrock"
            " request with a 2 KB body), µs per call over a plain attempt: "
            + "; ".join(
                f"{k} {v['over_plain_us']:+.2f}"
                for k, v in rows.items()
                if not k.startswith("plain")
            )
            + ".",
        ]
    L += [
        "",
        f"## A stream chunk (stream client c=16; streams of {SHORT} and {LONG} events, 1 ms apart)",
        "",
        f"| upstream framing | CPU µs per {SHORT}-event stream | per {LONG}-event stream"
        " | per chunk (slope) µs | per round | incomplete | other load |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for kind, label in STREAMS.items():
        s = m["streams"][kind]
        L.append(
            f"| {label} | {s[f'cpu_us_per_stream_{SHORT}']:.0f} | {s[f'cpu_us_per_stream_{LONG}']:.0f}"
            f" | {s['per_chunk_us']:.1f} | {', '.join(f'{x:.1f}' for x in s['rounds_per_chunk_us'])}"
            f" | {s['incomplete']} | {s['foreign_cpu']:.2f} |"
        )
    L += [
        f"| **event stream / SSE** | | | **{m['chunk_ratio']:.2f}x** |"
        f" {', '.join(f'{x:.2f}' for x in m['rounds_chunk_ratio'])} (paired median"
        f" {m['paired_median_chunk_ratio']:.2f}x) | | |",
    ]
    ir = out.get("instructions")
    if ir:
        L += [
            "",
            f"## Instructions (callgrind, user space; {ir['requests']} requests per target,"
            f" {ir['streams']} streams per length, chunks 25 ms apart)",
            "",
            "| provider | per request | + vs plain |",
            "|---|---:|---:|",
        ]
        for t in out["targets"]:
            plain = REQUESTS[t][2]
            added = f"{(ir[t] - ir[plain]) / 1e3:+.1f}k" if plain else ""
            L.append(f"| {REQUESTS[t][3]} | {ir[t] / 1e3:.1f}k | {added} |")
        L += [
            "",
            "| upstream framing | per chunk (slope) |",
            "|---|---:|",
            *(f"| {label} | {ir[f'{k}-per-chunk'] / 1e3:.1f}k |" for k, label in STREAMS.items()),
            f"| **event stream / SSE** | **{ir_ratio(ir):.2f}x** |",
        ]
    L += ["", "## CPU (no verdict: it moves with the machine and its load)", ""]
    for t in out["targets"]:
        r = m["requests"][t]
        if "added_us" in r:
            L.append(
                f"- {t}: {r['added_us']:+.1f} µs of CPU per attempt over"
                f" {REQUESTS[t][2]} (paired median {r['paired_median_added_us']:+.1f})"
            )
    L.append(
        f"- an event-stream chunk {m['chunk_ratio']:.2f}x an SSE chunk (paired median"
        f" {m['paired_median_chunk_ratio']:.2f}x)"
    )
    bad = sum(r["errors"] for r in m["requests"].values()) + sum(
        s["incomplete"] for s in m["streams"].values()
    )
    L.append(f"- errors and incomplete streams: {bad}")
    noisy = m["other_load_max"]
    L.append(
        f"- other load (processes outside the benchmark): up to {noisy:.2f} CPUs"
        + (
            " -- a shared machine: read the differences, not the absolute numbers"
            if noisy > 0.1
            else ""
        )
    )
    found = guards(out)
    L += [
        "",
        "Guards: "
        + (
            "; ".join(f"{what} {'PASS' if ok else 'FAIL'}" for what, ok in found)
            if found
            else "not judged (no instruction counts: valgrind not installed or --no-instructions)"
        )
        + ".",
    ]
    return "\n".join(L) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 rounds of 2 s")
    p.add_argument("--duration", type=float, default=None, help="seconds per phase (5)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds (5)")
    p.add_argument("--no-vertex", action="store_true", help="Bedrock and Azure only")
    p.add_argument("--no-instructions", action="store_true", help="skip the callgrind counts")
    p.add_argument("--ir-requests", type=int, default=200, help="requests per target (callgrind)")
    p.add_argument("--ir-streams", type=int, default=8, help="streams per length (callgrind)")
    p.add_argument("--keep-callgrind", metavar="DIR", help="copy each target's dump there")
    p.add_argument("--wait-quiet", type=float, default=None, help="see bench/run.py (10, quick 0)")
    p.add_argument("--no-netns", action="store_true", help="no private network namespace")
    p.add_argument("--no-save", action="store_true", help="print only")
    args = p.parse_args(argv)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.duration = args.duration or (2.0 if args.quick else 5.0)
    bench.QUIET["max_wait_s"] = (
        (0.0 if args.quick else 10.0) if args.wait_quiet is None else args.wait_quiet
    )
    if shutil.which("wrk") is None:
        print("bench: 'wrk' not found (apt-get install wrk)", file=sys.stderr)
        return 2
    bench._enter_netns(args, str(Path(__file__).resolve()), sys.argv[1:] if argv is None else argv)
    procs.install_cleanup()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        out = measure(args)
    except KeyboardInterrupt:
        return 130
    finally:
        procs.stop_all()
    text = report(out)
    print(text)
    if not args.no_save:
        bench.RESULTS.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y-%m-%d-%H%M") + ("-quick" if args.quick else "")
        (bench.RESULTS / f"{stamp}-clouds.md").write_text(text)
        (bench.RESULTS / f"{stamp}-clouds.json").write_text(
            json.dumps(out, indent=2, default=str) + "\n"
        )
        bench.say(f"written: bench/results/{stamp}-clouds.md and .json")
    return 0 if all(ok for _, ok in guards(out)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
