"""Golden tables for JSON answers: the providers' documented answer examples (each fixture
names its source) translated into the other two formats must parse with the official
SDKs' models (``ChatCompletion``, ``Message``, ``Response``) and keep the text, the tool
calls, the stop reason and the usage; and translated back they are the original."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from gateway.translate import answers
from tests.translate.test_requests_helpers import fixture, fixtures

pytestmark = pytest.mark.fast

FORMAT = {"chat": "chat", "responses": "responses", "anthropic": "messages"}  # by fixture prefix
NAMES = fixtures("answers")
CASES = [
    (name, target)
    for name in NAMES
    for target in ("chat", "responses", "messages")
    if target != FORMAT[name.split("_")[0]]
]


def source_format(name: str) -> str:
    return FORMAT[name.split("_")[0]]


def translate(body: dict[str, Any], client: str, provider: str) -> dict[str, Any]:
    """The provider's answer (``provider``) as the client's (``client``)."""
    return answers.WRITERS[client](answers.READERS[provider](body))


def sdk_body(name: str) -> dict[str, Any]:
    """The fixture's body; Responses usage given ``cache_write_tokens``, which the SDK's
    ``InputTokensDetails`` requires and the (older) documented examples leave out."""
    body = copy.deepcopy(fixture("answers", name)["body"])
    if source_format(name) == "responses":
        details = body["usage"].setdefault("input_tokens_details", {"cached_tokens": 0})
        details.setdefault("cache_write_tokens", 0)
    return body


# ---------------------------------------------------------------- facts, read by the SDKs

STOP_CLASS = {
    "stop": "stop", "end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop",
    "length": "length", "max_tokens": "length", "model_context_window_exceeded": "length",
    "tool_calls": "tool", "tool_use": "tool", "content_filter": "filter", "refusal": "filter",
}  # fmt: skip


def _arguments(text: str) -> Any:
    """A call's arguments as the client reads them: JSON, or the text as it came (a
    provider's arguments that are not JSON, passed on between two formats that carry them
    as text)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def facts(fmt: str, body: dict[str, Any]) -> dict[str, Any]:
    """What the client's own SDK makes of an answer: text, tool calls, stop, usage."""
    if fmt == "chat":
        c = ChatCompletion.model_validate(body)
        msg = c.choices[0].message
        calls = [(t.id, t.function.name, _arguments(t.function.arguments))
                 for t in msg.tool_calls or () if t.type == "function"]  # fmt: skip
        u = c.usage
        usage = None
        if u is not None:
            d = u.prompt_tokens_details
            cached = (d.cached_tokens or 0) if d else 0
            written = (d.cache_write_tokens or 0) if d else 0
            usage = (u.prompt_tokens, u.completion_tokens, cached, written)
        stop = STOP_CLASS[c.choices[0].finish_reason]
        return {"text": msg.content or "", "calls": calls, "stop": stop, "usage": usage}
    if fmt == "messages":
        m = Message.model_validate(body)
        text = "".join(b.text for b in m.content if b.type == "text")
        calls = [(b.id, b.name, b.input) for b in m.content if b.type == "tool_use"]
        a = m.usage
        read, written = a.cache_read_input_tokens or 0, a.cache_creation_input_tokens or 0
        usage = (a.input_tokens + read + written, a.output_tokens, read, written)
        return {"text": text, "calls": calls, "stop": STOP_CLASS[m.stop_reason or "end_turn"],
                "usage": usage}  # fmt: skip
    r = Response.model_validate(body)
    calls = [(o.call_id, o.name, _arguments(o.arguments)) for o in r.output
             if o.type == "function_call"]  # fmt: skip
    if r.status == "incomplete":
        reason = r.incomplete_details.reason if r.incomplete_details else None
        stop = "filter" if reason == "content_filter" else "length"
    else:
        stop = "tool" if calls else "stop"
    ru = r.usage
    usage = None
    if ru is not None:
        d2 = ru.input_tokens_details
        usage = (ru.input_tokens, ru.output_tokens, d2.cached_tokens, d2.cache_write_tokens)
    return {"text": r.output_text, "calls": calls, "stop": stop, "usage": usage}


@pytest.mark.parametrize("name", NAMES)
def test_fixture_names_its_source_and_parses(name: str) -> None:
    """Each documented answer names its page and parses with its SDK's model."""
    source = fixture("answers", name)["source"]
    assert "https://platform.openai.com/docs/" in source or "https://docs.anthropic.com/" in source
    facts(source_format(name), sdk_body(name))


@pytest.mark.parametrize(("name", "target"), CASES)
def test_translated_answer_matches_the_golden_body(name: str, target: str) -> None:
    """The translated answer, field by field, is the recorded one."""
    data = fixture("answers", name)
    assert translate(data["body"], target, source_format(name)) == data["expect"][target]


@pytest.mark.parametrize(("name", "target"), CASES)
def test_translated_answer_parses_and_keeps_its_meaning(name: str, target: str) -> None:
    """The client's SDK parses the translated answer and finds the same text, tool calls
    (ids, names, arguments), stop reason and usage (prompt, output, cache read, cache
    write) as the provider's SDK found in the original."""
    src = source_format(name)
    body = sdk_body(name)
    want = facts(src, body)
    got = facts(target, translate(body, target, src))
    if want["usage"] is None and target == "messages":
        want["usage"] = (0, 0, 0, 0)  # Anthropic's Message requires usage
    assert got == want


