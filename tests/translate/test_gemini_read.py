"""Gemini as a client format (docs/translation.md, "Gemini clients"): the bodies the Gemini
CLI and the google-genai SDK send, read into the neutral form and written for every
provider format; calls and results paired with or without ids, thought signatures carried
in the call ids, each field mapped, dropped (named) or refused (naming it), the round trip
back to Gemini, the type check of each field, and a property: the reader raises nothing
but a 400 on any body the check lets through."""

from __future__ import annotations

import base64
import contextlib
import copy
import itertools
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import GatewayError, Refused
from gateway.formats import CHAT, CONVERSE, GEMINI, MESSAGES, RESPONSES, Format
from gateway.translate import convert
from gateway.translate.ir import Dropped, ToolCall, ToolResult, signed_id
from gateway.translate.requests import READERS
from gateway.translate.requests.gemini_read import read
from tests.translate.test_requests_helpers import ANTHROPIC_SAMPLING, check_request

pytestmark = pytest.mark.fast

TARGETS = (CHAT, MESSAGES, RESPONSES, CONVERSE)
SIG = "RkFLRS1TSUctMTIz"  # the Gemini CLI study's signature (gemini-cli research, section 6)
SIG2 = "CiQBjz1rX+/second=="

# ---- the bodies -------------------------------------------------------------------------

#: The Gemini CLI's tools (parametersJsonSchema: JSON Schema as it is).
CLI_TOOLS = [{"functionDeclarations": [
    {"name": "list_directory", "description": "Lists the names of files and subdirectories.",
     "parametersJsonSchema": {"type": "object", "properties": {
         "dir_path": {"type": "string", "description": "The path to the directory to list"},
         "ignore": {"type": "array", "items": {"type": "string"}}}, "required": ["dir_path"]}},
    {"name": "read_file", "description": "Reads and returns the content of a specified file.",
     "parametersJsonSchema": {"type": "object", "properties": {
         "file_path": {"type": "string"}, "offset": {"type": "number"},
         "limit": {"type": "number"}}, "required": ["file_path"]}},
    {"name": "grep_search", "description": "Searches for a regular expression pattern.",
     "parametersJsonSchema": {"type": "object", "properties": {
         "pattern": {"type": "string"}, "dir_path": {"type": "string"}},
         "required": ["pattern"]}},
    {"name": "glob", "description": "Finds files matching glob patterns.",
     "parametersJsonSchema": {"type": "object", "properties": {"pattern": {"type": "string"}},
                              "required": ["pattern"]}},
    {"name": "google_web_search", "description": "Performs a web search.",
     "parametersJsonSchema": {"type": "object", "properties": {"query": {"type": "string"}},
                              "required": ["query"]}},
    {"name": "update_topic", "description": "Updates the topic.",
     "parametersJsonSchema": {"type": "object", "properties": {"topic": {"type": "string"}}}},
    {"name": "enter_plan_mode", "description": "Enters plan mode.",
     "parametersJsonSchema": {"type": "object", "properties": {}}},
    {"name": "invoke_agent", "description": "Invokes a subagent.",
     "parametersJsonSchema": {"type": "object", "properties": {
         "agent_name": {"type": "string"}, "prompt": {"type": "string"}},
         "required": ["agent_name", "prompt"]}},
]}]  # fmt: skip
CLI_SYSTEM = "You are Gemini CLI, an interactive CLI agent. " * 640  # about 30k characters
CLI_FIRST_TURN = {"role": "user", "parts": [
    {"text": "<session_context>Today is Monday. OS: linux. Workspace: /w</session_context>"},
    {"text": "say hello"}]}  # fmt: skip

#: The Gemini CLI's main request (gemini-cli research, section 5): a Gemini 3 alias.
CLI_MAIN: dict[str, Any] = {
    "contents": [CLI_FIRST_TURN],
    "systemInstruction": {"role": "user", "parts": [{"text": CLI_SYSTEM}]},
    "tools": CLI_TOOLS,
    "generationConfig": {"temperature": 1, "topP": 0.95, "topK": 64,
                         "thinkingConfig": {"includeThoughts": True, "thinkingLevel": "HIGH"}},
}  # fmt: skip

#: Its tool loop (section 6): the call's id added by the CLI, the signature kept.
CLI_CALL = {"functionCall": {"id": "list_directory_1796649716085_0", "args": {"dir_path": "."},
                             "name": "list_directory"}, "thoughtSignature": SIG}  # fmt: skip
CLI_RESULT = {"functionResponse": {"name": "list_directory", "response": {
    "output": "Directory listing for /w:\na.txt (0 bytes)\nb.py (0 bytes)"},
    "id": "list_directory_1796649716085_0"}}  # fmt: skip
CLI_LOOP = {**CLI_MAIN, "contents": [
    CLI_FIRST_TURN, {"role": "model", "parts": [CLI_CALL]},
    {"role": "user", "parts": [CLI_RESULT]}]}  # fmt: skip

#: A resumed session (section 6): signatures gone, the one result sent twice.
CLI_RESUMED = {**CLI_MAIN, "contents": [
    CLI_FIRST_TURN, {"role": "model", "parts": [{"functionCall": CLI_CALL["functionCall"]}]},
    {"role": "user", "parts": [CLI_RESULT, copy.deepcopy(CLI_RESULT)]},
    {"role": "user", "parts": [{"text": "and now?"}]}]}  # fmt: skip

#: The model-router classifier (section 3): JSON output by a JSON Schema.
CLASSIFIER_SCHEMA = {"type": "object", "properties": {
    "complexity_reasoning": {"type": "string"},
    "complexity_score": {"type": "integer", "minimum": 1, "maximum": 100}},
    "required": ["complexity_reasoning", "complexity_score"]}  # fmt: skip
CLI_CLASSIFIER = {
    "contents": [{"role": "user", "parts": [{"text": "<session_context>...</session_context>"}]},
                 {"role": "user", "parts": [{"text": "say hello"}]}],
    "systemInstruction": {"role": "user", "parts": [
        {"text": "You are a specialized Task Routing AI ... Complexity Score"}]},
    "generationConfig": {"responseMimeType": "application/json",
                         "responseJsonSchema": CLASSIFIER_SCHEMA},
}  # fmt: skip

