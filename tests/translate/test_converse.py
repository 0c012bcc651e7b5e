"""Bedrock Converse as an upstream format: its Format object, requests from every client
format (golden bodies, and every documented request fixture checked against botocore's own
model of the Converse operation), JSON answers to every client format, and its errors."""

from __future__ import annotations

import itertools
import subprocess
import sys
from typing import Any

import orjson
import pytest
from botocore.session import get_session
from botocore.validate import ParamValidator

from gateway import formats, simulate
from gateway.errors import GatewayError, Malformed, Refused
from gateway.formats import CHAT, CONVERSE, MESSAGES, RESPONSES, Format
from gateway.formats.usage import Usage
from gateway.policy.schema import Compaction, Policy
from gateway.resilience import compaction, conversation
from gateway.routing.policyset import Deployed
from gateway.testing.converse_shapes import problem
from gateway.translate import convert
from gateway.translate.requests import translate
from tests.translate.test_answers_golden import NAMES as ANSWER_NAMES
from tests.translate.test_answers_golden import facts as answer_facts
from tests.translate.test_answers_golden import sdk_body
from tests.translate.test_answers_golden import source_format as answer_format
from tests.translate.test_requests_helpers import fixture, fixtures

CLIENTS = {"chat": CHAT, "messages": MESSAGES, "responses": RESPONSES}
FORMAT = {"chat": "chat", "responses": "responses", "anthropic": "messages"}  # by fixture prefix
_BEDROCK = get_session().get_service_model("bedrock-runtime")
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def bedrock_errors(body: dict[str, Any], operation: str = "Converse") -> str:
    """What botocore's model of the operation finds wrong with ``body`` ("" when valid)."""
    shape = _BEDROCK.operation_model(operation).input_shape
    report = ParamValidator().validate({"modelId": "m", **body}, shape)
    return str(report.generate_report()) if report.has_errors() else ""


def to_converse(
    body: dict[str, Any], client: str, cap: int | None = None
) -> tuple[dict[str, Any], list[str]]:
    out, dropped = convert.request(body, CLIENTS[client], CONVERSE, max_output_tokens=cap)
    assert not bedrock_errors(out), bedrock_errors(out)
    assert problem(out) is None, problem(out)  # what Bedrock's own validation refuses
    assert "model" not in out and "stream" not in out  # the URL says both
    return out, dropped


# ---------------------------------------------------------------- the Format object


def test_converse_is_registered_as_an_upstream_format_only() -> None:
    """CONVERSE is known by name and as Bedrock's format, serves no client path, and is not
    one the simulated provider (which serves client paths) speaks."""
    assert formats.by_name("converse") is CONVERSE
    assert formats.of_provider("bedrock") == (CONVERSE,)
    assert CONVERSE.paths == ()
    assert CONVERSE not in formats.of_provider("sim")
    assert formats.of_path("/v1/chat/completions") is CHAT
    assert formats.of_path("/converse") is formats.DEFAULT


def test_the_output_cap_is_read_from_inference_config() -> None:
    """The cap lives in ``inferenceConfig.maxTokens``: ``requested_output`` and ``capped``
    read it there, and nowhere else."""
    assert CONVERSE.requested_output({"inferenceConfig": {"maxTokens": 300}}) == 300
    assert CONVERSE.capped({"inferenceConfig": {"maxTokens": 300}})
    assert CONVERSE.requested_output({"maxTokens": 300, "max_tokens": 5}) is None
    assert not CONVERSE.capped({"max_tokens": 5, "inferenceConfig": {"temperature": 0}})
    assert CONVERSE.requested_output({"inferenceConfig": {"maxTokens": True}}) is None


def test_prefill_is_not_allowed() -> None:
    """A resumed Converse stream is regenerated: no final assistant message is continued."""
    assert not CONVERSE.prefill_allowed({})


