"""The stream relay's fast paths (gateway/formats/sse.py, transcript.py) say what the general
paths say: the same events, kinds, data and transcript, for the usual event and the tricky ones."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.formats import sse
from gateway.formats.chat_stream import read_choice, read_texts
from gateway.formats.endpoints import Endpoint
from gateway.formats.transcript import Transcript

pytestmark = pytest.mark.fast

CHUNK = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}\n\n'
)
DELTA = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"hi"}}\n\n'
)


def data(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


EVENTS = [
    CHUNK,
    DELTA,
    data({"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    data({"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
    data({"id": "c1", "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": ""}]}),
    data({"choices": [7, {"finish_reason": "length"}]}),
    data({"choices": "not a list"}),
    data({"error": {"message": "overloaded"}}),
    data({"error": {"message": "x"}, "choices": []}),
    data({"type": "error", "error": {"type": "overloaded_error"}}),
    data({"type": "error", "choices": []}),
    data({"type": 5, "choices": [{"finish_reason": "stop"}]}),
    data({"type": "message_stop"}),
    data({"type": "response.completed", "response": {}}),
    data([1, 2]),
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    b'event: error\ndata: {"type":"error","error":{}}\n\n',
    b'event: response.failed\ndata: {"type":"response.failed"}\n\n',
    b'event: x\ndata: {"type":7}\n\n',
    b"event: ping\n\n",
    b"data: [DONE]\n\n",
    b": keepalive\n\n",
    b"data: {oops\n\n",
    b"event: x\ndata: {oops\n\n",
    b'data: {"a":\n1}\n\n',  # two lines: the second is no field, so not JSON
    b'data: {"a":1}\ndata: {"b":2}\n\n',
    b'data:{"choices":[]}\n\n',
    b'data: {"choices":[]}  \n\n',
    b'data: {"choices":[]}\nX',  # not ending in a blank line (the splitter never yields it)
    b"data: {\n\n",
    b'id: 7\ndata: {"choices":[]}\n\n',
]
ENDPOINTS = [Endpoint.chat, Endpoint.completions, Endpoint.messages, Endpoint.responses]


@pytest.mark.parametrize("raw", EVENTS)
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e.value)
def test_classifier_fast_path_says_what_the_general_path_says(
    raw: bytes, endpoint: Endpoint
) -> None:
    finals = endpoint.fmt.final_events
    general = sse._classify(raw, finals)
    assert sse.classifier(endpoint)(raw) == general
    assert sse.classify_event(raw, endpoint) == sse.Event(*general)


def general_split(pieces: list[bytes]) -> list[list[bytes]]:
    s = sse.Splitter()
    return [s._split(p) for p in pieces]


def split(pieces: list[bytes]) -> list[list[bytes]]:
    s = sse.Splitter()
    return [s.feed(p) for p in pieces]


@pytest.mark.parametrize(
    "pieces",
    [
        [CHUNK],
        [DELTA],
        [CHUNK + CHUNK],  # two events in one piece
        [CHUNK[:40], CHUNK[40:]],  # an event split across pieces
        [CHUNK[:-1], b"\n"],
        [CHUNK[:-2], b"\n\n" + CHUNK],
        [DELTA[:10], DELTA[10:] + CHUNK[:5], CHUNK[5:]],
        [CHUNK.replace(b"\n", b"\r\n")],  # \r\n line ends
        [DELTA.replace(b"\n", b"\r\n")],
        [b"data: x\r", b"\n\r\n"],
        [CHUNK + b"\n"],  # a trailing extra newline
        [b"\n" + CHUNK],
        [b"\n\n", CHUNK],
        [b"\n\n\n\n"],
        [b"data: a\n\n\ndata: b\n\n"],
        [b"event: x\n\ndata: {}\n\n"],  # a blank line after the name: two events
        [b"event: x\ndata: {}\nid: 1\n\n"],
        [b"event: x\ndata: {}\n"],  # incomplete
        [b"data: {}"],
        [b": keepalive\n\n"],
        [b"data: [DONE]\n\n"],
        [b"x\n\n"],
        [b"\n"],
    ],
)
def test_splitter_fast_path_says_what_the_general_path_says(pieces: list[bytes]) -> None:
    assert split(pieces) == general_split(pieces)
    s = sse.Splitter()
    for p in pieces:
        s.feed(p)
    g = sse.Splitter()
    for p in pieces:
        g._split(p)
    assert s.pending == g.pending


def choice(**fields: Any) -> dict[str, Any]:
    return {"index": 0, "delta": {"content": "t"}, "finish_reason": None, **fields}


CHOICES: list[Any] = [
    [choice()],
    [choice(), choice(index=1)],
    [choice(delta={"content": ""})],
    [choice(delta={"content": "a", "tool_calls": [{}]})],
    [choice(delta={"refusal": "no"})],
    [choice(delta={"content": None, "reasoning_content": "hm"})],
    [choice(delta={"reasoning": "hm"})],
    [choice(delta={"content": 5, "function_call": {}})],
    [choice(delta="no dict")],
    [choice(finish_reason="stop")],
    [{"delta": {"content": "no index"}, "finish_reason": None}],
    [{"index": 0, "delta": {"content": "no finish_reason"}}],
    [{"index": 0, "finish_reason": "stop"}],
    [{"index": 0, "text": "legacy", "finish_reason": None}],
    [7, "x", None, [1]],
    [],
    "no list",
    None,
]


@pytest.mark.parametrize("endpoint", [Endpoint.chat, Endpoint.completions], ids=lambda e: e.value)
def test_transcript_usual_choice_path_records_what_the_general_path_does(
    endpoint: Endpoint,
) -> None:
    fast, general = Transcript(endpoint), Transcript(endpoint)
    for choices in CHOICES:
        obj = {"id": "c1", "choices": choices, "usage": None}
        assert fast.record(sse.DATA, obj) is False
        general.id = "c1"  # what the first event sets: the general path from here on
        for c in choices if isinstance(choices, list) else ():
            if endpoint is Endpoint.chat:
                read_choice(general, c)
        if endpoint is Endpoint.completions and isinstance(choices, list):
            read_texts(general, choices)
        assert fast.text == general.text
        for name in ("choice_index", "multiple_choices", "tool", "non_text", "reasoning"):
            assert getattr(fast, name) == getattr(general, name), name
        assert fast.closed == general.closed
