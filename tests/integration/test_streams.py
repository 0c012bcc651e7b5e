"""Honest streams: recovered invisibly before the first byte, never cut silently after it."""

from __future__ import annotations

import asyncio
import gc
import time
import types

import aiohttp
import anthropic
import openai
import pytest

from gateway.live.stream_head import OpenStream
from gateway.testing import (
    CutAfter,
    Delay,
    Error,
    ErrorEventAfter,
    FakeProvider,
    HeadersThenSilence,
    MalformedEventAt,
    NoDone,
    StallAfter,
)
from tests.harness import CLIENT_KEY, Harness

MESSAGES = [{"role": "user", "content": "Say hello"}]


async def chat_text(gw: Harness, model: str = "gpt-test") -> str:
    stream = await gw.async_openai().chat.completions.create(
        model=model, messages=MESSAGES, stream=True
    )
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


async def test_reset_mid_stream_makes_openai_sdk_raise(gw: Harness, fake: FakeProvider) -> None:
    """A reset after 3 chunks ends the client stream with an error event: the SDK raises."""
    fake.push(CutAfter(3))
    with pytest.raises(openai.APIError) as exc:
        await chat_text(gw)
    assert "interrupted" in str(exc.value)


async def test_reset_mid_stream_responses_api(gw: Harness, fake: FakeProvider) -> None:
    """The Responses API stream ends in an error event the SDK raises on."""
    fake.push(CutAfter(2))
    stream = await gw.async_openai().responses.create(model="gpt-test", input="hi", stream=True)
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass


async def test_reset_mid_stream_anthropic(gw: Harness, fake: FakeProvider) -> None:
    """An Anthropic stream cut mid-way ends with `event: error`: the SDK raises."""
    fake.push(CutAfter(2))
    client = gw.async_anthropic()
    with pytest.raises(anthropic.APIStatusError) as exc:
        async with client.messages.stream(
            model="claude-test", max_tokens=100, messages=MESSAGES
        ) as stream:
            async for _ in stream.text_stream:
                pass
    assert "interrupted" in str(exc.value)


async def test_upstream_error_event_is_relayed_as_error(gw: Harness, fake: FakeProvider) -> None:
    """An in-stream error event from upstream becomes the gateway's error event."""
    fake.push(ErrorEventAfter(2))
    with pytest.raises(openai.APIError):
        await chat_text(gw)


async def test_keepalives_during_a_long_wait(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """A wait longer than stream.keepalive commits 200 and sends SSE comments, then the answer."""
    gw: Harness = await make_gateway(policy={"stream": {"keepalive": "200ms"}})
    fake.push(Error.openai_rate_limit(retry_after_ms=700))
    seen: list[tuple[float, bytes]] = []
    t = time.monotonic()
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            gw.url + "/v1/chat/completions",
            json={"model": "gpt-test", "messages": MESSAGES, "stream": True},
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
        ) as r,
    ):
        assert r.status == 200
        async for line in r.content:
            seen.append((time.monotonic() - t, line))
    comments = [(at, line) for at, line in seen if line.startswith(b":")]
    first = comments[0][1].decode()
    assert first.startswith(": gateway api_retry attempt=2 wait_seconds=0.")  # 0.7 s + jitter
    assert first.rstrip().endswith("category=rate_limit")
    assert comments[0][0] < 0.3
    assert any(line == b": keepalive\n" for _, line in comments)
    assert seen[-1][1].strip() in (b"data: [DONE]", b"")
    assert b"[DONE]" in b"".join(line for _, line in seen)


async def test_client_leaving_cancels_upstream(gw: Harness, fake: FakeProvider) -> None:
    """A client that disconnects mid-stream closes the upstream connection within 1 s."""
    fake.push(Delay(0.2))
    client = gw.async_openai()
    stream = await client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
    async for _ in stream:
        break
    await stream.close()
    await asyncio.wait_for(fake.disconnected.wait(), timeout=1.0)
    assert fake.disconnects == 1


async def test_stream_without_done_ends_promptly(gw: Harness, fake: FakeProvider) -> None:
    """A stream that ends after its finish chunk but without [DONE] is complete, and prompt."""
    fake.push(NoDone())
    t = time.monotonic()
    text = await chat_text(gw)
    assert text.startswith("Hello! This is the fake provider")
    assert time.monotonic() - t < 1.0


