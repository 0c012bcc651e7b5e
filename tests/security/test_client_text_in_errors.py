"""A provider's error that quotes the client's own text must not decide provider health.

Providers quote what the client sent in their 400s (OpenAI "Invalid value: '...'",
Anthropic "Input tag '...' found using 'type'", vLLM echoes the input). A client who
puts "exceeded your current quota" or "incorrect api key" there must get its own 400
back at once, with one upstream attempt, and leave every deployment of the model in
service for the other teams: no quota or auth verdict, no cooldown, no retry.

Each test runs a real gateway in front of the fake provider, with one model served
by two deployments (two keys) and a second team, and reads what happened from the
fake's records, ``GET /admin/deployments``, the logged events and the metrics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from structlog.testing import capture_logs

from gateway.routing.policyset import hash_key
from gateway.testing import Error, FakeProvider
from tests.harness import CLIENT_KEY, FAST_POLICY, Harness

ADMIN_KEY = "client-text-admin-key"
OTHER_KEY = "team-b-client-key"
KEYS = {"CT_KEY_A": "key-a", "CT_KEY_B": "key-b"}
TEXTS = ["exceeded your current quota", "incorrect api key", "rate limit", "overloaded"]
#: Categories whose verdict reaches beyond the request that failed.
HEALTH = {"quota_exhausted", "auth", "rate_limit", "server_overload", "server_error", "timeout"}
ROLES = "'system', 'assistant', 'user', 'function', 'tool', and 'developer'"

Make = Callable[[], Awaitable[Harness]]


def openai_invalid_value(text: str) -> Error:
    """OpenAI's real 400 for an unknown role, quoting it."""
    message = f"Invalid value: '{text}'. Supported values are: {ROLES}."
    body = {"error": {"message": message, "type": "invalid_request_error",
                      "param": "messages[0].role", "code": "invalid_value"}}  # fmt: skip
    return Error(400, body)


def anthropic_input_tag(text: str) -> Error:
    """Anthropic's real 400 for an unknown content block type, quoting it."""
    message = (
        f"messages.0.content.0: Input tag '{text}' found using 'type' does not match any of "
        "the expected tags: 'document', 'image', 'redacted_thinking', 'search_result', "
        "'text', 'thinking', 'tool_result', 'tool_use'"
    )
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": message},
            "request_id": "req_011"}  # fmt: skip
    return Error(400, body)


def vllm_500_echo(text: str) -> Error:
    """A vLLM 500 whose message is the failing input, echoed."""
    body = {"error": {"message": f"Internal error while handling role={text!r}",
                      "type": "InternalServerError", "param": None, "code": 500}}  # fmt: skip
    return Error(500, body)


def files(fake_url: str) -> dict[str, Any]:
    deployments = [{"provider": "claude-a", "name": "a"}, {"provider": "claude-b", "name": "b"}]
    return {
        "platform.yaml": {
            "providers": {
                "keys": {"api": "openai", "base_url": fake_url + "/v1",
                         "api_key_env": ["CT_KEY_A", "CT_KEY_B"]},
                "claude-a": {"api": "anthropic", "base_url": fake_url, "api_key_env": "CT_KEY_A"},
                "claude-b": {"api": "anthropic", "base_url": fake_url, "api_key_env": "CT_KEY_B"},
            },
            "models": {
                "gpt-dep": {"provider": "keys", "balance": "ordered"},
                "claude-dep": {"deployments": deployments, "balance": "ordered"},
            },
            "policies": {"fast": FAST_POLICY},
        },
        "teams/teams.yaml": {
            "teams": {
                team: {"keys": [hash_key(key)], "models": ["*-dep"],
                       "routes": [{"match": {"model": "*"}, "policy": "fast"}]}
                for team, key in (("team-a", CLIENT_KEY), ("team-b", OTHER_KEY))
            }
        },
    }  # fmt: skip


@pytest.fixture
def make(
    fake: FakeProvider, gateway_of: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Make:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)

    async def start() -> Harness:
        h: Harness = await gateway_of(files(fake.url), admin_key=ADMIN_KEY)
        return h

    return start


async def deployment_states(gw: Harness) -> dict[str, str]:
    """``GET /admin/deployments``: deployment name -> state ("up", "cooldown", "out", ...)."""
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    async with (
        aiohttp.ClientSession() as s,
        s.get(gw.url + "/admin/deployments", headers=admin) as r,
    ):
        assert r.status == 200
        body = json.loads(await r.text())
    return {
        d["deployment"]: d["state"]
        for model in body["models"].values()
        for d in model["deployments"]
    }


def health_verdicts(gw: Harness) -> dict[str, float]:
    """Upstream attempts counted under a category with an effect beyond one request."""
    found: dict[str, float] = {}
    for family in gw.metrics.registry.collect():
        for s in family.samples:
            category = s.labels.get("category") or s.labels.get("outcome")
            if s.name.endswith("_total") and category in HEALTH and s.value:
                found[f"{s.name}{{{category}}}"] = s.value
    return found


def keys_used(fake: FakeProvider) -> list[str]:
    return [r.key or "" for r in fake.requests]


