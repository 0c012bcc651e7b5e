"""The pure readers of provider answers against fields of the wrong type (hypothesis).

Valid answers and stream events of every API, with one or more fields replaced by any
JSON value, go through what the gateway reads in them: event classification, preamble,
usage, the transcript of a stream, an answer cut at the token limit, its text, and the
merge of continued parts. None of them may raise; a count is always a non-negative
64-bit integer; a transcript that met an event it could not read is not resumable.
The wire tests are in tests/security/test_broken_provider_answers.py.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.formats import sse
from gateway.formats.endpoints import Endpoint
from gateway.formats.transcript import Transcript, partial_response
from gateway.formats.usage import Usage, token_count
from gateway.resilience import continuation
from gateway.testing import shapes
from gateway.translate import usage as tusage
from tests.json_paths import paths

pytestmark = pytest.mark.fast

ANSWER = shapes.FakeAnswer(
    id="x1", model="m", text="Hello there, a cut answer", finish="length",
    prompt_tokens=5, completion_tokens=7, created=1, chunks=4,
)  # fmt: skip
TOOL = shapes.FakeAnswer(
    id="x2", model="m", text="", finish="tool_calls", prompt_tokens=5, completion_tokens=7,
    created=1, chunks=3, tool_call=shapes.FakeToolCall("f", '{"a": 1}', "call_1"),
)  # fmt: skip
API = {ep: ep.fmt for ep in (Endpoint.chat, Endpoint.messages, Endpoint.responses)}


def _events(ep: Endpoint, a: shapes.FakeAnswer) -> list[shapes.FakeEvent]:
    if ep is Endpoint.chat:
        return shapes.chat_events(a, include_usage=True)
    if ep is Endpoint.messages:
        return shapes.messages_events(a)
    return shapes.responses_events(a, {})


def _answer(ep: Endpoint, a: shapes.FakeAnswer) -> dict[str, Any]:
    if ep is Endpoint.chat:
        return shapes.chat_json(a)
    if ep is Endpoint.messages:
        return shapes.messages_json(a)
    return shapes.responses_json(a, {})


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["NaN", "", "12", "length", "max_tokens", "text", "message_stop"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def broken(draw: st.DrawFn, obj: Any) -> Any:
    """``obj`` with one to three fields given any JSON value."""
    obj = copy.deepcopy(obj)
    for _ in range(draw(st.integers(1, 3))):
        every = paths(obj)
        if not every:
            break
        path = draw(st.sampled_from(every))
        target = obj
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = draw(JSON)
    return obj


@st.composite
def broken_stream(draw: st.DrawFn) -> tuple[Endpoint, list[bytes]]:
    ep = draw(st.sampled_from(list(API)))
    events = _events(ep, draw(st.sampled_from([ANSWER, TOOL])))
    hit = set(draw(st.lists(st.integers(0, len(events) - 1), min_size=1, max_size=3)))
    out = []
    for i, e in enumerate(events):
        if i in hit and not e.done:
            e = shapes.FakeEvent(shapes.dump(draw(broken(json.loads(e.data)))), e.event)
        out.append(e.encode())
    return ep, out


FUZZ = settings(max_examples=100, deadline=None, derandomize=True)
MAX = 2**63 - 1


@FUZZ
@given(broken_stream())
def test_stream_readers_never_raise_on_wrong_types(case: tuple[Endpoint, list[bytes]]) -> None:
    ep, raws = case
    classify = sse.classifier(ep)
    tx = Transcript(ep)
    for raw in raws:
        r, kind, data = classify(raw)
        ev = sse.Event(r, kind, data)
        sse.is_preamble(ev)
        u = sse.usage_of(data, ep)
        counts = () if u is None else (u.input, u.output, u.cache_read, u.cache_creation)
        assert all(type(n) is int and 0 <= n <= MAX for n in counts)
        if not tx.record(kind, data):
            continue
        tx.closes(ev)
        tx.observe(ev)
    text = tx.text
    assert isinstance(text, str)
    if tx.resumable:  # then what it knows makes the earlier part of a continuation
        continuation.continuation_request(
            {"messages": [{"role": "user", "content": "hi"}]},
            [partial_response(tx)],
            API[ep],
            prefill=True,
        )


def test_an_event_the_transcript_cannot_read_is_not_resumable() -> None:
    tx = Transcript(Endpoint.messages)
    for e in shapes.messages_events(ANSWER)[:4]:
        ev = sse.classify_event(e.encode(), Endpoint.messages)
        tx.record(ev.kind, ev.data)
    assert tx.resumable and tx.text
    bad = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}}
    tx.record(sse.DATA, bad)  # a text that is a number
    assert tx.text == "Hello t" and not tx.resumable  # the text parts only
    tx = Transcript(Endpoint.messages)
    tx.record(sse.DATA, {"type": "content_block_start", "index": "0", "content_block": {}})
    assert tx.unreadable and not tx.resumable


@FUZZ
@given(
    st.sampled_from(list(API)).flatmap(
        lambda ep: st.tuples(st.just(ep), broken(_answer(ep, ANSWER)))
    )
)
def test_answer_readers_never_raise_on_wrong_types(case: tuple[Endpoint, dict[str, Any]]) -> None:
    ep, data = case
    api = API[ep]
    api.cut_at_length(data)
    assert isinstance(api.answer_text(data), str)
    good = _answer(ep, ANSWER)
    for parts in ([good, data], [data, good], [data, data]):
        merged = continuation.merge_parts(parts, api)
        assert isinstance(api.answer_text(merged), str)


@FUZZ
@given(JSON)
def test_token_counts_are_non_negative_64_bit_integers(value: Any) -> None:
    n = token_count(value)
    assert type(n) is int and 0 <= n <= MAX
    whole = type(value) is int or (type(value) is float and math.isfinite(value) and value % 1 == 0)
    assert n == (int(value) if whole and 0 <= value <= MAX else 0)
    orjson.dumps(n)
    for read in (tusage.from_chat, tusage.from_anthropic, tusage.from_responses):
        fields = ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
                  "cache_read_input_tokens", "cache_creation_input_tokens")  # fmt: skip
        u = read(dict.fromkeys(fields, value))
        assert all(0 <= c <= MAX for c in (u.input, u.output, u.cache_read, u.cache_creation))


def test_usage_of_counts_only_counts() -> None:
    chat, msgs = Endpoint.chat, Endpoint.messages
    both = ("input", "output")
    assert sse.usage_of({"usage": {"prompt_tokens": "NaN", "completion_tokens": 3}}, chat) == (
        Usage(0, 3, invalid=("input",))
    )
    assert sse.usage_of({"usage": {"prompt_tokens": -1, "completion_tokens": 2**64}}, chat) == (
        Usage(0, 0, invalid=both)
    )
    assert sse.usage_of({"usage": {"prompt_tokens": 1.5, "completion_tokens": True}}, chat) == (
        Usage(0, 0, invalid=both)
    )
    assert sse.usage_of({"usage": {"prompt_tokens": 7.0, "completion_tokens": None}}, chat) == (
        Usage(7, 0)
    )
    assert sse.usage_of({"type": "message_start", "message": "x"}, msgs) is None
    assert sse.usage_of({"type": "message_delta", "usage": [1]}, msgs) is None
    assert sse.usage_of({"type": ["message_stop"]}, Endpoint.responses) is None
    assert sse.usage_of({"type": "message_delta", "usage": {"output_tokens": 9}}, msgs) == Usage(
        0, 9
    )


def test_a_finish_reason_of_another_type_is_not_final() -> None:
    raw = b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":7}]}\n\n'
    assert sse.classifier(Endpoint.chat)(raw)[1] is sse.DATA
    assert sse.classify_event(raw, Endpoint.chat).kind is sse.DATA
    raw = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    assert sse.classifier(Endpoint.chat)(raw)[1] is sse.FINAL
