"""Property tests for JSON answers: an answer (text, tool calls with ids, reasoning, stop
reason, usage with cache reads and writes) translated to another format and back is the
answer it was, up to the documented representation choices; and the client's SDK finds
the same text, calls, stop and usage in the translation as the provider's SDK in the
original."""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.translate import answers
from gateway.translate.ir import seal_signature
from tests.translate.test_answers_golden import facts

pytestmark = pytest.mark.fast

TEXT = st.text(string.ascii_letters + string.digits + " .,\n", min_size=1, max_size=20)
ARGS = st.dictionaries(st.sampled_from(["a", "b", "city"]), st.one_of(TEXT, st.integers(0, 9)),
                       max_size=2)  # fmt: skip
FORMATS = ("chat", "messages", "responses")


@dataclass
class Said:
    """An answer, neutral, that each format renders its own way."""

    id: str
    text: str | None
    calls: list[tuple[str, str, dict[str, Any]]]
    reasoning: tuple[str, str | None] | None  # (text, Anthropic signature)
    stop: str  # stop | length | tool | filter
    usage: tuple[int, int, int, int, int | None]  # input, output, read, write, reasoning


@st.composite
def said(draw: st.DrawFn) -> Said:
    n = draw(st.integers(0, 3))
    calls = [(f"call_{i}{draw(st.sampled_from(['', 'Q7']))}", draw(st.sampled_from(["f", "g"])),
              draw(ARGS)) for i in range(n)]  # fmt: skip
    read, write = draw(st.integers(0, 5000)), draw(st.integers(0, 5000))
    usage = (read + write + draw(st.integers(0, 5000)), draw(st.integers(0, 5000)), read, write,
             draw(st.one_of(st.none(), st.integers(1, 100))))  # fmt: skip
    reasoning = draw(st.one_of(st.none(), st.tuples(TEXT, st.one_of(st.none(), TEXT))))
    return Said(
        id=draw(st.from_regex(r"[a-z]{3}_[A-Za-z0-9]{4,10}", fullmatch=True)),
        text=draw(st.one_of(st.none(), TEXT)) if calls else draw(TEXT),
        calls=calls,
        reasoning=reasoning,
        stop="tool" if calls else draw(st.sampled_from(["stop", "length", "filter"])),
        usage=usage,
    )


def to_chat(s: Said) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": s.text, "refusal": None}
    if s.reasoning is not None:
        msg["reasoning_content"] = s.reasoning[0]
    if s.calls:
        msg["tool_calls"] = [{"id": i, "type": "function", "function": {
            "name": n, "arguments": orjson.dumps(a).decode()}} for i, n, a in s.calls]  # fmt: skip
    inp, out, read, write, reasoning = s.usage
    usage: dict[str, Any] = {
        "prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out,
        "prompt_tokens_details": {"cached_tokens": read, "cache_write_tokens": write},
    }  # fmt: skip
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    finish = {"stop": "stop", "length": "length", "tool": "tool_calls", "filter": "content_filter"}
    return {"id": s.id, "object": "chat.completion", "created": 1700000000, "model": "m",
            "choices": [{"index": 0, "message": msg, "logprobs": None,
                         "finish_reason": finish[s.stop]}], "usage": usage}  # fmt: skip


def to_anthropic(s: Said) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if s.reasoning is not None:
        content.append({"type": "thinking", "thinking": s.reasoning[0],
                        "signature": s.reasoning[1] or ""})  # fmt: skip
    if s.text is not None:
        content.append({"type": "text", "text": s.text})
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in s.calls]
    inp, out, read, write, reasoning = s.usage
    usage: dict[str, Any] = {"input_tokens": inp - read - write, "output_tokens": out,
                             "cache_creation_input_tokens": write,
                             "cache_read_input_tokens": read}  # fmt: skip
    if reasoning is not None:
        usage["output_tokens_details"] = {"thinking_tokens": reasoning}
    stop = {"stop": "end_turn", "length": "max_tokens", "tool": "tool_use", "filter": "refusal"}
    return {"id": s.id, "type": "message", "role": "assistant", "model": "m",
            "content": content, "stop_reason": stop[s.stop], "stop_sequence": None,
            "usage": usage}  # fmt: skip


