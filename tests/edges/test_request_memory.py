"""What a large request costs in memory while the provider thinks.

A real gateway process (``python -m gateway serve``) in front of the fake provider, whose
answer is held back for 1.5 s; a 31.5 MB Chat request (301 messages), translated to an
Anthropic-format model or passed on to an OpenAI-format one, 1 or 4 at once. The growth of
the gateway's RSS is read from ``/proc`` once every request has reached the provider: what
it holds for the whole wait. The gateway keeps the client's decoded body (retries,
fallbacks, compaction and continuation read it) and lets go of everything else: the raw
bytes once parsed, an attempt's translated body once encoded, the encoded body once sent.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from gateway.testing import FakeProvider
from gateway.testing.script import SlowFirstByte
from tests.edges.support import AUTH, MiB, Process, RssProbe, _status_kb, warm_up
from tests.waiting import eventually

HOLD = 1.5  # seconds the provider thinks
MESSAGES = 301  # user first and last, alternating: no two messages merge in translation


def large_chat(model: str, size: int = int(31.5 * MiB)) -> bytes:
    """A Chat request of ``size`` bytes: a long conversation, alternating roles."""
    piece = "x" * (size // MESSAGES - 60)
    messages = [
        {"role": "assistant" if i % 2 else "user", "content": f"{i} {piece}"}
        for i in range(MESSAGES)
    ]
    return json.dumps({"model": model, "messages": messages, "max_tokens": 10}).encode()


@pytest.mark.parametrize("count", [1, 4])
@pytest.mark.parametrize("model", ["claude-test", "gpt-test"])
async def test_a_large_request_holds_one_copy_while_upstream_thinks(
    gateway_process: Callable[..., Awaitable[Process]],
    fake: FakeProvider,
    model: str,
    count: int,
) -> None:
    """RSS growth during the wait: under 2 copies of the body per request (it was 2.6-3)."""
    policy = {"timeouts": {"first_byte": "10s", "total": "30s"}}
    gw = await gateway_process(fake.url, policy)
    await warm_up(gw.url)
    body = large_chat(model)
    body_mb = len(body) / MiB
    for _ in range(count):
        fake.push(SlowFirstByte(HOLD))
    seen = len(fake.requests)
    async with aiohttp.ClientSession() as s:

        async def one() -> int:
            headers = {**AUTH, "content-type": "application/json"}
            data = io.BytesIO(body)  # the client's copy: aiohttp warns about a large bytes body
            async with s.post(gw.url + "/v1/chat/completions", data=data, headers=headers) as r:
                await r.read()
                return r.status

        async with RssProbe(gw.pid) as rss:
            sent = asyncio.gather(*(one() for _ in range(count)))
            await eventually(lambda: len(fake.requests) == seen + count, within=20)
            await asyncio.sleep(0.3)  # the scenario: the provider still thinking
            waiting_mb = (_status_kb(gw.pid, "VmRSS") - rss.baseline_kb) / 1024
            statuses = await sent
    upstream = fake.requests[-1].body
    observed = (
        f"{count} x {body_mb:.1f} MB to {model}: statuses {statuses}; RSS while the provider "
        f"thinks +{waiting_mb:.0f} MB ({waiting_mb / count / body_mb:.2f} bodies each), "
        f"peak +{rss.growth_mb:.0f} MB"
    )
    print(observed)
    assert statuses == [200] * count, observed
    assert isinstance(upstream, dict) and len(upstream["messages"]) == MESSAGES, observed
    assert waiting_mb < 2 * body_mb * count, observed
