"""Tool call ids towards Anthropic, which takes only ``^[a-zA-Z0-9_-]+$``: an acceptable
id is sent as it is; another is rewritten (refused characters as ``_``, a digest of the
whole id appended), the same way for a call and its result and on every attempt, so that
ids which differ only in refused characters (``call.1``, ``call_1``) stay apart. An id
that is already another's rewritten form is refused (400 naming the field)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gateway.errors import Refused
from gateway.formats import CHAT, MESSAGES
from gateway.translate import convert
from gateway.translate.requests import translate
from gateway.translate.requests.anthropic_write import tool_id

pytestmark = pytest.mark.fast

ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
         for n in ("a", "b")]  # fmt: skip
TOOLS_RESP = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in "ab"]


def chat(ids: tuple[str, str]) -> dict[str, Any]:
    """A chat request whose last assistant turn called ``a`` and ``b`` with ``ids``, then
    their results (``for a``, ``for b``)."""
    calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": "{}"}}
             for i, n in zip(ids, "ab", strict=True)]  # fmt: skip
    return {
        "model": "m",
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": calls},
            *({"role": "tool", "tool_call_id": i, "content": f"for {n}"}
              for i, n in zip(ids, "ab", strict=True)),
        ],
    }  # fmt: skip


def responses(ids: tuple[str, str]) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "q"}]
    items += [{"type": "function_call", "call_id": i, "name": n, "arguments": "{}"}
              for i, n in zip(ids, "ab", strict=True)]  # fmt: skip
    items += [{"type": "function_call_output", "call_id": i, "output": f"for {n}"}
              for i, n in zip(ids, "ab", strict=True)]  # fmt: skip
    return {"model": "m", "tools": TOOLS_RESP, "input": items}


BODIES = {"chat": chat, "responses": responses}


def pairs(body: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """The Anthropic body's tool_use ids by tool name, and tool_result ids by content."""
    uses, results = {}, {}
    for m in body["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else ():
            if b["type"] == "tool_use":
                uses[b["name"]] = b["id"]
            elif b["type"] == "tool_result":
                content = b["content"]
                text = content if isinstance(content, str) else content[0]["text"]
                results[text] = b["tool_use_id"]
    return uses, results


@pytest.mark.parametrize("client", BODIES)
@pytest.mark.parametrize(
    "ids",
    [("call.1", "call_1"), ("call:1", "call.1"), ("a b", "a\u00e9b"), ("", "_"),
     ("functions.Bash:0", "functions.Bash:1")],
)  # fmt: skip
def test_ids_that_collide_once_cleaned_stay_apart(client: str, ids: tuple[str, str]) -> None:
    """Two ids that differ only in characters Anthropic refuses: two ids on the wire, each
    acceptable, each result paired with its own call."""
    body, _, _ = translate(BODIES[client](ids), client, "messages")
    uses, results = pairs(body)
    assert uses["a"] != uses["b"], f"{ids} were both sent as {uses['a']!r}"
    assert all(ANTHROPIC_ID.match(i) for i in uses.values()), uses
    assert results == {"for a": uses["a"], "for b": uses["b"]}


@pytest.mark.parametrize("client", BODIES)
def test_acceptable_ids_are_sent_as_they_are(client: str) -> None:
    for ids in [("call_abc123", "call_def456"), ("toolu_01A09q90qw90lq917835lq9", "fc-1_X")]:
        body, _, _ = translate(BODIES[client](ids), client, "messages")
        uses, results = pairs(body)
        assert uses == {"a": ids[0], "b": ids[1]}
        assert results == {"for a": ids[0], "for b": ids[1]}


def test_a_rewritten_id_is_the_same_on_every_attempt() -> None:
    """The rewrite depends on the id alone: a retry, a fallback to another Anthropic model
    or a compacted history (the first exchange gone) sends the same ids."""
    body = chat(("call.1", "call_1"))
    first, _, _ = translate(body, "chat", "messages")
    again, _, _ = translate(body, "chat", "messages")
    assert pairs(first) == pairs(again)
    longer = {**body, "messages": [{"role": "user", "content": "earlier"},
                                   {"role": "assistant", "tool_calls": [
                                       {"id": "call.0", "type": "function",
                                        "function": {"name": "a", "arguments": "{}"}}]},
                                   {"role": "tool", "tool_call_id": "call.0", "content": "x"},
                                   *body["messages"]]}  # fmt: skip
    uses, _ = pairs(translate(longer, "chat", "messages")[0])
    assert uses["b"] == pairs(first)[0]["b"]  # (the first "a" call is call.0's)
    assert tool_id("call.1") == pairs(first)[0]["a"] == "call_1_664517c6"


def test_an_id_that_is_another_ids_rewritten_form_is_refused() -> None:
    """``call_1_664517c6`` is what ``call.1`` becomes: both in one request would be one id
    on the wire, so the request is refused (400 naming the field), never paired wrongly."""
    with pytest.raises(Refused) as e:
        translate(chat(("call.1", tool_id("call.1"))), "chat", "messages")
    assert e.value.status == 400 and e.value.field == "tool_call_id"


def test_an_answers_tool_call_id_reaches_an_anthropic_client_as_requests_send_it() -> None:
    """A provider's call id that Anthropic would refuse reaches an Anthropic client as the
    request writer rewrites it, so the client's next request hands back an acceptable id."""
    answer = {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "x",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [
                {"id": "call.1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                {"id": "call_1", "type": "function", "function": {"name": "b", "arguments": "{}"}},
            ]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip
    out = convert.answer(answer, CHAT, MESSAGES, "claude-test")
    ids = [b["id"] for b in out["content"] if b["type"] == "tool_use"]
    assert ids == [tool_id("call.1"), "call_1"] and len(set(ids)) == 2
