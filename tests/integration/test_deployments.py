"""Deployments on the wire (docs/recovery.md, Deployments): one model, several keys and
upstreams.

The fake provider answers every key, and is scripted per key where a test makes one
key fail (``fake.push(..., key="key-a")``); which key a request carried shows in its
``authorization`` header, which upstream in its model. A rate limit on one key is
absorbed by the other at once; quota and auth failures are invisible to clients; the
fallback chain starts only when no deployment can serve.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from structlog.testing import capture_logs

from gateway.routing.policyset import hash_key
from gateway.simulate import Scenario, run
from gateway.testing import Error, FakeProvider, SlowFirstByte, Success
from tests.harness import CLIENT_KEY, FAST_POLICY, Harness
from tests.waiting import eventually

ADMIN_KEY = "deployments-admin-key"
KEYS = {"DEP_KEY_A": "key-a", "DEP_KEY_B": "key-b"}
MESSAGES = [{"role": "user", "content": "Say hello"}]

Make = Callable[..., Awaitable[Harness]]


def files(
    fake_url: str,
    model: dict[str, Any],
    policy: dict[str, Any],
    claude: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "platform.yaml": {
            "providers": {
                "keys": {"api": "openai", "base_url": fake_url + "/v1",
                         "api_key_env": ["DEP_KEY_A", "DEP_KEY_B"]},
                "east": {"api": "openai", "base_url": fake_url + "/v1",
                         "api_key_env": "DEP_KEY_A"},
                "west": {"api": "openai", "base_url": fake_url + "/v1",
                         "api_key_env": "DEP_KEY_B"},
                "claude-a": {"api": "anthropic", "base_url": fake_url, "api_key_env": "DEP_KEY_A"},
                "claude-b": {"api": "anthropic", "base_url": fake_url, "api_key_env": "DEP_KEY_B"},
            },
            "models": {"gpt-dep": model, "gpt-backup": {"provider": "east"},
                       "claude-dep": claude or {"provider": "claude-a"}},
            "policies": {"fast": {**FAST_POLICY, **policy}},
        },
        "teams/a.yaml": {
            "teams": {"team-a": {"keys": [hash_key(CLIENT_KEY)], "models": ["gpt-*", "claude-*"],
                                 "routes": [{"match": {"model": "*"}, "policy": "fast"}]}}
        },
    }  # fmt: skip


@pytest.fixture
def make(
    fake: FakeProvider, gateway_of: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> Any:
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)

    async def start(
        model: dict[str, Any],
        policy: dict[str, Any] | None = None,
        claude: dict[str, Any] | None = None,
    ) -> Harness:
        h: Harness = await gateway_of(
            files(fake.url, model, policy or {}, claude), admin_key=ADMIN_KEY
        )
        return h

    return start


async def ask(gw: Harness, model: str = "gpt-dep") -> dict[str, str]:
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model=model, messages=MESSAGES
    )
    raw.parse()
    return dict(raw.headers)


def keys_used(fake: FakeProvider) -> list[str]:
    return [r.key or "" for r in fake.requests]


def up(gw: Harness, *names: str, model: str = "gpt-dep") -> dict[str, float | None]:
    """``llm_gateway_deployment_up`` per deployment name, as a scrape reads it now."""
    registry = gw.metrics.registry
    return {n: registry.get_sample_value("llm_gateway_deployment_up",
                                         {"model": model, "deployment": n})
            for n in names}  # fmt: skip


async def test_a_rate_limited_key_is_absorbed_by_the_other_at_once(
    make: Make, fake: FakeProvider
) -> None:
    """429 with Retry-After: 30 on key A: key B answers the same request within a second,
    and A is avoided while it cools down."""
    gw = await make({"provider": "keys", "balance": "ordered"})
    fake.push(Error.openai_rate_limit(retry_after=30), key="key-a")
    started = time.monotonic()
    with capture_logs() as events:
        headers = await ask(gw)
    assert time.monotonic() - started < 1.0
    assert keys_used(fake) == ["key-a", "key-b"]
    assert headers["x-gateway-attempts"] == "2"
    cooldown = [e for e in events if e["event"] == "deployment_cooldown"]
    assert cooldown == [
        {"event": "deployment_cooldown", "log_level": "warning", "team": "team-a",
         "model": "gpt-dep", "deployment": "keys#1", "reason": "rate_limit", "seconds": 30.0}
    ]  # fmt: skip
    assert not any("key-a" in repr(e) for e in events)  # names only, never a key
    assert gw.metric("llm_gateway_deployment_up", model="gpt-dep", deployment="keys#1") == 0
    for name, outcome in (("keys#1", "rate_limit"), ("keys#2", "ok")):
        assert gw.metric("llm_gateway_deployment_attempts_total", model="gpt-dep",
                         deployment=name, outcome=outcome) == 1  # fmt: skip
    fake.requests.clear()
    for _ in range(5):
        await ask(gw)
    assert keys_used(fake) == ["key-b"] * 5  # ordered, but A is cooling down


REVOKED = Error(401, {"error": {"message": "Incorrect API key", "type": "invalid_request_error",
                                 "code": "invalid_api_key"}})  # fmt: skip


@pytest.mark.parametrize(
    ("failure", "reason"), [(Error.openai_quota(), "quota_exhausted"), (REVOKED, "auth")]
)
async def test_quota_and_auth_failures_on_one_key_are_invisible(
    make: Make, fake: FakeProvider, failure: Error, reason: str
) -> None:
    """An exhausted or revoked key A (scripted on that key, traffic split at random by
    weight): whichever request reaches A first is answered by B, A is taken out, and every
    later request goes to B; clients see only 200s."""
    gw = await make({"provider": "keys", "affinity": "none"})  # weighted, drawn per request
    fake.script("gpt-dep", [failure], key="key-a")
    with capture_logs() as events:
        for _ in range(40):  # until a request picks A: each one does with p = 1/2
            headers = await ask(gw)
            if "key-a" in keys_used(fake):
                break
    assert "key-a" in keys_used(fake)
    assert keys_used(fake)[-2:] == ["key-a", "key-b"] and headers["x-gateway-attempts"] == "2"
    assert [e["reason"] for e in events if e["event"] == "deployment_ejected"] == [reason]
    assert up(gw, "keys#1", "keys#2") == {"keys#1": 0, "keys#2": 1}
    fake.requests.clear()
    for _ in range(8):
        await ask(gw)
    assert keys_used(fake) == ["key-b"] * 8  # A stays out for quota_cooldown (1 h)
    assert up(gw, "keys#1") == {"keys#1": 0}


async def test_each_deployment_sends_its_upstream_model(make: Make, fake: FakeProvider) -> None:
    """Deployments with their own upstream_model: the provider sees each one's name with
    its key; the 429 scripted for east's key and upstream name is answered by west."""
    gw = await make({"deployments": [
        {"provider": "east", "upstream_model": "gpt-east", "name": "east"},
        {"provider": "west", "upstream_model": "gpt-west", "name": "west"}],
        "balance": "ordered"})  # fmt: skip
    fake.script("gpt-east", [Error.openai_rate_limit(retry_after=30)], key="key-a")
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="gpt-dep", messages=MESSAGES
    )
    answer = raw.parse()
    assert [(r.key, r.model) for r in fake.requests] == [("key-a", "gpt-east"),
                                                         ("key-b", "gpt-west")]  # fmt: skip
    assert answer.model == "gpt-west"  # as the provider answered it
    assert raw.headers["x-gateway-model"] == "gpt-dep"
    assert fake.pending("gpt-east", key="key-a") == 0


