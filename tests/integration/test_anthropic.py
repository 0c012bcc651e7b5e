"""The Anthropic Messages API through the gateway, driven by the official anthropic SDK."""

from __future__ import annotations

import aiohttp
import anthropic
import pytest

from gateway.testing import Error, FakeProvider
from tests.harness import CLIENT_KEY, PROVIDER_KEY, Harness

MESSAGES = [{"role": "user", "content": "Say hello"}]
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]},
}  # fmt: skip


async def test_plain_message(gw: Harness, fake: FakeProvider) -> None:
    """A message is answered; the provider sees its own key as x-api-key, never the client's."""
    client = gw.async_anthropic()
    raw = await client.messages.with_raw_response.create(
        model="claude-test", max_tokens=200, messages=MESSAGES
    )
    m = await raw.parse()
    assert m.content[0].text.startswith("Hello! This is the fake provider")
    assert m.usage.output_tokens > 0
    assert raw.headers["x-gateway-model"] == "claude-test"
    seen = fake.requests[-1]
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == PROVIDER_KEY
    assert "authorization" not in seen.headers
    assert CLIENT_KEY not in str(seen.headers)
    assert seen.headers["anthropic-version"]  # the SDK's own version, passed on


async def test_streaming_message(gw: Harness) -> None:
    """A streamed message arrives event by event and joins to the full text."""
    client = gw.async_anthropic()
    async with client.messages.stream(
        model="claude-test", max_tokens=200, messages=MESSAGES
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text.startswith("Hello! This is the fake provider")
    assert final.stop_reason == "end_turn"


async def test_tool_use_round_trip(gw: Harness) -> None:
    """A tool_use answer, then the tool_result, then the model's text: through the gateway."""
    client = gw.async_anthropic()
    ask = [{"role": "user", "content": "Use get_weather for Paris"}]
    m = await client.messages.create(model="claude-test", max_tokens=200, tools=[WEATHER],
                                     messages=ask)  # fmt: skip
    assert m.stop_reason == "tool_use"
    use = next(b for b in m.content if b.type == "tool_use")
    follow = [*ask, {"role": "assistant", "content": [b.model_dump() for b in m.content]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                            "content": "sunny, 21 C"}]}]  # fmt: skip
    m2 = await client.messages.create(model="claude-test", max_tokens=200, tools=[WEATHER],
                                      messages=follow)  # fmt: skip
    assert "sunny, 21 C" in m2.content[0].text


async def test_529_then_200(gw: Harness, fake: FakeProvider) -> None:
    """A 529 overloaded answer is retried: the client sees one clean answer."""
    fake.push(Error.anthropic_overloaded())
    raw = await gw.async_anthropic().messages.with_raw_response.create(
        model="claude-test", max_tokens=100, messages=MESSAGES
    )
    assert (await raw.parse()).content[0].text
    assert raw.headers["x-gateway-attempts"] == "2"
    assert gw.metric("llm_gateway_upstream_attempts_total", provider="fake-anthropic",
                     model="claude-test", category="server_overload") == 1  # fmt: skip


async def test_rate_limit_with_anthropic_headers(gw: Harness, fake: FakeProvider) -> None:
    """A 429 with retry-after and anthropic-ratelimit headers is waited out."""
    fake.push(Error.anthropic_rate_limit(retry_after=0.2))
    m = await gw.async_anthropic().messages.create(
        model="claude-test", max_tokens=100, messages=MESSAGES
    )
    assert m.content[0].text
    assert len(fake.requests) == 2


async def test_prompt_too_long_compacted(gw: Harness, fake: FakeProvider) -> None:
    """An Anthropic prompt-too-long error is compacted and retried, in Anthropic shapes."""
    fake.context_window["claude-test"] = 3000
    messages: list[dict[str, object]] = [{"role": "user", "content": "Investigate the bug."}]
    for i in range(5):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": f"tu_{i}",
                        "name": "read",
                        "input": {"path": f"f{i}"},
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"tu_{i}", "content": "z" * 5000}
                ],
            }
        )
    messages.append({"role": "assistant", "content": "I have read the files."})
    messages.append({"role": "user", "content": "Summarise."})  # fmt: skip
    read = {"name": "read", "input_schema": {"type": "object"}}  # (Anthropic wants the tools
    raw = await gw.async_anthropic().messages.with_raw_response.create(  # of tool blocks)
        model="claude-test", max_tokens=100, messages=messages, tools=[read]
    )
    assert (await raw.parse()).content[0].text
    assert "compaction" in raw.headers["x-gateway-recovery"]


async def test_errors_in_anthropic_format(gw: Harness) -> None:
    """The gateway's own errors on /v1/messages are Anthropic-shaped."""
    client = anthropic.AsyncAnthropic(base_url=gw.url, api_key="wrong-key", max_retries=0)
    try:
        with pytest.raises(anthropic.AuthenticationError) as exc:
            await client.messages.create(model="claude-test", max_tokens=10, messages=MESSAGES)
        assert exc.value.body["type"] == "error"
        assert exc.value.body["error"]["type"] == "authentication_error"
        with pytest.raises(anthropic.NotFoundError) as nf:
            await gw.async_anthropic().messages.create(
                model="no-such-model", max_tokens=10, messages=MESSAGES
            )
        assert nf.value.body["error"]["type"] == "not_found_error"
    finally:
        await client.close()


async def test_claude_code_style_request(gw: Harness, fake: FakeProvider) -> None:
    """HEAD / warm-up, then /v1/messages?beta=true with x-api-key and anthropic-beta."""
    async with aiohttp.ClientSession() as s:
        async with s.head(gw.url + "/") as r:
            assert r.status == 200
        async with s.post(
            gw.url + "/v1/messages?beta=true",
            json={"model": "claude-test", "max_tokens": 50, "messages": MESSAGES},
            headers={"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01",
                     "anthropic-beta": "claude-code-20250219"},
        ) as r:  # fmt: skip
            assert r.status == 200
    seen = fake.requests[-1]
    assert seen.query == {"beta": "true"}
    assert seen.headers["anthropic-beta"] == "claude-code-20250219"
    assert seen.headers["x-api-key"] == PROVIDER_KEY


async def test_legacy_completions_reject_an_anthropic_model(gw: Harness) -> None:
    """Legacy completions have no Anthropic equivalent: an Anthropic-format model there is
    a clear 400 (chat, Responses and Messages are translated, docs/translation.md)."""
    import openai

    with pytest.raises(openai.BadRequestError) as exc:
        await gw.async_openai().completions.create(model="claude-test", prompt="Say hello")
    assert "anthropic" in exc.value.message
