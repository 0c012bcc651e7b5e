"""The rule table of ``gateway.translate.requests``, checked: every refused field gives a
400 naming the field, every dropped field is named in ``Dropped.names`` and not sent, and
the Anthropic turn rules (alternating roles, tool results right after their turn)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.errors import Refused
from gateway.translate.ir import Caps
from gateway.translate.requests import translate
from tests.translate.test_requests_helpers import ANTHROPIC_SAMPLING, check_request

pytestmark = pytest.mark.fast

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
RESP: dict[str, Any] = {"model": "m", "input": "hi"}
ANTH: dict[str, Any] = {
    "model": "m",
    "max_tokens": 10,
    "messages": [{"role": "user", "content": "hi"}],
}
BASE = {"chat": CHAT, "responses": RESP, "messages": ANTH}
OTHERS = {
    "chat": ("responses", "messages"),
    "responses": ("chat", "messages"),
    "messages": ("chat", "responses"),
}


def user(content: Any, fmt: str = "chat") -> dict[str, Any]:
    if fmt == "responses":
        return {"input": [{"role": "user", "content": content}]}
    return {"messages": [{"role": "user", "content": content}]}


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
TOOL_RESP = {"type": "function", "name": "f", "parameters": {"type": "object"}}

# (client format, fields over the base body, the provider formats it is refused for, field)
REFUSED: list[tuple[str, dict[str, Any], tuple[str, ...], str]] = [
    ("chat", {"n": 2}, OTHERS["chat"], "n"),
    ("chat", {"logprobs": True}, OTHERS["chat"], "logprobs"),
    ("chat", {"top_logprobs": 3}, OTHERS["chat"], "top_logprobs"),
    ("chat", {"logit_bias": {"50256": -100}}, OTHERS["chat"], "logit_bias"),
    ("chat", {"audio": {"voice": "alloy", "format": "wav"}}, OTHERS["chat"], "audio"),
    ("chat", {"modalities": ["text", "audio"]}, OTHERS["chat"], "modalities"),
    ("chat", {"functions": [{"name": "f"}]}, OTHERS["chat"], "functions"),
    ("chat", {"function_call": "auto"}, OTHERS["chat"], "function_call"),
    ("chat", {"web_search_options": {}}, OTHERS["chat"], "web_search_options"),
    ("chat", {"tools": [{"type": "custom", "custom": {"name": "x"}}]}, OTHERS["chat"],
     "tools.custom"),
    ("chat", {"tools": [TOOL], "tool_choice": {"type": "allowed_tools", "allowed_tools": {}}},
     OTHERS["chat"], "tool_choice.allowed_tools"),
    ("chat", user([{"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}]),
     OTHERS["chat"], "messages.content.input_audio"),
    ("chat", {"messages": [{"role": "function", "name": "f", "content": "x"}]},
     OTHERS["chat"], "messages.role.function"),
    ("chat", {"messages": [{"role": "assistant", "audio": {"id": "a"}}]}, OTHERS["chat"],
     "messages.audio"),
    ("chat", {"stop": "\n"}, ("responses",), "stop"),
    ("chat", {"response_format": {"type": "json_object"}}, ("messages",),
     "response_format.json_object"),
    ("chat", {"temperature": 1.5}, ("messages",), "temperature"),
    ("chat", user([{"type": "file", "file": {"file_id": "file-abc"}}]), ("messages",),
     "file.file_id"),
    ("chat", {"tool_choice": "required"}, ("messages",), "tool_choice"),
    ("responses", {"previous_response_id": "resp_1"}, OTHERS["responses"],
     "previous_response_id"),
    ("responses", {"conversation": "conv_1"}, OTHERS["responses"], "conversation"),
    ("responses", {"prompt": {"id": "pmpt_1"}}, OTHERS["responses"], "prompt"),
    ("responses", {"background": True}, OTHERS["responses"], "background"),
    ("responses", {"top_logprobs": 2}, OTHERS["responses"], "top_logprobs"),
    ("responses", {"tool_choice": {"type": "file_search"}}, OTHERS["responses"],
     "tool_choice.file_search"),
    ("messages", {"tools": [{"type": "web_search_20250305", "name": "web_search"}],
                   "tool_choice": {"type": "tool", "name": "web_search"}}, OTHERS["messages"],
     "tool_choice"),
    ("responses", {"input": [{"type": "item_reference", "id": "msg_1"}]}, OTHERS["responses"],
     "input.item_reference"),
    ("responses", user([{"type": "input_image", "file_id": "file-1", "detail": "auto"}],
                       "responses"), OTHERS["responses"], "input_image.file_id"),
    ("responses", user([{"type": "input_audio", "input_audio": {}}], "responses"),
     OTHERS["responses"], "content.input_audio"),
    ("responses", user([{"type": "input_file", "file_url": "https://x/a.pdf"}], "responses"),
     ("chat",), "document.source.url"),
    ("responses", {"text": {"format": {"type": "json_object"}}}, ("messages",),
     "response_format.json_object"),
    ("messages", {"mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]},
     OTHERS["messages"], "mcp_servers"),
    ("messages", {"container": "container_1"}, OTHERS["messages"], "container"),
    ("messages", user([{"type": "image", "source": {"type": "file", "file_id": "f"}}]),
     OTHERS["messages"], "image.source.file"),
    ("messages", user([{"type": "document", "source": {"type": "file", "file_id": "f"}}]),
     OTHERS["messages"], "document.source.file"),
    ("messages", user([{"type": "search_result", "source": "s", "title": "t", "content": []}]),
     OTHERS["messages"], "content.search_result"),
    ("messages", {"stop_sequences": ["END"]}, ("responses",), "stop"),
    ("messages", user([{"type": "document", "source": {"type": "url", "url": "https://x"}}]),
     ("chat",), "document.source.url"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("client", "patch", "target", "field"),
    [(c, p, t, f) for c, p, targets, f in REFUSED for t in targets],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_refused_field_is_a_400_naming_it(
    client: str, patch: dict[str, Any], target: str, field: str
) -> None:
    """A field whose loss would change the answer is a 400 that names the field, in the
    error bodies of both client formats."""
    with pytest.raises(Refused) as info:
        translate({**BASE[client], **patch}, client, target)
    err = info.value
    assert (err.status, err.field, err.param) == (400, field, field)
    openai_error = err.openai_body()["error"]
    assert isinstance(openai_error, dict)
    assert openai_error["param"] == field
    assert openai_error["type"] == "invalid_request_error"
    assert str(openai_error["message"]).startswith(f"{field}: ")
    anthropic_error = err.anthropic_body()["error"]
    assert isinstance(anthropic_error, dict)
    assert anthropic_error["type"] == "invalid_request_error"
    assert field in str(anthropic_error["message"])


def test_fields_at_their_no_op_value_are_neither_refused_nor_named() -> None:
    """``n: 1``, ``logprobs: false``, ``modalities: ["text"]``, zero penalties, an empty
    ``logit_bias``, ``background: false``, ``store: false`` and ``truncation: disabled``
    change nothing and are not reported."""
    chat = {**CHAT, "n": 1, "logprobs": False, "modalities": ["text"], "logit_bias": {},
            "frequency_penalty": 0, "presence_penalty": 0, "store": False}  # fmt: skip
    for target in OTHERS["chat"]:
        _, _, drops = translate(chat, "chat", target)
        assert drops.names == []
    resp = {**RESP, "background": False, "truncation": "disabled", "store": False}
    for target in OTHERS["responses"]:
        assert translate(resp, "responses", target)[2].names == []


IMG = {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "high"}}
THINK = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "[1]"}}
LONG_USER = "user_" + "a" * 64

# (client format, fields over the base body, provider format, caps, the names dropped)
DROPPED: list[tuple[str, dict[str, Any], str, Caps | None, list[str]]] = [
    ("chat", {"frequency_penalty": 0.5}, "messages", None, ["frequency_penalty"]),
    ("chat", {"presence_penalty": 0.5}, "responses", None, ["presence_penalty"]),
    ("chat", {"seed": 7}, "messages", None, ["seed"]),
    ("chat", {"prediction": {"type": "content", "content": "x"}}, "responses", None,
     ["prediction"]),
    ("chat", {"some_new_field": 1}, "messages", None, ["some_new_field"]),
    ("chat", {"messages": [{"role": "user", "name": "ann", "content": "hi"}]}, "messages",
     None, ["messages.name"]),
    ("chat", {"reasoning_effort": "low"}, "responses", Caps(reasoning=False),
     ["reasoning_effort"]),
    ("chat", {"temperature": 0.2, "top_p": 0.9}, "messages", Caps(sampling=False),
     ["temperature", "top_p"]),
    ("chat", user([{"type": "text", "text": "see"}, IMG]), "messages", None,
     ["image_url.detail"]),
    ("chat", {"store": True, "metadata": {"a": "b"}, "service_tier": "flex"}, "messages",
     None, ["store", "metadata", "service_tier"]),
    ("chat", {"verbosity": "low", "prompt_cache_key": "k"}, "messages", None,
     ["verbosity", "prompt_cache_key"]),
    ("chat", {"messages": [{"role": "user", "content": "q"},
                             {"role": "assistant", "content": "a", "reasoning_content": "r"},
                             {"role": "user", "content": "q2"}]}, "messages", None,
     ["reasoning"]),
    ("chat", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "n", "description": "d", "schema": {"type": "object"}}}}, "messages", None,
     ["response_format.json_schema.name", "response_format.json_schema.description"]),
    ("chat", {"stream": True, "stream_options": {"include_usage": True,
                                                   "include_obfuscation": False}},
     "messages", None, ["stream_options"]),
    ("chat", {"tools": [TOOL], "tool_choice": "required", "reasoning_effort": "high"},
     "messages", None, ["reasoning_effort"]),
    ("chat", {"reasoning_effort": "high", "temperature": 0.3, "top_p": 0.5}, "messages",
     None, ["temperature", "top_p"]),
    ("chat", {"reasoning_effort": "high", "max_tokens": 1000}, "messages", None,
     ["reasoning_effort"]),
    ("chat", {"messages": [{"role": "user", "content": "q"},
                             {"role": "assistant", "tool_calls": [CALL]},
                             {"role": "tool", "tool_call_id": "call_1", "content": "r"}],
                "tools": [TOOL]}, "messages", None, ["tool_calls.function.arguments"]),
    ("chat", {"messages": [{"role": "user", "content": "q"},
                             {"role": "assistant", "tool_calls": [{**CALL, "function": {
                                 "name": "f", "arguments": "{}"}}]},
                             {"role": "tool", "tool_call_id": "call_1", "content": "r"}],
                "tools": [TOOL], "reasoning_effort": "high"}, "messages", None,
     ["reasoning_effort"]),
    ("messages", {"top_k": 5, "service_tier": "auto"}, "chat", None,
     ["top_k", "service_tier"]),
    ("messages", user([{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"},
                         "citations": [{"type": "char_location"}]}]), "responses", None,
     ["cache_control", "citations"]),
    ("messages", {"thinking": {"type": "adaptive", "display": "omitted"}}, "chat", None,
     ["thinking.display"]),
    ("messages", {"metadata": {"user_id": LONG_USER}}, "chat", None, ["metadata.user_id"]),
    ("messages", {"messages": [{"role": "user", "content": "q"},
                                {"role": "assistant", "content": [
                                    THINK, {"type": "redacted_thinking", "data": "x"},
                                    {"type": "server_tool_use", "id": "srvtoolu_1",
                                     "name": "web_search", "input": {}},
                                    {"type": "web_search_tool_result",
                                     "tool_use_id": "srvtoolu_1", "content": []},
                                    {"type": "text", "text": "a"}]},
                                {"role": "user", "content": "q2"}]}, "chat", None,
     ["redacted_thinking", "content.server_tool_use", "content.web_search_tool_result",
      "reasoning"]),
    ("messages", {"messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "is_error": True, "content": [
                                          {"type": "text", "text": "no"},
                                          {"type": "image", "source": {
                                              "type": "url", "url": "https://x/a.png"}}]}]}],
        "tools": [{"name": "f", "input_schema": {"type": "object"},
                   "input_examples": [{}]}]}, "chat", None,
     ["tools.input_examples", "tool_result.is_error", "tool_result.image"]),
    ("messages", user([{"type": "document", "title": "T", "context": "c",
                         "source": {"type": "text", "media_type": "text/plain", "data": "d"}}]),
     "chat", None, ["document.context", "document.title"]),
    ("messages", {"output_config": {"effort": "max", "task_budget": {"total": 5}}}, "chat",
     None, ["output_config.task_budget"]),
    ("responses", {"include": ["reasoning.encrypted_content"], "truncation": "auto",
                   "max_tool_calls": 3, "stream_options": {"include_obfuscation": False}},
     "messages", None, ["include", "truncation", "max_tool_calls", "stream_options"]),
    ("responses", {"reasoning": {"effort": "low", "summary": "auto"}}, "chat", None,
     ["reasoning.summary"]),
    ("responses", {"tools": [TOOL_RESP, {"type": "web_search"}, {"type": "mcp", "server_label": "x"},
                             {"type": "custom", "name": "apply_patch"}]}, "messages", None,
     ["tools.web_search", "tools.mcp", "tools.custom"]),
    ("messages", {"tools": [{"name": "f", "input_schema": {"type": "object"}},
                             {"type": "web_search_20250305", "name": "web_search"},
                             {"type": "bash_20250124", "name": "bash"}]}, "chat", None,
     ["tools.web_search_20250305", "tools.bash_20250124"]),
    ("responses", {"input": [{"role": "user", "content": "q"},
                             {"type": "web_search_call", "id": "ws_1", "status": "completed"},
                             {"type": "reasoning", "id": "rs_1", "summary": [],
                              "encrypted_content": "gAAAAB-openai-own"},
                             {"role": "assistant", "content": "a"}]}, "messages", None,
     ["input.web_search_call", "reasoning"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("client", "patch", "target", "caps", "names"),
    DROPPED,
    ids=[f"{c}-{t}-{'+'.join(n)}" for c, _, t, _, n in DROPPED],
)
def test_dropped_field_is_named_and_not_sent(
    client: str, patch: dict[str, Any], target: str, caps: Caps | None, names: list[str]
) -> None:
    """A field with no equivalent whose loss changes no meaning is left out and named."""
    body, _, drops = translate({**BASE[client], **patch}, client, target, None, caps or Caps())
    assert drops.names == names
    sent = orjson.dumps(body).decode()
    for name in names:
        leaf = name.split(".")[-1]
        if leaf not in ("detail", "arguments", "image", "name", "description", "summary"):
            assert f'"{leaf}"' not in sent, f"{name} still sent"
    check_request(target, body, ANTHROPIC_SAMPLING if target == "messages" else frozenset())


def test_dropped_reasoning_effort_sends_no_thinking() -> None:
    """Forced tool use with an effort: no thinking block is sent to Anthropic."""
    body, _, _ = translate({**CHAT, "tools": [TOOL], "tool_choice": "required",
                            "reasoning_effort": "high"}, "chat", "messages")  # fmt: skip
    assert "thinking" not in body
    assert body["tool_choice"] == {"type": "any"}


# ---------------------------------------------------------------- Anthropic turn rules


def test_consecutive_turns_of_one_role_are_merged_for_anthropic() -> None:
    """Two user messages in a row, or two assistant ones, become one Anthropic turn."""
    chat = {**CHAT, "messages": [
        {"role": "user", "content": "a"}, {"role": "user", "content": [
            {"type": "text", "text": "b"}, {"type": "image_url",
                                             "image_url": {"url": "https://x/i.png"}}]},
        {"role": "assistant", "content": "c"}, {"role": "assistant", "content": "d"},
        {"role": "user", "content": "e"}]}  # fmt: skip
    body, _, _ = translate(chat, "chat", "messages")
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert [b.get("text") for b in body["messages"][0]["content"]] == ["a", "b", None]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "c"},
        {"type": "text", "text": "d"},
    ]


def test_all_tool_results_of_a_turn_go_in_one_user_message_first() -> None:
    """Parallel calls answered by separate tool messages and a user note become one user
    message: every tool_result first, in order, then the text."""
    calls = [{"id": f"call_{i}", "type": "function",
              "function": {"name": "f", "arguments": f'{{"i":{i}}}'}} for i in range(3)]  # fmt: skip
    chat = {**CHAT, "tools": [TOOL], "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_0", "content": "r0"},
        {"role": "tool", "tool_call_id": "call_1", "content": "r1"},
        {"role": "user", "content": "and"},
        {"role": "tool", "tool_call_id": "call_2", "content": "r2"}]}  # fmt: skip
    body, _, _ = translate(chat, "chat", "messages")
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    kinds = [(b["type"], b.get("tool_use_id")) for b in body["messages"][2]["content"]]
    assert kinds == [("tool_result", "call_0"), ("tool_result", "call_1"),
                     ("tool_result", "call_2"), ("text", None)]  # fmt: skip


def test_a_later_system_message_is_hoisted_into_system() -> None:
    """A system message in the middle of a chat goes into Anthropic's ``system``."""
    chat = {**CHAT, "messages": [
        {"role": "system", "content": "S1"}, {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"}, {"role": "developer", "content": "S2"},
        {"role": "user", "content": "q2"}]}  # fmt: skip
    body, _, _ = translate(chat, "chat", "messages")
    assert body["system"] == [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


def test_empty_text_and_empty_turns_are_left_out_for_anthropic() -> None:
    """Anthropic rejects empty text blocks; an empty assistant turn carries nothing."""
    chat = {**CHAT, "messages": [
        {"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "q"}]},
        {"role": "assistant", "content": ""}, {"role": "user", "content": "q2"}]}  # fmt: skip
    body, _, _ = translate(chat, "chat", "messages")
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "q"}, {"type": "text", "text": "q2"}]}
    ]


