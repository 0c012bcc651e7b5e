"""Continuation of answers cut at the output token limit, and merging the parts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.formats import CHAT, MESSAGES, RESPONSES, Format
from gateway.policy.schema import OutputRecovery
from gateway.resilience import followup
from gateway.resilience.continuation import (
    RESUME_INSTRUCTION,
    continuation_request,
    join_texts,
    merge_parts,
)

pytestmark = pytest.mark.fast

POLICY = OutputRecovery()
FREE = OutputRecovery(respect_client_max_tokens=False)


def should_continue(
    request: dict[str, Any],
    response: dict[str, Any],
    api: Format,
    policy: OutputRecovery,
    part: int,
) -> bool:
    """Whether the ``part``-th part received (1-based) is followed by a continuation, as
    the gateway decides it (gateway.resilience.followup)."""
    d = followup.continuation(
        request,
        api,
        policy,
        part - 1,
        cut=api.cut_at_length(response),
        text=api.answer_text(response),
    )
    return isinstance(d, followup.Continue)


def openai_answer(text: str, finish: str = "length", n: int = 0, **message: Any) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1700000000 + n,
        "model": "glm-4.7",
        "system_fingerprint": f"fp_{n}",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, **message},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": 100 + n,
            "completion_tokens": 50,
            "total_tokens": 150 + n,
            "completion_tokens_details": {"reasoning_tokens": 5},
        },
    }


def anthropic_answer(
    text: str, stop: str = "max_tokens", n: int = 0, thinking: bool = False
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if thinking:
        content.insert(0, {"type": "thinking", "thinking": "hmm", "signature": "sig"})
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 200 + n,
            "output_tokens": 64,
            "cache_read_input_tokens": 10,
            "cache_creation_input_tokens": None,
            "service_tier": "standard",
        },
    }


def responses_answer(
    text: str, reason: str | None = "max_output_tokens", n: int = 0
) -> dict[str, Any]:
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 1700000000 + n,
        "model": "gpt-5-codex",
        "status": "incomplete" if reason else "completed",
        "incomplete_details": {"reason": reason} if reason else None,
        "output": [
            {"type": "reasoning", "id": f"rs_{n}", "summary": []},
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "incomplete" if reason else "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            },
        ],
        "usage": {
            "input_tokens": 300 + n,
            "output_tokens": 80,
            "total_tokens": 380 + n,
            "output_tokens_details": {"reasoning_tokens": 20},
        },
    }


OPENAI_REQUEST = {"model": "glm-4.7", "messages": [{"role": "user", "content": "Write an essay."}]}
ANTHROPIC_REQUEST = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "Write an essay."}],
}
RESPONSES_REQUEST = {
    "model": "gpt-5-codex",
    "instructions": "Be thorough.",
    "input": "Write an essay.",
}


# ---- detection ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "response", "cut"),
    [
        (CHAT, openai_answer("abc"), True),
        (CHAT, openai_answer("abc", "stop"), False),
        (CHAT, openai_answer("", tool_calls=[{"id": "c", "type": "function"}]), False),
        (CHAT, {"choices": []}, False),
        (MESSAGES, anthropic_answer("abc"), True),
        (MESSAGES, anthropic_answer("abc", "end_turn"), False),
        (
            MESSAGES,
            {**anthropic_answer("a"), "content": [{"type": "tool_use", "id": "t"}]},
            False,
        ),
        (RESPONSES, responses_answer("abc"), True),
        (RESPONSES, responses_answer("abc", None), False),
        (RESPONSES, responses_answer("abc", "content_filter"), False),
        (
            RESPONSES,
            {**responses_answer("a"), "output": [{"type": "function_call", "call_id": "c"}]},
            False,
        ),
    ],
)
def test_cut_at_length(api: Format, response: dict[str, Any], cut: bool) -> None:
    """Only a text answer stopped by the output limit counts as cut."""
    assert api.cut_at_length(response) is cut


@pytest.mark.parametrize(
    ("api", "request_body", "capped"),
    [
        (CHAT, OPENAI_REQUEST, False),
        (CHAT, {**OPENAI_REQUEST, "max_tokens": 500}, True),
        (CHAT, {**OPENAI_REQUEST, "max_completion_tokens": 500}, True),
        (CHAT, {**OPENAI_REQUEST, "max_tokens": None}, False),
        (MESSAGES, ANTHROPIC_REQUEST, True),
        (RESPONSES, RESPONSES_REQUEST, False),
        (RESPONSES, {**RESPONSES_REQUEST, "max_output_tokens": 500}, True),
    ],
)
def test_client_capped_output(api: Format, request_body: dict[str, Any], capped: bool) -> None:
    """The client's own output limit is seen; Anthropic requests always have one."""
    assert api.capped(request_body) is capped


