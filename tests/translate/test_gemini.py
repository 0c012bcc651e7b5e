"""Gemini as an upstream format, rule by rule (docs/translation.md, "Gemini"): requests
written from every client format, JSON answers and stream chunks read back, thought
signatures carried in call ids, Google's errors, and the Format object's own rules."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import GatewayError, Malformed, Refused
from gateway.formats import CHAT, GEMINI, MESSAGES, RESPONSES
from gateway.formats.usage import Usage, from_gemini
from gateway.translate import convert
from gateway.translate.errors import translate_error
from gateway.translate.ir import plain_id, signed_id, split_id

pytestmark = pytest.mark.fast

SIG = "CiQBjz1rX+/signature=="
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
    "additionalProperties": False}}}  # fmt: skip


def to_gemini(body: dict[str, Any], source: Any = CHAT) -> tuple[dict[str, Any], list[str]]:
    return convert.request(body, source, GEMINI, max_output_tokens=None)


# ---- call ids carry thought signatures ------------------------------------------------


@given(st.text(min_size=1), st.text())
def test_a_signed_id_gives_back_its_id_and_signature(call_id: str, signature: str) -> None:
    """Any id and any signature survive the round trip; the signed part stays in the
    characters Anthropic takes when the id does."""
    signed = signed_id(call_id, signature)
    assert split_id(signed) == (call_id, signature)
    assert plain_id(signed) == call_id
    tail = signed.rpartition("__thought__")[2]
    assert all(ch.isalnum() or ch in "-_" for ch in tail)


def test_an_id_without_a_signature_is_its_own() -> None:
    for value in ("call_1", "toolu_01A", "x__thought__!!", "__thought__abc"):
        assert split_id(value) == (value, None) and plain_id(value) == value


def test_other_providers_get_the_call_id_without_the_signature() -> None:
    """A conversation begun on Gemini moves to Claude, GPT or Converse with plain ids."""
    signed = signed_id("call_7", SIG)
    body = {"model": "m", "tools": [WEATHER], "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": signed, "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": signed, "content": "Sunny"}]}  # fmt: skip
    text = json.dumps([convert.request(body, CHAT, t, max_output_tokens=None)[0]
                       for t in (MESSAGES, RESPONSES)])  # fmt: skip
    assert "__thought__" not in text and text.count("call_7") == 4
    back, _ = to_gemini(body)
    call = back["contents"][1]["parts"][0]
    assert call == {"functionCall": {"id": "call_7", "name": "get_weather",
                    "args": {"city": "Paris"}}, "thoughtSignature": SIG}  # fmt: skip
    assert back["contents"][2]["parts"][0]["functionResponse"] == {
        "id": "call_7", "name": "get_weather", "response": {"output": "Sunny"}}  # fmt: skip


# ---- requests -------------------------------------------------------------------------


def test_a_chat_request_in_gemini() -> None:
    body = {
        "model": "m", "max_completion_tokens": 100, "temperature": 0.3, "top_p": 0.9,
        "stop": ["END"], "stream": True, "user": "u1", "metadata": {"a": "b"}, "store": False,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "one"}, {"role": "user", "content": "two"},
            {"role": "assistant", "content": "ok"},
            {"role": "developer", "content": "Late rule."},
            {"role": "user", "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO",
                                                    "detail": "high"}}]},
        ],
    }  # fmt: skip
    out, dropped = to_gemini(body)
    assert "model" not in out and "stream" not in out
    assert out["systemInstruction"] == {"parts": [{"text": "Be brief."}, {"text": "Late rule."}]}
    assert out["contents"] == [
        {"role": "user", "parts": [{"text": "one"}, {"text": "two"}]},
        {"role": "model", "parts": [{"text": "ok"}]},
        {"role": "user", "parts": [{"text": "see"},
                                   {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}]},
    ]  # fmt: skip
    assert out["generationConfig"] == {
        "maxOutputTokens": 100,
        "temperature": 0.3,
        "topP": 0.9,
        "stopSequences": ["END"],
    }
    assert set(dropped) == {"user", "metadata", "image_url.detail"}


def test_function_responses_of_one_turn_are_one_user_turn_first() -> None:
    """Parallel results (several tool messages, then the user's text) become one user
    turn whose function responses come first."""
    calls = [{"id": f"c{i}", "type": "function",
              "function": {"name": "get_weather", "arguments": "{}"}} for i in (1, 2)]  # fmt: skip
    body = {"model": "m", "tools": [WEATHER], "messages": [
        {"role": "user", "content": "both"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "tool", "tool_call_id": "c2", "content": "b"},
        {"role": "user", "content": "and now?"}]}  # fmt: skip
    out, _ = to_gemini(body)
    last = out["contents"][-1]
    assert [next(iter(p)) for p in last["parts"]] == ["functionResponse"] * 2 + ["text"]
    assert GEMINI.problems(out["contents"]) == []


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        ({"type": "function", "function": {"name": "get_weather"}},
         {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
    ],
)  # fmt: skip
def test_tool_choice_is_a_function_calling_mode(choice: Any, config: dict[str, Any]) -> None:
    out, _ = to_gemini({"model": "m", "tools": [WEATHER], "tool_choice": choice,
                        "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
    assert out["toolConfig"] == {"functionCallingConfig": config}
    params = out["tools"][0]["functionDeclarations"][0]["parameters"]
    assert params["type"] == "OBJECT" and "additionalProperties" not in params


def test_a_schema_gemini_cannot_take_is_refused_naming_its_path() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"not": {"type": "string"}}}}}}  # fmt: skip
    with pytest.raises(Refused) as e:
        to_gemini({"model": "m", "tools": [tool], "messages": [{"role": "user", "content": "x"}]})
    assert e.value.param is not None and e.value.param.endswith("properties.x.not")


def test_the_same_tools_twice_are_converted_once() -> None:
    """An agent's tools come on every turn: the second request gets the same conversion
    (shared, unchanged) and the same dropped names."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "number", "multipleOf": 2}}}}}  # fmt: skip
    body = {"model": "m", "tools": [tool], "messages": [{"role": "user", "content": "x"}]}
    first, d1 = to_gemini(body)
    second, d2 = to_gemini(json.loads(json.dumps(body)))
    p1 = first["tools"][0]["functionDeclarations"][0]["parameters"]
    assert p1 is second["tools"][0]["functionDeclarations"][0]["parameters"]
    assert d1 == d2 and any("multipleOf" in n for n in d1)


@pytest.mark.parametrize(
    ("response_format", "config"),
    [
        ({"type": "json_object"}, {"responseMimeType": "application/json"}),
        ({"type": "json_schema", "json_schema": {"name": "r", "schema": {
            "type": "object", "properties": {"a": {"type": "integer"}}}}},
         {"responseMimeType": "application/json",
          "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "INTEGER"}}}}),
        ({"type": "text"}, None),
    ],
)  # fmt: skip
def test_json_output(response_format: Any, config: Any) -> None:
    out, _ = to_gemini({"model": "m", "response_format": response_format,
                        "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
    assert out.get("generationConfig") == config


def test_thinking_from_an_effort_or_an_anthropic_budget() -> None:
    out, _ = to_gemini({"model": "m", "reasoning_effort": "low",
                        "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
    assert out["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 2048}
    body = {"model": "m", "max_tokens": 9000, "thinking": {"type": "enabled", "budget_tokens": 4000},
            "messages": [{"role": "user", "content": "x"}]}  # fmt: skip
    out, _ = to_gemini(body, MESSAGES)
    assert out["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 4000,
                                                         "includeThoughts": True}  # fmt: skip


def test_what_gemini_cannot_take_is_refused() -> None:
    url_image = {"role": "user", "content": [{"type": "image_url",
                 "image_url": {"url": "https://example.com/a.png"}}]}  # fmt: skip
    with pytest.raises(Refused, match="URL"):
        to_gemini({"model": "m", "messages": [url_image]})
    with pytest.raises(Refused):
        to_gemini({"model": "m", "messages": [{"role": "user", "content": ""}]})
    with pytest.raises(Refused, match="needs tools"):
        to_gemini({"model": "m", "tool_choice": "required",
                   "messages": [{"role": "user", "content": "x"}]})  # fmt: skip


def test_an_anthropic_agent_turn_in_gemini() -> None:
    """Claude Code's shape: tool_use / tool_result blocks, thinking blocks (dropped,
    named), is_error as an error response."""
    signed = signed_id("call_9", SIG)
    body = {"model": "m", "max_tokens": 100, "system": "sys", "messages": [
        {"role": "user", "content": "run"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": ""},
            {"type": "tool_use", "id": signed, "name": "Bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": signed, "content": "no such dir",
             "is_error": True}]}]}  # fmt: skip
    out, dropped = to_gemini(body, MESSAGES)
    assert out["contents"][1]["parts"] == [
        {
            "functionCall": {"id": "call_9", "name": "Bash", "args": {"command": "ls"}},
            "thoughtSignature": SIG,
        }
    ]
    assert out["contents"][2]["parts"][0]["functionResponse"]["response"] == {
        "error": "no such dir"
    }
    assert "reasoning" in dropped and out["systemInstruction"] == {"parts": [{"text": "sys"}]}


# ---- answers --------------------------------------------------------------------------


def gemini_answer(parts: list[Any], reason: str = "STOP", **extra: Any) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": reason,
                        "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20,
                          "thoughtsTokenCount": 30, "cachedContentTokenCount": 40,
                          "totalTokenCount": 150},
        "modelVersion": "gemini-3-pro", "responseId": "resp-1", **extra,
    }  # fmt: skip


def test_an_answer_for_each_client() -> None:
    data = gemini_answer([
        {"text": "Let me look.", "thought": True},
        {"text": "Calling."},
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
         "thoughtSignature": SIG},
        {"functionCall": {"id": "c2", "name": "get_weather", "args": {"city": "Rome"}}}])  # fmt: skip
    chat = convert.answer(data, GEMINI, CHAT, "g")
    msg = chat["choices"][0]["message"]
    assert msg["content"] == "Calling." and msg["reasoning_content"] == "Let me look."
    first, second = msg["tool_calls"]
    assert split_id(first["id"])[1] == SIG and second["id"] == "c2"
    assert chat["choices"][0]["finish_reason"] == "tool_calls"
    assert chat["usage"]["prompt_tokens"] == 100 and chat["usage"]["completion_tokens"] == 50
    assert chat["usage"]["prompt_tokens_details"]["cached_tokens"] == 40
    assert chat["usage"]["completion_tokens_details"]["reasoning_tokens"] == 30
    m = convert.answer(data, GEMINI, MESSAGES, "g")
    assert [b["type"] for b in m["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    assert m["stop_reason"] == "tool_use"
    assert m["usage"]["input_tokens"] == 60 and m["usage"]["cache_read_input_tokens"] == 40
    r = convert.answer(data, GEMINI, RESPONSES, "g")
    assert [i["type"] for i in r["output"]] == ["reasoning", "message", "function_call",
                                                "function_call"]  # fmt: skip


@pytest.mark.parametrize(
    ("reason", "chat", "cut"),
    [("MAX_TOKENS", "length", True), ("SAFETY", "content_filter", False),
     ("PROHIBITED_CONTENT", "content_filter", False), ("SPII", "content_filter", False),
     ("BLOCKLIST", "content_filter", False), ("RECITATION", "content_filter", False),
     ("OTHER", "stop", False)],
)  # fmt: skip
def test_finish_reasons(reason: str, chat: str, cut: bool) -> None:
    data = gemini_answer([{"text": "partial"}], reason)
    assert convert.answer(data, GEMINI, CHAT, "g")["choices"][0]["finish_reason"] == chat
    assert GEMINI.cut_at_length(data) is cut and GEMINI.event_cut(data) is cut


@pytest.mark.parametrize("reason", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"])
def test_a_failed_answer_is_no_answer(reason: str) -> None:
    with pytest.raises(Malformed, match=reason):
        convert.answer(gemini_answer([], reason), GEMINI, CHAT, "g")


def test_a_blocked_prompt_is_an_empty_refusal() -> None:
    data = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {
        "promptTokenCount": 9, "totalTokenCount": 9}}  # fmt: skip
    m = convert.answer(data, GEMINI, MESSAGES, "g")
    assert m["content"] == [] and m["stop_reason"] == "refusal"
    with pytest.raises(Malformed):
        convert.answer({"usageMetadata": {}}, GEMINI, CHAT, "g")


def test_wrong_types_make_a_broken_answer() -> None:
    for data in ({"candidates": "x"}, {"candidates": [{"content": {"parts": [{"text": 3}]}}]},
                 {"candidates": [{"content": {"parts": [{"functionCall": []}]}}]}):  # fmt: skip
        with pytest.raises(Malformed):
            convert.answer(data, GEMINI, CHAT, "g")


def test_usage_counts() -> None:
    assert from_gemini({"promptTokenCount": 10, "candidatesTokenCount": 5}) == Usage(10, 5)
    u = from_gemini({"promptTokenCount": 10, "candidatesTokenCount": 5,
                     "thoughtsTokenCount": 7, "toolUsePromptTokenCount": 3,
                     "cachedContentTokenCount": 4})  # fmt: skip
    assert (u.input, u.output, u.cache_read, u.reasoning) == (13, 12, 4, 7)
    bad = from_gemini({"promptTokenCount": -1, "candidatesTokenCount": "5"})
    assert bad.input == bad.output == 0 and set(bad.invalid) == {"input", "output"}


# ---- streams --------------------------------------------------------------------------


def chunk(parts: list[Any], reason: str | None = None, n: int = 1) -> bytes:
    c: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if reason:
        c["finishReason"] = reason
    body = {"candidates": [c], "responseId": "r1", "modelVersion": "gemini-3",
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": n,
                              "totalTokenCount": 10 + n}}  # fmt: skip
    return b"data: " + orjson.dumps(body) + b"\r\n\r\n"


def run(events: list[bytes], target: Any) -> tuple[list[Any], convert.TranslatingSplitter]:
    s = convert.TranslatingSplitter(GEMINI, target, "g", True)
    out = [e for ev in events for e in s.feed(ev)] + s.close()
    decoded = []
    for e in out:
        data = next((ln[6:] for ln in e.split(b"\n") if ln.startswith(b"data: ")), b"")
        if data and data != b"[DONE]":
            decoded.append(json.loads(data))
    return decoded, s


def test_a_stream_for_a_chat_client() -> None:
    events = [chunk([{"text": "Hel"}]), chunk([{"text": "lo"}], n=2),
              chunk([{"text": ""}], "STOP", 3)]  # fmt: skip
    out, s = run(events, CHAT)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in out if c["choices"])
    assert text == "Hello"
    assert [c["choices"][0]["finish_reason"] for c in out if c["choices"]][-1] == "stop"
    assert out[-1]["usage"]["completion_tokens"] == 3 and s.usage == Usage(10, 3)


def test_a_streamed_call_carries_its_signature() -> None:
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
            "thoughtSignature": SIG}  # fmt: skip
    out, _ = run([chunk([{"text": "hm", "thought": True}]), chunk([call], "STOP")], MESSAGES)
    types = [e["type"] for e in out]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    start = next(e for e in out if e.get("content_block", {}).get("type") == "tool_use")
    assert split_id(start["content_block"]["id"])[1] == SIG
    delta = next(e for e in out if e.get("delta", {}).get("type") == "input_json_delta")
    assert json.loads(delta["delta"]["partial_json"]) == {"city": "Paris"}
    assert next(e for e in out if e["type"] == "message_delta")["delta"]["stop_reason"] == (
        "tool_use"
    )


def test_the_usage_of_a_cut_stream_is_what_its_chunks_said() -> None:
    """Each chunk counts the answer so far; a stream cut before its end reports the last."""
    _, s = run([chunk([{"text": "a"}]), chunk([{"text": "b"}], n=2)], CHAT)
    assert s.usage == Usage(10, 2) and not s._tr.final_seen


def test_errors_inside_a_stream() -> None:
    err = b'data: {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}\r\n\r\n'
    s = convert.TranslatingSplitter(GEMINI, CHAT, "g", True)
    assert s.feed(chunk([{"text": "a"}])) and s.feed(err) == [err.replace(b"\r\n", b"\n")]
    out, _ = run([chunk([{"text": "a"}]), chunk([], "MALFORMED_FUNCTION_CALL")], MESSAGES)
    assert out[-1]["type"] == "error" and "MALFORMED_FUNCTION_CALL" in out[-1]["error"]["message"]


# ---- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "google", "anthropic", "openai_code"),
    [
        (429, "RESOURCE_EXHAUSTED", "rate_limit_error", "rate_limit_exceeded"),
        (503, "UNAVAILABLE", "overloaded_error", "server_is_overloaded"),
        (500, "INTERNAL", "api_error", "INTERNAL"),
        (504, "DEADLINE_EXCEEDED", "timeout_error", "timeout_error"),
        (401, "UNAUTHENTICATED", "authentication_error", "invalid_api_key"),
        (403, "PERMISSION_DENIED", "permission_error", "PERMISSION_DENIED"),
        (400, "INVALID_ARGUMENT", "invalid_request_error", "INVALID_ARGUMENT"),
    ],
)
def test_google_errors_in_each_clients_shape(
    status: int, google: str, anthropic: str, openai_code: str
) -> None:
    body = orjson.dumps([{"error": {"code": status, "message": "m", "status": google}}])
    assert json.loads(translate_error(status, body, "gemini", "messages"))["error"]["type"] == (
        anthropic
    )
    assert json.loads(translate_error(status, body, "gemini", "chat"))["error"]["code"] == (
        openai_code
    )


def test_a_prompt_too_long_stays_recognisable() -> None:
    body = orjson.dumps({"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."}})  # fmt: skip
    m = json.loads(translate_error(400, body, "gemini", "messages"))
    assert m["error"]["message"].startswith("prompt is too long:")
    assert json.loads(translate_error(400, body, "gemini", "chat"))["error"]["code"] == (
        "context_length_exceeded"
    )


# ---- the format's own rules -----------------------------------------------------------


def test_the_gemini_format_reads_its_own_bodies() -> None:
    req = {"contents": [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"d": "."}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {
            "output": "a.txt"}}}]}],
        "generationConfig": {"maxOutputTokens": 64, "candidateCount": 2}}  # fmt: skip
    entries = GEMINI.entries(req)
    assert GEMINI.opened_calls(entries[1]) == ["ls"] == GEMINI.closed_calls(entries[2])
    assert GEMINI.problems(entries) == []
    assert GEMINI.problems(entries[:2]) == ["content 1: functionCall 'ls' has no functionResponse"]
    assert GEMINI.problems([{"role": "system", "parts": []}]) == ["content 0: role 'system'"]
    assert GEMINI.transcript_lines(entries[1]) == ['assistant called ls({"d": "."})']
    snipped = GEMINI.snip_results(entries[2], lambda text: "[snipped]")
    assert snipped["parts"][0]["functionResponse"]["response"] == {"output": "[snipped]"}
    assert GEMINI.requested_output(req) == 64 and GEMINI.capped(req)
    assert GEMINI.several_choices(req)
    summary = GEMINI.summary_request("g", "Summarize.", "the text", 500)
    assert "model" not in summary and summary["generationConfig"]["maxOutputTokens"] == 500
    answer = gemini_answer([{"text": "a", "thought": True}, {"text": "b"}, {"text": "c"}])
    assert GEMINI.answer_text(answer, "\n") == "b\nc"
    assert GEMINI.answer_usage(answer["usageMetadata"]).output == 50


