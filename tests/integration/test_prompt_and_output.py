"""Layer 3 over real sockets: prompts that are too long are compacted, cut answers continued."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from structlog.testing import capture_logs

from gateway.testing import FakeProvider
from tests.harness import Harness

REPLY = (
    "The quick brown fox jumps over the lazy dog while the gateway keeps every "
    "character of this answer in order, however often the provider cuts it short."
)


def agent_transcript(turns: int = 6, result_chars: int = 6000) -> list[dict[str, Any]]:
    """A system prompt, a task, and tool-call rounds with large tool results."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test."},
    ]
    for i in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"path": "f{i}.py"}}'},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"call_{i}",
                "content": f"line {i}\n" + "x" * result_chars,
            }
        )
    messages.append({"role": "user", "content": "Now summarise what you found."})
    return messages  # fmt: skip


async def test_compaction_then_success(gw: Harness, fake: FakeProvider) -> None:
    """context_length_exceeded, then the compacted prompt fits and is answered."""
    fake.context_window["fake-model"] = 6000  # fits once the older tool results are snipped
    with capture_logs() as events:
        raw = await gw.async_openai().chat.completions.with_raw_response.create(
            model="gpt-test", messages=agent_transcript()
        )
    assert raw.parse().choices[0].message.content
    assert "compaction" in raw.headers["x-gateway-recovery"]
    sent = fake.requests[-1].body["messages"]
    assert len(fake.requests) == 2
    assert sum(len(str(m.get("content"))) for m in sent) < 6 * 6000 * 0.75
    ev = [e for e in events if e["event"] == "prompt_too_long_recovery"]
    assert ev[0]["strategy"] == "snip_tool_results" and ev[0]["outcome"] == "applied"
    assert ev[0]["tokens_after"] < ev[0]["tokens_before"]
    assert gw.metric("llm_gateway_compactions_total", team="team-a", model="gpt-test",
                     strategy="snip_tool_results", outcome="applied") == 1  # fmt: skip


async def test_too_long_after_every_strategy_is_400(gw: Harness, fake: FakeProvider) -> None:
    """When nothing fits, a 400 says so and what was tried, within the attempt bound."""
    fake.context_window["fake-model"] = 50
    with pytest.raises(openai.BadRequestError) as exc:
        await gw.async_openai().chat.completions.create(
            model="gpt-test", messages=agent_transcript()
        )
    assert exc.value.code == "context_length_exceeded"
    assert "prompt is too long" in exc.value.message and "tried" in exc.value.message
    assert len(fake.requests) <= 2 + 0 + 1  # strategies + on_prompt_too_long models + 1


async def test_single_short_prompt_goes_straight_to_larger_model(
    make_gateway, fake: FakeProvider
) -> None:  # type: ignore[no-untyped-def]
    """A prompt no strategy can shrink goes to on_prompt_too_long, uncompacted."""
    gw: Harness = await make_gateway(policy={"fallback": {"on_prompt_too_long": ["gpt-large"]}})
    fake.context_window["fake-model"] = 10
    big = [{"role": "user", "content": "y" * 400}]
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="gpt-test", messages=big
    )
    assert raw.headers["x-gateway-model"] == "gpt-large"
    assert [r.model for r in fake.requests] == ["fake-model", "gpt-large"]
    assert fake.requests[-1].body["messages"] == big


async def test_larger_model_gets_original_request(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """After compaction fails, the on_prompt_too_long model gets the uncompacted request."""
    gw: Harness = await make_gateway(policy={"fallback": {"on_prompt_too_long": ["gpt-large"]}})
    fake.context_window["fake-model"] = 50
    messages = agent_transcript()
    await gw.async_openai().chat.completions.create(model="gpt-test", messages=messages)
    assert fake.requests[-1].model == "gpt-large"
    assert fake.requests[-1].body["messages"] == messages
    assert len(fake.requests) == 4  # original, 2 compactions, the larger model


async def test_continuation_joins_cut_answer(gw: Harness, fake: FakeProvider) -> None:
    """An answer cut twice at the token limit comes back whole, with usage summed."""
    fake.reply["fake-model"] = REPLY
    fake.cut_at["fake-model"] = 16  # 64 characters per part: three parts
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": "Tell me about the fox."}]
    )
    c = raw.parse()
    assert c.choices[0].message.content == REPLY
    assert c.choices[0].finish_reason == "stop"
    assert len(fake.requests) == 3
    # usage is summed over the three parts: 16 + 16 + the rest of the reply
    assert c.usage.completion_tokens == 32 + -(-(len(REPLY) - 128) // 4)
    assert c.usage.prompt_tokens > 3 * 5  # three prompts, each longer than the first
    assert "continuation" in raw.headers["x-gateway-recovery"]
    assert gw.metric("llm_gateway_continuations_total", team="team-a", model="gpt-test") == 2


async def test_no_continuation_when_client_set_max_tokens(gw: Harness, fake: FakeProvider) -> None:
    """A client that set max_tokens gets the cut answer as the model gave it."""
    fake.reply["fake-model"] = REPLY
    c = await gw.async_openai().chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "Tell me."}], max_tokens=5
    )
    assert c.choices[0].finish_reason == "length"
    assert len(fake.requests) == 1


async def test_proactive_compaction(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """With compaction.proactive, a prompt over the model's window is compacted before sending."""
    gw: Harness = await make_gateway(policy={"compaction": {"proactive": True}})
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="gpt-small", messages=agent_transcript(turns=4, result_chars=3000)
    )
    assert raw.headers["x-gateway-recovery"] == "compaction"
    assert len(fake.requests) == 1  # no prompt-too-long round trip
    sent = fake.requests[0].body["messages"]
    assert sum(len(str(m.get("content"))) for m in sent) < 3000 * 4