#: google-genai 3.6 (Python), as it sent them through a mock transport: parameters in
#: Gemini's dialect, nested fields by their proto names (``mime_type``, ``thinking_budget``).
SDK_FIRST: dict[str, Any] = {
    "contents": [{"parts": [{"text": "What's the weather in Paris?"},
                            {"inlineData": {"data": "iVBORw==", "mime_type": "image/png"}}],
                  "role": "user"}],
    "systemInstruction": {"parts": [{"text": "Be brief."}], "role": "user"},
    "safetySettings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_ONLY_HIGH"}],
    "tools": [{"functionDeclarations": [{
        "description": "Get the weather of a city.", "name": "get_weather",
        "parameters": {"properties": {"city": {"type": "STRING"},
                                      "unit": {"default": "celsius", "type": "STRING"}},
                       "required": ["city"], "type": "OBJECT"}}]}],
    "toolConfig": {"functionCallingConfig": {"allowedFunctionNames": ["get_weather"],
                                             "mode": "ANY"}},
    "generationConfig": {"temperature": 0.2, "topK": 40.0, "maxOutputTokens": 200,
                         "stopSequences": ["END"], "seed": 7,
                         "thinkingConfig": {"include_thoughts": True, "thinking_budget": 1024}},
}  # fmt: skip
#: Parallel calls and their results without ids; a schema in Gemini's dialect.
SDK_PARALLEL: dict[str, Any] = {
    "contents": [
        {"parts": [{"text": "weather in Paris and Rome?"}], "role": "user"},
        {"parts": [{"functionCall": {"args": {"city": "Paris"}, "name": "get_weather"}},
                   {"functionCall": {"args": {"city": "Rome"}, "name": "get_weather"}}],
         "role": "model"},
        {"parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
                   {"functionResponse": {"name": "get_weather",
                                         "response": {"result": {"t": 20}}}}],
         "role": "user"}],
    "tools": SDK_FIRST["tools"],
    "generationConfig": {
        "candidateCount": 1, "responseMimeType": "application/json",
        "responseSchema": {"properties": {"name": {"title": "Name", "type": "STRING"},
                                          "minutes": {"nullable": True, "title": "Minutes",
                                                      "type": "INTEGER"}},
                           "property_ordering": ["name", "minutes"], "required": ["name"],
                           "title": "Recipe", "type": "OBJECT"},
        "responseModalities": ["TEXT"], "thinkingConfig": {"thinking_level": "LOW"}},
}  # fmt: skip

#: A Gemini 3 tool loop written by hand as google-genai users do: thoughts, a signed first
#: call, an unsigned parallel one, a failed result, a signed text.
G3_LOOP: dict[str, Any] = {
    "contents": [
        {"role": "user", "parts": [{"text": "Weather in Paris and in Rome?"}]},
        {"role": "model", "parts": [
            {"text": "**Checking both cities**", "thought": True},
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
             "thoughtSignature": SIG},
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}},
            {"functionResponse": {"name": "get_weather",
                                  "response": {"error": "station offline"}}}]},
        {"role": "model", "parts": [
            {"text": "Paris is sunny; Rome's station is offline.", "thoughtSignature": SIG2}]},
        {"role": "user", "parts": [{"text": "And Berlin?"}]}],
    "tools": SDK_FIRST["tools"],
    "generationConfig": {"maxOutputTokens": 1000,
                         "thinkingConfig": {"thinkingBudget": -1, "includeThoughts": True}},
}  # fmt: skip

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
PDF = base64.b64encode(b"%PDF-1.4").decode()
HELLO = base64.b64encode(b"hello").decode()
IMAGES: dict[str, Any] = {"contents": [{"role": "user", "parts": [
    {"text": "What is in these?"},
    {"inlineData": {"mimeType": "image/png", "data": PNG}},
    {"inlineData": {"mimeType": "application/pdf", "data": PDF}},
    {"inline_data": {"mime_type": "text/plain", "data": HELLO}}]}]}  # fmt: skip

BODIES = {"cli main": CLI_MAIN, "cli loop": CLI_LOOP, "cli resumed": CLI_RESUMED,
          "cli classifier": CLI_CLASSIFIER, "sdk first": SDK_FIRST, "sdk parallel": SDK_PARALLEL,
          "g3 loop": G3_LOOP, "images": IMAGES}  # fmt: skip


def to(
    target: Format, body: dict[str, Any], cap: int | None = None
) -> tuple[dict[str, Any], list[str]]:
    convert.check(body, GEMINI)
    return convert.request(body, GEMINI, target, max_output_tokens=cap)


def sdk_valid(target: Format, out: dict[str, Any]) -> None:
    """The written body is a request of the official SDK's types (the caller sets ``model``)."""
    if target in (CHAT, MESSAGES, RESPONSES):
        extra = ANTHROPIC_SAMPLING if target is MESSAGES else frozenset()
        check_request(target.name, {**out, "model": "m"}, extra)