async def other_team_is_served_by_the_first_deployment(
    gw: Harness, fake: FakeProvider, anthropic_format: bool
) -> None:
    fake.reset()  # the scripted errors left over, and the records
    if anthropic_format:
        other = anthropic.AsyncAnthropic(base_url=gw.url, api_key=OTHER_KEY, max_retries=0)
        async with other:
            raw = await other.messages.with_raw_response.create(
                model="claude-dep", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
            )
            assert (await raw.parse()).content
            headers = raw.headers
    else:
        other_oai = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=OTHER_KEY, max_retries=0)
        async with other_oai:
            raw_oai = await other_oai.chat.completions.with_raw_response.create(
                model="gpt-dep", messages=[{"role": "user", "content": "hi"}]
            )
            assert raw_oai.parse().choices[0].message.content
            headers = raw_oai.headers
    assert headers["x-gateway-attempts"] == "1"
    assert keys_used(fake) == ["key-a"]


@pytest.mark.parametrize("text", TEXTS)
async def test_openai_400_quoting_the_role_is_the_clients_alone(
    make: Make, fake: FakeProvider, text: str
) -> None:
    """A 400 ``invalid_value`` quoting the client's role: the client gets it back at once,
    one upstream attempt, both deployments stay up, no health verdict anywhere."""
    gw = await make()
    for _ in range(8):  # every deployment answers the same, however often it is asked
        fake.push(openai_invalid_value(text))
    client = gw.async_openai()
    started = time.monotonic()
    with capture_logs() as events, pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(
            model="gpt-dep",
            messages=[{"role": text, "content": "hi"}],  # type: ignore[list-item,misc]
        )
    elapsed = time.monotonic() - started
    assert caught.value.status_code == 400
    assert caught.value.code == "invalid_value" and f"'{text}'" in caught.value.message
    assert [r.body["messages"][0]["role"] for r in fake.requests] == [text]
    assert keys_used(fake) == ["key-a"]
    assert elapsed < 1.0
    assert [e["event"] for e in events if e["event"].startswith("deployment_")] == []
    assert not [e for e in events if e["event"] == "api_retry"]
    assert await deployment_states(gw) == {"keys#1": "up", "keys#2": "up", "a": "up", "b": "up"}
    assert health_verdicts(gw) == {}
    await other_team_is_served_by_the_first_deployment(gw, fake, anthropic_format=False)


@pytest.mark.parametrize("text", TEXTS)
async def test_anthropic_400_quoting_the_block_type_is_the_clients_alone(
    make: Make, fake: FakeProvider, text: str
) -> None:
    """The same with Anthropic's "Input tag '...' found using 'type'" 400, over the
    Anthropic SDK to an Anthropic-format model with two deployments."""
    gw = await make()
    for _ in range(8):
        fake.push(anthropic_input_tag(text))
    client = gw.async_anthropic()
    started = time.monotonic()
    with capture_logs() as events, pytest.raises(anthropic.BadRequestError) as caught:
        await client.messages.create(
            model="claude-dep",
            max_tokens=50,
            messages=[{"role": "user", "content": [{"type": text, "text": "hi"}]}],  # type: ignore[list-item,misc]
        )
    elapsed = time.monotonic() - started
    assert caught.value.status_code == 400
    assert f"Input tag '{text}'" in caught.value.message
    assert isinstance(caught.value.body, dict) and caught.value.body["type"] == "error"
    assert [r.body["messages"][0]["content"][0]["type"] for r in fake.requests] == [text]
    assert [r.headers["x-api-key"] for r in fake.requests] == ["key-a"]
    assert elapsed < 1.0
    assert [e["event"] for e in events if e["event"].startswith("deployment_")] == []
    assert await deployment_states(gw) == {"keys#1": "up", "keys#2": "up", "a": "up", "b": "up"}
    assert health_verdicts(gw) == {}
    await other_team_is_served_by_the_first_deployment(gw, fake, anthropic_format=True)


@pytest.mark.parametrize("text", ["exceeded your current quota", "incorrect api key"])
async def test_a_500_echoing_the_input_is_not_a_quota_or_auth_verdict(
    make: Make, fake: FakeProvider, text: str
) -> None:
    """A vLLM-style 500 echoing the client's text stays a server error: the sibling takes
    the retry and answers, the deployment that failed is not taken out for an hour."""
    gw = await make()
    fake.push(vllm_500_echo(text))
    with capture_logs() as events:
        reply = await gw.async_openai().chat.completions.create(
            model="gpt-dep",
            messages=[{"role": "user", "content": text}],
        )
    assert reply.choices[0].message.content
    assert keys_used(fake) == ["key-a", "key-b"]
    assert [e["event"] for e in events if e["event"].startswith("deployment_")] == []
    assert (await deployment_states(gw))["keys#1"] == "up"
    verdicts = health_verdicts(gw)
    assert not [k for k in verdicts if "quota" in k or "auth" in k], verdicts
    await other_team_is_served_by_the_first_deployment(gw, fake, anthropic_format=False)
