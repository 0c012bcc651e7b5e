"""Splicing a resumed upstream stream into the client's ongoing stream (gateway/formats/splice.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.formats import MESSAGES
from gateway.formats.endpoints import Endpoint
from gateway.formats.splice import Diverged, Splice, Transcript, partial_response
from gateway.formats.sse import Event, Kind, Splitter, classify_event
from gateway.resilience.continuation import continuation_request, join_texts
from gateway.testing import shapes

ENDPOINTS = [Endpoint.chat, Endpoint.messages, Endpoint.responses]
T = "The quick brown fox jumps over the lazy dog. Then it rests, 休息一下 🦊."
ORIG = {
    Endpoint.chat: "chatcmpl-orig",
    Endpoint.messages: "msg_orig",
    Endpoint.responses: "resp_orig",
}
NEW = {Endpoint.chat: "chatcmpl-new", Endpoint.messages: "msg_new", Endpoint.responses: "resp_new"}
CREATED = 1700000000
TOOL = shapes.FakeToolCall(name="get_weather", arguments='{"city": "Paris"}', call_id="call_1")


def answer(
    endpoint: Endpoint,
    text: str,
    *,
    new: bool = False,
    finish: str = "stop",
    chunks: int = 8,
    tool: shapes.FakeToolCall | None = None,
) -> shapes.FakeAnswer:
    return shapes.FakeAnswer(
        id=(NEW if new else ORIG)[endpoint],
        model="model-b" if new else "model-a",
        text=text,
        finish=finish,
        prompt_tokens=10,
        completion_tokens=20,
        created=CREATED + 99 if new else CREATED,
        chunks=chunks,
        tool_call=tool,
    )


def upstream(endpoint: Endpoint, a: shapes.FakeAnswer) -> list[tuple[Event, bool]]:
    """The answer's SSE events as the relay classifies them, each with its content-delta mark."""
    if endpoint is Endpoint.chat:
        evs = shapes.chat_events(a, include_usage=True)
    elif endpoint is Endpoint.messages:
        evs = shapes.messages_events(a)
    else:
        evs = shapes.responses_events(a, {})
    return [(classify_event(e.encode(), endpoint), e.delta) for e in evs]


def forward(
    t: Transcript, events: list[tuple[Event, bool]], k: int, out: list[bytes]
) -> list[tuple[Event, bool]]:
    """Send events to the client until k content deltas went out (closing events held back);
    returns the events never sent."""
    seen = 0
    for i, (ev, delta) in enumerate(events):
        if (delta and seen == k) or t.closes(ev):
            return events[i:]
        t.observe(ev)
        out.append(ev.raw)
        seen += delta
    return []


def cut(
    endpoint: Endpoint, text: str, k: int, chunks: int = 8, **kw: Any
) -> tuple[Transcript, bytes]:
    """The client's stream so far: the original answer up to its k-th content delta."""
    t = Transcript(endpoint)
    out: list[bytes] = []
    forward(t, upstream(endpoint, answer(endpoint, text, chunks=chunks, **kw)), k, out)
    return t, b"".join(out)


def splice(
    t: Transcript, endpoint: Endpoint, new_text: str, *, regenerate: bool, chunks: int = 5
) -> bytes | Diverged:
    """Feed a resumed stream (new id, model and creation time) through a Splice."""
    sp = Splice(t, endpoint, regenerate=regenerate)
    out: list[bytes] = []
    for ev, _ in upstream(endpoint, answer(endpoint, new_text, new=True, chunks=chunks)):
        r = sp.feed(ev)
        if isinstance(r, Diverged):
            return r
        out.append(r)
    assert sp.done
    return b"".join(out)


def continuation(endpoint: Endpoint, full: str, sent: str) -> str:
    """What a model continuing ``sent`` writes (Anthropic: it saw the prefill trimmed)."""
    shown = sent.rstrip() if endpoint is Endpoint.messages else sent
    return full[len(shown) :]


def parse(body: bytes, endpoint: Endpoint) -> list[Event]:
    s = Splitter()
    events = [classify_event(raw, endpoint) for raw in s.feed(body)]
    assert s.pending == b""
    assert all(e.kind is not Kind.malformed for e in events)
    return events


