"""A provider answer with wrongly typed fields, on real sockets.

The fake provider (``Tamper``) sends valid answers of every shape with fields replaced by
values of the wrong type: counts as strings, floats, negative or over 64 bits, ``null``,
lists and objects where text, choices, deltas or ids belong. Clients of every API call
the gateway over HTTP, same-format and translated, JSON and streamed, with continuation
and resume on (so the recovery code reads the broken answers). Whatever the provider
sent, every request ends in a complete answer or a proper error: never a 500, never a
stream that stops without its final or error event, always its access-log line, and no
count that is not a non-negative 64-bit integer reaches the log or the metrics.
"""

from __future__ import annotations

import copy
import json
import logging
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import structlog

from gateway.observe import logs
from gateway.testing import CutAfter, FakeProvider, Success, Tamper
from tests.harness import CLIENT_KEY, Harness
from tests.json_paths import paths

WRONG: tuple[Any, ...] = ("NaN", "12", "", 1.5, -3, 2**70, None, [], {}, [1], {"x": 1}, 7, True)
#: The fields the gateway reads (usage, finish, text, ids, kinds), chosen more often.
READ = frozenset(
    [
        "usage",
        "prompt_tokens",
        "completion_tokens",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "prompt_tokens_details",
        "cached_tokens",
        "choices",
        "message",
        "content",
        "finish_reason",
        "delta",
        "arguments",
        "tool_calls",
        "function",
        "type",
        "text",
        "stop_reason",
        "status",
        "incomplete_details",
        "reason",
        "output",
        "content_block",
        "index",
        "response",
        "item",
        "part",
        "id",
        "model",
        "created",
        "sequence_number",
        "output_index",
        "content_index",
    ]
)
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
FINALS = {
    "chat": ("[DONE]",),
    "messages": ("message_stop",),
    "responses": ("response.completed", "response.incomplete", "response.failed"),
}
POLICY: dict[str, Any] = {
    "retry": {"max_retries": 1},
    "output_recovery": {"max_continuations": 1, "respect_client_max_tokens": False},
    "stream": {"on_midstream_failure": "continue", "max_resumes": 1},
    "timeouts": {"first_byte": "2s", "stream_idle": "1s", "total": "6s"},
}
MAX_COUNT = 2**63 - 1


def mutate(obj: Any, rng: random.Random, n: int = 1) -> Any:
    """``obj`` with ``n`` fields (mostly ones the gateway reads) given a wrongly typed value."""
    obj = copy.deepcopy(obj)
    for _ in range(n):
        every = paths(obj)
        if not every:
            return obj
        read = [p for p in every if p[-1] in READ]
        path = rng.choice(read if read and rng.random() < 0.8 else every)
        target = obj
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = copy.deepcopy(rng.choice(WRONG))
    return obj


def tamper(seed: int) -> Tamper:
    """The JSON answer with one or two fields broken, or three events of a stream."""
    rng = random.Random(seed)
    events = set(rng.sample(range(14), 3))

    def rewrite(data: Any, index: int) -> Any:
        if index < 0:
            return mutate(data, rng, rng.choice((1, 2)))
        return mutate(data, rng) if index in events else data

    return Tamper(rewrite)


@dataclass
class Case:
    seed: int
    api: str
    model: str
    stream: bool
    mode: str  # plain | cut (continued) | broken (resumed)
    entries: list[Any] = field(default_factory=list)

    def body(self) -> dict[str, Any]:
        b: dict[str, Any] = {"model": self.model, "stream": self.stream}
        if self.api == "responses":
            b["input"] = "hi"
        else:
            b["messages"] = [{"role": "user", "content": "hi"}]
        if self.api == "messages":
            b["max_tokens"] = 64
        if self.api == "chat" and self.stream:
            b["stream_options"] = {"include_usage": True}
        return b