def test_tool_ids_are_made_acceptable_to_anthropic_and_still_pair() -> None:
    """Ids with characters Anthropic refuses are rewritten the same for call and result."""
    chat = {**CHAT, "tools": [TOOL], "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [{"id": "call.1:x", "type": "function",
                                              "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call.1:x", "content": "r"}]}  # fmt: skip
    body, _, _ = translate(chat, "chat", "messages")
    use = body["messages"][1]["content"][0]
    result = body["messages"][2]["content"][0]
    assert use["id"] == result["tool_use_id"] == "call_1_x_6140247c"  # see test_tool_ids.py


def test_a_tool_history_without_tools_names_its_tools_to_anthropic() -> None:
    """Anthropic refuses tool blocks in a request that defines no tools ("Requests which
    include tool_use or tool_result blocks must define tools"): a chat or Responses
    request that offers none (a summary asked of an agent's conversation) gets the tools
    its history's calls name, described as not to be called, with no input; a name
    Anthropic cannot take is left out. A request with tools, or with no tool block, is
    unchanged."""
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "l s", "arguments": "{}"}},
    ]
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": calls},
               {"role": "tool", "tool_call_id": "c1", "content": "a"},
               {"role": "tool", "tool_call_id": "c2", "content": "b"},
               {"role": "user", "content": "Summarise."}]  # fmt: skip
    body, _, _ = translate({**CHAT, "messages": history}, "chat", "messages")
    (tool,) = body["tools"]
    assert tool["name"] == "ls" and "Do not call it" in tool["description"]
    assert tool["input_schema"] == {"type": "object", "properties": {}}
    assert "tool_choice" not in body
    check_request("messages", body)
    body, _, _ = translate({**CHAT, "messages": history, "tools": [TOOL]}, "chat", "messages")
    assert [t["name"] for t in body["tools"]] == ["f"]
    assert "tools" not in translate(CHAT, "chat", "messages")[0]
    resp = {**RESP, "input": [
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "l s", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a"},
        {"role": "user", "content": "Summarise."}]}  # fmt: skip
    body, _, _ = translate(resp, "responses", "messages")
    assert [t["name"] for t in body["tools"]] == ["unavailable_tool"]


