"""Hostile or broken clients on real sockets: what one client must not do to the gateway
(its memory, its loop, other clients' answers, the upstream's view of the request)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from gateway.testing import Delay, FakeProvider, Hang
from tests.edges.support import (
    AUTH,
    MESSAGES,
    EvilUpstream,
    Exchange,
    MiB,
    Process,
    RssProbe,
    chat_chunk,
    chat_json,
    chat_request,
    chat_sse,
    chunk,
    close,
    connect,
    median_ms,
    parse_responses,
    read_response,
    request_bytes,
    response_bytes,
    send_and_read,
    wait_for,
    warm_up,
)
from tests.harness import CLIENT_KEY, Harness
from tests.process import free_port

CHAT = "/v1/chat/completions"
JSON_AUTH = {**AUTH, "content-type": "application/json"}


# ---- 1. an endless header line ------------------------------------------------------------


@dataclass
class Attack:
    sent: int  # bytes the attacker got into its socket
    ended: bool  # the gateway answered or closed the connection
    status: int | None  # the status of the gateway's answer, if one came
    seconds: float


async def endless_header(url: str, cap_bytes: int, max_s: float) -> Attack:
    """One connection sending a header line that never ends, as fast as it is taken."""
    reader, writer = await connect(url)
    t0 = time.monotonic()
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Long: ")
    got = asyncio.ensure_future(reader.read(65536))  # the gateway's answer, or its EOF
    piece = b"a" * 65536
    sent, ended = 0, False
    try:
        async with asyncio.timeout(max_s):
            while sent < cap_bytes and not got.done():
                writer.write(piece)
                sent += len(piece)
                await writer.drain()
                await asyncio.sleep(0)  # let the probes of other clients run
            await asyncio.wait({got}, timeout=0.3)
    except (ConnectionError, TimeoutError):
        pass
    status = None
    if got.done():
        ended = True
        with contextlib.suppress(ConnectionError):
            first = got.result()
            if first.startswith(b"HTTP/1."):
                status = int(first.split(b" ", 2)[1])
    else:
        got.cancel()
        with contextlib.suppress(BaseException):
            await got
        ended = writer.is_closing()
    seconds = time.monotonic() - t0
    await close(writer)
    return Attack(sent, ended, status, seconds)


async def healthz_latencies(
    url: str, running: asyncio.Task[Any], limit_s: float = 3.0
) -> list[float]:
    """GET /healthz one after another while ``running`` runs; a probe without an answer
    within ``limit_s`` counts as ``limit_s``."""
    out: list[float] = []
    async with aiohttp.ClientSession() as s:
        while not running.done():
            t = time.monotonic()
            try:
                async with asyncio.timeout(limit_s), s.get(url + "/healthz") as r:
                    await r.read()
                    assert r.status == 200
            except (TimeoutError, aiohttp.ClientError):
                pass
            out.append(time.monotonic() - t)
            await asyncio.sleep(0.02)
    return out


async def test_endless_header_line_is_refused_fast(
    gateway_process: Callable[..., Awaitable[Process]], fake: FakeProvider
) -> None:
    """An endless header line is refused at once, others keep fast answers, memory stays flat."""
    gw = await gateway_process(fake.url)
    await warm_up(gw.url)
    async with RssProbe(gw.pid) as rss:
        attack = asyncio.create_task(endless_header(gw.url, cap_bytes=64 * MiB, max_s=3.0))
        window = asyncio.create_task(asyncio.sleep(1.0))  # the probes' window, from the start
        latencies = await healthz_latencies(gw.url, window)
        a = await attack
    observed = (
        f"the attacker pushed {a.sent / MiB:.1f} MiB in {a.seconds:.2f} s (ended by the "
        f"gateway: {a.ended}, status {a.status}); healthz median {median_ms(latencies):.0f} ms "
        f"over {len(latencies)}; RSS +{rss.growth_mb:.0f} MB"
    )
    assert a.ended and (a.status is None or 400 <= a.status < 500), observed
    # Refused after its first KB: what got in is what the kernel buffers took meanwhile.
    assert a.seconds < 1.0 and a.sent < 32 * MiB, observed
    assert median_ms(latencies) < 50, observed
    assert rss.growth_mb < 20, observed


async def test_repeated_endless_header_lines_do_not_add_up(
    gateway_process: Callable[..., Awaitable[Process]], fake: FakeProvider
) -> None:
    """16 endless header lines in a row (reconnecting when refused) do not add up in memory."""
    gw = await gateway_process(fake.url)
    await warm_up(gw.url)
    attacks: list[Attack] = []
    async with RssProbe(gw.pid) as rss:
        for _ in range(16):
            attacks.append(await endless_header(gw.url, cap_bytes=64 * MiB, max_s=1.0))
            rss.sample()
            if not attacks[-1].ended:
                break  # the first one was not refused: test_endless_header_line_... says more
    observed = (
        f"{len(attacks)} connection(s) pushed {sum(a.sent for a in attacks) / MiB:.0f} MiB "
        f"(ended by the gateway: {[a.ended for a in attacks]}); RSS +{rss.growth_mb:.0f} MB"
    )
    assert all(a.ended for a in attacks), observed
    assert rss.growth_mb < 20, observed


# ---- 2. bodies are not read before the key is checked -----------------------------------------


async def test_unauthenticated_body_is_not_read(
    gateway_process: Callable[..., Awaitable[Process]], fake: FakeProvider
) -> None:
    """No valid key: 401 right after the headers, unread 32 MiB bodies do not pile up in memory."""
    gw = await gateway_process(fake.url)
    await warm_up(gw.url)
    size = 32 * MiB
    conns = [await connect(gw.url) for _ in range(8)]
    try:
        async with RssProbe(gw.pid) as rss:
            t0 = time.monotonic()
            for i, (_, w) in enumerate(conns):
                headers = {"content-type": "application/json", "content-length": str(size)}
                if i % 2:
                    headers["authorization"] = "Bearer not-a-key-of-any-team"
                w.write(request_bytes(CHAT, None, headers))

            async def answer(r: asyncio.StreamReader) -> str:
                try:
                    async with asyncio.timeout(2.5):
                        resp = await read_response(r)
                except (TimeoutError, ConnectionError, AssertionError) as e:
                    return f"no answer ({type(e).__name__})"
                return f"{resp.status} after {time.monotonic() - t0:.2f} s"

            answers = await asyncio.gather(*(answer(r) for r, _ in conns))

            async def push(w: asyncio.StreamWriter) -> int:
                sent, piece = 0, b" " * (256 * 1024)
                try:
                    async with asyncio.timeout(6):
                        while sent < size:
                            w.write(piece)
                            sent += len(piece)
                            await w.drain()
                except (ConnectionError, TimeoutError):
                    pass
                return sent

            pushed = await asyncio.gather(*(push(w) for _, w in conns))

            async def closed(r: asyncio.StreamReader) -> None:
                """Until the gateway is done with the connection (it closes it)."""
                with contextlib.suppress(TimeoutError, ConnectionError):
                    async with asyncio.timeout(5):
                        while await r.read(65536):
                            pass

            await asyncio.gather(*(closed(r) for r, _ in conns))
    finally:
        for _, w in conns:
            await close(w)
    observed = (
        f"answers: {answers}; bodies pushed: {sum(pushed) / MiB:.0f} MiB; "
        f"RSS +{rss.growth_mb:.0f} MB"
    )
    assert all(a.startswith("401 ") for a in answers), observed
    assert rss.growth_mb < 30, observed


# ---- 3. pipelined requests ---------------------------------------------------------------------


async def test_pipelined_requests_are_not_read_without_bound(
    gateway_process: Callable[..., Awaitable[Process]], fake: FakeProvider
) -> None:
    """Pipelining behind a held request: the gateway stops reading, memory stays bounded."""
    gw = await gateway_process(fake.url, policy={"timeouts": {"first_byte": "30s", "total": "60s"}})
    await warm_up(gw.url)
    fake.reset()
    fake.push(Hang())
    held = chat_request()  # small: the upstream holds it
    filler = "x" * (2 * MiB)
    body = json.dumps({"model": "gpt-test", "messages": [{"role": "user", "content": filler}]})
    one = request_bytes(CHAT, body.encode(), JSON_AUTH)
    count = 100  # 200 MiB in all, behind the held one
    total = len(held) + count * len(one)
    state = {"sent": len(held), "reset": "", "done": False}
    reader, writer = await connect(gw.url)

    async def pipeline() -> None:
        try:
            writer.write(held)
            for _ in range(count):
                writer.write(one)
                await writer.drain()
                state["sent"] = int(state["sent"]) + len(one)
            state["done"] = True
        except ConnectionError as e:
            state["reset"] = type(e).__name__

    try:
        async with RssProbe(gw.pid) as rss:
            task = asyncio.create_task(pipeline())
            await wait_for(lambda: bool(fake.requests) or task.done(), 5)
            # Until the writes stall (no progress for 0.5 s), the connection fails, or 6 s.
            end = time.monotonic() + 6
            last, since = -1, time.monotonic()
            while not task.done() and time.monotonic() < end:
                if state["sent"] != last:
                    last, since = int(state["sent"]), time.monotonic()
                elif time.monotonic() - since > 0.5:
                    break
                await asyncio.sleep(0.05)
            closed = ""
            try:
                async with asyncio.timeout(0.3):
                    data = await reader.read(65536)
                closed = "EOF" if not data else f"answered: {data[:60]!r}"
            except TimeoutError:
                pass  # nothing answered and still open: as it should be
            except ConnectionError as e:
                closed = type(e).__name__
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    finally:
        await close(writer)
    observed = (
        f"the client got {int(state['sent']) / MiB:.0f} of its {total / MiB:.0f} MiB out "
        f"(finished: {state['done']}, write error: {state['reset'] or 'none'}, "
        f"read side: {closed or 'open'}); upstream saw {len(fake.requests)} request(s); "
        f"RSS +{rss.growth_mb:.0f} MB"
    )
    assert not state["reset"] and not closed, observed
    assert not state["done"] and int(state["sent"]) < total // 2, observed
    assert len(fake.requests) == 1, observed  # answered in order: the rest wait their turn
    assert rss.growth_mb < 30, observed


# ---- 4. Expect: 100-continue behind a running stream -----------------------------------------


async def test_100_continue_is_not_written_into_a_running_stream(
    make_gateway: Callable[..., Awaitable[Harness]], fake: FakeProvider
) -> None:
    """A pipelined Expect: 100-continue gets its 100 only after the running stream ended."""
    gw = await make_gateway()
    fake.push(Delay(0.05))  # the stream takes ~0.4 s
    reader, writer = await connect(gw.url)
    try:
        writer.write(chat_request(stream=True))
        raw = b""
        async with asyncio.timeout(5):
            while b"data:" not in raw:  # answer 1 is streaming
                data = await reader.read(65536)
                if not data:
                    break
                raw += data
        body = json.dumps({"model": "gpt-test", "messages": MESSAGES}).encode()
        headers = {**JSON_AUTH, "expect": "100-continue", "connection": "close"}
        writer.write(request_bytes(CHAT, body, headers))
        async with asyncio.timeout(5):
            raw += await reader.read()  # both answers, to the close after the second
    finally:
        await close(writer)
    responses = await parse_responses(raw)
    statuses = [r.status for r in responses]
    assert statuses in ([200, 200], [200, 100, 200]), (statuses, raw[:600])
    stream, answer = responses[0], responses[-1]
    assert stream.chunked and stream.headers["content-type"].startswith("text/event-stream")
    assert stream.sse_data[-1] == "[DONE]", stream.body[-300:]
    assert answer.json()["choices"][0]["message"]["content"], answer.body[:300]


# ---- 5. an h2c upgrade request --------------------------------------------------------------


async def test_h2c_upgrade_request_is_served_as_http11(gw: Harness, fake: FakeProvider) -> None:
    """A request asking to upgrade to h2c is answered as plain HTTP/1.1, its body intact."""
    messages = [{"role": "user", "content": "upgrade me, or rather do not"}]
    body = json.dumps({"model": "gpt-test", "messages": messages}).encode()
    headers = {
        **JSON_AUTH,
        "connection": "Upgrade, HTTP2-Settings",
        "upgrade": "h2c",
        "http2-settings": "AAMAAABkAARAAAAAAAIAAAAA",
    }
    resp = await send_and_read(gw.url, request_bytes(CHAT, body, headers), within=5)
    assert resp.status == 200, (resp.status, resp.body[:300])
    assert resp.json()["choices"][0]["message"]["content"]
    assert [r.body["messages"] for r in fake.requests] == [messages]


# ---- 6. a client that stops reading a stream -------------------------------------------------


async def endless_sse(ex: Exchange) -> bool:
    """A stream that never ends: 16 KB content events as fast as they are taken."""
    ex.send(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
        + chunk(chat_chunk({"role": "assistant", "content": ""}))
    )
    await ex.pump(chunk(chat_chunk({"content": "x" * 16000})), cap_bytes=4096 * MiB, max_s=30)
    return False


async def test_client_that_stops_reading_a_stream_is_dropped(
    gateway_at: Callable[..., Awaitable[Harness]],
    evil: Callable[..., Awaitable[EvilUpstream]],
) -> None:
    """A client not reading its stream is dropped after the write timeout, upstream closed."""
    up = await evil(endless_sse)
    gw = await gateway_at(up.url, client_write_timeout_s=0.5)
    reader, writer = await connect(gw.url, rcvbuf=4096)
    try:
        writer.write(chat_request(stream=True))
        async with asyncio.timeout(5):
            head = await read_response(reader, head_only=True)
        assert head.status == 200
        await wait_for(lambda: bool(up.requests) and up.requests[0].sent > 0, 5)
        t0 = time.monotonic()  # from here on the client reads nothing

        def inflight() -> float:
            return gw.metric("llm_gateway_inflight_requests")

        gave_up = await wait_for(lambda: up.closed_connections >= 1 and inflight() == 0, 5)
        waited = time.monotonic() - t0
        pushed, upstream_closed, still = up.requests[0].sent, up.closed_connections, inflight()
        # Reading again: what was buffered, then the end of the connection.
        ended = ""
        try:
            async with asyncio.timeout(3):
                while await reader.read(1 << 20):
                    pass
            ended = "EOF"
        except ConnectionError as e:
            ended = type(e).__name__
        except TimeoutError:
            ended = ""
    finally:
        await close(writer)
    observed = (
        f"after {waited:.1f} s: upstream connection closed: {upstream_closed >= 1} "
        f"(upstream pushed {pushed / MiB:.1f} MiB), in flight: {still:g}; "
        f"client connection then: {ended or 'still open'}"
    )
    assert gave_up, observed
    assert ended, observed


# ---- 7. duplicate JSON keys --------------------------------------------------------------------

UPSTREAM_MODEL = {"gpt-test": "fake-model"}  # others keep their name (tests/harness.py)


M = json.dumps(MESSAGES)
DUPLICATES = {
    "model-forbidden-then-mapped": f'{{"model":"forbidden-model","model":"gpt-test","messages":{M}}}',
    "model-forbidden-then-same-name": (
        f'{{"model":"forbidden-model","model":"gpt-backup","messages":{M}}}'
    ),
    "model-allowed-then-forbidden": (
        f'{{"model":"gpt-backup","messages":{M},"model":"forbidden-model"}}'
    ),
    "stream-false-then-true": (
        f'{{"model":"gpt-backup","stream":false,"messages":{M},"stream":true}}'
    ),
    "stream-true-then-false": (
        f'{{"model":"gpt-backup","stream":true,"messages":{M},"stream":false}}'
    ),
    "stream-mapped-model": f'{{"model":"gpt-test","stream":true,"stream":false,"messages":{M}}}',
}


async def recorded_answer(ex: Exchange) -> bool:
    """Answer JSON or SSE as the (last-wins) body asks; the raw bytes stay in ex.body."""
    if ex.json.get("stream") is True:
        ex.send(response_bytes(chat_sse("duplicate"), "text/event-stream"))
    else:
        ex.send(response_bytes(chat_json("duplicate")))
    return True


@pytest.mark.parametrize("raw", list(DUPLICATES.values()), ids=list(DUPLICATES))
async def test_duplicate_json_keys_reach_upstream_as_decided(
    gateway_at: Callable[..., Awaitable[Harness]],
    evil: Callable[..., Awaitable[EvilUpstream]],
    raw: str,
) -> None:
    """A key given twice: refused, or the upstream gets it once, with the value acted on."""
    up = await evil(recorded_answer)
    gw = await gateway_at(up.url)
    resp = await send_and_read(gw.url, request_bytes(CHAT, raw.encode(), JSON_AUTH))
    if resp.status >= 400:
        assert resp.status in (400, 403, 404), (resp.status, resp.body[:300])
        assert up.requests == [], "refused, yet sent upstream"
        return
    assert resp.status == 200, (resp.status, resp.body[:300])
    assert len(up.requests) == 1
    sent = up.requests[0].body
    pairs = json.loads(sent, object_pairs_hook=lambda kv: kv)
    models = [v for k, v in pairs if k == "model"]
    streams = [v for k, v in pairs if k == "stream"]
    decided_model = resp.headers["x-gateway-model"]
    decided_stream = resp.headers["content-type"].startswith("text/event-stream")
    assert models == [UPSTREAM_MODEL.get(decided_model, decided_model)], sent[:300]
    assert streams == [decided_stream] or (streams == [] and not decided_stream), sent[:300]


# ---- 8. /metrics ------------------------------------------------------------------------------


async def test_metrics_port_moves_metrics_off_the_public_port(
    gateway_process: Callable[..., Awaitable[Process]], fake: FakeProvider
) -> None:
    """With metrics_port, /metrics is 404 on the public port and served on the metrics port."""
    port = free_port()
    gw = await gateway_process(fake.url, metrics_port=str(port))
    async with aiohttp.ClientSession() as s:
        async with s.get(gw.url + "/metrics") as r:
            public = r.status
        try:
            async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                private, text = r.status, await r.text()
        except aiohttp.ClientError as e:
            private, text = 0, repr(e)
    assert public == 404, f"public /metrics answered {public}"
    assert private == 200, f"metrics port: {text[:200]}"
    assert "llm_gateway_inflight_requests" in text


async def test_metrics_token_is_required(make_gateway: Callable[..., Awaitable[Harness]]) -> None:
    """With metrics_token, /metrics is 401 without the exact bearer token and 200 with it."""
    token = "metrics-token-for-tests"
    gw = await make_gateway(metrics_token=token)
    statuses = {}
    async with aiohttp.ClientSession() as s:
        for name, headers in {
            "none": {},
            "wrong": {"authorization": "Bearer nope"},
            "client key": {"authorization": f"Bearer {CLIENT_KEY}"},
            "token without Bearer": {"authorization": token},
            "token": {"authorization": f"Bearer {token}"},
        }.items():
            async with s.get(gw.url + "/metrics", headers=headers) as r:
                statuses[name] = r.status
                text = await r.text()
    assert statuses == {
        "none": 401,
        "wrong": 401,
        "client key": 401,
        "token without Bearer": 401,
        "token": 200,
    }, statuses
    assert "llm_gateway_inflight_requests" in text