def check(body: bytes, endpoint: Endpoint) -> str:
    """Assert the client's bytes are one well-formed stream of the original answer; its text."""
    events = parse(body, endpoint)
    objs = [e.data for e in events if e.data is not None]
    if endpoint is Endpoint.chat:
        return _check_chat(events, objs)
    if endpoint is Endpoint.messages:
        return _check_messages(body, objs)
    return _check_responses(body, objs)


def _check_chat(events: list[Event], objs: list[dict[str, Any]]) -> str:
    assert events[-1].kind is Kind.done
    assert {o["id"] for o in objs} == {ORIG[Endpoint.chat]}
    assert {o["created"] for o in objs} == {CREATED}
    assert {o["model"] for o in objs} == {"model-a"}
    choices = [c for o in objs for c in o["choices"]]
    assert all(c["index"] == 0 for c in choices)
    assert sum("role" in c["delta"] for c in choices) == 1
    assert "role" in choices[0]["delta"]
    assert sum(bool(c.get("finish_reason")) for c in choices) == 1
    assert choices[-1]["finish_reason"]
    assert objs[-1]["usage"] is not None and objs[-1]["choices"] == []
    return "".join(c["delta"].get("content") or "" for c in choices)


def _check_messages(body: bytes, objs: list[dict[str, Any]]) -> str:
    types = [o["type"] for o in objs]
    assert types.count("message_start") == 1 and types[0] == "message_start"
    assert objs[0]["message"]["id"] == ORIG[Endpoint.messages]
    assert types[-1] == "message_stop" and types.count("message_stop") == 1
    assert types.count("message_delta") == 1
    started: set[int] = set()
    stopped: set[int] = set()
    text = []
    for o in objs:
        i = o.get("index")
        if o["type"] == "content_block_start":
            assert i not in started and i == len(started)
            started.add(i)
        elif o["type"] == "content_block_delta":
            assert i in started and i not in stopped
            if o["delta"]["type"] == "text_delta":
                text.append(o["delta"]["text"])
        elif o["type"] == "content_block_stop":
            assert i in started and i not in stopped
            stopped.add(i)
    assert started == stopped
    for line in body.split(b"\n\n")[:-1]:  # each event names its type
        head, data = line.split(b"\n", 1)
        assert head == b"event: " + orjson.loads(data[6:])["type"].encode()
    return "".join(text)


def _check_responses(body: bytes, objs: list[dict[str, Any]]) -> str:
    seqs = [o["sequence_number"] for o in objs]
    assert seqs == list(range(len(objs)))
    types = [o["type"] for o in objs]
    assert types.count("response.created") == 1 and types.count("response.in_progress") == 1
    assert objs[0]["response"]["id"] == ORIG[Endpoint.responses]
    assert types[-1] in ("response.completed", "response.incomplete")
    items: dict[int, str] = {}
    parts: set[tuple[int, int]] = set()
    text = []
    for o in objs:
        if o["type"] == "response.output_item.added":
            assert o["output_index"] not in items
            items[o["output_index"]] = o["item"]["id"]
        elif o["type"] == "response.content_part.added":
            key = (o["output_index"], o["content_index"])
            assert key not in parts and items[o["output_index"]] == o["item_id"]
            parts.add(key)
        elif o["type"] == "response.output_text.delta":
            assert (o["output_index"], o["content_index"]) in parts
            assert items[o["output_index"]] == o["item_id"]
            text.append(o["delta"])
    whole = "".join(text)
    done = {o["type"]: o for o in objs if o["type"].endswith(".done")}
    assert done["response.output_text.done"]["text"] == whole
    assert done["response.content_part.done"]["part"]["text"] == whole
    item = done["response.output_item.done"]["item"]
    assert item["id"] == items[0] and item["content"][0]["text"] == whole
    final = objs[-1]["response"]
    assert final["id"] == ORIG[Endpoint.responses] and final["created_at"] == CREATED
    assert final["output"][0]["id"] == items[0]
    assert final["output"][0]["content"][0]["text"] == whole
    assert types.count("response.output_item.added") == 1 == len(items)
    return whole


def resume_ok(endpoint: Endpoint, text: str, k: int, *, regenerate: bool, chunks: int = 8) -> str:
    """Cut the original after k deltas, resume, and return the client's checked text."""
    t, head = cut(endpoint, text, k, chunks)
    assert t.resumable
    sent = t.text
    new = text if regenerate else continuation(endpoint, text, sent)
    tail = splice(t, endpoint, new, regenerate=regenerate)
    assert not isinstance(tail, Diverged), tail
    return check(head + tail, endpoint)


