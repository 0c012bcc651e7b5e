"""What one request may contain, and that the largest allowed one does not stall others.

A real gateway (default body limit, 32 MiB) in front of the echo upstream. One client
sends a huge request while a second polls ``/healthz`` every 10 ms on its own
connections; the slowest ``/healthz`` answer during the request is the stall every
other client of the process saw.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.settings import GatewaySettings
from tests.fuzz.live import LiveGateway, Reply, error_shape_ok, raw_http
from tests.harness import CLIENT_KEY

AUTH = ("authorization", f"Bearer {CLIENT_KEY}")
DEFAULTS = GatewaySettings()


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGateway]:
    root: Path = tmp_path_factory.mktemp("big")
    g = LiveGateway(root, client_read_timeout_s=30.0).start()
    yield g
    g.stop()


def send_while_probing(live: LiveGateway, path: str, raw: bytes) -> tuple[Reply, float, float]:
    """(the reply, seconds it took, the slowest /healthz answer meanwhile, in seconds)."""
    slowest = 0.0
    done = threading.Event()

    def probe() -> None:
        nonlocal slowest
        while not done.is_set():
            t = time.perf_counter()
            reply = raw_http(live.port, "GET", "/healthz", content_length=False, timeout=30)
            assert reply.status == 200
            slowest = max(slowest, time.perf_counter() - t)
            time.sleep(0.01)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    time.sleep(0.05)
    started = time.perf_counter()
    reply = raw_http(
        live.port, "POST", path, [AUTH, ("content-type", "application/json")], raw, timeout=60
    )
    took = time.perf_counter() - started
    time.sleep(0.05)
    done.set()
    prober.join(30)
    return reply, took, slowest


def tiny_blocks(n: int) -> bytes:
    """One user message of ``n`` one-letter text blocks (27 bytes each)."""
    blocks = b",".join([b'{"type":"text","text":"a"}'] * n)
    head = b'{"model":"%s","max_tokens":5,"messages":[{"role":"user","content":['
    return head + blocks + b"]}]}"


@pytest.mark.parametrize("model", ["claude-echo", "gpt-echo"])
def test_a_million_tiny_blocks_are_refused_without_a_stall(big: LiveGateway, model: str) -> None:
    """1.1 million content blocks (29.7 MB): 400 naming the limit, others barely wait."""
    raw = tiny_blocks(1_100_000) % model.encode()
    reply, took, slowest = send_while_probing(big, "/v1/messages", raw)
    print(f"\n{model}: {len(raw) / 1e6:.1f} MB -> {reply.status} in {took:.2f} s; "
          f"slowest /healthz {slowest * 1000:.0f} ms")  # fmt: skip
    assert reply.status == 400, reply
    assert error_shape_ok(reply, "/v1/messages"), reply
    assert "JSON objects and arrays" in reply.json()["error"]["message"], reply
    assert slowest < 0.5, slowest


def test_ten_million_empty_arrays_are_refused_before_parsing(big: LiveGateway) -> None:
    """30 MB of ``[]`` in a field nobody reads: orjson alone would take seconds."""
    raw = b'{"model":"gpt-echo","messages":[],"x":[' + b"[]," * 10_000_000 + b"[]]}"
    reply, took, slowest = send_while_probing(big, "/v1/chat/completions", raw)
    print(f"\n{len(raw) / 1e6:.1f} MB -> {reply.status} in {took:.2f} s; "
          f"slowest /healthz {slowest * 1000:.0f} ms")  # fmt: skip
    assert reply.status == 400, reply
    assert "JSON objects and arrays" in reply.json()["error"]["message"], reply
    assert slowest < 0.5, slowest


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/chat/completions", "/v1/responses"])
def test_one_block_over_the_limit_is_400_naming_it(big: LiveGateway, path: str) -> None:
    n = DEFAULTS.max_content_blocks + 1
    raw = tiny_blocks(n) % b"gpt-echo"
    if path == "/v1/responses":
        raw = raw.replace(b'"messages"', b'"input"').replace(
            b'"type":"text"', b'"type":"input_text"'
        )
    reply = raw_http(big.port, "POST", path, [AUTH], raw, timeout=60)
    assert reply.status == 400, reply
    assert error_shape_ok(reply, path), reply
    message = reply.json()["error"]["message"]
    assert f"{n + 1} content blocks" in message and str(n - 1) in message, reply


def test_too_many_messages_and_tools_are_400(big: LiveGateway) -> None:
    messages = [{"role": "user", "content": "a"}] * (DEFAULTS.max_messages + 1)
    reply = raw_http(big.port, "POST", "/v1/chat/completions", [AUTH],
                     orjson.dumps({"model": "gpt-echo", "messages": messages}))  # fmt: skip
    assert reply.status == 400 and reply.json()["error"]["param"] == "messages", reply
    tools = [{"type": "function", "function": {"name": "f"}}] * (DEFAULTS.max_tools + 1)
    body = {"model": "gpt-echo", "messages": [{"role": "user", "content": "a"}], "tools": tools}
    reply = raw_http(big.port, "POST", "/v1/chat/completions", [AUTH], orjson.dumps(body))
    assert reply.status == 400 and reply.json()["error"]["param"] == "tools", reply


def worst_allowed(model: str) -> bytes:
    """As much as the limits allow: the most messages, content blocks and tools, a deep
    tool schema, and the rest of the JSON containers in a field nobody reads."""
    per = DEFAULTS.max_content_blocks // DEFAULTS.max_messages - 1
    blocks = [{"type": "text", "text": "a"}] * per
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": blocks}
                for i in range(DEFAULTS.max_messages)]  # fmt: skip
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(40):
        schema = {"type": "object", "properties": {"a": schema}}
    tools = [{"name": f"t{i}", "input_schema": schema} for i in range(DEFAULTS.max_tools)]
    body = {"model": model, "max_tokens": 5, "messages": messages, "tools": tools}
    used = orjson.dumps(body).count(b"{") + orjson.dumps(body).count(b"[")
    spare = (DEFAULTS.max_json_containers - used - 10) // 1
    body["x_filler"] = [[] for _ in range(max(spare, 0))]
    return orjson.dumps(body)


@pytest.mark.parametrize("model", ["claude-echo", "gpt-echo"])
def test_the_worst_allowed_request_does_not_stall_others(big: LiveGateway, model: str) -> None:
    raw = worst_allowed(model)
    reply, took, slowest = send_while_probing(big, "/v1/messages", raw)
    print(f"\n{model}: {len(raw) / 1e6:.1f} MB -> {reply.status} in {took:.2f} s; "
          f"slowest /healthz {slowest * 1000:.0f} ms")  # fmt: skip
    assert reply.status == 200, reply
    assert slowest < 2.0, slowest  # generous: two shared cores; the figure is in the report
