"""``limits.max_concurrent``: at most that many of a team's requests in flight at once.

A real gateway in front of the scripted fake provider, clients over real HTTP (the
official SDKs where the error format matters). Over the limit: a 429 in the endpoint's
format at once, never a queue; other teams untouched; a slot comes back when a JSON
answer is out, a stream ends, an attempt fails or the client leaves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from gateway.routing.policyset import hash_key
from gateway.testing import FakeProvider
from gateway.testing.script import Delay, Error, Hang, SlowFirstByte
from tests.harness import CLIENT_KEY, Harness, policy_files
from tests.waiting import eventually

OTHER_KEY = "team-b-client-key"
SLOW = 0.6  # seconds the provider takes over the requests that fill the slots
CHAT = "/v1/chat/completions"


@pytest.fixture
def limited(fake: FakeProvider, gateway_of: Callable[..., Any]) -> Callable[[int], Any]:
    """``await limited(n)``: a gateway where team-a has ``max_concurrent: n`` and team-b
    (key ``OTHER_KEY``, model ``gpt-backup``) has no limit."""

    async def make(n: int) -> Harness:
        files = policy_files(fake.url, limits={"max_concurrent": n})
        files["teams/team-b.yaml"] = {
            "teams": {
                "team-b": {
                    "keys": [hash_key(OTHER_KEY)],
                    "models": ["gpt-*"],
                    "routes": [{"match": {"model": "*"}, "policy": "fast"}],
                }
            }
        }
        h: Harness = await gateway_of(files)
        return h

    return make


async def post(
    s: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    key: str = CLIENT_KEY,
    path: str = CHAT,
) -> tuple[int, dict[str, str], Any, float]:
    """Status, headers, JSON (or text) and seconds taken."""
    t0 = time.monotonic()
    auth = {"authorization": f"Bearer {key}"}
    async with s.post(url + path, json=body, headers=auth) as r:
        data = await r.json(content_type=None) if not body.get("stream") else await r.text()
        headers = {k.lower(): v for k, v in r.headers.items()}
        return r.status, headers, data, time.monotonic() - t0


def refusals(h: Harness, team: str) -> float:
    """``llm_gateway_requests_total`` of ``team`` with status 429, over every model label."""
    return sum(
        sample.value
        for family in h.metrics.registry.collect()
        for sample in family.samples
        if sample.name == "llm_gateway_requests_total"
        and sample.labels.get("team") == team
        and sample.labels.get("status") == "429"
    )


def chat(model: str = "gpt-test", **kw: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **kw}


async def test_one_over_the_limit_is_refused_at_once(limited: Callable[[int], Any]) -> None:
    """N+1 at once against a slow provider: N answered, one 429 at once (OpenAI format,
    retry-after 1, x-should-retry); team-b meanwhile answered; counted as a 429."""
    h: Harness = await limited(2)
    fake: FakeProvider = h.fake
    for _ in range(3):
        fake.push(SlowFirstByte(SLOW), "fake-model")
    async with aiohttp.ClientSession() as s:
        first = [asyncio.ensure_future(post(s, h.url, chat())) for _ in range(2)]
        await eventually(lambda: len(fake.requests) == 2, what="two requests upstream")
        status, headers, data, took = await post(s, h.url, chat())
        other = await post(s, h.url, chat("gpt-backup"), key=OTHER_KEY)
        answered = await asyncio.gather(*first)
    observed = f"extra: {status} in {took:.3f} s {data}; others: {[a[0] for a in answered]}"
    assert [a[0] for a in answered] == [200, 200], observed
    assert all(a[3] >= SLOW for a in answered), observed  # they really were in flight
    assert status == 429 and took < 0.3, observed
    assert data["error"]["code"] == "team_concurrency_limited", observed
    assert headers["retry-after"] == "1" and headers["x-should-retry"] == "true", observed
    assert other[0] == 200 and other[3] < SLOW, f"team-b: {other[0]} in {other[3]:.3f} s"
    assert len(fake.requests) == 3  # the refused one never went upstream
    assert refusals(h, "team-a") == 1 and refusals(h, "team-b") == 0
    assert h.gateway.team_slots.held("team-a") == 0


async def test_refusal_is_in_the_endpoints_format_for_the_sdks(
    limited: Callable[[int], Any],
) -> None:
    """The official SDKs read the 429 as a rate limit: OpenAI and Anthropic formats."""
    h: Harness = await limited(1)
    fake: FakeProvider = h.fake
    fake.push(SlowFirstByte(SLOW), "fake-model")
    oa = h.async_openai()
    an = h.async_anthropic()
    held = asyncio.ensure_future(
        oa.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "x"}])
    )
    await eventually(lambda: len(fake.requests) == 1, what="the first request upstream")
    with pytest.raises(openai.RateLimitError) as oe:
        await oa.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(anthropic.RateLimitError) as ae:
        await an.messages.create(
            model="claude-test", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    await held
    assert oe.value.code == "team_concurrency_limited"
    body = ae.value.body
    assert isinstance(body, dict) and body["type"] == "error", body
    assert body["error"]["type"] == "rate_limit_error", body
    assert ae.value.response.headers["retry-after"] == "1"


async def test_a_stream_holds_its_slot_until_it_ends(limited: Callable[[int], Any]) -> None:
    """Limit 1: while a stream runs another request is refused; once it ended, admitted."""
    h: Harness = await limited(1)
    fake: FakeProvider = h.fake
    fake.push(Delay(0.05), "fake-model")  # 8 deltas: about 0.4 s of stream
    async with aiohttp.ClientSession() as s:
        headers = {"authorization": f"Bearer {CLIENT_KEY}"}
        async with s.post(h.url + CHAT, json=chat(stream=True), headers=headers) as r:
            assert r.status == 200
            await r.content.readline()  # the stream is under way
            during = await post(s, h.url, chat())
            rest = await r.read()
        after = await post(s, h.url, chat())
    assert during[0] == 429, during
    assert b"[DONE]" in rest
    assert after[0] == 200, after
    assert h.gateway.team_slots.held("team-a") == 0


async def test_slot_comes_back_after_an_error(limited: Callable[[int], Any]) -> None:
    """A provider error the gateway passes on, then its own 404: the slot is back each time."""
    h: Harness = await limited(1)
    fake: FakeProvider = h.fake
    fake.push(Error.bad_request("nope"), "fake-model")
    async with aiohttp.ClientSession() as s:
        failed = await post(s, h.url, chat())
        unknown = await post(s, h.url, chat("no-such-model"))
        after = await post(s, h.url, chat())
    assert failed[0] == 400 and unknown[0] == 404, (failed, unknown)
    assert after[0] == 200, after
    assert h.gateway.team_slots.held("team-a") == 0


async def test_slot_comes_back_when_the_client_leaves(limited: Callable[[int], Any]) -> None:
    """A client that gives up on a hanging provider, and one that leaves mid-stream: no
    slot leaks, a later request is admitted."""
    h: Harness = await limited(1)
    fake: FakeProvider = h.fake
    fake.push(Hang(), "fake-model")
    fake.push(Delay(0.2), "fake-model")
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    async with aiohttp.ClientSession() as s:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await post(s, h.url, chat())
        await eventually(lambda: h.gateway.team_slots.held("team-a") == 0, within=2)
        async with s.post(h.url + CHAT, json=chat(stream=True), headers=headers) as r:
            await r.content.readline()
            assert h.gateway.team_slots.held("team-a") == 1
            r.close()  # the client leaves mid-stream
        await eventually(lambda: h.gateway.team_slots.held("team-a") == 0, within=2)
        after = await post(s, h.url, chat())
    assert after[0] == 200, after