def tool_ids(target: Format, out: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the calls' ids, the results' ids), in order, of a written body."""
    if target is CHAT:
        calls = [c["id"] for m in out["messages"] for c in m.get("tool_calls") or ()]
        return calls, [m["tool_call_id"] for m in out["messages"] if m["role"] == "tool"]
    if target is RESPONSES:
        items = out["input"]
        return ([i["call_id"] for i in items if i["type"] == "function_call"],
                [i["call_id"] for i in items if i["type"] == "function_call_output"])  # fmt: skip
    if target is MESSAGES:
        blocks = [
            b for m in out["messages"] if isinstance(m["content"], list) for b in m["content"]
        ]
        return ([b["id"] for b in blocks if b["type"] == "tool_use"],
                [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"])  # fmt: skip
    blocks = [b for m in out["messages"] for b in m["content"]]
    return ([b["toolUse"]["toolUseId"] for b in blocks if "toolUse" in b],
            [b["toolResult"]["toolUseId"] for b in blocks if "toolResult" in b])  # fmt: skip


# ---- every body, every provider format --------------------------------------------------


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
@pytest.mark.parametrize("name", [n for n in BODIES if n != "images"])
def test_every_body_is_a_valid_request_with_its_calls_paired(name: str, target: Format) -> None:
    if (name, target) == ("sdk first", RESPONSES):
        with pytest.raises(Refused, match=r"^stop:"):  # Responses has no stop sequences
            to(target, BODIES[name])
        return
    out, _ = to(target, BODIES[name])
    sdk_valid(target, out)
    calls, results = tool_ids(target, out)
    assert calls == results  # one result per call, in order, same ids
    assert "__thought__" not in json.dumps(out)  # no other provider sees a signature
    if target in (MESSAGES, CONVERSE):
        roles = [m["role"] for m in out["messages"]]
        assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))


def test_the_gemini_cli_main_request_for_each_provider() -> None:
    chat, dropped = to(CHAT, CLI_MAIN)
    assert chat["messages"][0] == {"role": "system", "content": CLI_SYSTEM}
    assert chat["messages"][0]["content"] is CLI_SYSTEM  # referenced, not copied
    assert chat["messages"][1]["content"] == [
        {"type": "text", "text": CLI_FIRST_TURN["parts"][0]["text"]},
        {"type": "text", "text": "say hello"}]  # fmt: skip
    declarations = CLI_TOOLS[0]["functionDeclarations"]
    assert [t["function"]["parameters"] for t in chat["tools"]] == [
        d["parametersJsonSchema"] for d in declarations]  # fmt: skip
    assert chat["tools"][0]["function"]["parameters"] is declarations[0]["parametersJsonSchema"]
    assert (chat["temperature"], chat["top_p"], chat["reasoning_effort"]) == (1, 0.95, "high")
    assert "tool_choice" not in chat and chat["model"] is None  # the URL names the model
    assert dropped == ["generationConfig.topK", "reasoning.summary"]

    messages, dropped = to(MESSAGES, CLI_MAIN)
    assert messages["system"] == [{"type": "text", "text": CLI_SYSTEM}]
    assert messages["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert messages["max_tokens"] == 16384 + 4096  # room for the thinking and the answer
    assert (messages["temperature"], messages["top_p"]) == (1, 0.95)  # fine with thinking
    assert [t["name"] for t in messages["tools"]] == [d["name"] for d in declarations]
    assert dropped == ["generationConfig.topK"]

    responses, dropped = to(RESPONSES, CLI_MAIN)
    assert responses["reasoning"] == {"effort": "high", "summary": "auto"}
    assert responses["input"][0]["role"] == "system"
    assert dropped == ["generationConfig.topK"]

    converse, dropped = to(CONVERSE, CLI_MAIN)
    assert converse["system"] == [{"text": CLI_SYSTEM}]
    assert converse["inferenceConfig"] == {"temperature": 1, "topP": 0.95}
    assert dropped == ["generationConfig.topK", "reasoning_effort", "reasoning.summary"]


def test_the_cli_tool_loop_carries_its_signature_in_the_call_id() -> None:
    conv = READERS["gemini"](CLI_LOOP, Dropped())
    call = conv.messages[1].parts[0]
    result = conv.messages[2].parts[0]
    signed = signed_id("list_directory_1796649716085_0", SIG)
    assert isinstance(call, ToolCall) and isinstance(result, ToolResult)
    assert (call.id, call.name, call.arguments) == (signed, "list_directory", '{"dir_path":"."}')
    assert (result.id, result.content) == (
        signed,
        CLI_RESULT["functionResponse"]["response"]["output"],
    )
    chat, _ = to(CHAT, CLI_LOOP)
    assert chat["messages"][2]["tool_calls"][0]["id"] == "list_directory_1796649716085_0"
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "list_directory_1796649716085_0",
                                   "content": CLI_RESULT["functionResponse"]["response"]["output"]}  # fmt: skip
    messages, dropped = to(MESSAGES, CLI_LOOP)
    assert "thinking" not in messages and "reasoning_effort" in dropped  # no signed thinking


def test_the_clis_placeholder_signature_rides_like_any_other() -> None:
    """The Gemini CLI signs an unsigned first call with a placeholder Gemini accepts."""
    call = {
        "functionCall": CLI_CALL["functionCall"],
        "thoughtSignature": "skip_thought_signature_validator",
    }
    body = {**CLI_LOOP, "contents": [CLI_FIRST_TURN, {"role": "model", "parts": [call]},
                                     {"role": "function", "parts": [CLI_RESULT]}]}  # fmt: skip
    assert to(GEMINI, body)[0]["contents"][1]["parts"] == [{
        "functionCall": {"id": "list_directory_1796649716085_0", "name": "list_directory",
                         "args": {"dir_path": "."}},
        "thoughtSignature": "skip_thought_signature_validator"}]  # fmt: skip
    calls, results = tool_ids(MESSAGES, to(MESSAGES, body)[0])
    assert calls == results == ["list_directory_1796649716085_0"]  # (a function turn: the user's)


def test_a_resumed_sessions_twice_sent_result_goes_once() -> None:
    for target in TARGETS:
        calls, results = tool_ids(target, to(target, CLI_RESUMED)[0])
        assert calls == results == ["list_directory_1796649716085_0"]
    chat, _ = to(CHAT, CLI_RESUMED)
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "user"]


def test_two_different_results_of_one_call_are_both_kept() -> None:
    """Only an identical one is a duplicate: the provider judges the rest."""
    other = copy.deepcopy(CLI_RESULT)
    other["functionResponse"]["response"] = {"output": "changed"}
    body = {**CLI_RESUMED, "contents": [*CLI_RESUMED["contents"][:2],
                                        {"role": "user", "parts": [CLI_RESULT, other]}]}  # fmt: skip
    assert len(tool_ids(CHAT, to(CHAT, body)[0])[1]) == 2


def test_calls_without_ids_pair_with_their_results_by_name_and_order() -> None:
    """Ids made from the turn and the call's place: the same on every request."""
    chat, _ = to(CHAT, SDK_PARALLEL)
    assert tool_ids(CHAT, chat) == (["get_weather_1_0", "get_weather_1_1"],) * 2
    assert [m["content"] for m in chat["messages"] if m["role"] == "tool"] == [
        "sunny", '{"result":{"t":20}}']  # fmt: skip
    assert to(CHAT, SDK_PARALLEL)[0] == chat  # deterministic
    messages, _ = to(MESSAGES, SDK_PARALLEL)
    assert tool_ids(MESSAGES, messages) == (["get_weather_1_0", "get_weather_1_1"],) * 2


def test_results_find_their_calls_by_name_whatever_their_order() -> None:
    body = {"contents": [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "a", "args": {}}},
                                    {"functionCall": {"name": "b", "args": {}}},
                                    {"functionCall": {"name": "a", "args": {"n": 2}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "b", "response": {"output": "B"}}},
                                   {"functionResponse": {"name": "a", "response": {"output": "A1"}}},
                                   {"functionResponse": {"name": "a", "response": {"output": "A2"}}}]},
        {"role": "model", "parts": [{"functionCall": {"name": "a", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "a", "response": {"output": "A3"}}}]}],
        "tools": [{"functionDeclarations": [{"name": "a"}, {"name": "b"}]}]}  # fmt: skip
    chat, _ = to(CHAT, body)
    results = {m["tool_call_id"]: m["content"] for m in chat["messages"] if m["role"] == "tool"}
    assert results == {"b_1_1": "B", "a_1_0": "A1", "a_1_2": "A2", "a_3_0": "A3"}
    assert tool_ids(CHAT, chat)[0] == ["a_1_0", "b_1_1", "a_1_2", "a_3_0"]