def test_parallel_tool_calls_false_disables_parallel_tool_use() -> None:
    """``parallel_tool_calls: false`` is ``disable_parallel_tool_use`` and comes back."""
    for tool_choice, expect in [(None, {"type": "auto"}), ("required", {"type": "any"}),
                                ({"type": "function", "function": {"name": "f"}},
                                 {"type": "tool", "name": "f"})]:  # fmt: skip
        chat = {**CHAT, "tools": [TOOL], "parallel_tool_calls": False}
        if tool_choice is not None:
            chat["tool_choice"] = tool_choice
        body, _, _ = translate(chat, "chat", "messages")
        assert body["tool_choice"] == {**expect, "disable_parallel_tool_use": True}
        back, _, _ = translate(body, "messages", "chat")
        assert back["parallel_tool_calls"] is False
    resp = {**RESP, "tools": [{"type": "function", "name": "f", "parameters": {}}],
            "parallel_tool_calls": False, "tool_choice": "none"}  # fmt: skip
    assert translate(resp, "responses", "messages")[0]["tool_choice"] == {"type": "none"}


def test_thinking_is_left_out_for_a_tool_turn_without_signed_thinking() -> None:
    """Anthropic wants a tool-use turn's signed thinking back; a chat client has none, so
    the effort is dropped for that request (and kept once the turn has signed thinking)."""
    history = [{"role": "user", "content": "q"},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                                  "input": {}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                             "content": "r"}]}]  # fmt: skip
    ant = {**ANTH, "max_tokens": 20000, "messages": history,
           "tools": [{"name": "f", "input_schema": {"type": "object"}}]}  # fmt: skip
    chat, _, _ = translate({**ant, "thinking": {"type": "enabled", "budget_tokens": 8000}},
                           "messages", "chat")  # fmt: skip
    assert chat["reasoning_effort"] == "medium"
    back, _, drops = translate(chat, "chat", "messages")
    assert "thinking" not in back and drops.names == ["reasoning_effort"]
    signed = [{"type": "thinking", "thinking": "t", "signature": "s"}]
    history[1]["content"] = signed + history[1]["content"]
    resp_like = translate({**ant, "messages": history}, "messages", "responses")[0]
    assert any(i["type"] == "function_call" for i in resp_like["input"])