async def test_an_answer_in_flight_does_not_end_a_cooldown(make: Make, fake: FakeProvider) -> None:
    """Two requests on key A at once: the second gets 429 (Retry-After 30), then the first
    one's answer arrives. A stays in cooldown: the requests after them go to B."""
    gw = await make({"provider": "keys", "balance": "ordered"})
    fake.push(SlowFirstByte(1.0), key="key-a")  # the first: answered, after the 429
    fake.push(Error.openai_rate_limit(retry_after=30), key="key-a")
    slow = asyncio.ensure_future(ask(gw))
    await eventually(lambda: len(fake.requests) == 1, what="the first request reached key A")
    with capture_logs() as events:
        headers = await ask(gw)
        assert not slow.done()  # the 429 came first
        assert (await slow)["x-gateway-attempts"] == "1"
    assert headers["x-gateway-attempts"] == "2"
    assert keys_used(fake) == ["key-a", "key-a", "key-b"]
    assert "deployment_recovered" not in [e["event"] for e in events]
    assert up(gw, "keys#1") == {"keys#1": 0}
    fake.requests.clear()
    for _ in range(5):
        await ask(gw)
    assert keys_used(fake) == ["key-b"] * 5


async def test_deployment_up_is_read_when_scraped(make: Make, fake: FakeProvider) -> None:
    """Every deployment of a model with several has a series from the start (1); 0 while
    it cools down; 1 again once the cooldown ends, with no request in between."""
    gw = await make({"provider": "keys", "balance": "ordered"})
    assert up(gw, "keys#1", "keys#2") == {"keys#1": 1, "keys#2": 1}
    assert up(gw, "east", model="gpt-backup") == {"east": None}  # one deployment: none
    fake.push(Error.openai_rate_limit(retry_after_ms=400), key="key-a")
    await ask(gw)
    assert up(gw, "keys#1", "keys#2") == {"keys#1": 0, "keys#2": 1}
    await eventually(lambda: up(gw, "keys#1") == {"keys#1": 1}, what="the cooldown ended")
    assert len(fake.requests) == 2  # no request brought it back


