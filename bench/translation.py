"""What format translation costs (docs/translation.md): a translated request and a
translated stream chunk next to a same-format one, in one run, against one gateway process.

    python bench/translation.py [--quick] [--duration S] [--rounds N] [--no-responses]
                                [--no-micro] [--wait-quiet S] [--no-netns] [--no-save]
    python bench/run.py --phase translation [...]          (the same)

Same isolation, pinning, upstream and policy set as ``bench/run.py`` (whose helpers it
uses): a private network namespace; the gateway (``serve``, access log on at info) on
CPU 1; the bench upstream, wrk, the stream client and this runner on CPU 0. The bench
upstream speaks OpenAI chat completions only, so for the bench model:

- ``chat``: a chat completions request on ``/v1/chat/completions``, relayed as it is (the
  same format: no translation);
- ``messages``: the same conversation as an Anthropic Messages request on
  ``/v1/messages``, translated to chat completions and the answer (JSON, or the SSE
  stream event by event) back to Messages;
- ``responses``: the same as a Responses request on ``/v1/responses``, translated to chat
  completions and back. The bench model sets no ``upstream_api``, so an OpenAI-format
  provider would get Responses natively; this phase serves the gateway a temporary copy
  of ``bench/policies`` in which ``bench-model`` and ``bench-fallback`` say
  ``upstream_api: chat``. That changes nothing for the other two clients (chat is still
  relayed, Messages still goes upstream as chat), and ``bench/policies/bench.yaml`` is
  left as it is for the other phases.

All three carry the same output cap (``max_tokens`` 256 / ``max_output_tokens`` 256;
Messages requires one), so the chat request is exactly what the Messages request is
translated to. Per round: wrk c=64 and c=1 of each, then the stream client (c=16, the
upstream's 20 chunks 1 ms apart) of each; the order rotates from round to round, and
each figure is the median over the rounds (the machine is noisy; rounds interleave so
that drift hits every client alike). The translated minus the same-format figure is the
cost of translation: per request at c=64 (goal <= 30 µs), and per chunk = (CPU per
translated stream - CPU per chat stream) / 20 (goal <= 5 µs). Before the load, an
in-process micro-measure (timeit, in this runner) of the translation functions
(``gateway.translate.convert``: ``request``, ``answer``, ``Splitter.feed``) on the same
bodies and the upstream's own answer and events cross-checks the end-to-end numbers; and
the other direction, a chat client on a model of another format (the same answer and
events as Anthropic and as Gemini send them), puts Gemini beside Messages.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

from gateway.formats import CHAT, Format, by_name

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402
import procs  # noqa: E402
import run as bench  # noqa: E402

GOAL_REQUEST_US = 30.0  # translation adds at most 30 µs of gateway CPU per request
GOAL_CHUNK_US = 5.0  # and at most 5 µs per stream chunk

# client (its format's name) -> (endpoint, JSON body, its loadgen stream format); chat is the
# same format
CLIENTS: dict[str, tuple[str, dict[str, Any], str]] = {
    "chat": ("/v1/chat/completions", loadgen.CHAT_BODY, "openai"),
    "messages": ("/v1/messages", loadgen.MESSAGES_BODY, "anthropic"),
    "responses": ("/v1/responses", loadgen.RESPONSES_BODY, "responses"),
}
LABEL = {
    "chat": "chat completions (same format, relayed)",
    "messages": "Anthropic Messages (translated)",
    "responses": "Responses (translated)",
}
# what a JSON answer in each client format starts like (the upstream only speaks chat: a
# Messages or Responses answer can only come from the translation)
SHAPE = {"chat": b'"object":"chat.completion"', "messages": b'"type":"message"',
         "responses": b'"object":"response"'}  # fmt: skip


def policy_dir(upstream_port: int) -> Path:
    """A temporary copy of bench/policies (the upstream's port, as bench/run.py does) whose
    bench models speak chat completions only (``upstream_api: chat``)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-translation-policies-"))
    text = (bench.POLICY_DIR / "bench.yaml").read_text()
    text = text.replace(f"127.0.0.1:{bench.UPSTREAM_PORT}", f"127.0.0.1:{upstream_port}")
    text, n = re.subn(
        r"^(  bench-(?:model|fallback): +\{provider: bench, )", r"\1upstream_api: chat, ", text,
        flags=re.M,
    )  # fmt: skip
    if n != 2:
        raise SystemExit("bench/policies/bench.yaml changed: cannot set upstream_api on its models")
    (tmp / "bench.yaml").write_text(text)
    return tmp


# ---- in-process micro-measure ------------------------------------------------------------


def _best_us(fn: Any, number: int, repeat: int = 5) -> float:
    """Microseconds per call: the best of ``repeat`` timeit runs of ``number`` calls."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def micro(quick: bool) -> dict[str, Any]:
    """The translation functions alone, in this process (pinned with the load, idle then):
    per request ``request`` + ``answer`` (+ the ``orjson.dumps`` of the answer the
    translated path adds), and per stream the 20 upstream chunks + [DONE] through
    ``convert.TranslatingSplitter.feed`` vs ``sse.Splitter.feed`` (what a same-format stream pays)."""
    import orjson
    import upstream as up

    from gateway.formats import sse
    from gateway.translate import convert

    n = 2000 if quick else 20000
    completion = orjson.loads(up._COMPLETION)
    events = up.SSE_EVENTS
    out: dict[str, Any] = {"number": n, "events_per_stream": len(events)}
    for client in ("messages", "responses"):
        body = CLIENTS[client][1]
        fmt = by_name(client)  # (the client names are its format's)
        stream_body = {**body, "stream": True}

        def req(body: dict[str, Any] = body, fmt: Format = fmt) -> Any:
            return convert.request(body, fmt, CHAT, max_output_tokens=None)

        def ans(fmt: Format = fmt) -> bytes:
            return orjson.dumps(convert.answer(completion, CHAT, fmt, loadgen.MODEL))

        def stream(fmt: Format = fmt) -> None:
            s = convert.TranslatingSplitter(CHAT, fmt, loadgen.MODEL, True)
            for e in events:
                s.feed(e)
            s.close()

        open_stream = convert.TranslatingSplitter(CHAT, fmt, loadgen.MODEL, True)
        open_stream.feed(events[0])
        open_stream.feed(events[1])  # the text block is open: what follows are deltas

        before = json.dumps(body)
        req_us, ans_us = _best_us(req, n), _best_us(ans, n)
        sreq_us = _best_us(lambda b=stream_body, f=fmt: req(b, f), n)
        stream_us = _best_us(stream, max(1, n // 10))
        delta_us = _best_us(lambda s=open_stream: s.feed(events[5]), n)
        assert json.dumps(body) == before, "convert.request changed the client's body"
        out[client] = {
            "request_us": req_us,
            "answer_us": ans_us,  # convert.answer + orjson.dumps of it
            "per_request_us": req_us + ans_us,
            "stream_request_us": sreq_us,
            "stream_us": stream_us,  # Splitter(...) + 21 feeds + close
            "delta_feed_us": delta_us,  # one text chunk fed to an open stream
        }

    def relay() -> None:
        s = sse.Splitter()
        for e in events:
            s.feed(e)

    relay_split = sse.Splitter()
    out["relay_stream_us"] = _best_us(relay, max(1, n // 10))
    out["relay_delta_us"] = _best_us(lambda: relay_split.feed(events[5]), n)
    for client in ("messages", "responses"):
        m = out[client]
        m["per_chunk_us"] = (m["stream_us"] - out["relay_stream_us"]) / loadgen.CHUNKS
        m["per_delta_us"] = m["delta_feed_us"] - out["relay_delta_us"]
        m["per_stream_us"] = m["stream_request_us"] + m["stream_us"] - out["relay_stream_us"]
    return out


def _upstream_events(fmt_name: str, events: list[bytes]) -> tuple[dict[str, Any], list[bytes]]:
    """The bench upstream's answer and stream as a provider of ``fmt_name`` would send them:
    the completion through the translators' writer, the chat events through the Messages
    stream writer (Anthropic's events) or made into Gemini chunks (one per text delta, each
    with the usage so far, the last with ``finishReason``; ``\r\n\r\n``-framed as Google
    frames them)."""
    import orjson
    import upstream as up

    from gateway.formats import MESSAGES
    from gateway.translate import answers
    from gateway.translate.convert import TranslatingSplitter
    from gateway.translate.gemini_answers import write_gemini

    completion = orjson.loads(up._COMPLETION)
    neutral = answers.read_chat(completion)
    if fmt_name == "messages":
        s = TranslatingSplitter(CHAT, MESSAGES, loadgen.MODEL, True)
        out = [e for ev in events for e in s.feed(ev)] + s.close()
        return answers.write_anthropic(neutral), out
    chunks: list[bytes] = []
    for ev in events:
        if not ev.startswith(b"data: {"):
            continue
        obj = orjson.loads(ev[6:].strip())
        choice = (obj.get("choices") or [{}])[0]
        text = (choice.get("delta") or {}).get("content")
        chunk: dict[str, Any] = {"candidates": [{"content": {"role": "model", "parts": []},
                                                  "index": 0}],
                                 "modelVersion": loadgen.MODEL, "responseId": "bench"}  # fmt: skip
        if text:
            chunk["candidates"][0]["content"]["parts"].append({"text": text})
        elif not choice.get("finish_reason"):
            continue
        else:
            chunk["candidates"][0]["finishReason"] = "STOP"
        n = len(chunks) + 1  # each chunk counts the answer so far, as Gemini's do
        chunk["usageMetadata"] = {"promptTokenCount": 30, "candidatesTokenCount": n,
                                  "totalTokenCount": 30 + n}  # fmt: skip
        chunks.append(b"data: " + orjson.dumps(chunk) + b"\r\n\r\n")
    return write_gemini(neutral), chunks


def micro_upstreams(quick: bool) -> dict[str, Any]:
    """A chat client on a model of another format, the translation functions alone: the
    request to it, its answer and its stream back to chat; Anthropic's Messages and
    Gemini's side by side (the same conversation, answer and text deltas)."""
    import orjson

    from gateway.translate import convert

    n = 2000 if quick else 20000
    import upstream as up

    events = up.SSE_EVENTS
    body = loadgen.CHAT_BODY
    out: dict[str, Any] = {"number": n}
    for name in ("messages", "gemini"):
        fmt = by_name(name)
        answer, stream_events = _upstream_events(name, events)

        def req(fmt: Format = fmt) -> Any:
            return convert.request(body, CHAT, fmt, max_output_tokens=None)

        def ans(fmt: Format = fmt, answer: dict[str, Any] = answer) -> bytes:
            return orjson.dumps(convert.answer(answer, fmt, CHAT, loadgen.MODEL))

        def stream(fmt: Format = fmt, evs: list[bytes] = stream_events) -> None:
            s = convert.TranslatingSplitter(fmt, CHAT, loadgen.MODEL, True)
            for e in evs:
                s.feed(e)
            s.close()

        req_us, ans_us = _best_us(req, n), _best_us(ans, n)
        stream_us = _best_us(stream, max(1, n // 10))
        out[name] = {
            "request_us": req_us,
            "answer_us": ans_us,
            "per_request_us": req_us + ans_us,
            "events": len(stream_events),
            "stream_us": stream_us,
            "per_chunk_us": stream_us / loadgen.CHUNKS,
        }
    return out


# ---- measured phases ---------------------------------------------------------------------


def run_wrk(
    label: str, port: int, c: int, seconds: float, load_cpu: int | None, pids: list[int],
    client: str,
) -> dict[str, Any]:  # fmt: skip
    """bench/run.py's run_wrk for one client's endpoint and body."""
    path, body, _ = CLIENTS[client]
    if bench.QUIET["max_wait_s"]:
        bench.wait_quiet(pids)
    ph = bench.Phase(*pids)
    with ph:
        r = loadgen.wrk(port, c, seconds, cpu=load_cpu, path=path, body=body)
    w = ph.windows[0]
    r.cpu_s, r.cpu_util, r.foreign_cpu = w.cpu, w.utilisation, ph.foreign_cpu_per_s
    r.cpu_us_per_req = 1e6 * w.cpu / r.requests if r.requests else float("nan")
    if len(ph.windows) > 1 and r.requests:
        r.upstream_cpu_us_per_req = 1e6 * ph.windows[1].cpu / r.requests
    bench.say(
        f"{label:<24} c={c:<3} {r.rps:8.0f} req/s  p50 {r.p50_ms:6.3f} ms  p99 {r.p99_ms:6.3f} ms"
        f"  CPU {r.cpu_us_per_req:6.1f} µs/req ({100 * r.cpu_util:.0f}% of a core)"
        f"  errors {r.errors or 0}  cpus {ph.busy}  other load {ph.foreign_cpu_per_s:.2f}"
    )
    return {**vars(r), "busy": ph.busy}


def run_streams(
    label: str, port: int, c: int, seconds: float, pids: list[int], client: str
) -> dict[str, Any]:
    """bench/run.py's run_streams for one client format."""
    if bench.QUIET["max_wait_s"]:
        bench.wait_quiet(pids)
    ph = bench.Phase(*pids)
    with ph:
        r = asyncio.run(loadgen.streams(port, c, seconds, fmt=CLIENTS[client][2]))
    w = ph.windows[0]
    n = r.streams + r.errors + c  # + the warm-up streams
    r.cpu_s, r.cpu_util, r.foreign_cpu = w.cpu, w.utilisation, ph.foreign_cpu_per_s
    r.cpu_us_per_stream = 1e6 * w.cpu / n if n else float("nan")
    if len(ph.windows) > 1 and n:
        r.upstream_cpu_us_per_stream = 1e6 * ph.windows[1].cpu / n
    events = r.chunks_seen / r.complete if r.complete else 0.0
    bench.say(
        f"{label:<24} c={c:<3} {r.streams_per_s:6.0f} streams/s  first token p50"
        f" {r.ttft_p50_ms:6.3f} ms  CPU {r.cpu_us_per_stream:7.1f} µs/stream"
        f"  complete {r.complete}/{r.streams} errors {r.errors}  {events:.0f} events/stream"
        f"  cpus {ph.busy}  other load {ph.foreign_cpu_per_s:.2f}"
    )
    for e in r.examples:
        bench.say(f"   e.g. {e}")
    return {**r.dict(), "events_per_stream": events, "busy": ph.busy}


def _post(port: int, client: str, stream: bool) -> tuple[int, dict[str, str], bytes]:
    import urllib.request

    path, body, _ = CLIENTS[client]
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps({**body, "stream": True} if stream else body).encode(),
        headers={"Authorization": f"Bearer {loadgen.KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, dict(r.headers.items()), r.read()


def check_answers(port: int, clients: list[str]) -> dict[str, Any]:
    """One JSON request and one stream per client before the load: 200, the client's
    format, a complete stream (the same checks as the stream client's)."""
    seen: dict[str, Any] = {}
    for client in clients:
        fmt = loadgen.STREAM_FORMATS[CLIENTS[client][2]]
        status, headers, body = _post(port, client, False)
        if status != 200 or SHAPE[client] not in body:
            raise RuntimeError(f"{client}: sanity request failed: {status} {body[:300]!r}")
        s_status, _, data = _post(port, client, True)
        if s_status != 200 or not fmt.complete(data):
            raise RuntimeError(f"{client}: sanity stream incomplete: {s_status} {data[-300:]!r}")
        seen[client] = {
            "answer": body.decode(errors="replace")[:400],
            "headers": {k: v for k, v in headers.items() if k.lower().startswith("x-gateway")},
            "stream_events": data.count(b"data: "),
            "stream_tail": data[-120:].decode(errors="replace"),
        }
        bench.say(
            f"sanity {client}: 200, {len(body)} bytes, stream of {seen[client]['stream_events']}"
            f" events complete; {seen[client]['headers']}"
        )
    return seen


def measure(args: argparse.Namespace) -> dict[str, Any]:
    isolation = bench._loopback_up()
    if procs.cpu_count() >= 2:
        gw_cpu, load_cpu = 1, 0
        pinning = "gateway on CPU 1; upstream, load generators and runner on CPU 0"
        os.sched_setaffinity(0, {load_cpu})
    else:
        gw_cpu = load_cpu = None
        pinning = "NOT pinned: only one CPU available"
    bench.say(f"isolation: {isolation}; pinning: {pinning}")
    D, warm = args.duration, (1.0 if args.quick else 2.0)
    clients = ["chat", "messages"] + ([] if args.no_responses else ["responses"])
    out: dict[str, Any] = {
        "started": dt.datetime.now().isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "duration_s": D,
        "rounds": args.rounds,
        "clients": clients,
        "isolation": isolation,
        "pinning": pinning,
        "commit": bench._git_commit(),
        "gateway_tree_modified": _modified(),
        "machine": bench._machine(),
    }
    if not args.no_micro:
        bench.say("micro-measure: gateway.translate.convert in this process (timeit)")
        out["micro"] = micro(args.quick)
        for client in clients[1:]:
            m = out["micro"][client]
            bench.say(
                f"   {client}: request {m['request_us']:.1f} + answer {m['answer_us']:.1f}"
                f" = {m['per_request_us']:.1f} µs per request; {m['per_chunk_us']:.2f} µs per"
                f" chunk over the relay's splitter"
            )
        out["micro_upstreams"] = micro_upstreams(args.quick)
        for name in ("messages", "gemini"):
            m = out["micro_upstreams"][name]
            bench.say(
                f"   chat client on a {name} model: request {m['request_us']:.1f} + answer"
                f" {m['answer_us']:.1f} = {m['per_request_us']:.1f} µs; {m['per_chunk_us']:.2f}"
                " µs per chunk"
            )
    tmp = Path(tempfile.mkdtemp(prefix="bench-translation-"))
    up_port, gw_port = bench._port(bench.UPSTREAM_PORT), bench._port(bench.GATEWAY_PORT)
    pdir = policy_dir(up_port)
    try:
        up = procs.spawn(
            [sys.executable, str(HERE / "upstream.py"), "--port", str(up_port),
             "--chunk-gap-ms", "1"],
            cpu=load_cpu,
        )  # fmt: skip
        procs.wait_http(up, up_port, "/v1/models", 15, "the bench upstream")
        gw = bench.start_gateway(pdir, gw_port, "info", gw_cpu, tmp / "gateway.log")
        out["sanity"] = check_answers(gw_port, clients)
        pids = [gw.pid, up.pid]
        for client in clients:  # warm every path (imports, caches, pools)
            loadgen.wrk(gw_port, 64, warm, cpu=load_cpu, path=CLIENTS[client][0],
                        body=CLIENTS[client][1])  # fmt: skip
        rounds: list[dict[str, Any]] = []
        for i in range(args.rounds):
            order = clients[i % len(clients) :] + clients[: i % len(clients)]
            bench.say(f"round {i + 1}/{args.rounds}: {', '.join(order)}")
            row: dict[str, Any] = {c: {} for c in clients}
            for key, c in (("c64", 64), ("c1", 1)):
                for client in order:
                    row[client][key] = run_wrk(client, gw_port, c, D, load_cpu, pids, client)
            for client in order:
                row[client]["streams"] = run_streams(
                    f"{client} streams", gw_port, 16, D, pids, client
                )
            rounds.append(row)
        out["rounds_raw"] = rounds
        out["rss_mb"] = procs.memory_mb(gw.pid)
        out["access_log_lines"] = bench._count_lines(tmp / "gateway.log", b'"request_completed"')
        procs.stop(gw)
        procs.stop(up)
    finally:
        procs.stop_all()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(pdir, ignore_errors=True)
    out["derived"] = derive(out)
    return out


def _modified() -> list[str]:
    """Files under gateway/ that differ from the commit (what ran is the working tree)."""
    try:
        p = subprocess.run(
            ["git", "-C", str(bench.ROOT), "status", "--porcelain", "--", "gateway"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return [line[3:] for line in p.stdout.splitlines()]


# ---- derived figures and the report --------------------------------------------------------


def _med(rounds: list[dict[str, Any]], client: str, key: str, field: str) -> float:
    return statistics.median(r[client][key][field] for r in rounds)


def derive(out: dict[str, Any]) -> dict[str, Any]:
    rounds, clients = out["rounds_raw"], out["clients"]
    m: dict[str, Any] = {}
    fields = {
        "c64": ("cpu_us_per_req", "rps", "p50_ms", "p99_ms"),
        "c1": ("cpu_us_per_req", "rps", "p50_ms", "p99_ms"),
        "streams": ("cpu_us_per_stream", "streams_per_s", "ttft_p50_ms", "ttfb_p50_ms",
                    "total_p50_ms", "events_per_stream", "foreign_cpu"),
    }  # fmt: skip
    for client in clients:
        m[client] = {
            key: {f: _med(rounds, client, key, f) for f in fs} for key, fs in fields.items()
        }
        for key in ("c64", "c1"):
            m[client][key]["foreign_cpu"] = _med(rounds, client, key, "foreign_cpu")
        m[client]["errors"] = sum(
            sum(r[client][k]["errors"].values()) for r in rounds for k in ("c64", "c1")
        )
        m[client]["streams_incomplete"] = sum(
            r[client]["streams"]["incomplete"] + r[client]["streams"]["errors"] for r in rounds
        )
    same = m["chat"]
    for client in clients[1:]:
        t = m[client]
        per_req = t["c64"]["cpu_us_per_req"] - same["c64"]["cpu_us_per_req"]
        per_stream = t["streams"]["cpu_us_per_stream"] - same["streams"]["cpu_us_per_stream"]
        t["added"] = {
            "cpu_us_per_req_c64": per_req,
            "cpu_us_per_req_c1": t["c1"]["cpu_us_per_req"] - same["c1"]["cpu_us_per_req"],
            "p50_ms_c1": t["c1"]["p50_ms"] - same["c1"]["p50_ms"],
            "cpu_us_per_stream": per_stream,
            "per_chunk_us": per_stream / loadgen.CHUNKS,
            # the stream's own request translation taken out (its c=64 per-request figure)
            "per_chunk_net_us": (per_stream - per_req) / loadgen.CHUNKS,
            "ttft_p50_ms": t["streams"]["ttft_p50_ms"] - same["streams"]["ttft_p50_ms"],
            # per round, translated minus same (the spread of the medians above)
            "rounds_cpu_us_per_req_c64": [
                r[client]["c64"]["cpu_us_per_req"] - r["chat"]["c64"]["cpu_us_per_req"]
                for r in rounds
            ],
            "rounds_per_chunk_us": [
                (
                    r[client]["streams"]["cpu_us_per_stream"]
                    - r["chat"]["streams"]["cpu_us_per_stream"]
                )
                / loadgen.CHUNKS
                for r in rounds
            ],
        }
        t["added"]["paired_median_cpu_us_per_req_c64"] = statistics.median(
            t["added"]["rounds_cpu_us_per_req_c64"]
        )
        t["added"]["paired_median_per_chunk_us"] = statistics.median(
            t["added"]["rounds_per_chunk_us"]
        )
    m["other_load_max"] = max(
        r[c][k].get("foreign_cpu", 0.0) for r in rounds for c in clients for k in r[c]
    )
    return m


def _f(v: Any, nd: int = 1) -> str:
    return "n/a" if v is None else f"{v:,.{nd}f}"


def _ok(v: float, goal: float) -> str:
    return "PASS" if v <= goal else "MISS"


def report(out: dict[str, Any]) -> str:
    m, clients = out["derived"], out["clients"]
    mach = out["machine"]
    L = [
        f"# Format translation's cost ({out['started']}, {out['mode']}, {out['rounds']} rounds"
        f" of {out['duration_s']:g} s per phase, commit {out['commit']})",
        "",
        f"- machine: {mach['cpu']}, {mach['cpus']} CPUs, Linux {mach['kernel']},"
        f" Python {mach['python']}, {mach['wrk']}",
        f"- isolation: {out['isolation']}; pinning: {out['pinning']}",
        "- one gateway process (`serve`, access log at info) on a temporary copy of"
        " bench/policies whose bench models say `upstream_api: chat`; the bench upstream"
        " speaks chat completions only",
    ]
    if out["gateway_tree_modified"]:
        L.append(
            "- gateway/ had uncommitted changes when this ran (the working tree was measured):"
            f" {', '.join(out['gateway_tree_modified'])}"
        )
    L += [
        "",
        "Medians over the rounds; the rounds alternate the clients' order.",
        "",
        "## Requests (wrk, 1 thread)",
        "",
        "| client | endpoint | req/s c=64 | CPU µs/req c=64 | + vs chat | CPU µs/req c=1"
        " | + vs chat | p50 ms c=1 | + vs chat | errors | other load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for client in clients:
        r, a = m[client], m[client].get("added")

        def plus(k: str, nd: int = 1, a: dict[str, Any] | None = a) -> str:
            return f"{a[k]:+.{nd}f}" if a else ""

        L.append(
            f"| {LABEL[client]} | `{CLIENTS[client][0]}` | {_f(r['c64']['rps'], 0)}"
            f" | {_f(r['c64']['cpu_us_per_req'])} | {plus('cpu_us_per_req_c64')}"
            f" | {_f(r['c1']['cpu_us_per_req'])} | {plus('cpu_us_per_req_c1')}"
            f" | {_f(r['c1']['p50_ms'], 3)} | {plus('p50_ms_c1', 3)} | {r['errors']}"
            f" | {max(r['c64']['foreign_cpu'], r['c1']['foreign_cpu']):.2f} |"
        )
    L += [
        "",
        f"## Streams (stream client c=16; the upstream's {loadgen.CHUNKS} chunks, 1 ms apart)",
        "",
        "| client | streams/s | CPU µs/stream | + vs chat | per-chunk µs | events/stream"
        " | first token p50 ms | + vs chat | incomplete | other load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for client in clients:
        s, a = m[client]["streams"], m[client].get("added")
        d_stream, d_chunk, d_ttft = (
            (f"{a['cpu_us_per_stream']:+.1f}", f"{a['per_chunk_us']:+.2f}",
             f"{a['ttft_p50_ms']:+.3f}") if a else ("", "", "")
        )  # fmt: skip
        L.append(
            f"| {LABEL[client]} | {_f(s['streams_per_s'], 0)} | {_f(s['cpu_us_per_stream'])}"
            f" | {d_stream} | {d_chunk} | {s['events_per_stream']:.0f}"
            f" | {_f(s['ttft_p50_ms'], 3)} | {d_ttft}"
            f" | {m[client]['streams_incomplete']} | {s['foreign_cpu']:.2f} |"
        )
    L += [
        "",
        f"Per-chunk µs = (CPU per translated stream - CPU per chat stream) / {loadgen.CHUNKS}:"
        " it includes the stream's own request translation and the translated stream's extra"
        " events (a Messages stream has more events than the 20 chat chunks + [DONE]).",
    ]
    for client in clients[1:]:
        a = m[client]["added"]
        L.append(
            f"- {client}: per round, added CPU per request at c=64"
            f" {', '.join(f'{x:+.1f}' for x in a['rounds_cpu_us_per_req_c64'])} µs (median"
            f" {a['paired_median_cpu_us_per_req_c64']:+.1f}); per chunk"
            f" {', '.join(f'{x:+.2f}' for x in a['rounds_per_chunk_us'])} µs (median"
            f" {a['paired_median_per_chunk_us']:+.2f}); per chunk without the request's"
            f" translation (the c=64 difference taken out) {a['per_chunk_net_us']:+.2f} µs."
        )
    mic = out.get("micro")
    if mic:
        L += [
            "",
            "## In-process micro-measure (timeit, best of 5, in the runner on CPU 0)",
            "",
            "| client | `request` µs | `answer` + dumps µs | per request µs | stream request µs"
            " | `Splitter` stream µs | relay splitter µs | per-chunk µs | per text delta µs"
            " | per stream µs |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for client in clients[1:]:
            x = mic[client]
            L.append(
                f"| {client} | {x['request_us']:.1f} | {x['answer_us']:.1f}"
                f" | {x['per_request_us']:.1f} | {x['stream_request_us']:.1f}"
                f" | {x['stream_us']:.1f} | {mic['relay_stream_us']:.1f}"
                f" | {x['per_chunk_us']:.2f} | {x['per_delta_us']:.2f}"
                f" | {x['per_stream_us']:.1f} |"
            )
        L += [
            "",
            "`request` = `convert.request` of the client's body to chat; `answer` ="
            " `convert.answer` of the upstream's completion + `orjson.dumps`; stream ="
            f" `convert.TranslatingSplitter` over the upstream's {mic['events_per_stream']} events"
            " (+ `close`); relay splitter = `sse.Splitter` over the same (what a same-format"
            f" stream pays); per chunk = (stream - relay) / {loadgen.CHUNKS}; per text delta ="
            " one content chunk fed to a stream whose text block is open, minus the same"
            " through `sse.Splitter` (the steady state, no start or end events); per stream ="
            " stream request + stream - relay. These are the"
            " functions alone: the gateway's end-to-end difference adds what the translated"
            " answer costs around them (bigger events to frame and write, the classification"
            " and transcript of the client's events).",
        ]
    ups = out.get("micro_upstreams")
    if ups:
        L += [
            "",
            "## A chat client on a model of another format (in-process, timeit)",
            "",
            "| model's format | `request` µs | `answer` + dumps µs | per request µs | events"
            " | stream µs | per chunk µs |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name in ("messages", "gemini"):
            x = ups[name]
            L.append(
                f"| {name} | {x['request_us']:.1f} | {x['answer_us']:.1f}"
                f" | {x['per_request_us']:.1f} | {x['events']} | {x['stream_us']:.1f}"
                f" | {x['per_chunk_us']:.2f} |"
            )
        g, a = ups["gemini"], ups["messages"]
        L += [
            "",
            "The same conversation, answer and text deltas, as Anthropic and as Gemini send"
            " them (Gemini: a whole answer object per chunk, each with the usage so far,"
            " CRLF-framed). Gemini / Messages: per request"
            f" {g['per_request_us'] / a['per_request_us']:.2f}x, per stream"
            f" {g['stream_us'] / a['stream_us']:.2f}x.",
        ]
    L += ["", "## Goals", ""]
    for client in clients[1:]:
        a = m[client]["added"]
        L.append(
            f"- {client}: translation adds {a['cpu_us_per_req_c64']:+.1f} µs CPU per request"
            f" at c=64 (goal <= {GOAL_REQUEST_US:g} µs:"
            f" {_ok(a['cpu_us_per_req_c64'], GOAL_REQUEST_US)})"
            f" and {a['per_chunk_us']:+.2f} µs per chunk (goal <= {GOAL_CHUNK_US:g} µs:"
            f" {_ok(a['per_chunk_us'], GOAL_CHUNK_US)})"
        )
    bad = sum(m[c]["errors"] + m[c]["streams_incomplete"] for c in clients)
    L.append(
        f"- errors and incomplete streams, every client: {bad}"
        f" (goal 0: {'PASS' if bad == 0 else 'MISS'})"
    )
    noisy = m["other_load_max"]
    L.append(
        f"- other load (processes outside the benchmark): up to {noisy:.2f} CPUs"
        + (
            " -- a shared machine: read the differences, not the absolute numbers"
            if noisy > 0.1
            else ""
        )
    )
    return "\n".join(L) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="3 s per phase")
    p.add_argument("--duration", type=float, default=None, help="seconds per phase (10)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--no-responses", action="store_true", help="chat and Messages only")
    p.add_argument("--no-micro", action="store_true", help="skip the in-process micro-measure")
    p.add_argument("--wait-quiet", type=float, default=None, help="see bench/run.py (20, quick 0)")
    p.add_argument("--no-netns", action="store_true", help="no private network namespace")
    p.add_argument("--no-save", action="store_true", help="print only")
    args = p.parse_args(argv)
    args.duration = args.duration or (3.0 if args.quick else 10.0)
    bench.QUIET["max_wait_s"] = (
        (0.0 if args.quick else 20.0) if args.wait_quiet is None else args.wait_quiet
    )
    if shutil.which("wrk") is None:
        print("bench: 'wrk' not found (apt-get install wrk)", file=sys.stderr)
        return 2
    if not args.no_netns and not os.environ.get("BENCH_NETNS"):  # as bench/run.py does
        prefix = bench._netns_prefix()
        os.environ["BENCH_NETNS"] = "1" if prefix else "unavailable"
        if prefix:
            rest = argv if argv is not None else sys.argv[1:]
            os.execvp(prefix[0], [*prefix, "--", sys.executable, str(Path(__file__)), *rest])
        bench.say("NOTE: unshare --net is not permitted here; running on the host's loopback")
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
        (bench.RESULTS / f"{stamp}-translation.md").write_text(text)
        (bench.RESULTS / f"{stamp}-translation.json").write_text(
            json.dumps(out, indent=2, default=str) + "\n"
        )
        bench.say(f"written: bench/results/{stamp}-translation.md and .json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