def test_answer_text_reads_each_shape() -> None:
    """The answer text comes from the first choice, the text blocks or the output_text parts."""
    assert CHAT.answer_text(openai_answer("hi")) == "hi"
    assert CHAT.answer_text(openai_answer("", "stop", content=None)) == ""
    assert (
        CHAT.answer_text(openai_answer("x", content=[{"type": "text", "text": "parts"}])) == "parts"
    )
    assert MESSAGES.answer_text(anthropic_answer("hi", thinking=True)) == "hi"
    assert RESPONSES.answer_text(responses_answer("hi")) == "hi"


def test_no_continuation_of_empty_answers_or_several_choices() -> None:
    """A cut answer with no text (all reasoning) or a request for n > 1 choices is not continued."""
    assert not should_continue(OPENAI_REQUEST, openai_answer("  "), CHAT, POLICY, 1)
    assert not should_continue({**OPENAI_REQUEST, "n": 2}, openai_answer("p"), CHAT, POLICY, 1)


# ---- continuation_request -----------------------------------------------------------------


def test_openai_prefill_sends_the_partial_answer_as_final_assistant_message() -> None:
    """With prefill, the joined text so far is the last message and nothing else is added."""
    request = {**OPENAI_REQUEST, "temperature": 0.2, "stream": False}
    snapshot = copy.deepcopy(request)
    parts = [openai_answer("The first "), openai_answer("half of it")]
    body = continuation_request(request, parts, CHAT, prefill=True)
    assert body["messages"] == [
        {"role": "user", "content": "Write an essay."},
        {"role": "assistant", "content": "The first half of it"},
    ]
    assert body["temperature"] == 0.2 and request == snapshot


def test_openai_without_prefill_adds_a_resume_instruction() -> None:
    """Without prefill, the partial answer is followed by our own instruction to resume."""
    body = continuation_request(
        OPENAI_REQUEST, [openai_answer("Once upon a ti")], CHAT, prefill=False
    )
    assert body["messages"][1:] == [
        {"role": "assistant", "content": "Once upon a ti"},
        {"role": "user", "content": RESUME_INSTRUCTION},
    ]
    assert "mid" in RESUME_INSTRUCTION or "middle" in RESUME_INSTRUCTION
    assert "repeat" in RESUME_INSTRUCTION and "recap" in RESUME_INSTRUCTION


def test_anthropic_prefill_trims_trailing_whitespace_and_extends_client_prefill() -> None:
    """Anthropic rejects a prefill ending in whitespace; a client's own prefill is extended."""
    request = {
        **ANTHROPIC_REQUEST,
        "messages": [*ANTHROPIC_REQUEST["messages"], {"role": "assistant", "content": "Essay: "}],
    }
    body = continuation_request(
        request, [anthropic_answer("It was a dark \n")], MESSAGES, prefill=True
    )
    assert body["messages"] == [
        {"role": "user", "content": "Write an essay."},
        {"role": "assistant", "content": "Essay: It was a dark"},
    ]
    assert body["max_tokens"] == 1024


def test_anthropic_with_thinking_uses_the_instruction_form() -> None:
    """Extended thinking forbids prefill, so the instruction form is used instead."""
    request = {**ANTHROPIC_REQUEST, "thinking": {"type": "enabled", "budget_tokens": 2000}}
    body = continuation_request(
        request, [anthropic_answer("abc ", thinking=True)], MESSAGES, prefill=True
    )
    assert body["messages"][-2:] == [
        {"role": "assistant", "content": "abc"},
        {"role": "user", "content": RESUME_INSTRUCTION},
    ]