def test_a_gemini_3_loop_keeps_the_signed_call_and_drops_the_rest_named() -> None:
    conv = read(G3_LOOP, drops := Dropped())
    calls = [p for p in conv.messages[1].parts if isinstance(p, ToolCall)]
    assert [c.id for c in calls] == [signed_id("get_weather_1_0", SIG), "get_weather_1_1"]
    results = [m.parts[0] for m in conv.messages if m.role == "tool"]
    assert [(r.id, r.content, r.is_error) for r in results if isinstance(r, ToolResult)] == [
        (calls[0].id, "sunny", False), ("get_weather_1_1", "station offline", True)]  # fmt: skip
    assert drops.names == ["contents.parts.thoughtSignature"]  # a text's signature
    assert (conv.effort, conv.reasoning_summary, conv.max_tokens) == ("medium", "auto", 1000)
    messages, dropped = to(MESSAGES, G3_LOOP)
    assert messages["messages"][2]["content"][1] == {
        "type": "tool_result", "tool_use_id": "get_weather_1_1", "content": "station offline",
        "is_error": True}  # fmt: skip
    assert "reasoning" in dropped  # the thought summary: no Anthropic signature
    chat, dropped = to(CHAT, G3_LOOP)
    assert "tool_result.is_error" in dropped and "reasoning" in dropped
    assert chat["messages"][1]["content"] is None  # the thought is not sent


def test_the_sdks_body_with_proto_names_and_a_forced_tool() -> None:
    chat, dropped = to(CHAT, SDK_FIRST)
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}
    assert chat["messages"][1]["content"][1] == {
        "type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw=="}}  # fmt: skip
    assert chat["tools"][0]["function"]["parameters"] == {
        "type": "object", "required": ["city"],
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "default": "celsius"}}}  # fmt: skip
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert (chat["max_completion_tokens"], chat["stop"], chat["temperature"]) == (200, ["END"], 0.2)
    assert chat["reasoning_effort"] == "low"  # a 1024-token budget
    assert dropped == ["safetySettings", "generationConfig.topK", "generationConfig.seed",
                       "reasoning.summary"]  # fmt: skip
    messages, dropped = to(MESSAGES, SDK_FIRST)
    assert messages["tool_choice"] == {"type": "tool", "name": "get_weather"}
    assert "thinking" not in messages and "reasoning_effort" in dropped  # forced tool use
    assert messages["max_tokens"] == 200 and messages["stop_sequences"] == ["END"]


def test_json_output_by_schema_in_either_dialect() -> None:
    chat, _ = to(CHAT, CLI_CLASSIFIER)
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "response", "schema": CLASSIFIER_SCHEMA}}  # fmt: skip
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "user"]
    messages, dropped = to(MESSAGES, CLI_CLASSIFIER)
    assert messages["output_config"] == {
        "format": {"type": "json_schema", "schema": CLASSIFIER_SCHEMA}
    }
    assert messages["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "<session_context>...</session_context>"},
        {"type": "text", "text": "say hello"}]}]  # fmt: skip
    assert dropped == ["response_format.json_schema.name"]  # (the name the reader gave)
    responses, _ = to(RESPONSES, SDK_PARALLEL)
    assert responses["text"]["format"] == {"type": "json_schema", "name": "response", "schema": {
        "title": "Recipe", "type": "object", "required": ["name"], "properties": {
            "name": {"title": "Name", "type": "string"},
            "minutes": {"title": "Minutes", "type": ["integer", "null"]}}}}  # fmt: skip
    assert responses["reasoning"] == {"effort": "low"}


@pytest.mark.parametrize(
    ("config", "chat", "anthropic"),
    [
        ({"thinkingBudget": 0}, "none", None),
        ({"thinkingBudget": 0, "includeThoughts": True}, "none", None),
        ({"thinkingBudget": -1}, "medium", 8192),
        ({"thinkingBudget": 512}, "low", 1024),  # at least Anthropic's minimum
        ({"thinkingBudget": 8192}, "medium", 8192),  # the CLI's for 2.5 models
        ({"thinkingBudget": 24576}, "high", 24576),
        ({"thinkingLevel": "minimal"}, "minimal", 1024),
        ({"thinking_level": "LOW"}, "low", 2048),
        ({"thinkingLevel": "HIGH"}, "high", 16384),
        ({"thinkingLevel": "THINKING_LEVEL_UNSPECIFIED"}, None, None),
        ({"includeThoughts": True}, None, None),
    ],
)
def test_thinking(config: dict[str, Any], chat: str | None, anthropic: int | None) -> None:
    body = {"contents": [CLI_FIRST_TURN], "generationConfig": {"thinkingConfig": config}}
    assert to(CHAT, body)[0].get("reasoning_effort") == chat
    thinking = to(MESSAGES, body)[0].get("thinking")
    assert (thinking or {}).get("budget_tokens") == anthropic
    summary = to(RESPONSES, body)[0].get("reasoning", {}).get("summary")
    assert summary == ("auto" if config.get("includeThoughts") and chat != "none" else None)


@pytest.mark.parametrize(
    ("calling", "choice", "anthropic", "tools"),
    [
        ({"mode": "AUTO"}, "auto", {"type": "auto"}, ["a", "b", "c"]),
        ({"mode": "NONE"}, "none", {"type": "none"}, ["a", "b", "c"]),
        ({"mode": "ANY"}, "required", {"type": "any"}, ["a", "b", "c"]),
        ({"mode": "any", "allowed_function_names": ["b"]},
         {"type": "function", "function": {"name": "b"}}, {"type": "tool", "name": "b"}, ["a", "b", "c"]),
        ({"mode": "ANY", "allowedFunctionNames": ["c", "a"]}, "required", {"type": "any"}, ["a", "c"]),
        ({"mode": "VALIDATED"}, "auto", {"type": "auto"}, ["a", "b", "c"]),
        ({"mode": "VALIDATED", "allowedFunctionNames": ["b"]}, "auto", {"type": "auto"}, ["b"]),
        ({"mode": "MODE_UNSPECIFIED"}, None, None, ["a", "b", "c"]),
    ],
)  # fmt: skip
def test_function_calling_modes(
    calling: dict[str, Any], choice: Any, anthropic: Any, tools: list[str]
) -> None:
    body = {"contents": [CLI_FIRST_TURN],
            "toolConfig": {"functionCallingConfig": calling},
            "tools": [{"functionDeclarations": [{"name": n} for n in "abc"]}]}  # fmt: skip
    chat, _ = to(CHAT, body)
    assert chat.get("tool_choice") == choice
    assert [t["function"]["name"] for t in chat["tools"]] == tools
    assert to(MESSAGES, body)[0].get("tool_choice") == anthropic


