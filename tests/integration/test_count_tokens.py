"""``POST /v1/messages/count_tokens`` through the gateway, driven by the anthropic SDK:
the provider's own count for an Anthropic model, the gateway's estimate for the others."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import anthropic
import orjson
import pytest

from gateway.testing import Error, FakeProvider
from gateway.testing.conversation import parse_messages
from tests.harness import CLIENT_KEY, PROVIDER_KEY, Harness
from tests.integration.test_anthropic import WEATHER
from tests.log_sink import Sink

SYSTEM = "You are a careful assistant who answers in one sentence."
#: Claude Code's request shape: system as blocks (one cached), its tools.
CLAUDE_CODE: dict[str, Any] = {
    "system": [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {
            "type": "text",
            "text": "Use the tools to answer; prefer Read over Bash cat.",
            "cache_control": {"type": "ephemeral"},
        },
    ],
    "tools": [
        {
            "name": "Bash",
            "description": "Executes a given bash command",
            "input_schema": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
        {
            "name": "Read",
            "description": "Reads a file from the local filesystem",
            "input_schema": {
                "type": "object",
                "properties": {"file_path": {"type": "string"}},
                "required": ["file_path"],
            },
        },
    ],
}
MESSAGES: list[Any] = [
    {"role": "user", "content": "What is the weather in Lisbon today? " * 10},
    {"role": "assistant", "content": "Let me look that up."},
    {"role": "user", "content": "Thanks, and tomorrow?"},
]


async def test_anthropic_model_counted_by_the_provider(gw: Harness, fake: FakeProvider) -> None:
    """An Anthropic-format model's count is the provider's own, from its count endpoint,
    asked with the provider's key and the client's anthropic-version and anthropic-beta."""
    client = gw.async_anthropic()
    raw = await client.messages.with_raw_response.count_tokens(
        model="claude-test",
        messages=MESSAGES,
        system=SYSTEM,
        tools=[WEATHER],  # type: ignore[list-item]
        extra_headers={"anthropic-beta": "token-counting-2024-11-01"},
    )
    counted = await raw.parse()
    (seen,) = fake.requests
    assert seen.path == "/v1/messages/count_tokens"
    assert seen.headers["x-api-key"] == PROVIDER_KEY and CLIENT_KEY not in str(seen.headers)
    assert seen.headers["anthropic-version"] and seen.headers["anthropic-beta"] == (
        "token-counting-2024-11-01"
    )
    assert seen.body["model"] == "claude-test" and seen.body["system"] == SYSTEM
    assert counted.input_tokens == parse_messages(seen.body).prompt_tokens > 100
    assert "x-gateway-estimate" not in raw.headers
    assert gw.metric(
        "llm_gateway_upstream_attempts_total",
        provider="fake-anthropic",
        model="claude-test",
        category="ok",
    ) == 1  # fmt: skip


async def test_openai_model_estimated(gw: Harness, fake: FakeProvider) -> None:
    """An OpenAI-format model has no count endpoint: the gateway's estimate, said in
    ``x-gateway-estimate: true``, is ceil(chars / 4) plus 4 per message, with no upstream call."""
    client = gw.async_anthropic()
    raw = await client.messages.with_raw_response.count_tokens(
        model="gpt-test",
        messages=MESSAGES,
        system=SYSTEM,
        tools=[WEATHER],  # type: ignore[list-item]
    )
    counted = await raw.parse()
    assert raw.headers["x-gateway-estimate"] == "true"
    chars = len(SYSTEM) + sum(len(m["content"]) for m in MESSAGES)
    chars += len(orjson.dumps([WEATHER]))  # the tools' compact JSON, in bytes
    assert counted.input_tokens == math.ceil(chars / 4) + 4 * len(MESSAGES)
    assert not fake.requests


def _rate_limited_ms(ms: int) -> Error:
    """Anthropic's 429 carrying the wait in ``retry-after-ms`` (as Azure's Claude sends it)."""
    limited = Error.anthropic_rate_limit()
    return Error(limited.status, limited.body, {**limited.headers, "retry-after-ms": str(ms)})


@pytest.mark.parametrize(
    "limited",
    [Error.anthropic_rate_limit(retry_after=0.05), _rate_limited_ms(50)],
    ids=["retry-after", "retry-after-ms"],
)
async def test_rate_limited_count_retried(gw: Harness, fake: FakeProvider, limited: Error) -> None:
    """A 429 on a one-deployment model's count is retried after the provider's wait
    (``retry-after`` or ``retry-after-ms``); the second attempt answers."""
    fake.push(limited, model="claude-test")
    client = gw.async_anthropic()
    raw = await client.messages.with_raw_response.count_tokens(
        model="claude-test", messages=MESSAGES
    )
    assert (await raw.parse()).input_tokens > 0
    assert raw.headers["x-gateway-attempts"] == "2"
    assert [r.path for r in fake.requests] == ["/v1/messages/count_tokens"] * 2


async def test_provider_error_in_anthropic_shape(gw: Harness, fake: FakeProvider) -> None:
    """A count the provider refuses (400) reaches the client as Anthropic's error, not retried."""
    fake.push(Error.bad_request("messages: roles must alternate"), model="claude-test")
    client = gw.async_anthropic()
    with pytest.raises(anthropic.BadRequestError) as e:
        await client.messages.count_tokens(model="claude-test", messages=MESSAGES)
    assert e.value.body["error"]["message"] == "messages: roles must alternate"  # type: ignore[index]
    assert len(fake.requests) == 1