# --- one stream after a resume ---------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 3, 7, 8])
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_prefill_resume_is_one_stream(endpoint: Endpoint, k: int) -> None:
    """A continuation spliced after k deltas gives one valid stream of exactly the text."""
    assert resume_ok(endpoint, T, k, regenerate=False) == T


@pytest.mark.parametrize("k", [0, 1, 3, 7, 8])
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_regenerate_resume_passes_only_the_rest(endpoint: Endpoint, k: int) -> None:
    """A regenerated answer that starts with the text sent adds only what follows."""
    assert resume_ok(endpoint, T, k, regenerate=True) == T


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_cut_at_length_is_continued(endpoint: Endpoint) -> None:
    """An answer cut at the limit (closing events held back) is continued in the same stream."""
    t, head = cut(endpoint, T[:30], k=8, finish="length")
    assert t.resumable and t.text == T[:30]
    tail = splice(t, endpoint, continuation(endpoint, T, T[:30]), regenerate=False)
    assert isinstance(tail, bytes)
    assert check(head + tail, endpoint) == T


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_second_resume_continues_the_same_stream(endpoint: Endpoint) -> None:
    """The splice keeps the transcript current, so a resumed stream can break and resume again."""
    t, head = cut(endpoint, T, 2)
    first = continuation(endpoint, T, t.text)
    sp = Splice(t, endpoint, regenerate=False)
    out = [head]
    events = upstream(endpoint, answer(endpoint, first, new=True, chunks=6))
    seen = 0
    for ev, delta in events:
        if delta and seen == 3:
            break
        r = sp.feed(ev)
        assert isinstance(r, bytes)
        out.append(r)
        seen += delta
    assert not sp.done and t.resumable
    assert T.startswith(t.text) and len(t.text) > len(T) // 4
    tail = splice(t, endpoint, T, regenerate=True)
    assert isinstance(tail, bytes)
    assert check(b"".join(out) + tail, endpoint) == T


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_regenerate_divergence_detected(endpoint: Endpoint) -> None:
    """A regenerated text that differs from the text sent is Diverged, with nothing passed on."""
    t, _ = cut(endpoint, T, 3)
    sent = t.text
    other = sent[:5] + "X" + sent[6:] + " and more"
    sp = Splice(t, endpoint, regenerate=True)
    results = [sp.feed(ev) for ev, _ in upstream(endpoint, answer(endpoint, other, new=True))]
    first = next(i for i, r in enumerate(results) if isinstance(r, Diverged))
    assert all(r == b"" for r in results[:first])
    assert all(r is results[first] for r in results[first:])
    assert "character 5" in results[first].reason  # type: ignore[union-attr]
    assert t.text == sent


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_regenerate_too_short_diverges(endpoint: Endpoint) -> None:
    """A regenerated answer that ends before covering the text sent is Diverged."""
    t, _ = cut(endpoint, T, 5)
    r = splice(t, endpoint, t.text[:-3], regenerate=True)
    assert isinstance(r, Diverged) and "ended" in r.reason


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_regenerate_tool_call_before_text_diverges(endpoint: Endpoint) -> None:
    """A regenerated answer that calls a tool instead of repeating the text is Diverged."""
    t, _ = cut(endpoint, T, 2)
    sp = Splice(t, endpoint, regenerate=True)
    tool = answer(endpoint, "", new=True, tool=TOOL, finish="tool_calls")
    results = [sp.feed(ev) for ev, _ in upstream(endpoint, tool)]
    assert any(isinstance(r, Diverged) for r in results)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_regenerate_after_preamble_only_passes_everything(endpoint: Endpoint) -> None:
    """With no text sent yet, a regenerated answer passes whole, without a second preamble."""
    t, head = cut(endpoint, T, 0)
    assert t.text == "" and t.resumable
    tail = splice(t, endpoint, "Entirely new answer.", regenerate=True)
    assert isinstance(tail, bytes)
    assert check(head + tail, endpoint) == "Entirely new answer."


