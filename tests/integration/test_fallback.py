"""Layer 2 over real sockets: fallback models, stickiness, cooldown and probe."""

from __future__ import annotations

import asyncio

import openai
from structlog.testing import capture_logs

from gateway.testing import Error, FakeProvider
from tests.harness import Harness

MESSAGES = [{"role": "user", "content": "Say hello"}]
FALLBACK = {"fallback": {"chain": ["gpt-backup"], "cooldown": "300ms"}, "turn_retry": {"max": 0}}


async def ask(gw: Harness) -> tuple[str, dict[str, str]]:
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="gpt-test", messages=MESSAGES
    )
    return raw.parse().choices[0].message.content or "", dict(raw.headers)


async def test_two_server_errors_move_to_fallback(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """500, 500 on the primary: the same request is answered by the fallback model."""
    gw: Harness = await make_gateway(policy=FALLBACK)
    fake.script("fake-model", [Error.openai_server(500), Error.openai_server(500)])
    with capture_logs() as events:
        text, headers = await ask(gw)
    assert "gpt-backup" in text
    assert headers["x-gateway-model"] == "gpt-backup"
    assert headers["x-gateway-recovery"] == "retry,fallback"
    assert headers["x-gateway-attempts"] == "3"
    assert [r.model for r in fake.requests] == ["fake-model", "fake-model", "gpt-backup"]
    activated = [e for e in events if e["event"] == "fallback_model_activated"]
    assert activated == [
        {"event": "fallback_model_activated", "log_level": "warning", "team": "team-a",
         "model": "gpt-test", "fallback_model": "gpt-backup",
         "reason": "consecutive_server_errors"}
    ]  # fmt: skip
    assert gw.metric("llm_gateway_fallback_active", team="team-a", model="gpt-test") == 1
    assert gw.metric("llm_gateway_fallbacks_total", team="team-a", from_model="gpt-test",
                     to_model="gpt-backup") == 1  # fmt: skip


async def test_sticky_then_probe_restores_primary(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """While active, requests go straight to the fallback; after the cooldown a probe recovers."""
    gw: Harness = await make_gateway(policy=FALLBACK)
    fake.script("fake-model", [Error.openai_server(500), Error.openai_server(500)])
    await ask(gw)
    fake.requests.clear()
    _, headers = await ask(gw)
    assert [r.model for r in fake.requests] == ["gpt-backup"]
    assert headers["x-gateway-model"] == "gpt-backup"
    await asyncio.sleep(0.35)  # the scenario: the 300 ms cooldown passes
    fake.requests.clear()
    with capture_logs() as events:
        _, headers = await ask(gw)
    assert [r.model for r in fake.requests] == ["fake-model"]
    assert headers["x-gateway-model"] == "gpt-test"
    assert any(e["event"] == "fallback_model_recovered" for e in events)
    assert gw.metric("llm_gateway_fallback_active", team="team-a", model="gpt-test") == 0


async def test_failed_probe_restarts_cooldown(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """A failed probe sends its own request straight back to the fallback, and the next ones."""
    gw: Harness = await make_gateway(policy=FALLBACK)
    fake.script("fake-model", [Error.openai_server(500)] * 3)
    await ask(gw)
    await asyncio.sleep(0.35)  # the scenario: the 300 ms cooldown passes
    fake.requests.clear()
    _, headers = await ask(gw)  # the probe fails: no retries on a primary known to be down
    assert [r.model for r in fake.requests] == ["fake-model", "gpt-backup"]
    assert headers["x-gateway-model"] == "gpt-backup"
    fake.requests.clear()
    await ask(gw)
    assert [r.model for r in fake.requests] == ["gpt-backup"]


async def test_quota_exhausted_moves_to_next_model(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """insufficient_quota is not retried on the same model: the chain's next model answers."""
    gw: Harness = await make_gateway(policy=FALLBACK)
    fake.script("fake-model", [Error.openai_quota()])
    _text, headers = await ask(gw)
    assert headers["x-gateway-model"] == "gpt-backup"
    assert [r.model for r in fake.requests] == ["fake-model", "gpt-backup"]


async def test_chain_of_three_walks_on(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """When the fallback fails too, the chain walks on to the third model."""
    gw: Harness = await make_gateway(
        policy={**FALLBACK, "fallback": {"chain": ["gpt-backup", "gpt-third"], "cooldown": "5s"}}
    )
    fake.script("fake-model", [Error.openai_server(500)] * 2)
    fake.script("gpt-backup", [Error.openai_server(503)] * 2)
    _, headers = await ask(gw)
    assert headers["x-gateway-model"] == "gpt-third"
    assert [r.model for r in fake.requests] == ["fake-model"] * 2 + ["gpt-backup"] * 2 + [
        "gpt-third"
    ]


async def test_other_models_unaffected(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """One model's outage never reroutes another model's traffic."""
    gw: Harness = await make_gateway(policy=FALLBACK)
    fake.script("fake-model", [Error.openai_server(500)] * 2)
    await ask(gw)
    c = await gw.async_openai().chat.completions.create(model="gpt-large", messages=MESSAGES)
    assert c.model == "gpt-large"


async def test_exhausted_without_fallback_is_error(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """With no chain, a model that keeps failing ends in its error, x-should-retry false."""
    gw: Harness = await make_gateway(policy={"turn_retry": {"max": 0}})
    fake.script("fake-model", [Error.openai_server(502)] * 10)
    try:
        await ask(gw)
    except openai.APIStatusError as e:
        assert e.status_code == 502
        assert e.response.headers["x-should-retry"] == "false"
    else:  # pragma: no cover
        raise AssertionError("expected an error")
