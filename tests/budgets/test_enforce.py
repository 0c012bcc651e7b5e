"""Team budgets through the real gateway: refused in each client's format, downgraded,
warned, shown on /admin/budgets and in the gauges."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from gateway.testing import Delay, FakeProvider, Success
from tests.harness import Harness, policy_files
from tests.log_sink import Sink
from tests.waiting import eventually

MESSAGES = [{"role": "user", "content": "Say hello"}]
ADMIN = "budget-admin-key"
#: USD per million tokens: 1000 prompt tokens cost 1 USD.
PRICE = {"input": 1000, "output": 1000}
ONE_USD = {"prompt_tokens": 1000, "completion_tokens": 0}
Start = Callable[..., Awaitable[Harness]]


@pytest.fixture
def budgeted(fake: FakeProvider, gateway_of: Start) -> Start:
    """``await budgeted(budget)``: a gateway whose team-a has ``budget`` and priced models."""

    async def start(budget: dict[str, Any], **settings: Any) -> Harness:
        files = policy_files(fake.url)
        for spec in files["platform.yaml"]["models"].values():
            spec["price"] = PRICE
        files["teams/team-a.yaml"]["teams"]["team-a"]["budget"] = budget
        return await gateway_of(files, admin_key=ADMIN, **settings)

    return start


def costs(fake: FakeProvider, model: str, n: int = 1) -> None:
    """The next ``n`` answers of ``model`` cost 1 USD each."""
    fake.script(model, [Success(usage=ONE_USD)] * n)


def next_midnight() -> float:
    now = datetime.now(UTC)
    return datetime(now.year, now.month, now.day, tzinfo=UTC).timestamp() + 86400


def check_refusal(status: int, headers: Any, message: str) -> None:
    assert status == 429
    assert "budget of 1 USD per day" in message
    assert "team 'team-a'" in message
    midnight = next_midnight()
    resets = datetime.fromtimestamp(midnight, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"resets at {resets}" in message
    assert abs(int(headers["retry-after"]) - math.ceil(midnight - time.time())) <= 2
    assert headers["x-should-retry"] == "false"


async def test_refused_in_openai_chat_format(budgeted: Start, fake: FakeProvider) -> None:
    """Once spent, an OpenAI chat request is a 429 RateLimitError naming the budget and its
    reset, with retry-after to the reset and x-should-retry: false; nothing goes upstream."""
    gw = await budgeted({"usd": 1, "per": "day"})
    costs(fake, "fake-model")
    client = gw.async_openai()
    await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    with pytest.raises(openai.RateLimitError) as exc:
        await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    e = exc.value
    assert e.code == "budget_exceeded"
    check_refusal(e.status_code, e.response.headers, e.message)
    assert len(fake.requests) == 1


async def test_refused_in_anthropic_format(budgeted: Start, fake: FakeProvider) -> None:
    """Once spent, an Anthropic messages request is the SDK's RateLimitError (429) with the
    same message and headers."""
    gw = await budgeted({"usd": 1, "per": "day"})
    costs(fake, "claude-test")
    client = gw.async_anthropic()
    await client.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    with pytest.raises(anthropic.RateLimitError) as exc:
        await client.messages.create(model="claude-test", max_tokens=50, messages=MESSAGES)
    e = exc.value
    assert e.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    check_refusal(e.status_code, e.response.headers, e.message)


async def test_refused_in_responses_format(budgeted: Start, fake: FakeProvider) -> None:
    """Once spent, an OpenAI Responses request is a 429 RateLimitError, as chat's."""
    gw = await budgeted({"usd": 1, "per": "day"})
    costs(fake, "fake-model")
    client = gw.async_openai()
    await client.responses.create(model="gpt-test", input="Say hello")
    with pytest.raises(openai.RateLimitError) as exc:
        await client.responses.create(model="gpt-test", input="Say hello")
    assert exc.value.code == "budget_exceeded"
    check_refusal(exc.value.status_code, exc.value.response.headers, exc.value.message)


