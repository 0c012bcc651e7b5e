"""Cached tokens through the real gateway (docs/caching.md): the fake provider keeps a prompt
cache per deployment; on a second turn the official SDK's usage (in the client's own
fields), the access log's ``tokens.cache_read`` / ``cache_write``, the metric
``llm_gateway_cached_tokens_total`` and the cost agree with what the provider reported,
for every client format on every provider format of the fake, JSON and streams. And the
markers: an OpenAI-SDK request to a Claude model carries them upstream, an Anthropic
client's own request goes upstream byte for byte."""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
import pytest

from gateway.testing import FakeProvider
from tests.harness import CLIENT_KEY, Harness
from tests.log_sink import Sink

#: USD per million tokens: Claude Sonnet's list prices.
PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.30, "cache_write": 3.75}
#: About 2,500 tokens of the fake's rule (chars / 4): above every cacheable minimum.
LONG = "The repository's README explains how the gateway keeps sessions warm. " * 140
MODELS = {
    "gpt-chat": {"provider": "fake", "upstream_api": "chat", "price": PRICE},
    "gpt-responses": {"provider": "fake", "upstream_api": "responses", "price": PRICE},
    "claude-messages": {"provider": "fake-anthropic", "price": PRICE},
}
CLIENTS = ("chat", "responses", "messages")


def cost(total: int, read: int, write: int, output: int) -> float:
    uncached = total - read - write
    return (
        uncached * PRICE["input"]
        + read * PRICE["cache_read"]
        + write * PRICE["cache_write"]
        + output * PRICE["output"]
    ) / 1e6


async def ask(gw: Harness, client: str, model: str, stream: bool, rid: str) -> dict[str, int]:
    """One request of ``client``'s format with the long prompt: its usage as the SDK gives it,
    in neutral names (``total`` prompt tokens, cache ``read`` and ``write``, ``output``)."""
    headers = {"x-request-id": rid}
    if client == "chat":
        c = gw.async_openai()
        messages: Any = [{"role": "system", "content": LONG}, {"role": "user", "content": "hi"}]
        if stream:
            chunks = await c.chat.completions.create(
                model=model, messages=messages, stream=True, extra_headers=headers,
                stream_options={"include_usage": True},
            )  # fmt: skip
            usage = [ch.usage async for ch in chunks if ch.usage is not None][-1]
        else:
            answer = await c.chat.completions.create(
                model=model, messages=messages, extra_headers=headers
            )
            usage = answer.usage
        assert usage is not None and usage.prompt_tokens_details is not None
        details = usage.prompt_tokens_details
        write = (details.model_extra or {}).get("cache_write_tokens") or 0
        return {"total": usage.prompt_tokens, "read": details.cached_tokens or 0,
                "write": write, "output": usage.completion_tokens}  # fmt: skip
    if client == "responses":
        c = gw.async_openai()
        kw: Any = {"model": model, "instructions": LONG, "input": "hi", "extra_headers": headers}
        if stream:
            events = [e async for e in await c.responses.create(stream=True, **kw)]
            r = events[-1].response
        else:
            r = await c.responses.create(**kw)
        u = r.usage
        assert u is not None
        write = (u.input_tokens_details.model_extra or {}).get("cache_write_tokens") or 0
        return {"total": u.input_tokens, "read": u.input_tokens_details.cached_tokens,
                "write": write, "output": u.output_tokens}  # fmt: skip
    a = gw.async_anthropic()
    system: Any = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    kwa: Any = {"model": model, "max_tokens": 200, "system": system,
                "messages": [{"role": "user", "content": "hi"}], "extra_headers": headers}  # fmt: skip
    if stream:
        async with a.messages.stream(**kwa) as s:
            m = await s.get_final_message()
    else:
        m = await a.messages.create(**kwa)
    read = m.usage.cache_read_input_tokens or 0
    write = m.usage.cache_creation_input_tokens or 0
    return {"total": m.usage.input_tokens + read + write, "read": read, "write": write,
            "output": m.usage.output_tokens}  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("client", CLIENTS)
