"""What the gateway reads of a body, on real sockets: a field no format has costs nothing
however large (other clients' ``/healthz`` stays fast while it is served, count_tokens
included), and a ``type`` that is not a string is a 400 naming it on every endpoint,
in the endpoint's error format, never a 500."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fuzz.live import LiveGateway, error_shape_ok, raw_http
from tests.fuzz.test_request_limits import AUTH, send_while_probing

COUNT = "/v1/messages/count_tokens"


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGateway]:
    root: Path = tmp_path_factory.mktemp("fields")
    g = LiveGateway(root, client_read_timeout_s=30.0).start()
    yield g
    g.stop()


def with_filler(path: str, model: str, values: int) -> bytes:
    """A one-block prompt whose block carries ``values`` zeros in a field no format has
    (2 bytes each: the most values a body of its size can hold, each one a step of a walk
    over every value)."""
    filler = b'"x_filler":[' + b",".join([b"0"] * values) + b"]"
    if path == "/v1/responses":
        head = b'{"model":"%s","input":[{"role":"user","content":[{"type":"input_text",'
    else:
        head = b'{"model":"%s","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text",'
    return head % model.encode() + b'"text":"Say ok.",' + filler + b"}]}]}"


PATHS = [
    (COUNT, "gpt-echo"),  # the gateway's estimate
    ("/v1/chat/completions", "gpt-echo"),  # a context window: compaction sizes the prompt
    ("/v1/messages", "gpt-echo"),  # translated
    ("/v1/responses", "gpt-resp-echo"),
]


@pytest.mark.parametrize(("path", "model"), PATHS, ids=[f"{p} {m}" for p, m in PATHS])
def test_a_large_unknown_field_does_not_stall_others(
    big: LiveGateway, path: str, model: str
) -> None:
    """1.5 million values (3 MB) in a field no format has: answered, and every /healthz
    of another client meanwhile within 0.3 s. The body's parse, depth check and encode
    take about 50 ms together; the estimate, which walked every value, took 0.4 s more on
    its own (and 2 s on chat, where it found the prompt over the model's window)."""
    warm = raw_http(big.port, "POST", path, [AUTH], with_filler(path, model, 1))
    assert warm.status == 200, warm  # (the first translation imports the translators)
    raw = with_filler(path, model, 1_500_000)
    reply, took, slowest = send_while_probing(big, path, raw)
    print(f"\n{path} {model}: {len(raw) / 1e6:.1f} MB -> {reply.status} in {took:.2f} s; "
          f"slowest /healthz {slowest * 1000:.0f} ms")  # fmt: skip
    assert reply.status == 200, reply
    if path == COUNT:
        assert reply.json()["input_tokens"] < 20, reply  # "Say ok." and the message
    assert slowest < 0.3, slowest


def test_the_count_of_a_24_mb_body_ignores_its_unknown_field(big: LiveGateway) -> None:
    """The body measured first: 6 million one-letter strings in a content block's extra
    field (24 MB). The count is that of the text alone; the slowest /healthz meanwhile is
    the body's parse (about 0.3 s on its own), reported, not bounded."""
    strings = b'"x":[' + b",".join([b'"a"'] * 6_000_000) + b"]"
    raw = (
        b'{"model":"gpt-echo","messages":[{"role":"user","content":[{"type":"text",'
        b'"text":"Say ok.",' + strings + b"}]}]}"
    )
    reply, took, slowest = send_while_probing(big, COUNT, raw)
    print(f"\n{len(raw) / 1e6:.1f} MB -> {reply.status} in {took:.2f} s; "
          f"slowest /healthz {slowest * 1000:.0f} ms")  # fmt: skip
    assert reply.status == 200 and reply.json()["input_tokens"] < 20, reply
    assert took < 3.0, took


def _with_type(path: str, model: str, kind: Any, stream: bool) -> tuple[dict[str, Any], str]:
    """A body whose second content part has ``type`` ``kind``, and that part's path."""
    if path == "/v1/responses":
        part = [{"type": "input_text", "text": "hi"}, {"type": kind, "text": "there"}]
        body: dict[str, Any] = {"model": model, "input": [{"role": "user", "content": part}]}
        where = "input[0].content[1].type"
    else:
        part = [{"type": "text", "text": "hi"}, {"type": kind, "text": "there"}]
        body = {"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": part}]}
        where = "messages[0].content[1].type"
    if stream and path != COUNT:
        body["stream"] = True
    return body, where


TYPED = [
    ("/v1/chat/completions", "gpt-echo"),
    ("/v1/chat/completions", "claude-echo"),  # translated
    ("/v1/responses", "gpt-resp-echo"),
    ("/v1/responses", "claude-echo"),
    ("/v1/messages", "claude-echo"),
    ("/v1/messages", "gpt-echo"),
    (COUNT, "claude-echo"),  # counted by the provider
    (COUNT, "gpt-echo"),  # estimated
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("kind", [{"t": "text"}, ["text"]], ids=["object", "array"])
@pytest.mark.parametrize(("path", "model"), TYPED, ids=[f"{p} {m}" for p, m in TYPED])
def test_a_type_that_is_not_a_string_is_400_naming_it(
    big: LiveGateway, path: str, model: str, kind: Any, stream: bool
) -> None:
    """Relayed, translated, counted or estimated, streamed or not: a 400 in the endpoint's
    error format naming the field (its ``param`` in OpenAI's format), before any attempt."""
    body, where = _with_type(path, model, kind, stream)
    big.errors.records.clear()
    before = len(big.upstream.requests)
    reply = raw_http(big.port, "POST", path, [AUTH], orjson.dumps(body))
    assert reply.status == 400, reply
    assert error_shape_ok(reply, path), reply
    error = reply.json()["error"]
    assert where in error["message"] and "must be a string" in error["message"], reply
    if path in ("/v1/chat/completions", "/v1/responses"):
        assert error["param"] == where, reply
    assert len(big.upstream.requests) == before
    assert not big.errors.records