def test_images_and_documents_by_their_data() -> None:
    chat, _ = to(CHAT, IMAGES)
    assert chat["messages"][0]["content"][1:] == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}"}},
        {"type": "file", "file": {"file_data": f"data:text/plain;base64,{HELLO}"}}]  # fmt: skip
    messages, _ = to(MESSAGES, IMAGES)
    assert messages["messages"][0]["content"][1:] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}}]  # fmt: skip
    converse, _ = to(CONVERSE, IMAGES)
    assert converse["messages"][0]["content"][1]["image"]["format"] == "png"


def test_a_function_responses_own_images_go_with_its_result() -> None:
    result = {"functionResponse": {"id": "c1", "name": "read_file", "response": {"output": "1 image"},
              "parts": [{"inlineData": {"mimeType": "image/png", "data": PNG}}]}}  # fmt: skip
    body = {"contents": [CLI_FIRST_TURN, {"role": "model", "parts": [
        {"functionCall": {"id": "c1", "name": "read_file", "args": {"file_path": "a.png"}}}]},
        {"role": "user", "parts": [result]}], "tools": CLI_TOOLS}  # fmt: skip
    messages, _ = to(MESSAGES, body)
    assert messages["messages"][2]["content"][0]["content"] == [
        {"type": "text", "text": "1 image"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]  # fmt: skip
    chat, dropped = to(CHAT, body)
    assert chat["messages"][-1]["content"] == "1 image" and "tool_result.image" in dropped


@pytest.mark.parametrize(
    ("response", "text", "error"),
    [
        ({"output": "plain"}, "plain", False),
        ({"output": {"rows": [1, 2]}}, '{"rows":[1,2]}', False),
        ({"error": "boom"}, "boom", True),
        ({"error": {"code": 2}}, '{"code":2}', True),
        ({"result": "x", "more": 1}, '{"result":"x","more":1}', False),
        ({}, "", False),
        ({"output": None}, "", False),
    ],
)
def test_function_response_values(response: dict[str, Any], text: str, error: bool) -> None:
    body = {"contents": [{"role": "model", "parts": [{"functionCall": {"id": "c", "name": "f"}}]},
                         {"role": "user", "parts": [{"functionResponse": {
                             "id": "c", "name": "f", "response": response}}]}]}  # fmt: skip
    result = read(body, Dropped()).messages[1].parts[0]
    assert isinstance(result, ToolResult) and (result.content, result.is_error) == (text, error)


def test_dropped_fields_are_named() -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "run it"}, {"videoMetadata": {"fps": 1}}]},
            {"role": "model", "parts": [
                {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
                {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1"}},
                {"text": "1", "thoughtSignature": SIG}]},
            {"role": "user", "parts": [{"text": "ok"}]}],
        "tools": [{"googleSearch": {}}, {"code_execution": {}}, {"urlContext": {}},
                  {"functionDeclarations": [{"name": "f", "response": {"type": "STRING"},
                                             "behavior": "BLOCKING"}]}],
        "toolConfig": {"retrievalConfig": {"languageCode": "en"}},
        "generationConfig": {"topK": 40, "seed": 3, "presencePenalty": 0.5,
                             "frequencyPenalty": 0.5, "mediaResolution": "MEDIA_RESOLUTION_LOW",
                             "candidateCount": 1,
                             "responseModalities": ["TEXT"], "responseLogprobs": False,
                             "thinkingConfig": {"thinkingLevel": "extreme"}},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        "labels": {"team": "a"},
        "somethingNew": 1,
    }  # fmt: skip
    chat, dropped = to(CHAT, body)
    assert dropped == [  # in the body's order; the tool config's once the tools are known
        "contents.parts.videoMetadata", "contents.parts.executableCode",
        "contents.parts.codeExecutionResult", "contents.parts.thoughtSignature",
        "tools.googleSearch", "tools.codeExecution", "tools.urlContext",
        "tools.functionDeclarations.response", "tools.functionDeclarations.behavior",
        "generationConfig.topK", "generationConfig.seed", "generationConfig.presencePenalty",
        "generationConfig.frequencyPenalty", "generationConfig.mediaResolution",
        "generationConfig.thinkingConfig.thinkingLevel", "safetySettings", "labels",
        "somethingNew", "toolConfig.retrievalConfig",
    ]  # fmt: skip
    assert [t["function"]["name"] for t in chat["tools"]] == ["f"]
    assert [m["content"] for m in chat["messages"]] == ["run it", "1", "ok"]


def test_only_built_in_tools_leave_none() -> None:
    """The Gemini CLI's web search call: the model answers without the search."""
    body = {"contents": [{"role": "user", "parts": [{"text": "gemini cli release notes"}]}],
            "tools": [{"googleSearch": {}}], "generationConfig": {"temperature": 0, "topP": 1}}  # fmt: skip
    for target in TARGETS:
        out, dropped = to(target, body)
        assert "tools" not in out and "toolConfig" not in out and dropped == ["tools.googleSearch"]


def test_a_file_by_url_goes_where_urls_are_taken() -> None:
    body = {"contents": [{"role": "user", "parts": [
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}}]}]}  # fmt: skip
    assert to(CHAT, body)[0]["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}]  # fmt: skip
    assert to(MESSAGES, body)[0]["messages"][0]["content"][0]["source"] == {
        "type": "url", "url": "https://example.com/cat.jpg"}  # fmt: skip
    for target, field in ((CONVERSE, "image_url"), (GEMINI, "image_url")):
        with pytest.raises(Refused) as e:
            to(target, body)
        assert e.value.field == field
    pdf = {"contents": [{"role": "user", "parts": [  # as google-genai sends it
        {"fileData": {"file_uri": "https://example.com/a.pdf", "mime_type": "application/pdf"}}]}]}  # fmt: skip
    assert to(MESSAGES, pdf)[0]["messages"][0]["content"] == [
        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}]  # fmt: skip
    assert (
        to(RESPONSES, pdf)[0]["input"][0]["content"][0]["file_url"] == "https://example.com/a.pdf"
    )
    for target in (CHAT, CONVERSE):
        with pytest.raises(Refused) as e:
            to(target, pdf)
        assert e.value.field == "document.source.url"


