"""ConverseStream events (as the gateway frames them: ``event: <type>`` and the frame's JSON
payload) translated to every client's stream: text without a block start, a tool call
with its input split, the stop before the usage, a body that ends without the usage, an
exception mid-stream; and the translated streams read by the official SDKs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from gateway.formats import CHAT, CONVERSE, MESSAGES, RESPONSES, sse
from gateway.translate import convert
from tests.translate.test_streams import (
    check_anthropic,
    check_chat,
    check_responses,
    parse,
    summarize,
    translate,
    translator,
)
from tests.translate.test_streams_props import _leaves as leaves
from tests.translate.test_streams_props import _set as set_at
from tests.translate.test_streams_props import _typed as typed
from tests.translate.test_streams_sdk import PATHS, Served, final_of

FORMATS = ("chat", "messages", "responses")
CLIENTS = {"chat": CHAT, "messages": MESSAGES, "responses": RESPONSES}
CHECK = {"chat": check_chat, "messages": check_anthropic, "responses": check_responses}


def ev(name: str, payload: dict[str, Any]) -> bytes:
    """One ConverseStream event as the gateway frames it."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def delta(index: int, d: dict[str, Any]) -> bytes:
    return ev("contentBlockDelta", {"contentBlockIndex": index, "delta": d, "p": "abcdefgh"})


START = ev("messageStart", {"role": "assistant", "p": "abcdefghijklmnopqrstu"})
STOP = {r: ev("messageStop", {"stopReason": r, "p": "ab"}) for r in ("end_turn", "tool_use", "max_tokens")}  # fmt: skip
METADATA = ev(
    "metadata",
    {
        "usage": {"inputTokens": 12, "outputTokens": 9, "totalTokens": 21},
        "metrics": {"latencyMs": 312},
        "p": "abcdef",
    },
)
# A text answer: Converse sends a text block's deltas with no contentBlockStart.
TEXT = (
    START
    + delta(0, {"text": "Hello"})
    + delta(0, {"text": ", world"})
    + ev("contentBlockStop", {"contentBlockIndex": 0, "p": "abc"})
)
# Text, then a tool call whose input arrives in pieces.
TOOL = (
    TEXT
    + ev(
        "contentBlockStart",
        {
            "contentBlockIndex": 1,
            "start": {"toolUse": {"toolUseId": "tooluse_Qx1", "name": "get_weather"}},
            "p": "abcd",
        },
    )
    + delta(1, {"toolUse": {"input": '{"city": '}})
    + delta(1, {"toolUse": {"input": '"Oslo", "days"'}})
    + delta(1, {"toolUse": {"input": ": 2}"}})
    + ev("contentBlockStop", {"contentBlockIndex": 1})
)
THINKING = (
    START
    + delta(0, {"reasoningContent": {"text": "Short "}})
    + delta(0, {"reasoningContent": {"text": "answer."}})
    + delta(0, {"reasoningContent": {"signature": "c2lnbmF0dXJl"}})
    + ev("contentBlockStop", {"contentBlockIndex": 0})
    + delta(1, {"text": "Yes."})
    + ev("contentBlockStop", {"contentBlockIndex": 1})
)
ERROR = ev(
    "error",
    {
        "type": "error",
        "error": {"type": "throttlingException", "message": "Too many tokens, slow down"},
    },
)

STREAMS: dict[str, tuple[bytes, dict[str, Any]]] = {
    "text": (
        TEXT + STOP["end_turn"] + METADATA,
        {
            "text": "Hello, world",
            "reasoning": "",
            "calls": [],
            "stop": "end_turn",
            "usage": (12, 9),
        },
    ),
    "tool": (
        TOOL + STOP["tool_use"] + METADATA,
        {
            "text": "Hello, world",
            "reasoning": "",
            "calls": [("tooluse_Qx1", "get_weather", {"city": "Oslo", "days": 2})],
            "stop": "tool_use",
            "usage": (12, 9),
        },
    ),
    "cut": (
        TEXT + STOP["max_tokens"] + METADATA,
        {
            "text": "Hello, world",
            "reasoning": "",
            "calls": [],
            "stop": "max_tokens",
            "usage": (12, 9),
        },
    ),
    "thinking": (
        THINKING + STOP["end_turn"] + METADATA,
        {
            "text": "Yes.",
            "reasoning": "Short answer.",
            "calls": [],
            "stop": "end_turn",
            "usage": (12, 9),
        },
    ),
}


def pieces(raw: bytes, size: int) -> list[bytes]:
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def through_splitter(raw: bytes, target: str, size: int = 7) -> list[bytes]:
    """The stream as the attempter reads it: arbitrary reads, convert's Splitter."""
    split = convert.TranslatingSplitter(CONVERSE, CLIENTS[target], "public-model", True)
    out: list[bytes] = []
    for piece in pieces(raw, size):
        out += split.feed(piece)
    return out + split.close()