async def test_unknown_model_404(gw: Harness) -> None:
    """An unknown model is a 404 in Anthropic's error shape."""
    client = gw.async_anthropic()
    with pytest.raises(anthropic.NotFoundError) as e:
        await client.messages.count_tokens(model="no-such-model", messages=MESSAGES)
    assert e.value.body["type"] == "error"  # type: ignore[index]
    assert e.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


async def test_model_not_allowed_403(gw: Harness, fake: FakeProvider) -> None:
    """A model the team may not use is a 403 in Anthropic's shape, with no upstream call."""
    client = gw.async_anthropic()
    with pytest.raises(anthropic.PermissionDeniedError) as e:
        await client.messages.count_tokens(model="forbidden-model", messages=MESSAGES)
    assert e.value.body["error"]["type"] == "permission_error"  # type: ignore[index]
    assert not fake.requests


@pytest.mark.parametrize(
    ("body", "param"),
    [(b"{not json", None), (b'{"model": "claude-test"}', "messages")],
    ids=["bad-json", "no-messages"],
)
async def test_bad_request_400(gw: Harness, body: bytes, param: str | None) -> None:
    """Bad JSON or no messages: a 400 in Anthropic's shape, before any upstream call."""
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            gw.url + "/v1/messages/count_tokens", data=body, headers={"x-api-key": CLIENT_KEY}
        ) as r,
    ):
        assert r.status == 400
        data = await r.json()
    assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error"
    assert param is None or param in data["error"]["message"]
    assert not gw.fake.requests


async def test_count_spends_no_team_tokens(
    make_gateway: Callable[..., Awaitable[Harness]], fake: FakeProvider
) -> None:
    """Counts of prompts far over the team's tokens_per_minute take none of it: a message
    right after them is still admitted."""
    gw = await make_gateway(limits={"tokens_per_minute": 200})
    client = gw.async_anthropic()
    big = [{"role": "user", "content": "word " * 2000}]
    for model in ("claude-test", "gpt-test"):
        assert (await client.messages.count_tokens(model=model, messages=big)).input_tokens > 2000
    reply = await client.messages.create(model="claude-test", max_tokens=20, messages=MESSAGES)
    assert reply.content


async def test_count_in_the_access_log(gw: Harness, log_sink: Sink) -> None:
    """A count is one request_completed line, with its model, status and attempts."""
    log_sink.configure()
    client = gw.async_anthropic()
    await client.messages.count_tokens(model="claude-test", messages=MESSAGES)
    await client.messages.count_tokens(model="gpt-test", messages=MESSAGES)
    done = [e for e in log_sink.lines() if e.get("event") == "request_completed"]
    assert [(e["model"], e["status"], e["attempts"]) for e in done] == [
        ("claude-test", 200, 1),
        ("gpt-test", 200, 0),
    ]
    assert gw.metric("llm_gateway_requests_total", team="team-a", model="gpt-test", status="200")