def test_gateway_errors_in_googles_shape() -> None:
    body = json.loads(GatewayError(429, "slow down").body_bytes(GEMINI))
    assert body == {"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}}
    event = GEMINI.stream_error("api_error", "broke")
    assert event.startswith(b"data: {") and json.loads(event[6:])["error"]["message"] == "broke"


def test_crlf_framed_events_split_anywhere_are_the_same_events() -> None:
    """Google frames events with CRLF: wherever the reads split them (between the \\r and
    the \\n too), the splitter gives the same events."""
    from gateway.formats.sse import Splitter

    raw = chunk([{"text": "a"}]) + chunk([{"text": "b"}], n=2) + chunk([], "STOP", 3)
    whole = Splitter().feed(raw)
    assert len(whole) == 3
    for i in range(1, len(raw)):
        for j in range(i, len(raw), 7):
            s = Splitter()
            assert s.feed(raw[:i]) + s.feed(raw[i:j]) + s.feed(raw[j:]) == whole


def test_a_huge_schema_is_converted_each_time_not_kept() -> None:
    """The conversions kept for the next turns are bounded: a schema whose encoding is over
    64 KiB is not kept, whatever a client sends."""
    from gateway.translate.requests import gemini as writer

    huge = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "description": "x" * 70_000,
        "properties": {"a": {"type": "string"}}}}}  # fmt: skip
    body = {"model": "m", "tools": [huge], "messages": [{"role": "user", "content": "x"}]}
    out, _ = to_gemini(body)
    assert out["tools"][0]["functionDeclarations"][0]["parameters"]["type"] == "OBJECT"
    assert all(len(k) <= writer._CONVERTED_KEY_MAX for k in writer._CONVERTED)