def _plain(value: Any) -> Any:
    """Without nulls: the writers spell out optional fields as null."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


#: Parts of the original that a trip through another format documentedly does not keep
#: (the engine sets ``created``; ids of output items are generated; fields the other
#: format has no room for).
KEPT_ONLY_AT_HOME = {
    "chat": ("system_fingerprint", "created"),
    "messages": (),
    "responses": ("completed_at", "instructions", "max_output_tokens", "previous_response_id",
                  "reasoning", "store", "temperature", "text", "tools", "top_p", "truncation",
                  "user", "metadata", "created_at"),
}  # fmt: skip


def _home(fmt: str, body: dict[str, Any]) -> dict[str, Any]:
    b = _plain(copy.deepcopy(body))
    for key in KEPT_ONLY_AT_HOME[fmt]:
        b.pop(key, None)
    if fmt == "chat":
        msg = b["choices"][0]["message"]
        for call in msg.get("tool_calls", ()):
            call["function"]["arguments"] = orjson.loads(call["function"]["arguments"])
        if "usage" in b:
            b["usage"].pop("completion_tokens_details", None)  # only reasoning_tokens kept
            b["usage"].setdefault("prompt_tokens_details", {"cached_tokens": 0})
            b["usage"]["prompt_tokens_details"].setdefault("cache_write_tokens", 0)
    if fmt == "messages":
        b["usage"] = {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                      **b["usage"]}  # fmt: skip
        if b["usage"].get("output_tokens_details") == {"thinking_tokens": 0}:
            del b["usage"]["output_tokens_details"]  # Responses always counts: 0 is unknown
    if fmt == "responses":
        for item in b["output"]:
            item.pop("id", None)  # generated from the answer's id
            if item["type"] == "function_call":
                item["arguments"] = orjson.loads(item["arguments"])
        b["usage"].setdefault("input_tokens_details", {"cached_tokens": 0})
        b["usage"]["input_tokens_details"].setdefault("cache_write_tokens", 0)
        b["tool_choice"], b["parallel_tool_calls"] = "auto", True
    return b


@pytest.mark.parametrize(("name", "target"), CASES)
def test_translated_answer_round_trips(name: str, target: str) -> None:
    """An answer translated to another format and back is the original, apart from what
    the other format has no room for (see KEPT_ONLY_AT_HOME)."""
    src = source_format(name)
    body = fixture("answers", name)["body"]
    back = translate(translate(body, target, src), src, target)
    expected = _home(src, body)
    got = _home(src, back)
    if "usage" not in body and target == "messages":
        # Anthropic's Message requires usage: an answer without one gets zeros
        zeros = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        expected["usage"] = _home(src, {**body, "usage": zeros})["usage"]
    if src == "messages" and "thinking" in orjson.dumps(body).decode() and target == "chat":
        for block in expected["content"]:
            if block["type"] == "thinking":
                block["signature"] = ""  # chat carries no signature
    assert got == expected


def test_cached_tokens_arithmetic() -> None:
    """Anthropic's input_tokens exclude cache reads and writes; OpenAI's include them."""
    body = fixture("answers", "anthropic_cache_read")["body"]
    chat = translate(body, "chat", "messages")
    assert chat["usage"]["prompt_tokens"] == 21 + 1500 + 188086
    assert chat["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 188086,
        "cache_write_tokens": 1500,
    }
    assert chat["usage"]["total_tokens"] == 21 + 1500 + 188086 + 393
    back = translate(chat, "messages", "chat")
    assert back["usage"] == {
        "input_tokens": 21,
        "output_tokens": 393,
        "cache_creation_input_tokens": 1500,
        "cache_read_input_tokens": 188086,
    }
    resp = translate(body, "responses", "messages")
    assert resp["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"]
    assert resp["status"] == "incomplete"
    assert resp["incomplete_details"] == {"reason": "max_output_tokens"}


def test_reasoning_tokens_and_thinking() -> None:
    """Reasoning tokens are carried; a thinking block is chat ``reasoning_content`` and a
    Responses reasoning item whose sealed ``encrypted_content`` brings the signature back."""
    resp = fixture("answers", "responses_reasoning")["body"]
    chat = translate(resp, "chat", "responses")
    assert chat["usage"]["completion_tokens_details"] == {"reasoning_tokens": 832}
    ant = translate(resp, "messages", "responses")
    assert ant["usage"]["output_tokens_details"] == {"thinking_tokens": 832}
    thinking = fixture("answers", "anthropic_thinking")["body"]
    chat = translate(thinking, "chat", "messages")
    assert (
        chat["choices"][0]["message"]["reasoning_content"] == "Let me analyze this step by step..."
    )
    out = translate(thinking, "responses", "messages")["output"]
    assert [o["type"] for o in out] == ["reasoning", "message"]
    assert out[0]["summary"] == [
        {"type": "summary_text", "text": "Let me analyze this step by step..."}
    ]
    back = translate(translate(thinking, "responses", "messages"), "messages", "responses")
    assert back["content"][0] == thinking["content"][0]


@pytest.mark.parametrize("value", [True, "1700000000", 1.5, None])
@pytest.mark.parametrize(("source", "field"), [("chat", "created"), ("responses", "created_at")])
def test_a_created_time_that_is_not_an_integer_is_not_passed_on(
    source: str, field: str, value: Any
) -> None:
    """A provider's ``created`` / ``created_at`` of another type (a bool, a string, a
    float) is not handed to the client as its time: 0, as when the provider gives none."""
    name = next(n for n in fixtures("answers") if source_format(n) == source)
    body = {**fixture("answers", name)["body"], field: value}
    for target in ("chat", "responses"):
        out = translate(body, target, source)
        assert out["created" if target == "chat" else "created_at"] == 0