async def test_downgrade(budgeted: Start, fake: FakeProvider, log_sink: Sink) -> None:
    """Once spent, with downgrade: another model's request is answered by the downgrade
    model (x-gateway-recovery: budget_downgrade, the access log keeps the model asked for),
    the downgrade model's own is served as asked, and one it cannot serve (embeddings on
    an Anthropic-format model) is refused."""
    log_sink.configure()
    gw = await budgeted({"usd": 1, "per": "day", "when_spent": "downgrade",
                         "downgrade_to": ["claude-backup"]})  # fmt: skip
    costs(fake, "fake-model")
    client = gw.async_openai()
    await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    raw = await client.chat.completions.with_raw_response.create(
        model="gpt-test", messages=MESSAGES
    )
    assert raw.headers["x-gateway-recovery"] == "budget_downgrade"
    assert raw.headers["x-gateway-model"] == "claude-backup"
    assert fake.requests[-1].model == "claude-backup"
    _, line = await log_sink.line(raw.headers["x-request-id"])
    assert (line["requested_model"], line["model"]) == ("gpt-test", "claude-backup")
    assert line["recovery"] == "budget_downgrade"
    raw = await gw.async_anthropic().messages.with_raw_response.create(
        model="claude-backup", max_tokens=50, messages=MESSAGES
    )
    assert "x-gateway-recovery" not in raw.headers
    with pytest.raises(openai.RateLimitError) as exc:
        await client.embeddings.create(model="gpt-test", input="hello")
    assert exc.value.code == "budget_exceeded"


async def test_warning_and_exceeded_events(
    budgeted: Start, fake: FakeProvider, log_sink: Sink
) -> None:
    """budget_warning is logged when spending crosses warn_at x usd, budget_exceeded when
    it reaches usd: once each in the period."""
    log_sink.configure()
    gw = await budgeted({"usd": 2, "per": "week", "warn_at": 0.5})
    costs(fake, "fake-model", 2)
    client = gw.async_openai()
    await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    events = [e for e in log_sink.lines() if e["event"].startswith("budget_")]
    assert [(e["event"], e["team"], e["spent_usd"], e["limit_usd"]) for e in events] == [
        ("budget_warning", "team-a", 1, 2)
    ]
    assert events[0]["per"] == "week" and events[0]["period"].count("-W") == 1
    await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="gpt-test", messages=MESSAGES)
    kinds = [e["event"] for e in log_sink.lines() if e["event"].startswith("budget_")]
    assert kinds == ["budget_warning", "budget_exceeded"]


async def test_admin_budgets_and_gauges(budgeted: Start, fake: FakeProvider) -> None:
    """GET /admin/budgets (admin key) and the gauges show the team's period, spending,
    limit, reset and state."""
    gw = await budgeted({"usd": 4, "per": "month", "warn_at": 0.25})
    costs(fake, "fake-model")
    await gw.async_openai().chat.completions.create(model="gpt-test", messages=MESSAGES)
    async with aiohttp.ClientSession() as s:
        async with s.get(gw.url + "/admin/budgets") as r:
            assert r.status == 401
        auth = {"authorization": f"Bearer {ADMIN}"}
        async with s.get(gw.url + "/admin/budgets", headers=auth) as r:
            assert r.status == 200
            team = (await r.json())["teams"]["team-a"]
    month = datetime.now(UTC).strftime("%Y-%m")
    assert team["per"] == "month" and team["period"] == month
    assert (team["spent_usd"], team["limit_usd"], team["remaining_usd"]) == (1, 4, 3)
    assert team["resets_at"].endswith("-01T00:00:00Z")
    assert (team["state"], team["when_spent"], team["shared"]) == ("warned", "refuse", False)
    assert gw.metric("llm_gateway_budget_spent_usd", team="team-a") == 1
    assert gw.metric("llm_gateway_budget_limit_usd", team="team-a") == 4


async def test_a_team_without_a_budget_is_not_counted(gw: Harness, fake: FakeProvider) -> None:
    """A team with no budget has no book entry: its requests are not counted or checked."""
    costs(fake, "fake-model")
    await gw.async_openai().chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert gw.gateway.state.spending.teams == {}


async def test_a_client_that_left_mid_stream_still_spent(
    budgeted: Start, fake: FakeProvider
) -> None:
    """A stream whose client left after its first chunk is charged what it cost (its
    parts estimated from the text sent when the provider's usage never came)."""
    gw = await budgeted({"usd": 100, "per": "day"})
    fake.script("fake-model", [Delay(per_chunk_s=0.05)])
    stream = await gw.async_openai().chat.completions.create(
        model="gpt-test", messages=MESSAGES, stream=True
    )
    async for _chunk in stream:
        break
    await stream.close()
    book = gw.gateway.state.spending

    async def charged() -> bool:
        return book.teams["team-a"].usd > 0

    await eventually(charged, within=2, step=0.02, what="the stream's cost in the book")