# --- what is resumable -----------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 3])
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_tool_call_stream_not_resumable(endpoint: Endpoint, k: int) -> None:
    """A stream that is (or started) a tool call is not resumable."""
    t, _ = cut(endpoint, "", k, tool=TOOL, finish="tool_calls")
    assert t.id is not None and not t.resumable


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_nothing_identifying_not_resumable(endpoint: Endpoint) -> None:
    """Before any id reached the client there is nothing to continue."""
    t = Transcript(endpoint)
    t.observe(classify_event(b": keepalive\n\n", endpoint))
    assert not t.resumable and t.text == ""


def test_several_choices_not_resumable() -> None:
    """A chat stream with n > 1 choices is not resumable."""
    t, _ = cut(Endpoint.chat, T, 2)
    chunk = {"id": ORIG[Endpoint.chat], "choices": [{"index": 1, "delta": {"content": "x"}}]}
    t.observe(classify_event(b"data: " + orjson.dumps(chunk) + b"\n\n", Endpoint.chat))
    assert not t.resumable


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_closed_stream_not_resumable(endpoint: Endpoint) -> None:
    """Once the answer's closing events were sent, the stream is not resumable."""
    t = Transcript(endpoint)
    closing = 0
    for ev, _ in upstream(endpoint, answer(endpoint, T)):
        closing += t.closes(ev)
        t.observe(ev)
    assert closing >= 2 and t.text == T and not t.resumable


def test_chat_mid_reasoning_not_resumable() -> None:
    """A chat stream that sent reasoning but no text yet is not resumable."""
    t, _ = cut(Endpoint.chat, T, 0)
    chunk = {
        "id": ORIG[Endpoint.chat],
        "choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}],
    }
    t.observe(classify_event(b"data: " + orjson.dumps(chunk) + b"\n\n", Endpoint.chat))
    assert not t.resumable


def test_anthropic_open_thinking_block_not_resumable() -> None:
    """An Anthropic stream in the middle of a thinking block is not resumable."""
    t, _ = cut(Endpoint.messages, T, 0)
    start = {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "thinking", "thinking": ""},
    }
    t.observe(
        classify_event(b"event: x\ndata: " + orjson.dumps(start) + b"\n\n", Endpoint.messages)
    )
    assert not t.resumable
    t.observe(
        classify_event(b'data: {"type":"content_block_stop","index":1}\n\n', Endpoint.messages)
    )
    assert t.resumable


# --- resumed streams with extra blocks or items ----------------------------------------


def _events(endpoint: Endpoint, objs: list[dict[str, Any]]) -> list[Event]:
    named = endpoint is not Endpoint.chat
    return [
        classify_event(
            (b"event: " + o["type"].encode() + b"\n" if named else b"")
            + b"data: "
            + orjson.dumps(o)
            + b"\n\n",
            endpoint,
        )
        for o in objs
    ]


def test_anthropic_resumed_thinking_block_dropped() -> None:
    """A thinking block before the resumed text is dropped; the text continues the original block."""
    t, head = cut(Endpoint.messages, T, 3)
    rest = continuation(Endpoint.messages, T, t.text)
    objs = [
        orjson.loads(e.data)
        for e in shapes.messages_events(answer(Endpoint.messages, rest, new=True))
    ]
    for o in objs:
        if "index" in o:
            o["index"] += 1
    thinking = [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hmm"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "s"},
        },
        {"type": "content_block_stop", "index": 0},
    ]
    sp = Splice(t, Endpoint.messages, regenerate=False)
    tail = [sp.feed(e) for e in _events(Endpoint.messages, objs[:1] + thinking + objs[1:])]
    assert all(isinstance(r, bytes) for r in tail) and sp.done
    body = head + b"".join(r for r in tail if isinstance(r, bytes))
    assert check(body, Endpoint.messages) == T
    assert b"thinking" not in b"".join(r for r in tail if isinstance(r, bytes))


