"""What a large request costs in memory while the provider thinks, and at its peak.

A real gateway process (``python -m gateway serve``) in front of the fake provider, whose
answer is held back; 1 or 4 requests at once: a 31.5 MB Chat request (301 messages),
translated to an Anthropic-format model or passed on to an OpenAI-format one, and a 31.5
MB Messages request holding one base64 image, translated for an OpenAI-format model. The
growth of the gateway's RSS is read from ``/proc`` once every request has reached the
provider (what it holds for the whole wait) and sampled throughout (the peak). The
gateway keeps the client's decoded body (retries, fallbacks, compaction and continuation
read it) and lets go of everything else: the raw bytes once parsed, an attempt's
translated body once encoded, the encoded body once sent; a long string (the image) is
decoded and encoded without a copy of its own (gateway/formats/body_parts.py).
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import pytest

from gateway.testing import FakeProvider
from gateway.testing.script import SlowFirstByte
from tests.edges.support import AUTH, MiB, Process, RssProbe, _status_kb, warm_up
from tests.waiting import eventually

HOLD = 1.5  # seconds the provider thinks
POLICY = {"timeouts": {"first_byte": "10s", "total": "30s"}}
MESSAGES = 301  # user first and last, alternating: no two messages merge in translation


def large_chat(model: str, size: int = int(31.5 * MiB)) -> bytes:
    """A Chat request of ``size`` bytes: a long conversation, alternating roles."""
    piece = "x" * (size // MESSAGES - 60)
    messages = [
        {"role": "assistant" if i % 2 else "user", "content": f"{i} {piece}"}
        for i in range(MESSAGES)
    ]
    return json.dumps({"model": model, "messages": messages, "max_tokens": 10}).encode()


@dataclass
class Held:
    """``count`` requests held by the provider: their answers' statuses, the RSS growth
    while the provider thinks and at the peak (MB), the size of one body (MB)."""

    statuses: list[int]
    waiting_mb: float
    peak_mb: float
    body_mb: float


async def held(
    gw: Process, fake: FakeProvider, path: str, body: bytes, count: int, hold: float = HOLD
) -> Held:
    """Send ``count`` copies of ``body`` at once to ``path``; the provider holds each
    answer ``hold`` seconds. RSS is read once every request reached the provider."""
    await warm_up(gw.url)
    for _ in range(count):
        fake.push(SlowFirstByte(hold))
    seen = len(fake.requests)
    async with aiohttp.ClientSession() as s:

        async def one() -> int:
            headers = {**AUTH, "content-type": "application/json"}
            data = io.BytesIO(body)  # the client's copy: aiohttp warns about a large bytes body
            async with s.post(gw.url + path, data=data, headers=headers) as r:
                await r.read()
                return r.status

        async with RssProbe(gw.pid) as rss:
            sent = asyncio.gather(*(one() for _ in range(count)))
            await eventually(lambda: len(fake.requests) == seen + count, within=20)
            await asyncio.sleep(0.3)  # the scenario: the provider still thinking
            waiting_mb = (_status_kb(gw.pid, "VmRSS") - rss.baseline_kb) / 1024
            statuses = await sent
    return Held(statuses, waiting_mb, rss.growth_mb, len(body) / MiB)


@pytest.mark.parametrize("count", [1, 4])
@pytest.mark.parametrize("model", ["claude-test", "gpt-test"])
async def test_a_large_request_holds_one_copy_while_upstream_thinks(
    gateway_process: Callable[..., Awaitable[Process]],
    fake: FakeProvider,
    model: str,
    count: int,
) -> None:
    """RSS growth during the wait: under 2 copies of the body per request (it was 2.6-3)."""
    gw = await gateway_process(fake.url, POLICY)
    h = await held(gw, fake, "/v1/chat/completions", large_chat(model), count)
    upstream = fake.requests[-1].body
    observed = (
        f"{count} x {h.body_mb:.1f} MB to {model}: statuses {h.statuses}; RSS while the "
        f"provider thinks +{h.waiting_mb:.0f} MB ({h.waiting_mb / count / h.body_mb:.2f} "
        f"bodies each), peak +{h.peak_mb:.0f} MB"
    )
    print(observed)
    assert h.statuses == [200] * count, observed
    assert isinstance(upstream, dict) and len(upstream["messages"]) == MESSAGES, observed
    assert h.waiting_mb < 2 * h.body_mb * count, observed


IMAGE = int(31.5 * MiB) - 400  # characters of the image's base64


def large_image(model: str) -> bytes:
    """A Messages request of 31.5 MB, most of it one base64 image."""
    data = "iVBORw0KGgo" + "A" * (IMAGE - 11)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    content = [{"type": "text", "text": "what is in this picture?"}, image]
    body = {"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": content}]}
    return json.dumps(body).encode()


@pytest.mark.parametrize("count", [1, 4])
async def test_translated_images_peak_well_under_the_bound(
    gateway_process: Callable[..., Awaitable[Process]], fake: FakeProvider, count: int
) -> None:
    """31.5 MB image requests on /v1/messages, translated for an OpenAI-format model that
    holds them 3 s: the peak stays under 2.5 bodies for one and under 250 MB for four (the
    bound is 300 MB; it was 3 bodies and 305-349 MB), and while the provider thinks the
    gateway holds about one body each (it was 2)."""
    gw = await gateway_process(fake.url, POLICY)
    h = await held(gw, fake, "/v1/messages", large_image("gpt-test"), count, hold=3.0)
    observed = (
        f"{count} x {h.body_mb:.1f} MB images to gpt-test: statuses {h.statuses}; RSS while "
        f"the provider thinks +{h.waiting_mb:.0f} MB, peak +{h.peak_mb:.0f} MB "
        f"({h.peak_mb / count / h.body_mb:.2f} bodies each)"
    )
    print(observed)
    assert h.statuses == [200] * count, observed
    (_, part) = fake.requests[-1].body["messages"][0]["content"]
    url = part["image_url"]["url"]  # the image arrived whole, as its data URL
    assert url.startswith("data:image/png;base64,iVBORw0KGgoAAA") and len(url) == 22 + IMAGE
    assert h.waiting_mb < 1.5 * h.body_mb * count, observed
    assert h.peak_mb < (2.5 * h.body_mb if count == 1 else 250), observed
