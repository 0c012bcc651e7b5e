"""`llm-gateway serve --demo` as the README shows it: the bundled policies and the built-in
sim provider, driven by the official SDKs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import openai
import pytest
from prometheus_client import CollectorRegistry

from gateway.observe.metrics import Metrics
from gateway.settings import GatewaySettings
from gateway.web.app import Gateway, create_app

BUNDLED = Path(__file__).resolve().parents[2] / "policies"
HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture
async def demo() -> AsyncIterator[str]:
    gw: Gateway = create_app(
        GatewaySettings(demo=True, policy_dir=BUNDLED), metrics=Metrics(CollectorRegistry())
    )
    port = await gw.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await gw.stop()


async def test_claude_code_style_client_falls_back_across_formats(demo: str) -> None:
    """The Anthropic SDK asks sim-claude (Anthropic format, always overloaded): it is answered
    by sim-gpt (OpenAI format), as an Anthropic message naming sim-gpt."""
    async with anthropic.AsyncAnthropic(base_url=demo, api_key="demo-key", max_retries=0) as c:
        raw = await c.messages.with_raw_response.create(
            model="sim-claude", max_tokens=200, messages=HELLO
        )
        m = await raw.parse()
        async with c.messages.stream(model="sim-claude", max_tokens=200, messages=HELLO) as s:
            text = "".join([t async for t in s.text_stream])
    assert m.type == "message" and m.model == "sim-gpt" and m.content[0].text
    assert raw.headers["x-gateway-model"] == "sim-gpt"
    assert "fallback" in raw.headers["x-gateway-recovery"]
    assert text


async def test_openai_client_on_the_anthropic_demo_model(demo: str) -> None:
    """An OpenAI chat client on sim-claude: translated to Messages, overloaded, then answered
    by sim-gpt; the retry and the fallback are in the headers."""
    async with openai.AsyncOpenAI(base_url=demo + "/v1", api_key="demo-key", max_retries=0) as c:
        raw = await c.chat.completions.with_raw_response.create(model="sim-claude", messages=HELLO)
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-gateway-model"] == "sim-gpt"


async def test_the_readme_demo_models_recover(demo: str) -> None:
    """sim-flaky's 429 is retried, sim-down falls back to sim-ok, sim-long is continued."""
    async with openai.AsyncOpenAI(base_url=demo + "/v1", api_key="demo-key", max_retries=0) as c:
        flaky = await c.chat.completions.with_raw_response.create(model="sim-flaky", messages=HELLO)
        down = await c.chat.completions.with_raw_response.create(model="sim-down", messages=HELLO)
        long = await c.chat.completions.with_raw_response.create(model="sim-long", messages=HELLO)
    assert (
        flaky.headers["x-gateway-attempts"] == "2"
        and flaky.headers["x-gateway-recovery"] == "retry"
    )
    assert down.headers["x-gateway-model"] == "sim-ok"
    assert "continuation" in long.headers["x-gateway-recovery"]
    assert long.parse().choices[0].finish_reason == "stop"