def test_the_summary_request_is_a_converse_body() -> None:
    """Compaction's summary call in Converse: system blocks, one user turn, the cap and
    temperature in inferenceConfig, valid per botocore; its answer's text is read back."""
    turns: list[dict[str, Any]] = [{"role": "user", "content": "task " * 50}]
    for n in range(8):
        call = {"type": "tool_use", "id": f"c{n}", "name": "grep", "input": {"q": n}}
        turns += [{"role": "assistant", "content": [call]}]
        result = {"type": "tool_result", "tool_use_id": f"c{n}", "content": "x" * 4000}
        turns += [{"role": "user", "content": [result]}]
    body = {"model": "m", "max_tokens": 10, "messages": turns}
    ask = compaction.summary_request(body, MESSAGES, Compaction(), "m", summary_fmt=CONVERSE)
    assert ask is not None and not bedrock_errors(ask)
    assert ask["system"][0]["text"] and "grep" in ask["messages"][0]["content"][0]["text"]
    assert ask["inferenceConfig"] == {"maxTokens": compaction.SUMMARY_MAX_TOKENS, "temperature": 0}
    answer = {
        "output": {"message": {"role": "assistant", "content": [{"text": "A"}, {"text": "B"}]}}
    }
    assert compaction.summary_text(answer, CONVERSE) == "A\nB"


def _answer(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {"output": {"message": {"role": "assistant", "content": content}}, "stopReason": stop}


def test_answer_text_and_the_cut() -> None:
    """The text blocks are the answer's text; ``max_tokens`` without a tool call is a cut."""
    answer = _answer([{"text": "Once "}, {"text": "upon"}], "max_tokens")
    assert CONVERSE.answer_text(answer) == "Once upon"
    assert CONVERSE.cut_at_length(answer)
    use = {"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}
    assert not CONVERSE.cut_at_length(_answer([use], "max_tokens"))
    assert not CONVERSE.cut_at_length(_answer([{"text": "x"}], "end_turn"))
    assert CONVERSE.answer_text({"output": []}) == ""


def test_a_converse_conversation_is_read_through_the_object() -> None:
    """Tool calls, their results, validity, transcript lines and snipped results of a
    Converse conversation, so that compaction works on it as on any format."""
    use = {"toolUse": {"toolUseId": "t1", "name": "grep", "input": {"q": "a"}}}
    result = {"toolResult": {"toolUseId": "t1", "content": [{"text": "y" * 5000}]}}
    items = [
        {"role": "user", "content": [{"text": "find a"}]},
        {"role": "assistant", "content": [{"text": "looking"}, use]},
        {"role": "user", "content": [result]},
    ]
    assert CONVERSE.opened_calls(items[1]) == ["t1"] and CONVERSE.closed_calls(items[2]) == ["t1"]
    assert CONVERSE.problems(items) == []
    assert CONVERSE.problems(items[:2]) == [
        "message 1: toolUse 't1' has no toolResult in the next message"
    ]
    lines = [line for e in items for line in CONVERSE.transcript_lines(e)]
    assert lines[:3] == ["user: find a", "assistant: looking", 'assistant called grep({"q": "a"})']
    assert lines[3].startswith("tool result: yyy")
    body = {"messages": [*items, {"role": "assistant", "content": [{"text": "found"}]}]}
    c = compaction.compact(body, CONVERSE, "snip_tool_results", Compaction(keep_recent=1))
    assert c is not None and conversation.is_valid_conversation(c.body, CONVERSE)
    snipped = c.body["messages"][2]["content"][0]["toolResult"]["content"][0]["text"]
    assert len(snipped) < 5000


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("stream_read", (None, {})),
        ("stream_closes", (None, {})),
        ("stream_resumable", (None,)),
        ("splice_event", (None, {}, None)),
        ("merge", ({}, [], "")),
    ],
)
def test_client_rules_say_it_is_not_a_client_format(method: str, args: tuple[Any, ...]) -> None:
    """No client speaks Converse: the rules of a client's stream and answer fail loudly
    rather than guess."""
    with pytest.raises(NotImplementedError, match="upstream format only"):
        getattr(CONVERSE, method)(*args)


def test_its_errors_and_stream_events_have_anthropics_shape() -> None:
    """A gateway error in Converse's shape is Anthropic's (as Bedrock's are inside the
    gateway); a stream's usage and cut are read from metadata and messageStop payloads."""
    err = GatewayError(429, "slow down")
    assert orjson.loads(err.body_bytes(CONVERSE))["error"]["type"] == "rate_limit_error"
    assert CONVERSE.stream_error("throttlingException", "slow").startswith(b"event: error\n")
    assert CONVERSE.event_usage({"usage": {"inputTokens": 3, "outputTokens": 4}}, None) == Usage(
        3, 4
    )
    assert CONVERSE.event_usage({"stopReason": "end_turn"}, None) is None
    assert CONVERSE.event_cut({"stopReason": "max_tokens"})