def to_responses(s: Said) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if s.reasoning is not None:
        item: dict[str, Any] = {"id": "rs_1", "type": "reasoning",
                                "summary": [{"type": "summary_text", "text": s.reasoning[0]}]}  # fmt: skip
        if s.reasoning[1]:
            item["encrypted_content"] = seal_signature(s.reasoning[1])
        output.append(item)
    if s.text is not None:
        output.append({"id": "msg_1", "type": "message", "status": "completed",
                       "role": "assistant", "content": [
                           {"type": "output_text", "text": s.text, "annotations": []}]})  # fmt: skip
    output += [{"id": f"fc_{i}", "type": "function_call", "status": "completed", "call_id": i,
                "name": n, "arguments": orjson.dumps(a).decode()} for i, n, a in s.calls]  # fmt: skip
    inp, out, read, write, reasoning = s.usage
    status, details = {"stop": ("completed", None), "tool": ("completed", None),
                       "length": ("incomplete", {"reason": "max_output_tokens"}),
                       "filter": ("incomplete", {"reason": "content_filter"})}[s.stop]  # fmt: skip
    return {"id": s.id, "object": "response", "created_at": 1700000000, "status": status,
            "error": None, "incomplete_details": details, "model": "m", "output": output,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out,
                      "input_tokens_details": {"cached_tokens": read, "cache_write_tokens": write},
                      "output_tokens_details": {"reasoning_tokens": reasoning or 0}}}  # fmt: skip


RENDER = {"chat": to_chat, "messages": to_anthropic, "responses": to_responses}


def normal(fmt: str, body: dict[str, Any], via: str) -> dict[str, Any]:
    """The documented representation choices of a trip through ``via``."""
    b = orjson.loads(orjson.dumps(body))
    if fmt == "chat":
        b["created"] = 0  # Anthropic answers carry none: the engine sets it
        b["usage"].pop("completion_tokens_details", None)
        for call in b["choices"][0]["message"].get("tool_calls", ()):
            call["function"]["arguments"] = orjson.loads(call["function"]["arguments"])
    elif fmt == "messages":
        b["usage"].pop("output_tokens_details", None)
        if via == "chat":
            for block in b["content"]:
                block.pop("signature", None)  # chat carries no signature
    else:
        b["created_at"] = 0
        for item in b["output"]:
            item.pop("id")  # output item ids are made from the answer's
            if item["type"] == "function_call":
                item["arguments"] = orjson.loads(item["arguments"])
            if via == "chat":
                item.pop("encrypted_content", None)
        b["usage"]["output_tokens_details"] = {}
    return b


@settings(max_examples=150, deadline=None)
@given(said(), st.sampled_from([(a, b) for a in FORMATS for b in FORMATS if a != b]))
def test_answer_there_and_back_is_the_answer(s: Said, pair: tuple[str, str]) -> None:
    """provider format -> client format -> provider format is the identity."""
    provider, client = pair
    original = RENDER[provider](s)
    there = answers.WRITERS[client](answers.READERS[provider](original))
    back = answers.WRITERS[provider](answers.READERS[client](there))
    assert normal(provider, back, client) == normal(provider, original, client)


@settings(max_examples=150, deadline=None)
@given(said(), st.sampled_from([(a, b) for a in FORMATS for b in FORMATS if a != b]))
def test_the_clients_sdk_reads_what_the_provider_said(s: Said, pair: tuple[str, str]) -> None:
    """The client's SDK model parses the translated answer and finds the provider's text,
    tool calls, stop reason and usage."""
    provider, client = pair
    original = RENDER[provider](s)
    there = answers.WRITERS[client](answers.READERS[provider](original))
    assert facts(client, there) == facts(provider, original)
    inp, out, read, write, _ = s.usage
    assert facts(client, there)["usage"] == (inp, out, read, write)