@pytest.mark.parametrize("target", FORMATS)
@pytest.mark.parametrize("name", sorted(STREAMS))
def test_converse_streams_reach_every_client(name: str, target: str) -> None:
    """Each stream, read in small pieces, is the client's well-formed stream saying what
    the Converse stream said: text, reasoning, tool calls (their input joined), the stop
    and the usage; the ``p`` padding is ignored."""
    raw, want = STREAMS[name]
    out = through_splitter(raw, target)
    CHECK[target](out)
    got = summarize(target, out)
    if target == "messages":
        assert got.pop("signature") == ("c2lnbmF0dXJl" if name == "thinking" else "")
    assert got == want
    assert all(b'"model":"public-model"' in e for e in out if b'"model"' in e)


@pytest.mark.parametrize("target", FORMATS)
def test_the_client_stream_closes_only_after_the_metadata(target: str) -> None:
    """messageStop makes the stream complete but sends nothing: the closing events (with
    the usage) wait for the metadata event that follows it."""
    raw, _ = STREAMS["text"]
    events = sse.Splitter().feed(raw)
    t = translator("converse", target)
    out = [e for event in events[:-1] for e in t.feed(event)]
    assert t.final_seen and not t.done
    closing = t.feed(events[-1])
    assert t.done and closing
    if target == "messages":
        assert parse(closing)[0][1]["usage"]["input_tokens"] == 12
    assert summarize(target, out + closing)["usage"] == (12, 9)


@pytest.mark.parametrize("target", FORMATS)
def test_a_body_ending_after_message_stop_without_metadata_closes(target: str) -> None:
    """The body ends after messageStop with no metadata: finish() closes the client's stream
    (zero usage, or none for Responses), nothing is lost."""
    out, t = translate(TEXT + STOP["end_turn"], "converse", target)
    assert t.done
    CHECK[target](out)
    got = summarize(target, out)
    assert got["text"] == "Hello, world" and got["stop"] == "end_turn"
    assert got["usage"] in (None, (0, 0))


@pytest.mark.parametrize("target", FORMATS)
def test_metadata_before_message_stop_closes_at_message_stop(target: str) -> None:
    """Should the metadata come first, the stream closes at messageStop, once."""
    out, t = translate(TEXT + METADATA + STOP["end_turn"], "converse", target)
    assert t.done
    CHECK[target](out)
    assert summarize(target, out)["usage"] == (12, 9)


@pytest.mark.parametrize("target", FORMATS)
def test_a_cut_stream_owes_nothing(target: str) -> None:
    """A body that ends before messageStop is not complete: finish() adds nothing (the
    relay ends the stream with its own error event)."""
    _, t = translate(TEXT, "converse", target)
    assert not t.final_seen and not t.done
    assert t.finish() == []


@pytest.mark.parametrize("target", FORMATS)
@pytest.mark.parametrize(
    "error",
    [
        ERROR,
        ev("throttlingException", {"message": "Too many tokens, slow down"}),
    ],
)
def test_an_exception_mid_stream_is_the_clients_error_event(error: bytes, target: str) -> None:
    """An exception event after some text (as the gateway frames it, or named as AWS names
    it) ends the client's stream with its own error event carrying the message; later
    events are dropped."""
    out, t = translate(TEXT + error + STOP["end_turn"] + METADATA, "converse", target)
    assert t.done
    got = summarize(target, out)
    err = got["error"]["error"] if target == "responses" else got["error"]
    assert err["message"] == "Too many tokens, slow down"
    assert err["type"] == ("rate_limit_error" if target == "messages" else "requests")


def test_the_splitter_hands_an_error_event_on_as_the_provider_sent_it() -> None:
    """In the attempter's Splitter an exception event is passed on untranslated, so that
    it is classified as the provider's error."""
    out = through_splitter(TEXT + ERROR, "chat", size=1000)
    assert out[-1] == ERROR
    assert sse.is_error_event(out[-1])


def test_undecodable_events_are_dropped_and_counted() -> None:
    """A payload that is not JSON, or a field of the wrong type, is dropped and counted;
    the stream goes on."""
    bad = b"event: contentBlockDelta\ndata: {not json\n\n"
    raw = TEXT + bad + ev("contentBlockDelta", {"contentBlockIndex": 0, "delta": "x"})
    out, t = translate(raw + STOP["end_turn"] + METADATA, "converse", "chat")
    assert t.malformed == 2
    assert summarize("chat", out)["text"] == "Hello, world"