def user(*parts: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": list(parts)}]}


REFUSALS = [
    ({"contents": [{"role": "system", "parts": [{"text": "x"}]}]}, "contents.role"),
    ({**user({"text": "x"}), "cachedContent": "cachedContents/abc"}, "cachedContent"),
    ({**user({"text": "x"}), "generationConfig": {"candidateCount": 2}}, "generationConfig.candidateCount"),
    ({**user({"text": "x"}), "generationConfig": {"responseLogprobs": True}}, "generationConfig.responseLogprobs"),
    ({**user({"text": "x"}), "generationConfig": {"logprobs": 3}}, "generationConfig.logprobs"),
    ({**user({"text": "x"}), "generationConfig": {"responseModalities": ["TEXT", "IMAGE"]}},
     "generationConfig.responseModalities"),
    ({**user({"text": "x"}), "generationConfig": {"speechConfig": {"voiceConfig": {}}}}, "generationConfig.speechConfig"),
    ({**user({"text": "x"}), "generationConfig": {"audioTimestamp": True}}, "generationConfig.audioTimestamp"),
    ({**user({"text": "x"}), "generationConfig": {"responseMimeType": "text/x.enum", "responseSchema": {
        "type": "STRING", "format": "enum", "enum": ["a", "b"]}}}, "generationConfig.responseMimeType"),
    ({**user({"text": "x"}), "generationConfig": {"responseMimeType": "text/csv"}}, "generationConfig.responseMimeType"),
    ({**user({"text": "x"}), "generationConfig": {"responseJsonSchema": {"type": "object"}}},
     "generationConfig.responseMimeType"),
    ({**user({"text": "x"}), "generationConfig": {"responseMimeType": "application/json", "responseSchema": {
        "type": "STRNG"}}}, "generationConfig.responseSchema.type"),
    ({**user({"text": "x"}), "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}},
      "tools": CLI_TOOLS}, "toolConfig.functionCallingConfig.mode"),
    ({**user({"text": "x"}), "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}},
     "toolConfig.functionCallingConfig.mode"),
    ({**user({"text": "x"}), "toolConfig": {"functionCallingConfig": {
        "mode": "ANY", "allowedFunctionNames": ["rm_rf"]}}, "tools": CLI_TOOLS},
     "toolConfig.functionCallingConfig.allowedFunctionNames"),
    ({**user({"text": "x"}), "tools": [{"functionDeclarations": [{"name": "f", "parameters": {
        "type": "OBJECT", "properties": {"a": {"type": 5}}}}]}]},
     "tools[0].functionDeclarations[0].parameters.properties.a.type"),
    (user({"inlineData": {"mimeType": "audio/wav", "data": "UklG"}}), "contents.parts.inlineData"),
    (user({"fileData": {"mimeType": "video/mp4", "fileUri": "https://example.com/v.mp4"}}), "contents.parts.fileData"),
    (user({"fileData": {"fileUri": "https://www.youtube.com/watch?v=9hE5-98ZeCg"}}), "contents.parts.fileData"),
    (user({"fileData": {"mimeType": "application/pdf", "fileUri": "gs://bucket/a.pdf"}}), "contents.parts.fileData"),
    (user({"fileData": {"mimeType": "image/png", "fileUri":
                        "https://generativelanguage.googleapis.com/v1beta/files/abc"}}), "contents.parts.fileData"),
    (user({"functionResponse": {"id": "c", "name": "f", "response": {"output": "x"}, "parts": [
        {"inlineData": {"mimeType": "video/mp4", "data": "AAAA"}}]}}),
     "contents.parts.functionResponse.parts.inlineData"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "field"), REFUSALS, ids=[f for _, f in REFUSALS])
def test_refusals_name_the_field(body: dict[str, Any], field: str) -> None:
    convert.check(body, GEMINI)
    for target in (*TARGETS, GEMINI):
        with pytest.raises(Refused) as e:
            convert.request(body, GEMINI, target, max_output_tokens=None)
        assert e.value.field == field and e.value.status == 400


def test_caps_and_the_field_chat_gets_them_in() -> None:
    body = {"contents": [CLI_FIRST_TURN], "generationConfig": {"maxOutputTokens": 5000}}
    assert to(CHAT, body)[0]["max_tokens"] == 5000
    assert to(CHAT, body, cap=4000)[0]["max_tokens"] == 4000  # the model's own cap
    assert to(MESSAGES, body)[0]["max_tokens"] == 5000
    assert to(CONVERSE, body)[0]["inferenceConfig"] == {"maxTokens": 5000}
    assert to(RESPONSES, body)[0]["max_output_tokens"] == 5000
    thinking = {"contents": [CLI_FIRST_TURN],
                "generationConfig": {"maxOutputTokens": 5000, "thinkingConfig": {"thinkingBudget": 2048}}}  # fmt: skip
    assert to(CHAT, thinking)[0]["max_completion_tokens"] == 5000  # what reasoning models take


def test_a_system_instruction_string_and_json_mode() -> None:
    body = {"contents": [CLI_FIRST_TURN], "system_instruction": "Answer in JSON.",
            "generation_config": {"response_mime_type": "application/json"}}  # fmt: skip
    chat, _ = to(CHAT, body)
    assert chat["messages"][0] == {"role": "system", "content": "Answer in JSON."}
    assert chat["response_format"] == {"type": "json_object"}
    assert to(MESSAGES, {**body, "generation_config": None})[0]["system"] == "Answer in JSON."
    with pytest.raises(Refused) as e:
        to(MESSAGES, body)  # no JSON mode without a schema there
    assert e.value.field == "response_format.json_object"


# ---- round trip -------------------------------------------------------------------------


def test_round_trip_keeps_the_cli_loop() -> None:
    out, dropped = to(GEMINI, CLI_LOOP)
    assert out["contents"] == [
        CLI_FIRST_TURN | {"role": "user"},
        {"role": "model", "parts": [{"functionCall": {"id": "list_directory_1796649716085_0",
                                     "name": "list_directory", "args": {"dir_path": "."}},
                                     "thoughtSignature": SIG}]},
        {"role": "user", "parts": [CLI_RESULT]},
    ]  # fmt: skip
    assert out["systemInstruction"] == {"parts": [{"text": CLI_SYSTEM}]}
    declarations = out["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in declarations] == [
        d["name"] for d in CLI_TOOLS[0]["functionDeclarations"]
    ]
    assert declarations[0]["parameters"]["properties"]["dir_path"]["type"] == "STRING"
    assert out["generationConfig"] == {"temperature": 1, "topP": 0.95, "thinkingConfig": {
        "thinkingBudget": 16384, "includeThoughts": True}}  # fmt: skip
    assert dropped == ["generationConfig.topK"]


def test_round_trip_gives_ids_and_signatures_back_to_the_calls() -> None:
    out, dropped = to(GEMINI, G3_LOOP)
    model = out["contents"][1]["parts"]
    assert model == [
        {"functionCall": {"id": "get_weather_1_0", "name": "get_weather", "args": {"city": "Paris"}},
         "thoughtSignature": SIG},
        {"functionCall": {"id": "get_weather_1_1", "name": "get_weather", "args": {"city": "Rome"}}}]  # fmt: skip
    assert out["contents"][2]["parts"] == [
        {"functionResponse": {"id": "get_weather_1_0", "name": "get_weather", "response": {"output": "sunny"}}},
        {"functionResponse": {"id": "get_weather_1_1", "name": "get_weather",
                              "response": {"error": "station offline"}}}]  # fmt: skip
    assert out["contents"][3:] == [
        {"role": "model", "parts": [{"text": "Paris is sunny; Rome's station is offline."}]},
        {"role": "user", "parts": [{"text": "And Berlin?"}]}]  # fmt: skip
    assert out["generationConfig"]["maxOutputTokens"] == 1000
    assert set(dropped) == {"contents.parts.thoughtSignature", "reasoning"}


def test_round_trip_of_the_sdks_bodies() -> None:
    out, _ = to(GEMINI, SDK_FIRST)
    assert out["contents"] == [{"role": "user", "parts": [
        {"text": "What's the weather in Paris?"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBORw=="}}]}]  # fmt: skip
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": "ANY",
                                                           "allowedFunctionNames": ["get_weather"]}}  # fmt: skip
    params = out["tools"][0]["functionDeclarations"][0]["parameters"]
    assert params["type"] == "OBJECT" and params["required"] == ["city"]
    assert params["properties"]["unit"] == {"type": "STRING", "default": "celsius"}
    assert out["generationConfig"] == {"maxOutputTokens": 200, "temperature": 0.2,
                                       "stopSequences": ["END"],
                                       "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True}}  # fmt: skip
    json_out, _ = to(GEMINI, CLI_CLASSIFIER)
    assert json_out["generationConfig"]["responseMimeType"] == "application/json"
    schema = json_out["generationConfig"]["responseSchema"]
    assert schema["properties"]["complexity_score"] == {
        "type": "INTEGER",
        "minimum": 1,
        "maximum": 100,
    }
    assert json_out["contents"] == [{"role": "user", "parts": [
        {"text": "<session_context>...</session_context>"}, {"text": "say hello"}]}]  # fmt: skip


# ---- the type check ---------------------------------------------------------------------

WRONG = [
    ({"contents": {"role": "user"}}, "contents", "'contents' must be an array of Content objects, got an object"),
    ({"contents": ["hi"]}, "contents[0]", "'contents[0]' must be a Content object, got a string"),
    ({}, "contents", "'contents' is required"),
    ({"contents": [{"role": 1}]}, "contents[0].role", "'contents[0].role' must be a string, got the number 1"),
    ({"contents": [{"parts": "hi"}]}, "contents[0].parts", "'contents[0].parts' must be an array, got a string"),
    ({"contents": [{"parts": [{"text": ["a"]}]}]}, "contents[0].parts[0].text",
     "'contents[0].parts[0].text' must be a string, got an array"),
    ({"contents": [{"parts": [{"functionCall": {"name": "f", "args": "{}"}}]}]},
     "contents[0].parts[0].functionCall.args", "'contents[0].parts[0].functionCall.args' must be an object, got a string"),
    ({"contents": [{"parts": [{"function_response": {"name": "f", "response": "ok"}}]}]},
     "contents[0].parts[0].function_response.response",
     "'contents[0].parts[0].function_response.response' must be an object, got a string"),
    ({"contents": [{"parts": [{"inline_data": {"mime_type": 4}}]}]}, "contents[0].parts[0].inline_data.mime_type",
     "'contents[0].parts[0].inline_data.mime_type' must be a string, got the number 4"),
    ({"contents": [{"parts": [{"fileData": {"fileUri": None, "mimeType": ["a"]}}]}]},
     "contents[0].parts[0].fileData.mimeType", "'contents[0].parts[0].fileData.mimeType' must be a string, got an array"),
    ({"contents": [{"parts": [{"thoughtSignature": 5, "text": "x"}]}]}, "contents[0].parts[0].thoughtSignature",
     "'contents[0].parts[0].thoughtSignature' must be a string, got the number 5"),
    ({"contents": [], "systemInstruction": 5}, "systemInstruction",
     "'systemInstruction' must be a string or an object, got the number 5"),
    ({"contents": [], "system_instruction": {"parts": [{"text": 1}]}}, "system_instruction.parts[0].text",
     "'system_instruction.parts[0].text' must be a string, got the number 1"),
    ({"contents": [], "tools": {"functionDeclarations": []}}, "tools", "'tools' must be an array, got an object"),
    ({"contents": [], "tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": "{}"}]}]},
     "tools[0].functionDeclarations[0].parametersJsonSchema",
     "'tools[0].functionDeclarations[0].parametersJsonSchema' must be an object, got a string"),
    ({"contents": [], "toolConfig": {"functionCallingConfig": {"allowedFunctionNames": "f"}}},
     "toolConfig.functionCallingConfig.allowedFunctionNames",
     "'toolConfig.functionCallingConfig.allowedFunctionNames' must be an array, got a string"),
    ({"contents": [], "generationConfig": {"maxOutputTokens": 0}}, "generationConfig.maxOutputTokens",
     "'generationConfig.maxOutputTokens' must be a positive integer, got the number 0"),
    ({"contents": [], "generationConfig": {"temperature": "hot"}}, "generationConfig.temperature",
     "'generationConfig.temperature' must be a number, got a string"),
    ({"contents": [], "generationConfig": {"stop_sequences": "END"}}, "generationConfig.stop_sequences",
     "'generationConfig.stop_sequences' must be an array, got a string"),
    ({"contents": [], "generationConfig": {"responseModalities": [1]}}, "generationConfig.responseModalities[0]",
     "'generationConfig.responseModalities[0]' must be a string, got the number 1"),
    ({"contents": [], "generationConfig": {"thinkingConfig": {"thinkingBudget": 1.5}}},
     "generationConfig.thinkingConfig.thinkingBudget",
     "'generationConfig.thinkingConfig.thinkingBudget' must be an integer, got the number 1.5"),
    ({"contents": [], "generationConfig": {"thinkingConfig": {"includeThoughts": "yes"}}},
     "generationConfig.thinkingConfig.includeThoughts",
     "'generationConfig.thinkingConfig.includeThoughts' must be true or false, got a string"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "param", "message"), WRONG, ids=[m for *_, m in WRONG])
def test_a_wrongly_typed_field_is_a_400_naming_it(
    body: dict[str, Any], param: str, message: str
) -> None:
    with pytest.raises(GatewayError) as e:
        convert.check(body, GEMINI)
    assert (e.value.status, e.value.param, e.value.message) == (400, param, message)


@pytest.mark.parametrize("name", list(BODIES))
def test_what_clients_send_passes_the_check(name: str) -> None:
    before = orjson.dumps(BODIES[name])
    convert.check(BODIES[name], GEMINI)
    for target in (*TARGETS, GEMINI):
        with contextlib.suppress(Refused):  # (stop sequences towards Responses)
            convert.request(BODIES[name], GEMINI, target, max_output_tokens=None)
    assert orjson.dumps(BODIES[name]) == before  # the client's body is never changed


# ---- property: nothing but a 400 --------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip
NAMES = st.sampled_from(["f", "g", "", "a.b"])
MIMES = st.sampled_from(["image/png", "application/pdf", "text/plain", "IMAGE/JPEG", "", "x"] * 3
                        + ["audio/wav", "video/mp4"])  # fmt: skip
URIS = st.sampled_from(["https://e.com/a.png"] * 8 + ["gs://b/a", "http://[", "", "youtu.be/x",
                        "https://generativelanguage.googleapis.com/v1beta/files/a"])  # fmt: skip


def often(strategy: st.SearchStrategy[Any], odds: int = 128) -> st.SearchStrategy[Any]:
    """The field's own type, or once in ``odds`` any JSON value (a body has dozens of
    fields: most of the bodies drawn pass the check)."""
    return st.sampled_from(range(odds)).flatmap(lambda i: JSON if i == 0 else strategy)


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={k: often(v) for k, v in fields.items()})


