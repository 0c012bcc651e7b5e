"""What a stream delivered, counted two ways that must agree: the running count the relay
keeps when it keeps no transcript (:meth:`Format.stream_output`, event by event) and the
transcript's :attr:`~gateway.formats.transcript.Transcript.output`. Both count what the
model wrote: text, reasoning, tool calls' names and arguments, in the token estimate's
units (a character outside ASCII as its UTF-8 bytes). Pure: the fake's own stream shapes,
no sockets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from gateway.formats import sse
from gateway.formats.endpoints import Endpoint
from gateway.formats.parts import text_size
from gateway.formats.transcript import Transcript
from gateway.testing.answer import FakeAnswer, FakeEvent, FakeToolCall
from gateway.testing.anthropic_shapes import messages_events
from gateway.testing.openai_shapes import chat_events, completion_events
from gateway.testing.responses_shapes import responses_events

pytestmark = pytest.mark.fast

TEXT = "Grüße aus Zürich, 東京 and plain ASCII. " * 5
CALL = FakeToolCall("get_weather", '{"city": "Zürich", "days": 3}', "call_1")
SHAPES: dict[Endpoint, Callable[[FakeAnswer], list[FakeEvent]]] = {
    Endpoint.chat: lambda a: chat_events(a, True),
    Endpoint.completions: lambda a: completion_events(a, True),
    Endpoint.messages: messages_events,
    Endpoint.responses: lambda a: responses_events(a, {}),
}


def answer(tool: FakeToolCall | None) -> FakeAnswer:
    return FakeAnswer(id="ans_1", model="m", text="" if tool else TEXT,
                  finish="tool_calls" if tool else "stop", prompt_tokens=10,
                  completion_tokens=50, created=0, chunks=7, tool_call=tool)  # fmt: skip


def counted(ep: Endpoint, events: list[FakeEvent]) -> tuple[int, int | None]:
    """The running count over ``events``, and the transcript's (None: none is kept for
    this endpoint)."""
    tx = Transcript(ep) if ep.continuable else None
    running = 0
    for e in events:
        ev = sse.classify_event(e.encode(), ep)
        if isinstance(ev.data, dict):
            running += ep.fmt.stream_output(ev.data)
        if tx is not None:
            tx.observe(ev)
    return running, None if tx is None else tx.output


@pytest.mark.parametrize("ep", list(SHAPES), ids=lambda ep: ep.name)
@pytest.mark.parametrize("tool", [None, CALL], ids=["text", "tool_call"])
def test_the_running_count_and_the_transcript_agree(
    ep: Endpoint, tool: FakeToolCall | None
) -> None:
    """A text answer counts its text; a tool call its name and arguments, both ways."""
    if tool is not None and ep is Endpoint.completions:
        pytest.skip("legacy completions have no tool calls")
    running, kept = counted(ep, SHAPES[ep](answer(tool)))
    want = text_size(tool.name + tool.arguments) if tool else text_size(TEXT)
    assert running == want
    assert kept in (None, want)


def chat_chunk(delta: dict[str, Any]) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


@pytest.mark.parametrize(
    ("ep", "data", "want"),
    [
        (Endpoint.chat, chat_chunk({"reasoning_content": "think"}), 5),
        (Endpoint.chat, chat_chunk({"refusal": "no"}), 2),
        (Endpoint.chat, chat_chunk({"function_call": {"name": "f", "arguments": "{}"}}), 3),
        (Endpoint.messages, {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "thinking_delta", "thinking": "hmm"}}, 3),
        (Endpoint.responses, {"type": "response.reasoning_summary_text.delta",
                              "delta": "why"}, 3),
        (Endpoint.responses, {"type": "response.refusal.delta", "delta": "no"}, 2),
    ],
)  # fmt: skip
def test_reasoning_and_refusals_are_output(ep: Endpoint, data: dict[str, Any], want: int) -> None:
    """What the model wrote besides the text counts the same both ways."""
    assert ep.fmt.stream_output(data) == want
    tx = Transcript(ep)
    tx.observe(sse.Event(b"", sse.DATA, data))
    assert tx.output == want


@pytest.mark.parametrize("ep", list(SHAPES), ids=lambda ep: ep.name)
@pytest.mark.parametrize(
    "data",
    [
        {"choices": "x"},
        {"choices": [None, {"delta": []}, {"delta": {"content": 5, "tool_calls": [3]}}]},
        {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": {}}}]}}]},
        {"type": ["content_block_delta"], "delta": "x"},
        {"type": "content_block_delta", "delta": {"type": {}, "text": "x"}},
        {"type": "content_block_start", "content_block": {"text": 1, "name": None}},
        {"type": "response.output_text.delta", "delta": 7},
        {"type": "response.output_item.added", "item": "x"},
    ],
)
def test_a_field_of_the_wrong_type_counts_nothing(ep: Endpoint, data: dict[str, Any]) -> None:
    """Never raises: the count is read from every event the relay passes on."""
    assert ep.fmt.stream_output(orjson.loads(orjson.dumps(data))) == 0