# ---------------------------------------------------------------- requests


CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
SPEC = {
    "toolSpec": {
        "name": "get_weather",
        "description": "The weather in a city",
        "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }
}


def test_chat_text_system_and_generation_settings() -> None:
    """A chat request: system messages in ``system``, turns as text blocks, the cap,
    sampling and stop sequences in ``inferenceConfig``."""
    body = {
        "model": "mistral",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Weather?"},
        ],
        "max_tokens": 200,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": "END",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    out, dropped = to_converse(body, "chat")
    assert out == {
        "messages": [
            {"role": "user", "content": [{"text": "Hi"}]},
            {"role": "assistant", "content": [{"text": "Hello!"}]},
            {"role": "user", "content": [{"text": "Weather?"}]},
        ],
        "system": [{"text": "Be brief."}],
        "inferenceConfig": {
            "maxTokens": 200,
            "temperature": 0.2,
            "topP": 0.9,
            "stopSequences": ["END"],
        },
    }
    assert dropped == []


def test_the_models_own_cap_is_sent_when_the_client_gives_none() -> None:
    """Without a client cap the model's ``max_output_tokens`` is the cap; a client cap above
    it is lowered to it."""
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}]}
    assert to_converse(body, "chat", cap=1000)[0]["inferenceConfig"] == {"maxTokens": 1000}
    assert "inferenceConfig" not in to_converse(body, "chat")[0]
    body["max_completion_tokens"] = 5000
    assert to_converse(body, "chat", cap=1000)[0]["inferenceConfig"] == {"maxTokens": 1000}


def test_chat_tools_calls_and_results() -> None:
    """Tools become toolSpecs, an assistant's tool call a toolUse block (its arguments an
    object), its result a toolResult block in the next user turn, before the user's text."""
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {"role": "user", "content": "And tomorrow?"},
        ],
        "tools": CHAT_TOOLS,
        "tool_choice": "auto",
    }
    out, dropped = to_converse(body, "chat")
    assert out["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {
                    "toolUse": {
                        "toolUseId": "call_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    }
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": "call_1", "content": [{"text": "18C"}]}},
                {"text": "And tomorrow?"},
            ],
        },
    ]
    assert out["toolConfig"] == {"tools": [SPEC], "toolChoice": {"auto": {}}}
    assert dropped == []


@pytest.mark.parametrize(
    ("choice", "expect"),
    [
        ("auto", {"auto": {}}),
        ("required", {"any": {}}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"tool": {"name": "get_weather"}},
        ),
        (None, None),
    ],
)
def test_tool_choice_variants(choice: Any, expect: Any) -> None:
    """auto, required (Converse's ``any``) and a named tool map; no choice sends none."""
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "tools": CHAT_TOOLS}
    if choice is not None:
        body["tool_choice"] = choice
    config = to_converse(body, "chat")[0]["toolConfig"]
    assert config.get("toolChoice") == expect and config["tools"] == [SPEC]


def test_tool_choice_none_leaves_the_tools_out() -> None:
    """``none`` with no tool call in the history: no toolConfig (no tool can be called);
    with calls in the history Converse wants the tools, so they stay and ``tool_choice`` is
    named as dropped."""
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "tools": CHAT_TOOLS,
        "tool_choice": "none",
    }
    out, dropped = to_converse(body, "chat")
    assert "toolConfig" not in out and dropped == []
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    body["messages"] += [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    out, dropped = to_converse(body, "chat")
    assert out["toolConfig"] == {"tools": [SPEC]} and dropped == ["tool_choice"]


HISTORY = [
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "  ", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "get weather!", "arguments": "{}"}},
    ]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "c2", "content": ""},
    {"role": "user", "content": "Summarise this conversation in one line."},
]  # fmt: skip