def test_responses_resumed_reasoning_item_dropped() -> None:
    """A reasoning item before the resumed message is dropped; the text continues the original item."""
    t, head = cut(Endpoint.responses, T, 3)
    rest = continuation(Endpoint.responses, T, t.text)
    objs = [
        orjson.loads(e.data)
        for e in shapes.responses_events(answer(Endpoint.responses, rest, new=True), {})
    ]
    for o in objs:
        if "output_index" in o:
            o["output_index"] += 1
    reasoning = {"id": "rs_1", "type": "reasoning", "summary": []}
    extra = [
        {"type": "response.output_item.added", "output_index": 0, "item": reasoning},
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
    ]
    objs[-1]["response"]["output"].insert(0, reasoning)
    sp = Splice(t, Endpoint.responses, regenerate=False)
    tail = [sp.feed(e) for e in _events(Endpoint.responses, objs[:2] + extra + objs[2:])]
    assert all(isinstance(r, bytes) for r in tail) and sp.done
    body = head + b"".join(r for r in tail if isinstance(r, bytes))
    assert check(body, Endpoint.responses) == T
    assert b"rs_1" not in body


def test_chat_role_chunk_with_content_keeps_content() -> None:
    """A resumed chat role chunk carrying text loses its role, not its text."""
    t, head = cut(Endpoint.chat, T, 2)
    rest = continuation(Endpoint.chat, T, t.text)
    objs = [
        orjson.loads(e.data)
        for e in shapes.chat_events(answer(Endpoint.chat, rest, new=True), True)[:-1]
    ]
    objs[0]["choices"][0]["delta"]["content"] = rest[:4]
    objs[1]["choices"][0]["delta"]["content"] = objs[1]["choices"][0]["delta"]["content"][4:]
    sp = Splice(t, Endpoint.chat, regenerate=False)
    events = [*_events(Endpoint.chat, objs), classify_event(b"data: [DONE]\n\n", Endpoint.chat)]
    tail = b"".join(r for e in events if isinstance(r := sp.feed(e), bytes))
    assert check(head + tail, Endpoint.chat) == T


def test_chat_resumed_reasoning_dropped_after_text() -> None:
    """Reasoning deltas of a resumed chat stream are not sent after the answer's text."""
    t, head = cut(Endpoint.chat, T, 2)
    rest = continuation(Endpoint.chat, T, t.text)
    objs = [
        orjson.loads(e.data)
        for e in shapes.chat_events(answer(Endpoint.chat, rest, new=True), True)[:-1]
    ]
    think = {
        **objs[1],
        "choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}, "finish_reason": None}],
    }
    sp = Splice(t, Endpoint.chat, regenerate=False)
    events = [
        *_events(Endpoint.chat, [objs[0], think, *objs[1:]]),
        classify_event(b"data: [DONE]\n\n", Endpoint.chat),
    ]
    tail = b"".join(r for e in events if isinstance(r := sp.feed(e), bytes))
    assert b"reasoning_content" not in tail
    assert check(head + tail, Endpoint.chat) == T


def test_anthropic_closed_text_block_opens_a_new_one() -> None:
    """After the text block was closed, the continuation goes into a new text block."""
    t, head = cut(Endpoint.messages, T[:20], 8)
    stop = classify_event(
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
        Endpoint.messages,
    )
    t.observe(stop)
    assert t.resumable
    tail = splice(
        t, Endpoint.messages, continuation(Endpoint.messages, T, T[:20]), regenerate=False
    )
    assert isinstance(tail, bytes)
    assert check(head + stop.raw + tail, Endpoint.messages) == T
    assert b'"index":1' in tail


def test_splice_passes_comments_and_drops_errors() -> None:
    """Comments pass as they are; error and malformed events are the relay's business."""
    t, _ = cut(Endpoint.chat, T, 2)
    sp = Splice(t, Endpoint.chat, regenerate=False)
    assert sp.feed(classify_event(b": ping\n\n", Endpoint.chat)) == b": ping\n\n"
    assert sp.feed(classify_event(b"data: {oops\n\n", Endpoint.chat)) == b""
    assert sp.feed(classify_event(b'data: {"error": {"message": "x"}}\n\n', Endpoint.chat)) == b""


# --- Anthropic whitespace trimmed from the prefill -------------------------------------

WS_CASES = [
    ("Hello ", " world", "Hello world"),  # the model writes the trimmed space again
    ("Hello ", "world", "Hello world"),  # it does not
    ("Hello\n\n", "\n\nNext", "Hello\n\nNext"),
    ("Hello ", "  \nNext", "Hello  \nNext"),  # more whitespace than was trimmed
    ("Hello\n\n", "\nNext", "Hello\n\nNext"),  # less: the client keeps what it has
    ("Hello ", "\nNext", "Hello Next"),  # other whitespace: the client keeps what it has
    ("Hello ", " ", "Hello "),  # only whitespace, then the end
    ("Hello ", "", "Hello "),
    ("Hello", " world", "Hello world"),  # nothing was trimmed
]


