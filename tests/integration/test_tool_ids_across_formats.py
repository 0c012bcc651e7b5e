"""Tool call ids that Anthropic would refuse, on the wire: an OpenAI client's history with
``call.1`` and ``call_1`` reaches an Anthropic-format model as two acceptable ids, each
result after its own call (docs/translation.md, Tool call ids)."""

from __future__ import annotations

import re
from typing import Any

import openai
import pytest

from gateway.testing import FakeProvider
from tests.harness import Harness

TOOLS: list[Any] = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in "ab"
]


def history(ids: tuple[str, str]) -> list[Any]:
    calls = [{"id": i, "type": "function", "function": {"name": n, "arguments": "{}"}}
             for i, n in zip(ids, "ab", strict=True)]  # fmt: skip
    return [
        {"role": "user", "content": "call a and b"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": i, "content": f"for {n}"}
          for i, n in zip(ids, "ab", strict=True)),
    ]  # fmt: skip


async def test_colliding_ids_reach_anthropic_apart_and_paired(
    gw: Harness, fake: FakeProvider
) -> None:
    c = await gw.async_openai().chat.completions.create(
        model="claude-test", messages=history(("call.1", "call_1")), tools=TOOLS
    )
    assert c.choices[0].message.content
    sent = fake.requests[-1].body["messages"]
    uses = {b["name"]: b["id"] for b in sent[1]["content"] if b["type"] == "tool_use"}
    results = {b["content"]: b["tool_use_id"] for b in sent[2]["content"]}
    assert uses["a"] != uses["b"], f"both sent as {uses['a']!r}"
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]+", i) for i in uses.values())
    assert results == {"for a": uses["a"], "for b": uses["b"]}
    assert uses["b"] == "call_1"  # an acceptable id is sent as it is


async def test_an_id_that_is_anothers_rewritten_form_is_a_400_naming_the_field(
    gw: Harness, fake: FakeProvider
) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        await gw.async_openai().chat.completions.create(
            model="claude-test", messages=history(("call.1", "call_1_664517c6")), tools=TOOLS
        )
    assert e.value.status_code == 400
    assert (e.value.body or {}).get("param") == "tool_call_id"  # type: ignore[union-attr]
    assert not fake.requests  # nothing went upstream


async def test_a_summary_of_a_tool_history_with_no_tools_reaches_claude(
    gw: Harness, fake: FakeProvider
) -> None:
    """The OpenAI SDK asks Claude for a summary of an agent's conversation and offers no
    tools. Anthropic refuses tool blocks without tools (the fake does too); the request
    goes with the tools the history names, described as not to be called, and the client
    gets its answer."""
    messages = [*history(("call_1", "call_2")), {"role": "user", "content": "Summarise."}]
    c = await gw.async_openai().chat.completions.create(model="claude-test", messages=messages)
    assert c.choices[0].message.content
    sent = fake.requests[-1].body
    assert [t["name"] for t in sent["tools"]] == ["a", "b"]
    assert all("Do not call it" in t["description"] for t in sent["tools"])