B64 = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", max_size=8)
BLOB = obj(mimeType=MIMES, mime_type=MIMES, data=B64, displayName=st.text(max_size=3))
FILE = obj(mimeType=MIMES, fileUri=URIS, file_uri=URIS)
RESPONSE = st.dictionaries(st.sampled_from(["output", "error", "x"]), JSON, max_size=2)
IDS = st.sampled_from(["c1", "c2", ""])
PART = st.one_of(  # mostly one kind of part each, as Gemini's are
    obj(text=st.text(max_size=6), thought=st.booleans(), thoughtSignature=st.text(max_size=6)),
    obj(functionCall=obj(id=IDS, name=NAMES, args=st.dictionaries(st.text(max_size=3), JSON,
                                                                  max_size=2)),
        thoughtSignature=st.text(max_size=6)),
    obj(function_response=obj(id=IDS, name=NAMES, response=RESPONSE,
                              parts=st.lists(obj(inlineData=BLOB, fileData=FILE), max_size=2))),
    obj(inlineData=BLOB), obj(file_data=FILE),
    obj(text=st.text(max_size=6), functionCall=obj(name=NAMES), executableCode=JSON),
)  # fmt: skip
CONTENT = obj(role=st.sampled_from(["user", "model"] * 4 + ["function", "", "system"]),
              parts=st.lists(PART, min_size=1, max_size=4))  # fmt: skip