def test_responses_string_input_becomes_items() -> None:
    """A Responses string input turns into a user item followed by the partial answer."""
    body = continuation_request(
        RESPONSES_REQUEST, [responses_answer("Half")], RESPONSES, prefill=False
    )
    assert body["input"] == [
        {"role": "user", "content": "Write an essay."},
        {"role": "assistant", "content": "Half"},
        {"role": "user", "content": RESUME_INSTRUCTION},
    ]
    assert body["instructions"] == "Be thorough."


# ---- merge_parts ------------------------------------------------------------------------------


def test_merge_openai_parts_joins_text_and_sums_usage() -> None:
    """Three parts: first part's identity, joined content, last finish_reason, summed usage."""
    parts = [
        openai_answer("Once ", n=0),
        openai_answer("upon a ", n=1),
        openai_answer("time.", "stop", n=2),
    ]
    merged = merge_parts(parts, CHAT)
    assert (merged["id"], merged["created"], merged["system_fingerprint"]) == (
        "chatcmpl-0",
        1700000000,
        "fp_0",
    )
    assert merged["choices"][0]["message"] == {"role": "assistant", "content": "Once upon a time."}
    assert merged["choices"][0]["finish_reason"] == "stop"
    assert merged["usage"] == {
        "prompt_tokens": 303,
        "completion_tokens": 150,
        "total_tokens": 453,
        "completion_tokens_details": {"reasoning_tokens": 15},
    }
    assert parts[0]["choices"][0]["message"]["content"] == "Once "


def test_merge_openai_joins_reasoning_content() -> None:
    """Provider reasoning_content (GLM, DeepSeek) is joined like the content."""
    parts = [
        openai_answer("a", reasoning_content="r1 "),
        openai_answer("b", "stop", reasoning_content="r2"),
    ]
    assert merge_parts(parts, CHAT)["choices"][0]["message"]["reasoning_content"] == "r1 r2"


def test_merge_anthropic_parts_keeps_thinking_and_sums_usage() -> None:
    """Anthropic: one text block after the first part's thinking, summed tokens."""
    parts = [
        anthropic_answer("It was ", n=0, thinking=True),
        anthropic_answer("night.", "end_turn", n=1),
    ]
    merged = merge_parts(parts, MESSAGES)
    assert merged["id"] == "msg_0"
    assert [b["type"] for b in merged["content"]] == ["thinking", "text"]
    assert merged["content"][1]["text"] == "It was night."
    assert merged["stop_reason"] == "end_turn"
    assert merged["usage"] == {
        "input_tokens": 401,
        "output_tokens": 128,
        "cache_read_input_tokens": 20,
        "cache_creation_input_tokens": None,
        "service_tier": "standard",
    }


def test_merge_responses_parts_completes_the_response() -> None:
    """Responses: one message with the joined text, status of the last part, usage summed."""
    parts = [
        responses_answer("Hello ", n=0),
        responses_answer("world", n=1),
        responses_answer("!", None, n=2),
    ]
    merged = merge_parts(parts, RESPONSES)
    assert merged["id"] == "resp_0"
    assert merged["status"] == "completed" and merged["incomplete_details"] is None
    assert RESPONSES.answer_text(merged) == "Hello world!"
    assert [item["type"] for item in merged["output"]] == ["reasoning", "message"]
    assert merged["output"][1]["status"] == "completed"
    assert merged["usage"] == {
        "input_tokens": 903,
        "output_tokens": 240,
        "total_tokens": 1143,
        "output_tokens_details": {"reasoning_tokens": 60},
    }


def test_merge_single_part_and_no_parts() -> None:
    """One part merges to itself; no parts is an error."""
    one = openai_answer("x", "stop")
    assert merge_parts([one], CHAT) == one
    with pytest.raises(ValueError, match="at least one part"):
        merge_parts([], CHAT)