def test_a_tool_history_without_tools_names_its_tools_as_not_to_call() -> None:
    """A request that offers no tools while its history holds tool calls and results (a
    summary or a title asked of an agent's conversation): Converse refuses tool blocks
    without a toolConfig, so the tools the calls name are sent, each described as not
    available, with no input; a name Converse cannot take is left out."""
    out, dropped = to_converse({"model": "m", "messages": HISTORY}, "chat")
    (spec,) = [t["toolSpec"] for t in out["toolConfig"]["tools"]]
    assert spec["name"] == "get_weather" and "Do not call it" in spec["description"]
    assert spec["inputSchema"] == {"json": {"type": "object", "properties": {}}}
    assert "toolChoice" not in out["toolConfig"] and dropped == []
    body = {"model": "m", "messages": HISTORY, "tool_choice": "none"}
    assert to_converse(body, "chat")[0]["toolConfig"] == out["toolConfig"]
    only_bad = [HISTORY[0], {**HISTORY[1], "tool_calls": HISTORY[1]["tool_calls"][1:]},
                HISTORY[3], HISTORY[4]]  # fmt: skip
    out, _ = to_converse({"model": "m", "messages": only_bad}, "chat")
    assert [t["toolSpec"]["name"] for t in out["toolConfig"]["tools"]] == ["unavailable_tool"]
    plain = {"model": "m", "messages": [HISTORY[0]]}
    assert "toolConfig" not in to_converse(plain, "chat")[0]  # no tool blocks: none


def test_blank_text_is_left_out() -> None:
    """Bedrock refuses a text block that is empty or only whitespace: such text (a turn's,
    the system's) is left out, and a turn left empty with it; a tool result may be empty."""
    body = {"model": "m", "messages": [
        {"role": "system", "content": " \n"},
        {"role": "user", "content": [{"type": "text", "text": "\t"}, {"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": "   "},
        {"role": "user", "content": "Go on"},
    ]}  # fmt: skip
    out, _ = to_converse(body, "chat")
    assert "system" not in out
    assert out["messages"] == [{"role": "user", "content": [{"text": "Hi"}, {"text": "Go on"}]}]
    out, _ = to_converse({"model": "m", "messages": HISTORY}, "chat")
    assert out["messages"][1]["content"][0] == {
        "toolUse": {"toolUseId": "c1", "name": "get_weather", "input": {}}
    }  # the assistant's blank text left out
    assert out["messages"][2]["content"][1] == {"toolResult": {"toolUseId": "c2", "content": []}}


def test_a_request_with_no_text_this_model_takes_is_refused() -> None:
    """Nothing left to send (blank text only): the client's 400, before any call."""
    for content in ("", "  \n", []):
        with pytest.raises(Refused) as e:
            body = {"model": "m", "messages": [{"role": "user", "content": content}]}
            convert.request(body, CHAT, CONVERSE, max_output_tokens=None)
        assert e.value.field == "messages" and e.value.status == 400


def test_anthropic_request_with_images_thinking_and_an_error_result() -> None:
    """A Messages request: system blocks, a base64 image (its media type as the format), a
    signed thinking block kept as reasoningContent, an error tool result with status
    ``error``, stop sequences; ``top_k`` and ``metadata.user_id`` named as dropped."""
    body = {
        "model": "claude",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You see images."}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {"type": "text", "text": "What is this?"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Look closer.", "signature": "sig=="},
                    {"type": "tool_use", "id": "toolu_1", "name": "zoom", "input": {"x": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "failed",
                        "is_error": True,
                    }
                ],
            },
        ],
        "tools": [{"name": "zoom", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any"},
        "stop_sequences": ["\n\nHuman:"],
        "top_k": 5,
        "metadata": {"user_id": "u1"},
    }
    out, dropped = to_converse(body, "messages")
    assert out["system"] == [{"text": "You see images."}]
    assert out["messages"] == [
        {
            "role": "user",
            "content": [
                {"image": {"format": "png", "source": {"bytes": PNG}}},
                {"text": "What is this?"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "reasoningContent": {
                        "reasoningText": {"text": "Look closer.", "signature": "sig=="}
                    }
                },
                {"toolUse": {"toolUseId": "toolu_1", "name": "zoom", "input": {"x": 1}}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "toolu_1",
                        "content": [{"text": "failed"}],
                        "status": "error",
                    }
                }
            ],
        },
    ]
    assert out["inferenceConfig"] == {"maxTokens": 1024, "stopSequences": ["\n\nHuman:"]}
    assert out["toolConfig"]["toolChoice"] == {"any": {}}
    assert dropped == ["top_k", "user"]


