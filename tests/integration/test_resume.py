"""Streams resumed in place: cut answers continued, broken streams joined, character for character."""

from __future__ import annotations

import anthropic
import openai
import pytest

from gateway.testing import CutAfter, FakeProvider, Success
from tests.harness import Harness

REPLY = (
    "Streams break in the middle of an answer more often than anyone likes; the gateway "
    "picks the answer up where it broke so the client never notices the seam at all."
)
CONTINUE = {"stream": {"on_midstream_failure": "continue"}}
ASK = [{"role": "user", "content": "Tell me about streams."}]


async def chat_stream(gw: Harness, model: str, **kw: object) -> tuple[str, list[str], set[str]]:
    stream = await gw.async_openai().chat.completions.create(
        model=model,
        messages=ASK,
        stream=True,
        **kw,  # type: ignore[arg-type]
    )
    parts, finishes, ids = [], [], set()
    async for c in stream:
        ids.add(c.id)
        for ch in c.choices:
            parts.append(ch.delta.content or "")
            if ch.finish_reason:
                finishes.append(ch.finish_reason)
    return "".join(parts), finishes, ids


async def test_streaming_continuation_joins_cut_parts(gw: Harness, fake: FakeProvider) -> None:
    """An answer cut at the token limit is continued inside the same stream, one id, one end."""
    fake.reply["fake-model"] = REPLY
    fake.cut_at["fake-model"] = 16
    text, finishes, ids = await chat_stream(gw, "gpt-test")
    assert text == REPLY
    assert finishes == ["stop"]
    assert len(ids) == 1
    assert len(fake.requests) == 3


async def test_midstream_reset_resumed_with_prefill(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """With `continue`, a reset after 3 chunks on a prefill model joins into one whole answer."""
    gw: Harness = await make_gateway(policy=CONTINUE)
    fake.reply["gpt-prefill"] = REPLY
    fake.push(CutAfter(3), model="gpt-prefill")
    text, finishes, ids = await chat_stream(gw, "gpt-prefill")
    assert text == REPLY
    assert finishes == ["stop"] and len(ids) == 1
    assert fake.requests[-1].body["messages"][-1]["role"] == "assistant"  # the prefill


async def test_midstream_reset_resumed_by_regeneration(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """Without prefill, the regenerated answer is passed on from where the first one broke."""
    gw: Harness = await make_gateway(policy=CONTINUE)
    fake.reply["fake-model"] = REPLY
    fake.push(CutAfter(4), model="fake-model")
    text, finishes, _ = await chat_stream(gw, "gpt-test")
    assert text == REPLY
    assert finishes == ["stop"]
    assert fake.requests[-1].body["messages"] == ASK  # the original request again


async def test_failed_resume_ends_with_the_original_error(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """Prefill rejected and regeneration diverging: the client gets the ORIGINAL error event."""
    gw: Harness = await make_gateway(policy=CONTINUE)
    fake.reply["gpt-prefill"] = REPLY
    fake.reject_prefill["gpt-prefill"] = True
    other = Success(text="Something else entirely, said differently.")
    fake.script("gpt-prefill", [CutAfter(3), other, other])
    with pytest.raises(openai.APIError) as exc:
        await chat_stream(gw, "gpt-prefill")
    assert "interrupted (connection)" in str(exc.value)
    assert "prefill" not in str(exc.value).lower()


async def test_anthropic_stream_resumed(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """An Anthropic stream cut mid-answer is resumed with prefill in the same stream."""
    gw: Harness = await make_gateway(policy=CONTINUE)
    fake.reply["claude-test"] = REPLY
    fake.push(CutAfter(3), model="claude-test")
    async with gw.async_anthropic().messages.stream(
        model="claude-test", max_tokens=500, messages=ASK
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text == REPLY
    assert final.stop_reason == "end_turn"


async def test_responses_stream_resumed(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """A Responses stream cut mid-answer is resumed; the final response carries the whole text."""
    gw: Harness = await make_gateway(policy=CONTINUE)
    fake.reply["fake-model"] = REPLY
    fake.push(CutAfter(3), model="fake-model")
    stream = await gw.async_openai().responses.create(model="gpt-test", input="hi", stream=True)
    deltas, final = [], None
    async for e in stream:
        if e.type == "response.output_text.delta":
            deltas.append(e.delta)
        if e.type == "response.completed":
            final = e.response
    assert "".join(deltas) == REPLY
    assert final is not None and final.output_text == REPLY


async def test_default_policy_does_not_resume(gw: Harness, fake: FakeProvider) -> None:
    """With the default `error`, a broken stream is never resumed: the SDK raises."""
    fake.push(CutAfter(3))
    with pytest.raises(openai.APIError):
        await chat_stream(gw, "gpt-test")
    assert len(fake.requests) == 1


def _unused() -> None:  # keep the anthropic import used for type checkers
    _ = anthropic
