"""Chaos: a fault-injecting TCP proxy between the gateway and the fake provider.

Seeded, randomized scenarios of mixed traffic (every endpoint, JSON and SSE,
scripted 429/5xx on top of transport faults). Whatever the network does, every
client request must end in a complete answer or a proper error in its endpoint's
format, within its deadline; a stream either reaches its final event or ends with
an error event (never cut silently); nothing escapes to aiohttp's default error
handler; and no task or file descriptor outlives the run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest

from gateway.testing import Error, FakeProvider
from tests.chaos.faultproxy import FaultProxy
from tests.harness import CLIENT_KEY, Harness, policy_files, write_policies
from tests.waiting import eventually

REPLY_PREFIX = "Hello! This is the fake provider answering model "
TOTAL_S = 4.0  # the policy's timeouts.total: no request may take (much) longer
CHAOS_POLICY: dict[str, Any] = {
    "retry": {"max_retries": 3, "budget": {"ratio": 1.0, "min_per_second": 50}},
    "fallback": {"chain": ["gpt-backup"], "after_consecutive_server_errors": 3, "cooldown": "1s"},
    "timeouts": {"connect": "1s", "first_byte": "1s", "stream_idle": "300ms", "total": "4s"},
}
# claude-test falls back within its own provider format
ANTHROPIC_ROUTE = {"fallback": {"chain": ["claude-backup"]}}

# (endpoint path, model, stream)
KINDS: list[tuple[str, str, bool]] = [
    ("/v1/chat/completions", "gpt-test", False),
    ("/v1/chat/completions", "gpt-test", True),
    ("/v1/messages", "claude-test", False),
    ("/v1/messages", "claude-test", True),
    ("/v1/responses", "gpt-test", True),
    ("/v1/responses", "gpt-test", False),
    ("/v1/completions", "gpt-third", False),
    ("/v1/embeddings", "gpt-third", False),
]


# ---- observation helpers (shared with bench/soak.py) ------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def settled(fds0: int, tasks0: int) -> tuple[int, int]:
    """(open fds, tasks) once the rig's cleanup callbacks have run: back to the baseline,
    or what is left after 5 s (the caller's asserts then say what leaked)."""

    def counts() -> tuple[int, int]:
        return open_fds(), len(asyncio.all_tasks())

    await eventually(
        lambda: counts()[0] <= fds0 + 2 and counts()[1] <= tasks0, within=5, fail=False
    )
    return counts()


class ErrorRecords(logging.Handler):
    """Collects ERROR records of aiohttp's server (a handler that raised) and asyncio
    ("Task exception was never retrieved")."""

    NAMES = ("aiohttp.server", "gateway.web.listener", "asyncio")

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> ErrorRecords:
        for name in self.NAMES:
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.NAMES:
            logging.getLogger(name).removeHandler(self)

    def messages(self) -> list[str]:
        return [
            r.getMessage() + (f" {r.exc_info[1]!r}" if r.exc_info else "") for r in self.records
        ]


def body_for(path: str, model: str, stream: bool, marker: str = "hi") -> dict[str, Any]:
    if path == "/v1/chat/completions":
        return {"model": model, "messages": [{"role": "user", "content": marker}], "stream": stream}
    if path == "/v1/messages":
        return {
            "model": model,
            "max_tokens": 200,
            "messages": [{"role": "user", "content": marker}],
            "stream": stream,
        }
    if path == "/v1/responses":
        return {"model": model, "input": marker, "stream": stream}
    if path == "/v1/completions":
        return {"model": model, "prompt": marker}
    return {"model": model, "input": marker}


def sse_events(raw: bytes) -> list[tuple[str | None, Any]]:
    """(event name, decoded data) per SSE event; data None for comments / [DONE]."""
    out: list[tuple[str | None, Any]] = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        if not block.strip():
            continue
        name = None
        data: list[bytes] = []
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].strip())
        if not data or data == [b"[DONE]"]:
            out.append((name, None))
            continue
        try:
            out.append((name, orjson.loads(b"\n".join(data))))
        except orjson.JSONDecodeError:
            out.append((name, "malformed"))
    return out


def is_error_shape(obj: Any, path: str) -> bool:
    """The endpoint's error format: Anthropic on /v1/messages, OpenAI elsewhere."""
    if not isinstance(obj, dict) or not isinstance(obj.get("error"), dict):
        return False
    err = obj["error"]
    if path == "/v1/messages":
        return obj.get("type") == "error" and isinstance(err.get("type"), str) and "message" in err
    return isinstance(err.get("message"), str) and "type" in err


class Lost(AssertionError):
    """A request that did not end in an answer or a proper error."""