def test_adaptive_thinking_for_models_that_take_it() -> None:
    """With ``Caps.adaptive_thinking`` the effort is ``output_config.effort`` with adaptive
    thinking (no budget_tokens); summaries asked for are displayed."""
    resp = {**RESP, "reasoning": {"effort": "minimal", "summary": "auto"}}
    body, _, _ = translate(resp, "responses", "messages", 64000, Caps(adaptive_thinking=True))
    assert body["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert body["output_config"] == {"effort": "low"}
    assert body["max_tokens"] == 64000
    check_request("messages", body)
    back, _, _ = translate({**ANTH, "thinking": {"type": "adaptive"},
                            "output_config": {"effort": "max"}}, "messages", "chat")  # fmt: skip
    assert back["reasoning_effort"] == "xhigh"


def test_structured_output_maps_to_anthropic_output_config() -> None:
    """A json_schema response format is Anthropic's ``output_config.format`` and back."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    resp = {**RESP, "text": {"format": {"type": "json_schema", "name": "x", "schema": schema}}}
    body, _, _ = translate(resp, "responses", "messages")
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    check_request("messages", body)
    back, _, _ = translate(body, "messages", "chat")
    assert back["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema},
    }


def test_sampling_is_sent_only_where_the_model_takes_it() -> None:
    """Without sampling controls (Claude Opus 4.7 and later) the body is exactly the
    SDK's type; with them temperature and top_p are sent."""
    chat = {**CHAT, "temperature": 0.3, "top_p": 0.8}
    body, _, _ = translate(chat, "chat", "messages", None, Caps(sampling=False))
    check_request("messages", body)  # no key beyond the SDK's
    body, _, _ = translate(chat, "chat", "messages")
    assert (body["temperature"], body["top_p"]) == (0.3, 0.8)


def test_max_tokens_field_for_chat() -> None:
    """Towards chat the cap is ``max_completion_tokens`` with a reasoning effort (reasoning
    models take only that), else ``max_tokens``."""
    assert "max_tokens" in translate({**ANTH}, "messages", "chat")[0]
    thinking = {**ANTH, "max_tokens": 5000, "thinking": {"type": "enabled", "budget_tokens": 2048}}
    body = translate(thinking, "messages", "chat")[0]
    assert body["max_completion_tokens"] == 5000 and "max_tokens" not in body
    assert translate({**RESP, "max_output_tokens": 9}, "responses", "chat")[0]["max_tokens"] == 9


def test_anthropic_signature_rides_through_a_responses_client() -> None:
    """An Anthropic thinking block written to a Responses client as a reasoning item comes
    back to Anthropic signed, from the sealed ``encrypted_content``."""
    from gateway.translate.answers import reasoning_item

    item = reasoning_item("rs_1", "I think", "SIG==")
    resp = {**RESP, "input": [{"role": "user", "content": "q"}, item,
                              {"type": "function_call", "call_id": "c1", "name": "f",
                               "arguments": "{}"},
                              {"type": "function_call_output", "call_id": "c1", "output": "r"}],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "reasoning": {"effort": "low"}}  # fmt: skip
    body, _, drops = translate(resp, "responses", "messages", 32000)
    assert body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "I think",
        "signature": "SIG==",
    }
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert drops.names == []