async def test_ejection_then_one_probe_then_recovered(make: Make, fake: FakeProvider) -> None:
    """Two server errors in a row eject key A (deployment_ejected); once the ejection ends,
    of five concurrent requests exactly one probes A while the others go to B; its answer
    recovers A (deployment_recovered), and A serves again."""
    policy = {"fallback": {"after_consecutive_server_errors": 2, "cooldown": "1s"}}
    gw = await make({"provider": "keys", "balance": "ordered"}, policy)
    fake.script("gpt-dep", [Error.openai_server(500), Error.openai_server(500),
                            SlowFirstByte(0.5)], key="key-a")  # fmt: skip
    with capture_logs() as events:
        for _ in range(2):
            assert (await ask(gw))["x-gateway-attempts"] == "2"  # A's 500, then B
    assert keys_used(fake) == ["key-a", "key-b"] * 2
    ejected = [e for e in events if e["event"] == "deployment_ejected"]
    assert [(e["deployment"], e["reason"], e["seconds"]) for e in ejected] == [
        ("keys#1", "server_error", 1.0)
    ]
    assert up(gw, "keys#1") == {"keys#1": 0}
    await eventually(lambda: up(gw, "keys#1") == {"keys#1": 1}, what="the ejection ended")
    fake.requests.clear()
    client = gw.async_openai()
    with capture_logs() as events:
        await asyncio.gather(*(client.chat.completions.create(model="gpt-dep", messages=MESSAGES)
                               for _ in range(5)))  # fmt: skip
    assert sorted(keys_used(fake)) == ["key-a"] + ["key-b"] * 4  # one probe
    recovered = [e for e in events if e["event"] == "deployment_recovered"]
    assert [(e["model"], e["deployment"]) for e in recovered] == [("gpt-dep", "keys#1")]
    fake.requests.clear()
    await ask(gw)
    assert keys_used(fake) == ["key-a"]  # ordered: A first again


async def test_a_failed_probe_ejects_again(make: Make, fake: FakeProvider) -> None:
    """The probe after an ejection fails: A is ejected again at once (for the cooldown),
    that request is answered by B, and the next ones go to B without probing A."""
    policy = {"fallback": {"after_consecutive_server_errors": 2, "cooldown": "1s"}}
    gw = await make({"provider": "keys", "balance": "ordered"}, policy)
    fake.script("gpt-dep", [Error.openai_server(500)] * 3, key="key-a")
    for _ in range(2):
        await ask(gw)
    await eventually(lambda: up(gw, "keys#1") == {"keys#1": 1}, what="the ejection ended")
    fake.requests.clear()
    with capture_logs() as events:
        assert (await ask(gw))["x-gateway-attempts"] == "2"
    assert keys_used(fake) == ["key-a", "key-b"]
    assert [(e["event"], e["reason"]) for e in events if e["event"].startswith("deployment_")] == [
        ("deployment_ejected", "server_error")
    ]
    assert up(gw, "keys#1") == {"keys#1": 0}
    fake.requests.clear()
    await ask(gw)
    assert keys_used(fake) == ["key-b"]


async def test_a_request_waiting_for_a_deployment_logs_the_wait(
    make: Make, fake: FakeProvider
) -> None:
    """Every deployment cooling down when a request arrives: it waits for the earliest, and
    the wait is an api_retry (rate_limit, the error naming the wait) counted in
    retry_wait_seconds_total, not in retries_total."""
    gw = await make({"provider": "keys", "balance": "ordered"}, {"retry": {"max_retries": 1}})
    fake.push(Error.openai_rate_limit(retry_after=30), key="key-a")
    fake.push(Error.openai_rate_limit(retry_after_ms=500), key="key-b")
    with pytest.raises(openai.RateLimitError):  # A, then B: max_retries spent
        await ask(gw)
    labels = {"team": "team-a", "model": "gpt-dep"}
    retries = gw.metric("llm_gateway_retries_total", **labels, category="rate_limit")
    waited = gw.metric("llm_gateway_retry_wait_seconds_total", **labels)
    with capture_logs() as events:
        headers = await ask(gw)
    assert headers["x-gateway-attempts"] == "1"
    assert keys_used(fake)[-1] == "key-b"
    (wait,) = [e for e in events if e["event"] == "api_retry"]
    assert wait["category"] == "rate_limit" and wait["is_rate_limit"] is True
    assert wait["error"].startswith("every deployment of gpt-dep is out of service for")
    assert 0 < wait["wait_seconds"] <= 0.5
    assert gw.metric("llm_gateway_retry_wait_seconds_total", **labels) == pytest.approx(
        waited + wait["wait_seconds"], abs=1e-3
    )
    assert gw.metric("llm_gateway_retries_total", **labels, category="rate_limit") == retries


