"""Layer 1 over real sockets: failures classified and retried the right way, seen by the SDK."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

from gateway.testing import Error, FakeProvider, Reset
from tests.harness import Harness

MESSAGES = [{"role": "user", "content": "Say hello"}]
NO_TURN = {"turn_retry": {"max": 0}}


async def ask(gw: Harness, **kw: object) -> openai.types.chat.ChatCompletion:
    raw = await gw.async_openai(**kw).chat.completions.with_raw_response.create(  # type: ignore[arg-type]
        model="gpt-test", messages=MESSAGES
    )
    ask.headers = raw.headers  # type: ignore[attr-defined]
    return raw.parse()


async def test_429_retry_after_then_200(gw: Harness, fake: FakeProvider) -> None:
    """A 429 with Retry-After is waited out (at least the hint) and the client sees one answer."""
    fake.push(Error.openai_rate_limit(retry_after=0.3))
    t = time.monotonic()
    c = await ask(gw)
    assert time.monotonic() - t >= 0.3
    assert c.choices[0].message.content
    assert ask.headers["x-gateway-attempts"] == "2"  # type: ignore[attr-defined]
    assert ask.headers["x-gateway-recovery"] == "retry"  # type: ignore[attr-defined]
    assert len(fake.requests) == 2
    assert gw.metric("llm_gateway_retries_total", team="team-a", model="gpt-test",
                     category="rate_limit") == 1  # fmt: skip
    assert gw.metric("llm_gateway_upstream_attempts_total", provider="fake", model="gpt-test",
                     category="rate_limit") == 1  # fmt: skip


async def test_retry_after_ms_wins(gw: Harness, fake: FakeProvider) -> None:
    """retry-after-ms is honoured (a precise sub-second wait)."""
    fake.push(Error.openai_rate_limit(retry_after_ms=250))
    t = time.monotonic()
    await ask(gw)
    elapsed = time.monotonic() - t
    assert 0.25 <= elapsed < 1.0
    assert len(fake.requests) == 2


async def test_wait_hinted_in_message(gw: Harness, fake: FakeProvider) -> None:
    """With no header, a wait hinted in the message ("try again in 0.3s") is honoured."""
    fake.push(Error.openai_rate_limit(message="Rate limit reached. Please try again in 0.3s."))
    t = time.monotonic()
    await ask(gw)
    assert time.monotonic() - t >= 0.3
    assert len(fake.requests) == 2


async def test_chinese_hint_and_zhipu_rate_limit(gw: Harness, fake: FakeProvider) -> None:
    """A Zhipu 1302 concurrency error (Chinese message) is a rate limit and is retried."""
    fake.push(Error.zhipu(1302))
    c = await ask(gw)
    assert c.choices[0].message.content
    assert len(fake.requests) == 2


async def test_503_then_200(gw: Harness, fake: FakeProvider) -> None:
    """A 503 overload is retried with transient backoff."""
    fake.push(Error.overloaded_503())
    await ask(gw)
    assert ask.headers["x-gateway-attempts"] == "2"  # type: ignore[attr-defined]
    assert gw.metric("llm_gateway_upstream_attempts_total", provider="fake", model="gpt-test",
                     category="server_overload") == 1  # fmt: skip


async def test_connection_reset_then_200(gw: Harness, fake: FakeProvider) -> None:
    """A reset before any response is a connection failure, retried."""
    fake.push(Reset())
    await ask(gw)
    assert gw.metric("llm_gateway_upstream_attempts_total", provider="fake", model="gpt-test",
                     category="connection") == 1  # fmt: skip


async def test_upstream_401_is_502_after_one_attempt(gw: Harness, fake: FakeProvider) -> None:
    """The provider refusing the gateway's key is a 502 upstream_auth_error, never retried."""
    fake.push(Error.unauthorized())
    with pytest.raises(openai.APIStatusError) as exc:
        await ask(gw)
    assert exc.value.status_code == 502
    assert exc.value.type == "upstream_auth_error"
    assert "gateway configuration problem" in exc.value.message
    assert exc.value.response.headers["x-should-retry"] == "false"
    assert len(fake.requests) == 1