def test_an_anthropic_system_turn_among_the_messages_keeps_its_place() -> None:
    """A ``role: system`` message (the SDK's SystemMessageParam) is a chat system message
    where it stands, and goes back into ``system`` for Anthropic."""
    ant = {**ANTH, "messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": "q2"}]}  # fmt: skip
    chat, _, _ = translate(ant, "messages", "chat")
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "system", "user"]
    assert chat["messages"][2]["content"] == "Be brief."
    back, _, _ = translate(chat, "chat", "messages")
    assert back["system"] == "Be brief."


@pytest.mark.parametrize("data", ["é", "not base64!", "//79"])
def test_a_text_file_that_does_not_decode_goes_as_a_base64_document(data: str) -> None:
    """A ``text/plain`` file whose data is not base64 of UTF-8 text (a character outside
    ASCII, bad padding, bytes that are no UTF-8) is sent as the base64 document it claims
    to be, for Anthropic to judge: never a 500 of the gateway's."""
    part = {"type": "file", "file": {"file_data": f"data:text/plain;base64,{data}"}}
    body = {"model": "m", "messages": [{"role": "user", "content": [part]}]}
    out, _, _ = translate(body, "chat", "messages")
    block = out["messages"][0]["content"][0]
    assert block["type"] == "document" and block["source"]["type"] == "base64"