async def test_every_deployment_limited_waits_for_the_earliest(
    make: Make, fake: FakeProvider
) -> None:
    """Both keys rate limited: the retry waits for the earlier of the two, no longer."""
    gw = await make({"provider": "keys", "balance": "ordered"})
    fake.push(Error.openai_rate_limit(retry_after=5), key="key-a")
    fake.push(Error.openai_rate_limit(retry_after_ms=250), key="key-b")
    started = time.monotonic()
    headers = await ask(gw)
    waited = time.monotonic() - started
    assert 0.25 <= waited < 0.55, waited
    assert keys_used(fake) == ["key-a", "key-b", "key-b"]
    assert headers["x-gateway-attempts"] == "3"
    up = {n: gw.metric("llm_gateway_deployment_up", model="gpt-dep", deployment=n)
          for n in ("keys#1", "keys#2")}  # fmt: skip
    assert up == {"keys#1": 0, "keys#2": 1}  # B answered again; A has not yet


async def test_weights_split_traffic(make: Make, fake: FakeProvider) -> None:
    gw = await make({"deployments": [{"provider": "east", "weight": 1, "name": "east"},
                                     {"provider": "west", "weight": 3, "name": "west"}],
                     "affinity": "none"})  # fmt: skip
    for _ in range(80):  # one conversation: drawn per request (by session, one deployment)
        await ask(gw)
    counts = Counter(keys_used(fake))
    assert counts["key-a"] + counts["key-b"] == 80
    assert 45 <= counts["key-b"] <= 75, counts  # about 60 of 80


async def test_headroom_headers_steer_traffic(make: Make, fake: FakeProvider) -> None:
    """An answer saying key A has no requests left until its reset sends the next ones to B."""
    gw = await make({"provider": "keys", "balance": "ordered"})
    fake.push(Success(headers={"x-ratelimit-remaining-requests": "0",
                               "x-ratelimit-limit-requests": "100",
                               "x-ratelimit-reset-requests": "20s"}))  # fmt: skip
    await ask(gw)
    for _ in range(3):
        await ask(gw)
    assert keys_used(fake) == ["key-a", "key-b", "key-b", "key-b"]


async def test_fallback_chain_only_after_every_deployment_failed(
    make: Make, fake: FakeProvider
) -> None:
    """Server errors on key A go to key B; only when both fail does the chain start."""
    policy = {"fallback": {"chain": ["gpt-backup"], "after_consecutive_server_errors": 2,
                           "cooldown": "1s"}, "retry": {"max_retries": 1}}  # fmt: skip
    gw = await make({"provider": "keys", "balance": "ordered"}, policy)
    fake.push(Error.openai_server(500))
    headers = await ask(gw)
    assert headers["x-gateway-model"] == "gpt-dep"  # B answered: no fallback
    assert keys_used(fake) == ["key-a", "key-b"]
    fake.requests.clear()
    for _ in range(4):
        fake.push(Error.openai_server(500))
    headers = await ask(gw)
    assert headers["x-gateway-model"] == "gpt-backup"
    assert [r.model for r in fake.requests][-1] == "gpt-backup"


async def test_admin_deployments_shows_state_without_keys(make: Make, fake: FakeProvider) -> None:
    """GET /admin/deployments: the cooled-down key by name, why and until when; no key."""
    gw = await make({"provider": "keys", "balance": "ordered"})
    fake.push(Error.openai_rate_limit(retry_after=30))
    await ask(gw)
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    async with (
        aiohttp.ClientSession() as s,
        s.get(gw.url + "/admin/deployments", headers=admin) as r,
    ):
        assert r.status == 200
        text = await r.text()
        body = json.loads(text)
    rows = body["models"]["gpt-dep"]["deployments"]
    assert [(d["deployment"], d["state"]) for d in rows] == [
        ("keys#1", "cooldown"), ("keys#2", "up")
    ]  # fmt: skip
    assert rows[0]["why"] == "rate_limit" and rows[0]["until"] > body["now"] + 25
    assert body["models"]["gpt-backup"]["deployments"] == [
        {"deployment": "east", "up": True, "state": "up", "in_flight": 0}
    ]
    assert "key-a" not in text and "key-b" not in text