@pytest.mark.parametrize("chunks", [1, 9])
@pytest.mark.parametrize(("sent", "cont", "client"), WS_CASES)
def test_anthropic_prefill_whitespace(sent: str, cont: str, client: str, chunks: int) -> None:
    """Whitespace trimmed from the Anthropic prefill is neither doubled nor lost."""
    t, head = cut(Endpoint.messages, sent, 8, chunks=3)
    assert t.text == sent
    tail = splice(t, Endpoint.messages, cont, regenerate=False, chunks=chunks)
    assert isinstance(tail, bytes)
    assert check(head + tail, Endpoint.messages) == client
    trimmed = sent[len(sent.rstrip()) :]
    if cont[: len(cont) - len(cont.lstrip())].startswith(trimmed):  # as merge_parts joins them
        assert client == join_texts([sent, cont], MESSAGES)


@pytest.mark.parametrize(("sent", "cont"), [("Hello ", "world"), ("Hello ", " world")])
def test_openai_prefill_appends_as_is(sent: str, cont: str) -> None:
    """OpenAI prefill is not trimmed, so the continuation is appended unchanged."""
    for endpoint in (Endpoint.chat, Endpoint.responses):
        t, head = cut(endpoint, sent, 8, chunks=3)
        tail = splice(t, endpoint, cont, regenerate=False)
        assert isinstance(tail, bytes)
        assert check(head + tail, endpoint) == sent + cont


def test_anthropic_regenerate_keeps_whitespace() -> None:
    """Regeneration compares with the text sent, trailing whitespace included."""
    t, head = cut(Endpoint.messages, "Hello ", 8, chunks=2)
    tail = splice(t, Endpoint.messages, "Hello world", regenerate=True)
    assert isinstance(tail, bytes) and check(head + tail, Endpoint.messages) == "Hello world"
    t, _ = cut(Endpoint.messages, "Hello ", 8, chunks=2)
    assert isinstance(splice(t, Endpoint.messages, "Hello\nworld", regenerate=True), Diverged)


# --- the follow-up request --------------------------------------------------------------