async def test_400_passed_through_after_one_attempt(gw: Harness, fake: FakeProvider) -> None:
    """An invalid request comes back as the provider said it, after exactly one attempt."""
    fake.push(Error.bad_request("'temperature' must be between 0 and 2"))
    with pytest.raises(openai.BadRequestError) as exc:
        await ask(gw)
    assert "'temperature' must be between 0 and 2" in exc.value.message
    assert exc.value.response.headers["x-should-retry"] == "false"
    assert len(fake.requests) == 1


async def test_insufficient_quota_not_retried(gw: Harness, fake: FakeProvider) -> None:
    """A 429 insufficient_quota is not a rate limit: no retry, x-should-retry false."""
    fake.push(Error.openai_quota())
    with pytest.raises(openai.RateLimitError) as exc:
        await ask(gw)
    assert exc.value.code == "insufficient_quota"
    assert exc.value.response.headers["x-should-retry"] == "false"
    assert len(fake.requests) == 1


async def test_client_deadline_stops_long_wait(gw: Harness, fake: FakeProvider) -> None:
    """A 1 s client timeout against Retry-After 30 fails fast, telling the SDK not to retry."""
    fake.push(Error.openai_rate_limit(retry_after=30))
    client = gw.async_openai(timeout=1.0)
    t = time.monotonic()
    with pytest.raises(openai.RateLimitError) as exc:
        await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert time.monotonic() - t < 2.0
    headers = exc.value.response.headers
    assert headers["x-should-retry"] == "false"
    assert headers["retry-after"] == "30"
    assert len(fake.requests) == 1


async def test_gateway_timeout_header(gw: Harness, fake: FakeProvider) -> None:
    """x-gateway-timeout shortens the deadline just like the SDK's own timeout header."""
    fake.push(Error.openai_rate_limit(retry_after=5))
    client = gw.async_openai(default_headers={"x-gateway-timeout": "0.5"})
    t = time.monotonic()
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert time.monotonic() - t < 1.0


async def test_max_retries_gives_max_plus_one_attempts(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """max_retries: 3 on a model that always fails means exactly 4 upstream attempts."""
    gw: Harness = await make_gateway(policy={**NO_TURN, "retry": {"max_retries": 3}})
    fake.script("fake-model", [Error.openai_server(500)] * 10)
    with pytest.raises(openai.InternalServerError) as exc:
        await ask(gw)
    assert len(fake.requests) == 4
    assert exc.value.status_code == 502  # the provider's 500, after recovery: the gateway's 502
    assert "The server had an error" in exc.value.message  # the provider's body is kept
    assert exc.value.response.headers["x-gateway-attempts"] == "4"
    assert exc.value.response.headers["x-should-retry"] == "false"


async def test_turn_retry_after_attempts_give_up(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """When retries run out on a transient error, the turn retry waits and tries once more."""
    gw: Harness = await make_gateway(policy={"retry": {"max_retries": 1}})
    fake.script("fake-model", [Error.openai_server(500)] * 2)
    c = await ask(gw)
    assert c.choices[0].message.content
    assert len(fake.requests) == 3


async def test_retry_budget_stops_a_retry_storm(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """With a budget of 0 retries beyond traffic, failures are returned instead of retried."""
    gw: Harness = await make_gateway(
        policy={**NO_TURN, "retry": {"budget": {"ratio": 0, "min_per_second": 0}}}
    )
    fake.push(Error.openai_server(500))
    with pytest.raises(openai.InternalServerError):
        await ask(gw)
    assert len(fake.requests) == 1
    assert gw.metric("llm_gateway_retry_budget_exhausted_total", team="team-a") == 1


async def test_exhausted_overload_is_503(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """An overload that outlasts recovery reaches the client as 503, never a raw 529."""
    gw: Harness = await make_gateway(policy={**NO_TURN, "retry": {"max_retries": 1}})
    fake.script("claude-test", [Error.anthropic_overloaded()] * 3)
    with pytest.raises(anthropic.APIStatusError) as exc:
        await gw.async_anthropic().messages.create(
            model="claude-test", max_tokens=10, messages=MESSAGES
        )
    assert exc.value.status_code == 503
    assert exc.value.response.headers["x-should-retry"] == "false"