def verdict(path: str, stream: bool, status: int, headers: Any, raw: bytes) -> str:
    """'ok' | 'recovered' | 'failed_properly'; raises Lost otherwise."""
    recovered = int(headers.get("x-gateway-attempts", "1") or 1) > 1 or bool(
        headers.get("x-gateway-recovery")
    )
    if status != 200:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise Lost(f"{path}: HTTP {status} with a non-JSON body {raw[:200]!r}") from None
        if not (400 <= status <= 599) or not is_error_shape(obj, path):
            raise Lost(f"{path}: HTTP {status} not in the endpoint's error format: {raw[:300]!r}")
        if status == 500 and b"Internal Server Error" in raw:
            raise Lost(f"{path}: aiohttp's default 500")
        return "failed_properly"
    if not stream:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise Lost(f"{path}: 200 with a non-JSON body {raw[:200]!r}") from None
        text = _json_text(path, obj)
        if text is not None and not (text.startswith(REPLY_PREFIX) and text.endswith(".")):
            raise Lost(f"{path}: 200 with an incomplete answer {text!r}")
        return "recovered" if recovered else "ok"
    if not raw.endswith(b"\n\n"):
        raise Lost(f"{path}: stream ended mid-event: {raw[-200:]!r}")
    events = [(n, d) for n, d in sse_events(raw) if d is not None]
    if not events:
        raise Lost(f"{path}: 200 stream with no event: {raw[:300]!r}")
    name, last = events[-1]
    if _is_error_event(path, name, last):
        return "failed_properly"
    if (  # Responses: the error event, then response.failed (what the Codex CLI reads)
        path == "/v1/responses"
        and isinstance(last, dict)
        and last.get("type") == "response.failed"
        and len(events) > 1
        and _is_error_event(path, *events[-2])
    ):
        return "failed_properly"
    if not _is_final(path, last):
        raise Lost(f"{path}: stream cut silently; last event {last!r}")
    text = _stream_text(path, [d for _, d in events])
    if not (text.startswith(REPLY_PREFIX) and text.endswith(".")):
        raise Lost(f"{path}: stream 'complete' but text lost or repeated: {text!r}")
    return "recovered" if recovered else "ok"


def _json_text(path: str, obj: Any) -> str | None:
    if path == "/v1/chat/completions":
        return str(obj["choices"][0]["message"]["content"])
    if path == "/v1/completions":
        return str(obj["choices"][0]["text"])
    if path == "/v1/messages":
        return "".join(b.get("text", "") for b in obj["content"])
    if path == "/v1/responses":
        return "".join(
            c.get("text", "") for item in obj["output"] for c in item.get("content") or []
        )
    assert obj["data"][0]["embedding"], obj
    return None