async def test_sibling_without_count_estimates(
    make_gateway: Callable[..., Awaitable[Harness]], fake: FakeProvider
) -> None:
    """A model served by Anthropic and an OpenAI-format sibling: with Anthropic rate-limited,
    the sibling answers the count at once with the estimate, marked as one."""
    mixed = {
        "deployments": [
            {"provider": "fake-anthropic", "upstream_model": "claude-test"},
            {"provider": "fake", "upstream_model": "gpt-test"},
        ],
        "balance": "ordered",
    }
    gw = await make_gateway(models={"claude-mixed": mixed})
    fake.push(Error.anthropic_rate_limit(retry_after=30), model="claude-test")
    client = gw.async_anthropic()
    raw = await client.messages.with_raw_response.count_tokens(
        model="claude-mixed", messages=MESSAGES
    )
    chars = sum(len(m["content"]) for m in MESSAGES)
    assert (await raw.parse()).input_tokens == math.ceil(chars / 4) + 4 * len(MESSAGES)
    assert raw.headers["x-gateway-estimate"] == "true"
    assert raw.headers["x-gateway-attempts"] == "2"
    assert [r.path for r in fake.requests] == ["/v1/messages/count_tokens"]


async def test_rate_limited_deployment_hands_count_to_sibling(
    make_gateway: Callable[..., Awaitable[Harness]], fake: FakeProvider
) -> None:
    """Two Anthropic deployments: a 429 with a long ``retry-after-ms`` on the first sends
    the count to the second at once, and the client gets the second's count."""
    pair = {
        "deployments": [
            {"name": "first", "provider": "fake-anthropic", "upstream_model": "claude-test"},
            {"name": "second", "provider": "fake-anthropic", "upstream_model": "claude-backup"},
        ],
        "balance": "ordered",
    }
    gw = await make_gateway(models={"claude-pair": pair})
    fake.push(_rate_limited_ms(30_000), model="claude-test")
    client = gw.async_anthropic()
    started = time.monotonic()
    raw = await client.messages.with_raw_response.count_tokens(
        model="claude-pair", messages=MESSAGES
    )
    counted = await raw.parse()
    assert time.monotonic() - started < 1.0
    first, second = fake.requests
    assert [first.model, second.model] == ["claude-test", "claude-backup"]
    assert [first.path, second.path] == ["/v1/messages/count_tokens"] * 2
    assert counted.input_tokens == parse_messages(second.body).prompt_tokens > 0
    assert raw.headers["x-gateway-attempts"] == "2" and "x-gateway-estimate" not in raw.headers


async def test_claude_code_shape_counted(gw: Harness, fake: FakeProvider) -> None:
    """Claude Code's count (``?beta=true``, its betas in ``anthropic-beta``, system as
    blocks, tools) reaches the provider as sent and its count comes back; the same
    shape on a translated model is estimated."""
    client = gw.async_anthropic()
    betas = ["claude-code-20250219", "interleaved-thinking-2025-05-14"]
    shape: dict[str, Any] = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "list the files"}]}],
        "system": CLAUDE_CODE["system"],
        "tools": CLAUDE_CODE["tools"],
        "betas": betas,
        "extra_query": {"beta": "true"},  # as Claude Code's (TypeScript) SDK sends it
    }
    counted = await client.beta.messages.count_tokens(model="claude-test", **shape)
    (seen,) = fake.requests
    assert seen.path == "/v1/messages/count_tokens" and seen.query == {"beta": "true"}
    assert seen.headers["anthropic-beta"].split(",")[:2] == betas
    assert seen.body["system"] == CLAUDE_CODE["system"]
    assert seen.body["tools"] == CLAUDE_CODE["tools"]
    assert counted.input_tokens == parse_messages(seen.body).prompt_tokens > 0
    raw = await client.beta.messages.with_raw_response.count_tokens(model="gpt-test", **shape)
    assert raw.headers["x-gateway-estimate"] == "true"
    assert (await raw.parse()).input_tokens > 0 and len(fake.requests) == 1


async def test_count_never_estimated_when_every_deployment_counts(
    gw: Harness, fake: FakeProvider
) -> None:
    """A model whose only deployment counts and keeps answering 429: after the retries
    the client gets Anthropic's 429, not an estimate."""
    for _ in range(4):  # the first attempt and the test policy's 3 retries
        fake.push(_rate_limited_ms(10), model="claude-test")
    client = gw.async_anthropic()
    with pytest.raises(anthropic.RateLimitError) as e:
        await client.messages.count_tokens(model="claude-test", messages=MESSAGES)
    assert "x-gateway-estimate" not in e.value.response.headers
    assert e.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert [r.path for r in fake.requests] == ["/v1/messages/count_tokens"] * 4
