"""The demo's sim-cached model: three deployments of the sim, each with a prompt cache of
its own that keeps every prefix, so a short chat through ``serve --demo`` reads its
earlier turns from the cache of the deployment its session stays on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from prometheus_client import CollectorRegistry

from gateway.observe.metrics import Metrics
from gateway.routing.load import load_policy_dir
from gateway.settings import GatewaySettings
from gateway.testing import tokens_of
from gateway.testing.sim import SimProvider
from gateway.web.app import create_app
from gateway.web.gateway import Gateway

BUNDLED = Path(__file__).resolve().parents[2] / "policies"


def chat(turns: int, reply: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(1, turns + 1):
        if i > 1:
            messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": f"Question {i}?"})
    return messages


def test_sim_cached_is_three_deployments_of_their_own() -> None:
    """The bundled policies give sim-cached three deployments on distinct upstream models
    (the sim's cache scope), chosen by weight with session affinity."""
    ps = load_policy_dir(BUNDLED, env={})
    route = ps.route("demo", "sim-cached", "/v1/chat/completions")
    assert route is not None
    model = ps.models["sim-cached"]
    assert model.balance == "weighted"
    upstream = sorted(d.upstream_model for d in model.deployments)
    assert upstream == ["sim-cached-a", "sim-cached-b", "sim-cached-c"]


async def test_sim_keeps_a_cache_per_deployment() -> None:
    """On the sim itself: sim-cached-a's second turn reads its first, sim-cached-b has not
    seen it; other sim models keep the usual 1,024-token minimum."""
    async with (
        SimProvider() as sim,
        openai.AsyncOpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0) as c,
    ):
        reply = "Hello! This is the fake provider answering model sim-cached-a."
        await c.chat.completions.create(model="sim-cached-a", messages=chat(1, reply))
        two = await c.chat.completions.create(model="sim-cached-a", messages=chat(2, reply))
        other = await c.chat.completions.create(model="sim-cached-b", messages=chat(2, reply))
        await c.chat.completions.create(model="sim-ok", messages=chat(1, reply))
        ok = await c.chat.completions.create(model="sim-ok", messages=chat(2, reply))
    first = tokens_of("Be brief.Question 1?")
    assert two.usage and two.usage.prompt_tokens_details
    assert two.usage.prompt_tokens_details.cached_tokens == first
    assert other.usage and other.usage.prompt_tokens_details
    assert other.usage.prompt_tokens_details.cached_tokens == 0
    assert ok.usage and ok.usage.prompt_tokens_details
    assert ok.usage.prompt_tokens_details.cached_tokens == 0


@pytest.fixture
async def demo() -> AsyncIterator[str]:
    gw: Gateway = create_app(
        GatewaySettings(demo=True, policy_dir=BUNDLED, admin_key="demo-admin"),
        metrics=Metrics(CollectorRegistry()),
    )
    port = await gw.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await gw.stop()


async def test_a_demo_chat_reads_its_earlier_turns_from_the_cache(demo: str) -> None:
    """Three turns of one conversation on sim-cached: each later turn's usage says the
    earlier turns were read from the cache (the session stays on one deployment)."""
    async with openai.AsyncOpenAI(base_url=demo + "/v1", api_key="demo-key", max_retries=0) as c:
        one = await c.chat.completions.create(model="sim-cached", messages=chat(1, ""))
        reply = one.choices[0].message.content or ""
        cached = []
        for turns in (2, 3):
            raw = await c.chat.completions.with_raw_response.create(
                model="sim-cached",
                messages=chat(turns, reply),
            )
            answer = raw.parse()
            assert raw.headers["x-gateway-model"] == "sim-cached"
            assert answer.usage and answer.usage.prompt_tokens_details
            cached.append(answer.usage.prompt_tokens_details.cached_tokens)
            assert answer.usage.prompt_tokens == tokens_of(
                "".join(str(m["content"]) for m in chat(turns, reply))
            )
    assert cached == [
        tokens_of("".join(str(m["content"]) for m in chat(turns - 1, reply))) for turns in (2, 3)
    ]
    # /admin/deployments: the deployment that served them read from its cache
    admin = {"authorization": "Bearer demo-admin"}
    async with aiohttp.ClientSession() as s, s.get(demo + "/admin/deployments", headers=admin) as r:
        rows = (await r.json())["models"]["sim-cached"]["deployments"]
    caches = [row["cache"] for row in rows if "cache" in row]
    assert len(caches) == 1, "the conversation stayed on one deployment"
    assert caches[0]["cache_read_tokens"] == sum(cached)
    assert 0 < caches[0]["cached_share"] < 1
