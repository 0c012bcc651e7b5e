"""Client text that reaches a response header or the access log is bounded and clean.

A translated request names the fields it lost in ``x-gateway-dropped`` and in the access
log's ``dropped`` field, and some of those names are the client's own (an unknown body
key, a tool or content ``type`` the other format lacks). Whatever the client puts there
(NUL, CR/LF, a 100 KB name, ten thousand names), the answer comes, the header holds at
most 1 KiB of visible ASCII and the log line stays small. Real gateway, real sockets:
raw HTTP where the bytes of the answer's head are measured, the Anthropic SDK where a
client would meet the header; the JSON access log as ``serve`` writes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.observe.request_log import RequestLog, visible
from gateway.testing import FakeProvider
from gateway.translate.requests import translate
from tests.harness import CLIENT_KEY, Harness
from tests.log_sink import Sink

#: What a header value and a logged name may hold: visible ASCII and the space.
VISIBLE = re.compile(r"^[\x20-\x7e]*$")
#: The documented bound of ``x-gateway-dropped`` (and of the access log's ``dropped``).
MAX_DROPPED = 1024
MSG = [{"role": "user", "content": "hi"}]


# ---- the JSON access log, as ``serve`` writes it ---------------------------------------


@pytest.fixture
def access_log(log_sink: Sink) -> Sink:
    """The JSON access log, as ``serve`` writes it."""
    log_sink.configure("info", "json")
    return log_sink


# ---- raw HTTP: the answer's head, byte for byte ------------------------------------------


class Raw:
    def __init__(self, status: int | None, head: bytes, body: bytes, seconds: float) -> None:
        self.status, self.head, self.body, self.seconds = status, head, body, seconds

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == name.encode():
                return v.strip().decode("latin-1")
        return None

    def names(self) -> list[str]:
        return [
            ln.partition(b":")[0].decode("latin-1").lower() for ln in self.head.split(b"\r\n")[1:]
        ]


async def post(url: str, path: str, body: Any, request_id: str) -> Raw:
    """POST ``body`` with ``connection: close`` and read until EOF: whatever came back."""
    data = json.dumps(body).encode()
    host, port = url.removeprefix("http://").split(":")
    head = (
        f"POST {path} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {CLIENT_KEY}\r\nx-request-id: {request_id}\r\n"
        f"connection: close\r\ncontent-length: {len(data)}\r\n\r\n"
    ).encode()
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head + data)
        async with asyncio.timeout(10):
            got = await reader.read(-1)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    seconds = time.monotonic() - started
    head_bytes, sep, rest = got.partition(b"\r\n\r\n")
    if not sep:
        return Raw(None, got, b"", seconds)  # no answer, or not a whole head
    return Raw(int(head_bytes.split(b" ")[1]), head_bytes, rest, seconds)


def assert_bounded_and_clean(value: str | None, logged: Any) -> None:
    assert value is not None, "no x-gateway-dropped"
    assert len(value) <= MAX_DROPPED, f"x-gateway-dropped is {len(value)} bytes"
    assert VISIBLE.match(value), f"x-gateway-dropped holds {value[:200]!r}"
    assert isinstance(logged, str)
    assert len(logged) <= MAX_DROPPED, f"the logged dropped field is {len(logged)} chars"
    assert VISIBLE.match(logged), f"the log holds {logged[:200]!r}"


# ---- the findings -------------------------------------------------------------------------

HOSTILE = {
    "nul": "a\x00b",
    "crlf": "a\r\nx-injected: 1",
    "bare-lf": "a\nx-injected: 1",
    "escape": "esc\x1b[31mred",
    "tab": "tab\there",
    "del": "del\x7f",
    "line-separator": "line\u2028sep",
    "non-ascii": "caf\u00e9",
    "comma": "two,names",
}


@pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())
async def test_control_characters_in_a_dropped_name_still_get_an_answer(
    gw: Harness, fake: FakeProvider, access_log: Sink, name: str
) -> None:
    """An unknown body key the Anthropic-format model lacks, holding NUL, CR/LF or other
    text that is not visible ASCII: the client gets its 200 (the provider was called and
    billed) with a clean ``x-gateway-dropped``, and nothing injected into the head."""
    rid = "ctb-control"
    r = await post(gw.url, "/v1/chat/completions", {"model": "claude-test", "messages": MSG,
                                                    name: 1}, rid)  # fmt: skip
    assert len(fake.requests) == 1  # the provider was called
    assert r.status == 200, f"no answer: {r.head[:200]!r} after {r.seconds:.3f} s"
    assert json.loads(r.body)["choices"][0]["message"]["content"]
    assert "x-injected" not in r.names()
    raw, line = await access_log.line(rid)
    assert line["status"] == 200
    dropped = r.header("x-gateway-dropped")
    assert_bounded_and_clean(dropped, line.get("dropped"))
    assert dropped is not None and len(dropped.split(",")) == 1  # one name, as one name
    assert raw.count(b"\n") == 1  # one line


async def test_a_100_kb_dropped_name_is_bounded(
    gw: Harness, fake: FakeProvider, access_log: Sink
) -> None:
    """A 100 KB unknown key: a bounded header (the name shortened) and log field."""
    rid = "ctb-100kb"
    name = "t" * 100_000
    r = await post(gw.url, "/v1/chat/completions", {"model": "claude-test", "messages": MSG,
                                                    name: 1, "seed": 7}, rid)  # fmt: skip
    assert r.status == 200, f"head of {len(r.head)} bytes: {r.head[:120]!r}"
    assert len(r.head) < 2048, f"a head of {len(r.head)} bytes"
    _, line = await access_log.line(rid)
    dropped = r.header("x-gateway-dropped")
    assert_bounded_and_clean(dropped, line.get("dropped"))
    assert dropped is not None and dropped.startswith("t" * 32) and "seed" in dropped


async def test_ten_thousand_dropped_names_are_bounded_and_fast(
    gw: Harness, fake: FakeProvider, access_log: Sink
) -> None:
    """The Anthropic SDK on an OpenAI-format model offers 1,000 tools of types that model
    lacks (the most a request may hold) and 9,000 unknown fields: one header of at most
    1 KiB that counts the names it leaves out, a small log line, and the answer within
    2 s (0.2 s here, the SDK included)."""
    rid = "ctb-ten-thousand"
    tools = [{"type": f"tool_type_{i}", "name": f"t{i}"} for i in range(1_000)]
    unknown = {f"unknown_field_{i}": 1 for i in range(9_000)}
    started = time.monotonic()
    raw = await gw.async_anthropic().messages.with_raw_response.create(
        model="gpt-test", max_tokens=50, messages=MSG, tools=tools,  # type: ignore[arg-type]
        extra_body=unknown, extra_headers={"x-request-id": rid},
    )  # fmt: skip
    seconds = time.monotonic() - started
    assert raw.http_response.status_code == 200
    assert (await raw.parse()).content[0].text  # type: ignore[union-attr]
    assert seconds < 2.0, f"{seconds:.2f} s"  # (4 s when each name was looked for in a list)
    dropped = raw.headers["x-gateway-dropped"]
    line_bytes, line = await access_log.line(rid)
    assert_bounded_and_clean(dropped, line.get("dropped"))
    assert len(line_bytes) < 2048, f"an access log line of {len(line_bytes)} bytes"
    shown = dropped.split(",")
    more = re.fullmatch(r"\(\+(\d+) more\)", shown[-1])
    assert more is not None, shown[-1]
    assert shown[0] == "tools.tool_type_0"
    assert len(shown) - 1 + int(more.group(1)) == 10_000  # every name counted once


def test_dropping_many_names_takes_linear_time() -> None:
    """Naming 20,000 unknown keys (a 300 KB body; the body limit is 32 MiB) takes
    milliseconds: each name is checked against those already named in constant time."""
    body: dict[str, Any] = {"model": "m", "messages": MSG}
    body.update({f"unknown_key_{i}": 1 for i in range(20_000)})
    started = time.perf_counter()
    _, _, drops = translate(body, "chat", "messages")
    seconds = time.perf_counter() - started
    assert len(drops.names) == 20_000
    assert seconds < 1.0, f"{seconds:.2f} s to name 20,000 dropped keys"


@settings(max_examples=200, deadline=None, derandomize=True)
@example([[f"n{i}" for i in range(300)] + ["a\x00", "a\x01", "n1"]])  # past the names kept
@example([[f"n{i}" for i in range(300)], ["n0", "late\r\n"]])
@given(
    st.lists(
        st.lists(st.text(max_size=200) | st.sampled_from(["a\x00", "a\x01", "a,"]), max_size=600),
        min_size=1,
        max_size=3,
    ),
)
def test_any_dropped_names_make_a_bounded_clean_header(attempts: list[list[str]]) -> None:
    """Whatever names the attempts of a request drop: the header is at most 1 KiB of
    visible ASCII, and its names plus its ``(+N more)`` count every distinct name once
    (seeded, a few seconds)."""
    r = RequestLog("rid", 0.0)
    for names in attempts:
        r.drop(names)
    distinct = {visible(n) for names in attempts for n in names}
    value = r.headers().get("x-gateway-dropped")
    if not distinct:
        assert value is None
        return
    assert value is not None and len(value) <= MAX_DROPPED and VISIBLE.match(value)
    shown = value.split(",")
    more = re.fullmatch(r"\(\+(\d+) more\)", shown[-1])
    if more is None:
        assert set(shown) == distinct
    else:
        assert set(shown[:-1]) < distinct
        if len(attempts) == 1:  # (across attempts the count is the most one attempt had)
            assert len(shown) - 1 + int(more.group(1)) == len(distinct)