async def test_usage_log_metric_and_cost_agree(
    make_gateway: Any, fake: FakeProvider, log_sink: Sink, client: str, model: str, stream: bool
) -> None:
    log_sink.configure()
    gw: Harness = await make_gateway(models=MODELS)
    provider = MODELS[model]["provider"]
    seen = []
    for turn in range(2):
        rid = f"cache-{client}-{model}-{stream}-{turn}-{uuid.uuid4().hex[:6]}"
        got = await ask(gw, client, model, stream, rid)
        upstream = fake.requests[-1]
        _, line = await log_sink.line(rid)
        seen.append((got, upstream, line))
    (first, up1, _), (second, up2, line) = seen
    assert up2.cache_read > 1000, "the second turn reads the first turn's prefix"
    if provider == "fake-anthropic":
        assert up1.cache_write > 1000  # Anthropic writes what it caches
    # the client's usage, in its own fields, is the provider's
    assert second["read"] == up2.cache_read
    assert second["write"] == up2.cache_write
    # the access log
    tokens = line["tokens"]
    assert tokens["cache_read"] == up2.cache_read
    assert tokens["cache_write"] == up2.cache_write
    assert tokens["prompt"] == second["total"]
    assert "estimated" not in tokens
    # the cost
    want = cost(second["total"], second["read"], second["write"], second["output"])
    assert line["cost_usd"] == pytest.approx(want, abs=1e-8)
    # the metric: both turns
    labels = {"team": "team-a", "model": model, "deployment": provider}
    reads = gw.metric("llm_gateway_cached_tokens_total", kind="read", **labels)
    writes = gw.metric("llm_gateway_cached_tokens_total", kind="write", **labels)
    assert reads == up1.cache_read + up2.cache_read
    assert writes == up1.cache_write + up2.cache_write
    assert first["read"] == up1.cache_read


async def test_an_openai_client_on_claude_gets_markers_upstream(
    make_gateway: Any, fake: FakeProvider, log_sink: Sink
) -> None:
    """The chat request goes upstream with markers on the tools, the system text and the
    last message; the header and the access log say how many; the second turn reads."""
    log_sink.configure()
    gw: Harness = await make_gateway(models=MODELS)
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}}}}  # fmt: skip
    messages: Any = [{"role": "system", "content": LONG}, {"role": "user", "content": "hi"}]
    c = gw.async_openai()
    raw = await c.chat.completions.with_raw_response.create(
        model="claude-messages", messages=messages, tools=[tool]
    )
    body = fake.requests[-1].body
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert raw.headers["x-gateway-cache-markers"] == "3"
    _, line = await log_sink.line(raw.headers["x-request-id"])
    assert line["cache_markers"] == 3
    again = await c.chat.completions.create(
        model="claude-messages", messages=messages, tools=[tool]
    )
    assert again.usage is not None and again.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details.cached_tokens == fake.requests[-1].cache_read > 1000


async def test_a_short_prompt_or_off_gets_no_markers(make_gateway: Any, fake: FakeProvider) -> None:
    gw: Harness = await make_gateway(models=MODELS)
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="claude-messages", messages=[{"role": "system", "content": "Be brief"},
                                      {"role": "user", "content": "hi"}]
    )  # fmt: skip
    assert "x-gateway-cache-markers" not in raw.headers
    assert "cache_control" not in str(fake.requests[-1].body)
    await gw.stop()
    off: Harness = await make_gateway(
        policy={"prompt_cache": {"breakpoints": "off"}}, models=MODELS
    )
    messages: Any = [{"role": "system", "content": LONG}, {"role": "user", "content": "hi"}]
    raw = await off.async_openai().chat.completions.with_raw_response.create(
        model="claude-messages", messages=messages
    )
    assert "x-gateway-cache-markers" not in raw.headers
    assert "cache_control" not in str(fake.requests[-1].body)


async def test_an_anthropic_clients_request_goes_upstream_byte_for_byte(
    make_gateway: Any, fake: FakeProvider
) -> None:
    """Claude Code's shape (its own markers, its headers) to an Anthropic-format model: the
    provider receives the very bytes the client sent; the gateway adds no marker."""
    body = (
        b'{"model":"claude-messages","max_tokens":32000,"stream":false,'
        b'"system":[{"type":"text","text":"You are Claude Code, Anthropic\'s official CLI.",'
        b'"cache_control":{"type":"ephemeral"}}],'
        b'"messages":[{"role":"user","content":[{"type":"text","text":"hi\\n\\"there\\" \xc3\xa9 \xe2\x80\xa8",'
        b'"cache_control":{"type":"ephemeral"}}]}],'
        b'"tools":[{"name":"Bash","description":"Run","input_schema":{"type":"object",'
        b'"properties":{"command":{"type":"string"}},"required":["command"]}}],'
        b'"metadata":{"user_id":"user_abc"},"temperature":1}'
    )
    gw2: Harness = await make_gateway(models=MODELS)
    async with aiohttp.ClientSession() as s:
        resp = await s.post(
            gw2.url + "/v1/messages",
            data=body,
            headers={"x-api-key": CLIENT_KEY, "anthropic-version": "2023-06-01",
                     "content-type": "application/json",
                     "x-claude-code-session-id": str(uuid.uuid4())},
        )  # fmt: skip
        assert resp.status == 200, await resp.text()
        assert "x-gateway-cache-markers" not in resp.headers
    # the model is named upstream as the client named it (no upstream_model): same bytes
    assert fake.requests[-1].raw == body