@pytest.mark.parametrize(
    ("texts", "joined"),
    [
        (["foo", " bar"], "foo bar"),
        (["foo ", "bar"], "foo bar"),
        (["foo ", " bar"], "foo bar"),
        (["def f():\n    ", "\n    return 1"], "def f():\n    return 1"),
        (["a\n", "\nb"], "a\nb"),
        (["", "x"], "x"),
    ],
)
def test_anthropic_join_undoes_the_trimmed_whitespace(texts: list[str], joined: str) -> None:
    """Anthropic: whitespace trimmed from the partial text and written again appears once."""
    assert join_texts(texts, MESSAGES) == joined


def test_openai_and_responses_join_is_plain_concatenation() -> None:
    """OpenAI and Responses see the partial text untrimmed, so parts are simply concatenated."""
    assert join_texts(["a\n", "\nb", " c"], CHAT) == "a\n\nb c"
    assert join_texts(["a ", " b"], RESPONSES) == "a  b"


# ---- the whole loop -----------------------------------------------------------------------------

ESSAY = " ".join(f"word{i}" for i in range(120)) + "\n\ndef f():\n    return 1\n"


def fake_model(request: dict[str, Any], api: Format, chunk: int) -> dict[str, Any]:
    """A model that writes ESSAY ``chunk`` characters at a time, resuming after the given text."""
    key = "input" if api is RESPONSES else "messages"
    items = request[key] if isinstance(request[key], list) else []
    said = ""
    for item in items:
        if item.get("role") == "assistant":
            said = item["content"]
    assert ESSAY.startswith(said)
    text = ESSAY[len(said) : len(said) + chunk]
    done = len(said) + chunk >= len(ESSAY)
    if api is CHAT:
        return openai_answer(text, "stop" if done else "length")
    if api is MESSAGES:
        return anthropic_answer(text, "end_turn" if done else "max_tokens")
    return responses_answer(text, None if done else "max_output_tokens")


@pytest.mark.parametrize("api", [CHAT, MESSAGES, RESPONSES])
@pytest.mark.parametrize("prefill", [True, False])
def test_continuing_until_done_gives_back_the_whole_answer(api: Format, prefill: bool) -> None:
    """Driving the loop as the engine does reproduces the full answer exactly, at any cut."""
    request = {
        CHAT: OPENAI_REQUEST,
        MESSAGES: ANTHROPIC_REQUEST,
        RESPONSES: RESPONSES_REQUEST,
    }[api]
    policy = OutputRecovery(max_continuations=1000, respect_client_max_tokens=False)
    # parts longer than ESSAY's longest whitespace run: an Anthropic part of only whitespace
    # cannot advance the answer, since a prefill may not end in whitespace
    for chunk in range(6, 130):
        parts = [fake_model(dict(request), api, chunk)]
        while should_continue(request, parts[-1], api, policy, len(parts)):
            follow_up = continuation_request(request, parts, api, prefill=prefill)
            parts.append(fake_model(follow_up, api, chunk))
        assert api.answer_text(merge_parts(parts, api)) == ESSAY, chunk


def test_an_empty_later_part_stops_the_loop() -> None:
    """A continuation that produced nothing at all is not continued again (no progress)."""
    assert should_continue(OPENAI_REQUEST, openai_answer("   "), CHAT, POLICY, 2)
    assert not should_continue(OPENAI_REQUEST, openai_answer(""), CHAT, POLICY, 2)


def test_merge_responses_when_the_first_part_was_all_reasoning() -> None:
    """A first part without a message item gets one holding the joined text."""
    first = {
        **responses_answer("", n=0),
        "output": [{"type": "reasoning", "id": "rs_0", "summary": []}],
    }
    merged = merge_parts([first, responses_answer("Text.", None, n=1)], RESPONSES)
    assert [item["type"] for item in merged["output"]] == ["reasoning", "message"]
    assert RESPONSES.answer_text(merged) == "Text."


def test_merge_without_usage_leaves_usage_out() -> None:
    """Parts without usage (some OpenAI-compatible servers) merge without inventing one."""
    parts = [openai_answer("a"), openai_answer("b", "stop")]
    for part in parts:
        del part["usage"]
    assert "usage" not in merge_parts(parts, CHAT)