def _is_error_event(path: str, name: str | None, data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    if path == "/v1/chat/completions":
        return is_error_shape(data, "/v1/chat/completions") and "choices" not in data
    return name == "error" and data.get("type") == "error" and isinstance(data.get("error"), dict)


def _is_final(path: str, data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    if path == "/v1/messages":
        return data.get("type") == "message_stop"
    if path == "/v1/responses":
        return data.get("type") in ("response.completed", "response.incomplete")
    return any(c.get("finish_reason") for c in data.get("choices") or [])


def _stream_text(path: str, events: list[Any]) -> str:
    parts: list[str] = []
    for d in events:
        if not isinstance(d, dict):
            continue
        if path == "/v1/chat/completions":
            parts += [(c.get("delta") or {}).get("content") or "" for c in d.get("choices") or []]
        elif path == "/v1/messages" and d.get("type") == "content_block_delta":
            parts.append(d["delta"].get("text", ""))
        elif path == "/v1/responses" and d.get("type") == "response.output_text.delta":
            parts.append(d["delta"])
    return "".join(parts)


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return sum(self.outcomes.values())


async def one_request(
    session: aiohttp.ClientSession,
    url: str,
    path: str,
    model: str,
    stream: bool,
    tally: Tally,
    marker: str = "hi",
    headers: dict[str, str] | None = None,
) -> None:
    """Send one request with a hard client deadline and record its verdict."""
    t = time.monotonic()
    hdrs = {"authorization": f"Bearer {CLIENT_KEY}", **(headers or {})}
    try:
        async with asyncio.timeout(TOTAL_S + 2.0):
            async with session.post(
                url + path, json=body_for(path, model, stream, marker), headers=hdrs
            ) as r:
                raw = await r.read()
                v = verdict(path, stream, r.status, r.headers, raw)
    except Lost as e:
        tally.outcomes["lost"] += 1
        tally.lost.append(str(e))
        return
    except TimeoutError:
        tally.outcomes["lost"] += 1
        tally.lost.append(f"{path} stream={stream}: no end within {TOTAL_S + 2} s (hang)")
        return
    except aiohttp.ClientError as e:
        tally.outcomes["lost"] += 1
        tally.lost.append(f"{path} stream={stream}: client connection broken: {e!r}")
        return
    tally.latencies.append(time.monotonic() - t)
    tally.outcomes[v] += 1


def scripted_errors(fake: FakeProvider, rng: random.Random, n: int) -> None:
    """Queue provider-side HTTP errors (429 with a short wait, 500, 529/503) on top."""
    for _ in range(n):
        pick = rng.randrange(4)
        if pick == 0:
            fake.push(Error.openai_rate_limit(retry_after_ms=30), model="fake-model")
        elif pick == 1:
            fake.push(Error.openai_server(500), model="fake-model")
        elif pick == 2:
            fake.push(Error.anthropic_overloaded(), model="claude-test")
        else:
            fake.push(Error.overloaded_503(), model="gpt-third")


@dataclass
class Rig:
    fake: FakeProvider
    proxy: FaultProxy
    gw: Harness


async def start_rig(tmp: Path, seed: int, fault_rate: float, **proxy_kw: Any) -> Rig:
    fake = FakeProvider()
    await fake.start()
    proxy = await FaultProxy(
        "127.0.0.1", int(fake.url.rsplit(":", 1)[1]), seed=seed, fault_rate=fault_rate, **proxy_kw
    ).start()
    files = policy_files(proxy.url, CHAOS_POLICY)
    team = files["teams/team-a.yaml"]["teams"]["team-a"]
    team["routes"] = [
        {"match": {"model": "claude-*"}, "policy": "fast", "override": ANTHROPIC_ROUTE},
        {"match": {"model": "*"}, "policy": "fast"},
    ]
    root = write_policies(tmp / f"chaos-{seed}", files)
    gw = await Harness(fake, root).start()
    return Rig(fake, proxy, gw)


def upstream_settled(rig: Rig) -> bool:
    """No request in flight and every upstream connection back in the pool: the upstream
    calls of requests whose clients left may still be unwinding after the handler ended
    (aiohttp's connector keeps the ones in use in its private ``_acquired``)."""
    upstream = rig.gw.gateway.upstream
    connector = upstream._session.connector if upstream._session is not None else None
    busy = len(connector._acquired) if connector is not None else 0  # type: ignore[attr-defined]
    return rig.gw.metric("llm_gateway_inflight_requests") == 0 and busy == 0


async def stop_rig(rig: Rig) -> None:
    await rig.gw.stop()
    await rig.proxy.stop()
    await rig.fake.stop()


async def run_traffic(rig: Rig, rng: random.Random, n: int, concurrency: int) -> Tally:
    tally = Tally()
    sem = asyncio.Semaphore(concurrency)
    conn = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def go(i: int) -> None:
            path, model, stream = rng.choice(KINDS)
            async with sem:
                await one_request(session, rig.gw.url, path, model, stream, tally)

        await asyncio.gather(*(go(i) for i in range(n)))
    return tally


# ---- the scenarios ----------------------------------------------------------------------

SEEDS = [1, 2, 3, 4, 5, 6]
REQUESTS_PER_SCENARIO = 40
SUMMARY: dict[int, dict[str, Any]] = {}


@pytest.fixture
def errors() -> Iterator[ErrorRecords]:
    with ErrorRecords() as rec:
        yield rec


@pytest.mark.parametrize("seed", SEEDS)
async def test_chaos_scenario(seed: int, tmp_path: Path, errors: ErrorRecords) -> None:
    """Seeded mixed traffic through random transport faults: every request ends properly."""
    # No settling first: the test before ended with its fds and tasks back to its baseline
    # (settled()), and anything of it still closing could only lower fds1 below fds0.
    fds0, tasks0 = open_fds(), len(asyncio.all_tasks())
    rng = random.Random(seed)
    rig = await start_rig(tmp_path, seed, fault_rate=0.35)
    try:
        scripted_errors(rig.fake, rng, 6)
        tally = await run_traffic(rig, rng, REQUESTS_PER_SCENARIO, concurrency=8)
        inflight = rig.gw.metric("llm_gateway_inflight_requests")
    finally:
        await stop_rig(rig)
    fds1, tasks1 = await settled(fds0, tasks0)  # cleanup callbacks run
    SUMMARY[seed] = {
        "faults": dict(rig.proxy.counts),
        "outcomes": dict(tally.outcomes),
        "fds": (fds0, fds1),
        "tasks": (tasks0, tasks1),
        "p99_s": sorted(tally.latencies)[int(0.99 * (len(tally.latencies) - 1))],
    }
    print(f"\nchaos seed={seed}: {SUMMARY[seed]}")
    assert tally.lost == [], "\n".join(tally.lost)
    assert tally.requests == REQUESTS_PER_SCENARIO
    assert rig.proxy.injected > 0
    assert errors.messages() == []
    assert inflight == 0
    assert tasks1 <= tasks0, asyncio.all_tasks()
    assert fds1 <= fds0 + 2, (fds0, fds1)


async def test_chaos_every_fault_kind_alone(tmp_path: Path, errors: ErrorRecords) -> None:
    """Each fault kind on every connection (rate 1.0): still no lost request."""
    from tests.chaos.faultproxy import FAULTS

    fds0, tasks0 = open_fds(), len(asyncio.all_tasks())
    for i, kind in enumerate(FAULTS):
        rig = await start_rig(tmp_path / kind, seed=100 + i, fault_rate=1.0, faults=(kind,))
        try:
            tally = await run_traffic(rig, random.Random(i), 16, concurrency=4)
        finally:
            await stop_rig(rig)
        print(f"\nfault={kind}: injected={dict(rig.proxy.counts)} outcomes={dict(tally.outcomes)}")
        assert tally.lost == [], f"{kind}:\n" + "\n".join(tally.lost)
        if kind in ("garbage", "refuse"):
            assert tally.outcomes["failed_properly"] == 16  # no healthy connection at all
    fds1, tasks1 = await settled(fds0, tasks0)
    assert errors.messages() == []
    assert tasks1 <= tasks0, asyncio.all_tasks()
    assert fds1 <= fds0 + 2, (fds0, fds1)


async def test_chaos_official_sdks(tmp_path: Path, errors: ErrorRecords) -> None:
    """Through faults, the official SDKs either get a whole answer or raise; never hang."""
    rig = await start_rig(tmp_path, seed=42, fault_rate=0.4)
    oa = rig.gw.async_openai(timeout=TOTAL_S + 2)
    an = rig.gw.async_anthropic(timeout=TOTAL_S + 2)
    done = raised = 0
    try:
        for _ in range(12):
            try:
                stream = await oa.chat.completions.create(
                    model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True
                )
                finish, text = None, ""
                async for c in stream:
                    if c.choices:
                        text += c.choices[0].delta.content or ""
                        finish = c.choices[0].finish_reason or finish
                assert finish == "stop" and text.startswith(REPLY_PREFIX), (finish, text)
                done += 1
            except openai.APIError:
                raised += 1
            try:
                async with an.messages.stream(
                    model="claude-test",
                    max_tokens=100,
                    messages=[{"role": "user", "content": "hi"}],
                ) as s:
                    msg = await s.get_final_message()
                assert msg.stop_reason == "end_turn"
                assert "".join(b.text for b in msg.content if b.type == "text").startswith(
                    REPLY_PREFIX
                )
                done += 1
            except anthropic.APIError:
                raised += 1
    finally:
        await stop_rig(rig)
    print(f"\nsdk: complete={done} raised={raised} faults={dict(rig.proxy.counts)}")
    assert done + raised == 24
    assert done > 0
    assert errors.messages() == []


async def test_client_disconnects_under_chaos(tmp_path: Path, errors: ErrorRecords) -> None:
    """Clients that leave mid-request while upstream is faulty leak nothing and log no error."""
    fds0, tasks0 = open_fds(), len(asyncio.all_tasks())
    rig = await start_rig(tmp_path, seed=7, fault_rate=0.5, faults=("stall", "latency", "slice"))
    rng = random.Random(7)
    try:
        async with aiohttp.ClientSession() as session:

            async def leave_early(i: int) -> None:
                path, model, stream = rng.choice(KINDS)
                with __import__("contextlib").suppress(TimeoutError, aiohttp.ClientError):
                    async with asyncio.timeout(rng.uniform(0.001, 0.08)):
                        async with session.post(
                            rig.gw.url + path,
                            json=body_for(path, model, stream),
                            headers={"authorization": f"Bearer {CLIENT_KEY}"},
                        ) as r:
                            await r.read()

            await asyncio.gather(*(leave_early(i) for i in range(24)))
        # the gateway notices the disconnects and cancels upstream (asserted below)
        await eventually(lambda: upstream_settled(rig), fail=False)
        inflight = rig.gw.metric("llm_gateway_inflight_requests")
        # and it still serves
        tally = Tally()
        async with aiohttp.ClientSession() as session:
            rig.proxy.enabled = False
            await one_request(session, rig.gw.url, "/v1/chat/completions", "gpt-test", True, tally)
        assert tally.outcomes["ok"] + tally.outcomes["recovered"] == 1, tally
    finally:
        await stop_rig(rig)
    fds1, tasks1 = await settled(fds0, tasks0)
    assert inflight == 0
    assert errors.messages() == []
    assert tasks1 <= tasks0, asyncio.all_tasks()
    assert fds1 <= fds0 + 2, (fds0, fds1)