async def test_malformed_event_does_not_end_stream(gw: Harness, fake: FakeProvider) -> None:
    """An undecodable event in the middle is dropped and counted; the answer is whole."""
    fake.push(MalformedEventAt(2))
    text = await chat_text(gw)
    assert text == f"Hello! This is the fake provider answering model {'fake-model'}."
    assert gw.metric("llm_gateway_stream_events_dropped_total", model="gpt-test") == 1


async def test_silent_model_moves_to_fallback(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """A model that sends headers and then nothing moves to the fallback after first_byte."""
    gw: Harness = await make_gateway(
        policy={"timeouts": {"first_byte": "300ms"}, "fallback": {"chain": ["gpt-backup"]}}
    )
    fake.push(HeadersThenSilence(), model="fake-model")
    t = time.monotonic()
    text = await chat_text(gw)
    assert "gpt-backup" in text
    assert time.monotonic() - t < 1.5
    assert [r.model for r in fake.requests] == ["fake-model", "gpt-backup"]


async def test_stall_mid_stream_times_out_with_error(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """A stream that stalls longer than stream_idle ends with an error event, not a hang."""
    gw: Harness = await make_gateway(policy={"timeouts": {"stream_idle": "300ms"}})
    fake.push(StallAfter(2))
    t = time.monotonic()
    with pytest.raises(openai.APIError):
        await chat_text(gw)
    assert time.monotonic() - t < 1.5


async def test_429_before_first_event_absorbed_responses(gw: Harness, fake: FakeProvider) -> None:
    """A 429 before the first event of a Responses stream is retried invisibly."""
    fake.push(Error.openai_rate_limit(retry_after_ms=100))
    stream = await gw.async_openai().responses.create(model="gpt-test", input="hi", stream=True)
    kinds = [e.type async for e in stream]
    assert kinds[-1] == "response.completed"
    assert len(fake.requests) == 2


async def test_error_as_first_event_is_retried(gw: Harness, fake: FakeProvider) -> None:
    """An error event before any content is a failed attempt, retried before the first byte."""
    fake.push(ErrorEventAfter(0))
    text = await chat_text(gw)
    assert text.startswith("Hello!")
    assert len(fake.requests) == 2


def _holders_of(size: int) -> list[str]:
    """The gateway coroutines (not the fake provider's) whose frames hold a bytes object of
    ``size`` bytes."""
    found = []
    for obj in gc.get_objects():
        if not isinstance(obj, types.CoroutineType):
            continue
        code = obj.cr_code
        if "/gateway/" not in code.co_filename or "/testing/" in code.co_filename:
            continue
        if any(type(r) is bytes and len(r) == size for r in gc.get_referents(obj)):
            found.append(code.co_qualname)
    return found


async def test_a_stream_does_not_keep_the_raw_request(gw: Harness, fake: FakeProvider) -> None:
    """While a stream is relayed, no gateway frame holds the client's request bytes (the
    decoded body is what recovery reads; a prompt runs to megabytes, and a stream lasts),
    and the first events, decoded when the attempt was peeked, are not kept."""
    fake.push(StallAfter(2))
    raw = ('{"model":"gpt-test","stream":true,"messages":[{"role":"user","content":"'
           + "hello " * 20000 + '"}]}').encode()  # fmt: skip
    headers = {"authorization": f"Bearer {CLIENT_KEY}", "content-type": "application/json"}
    async with (
        aiohttp.ClientSession() as s,
        s.post(gw.url + "/v1/chat/completions", data=raw, headers=headers) as r,
    ):
        assert r.status == 200
        events = 0
        async for line in r.content:
            events += line.startswith(b"data: {")
            if events == 2:
                break
        assert events == 2  # the stream is open and relaying
        assert _holders_of(len(raw)) == []
        # nor the first events, decoded to decide the attempt: relayed, they are let go
        opened = [o for o in gc.get_objects() if isinstance(o, OpenStream)]
        assert opened and all(o.head == [] for o in opened)


async def test_an_error_as_every_attempts_first_event_gets_the_gateways_own_error(
    gw: Harness, fake: FakeProvider
) -> None:
    """When every attempt's stream opens with the provider's overload event, the client
    gets the gateway's 502 in its format (there is no HTTP answer to pass on), never a
    status 0 line with the raw event as its body."""
    for _ in range(8):
        fake.push(ErrorEventAfter(0))
    client = gw.async_anthropic()
    with pytest.raises(anthropic.APIStatusError) as caught:
        async with client.messages.stream(
            model="claude-test", max_tokens=100, messages=MESSAGES
        ) as stream:
            async for _ in stream:
                pass
    assert caught.value.status_code == 502
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "overloaded_error"