def cases(seeds: range) -> Iterator[Case]:
    for seed in seeds:
        rng = random.Random(seed * 7919)
        api = rng.choice(("chat", "responses", "messages"))
        model = rng.choice(("gpt-test", "claude-test"))
        stream = rng.random() < 0.6
        mode = rng.choice(("plain", "cut", "broken") if stream else ("plain", "cut"))
        c = Case(seed, api, model, stream, mode)
        first: tuple[Any, ...] = (tamper(seed),)
        if mode == "cut":
            first += (Success(finish_reason="length"),)
        elif mode == "broken":
            first += (CutAfter(3),)
        c.entries = [first]
        if mode != "plain" and rng.random() < 0.5:
            c.entries.append((tamper(seed + 100_000),))  # the continuation / resume too
        yield c


def sse_events(body: bytes) -> list[tuple[str | None, str]]:
    out = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        name = None
        data = []
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].strip().decode())
        if data:
            out.append((name, "\n".join(data)))
    return out


def ended_properly(api: str, body: bytes) -> bool:
    """The stream's last event is its final event or an error event."""
    events = sse_events(body)
    if not events:
        return False
    name, data = events[-1]
    if data == "[DONE]":
        return api == "chat"
    try:
        obj = json.loads(data)
    except ValueError:
        return False
    if not isinstance(obj, dict):
        return False
    if api == "chat":
        return "error" in obj
    return obj.get("type") in (*FINALS[api], "error") or name in (*FINALS[api], "error")


@dataclass
class Tally:
    requests: int = 0
    server_errors: list[str] = field(default_factory=list)  # 500s
    silent_ends: list[str] = field(default_factory=list)  # streams cut without final/error
    broken_bodies: list[str] = field(default_factory=list)  # the connection dropped mid-body
    statuses: dict[int, int] = field(default_factory=dict)


async def run_case(
    session: aiohttp.ClientSession, h: Harness, fake: FakeProvider, c: Case, t: Tally
) -> None:
    fake.reset()
    for entry in c.entries:
        fake.push(entry)
    what = f"seed={c.seed} {c.api}<-{c.model} stream={c.stream} {c.mode}"
    t.requests += 1
    try:
        async with session.post(
            h.url + PATHS[c.api],
            json=c.body(),
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
            timeout=aiohttp.ClientTimeout(total=10),
        ) as resp:
            status = resp.status
            body = await resp.read()
    except aiohttp.ClientPayloadError:
        t.broken_bodies.append(what)
        return
    t.statuses[status] = t.statuses.get(status, 0) + 1
    if status >= 500 and status not in (502, 503, 504):
        t.server_errors.append(f"{what}: {status} {body[:200]!r}")
    elif c.stream and status == 200 and not ended_properly(c.api, body):
        t.silent_ends.append(f"{what}: ...{body[-300:]!r}")


class Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()[:200]}")


