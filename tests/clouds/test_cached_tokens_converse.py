"""Prompt caching on Bedrock Converse through the real gateway: a request translated to
Converse carries ``cachePoint`` markers (tools, system, last message) on a Claude model, the
fake Bedrock's cache reads them on the next turn, and the client (OpenAI or Anthropic SDK,
JSON and streams) gets the counts in its own fields, as do the access log, the metric and
the cost. A Converse model without a prompt cache (Llama) gets no marker."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import FakeProvider
from gateway.testing.fake_bedrock import FakeBedrock
from tests.harness import Harness, platform_files, write_policies
from tests.integration.test_cached_tokens import CLIENTS, ask
from tests.log_sink import Sink

API_KEY = "bedrock-api-key-0123456789abcdef"
CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
LLAMA = "meta.llama3-1-70b-instruct-v1:0"
PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.30, "cache_write": 3.75}
LONG = "A Converse request marks the end of what it caches with a block of its own. " * 140
POINT = {"cachePoint": {"type": "default"}}
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}  # fmt: skip


@pytest.fixture
async def bedrock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    async with FakeProvider() as direct, FakeBedrock(region="us-east-1") as fake:
        fake.add_api_key(API_KEY)
        monkeypatch.setenv("BEDROCK_API_KEY", API_KEY)
        provider = {"api": "bedrock", "region": "us-east-1", "base_url": fake.url,
                    "api_key_env": "BEDROCK_API_KEY"}  # fmt: skip
        models = {
            "claude-converse": {
                "deployments": [{"provider": "bedrock", "upstream_model": CLAUDE,
                                 "upstream_api": "converse"}],
                "price": PRICE,
            },
            "claude-invoke": {"provider": "bedrock", "upstream_model": CLAUDE, "price": PRICE},
            "llama": {"provider": "bedrock", "upstream_model": LLAMA},
        }  # fmt: skip
        files = platform_files({"bedrock": provider}, models)
        gw = await Harness(direct, write_policies(tmp_path / "p", files)).start()
        try:
            yield gw, fake
        finally:
            await gw.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_an_openai_client_on_claude_by_converse(
    bedrock: Any, log_sink: Sink, stream: bool
) -> None:
    log_sink.configure()
    gw, fake = bedrock
    c = gw.async_openai()
    messages: Any = [{"role": "system", "content": LONG}, {"role": "user", "content": "hi"}]
    usages = []
    for _ in range(2):
        rid = uuid.uuid4().hex
        kw: Any = {"model": "claude-converse", "messages": messages, "tools": [TOOL],
                   "extra_headers": {"x-request-id": rid}}  # fmt: skip
        if stream:
            chunks = await c.chat.completions.create(
                stream=True, stream_options={"include_usage": True}, **kw
            )
            usages.append([ch.usage async for ch in chunks if ch.usage][-1])
        else:
            usages.append((await c.chat.completions.create(**kw)).usage)
    body = fake.requests[-1].body
    assert body["toolConfig"]["tools"][-1] == POINT
    assert body["system"][-1] == POINT
    assert body["messages"][-1]["content"][-1] == POINT
    first, second = fake.requests[-2], fake.requests[-1]
    assert first.cache_write > 1000 and second.cache_read > 1000
    u = usages[-1]
    assert u.prompt_tokens_details.cached_tokens == second.cache_read
    _, line = await log_sink.line(rid)
    assert line["tokens"]["cache_read"] == second.cache_read
    assert line["tokens"]["cache_write"] == second.cache_write == 0
    assert line["cache_markers"] == 3
    want = (
        (u.prompt_tokens - second.cache_read) * PRICE["input"]
        + second.cache_read * PRICE["cache_read"]
        + u.completion_tokens * PRICE["output"]
    ) / 1e6
    assert line["cost_usd"] == pytest.approx(want, abs=1e-8)
    labels = {"team": "apps", "model": "claude-converse", "deployment": "bedrock"}
    assert gw.metric("llm_gateway_cached_tokens_total", kind="read", **labels) == second.cache_read
    assert gw.metric("llm_gateway_cached_tokens_total", kind="write", **labels) == (
        first.cache_write
    )


async def test_an_anthropic_client_on_converse_gets_the_gateways_markers(bedrock: Any) -> None:
    """Its own cache_control does not survive the translation (named as dropped); the
    gateway's cachePoints take their place, and the SDK sees the cache read."""
    gw, fake = bedrock
    a = gw.async_anthropic()
    system: Any = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    for _ in range(2):
        raw = await a.messages.with_raw_response.create(
            model="claude-converse", max_tokens=100, system=system,
            messages=[{"role": "user", "content": "hi"}],
        )  # fmt: skip
    m = await raw.parse()
    assert "cache_control" in raw.headers["x-gateway-dropped"]
    assert raw.headers["x-gateway-cache-markers"] == "2"
    assert fake.requests[-1].body["system"][-1] == POINT
    assert m.usage.cache_read_input_tokens == fake.requests[-1].cache_read > 1000


async def test_a_converse_model_without_a_cache_gets_no_marker(bedrock: Any) -> None:
    gw, fake = bedrock
    messages: Any = [{"role": "system", "content": LONG}, {"role": "user", "content": "hi"}]
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="llama", messages=messages
    )
    assert "x-gateway-cache-markers" not in raw.headers
    assert "cachePoint" not in str(fake.requests[-1].body)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("model", ["claude-converse", "claude-invoke"])
@pytest.mark.parametrize("client", CLIENTS)
async def test_every_client_on_bedrock_counts_alike(
    bedrock: Any, log_sink: Sink, client: str, model: str, stream: bool
) -> None:
    """Each client format on Claude by Converse and by InvokeModel (a Messages body): the
    second turn's cache read is the SDK's, the access log's and the metric's."""
    log_sink.configure()
    gw, fake = bedrock
    for _ in range(2):
        rid = uuid.uuid4().hex
        got = await ask(gw, client, model, stream, rid)
    second = fake.requests[-1]
    assert second.cache_read > 1000
    assert got["read"] == second.cache_read and got["write"] == second.cache_write
    _, line = await log_sink.line(rid)
    assert line["tokens"]["cache_read"] == second.cache_read
    assert line["tokens"]["prompt"] == got["total"]
    labels = {"team": "apps", "model": model, "deployment": "bedrock"}
    read = gw.metric("llm_gateway_cached_tokens_total", kind="read", **labels)
    assert read == sum(r.cache_read for r in fake.requests)