SCHEMA = st.sampled_from([
    {"type": "OBJECT", "properties": {"a": {"type": "STRING", "nullable": True}}},
    {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
    {"type": "ARRAY", "items": {"type": "INTEGER", "enum": ["1", "2"]}}, {},
]) | st.dictionaries(st.sampled_from(["type", "properties", "items", "enum", "nullable", "anyOf"]),
                     JSON, max_size=2)  # fmt: skip
DECLARATION = obj(name=NAMES, description=st.text(max_size=4), parameters=SCHEMA,
                  parametersJsonSchema=SCHEMA, behavior=JSON)  # fmt: skip
GENERATION = obj(
    maxOutputTokens=st.integers(1, 10_000), temperature=st.floats(0, 2), topP=st.floats(0, 1),
    stopSequences=st.lists(st.text(max_size=3), max_size=2), candidateCount=st.integers(0, 3),
    responseMimeType=st.sampled_from(["application/json", "text/plain", "text/x.enum", "a/b"]),
    responseSchema=SCHEMA, response_json_schema=SCHEMA,
    responseModalities=st.lists(st.sampled_from(["TEXT", "IMAGE", "text"]), max_size=2),
    responseLogprobs=st.sampled_from([False] * 7 + [True]), topK=JSON,
    thinkingConfig=obj(thinkingBudget=st.integers(-2, 40_000), thinking_level=st.text(max_size=8),
                       includeThoughts=st.booleans()),
)  # fmt: skip
BODY = st.fixed_dictionaries(
    {"contents": often(st.lists(CONTENT, min_size=1, max_size=6), 16)},
    optional={
        "systemInstruction": often(st.one_of(st.text(max_size=5), CONTENT), 16),
        "tools": often(st.lists(obj(functionDeclarations=st.lists(DECLARATION, min_size=1, max_size=3),
                                    googleSearch=JSON), max_size=2), 16),
        "toolConfig": often(obj(functionCallingConfig=obj(
            mode=st.sampled_from(["AUTO", "ANY", "NONE", "VALIDATED", "x", "any"]),
            allowedFunctionNames=st.lists(NAMES, max_size=2)), retrievalConfig=JSON), 16),
        "generation_config": often(GENERATION, 16),
        "safetySettings": JSON, "cachedContent": st.just(""), "other": JSON,
    },
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(BODY)
def test_a_checked_body_is_read_or_refused_never_broken(body: dict[str, Any]) -> None:
    """On any body the type check lets through, reading it (and writing it for every
    provider format) raises nothing but a 400."""
    try:
        convert.check(body, GEMINI)
    except GatewayError:
        return
    try:
        read(body, Dropped())
    except GatewayError:
        return
    for target in (*TARGETS, GEMINI):
        with contextlib.suppress(GatewayError):
            convert.request(body, GEMINI, target, max_output_tokens=None)