async def test_simulate_goes_to_the_same_deployments_as_the_live_path(
    make: Make, fake: FakeProvider
) -> None:
    """A script per deployment: simulate names the deployment of each attempt, and they are
    the ones the live gateway used for the same faults."""
    gw = await make({"provider": "keys", "balance": "ordered"})
    policies = gw.gateway.policies
    route = policies.route("team-a", "gpt-dep", "/v1/chat/completions")
    assert route is not None
    timeline = await run(Scenario(
        route.policy, route.id, "team-a", "gpt-dep", "200", 0,
        deployments={"keys#1": "429:ra=30", "keys#2": "500,200"},
        deployments_of=lambda m: (policies.deployments[m], policies.models[m].balance),
    ))  # fmt: skip
    rows = [line.split()[2] for line in timeline.splitlines()[1:-1]]
    assert rows == ["gpt-dep@keys#1", "gpt-dep@keys#2", "gpt-dep@keys#2"]
    assert "retry on another deployment at once" in timeline

    fake.push(Error.openai_rate_limit(retry_after=30))
    fake.push(Error.openai_server(500))
    await ask(gw)
    assert keys_used(fake) == ["key-a", "key-b", "key-b"]


def test_simulate_cli_takes_a_script_per_deployment(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        """
providers:
  openai: {api: openai, base_url: https://api.openai.com/v1, api_key_env: [KEY_A, KEY_B]}
  azure-eu: {api: openai, base_url: https://eu.example.com/v1, api_key_env: AZURE_KEY}
models:
  gpt-4o:
    deployments: [{provider: openai}, {provider: azure-eu, upstream_model: gpt-4o-eu, name: eu}]
    balance: ordered
teams:
  t:
    keys: ["sha256:0000000000000000000000000000000000000000000000000000000000000000"]
    models: ["*"]
"""
    )
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "simulate", "--policies", str(tmp_path), "--team", "t",
         "--model", "gpt-4o", "--script", "200", "--deployment", "openai#1=429:ra=30",
         "--deployment", "openai#2=429:ra=20", "--deployment", "eu=429:ra=5"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    rows = [line.split() for line in out.stdout.splitlines()[2:-1]]
    assert [r[2] for r in rows] == ["gpt-4o@openai#1", "gpt-4o@openai#2", "gpt-4o@eu", "gpt-4o@eu"]
    assert "retry on another deployment in 5.00s" in out.stdout
    assert "answered after 4 attempt(s) in 5.00s" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "gateway", "simulate", "--policies", str(tmp_path), "--team", "t",
         "--model", "gpt-4o", "--script", "200", "--deployment", "nope=500"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "unknown deployment 'nope'" in bad.stderr


async def test_a_stream_moves_to_the_sibling_before_its_first_byte(
    make: Make, fake: FakeProvider
) -> None:
    """A streamed request: the 429 on key A is absorbed by key B, the client sees one stream."""
    gw = await make({"provider": "keys", "balance": "ordered"})
    fake.push(Error.openai_rate_limit(retry_after=30))
    started = time.monotonic()
    stream = await gw.async_openai().chat.completions.create(
        model="gpt-dep", messages=MESSAGES, stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert time.monotonic() - started < 1.0
    assert text.startswith("Hello!")
    assert keys_used(fake) == ["key-a", "key-b"]


async def test_anthropic_deployments_use_the_sibling_key(make: Make, fake: FakeProvider) -> None:
    """The same on an Anthropic-format provider (x-api-key), with an overload (529)."""
    claude = {
        "deployments": [
            {"provider": "claude-a", "name": "a"},
            {"provider": "claude-b", "name": "b"},
        ],
        "balance": "ordered",
    }
    gw = await make({"provider": "keys"}, claude=claude)  # fmt: skip
    fake.push(Error.anthropic_overloaded())
    message = await gw.async_anthropic().messages.create(
        model="claude-dep", max_tokens=100, messages=MESSAGES
    )
    assert message.content[0].text.startswith("Hello!")  # type: ignore[union-attr]
    assert [r.headers["x-api-key"] for r in fake.requests] == ["key-a", "key-b"]