def test_responses_request_with_instructions_and_a_function_call() -> None:
    """A Responses request: instructions as system, items as turns, a function call and its
    output as toolUse / toolResult, ``max_output_tokens`` as the cap; reasoning effort and
    ``store`` (true) named as dropped."""
    body = {
        "model": "m",
        "instructions": "Be exact.",
        "input": [
            {"role": "user", "content": "Add 2 and 3"},
            {
                "type": "function_call",
                "call_id": "call_9",
                "name": "add",
                "arguments": '{"a":2,"b":3}',
            },
            {"type": "function_call_output", "call_id": "call_9", "output": "5"},
        ],
        "tools": [
            {"type": "function", "name": "add", "parameters": {"type": "object"}, "strict": True}
        ],
        "max_output_tokens": 64,
        "reasoning": {"effort": "low"},
        "store": True,
    }
    out, dropped = to_converse(body, "responses")
    assert out["system"] == [{"text": "Be exact."}]
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assert out["messages"][1]["content"] == [
        {"toolUse": {"toolUseId": "call_9", "name": "add", "input": {"a": 2, "b": 3}}}
    ]
    assert out["messages"][2]["content"] == [
        {"toolResult": {"toolUseId": "call_9", "content": [{"text": "5"}]}}
    ]
    assert out["toolConfig"]["tools"] == [
        {"toolSpec": {"name": "add", "inputSchema": {"json": {"type": "object"}}, "strict": True}}
    ]
    assert out["inferenceConfig"] == {"maxTokens": 64}
    assert dropped == ["reasoning_effort", "store"]


def test_consecutive_turns_of_one_role_are_merged() -> None:
    """Two user messages in a row become one user turn (Converse's roles alternate)."""
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "one"},
            {"role": "user", "content": "two"},
            {"role": "assistant", "content": "ok"},
        ],
    }
    out, _ = to_converse(body, "chat")
    assert out["messages"][0] == {"role": "user", "content": [{"text": "one"}, {"text": "two"}]}


def test_unsigned_reasoning_is_dropped_and_named() -> None:
    """Another provider's reasoning (no signature) is not sent, and is named."""
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello", "reasoning_content": "greet back"},
            {"role": "user", "content": "Bye"},
        ],
        "parallel_tool_calls": False,
        "tools": CHAT_TOOLS,
        "user": "u1",
        "seed": 3,
    }
    out, dropped = to_converse(body, "chat")
    assert out["messages"][1] == {"role": "assistant", "content": [{"text": "Hello"}]}
    assert dropped == ["seed", "reasoning", "parallel_tool_calls", "user"]