REQUESTS = {
    Endpoint.chat: {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    Endpoint.messages: {
        "model": "m",
        "stream": True,
        "max_tokens": 99,
        "messages": [{"role": "user", "content": "hi"}],
    },
    Endpoint.responses: {"model": "m", "stream": True, "input": "hi"},
}


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_partial_response_feeds_continuation_request(endpoint: Endpoint) -> None:
    """partial_response holds the text sent, as continuation_request reads it."""
    t, _ = cut(endpoint, "Partial answer, then ", 8, chunks=4)
    api = endpoint.fmt
    part = partial_response(t)
    assert api.answer_text(part) == "Partial answer, then "
    follow = continuation_request(REQUESTS[endpoint], [part], api, prefill=True)
    entries = follow["input" if endpoint is Endpoint.responses else "messages"]
    expected = "Partial answer, then" if endpoint is Endpoint.messages else "Partial answer, then "
    assert entries[-1] == {"role": "assistant", "content": expected}


def test_partial_response_refuses_completions() -> None:
    """Legacy completions have no continuation request."""
    with pytest.raises(ValueError):
        partial_response(Transcript(Endpoint.completions))


# --- legacy completions -----------------------------------------------------------------


def test_legacy_completions_regenerate() -> None:
    """A legacy completions stream can be resumed by regeneration."""
    ep = Endpoint.completions
    t = Transcript(ep)
    head = []
    for e in shapes.completion_events(answer(Endpoint.chat, T), False)[:3]:
        ev = classify_event(e.encode(), ep)
        t.observe(ev)
        head.append(ev.raw)
    sp = Splice(t, ep, regenerate=True)
    tail = [
        sp.feed(classify_event(e.encode(), ep))
        for e in shapes.completion_events(answer(Endpoint.chat, T, new=True), True)
    ]
    assert sp.done and all(isinstance(r, bytes) for r in tail)
    objs = [
        e.data
        for e in parse(b"".join(head) + b"".join(r for r in tail if isinstance(r, bytes)), ep)
        if e.data
    ]
    assert {o["id"] for o in objs} == {ORIG[Endpoint.chat]}
    assert "".join(c["text"] for o in objs for c in o["choices"]) == T


# --- random texts and cut points -----------------------------------------------------------

TEXTS = st.text(alphabet=st.sampled_from(list("ab .,\n\t é🦊")), min_size=0, max_size=60)


@settings(
    max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    endpoint=st.sampled_from(ENDPOINTS),
    text=TEXTS,
    k=st.integers(0, 10),
    chunks=st.integers(1, 12),
    new_chunks=st.integers(1, 12),
    regenerate=st.booleans(),
)
def test_random_texts_and_cuts(
    endpoint: Endpoint, text: str, k: int, chunks: int, new_chunks: int, regenerate: bool
) -> None:
    """Any text, cut anywhere, resumed either way, reaches the client whole and once."""
    t, head = cut(endpoint, text, k, chunks)
    assert t.resumable
    sent = t.text
    assert text.startswith(sent)
    new = text if regenerate else continuation(endpoint, text, sent)
    tail = splice(t, endpoint, new, regenerate=regenerate, chunks=new_chunks)
    assert isinstance(tail, bytes)
    assert check(head + tail, endpoint) == text
    assert t.text == text


@settings(max_examples=150, derandomize=True, deadline=None)
@given(text=TEXTS, other=TEXTS, k=st.integers(1, 10), endpoint=st.sampled_from(ENDPOINTS))
def test_random_regeneration_diverges_or_matches(
    text: str, other: str, k: int, endpoint: Endpoint
) -> None:
    """A regenerated text is spliced when it starts with the text sent, else Diverged."""
    t, head = cut(endpoint, text, k)
    sent = t.text
    tail = splice(t, endpoint, other, regenerate=True)
    if other.startswith(sent):
        assert isinstance(tail, bytes) and check(head + tail, endpoint) == other
    else:
        assert isinstance(tail, Diverged)


# --- the official SDKs read the spliced stream -----------------------------------------------


def spliced_body(endpoint: Endpoint) -> bytes:
    t, head = cut(endpoint, T, 3)
    tail = splice(t, endpoint, continuation(endpoint, T, t.text), regenerate=False)
    assert isinstance(tail, bytes)
    return head + tail


def _chunks(body: bytes, size: int = 61) -> Iterator[bytes]:
    for i in range(0, len(body), size):
        yield body[i : i + size]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_official_sdk_reads_spliced_stream(endpoint: Endpoint, aiohttp_server: Any) -> None:
    """The openai and anthropic SDKs' stream helpers accumulate the spliced stream to the text."""
    body = spliced_body(endpoint)

    async def serve(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for piece in _chunks(body):
            await resp.write(piece)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", serve)
    app.router.add_post("/v1/responses", serve)
    app.router.add_post("/v1/messages", serve)
    server = await aiohttp_server(app)
    base = str(server.make_url("/"))
    if endpoint is Endpoint.messages:
        ac = anthropic.AsyncAnthropic(base_url=base, api_key="k", max_retries=0)
        async with ac.messages.stream(
            model="m", max_tokens=9, messages=[{"role": "user", "content": "hi"}]
        ) as s:
            message = await s.get_final_message()
        assert message.id == ORIG[endpoint]
        assert [b.type for b in message.content] == ["text"]
        assert message.content[0].text == T  # type: ignore[union-attr]
        await ac.close()
        return
    oc = openai.AsyncOpenAI(base_url=base + "v1", api_key="k", max_retries=0)
    if endpoint is Endpoint.chat:
        async with oc.chat.completions.stream(
            model="m", messages=[{"role": "user", "content": "hi"}]
        ) as cs:
            completion = await cs.get_final_completion()
        assert completion.id == ORIG[endpoint]
        assert completion.choices[0].message.content == T
    else:
        async with oc.responses.stream(model="m", input="hi") as rs:
            texts = [e.delta async for e in rs if e.type == "response.output_text.delta"]
            response = await rs.get_final_response()
        assert "".join(texts) == T
        assert response.id == ORIG[endpoint] and response.output_text == T
    await oc.close()