@pytest.fixture
def access_log(tmp_path: Path) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """JSON logs to a file, as ``serve`` writes them; the access-log lines written so far."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    config, fast = structlog.get_config(), logs.fast_json
    path = tmp_path / "stdout"
    with path.open("w") as file:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sys, "stdout", file)
            logs.configure("info", "json")
        structlog.configure(cache_logger_on_first_use=False)

        def lines() -> list[dict[str, Any]]:
            if logs._out is not None:
                logs._out.flush()
            out = []
            for line in path.read_bytes().splitlines():
                entry = orjson.loads(line)
                if entry.get("event") == "request_completed":
                    out.append(entry)
            return out

        yield lines
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.configure(**config)
    logs.fast_json = fast


async def test_fuzz_wrongly_typed_provider_answers(
    make_gateway: Callable[..., Any],
    fake: FakeProvider,
    access_log: Callable[[], list[dict[str, Any]]],
) -> None:
    """Seeded: 300 tampered answers over the three client APIs, same-format and translated,
    JSON and streamed, plain, continued and resumed."""
    h: Harness = await make_gateway(POLICY)
    errors = Errors()
    logging.getLogger().addHandler(errors)
    t = Tally()
    started = time.monotonic()
    try:
        async with aiohttp.ClientSession() as session:
            for c in cases(range(300)):
                await run_case(session, h, fake, c, t)
    finally:
        logging.getLogger().removeHandler(errors)
    elapsed = time.monotonic() - started
    await _settle()
    lines = access_log()
    bad_counts = [
        (line["request_id"], line["tokens"])
        for line in lines
        if not all(
            type(v) is int and 0 <= v <= MAX_COUNT
            for k, v in line["tokens"].items()
            if k != "estimated"  # true when a part's counts were estimated
        )
    ]
    report = (
        f"{t.requests} requests in {elapsed:.1f} s, statuses {t.statuses}; "
        f"500s: {len(t.server_errors)}, silent stream ends: {len(t.silent_ends)}, "
        f"bodies cut: {len(t.broken_bodies)}, access-log lines: {len(lines)}, "
        f"bad counts logged: {len(bad_counts)}, error records: {len(errors.records)}"
    )
    print(report)
    for what in (t.server_errors, t.silent_ends, t.broken_bodies, errors.records):
        for line in what[:8]:
            print("  ", line)
    assert not t.server_errors, report
    assert not t.silent_ends, report
    assert not t.broken_bodies, report
    assert len(lines) == t.requests, report
    assert not bad_counts, report
    assert not errors.records, report
    prompt = h.metric("llm_gateway_tokens_total", team="team-a", model="gpt-test", kind="prompt")
    assert 0 <= prompt <= MAX_COUNT


async def _settle() -> None:
    """Let the access-log callbacks of the last answers run."""
    import asyncio

    for _ in range(5):
        await asyncio.sleep(0.01)


def _set_usage(field_name: str, value: Any, where: str = "usage") -> Tamper:
    """Every ``usage`` object (``where``: the key holding it, nested keys dotted) gets
    ``field_name`` = ``value``."""

    def rewrite(data: Any, index: int) -> Any:
        target = data
        *outer, last = where.split(".")
        for key in outer:
            target = target.get(key) if isinstance(target, dict) else None
        if isinstance(target, dict) and isinstance(target.get(last), dict):
            target[last][field_name] = value
        return data

    return Tamper(rewrite)


async def test_chat_stream_with_nan_usage_is_passed_on_whole(
    make_gateway: Callable[..., Any],
    fake: FakeProvider,
    access_log: Callable[[], list[dict[str, Any]]],
) -> None:
    """The OpenAI SDK streams a chat answer whose usage chunk says ``"prompt_tokens":
    "NaN"``: the gateway does not need the count to relay the answer, so the client gets it
    whole, as the provider sent it; the count is estimated (docs/recovery.md, "Tokens and
    cost")."""
    h: Harness = await make_gateway()
    fake.push((_set_usage("prompt_tokens", "NaN"),))
    client = h.async_openai()
    stream = await client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        usage = chunk.usage or usage
    assert text == "Hello! This is the fake provider answering model fake-model."
    assert usage is not None and usage.prompt_tokens == "NaN"  # passed on as it came
    await _settle()
    (line,) = access_log()
    assert line["status"] == 200 and line["error"] is None
    assert line["tokens"]["prompt"] > 0 and line["tokens"]["completion"] > 0
    assert line["tokens"]["estimated"] is True


async def test_messages_stream_with_a_count_over_64_bits_keeps_its_access_log_line(
    make_gateway: Callable[..., Any],
    fake: FakeProvider,
    access_log: Callable[[], list[dict[str, Any]]],
) -> None:
    """The Anthropic SDK streams an answer whose ``message_delta`` says ``"output_tokens":
    2**70``: passed on whole; the count is estimated (at least message_start's), the
    access-log line is written."""
    h: Harness = await make_gateway()
    fake.push((_set_usage("output_tokens", 2**70),), model="claude-test")
    client = h.async_anthropic()
    async with client.messages.stream(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text == "Hello! This is the fake provider answering model claude-test."
    assert final.usage.output_tokens == 2**70  # the provider's, as it came
    await _settle()
    lines = access_log()
    assert len(lines) == 1, "the access-log line was lost"
    assert lines[0]["status"] == 200 and lines[0]["error"] is None
    # the delta's count is not one: estimated, at least message_start's
    tokens = lines[0]["tokens"]
    assert tokens["prompt"] == 1 and tokens["completion"] >= 1 and tokens["estimated"] is True
    kind = {"team": "team-a", "model": "claude-test", "kind": "completion"}
    assert h.metric("llm_gateway_tokens_total", **kind) == tokens["completion"]


NOT_COUNTS: list[Any] = [-5, 2**70, 2**64 - 1, "12", "NaN", 1.5, True, [3], {"n": 3}]


@pytest.mark.parametrize("value", NOT_COUNTS, ids=repr)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_counts_that_are_not_counts_are_not_counted(
    make_gateway: Callable[..., Any],
    fake: FakeProvider,
    access_log: Callable[[], list[dict[str, Any]]],
    value: Any,
    stream: bool,
) -> None:
    """A prompt count that is not a non-negative 64-bit integer: the answer is the
    provider's (200), its access-log line is written with the prompt estimated, and the
    metrics count the estimate."""
    h: Harness = await make_gateway()
    fake.push((_set_usage("prompt_tokens", value),))
    body: dict[str, Any] = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            h.url + "/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
            timeout=aiohttp.ClientTimeout(total=5),
        ) as resp,
    ):
        status = resp.status
        data = await resp.read()
    assert status == 200, data[:300]
    assert (b"[DONE]" in data) if stream else json.loads(data)["usage"]["completion_tokens"] > 0
    await _settle()
    lines = access_log()
    assert len(lines) == 1, "the access-log line was lost"
    tokens = lines[0]["tokens"]
    assert tokens["prompt"] > 0 and tokens["completion"] > 0 and tokens["estimated"] is True
    prompt = h.metric("llm_gateway_tokens_total", team="team-a", model="gpt-test", kind="prompt")
    assert prompt == tokens["prompt"]