def test_a_json_schema_becomes_the_output_config() -> None:
    """``response_format: json_schema`` becomes ``outputConfig.textFormat`` with the schema
    as JSON text."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Count"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "count", "schema": schema},
        },
    }
    out, _ = to_converse(body, "chat")
    json_schema = out["outputConfig"]["textFormat"]["structure"]["jsonSchema"]
    assert json_schema["name"] == "count" and orjson.loads(json_schema["schema"]) == schema


def test_documents_go_as_bytes_with_their_format() -> None:
    """A PDF file part becomes a document block (format pdf, a name Converse accepts)."""
    body = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "file",
                        "file": {
                            "filename": "report_2024.pdf",
                            "file_data": "data:application/pdf;base64,JVBERg==",
                        },
                    },
                    {"type": "text", "text": "Summarise"},
                ],
            }
        ],
    }
    out, _ = to_converse(body, "chat")
    assert out["messages"][0]["content"][0] == {
        "document": {"format": "pdf", "name": "report 2024 pdf", "source": {"bytes": "JVBERg=="}}
    }


@pytest.mark.parametrize(
    ("client", "body", "field"),
    [
        ("chat", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]}, "image_url"),
        ("chat", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AAAA"}}]}]}, "image_url"),
        ("chat", {"messages": [{"role": "user", "content": "hi"}], "temperature": 1.5}, "temperature"),
        ("chat", {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}}, "response_format.json_object"),
        ("chat", {"messages": [{"role": "assistant", "content": "Hi, how can I help?"}, {"role": "user", "content": "hi"}]}, "messages"),
        ("chat", {"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}, "tool_choice"),
        ("chat", {"messages": [{"role": "user", "content": "hi"}], "logprobs": True}, "logprobs"),
        ("messages", {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]}, "image_url"),
        ("messages", {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": "https://x/y.pdf"}}]}]}, "document.source.url"),
        ("responses", {"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
    ],
)  # fmt: skip
def test_fields_without_an_equivalent_are_refused(
    client: str, body: dict[str, Any], field: str
) -> None:
    """Where sending without the field would change the answer: a 400 naming the field."""
    with pytest.raises(Refused) as info:
        convert.request({"model": "m", **body}, CLIENTS[client], CONVERSE, max_output_tokens=None)
    assert info.value.field == field and info.value.status == 400


@pytest.mark.parametrize("name", fixtures("requests"))
def test_every_documented_request_is_a_valid_converse_request_or_refused(name: str) -> None:
    """Each documented request of the three client formats, translated, is valid per
    botocore's model of Converse (and of ConverseStream), or refused naming a field."""
    data = fixture("requests", name)
    try:
        out, _, _ = translate(data["body"], FORMAT[name.split("_")[0]], "converse")
    except Refused as e:
        assert e.field and e.status == 400
        return
    assert bedrock_errors(out) == ""
    assert bedrock_errors(out, "ConverseStream") == ""
    assert problem(out) is None, problem(out)
    assert out["messages"][0]["role"] == "user"
    roles = [m["role"] for m in out["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles))


# ---------------------------------------------------------------- answers


USAGE = {
    "inputTokens": 5,
    "outputTokens": 7,
    "totalTokens": 132,
    "cacheReadInputTokens": 100,
    "cacheWriteInputTokens": 20,
}


def converse_answer(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": USAGE,
        "metrics": {"latencyMs": 420},
    }


def facts(target: str, body: dict[str, Any]) -> dict[str, Any]:
    """What a client of ``target`` reads of an answer: text, calls, stop, (input, output)."""
    if target == "chat":
        choice = body["choices"][0]
        calls = [
            (c["id"], c["function"]["name"], orjson.loads(c["function"]["arguments"]))
            for c in choice["message"].get("tool_calls") or ()
        ]
        u = body["usage"]
        text = choice["message"]["content"] or ""
        return {"text": text, "calls": calls, "stop": choice["finish_reason"],
                "usage": (u["prompt_tokens"], u["completion_tokens"]),
                "cached": u["prompt_tokens_details"]["cached_tokens"]}  # fmt: skip
    if target == "messages":
        u = body["usage"]
        return {
            "text": "".join(b["text"] for b in body["content"] if b["type"] == "text"),
            "calls": [(b["id"], b["name"], b["input"]) for b in body["content"] if b["type"] == "tool_use"],
            "stop": body["stop_reason"],
            "usage": (u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"], u["output_tokens"]),
            "cached": u["cache_read_input_tokens"],
        }  # fmt: skip
    u = body["usage"]
    return {
        "text": "".join(
            c["text"] for o in body["output"] if o["type"] == "message" for c in o["content"]
        ),
        "calls": [
            (o["call_id"], o["name"], orjson.loads(o["arguments"]))
            for o in body["output"]
            if o["type"] == "function_call"
        ],
        "stop": (body["status"], (body["incomplete_details"] or {}).get("reason")),
        "usage": (u["input_tokens"], u["output_tokens"]),
        "cached": u["input_tokens_details"]["cached_tokens"],
    }


STOPS = {
    "end_turn": {"chat": "stop", "messages": "end_turn", "responses": ("completed", None)},
    "tool_use": {"chat": "tool_calls", "messages": "tool_use", "responses": ("completed", None)},
    "max_tokens": {"chat": "length", "messages": "max_tokens", "responses": ("incomplete", "max_output_tokens")},
    "stop_sequence": {"chat": "stop", "messages": "stop_sequence", "responses": ("completed", None)},
    "guardrail_intervened": {"chat": "content_filter", "messages": "refusal", "responses": ("incomplete", "content_filter")},
    "content_filtered": {"chat": "content_filter", "messages": "refusal", "responses": ("incomplete", "content_filter")},
    "malformed_model_output": {"chat": "stop", "messages": "end_turn", "responses": ("completed", None)},
}  # fmt: skip


@pytest.mark.parametrize("target", list(CLIENTS))
@pytest.mark.parametrize("stop", list(STOPS))
def test_a_text_answer_reaches_every_client(target: str, stop: str) -> None:
    """Text blocks joined, the stop reason mapped, usage totals with the cache reads and
    writes (Converse's inputTokens counts neither), the public model name."""
    answer = converse_answer([{"text": "Hello "}, {"text": "there"}], stop)
    out = convert.answer(answer, CONVERSE, CLIENTS[target], "public-model")
    assert out["model"] == "public-model"
    assert facts(target, out) == {
        "text": "Hello there",
        "calls": [],
        "stop": STOPS[stop][target],
        "usage": (125, 7),
        "cached": 100,
    }


@pytest.mark.parametrize("target", list(CLIENTS))
def test_a_tool_use_answer_reaches_every_client(target: str) -> None:
    """A toolUse block becomes the client's tool call (id, name, arguments); reasoning with
    its signature reaches a Messages client as a thinking block."""
    content = [
        {"reasoningContent": {"reasoningText": {"text": "Need weather.", "signature": "s1"}}},
        {"text": "Checking."},
        {"toolUse": {"toolUseId": "tooluse_abc", "name": "get_weather", "input": {"city": "Oslo"}}},
        {"toolUse": {"toolUseId": "srv_1", "name": "web", "input": {}, "type": "server_tool_use"}},
    ]
    out = convert.answer(converse_answer(content, "tool_use"), CONVERSE, CLIENTS[target], "m")
    got = facts(target, out)
    assert got["calls"] == [("tooluse_abc", "get_weather", {"city": "Oslo"})]
    assert got["text"] == "Checking." and got["stop"] == STOPS["tool_use"][target]
    if target == "messages":
        assert out["content"][0] == {
            "type": "thinking",
            "thinking": "Need weather.",
            "signature": "s1",
        }


def test_an_answer_of_the_wrong_shape_is_malformed() -> None:
    """A body that is not a Converse answer is a broken provider (retried as such)."""
    with pytest.raises(Malformed):
        convert.answer({"output": ["x"]}, CONVERSE, CHAT, "m")


# ---------------------------------------------------------------- errors


def _bedrock(exception: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": exception, "message": message}})


ERRORS = [
    (429, _bedrock("ThrottlingException", "Too many requests, please wait before trying again."), "rate_limit_error", ("requests", "rate_limit_exceeded")),
    (429, _bedrock("ServiceQuotaExceededException", "Quota exceeded"), "rate_limit_error", ("requests", "rate_limit_exceeded")),
    (503, _bedrock("ServiceUnavailableException", "Service unavailable"), "overloaded_error", ("server_error", "server_is_overloaded")),
    (429, _bedrock("ModelNotReadyException", "Model is not ready"), "overloaded_error", ("server_error", "server_is_overloaded")),
    (500, _bedrock("InternalServerException", "Internal error"), "api_error", ("server_error", None)),
    (408, _bedrock("ModelTimeoutException", "Model timed out"), "timeout_error", ("server_error", "timeout_error")),
    (400, _bedrock("ValidationException", "Input is too long for requested model."), "invalid_request_error", ("invalid_request_error", "context_length_exceeded")),
    (400, _bedrock("ValidationException", "temperature: must be at most 1"), "invalid_request_error", ("invalid_request_error", None)),
    (403, _bedrock("AccessDeniedException", "You don't have access to the model"), "permission_error", ("permission_error", None)),
    (403, _bedrock("UnrecognizedClientException", "The security token included in the request is invalid."), "authentication_error", ("authentication_error", "invalid_api_key")),
    (403, _bedrock("ExpiredTokenException", "The security token included in the request is expired"), "authentication_error", ("authentication_error", "invalid_api_key")),
    (404, _bedrock("ResourceNotFoundException", "Model not found"), "not_found_error", ("not_found_error", "model_not_found")),
    (500, _bedrock("modelStreamErrorException", "The model stream failed"), "api_error", ("server_error", None)),
    (400, _bedrock("com.amazon.coral.validate#ValidationException", "1 validation error"), "invalid_request_error", ("invalid_request_error", None)),
    (409, _bedrock("ConflictException", "Conflict"), "invalid_request_error", ("invalid_request_error", "ConflictException")),
    (429, orjson.dumps({"message": "Rate exceeded"}), "rate_limit_error", ("requests", "rate_limit_exceeded")),
    (500, b"<html>bad gateway</html>", "api_error", ("server_error", None)),
]  # fmt: skip


@pytest.mark.parametrize(("status", "body", "anthropic", "openai"), ERRORS)
def test_bedrock_errors_in_every_clients_shape(
    status: int, body: bytes, anthropic: str, openai: tuple[str, str | None]
) -> None:
    """A Bedrock error (in Anthropic's shape with the AWS exception as its type, or a bare
    message) reaches each client in its own shape, the exception's kind mapped, the message
    kept; a prompt too long stays recognisable as such."""
    message = orjson.loads(body).get("error", {}).get("message") if body[:1] == b"{" else None
    a = orjson.loads(convert.error(status, body, CONVERSE, MESSAGES))
    assert a["type"] == "error" and a["error"]["type"] == anthropic
    for target in (CHAT, RESPONSES):
        o = orjson.loads(convert.error(status, body, CONVERSE, target))["error"]
        assert (o["type"], o["code"]) == openai
        if message:
            assert o["message"] == message
    if openai[1] == "context_length_exceeded":
        assert a["error"]["message"].startswith("prompt is too long")


def test_a_format_registered_later_still_leaves_converse_alone() -> None:
    """Registering CONVERSE twice is refused; the registry keeps one object per name."""
    with pytest.raises(ValueError, match="registered already"):
        formats.register(type(CONVERSE)())
    assert isinstance(CONVERSE, Format) and formats.FORMATS["converse"] is CONVERSE


def test_the_format_and_its_translation_load_without_the_aws_extra() -> None:
    """``gateway.formats`` and the translators import with botocore and awscrt absent (the
    core install has neither)."""
    code = (
        "import sys\n"
        "sys.modules['botocore'] = sys.modules['awscrt'] = None\n"
        "import gateway.formats, gateway.translate.convert\n"
        "assert gateway.formats.by_name('converse') is gateway.formats.CONVERSE\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()


@pytest.mark.parametrize("name", ANSWER_NAMES)
def test_every_documented_answer_goes_through_converse_and_back(name: str) -> None:
    """Each documented answer of the client formats, written as a Converse answer (valid per
    botocore's model of Converse's output), reads back to what the client's own SDK found
    in the original: text, tool calls, stop, usage with its cache reads and writes."""
    src = answer_format(name)
    body = sdk_body(name)
    want = answer_facts(src, body)
    as_converse = convert.answer(body, CLIENTS[src], CONVERSE, "m")
    shape = _BEDROCK.operation_model("Converse").output_shape
    report = ParamValidator().validate(as_converse, shape)
    assert not report.has_errors(), report.generate_report()
    back = convert.answer(as_converse, CONVERSE, CLIENTS[src], "m")
    if want["usage"] is None:
        want["usage"] = (0, 0, 0, 0)  # Converse always counts
    assert answer_facts(src, back) == want


@pytest.mark.parametrize("client", list(CLIENTS))
async def test_simulate_summarises_on_a_converse_model_for_every_client(client: str) -> None:
    """A prompt too long for a model on Bedrock Converse is summarised by it, asked and
    answered in Converse, then answered; each client's request is translated to Converse."""
    policy = Policy.model_validate(
        {"compaction": {"strategies": ["summarize"]}, "timeouts": {"total": "10s"}}
    )
    nova = Deployed("bedrock-us", "bedrock-us", None, "amazon.nova-pro-v1:0", fmts=(CONVERSE,))
    timeline = await simulate.run(simulate.Scenario(
        policy, "r", "t", "nova", "400:code=context_length_exceeded,200,200", 0, "agent",
        client=CLIENTS[client], summary_info=lambda model: (CONVERSE, None),
        deployments_of=lambda model: ((nova,), "ordered"),
    ))  # fmt: skip
    assert f"nova ({CLIENTS[client].name}->converse)" in timeline
    assert "summary ok" in timeline and "answered after 2 attempt(s)" in timeline
    assert "summarize failed" not in timeline


def test_reasoning_alone_or_without_text_is_not_sent() -> None:
    """An assistant turn of signed thinking only is left out (Converse would read it as a
    prefill), and so is signed thinking with no text; both are named ``reasoning``."""
    body = {
        "model": "m",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "Hi"},
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}],
            },
            {"role": "user", "content": "Still there?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "", "signature": "s2"},
                    {"type": "text", "text": "Yes."},
                ],
            },
            {"role": "user", "content": "Good."},
        ],
    }
    out, dropped = to_converse(body, "messages")
    assert out["messages"] == [
        {"role": "user", "content": [{"text": "Hi"}, {"text": "Still there?"}]},
        {"role": "assistant", "content": [{"text": "Yes."}]},
        {"role": "user", "content": [{"text": "Good."}]},
    ]
    assert dropped == ["reasoning"]
