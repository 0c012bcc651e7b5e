"""Responses ``namespace`` tools across formats (found with the real Codex CLI).

``codex exec`` offers its sub-agent functions as a Responses namespace tool
(``{"type": "namespace", "name": "multi_agent_v1", "tools": [functions]}``) in every
request. They are the client's own functions, so they have a faithful translation:
flattened for the formats without namespaces (``multi_agent_v1__spawn_agent``), and a call
the model makes of one is named back in its namespace (``name`` + ``namespace``, which is
how Codex dispatches it). They were refused as if they were hosted tools
(``tools.namespace: this tool type is not available on this model``), so Codex could not
use an Anthropic or chat model at all.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai.types.responses import Response

from gateway.errors import Refused
from gateway.formats import CHAT, MESSAGES, RESPONSES, Format
from gateway.translate import convert
from gateway.translate.requests import translate
from tests.translate.test_streams import parse
from tests.translate.test_streams import translate as translate_stream

pytestmark = pytest.mark.fast

SPAWN = {"type": "function", "name": "spawn_agent", "description": "Spawn a sub-agent.",
         "strict": False, "parameters": {"type": "object", "properties": {
             "message": {"type": "string"}}, "required": ["message"]}}  # fmt: skip
CLOSE = {"type": "function", "name": "close_agent", "strict": False,
         "parameters": {"type": "object", "properties": {"target": {"type": "string"}}}}  # fmt: skip
EXEC = {"type": "function", "name": "exec_command", "strict": False,
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}  # fmt: skip
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1",
             "description": "Tools for spawning and managing sub-agents.",
             "tools": [CLOSE, SPAWN]}  # fmt: skip
# What codex exec sends (trimmed): its functions, the namespace, and, on the next turn, the
# call of a namespaced function with its output.
CODEX: dict[str, Any] = {
    "model": "claude-test",
    "instructions": "You are a coding agent.",
    "input": [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Close agent a1"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "toolu_1", "name": "close_agent",
         "namespace": "multi_agent_v1", "arguments": '{"target": "a1"}'},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "closed"},
    ],
    "tools": [EXEC, NAMESPACE],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "stream": True,
}  # fmt: skip
FLAT = ["exec_command", "multi_agent_v1__close_agent", "multi_agent_v1__spawn_agent"]


def test_namespace_tools_are_flattened_towards_anthropic() -> None:
    body, _, drops = translate(CODEX, "responses", "messages")
    assert [t["name"] for t in body["tools"]] == FLAT
    spawn = body["tools"][2]
    assert spawn["description"] == "Spawn a sub-agent."
    assert spawn["input_schema"] == SPAWN["parameters"]
    # the history's call of a namespaced function goes by the same flat name, same id
    call, result = body["messages"][1]["content"][0], body["messages"][2]["content"][0]
    assert call == {"type": "tool_use", "id": "toolu_1", "name": "multi_agent_v1__close_agent",
                    "input": {"target": "a1"}}  # fmt: skip
    assert result == {"type": "tool_result", "tool_use_id": "toolu_1", "content": "closed"}
    assert drops.names == ["tools.namespace.description"]


def test_namespace_tools_are_flattened_towards_chat() -> None:
    body, _, _ = translate(CODEX, "responses", "chat")
    assert [t["function"]["name"] for t in body["tools"]] == FLAT
    call = body["messages"][2]["tool_calls"][0]
    assert call["function"]["name"] == "multi_agent_v1__close_agent"
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "closed"}


def test_a_forced_namespaced_function_is_named_flat() -> None:
    choice = {"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"}
    body, _, _ = translate({**CODEX, "tool_choice": choice}, "responses", "messages")
    assert body["tool_choice"] == {"type": "tool", "name": "multi_agent_v1__spawn_agent"}


@pytest.mark.parametrize("target", ["messages", "chat"])
def test_a_custom_tool_in_a_namespace_is_dropped_and_named(target: str) -> None:
    custom = {**NAMESPACE, "tools": [{"type": "custom", "name": "apply_patch"}]}
    body, _, drops = translate({**CODEX, "tools": [custom]}, "responses", target)
    assert "tools.namespace.custom" in drops.names
    assert "apply_patch" not in str(body.get("tools"))


def test_two_tools_of_one_flat_name_are_refused() -> None:
    clash = {**EXEC, "name": "multi_agent_v1__close_agent"}
    with pytest.raises(Refused) as info:
        translate({**CODEX, "tools": [clash, NAMESPACE]}, "responses", "messages")
    assert info.value.field == "tools.namespace"


def test_tool_names_of_a_request() -> None:
    names = convert.tool_names(CODEX, RESPONSES)
    assert names == {
        "multi_agent_v1__close_agent": ("multi_agent_v1", "close_agent"),
        "multi_agent_v1__spawn_agent": ("multi_agent_v1", "spawn_agent"),
    }
    assert convert.tool_names({"tools": [EXEC]}, RESPONSES) == {}
    assert convert.tool_names({"tools": [NAMESPACE]}, CHAT) == {}


ANTHROPIC_ANSWER = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
    "content": [
        {"type": "tool_use", "id": "toolu_2", "name": "multi_agent_v1__spawn_agent",
         "input": {"message": "hi"}},
        {"type": "tool_use", "id": "toolu_3", "name": "exec_command", "input": {"cmd": "ls"}},
    ],
    "stop_reason": "tool_use", "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 5},
}  # fmt: skip


@pytest.mark.parametrize("source", [MESSAGES, CHAT], ids=["messages", "chat"])
def test_a_json_answer_names_the_call_in_its_namespace(source: Format) -> None:
    data = ANTHROPIC_ANSWER
    if source is CHAT:
        data = convert.answer(ANTHROPIC_ANSWER, MESSAGES, CHAT, "m")
    names = convert.tool_names(CODEX, RESPONSES)
    out = convert.answer(data, source, RESPONSES, "claude-test", names)
    calls = [(i["name"], i.get("namespace"), i["call_id"]) for i in out["output"]]
    assert calls == [("spawn_agent", "multi_agent_v1", "toolu_2"),
                     ("exec_command", None, "toolu_3")]  # fmt: skip
    assert Response.model_validate(out).output[0].namespace == "multi_agent_v1"  # type: ignore[union-attr]
    # without the request's names (another client's request) the flat name stays
    plain = convert.answer(data, source, RESPONSES, "claude-test")
    assert plain["output"][0]["name"] == "multi_agent_v1__spawn_agent"
    assert "namespace" not in plain["output"][0]


def _anthropic_stream(name: str) -> bytes:
    def ev(kind: str, data: dict[str, Any]) -> bytes:
        return b"event: %b\ndata: %b\n\n" % (kind.encode(), orjson.dumps({"type": kind, **data}))

    message: dict[str, Any] = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }  # fmt: skip
    block = {"type": "tool_use", "id": "toolu_2", "name": name, "input": {}}
    return b"".join([
        ev("message_start", {"message": message}),
        ev("content_block_start", {"index": 0, "content_block": block}),
        ev("content_block_delta", {"index": 0, "delta": {
            "type": "input_json_delta", "partial_json": '{"message": "hi"}'}}),
        ev("content_block_stop", {"index": 0}),
        ev("message_delta", {"delta": {"stop_reason": "tool_use", "stop_sequence": None},
                             "usage": {"output_tokens": 5}}),
        ev("message_stop", {}),
    ])  # fmt: skip


def test_a_streamed_call_is_named_in_its_namespace() -> None:
    names = convert.tool_names(CODEX, RESPONSES)
    raw = _anthropic_stream("multi_agent_v1__spawn_agent")
    out, _ = translate_stream(raw, "messages", "responses", names=names)
    evs = parse(out)
    items = [d["item"] for n, d in evs if n in ("response.output_item.added",
                                                 "response.output_item.done")]  # fmt: skip
    assert [(i["name"], i["namespace"]) for i in items] == [("spawn_agent", "multi_agent_v1")] * 2
    completed = evs[-1][1]["response"]
    assert evs[-1][0] == "response.completed"
    call = Response.model_validate(completed).output[0]
    assert (call.name, call.namespace, call.arguments) == (  # type: ignore[union-attr]
        "spawn_agent", "multi_agent_v1", '{"message": "hi"}')  # fmt: skip
    # the Splitter the attempter uses carries them too
    splitter = convert.TranslatingSplitter(MESSAGES, RESPONSES, "m", True, names)
    done = [orjson.loads(e.split(b"data: ", 1)[1]) for e in splitter.feed(raw)]
    assert done[-1]["response"]["output"][0]["namespace"] == "multi_agent_v1"