def _null_fields(data: Any, index: int) -> Any:
    """An Anthropic JSON answer whose fields are ``null`` where its format has text."""
    data["content"] = [
        {"type": "text", "text": None},
        {"type": "text", "text": "kept"},
        {"type": "tool_use", "id": None, "name": "f", "input": None},
    ]
    data["stop_sequence"] = None
    return data


def _wrongly_typed_name(data: Any, index: int) -> Any:
    data["content"] = [{"type": "tool_use", "id": "toolu_1", "name": ["f"], "input": {}}]
    return data


async def test_a_translated_answer_hands_the_clients_sdk_its_own_types(
    make_gateway: Callable[..., Any],
    fake: FakeProvider,
    access_log: Callable[[], list[dict[str, Any]]],
) -> None:
    """The OpenAI SDK on a model served in Anthropic's format. An answer whose text, call
    id and input are ``null``: the client gets a chat completion its SDK validates
    strictly, with the text that was text, the call with a default id and ``{}``. An
    answer whose call name is a list: a broken provider's, retried, and the client gets
    the next attempt's answer, never a name that is not text."""
    from openai.types.chat import ChatCompletion

    h: Harness = await make_gateway()
    client = h.async_openai()
    body: Any = {"model": "claude-test", "messages": [{"role": "user", "content": "hi"}]}
    fake.push((Tamper(_null_fields),), model="claude-test")
    raw = await client.chat.completions.with_raw_response.create(**body)
    answer = ChatCompletion.model_validate(raw.http_response.json(), strict=True)
    message = answer.choices[0].message
    assert message.content == "kept"
    (call,) = message.tool_calls or ()
    assert (call.id, call.function.name, call.function.arguments) == ("toolu_2", "f", "{}")

    fake.push((Tamper(_wrongly_typed_name),), model="claude-test")
    raw = await client.chat.completions.with_raw_response.create(**body)
    answer = ChatCompletion.model_validate(raw.http_response.json(), strict=True)
    assert answer.choices[0].message.content == (
        "Hello! This is the fake provider answering model claude-test."
    )
    assert raw.http_response.headers["x-gateway-attempts"] == "2"
    await _settle()
    assert [line["status"] for line in access_log()] == [200, 200]