def test_unknown_events_and_server_tool_blocks_are_dropped() -> None:
    """An event type with no equivalent is ignored; a server tool's block is not the
    client's tool call."""
    server = ev(
        "contentBlockStart",
        {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "s1", "name": "web", "type": "server_tool_use"}}},
    )  # fmt: skip
    raw = TEXT + ev("somethingNew", {"x": 1}) + server + delta(1, {"toolUse": {"input": "{}"}})
    out, t = translate(raw + STOP["end_turn"] + METADATA, "converse", "messages")
    assert t.malformed == 0
    assert summarize("messages", out)["calls"] == []


# ---------------------------------------------------------------- the official SDKs


@pytest.fixture
async def sdk_server(aiohttp_server: Callable[..., Any]) -> AsyncIterator[tuple[Served, str]]:
    s = Served()
    app = web.Application()
    for path in PATHS.values():
        app.router.add_post(path, s.handle)
    server = await aiohttp_server(app)
    yield s, str(server.make_url(""))


SDK_STOP = {
    "chat": {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"},
    "messages": {"end_turn": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens"},
    "responses": {"end_turn": "completed", "tool_use": "completed", "max_tokens": "incomplete"},
}


@pytest.mark.parametrize("target", FORMATS)
@pytest.mark.parametrize("name", ["text", "tool", "thinking"])
async def test_official_sdks_read_the_translated_stream(
    sdk_server: tuple[Served, str], name: str, target: str
) -> None:
    """The client's official SDK streams the translated Converse stream to a final message
    with its text, reasoning, tool calls, stop and usage."""
    s, base = sdk_server
    raw, want = STREAMS[name]
    s.body = b"".join(through_splitter(raw, target))
    got = await final_of(target, base)
    assert got["text"] == want["text"] and got["reasoning"] == want["reasoning"]
    assert got["calls"] == want["calls"]
    assert got["stop"] == SDK_STOP[target][want["stop"]]
    assert got["usage"] == want["usage"] and got["model"] == "public-model"


async def test_official_sdks_read_a_cut_stream_as_cut(sdk_server: tuple[Served, str]) -> None:
    """A stream cut at maxTokens reads as cut in the SDKs: Anthropic's final message stops
    for ``max_tokens``; OpenAI's chat helper refuses a ``length`` finish as such."""
    s, base = sdk_server
    raw, want = STREAMS["cut"]
    s.body = b"".join(through_splitter(raw, "messages"))
    got = await final_of("messages", base)
    assert (got["text"], got["stop"], got["usage"]) == (want["text"], "max_tokens", (12, 9))
    s.body = b"".join(through_splitter(raw, "chat"))
    with pytest.raises(openai.LengthFinishReasonError):
        await final_of("chat", base)


@pytest.mark.parametrize("target", FORMATS)
async def test_official_sdks_raise_on_a_translated_exception(
    sdk_server: tuple[Served, str], target: str
) -> None:
    """An exception mid-stream, translated, makes the client's SDK raise with its message."""
    s, base = sdk_server
    out, _ = translate(TEXT + ERROR, "converse", target)
    s.body = b"".join(out)
    errors = (anthropic.APIError,) if target == "messages" else (openai.APIError,)
    with pytest.raises(errors) as info:
        await final_of(target, base)
    assert "Too many tokens, slow down" in str(info.value)


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_every_byte_boundary_gives_the_same_events(name: str) -> None:
    """Read one byte at a time, a Converse stream gives the events it gives read whole (ids
    aside: a Converse stream has none, so each translation draws its own)."""
    raw, _ = STREAMS[name]
    for target in FORMATS:
        whole = through_splitter(raw, target, size=len(raw))
        bytewise = through_splitter(raw, target, size=1)
        assert summarize(target, bytewise) == summarize(target, whole)
        assert len(bytewise) == len(whole)


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_every_field_of_the_wrong_type_never_breaks_the_output(name: str) -> None:
    """Each field of each Converse event, in turn, a number and an object: no raise, whole
    events, text fields text, for every client format."""
    raw, _ = STREAMS[name]
    evs = sse.Splitter().feed(raw)
    for i, event in enumerate(evs):
        head, _, payload = event.partition(b"data: ")
        obj = orjson.loads(payload)
        for path in leaves(obj):
            for value in (7, {"a": 1}):
                mutated = [*evs]
                changed = set_at(orjson.loads(payload), path, value)
                mutated[i] = head + b"data: " + orjson.dumps(changed) + b"\n\n"
                for target in FORMATS:
                    t = translator("converse", target)
                    out = [b for e in mutated for b in t.feed(e)] + t.finish()
                    for e in out:
                        assert e.endswith(b"\n\n") and b"\n\n" not in e[:-2]
                    for _, d in parse(out):
                        if d != "[DONE]":
                            typed(d)
