"""Gemini's request read, checked and answered by the fakes (gateway/testing/
gemini_shapes.py): the conversation, the schema paths of Google's parser errors, the
thought-signature rule of the current turn, the answer and its chunks."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from gateway.testing.answer import FakeAnswer, FakeToolCall
from gateway.testing.cache_blocks import gemini_blocks, request_blocks
from gateway.testing.conversation import Turn, tokens_of
from gateway.testing.gemini_shapes import (
    decode_signature,
    gemini_chunks,
    gemini_json,
    parse_gemini,
    problem,
    signature_problem,
    structured_reply,
)
from gateway.testing.prompt_cache import prefixes

pytestmark = pytest.mark.fast

SIG = b"minted-signature"
SIGNED = base64.b64encode(SIG).decode()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def calls(*names: str, signature: str | None = None) -> dict[str, Any]:
    """A model content calling ``names`` in parallel, the first signed with ``signature``."""
    parts: list[dict[str, Any]] = [{"functionCall": {"name": n, "args": {}}} for n in names]
    if signature is not None:
        parts[0]["thoughtSignature"] = signature
    return {"role": "model", "parts": parts}


def results(*names: str) -> dict[str, Any]:
    parts = [{"functionResponse": {"name": n, "response": {"ok": True}}} for n in names]
    return {"role": "user", "parts": parts}


def test_parse_reads_turns_tools_and_limits() -> None:
    body = {
        "systemInstruction": {"role": "user", "parts": [{"text": "Be brief."}]},
        "contents": [
            user("Read a.txt"),
            {"role": "model", "parts": [{"text": "Thinking", "thought": True}, {"text": "Sure."},
                                        {"functionCall": {"name": "read", "args": {"p": "a"}}}]},
            results("read"),
        ],
        "tools": [{"functionDeclarations": [
            {"name": "read", "parameters": {"type": "OBJECT",
                                            "properties": {"p": {"type": "STRING"}}}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["read"]}},
        "generation_config": {"max_output_tokens": 50},
    }  # fmt: skip
    conv = parse_gemini(body)
    assert conv.turns == [
        Turn("system", "Be brief."),
        Turn("user", "Read a.txt"),
        Turn("assistant", "Sure."),
        Turn("assistant", '{"p": "a"}', True),
        Turn("tool", '{"ok": true}'),
    ]
    assert conv.tools[0].parameters == {"type": "object", "properties": {"p": {"type": "string"}}}
    assert conv.tool_choice == "read" and conv.max_tokens == 50


def test_schema_violations_name_every_keyword_with_its_path() -> None:
    """Depth first in document order; properties by index, ``items``, ``any_of[i]``."""
    params = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "array", "items": {"type": "object", "additionalProperties": False}},
            "c": {"anyOf": [{"type": "string"}, {"const": 1}]},
        },
        "additionalProperties": False,
    }
    body = {"contents": [user("hi")], "tools": [{"functionDeclarations": [{"name": "f"},
                                                                          {"name": "g", "parameters": params}]}]}  # fmt: skip
    error = problem(body)
    assert error is not None
    at = "tools[0].function_declarations[1].parameters"
    violations = error["error"]["details"][0]["fieldViolations"]
    assert [(v["field"], v["description"].split('"')[1]) for v in violations] == [
        (at, "$schema"),
        (at + ".properties[1].value.items", "additionalProperties"),
        (at + ".properties[2].value.any_of[1]", "const"),
        (at, "additionalProperties"),
    ]
    assert error["error"]["message"] == "\n".join(v["description"] for v in violations)


def test_json_schema_fields_take_any_json_schema() -> None:
    schema = {"type": "object", "additionalProperties": False, "$defs": {}}
    body = {"contents": [user("hi")],
            "tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": schema}]}],
            "generationConfig": {"responseJsonSchema": schema}}  # fmt: skip
    assert problem(body) is None
    body["generationConfig"] = {"responseSchema": {"type": "OBJECT", "oneOf": []}}
    error = problem(body)
    assert error is not None and error["error"]["message"] == (
        'Invalid JSON payload received. Unknown name "oneOf" at '
        "'generation_config.response_schema': Cannot find field."
    )


def test_snake_case_fields_are_known() -> None:
    body = {"contents": [user("hi")], "system_instruction": {"parts": [{"text": "x"}]},
            "generation_config": {}, "safety_settings": [], "tool_config": {}}  # fmt: skip
    assert problem(body) is None
    assert problem({**body, "stream": True}) is not None


def test_only_the_current_turn_is_checked() -> None:
    """Earlier turns are not validated; function responses do not start a turn."""
    minted = {SIG}
    old = [user("first"), calls("a"), results("a"), {"role": "model", "parts": [{"text": "ok"}]}]
    assert signature_problem([*old, user("second")], minted) is None
    current = [*old, user("second"), calls("b", signature=SIGNED), results("b"), calls("c")]
    message = signature_problem(current, minted)
    assert message is not None and "`default_api:c` , position 8." in message


def test_only_the_first_call_of_a_parallel_batch_is_signed() -> None:
    turn = [user("go"), calls("a", "b", signature=SIGNED), results("a", "b")]
    assert signature_problem(turn, {SIG}) is None
    urlsafe = base64.urlsafe_b64encode(b"\xfb\xff" + SIG).decode()
    assert "-" in urlsafe or "_" in urlsafe
    turn = [user("go"), calls("a", signature=urlsafe), results("a")]
    assert signature_problem(turn, {b"\xfb\xff" + SIG}) is None
    assert signature_problem(turn, {SIG}) == "Corrupted thought signature."
    assert decode_signature("not base64!") is None


def test_the_skip_value_passes_as_text_or_base64() -> None:
    for value in ("skip_thought_signature_validator",
                  base64.b64encode(b"skip_thought_signature_validator").decode()):  # fmt: skip
        assert signature_problem([user("go"), calls("a", signature=value)], set()) is None


def answer(**kw: Any) -> FakeAnswer:
    base = {"id": "r1", "model": "gemini-3-pro-preview", "text": "Hello there", "finish": "stop",
            "prompt_tokens": 5, "completion_tokens": 3, "created": 0, "chunks": 2}  # fmt: skip
    return FakeAnswer(**{**base, **kw})


def test_a_call_is_signed_and_a_text_answer_signs_its_last_part() -> None:
    call = FakeToolCall("read", '{"p": "a"}', "call_1")
    body = gemini_json(answer(text="", tool_call=call, finish="tool_calls"), signature="c2ln")
    (part,) = body["candidates"][0]["content"]["parts"]
    assert part == {
        "functionCall": {"name": "read", "args": {"p": "a"}},
        "thoughtSignature": "c2ln",
    }
    assert body["candidates"][0]["finishReason"] == "STOP"
    chunks = [json.loads(e.data) for e in gemini_chunks(answer(), signature="c2ln")]
    assert chunks[-1]["candidates"][0]["content"]["parts"] == [
        {"text": "", "thoughtSignature": "c2ln"}
    ]
    assert [e.delta for e in gemini_chunks(answer())] == [True, True, False]


def test_vertex_shapes() -> None:
    body = gemini_json(answer(created=1_700_000_000), vertex=True)
    assert body["createTime"] == "2023-11-14T22:13:20.000000Z"
    assert body["usageMetadata"]["trafficType"] == "ON_DEMAND"
    assert "index" not in body["candidates"][0]


def test_a_json_request_gets_json_from_its_schema() -> None:
    config = {"responseMimeType": "application/json",
              "responseSchema": {"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}}}}  # fmt: skip
    assert structured_reply({"generationConfig": config}) == '{"n": 1}'
    assert structured_reply({"generationConfig": {"responseMimeType": "text/plain"}}) is None


def test_cache_blocks_add_up_to_the_prompt() -> None:
    body = {"systemInstruction": {"parts": [{"text": "Sys"}]},
            "tools": [{"functionDeclarations": [{"name": "f"}]}],
            "contents": [user("Hello"), {"role": "model", "parts": [{"text": "Hi", "thought": True},
                                                                   {"text": "there"}]}]}  # fmt: skip
    blocks = gemini_blocks(body)
    assert [b.chars for b in blocks] == [0, 3, 5, 0, 5]
    assert (
        prefixes(blocks)[-1].tokens
        == parse_gemini(body).prompt_tokens
        == tokens_of("SysHellothere")
    )
    assert request_blocks("gemini", body) == (blocks, False)
