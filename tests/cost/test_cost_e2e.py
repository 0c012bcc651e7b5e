"""What requests cost, through the real gateway in front of fake providers: the access
log's ``cost_usd`` / ``recovery_cost_usd``, the ``x-gateway-cost-usd`` header and
``llm_gateway_cost_usd_total`` agree with the tokens times the price (``price:``, or
genai-prices' own calculation for a table-priced model), an unpriced model is counted in
tokens only and said once, and recovery is kept apart from the answer."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from genai_prices import Usage as TableUsage
from genai_prices import calc_price

from gateway.routing.policyset import hash_key
from gateway.testing import Error, FakeProvider, Success
from gateway.testing.fake_azure import FakeAzure
from tests.harness import CLIENT_KEY, FAST_POLICY, Harness, write_policies
from tests.integration.test_prompt_and_output import agent_transcript
from tests.integration.test_summarize import SUMMARY, summarize_policy
from tests.log_sink import Sink

MakeGateway = Callable[..., Awaitable[Harness]]
HI = [{"role": "user", "content": "hi"}]
BOTH_APIS = ["chat", "responses"]
#: USD per million tokens.
PRICED = {"input": 2.5, "output": 10.0}
BACKUP = {"input": 0.5, "output": 1.5}
ADMIN_KEY = "admin-secret-key"


def usd(prompt: int, completion: int, price: dict[str, float]) -> float:
    return (prompt * price["input"] + completion * price["output"]) / 1e6


def priced_models() -> dict[str, Any]:
    return {
        "gpt-priced": {"provider": "fake", "upstream_model": "fake-model",
                       "upstream_api": BOTH_APIS, "price": PRICED},
        "gpt-backup": {"provider": "fake", "upstream_api": BOTH_APIS, "price": BACKUP},
    }  # fmt: skip


async def json_answer(gw: Harness, model: str) -> tuple[dict[str, str], dict[str, Any]]:
    """A chat completion of ``model``: its headers and its access log line."""
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model=model, messages=HI
    )
    raw.parse()
    return dict(raw.headers), raw.headers["x-request-id"]  # type: ignore[return-value]


async def line_of(log_sink: Sink, request_id: str) -> dict[str, Any]:
    _, line = await log_sink.line(request_id)
    return line


async def test_a_priced_model_costs_its_tokens_times_its_price(
    make_gateway: MakeGateway, fake: FakeProvider, log_sink: Sink
) -> None:
    """price: on the model: the access log, the header and the metric all say tokens ×
    price, exactly; no recovery cost, no recovery tokens."""
    log_sink.configure()
    gw = await make_gateway(models=priced_models())
    fake.script("fake-model", [Success(usage={"prompt_tokens": 1234, "completion_tokens": 56})])
    headers, request_id = await json_answer(gw, "gpt-priced")
    line = await line_of(log_sink, request_id)
    want = usd(1234, 56, PRICED)
    assert line["tokens"] == {"prompt": 1234, "completion": 56}
    assert line["cost_usd"] == round(want, 8) and line["recovery_cost_usd"] == 0.0
    assert "recovery_tokens" not in line
    assert line["path"] == "/v1/chat/completions"
    assert headers["x-gateway-cost-usd"] == f"{want:.8f}" == "0.00364500"
    labels = {"team": "team-a", "model": "gpt-priced"}
    assert gw.metric("llm_gateway_cost_usd_total", **labels, kind="answer") == pytest.approx(
        want, rel=1e-12
    )
    assert gw.metric("llm_gateway_cost_usd_total", **labels, kind="recovery") == 0.0


async def test_an_unpriced_model_is_counted_in_tokens_only_and_said_once(
    make_gateway: MakeGateway, fake: FakeProvider, log_sink: Sink
) -> None:
    """A model on a self-hosted base_url (the fake at 127.0.0.1) without price: has no
    price: cost_usd null, no header, no cost series, tokens counted; price_unknown logged
    once for two requests, naming the model, its deployment and provider."""
    log_sink.configure()
    name = f"gpt-unpriced-{uuid.uuid4().hex[:8]}"  # said once per process: a fresh model
    gw = await make_gateway(models={name: {"provider": "fake", "upstream_model": "fake-model"}})
    ids = []
    for _ in range(2):
        headers, request_id = await json_answer(gw, name)
        assert "x-gateway-cost-usd" not in headers
        ids.append(request_id)
    for request_id in ids:
        line = await line_of(log_sink, request_id)
        assert line["cost_usd"] is None and line["recovery_cost_usd"] == 0.0
        assert line["tokens"]["prompt"] > 0 and line["tokens"]["completion"] > 0
    told = [e for e in log_sink.lines() if e["event"] == "price_unknown"]
    assert len(told) == 1
    assert (told[0]["model"], told[0]["deployment"], told[0]["provider"]) == (name, "fake", "fake")
    assert told[0]["level"] == "warning" and told[0]["request_id"] == ids[0]
    labels = {"team": "team-a", "model": name}
    assert gw.metric("llm_gateway_tokens_total", **labels, kind="prompt") > 0
    for kind in ("answer", "recovery"):
        assert gw.metric("llm_gateway_cost_usd_total", **labels, kind=kind) == 0.0


async def test_a_continued_answer_costs_every_part(
    make_gateway: MakeGateway, fake: FakeProvider, log_sink: Sink
) -> None:
    """A JSON answer cut at the token limit and continued once: both parts' tokens and
    costs are summed into the answer's (not recovery: the client got both parts)."""
    log_sink.configure()
    gw = await make_gateway(
        policy={"output_recovery": {"max_continuations": 1}}, models=priced_models()
    )
    fake.reply["fake-model"] = "word " * 400
    fake.cut_at["fake-model"] = 8
    fake.script("fake-model", [Success(usage={"prompt_tokens": 100, "completion_tokens": 8}),
                               Success(usage={"prompt_tokens": 130, "completion_tokens": 8})])  # fmt: skip
    headers, request_id = await json_answer(gw, "gpt-priced")
    assert len(fake.requests) == 2
    line = await line_of(log_sink, request_id)
    want = usd(230, 16, PRICED)
    assert line["tokens"] == {"prompt": 230, "completion": 16}
    assert line["cost_usd"] == round(want, 8) and line["recovery_cost_usd"] == 0.0
    assert headers["x-gateway-cost-usd"] == f"{want:.8f}"
    assert gw.metric("llm_gateway_cost_usd_total", team="team-a", model="gpt-priced",
                     kind="answer") == pytest.approx(want, rel=1e-12)  # fmt: skip


async def test_a_compaction_summary_is_recovery_cost(
    make_gateway: MakeGateway, fake: FakeProvider, log_sink: Sink
) -> None:
    """The summarize step's call (on gpt-backup, at its own price) is counted in
    recovery_cost_usd and recovery_tokens, not in cost_usd; the header adds both."""
    log_sink.configure()
    models = priced_models()
    models["gpt-test"] = {**models["gpt-priced"]}
    gw = await make_gateway(policy=summarize_policy(), models=models)
    fake.context_window["fake-model"] = 3000
    fake.script("gpt-backup", [Success(text=SUMMARY,
                                       usage={"prompt_tokens": 900, "completion_tokens": 30})])  # fmt: skip
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="gpt-test", messages=agent_transcript()
    )
    raw.parse()
    assert raw.headers["x-gateway-recovery"] == "compaction"
    line = await line_of(log_sink, raw.headers["x-request-id"])
    recovery = usd(900, 30, BACKUP)
    answer = usd(line["tokens"]["prompt"], line["tokens"]["completion"], PRICED)
    assert line["recovery_tokens"] == {"prompt": 900, "completion": 30}
    assert line["recovery_cost_usd"] == round(recovery, 8)
    assert line["cost_usd"] == round(answer, 8)
    assert raw.headers["x-gateway-cost-usd"] == f"{answer + recovery:.8f}"
    labels = {"team": "team-a", "model": "gpt-test"}
    assert gw.metric("llm_gateway_cost_usd_total", **labels, kind="recovery") == pytest.approx(
        recovery, rel=1e-12
    )
    assert gw.metric("llm_gateway_cost_usd_total", **labels, kind="answer") == pytest.approx(
        answer, rel=1e-12
    )


async def test_a_retried_rate_limit_adds_no_cost(
    make_gateway: MakeGateway, fake: FakeProvider, log_sink: Sink
) -> None:
    """A 429 then an answer: two attempts, one billed part; no recovery cost."""
    log_sink.configure()
    gw = await make_gateway(models=priced_models())
    fake.script("fake-model", [Error.openai_rate_limit(retry_after=0.01),
                               Success(usage={"prompt_tokens": 40, "completion_tokens": 4})])  # fmt: skip
    headers, request_id = await json_answer(gw, "gpt-priced")
    assert headers["x-gateway-attempts"] == "2"
    line = await line_of(log_sink, request_id)
    assert line["cost_usd"] == round(usd(40, 4, PRICED), 8)
    assert line["recovery_cost_usd"] == 0.0 and "recovery_tokens" not in line


async def test_a_stream_has_its_cost_in_the_access_log_not_a_header(
    make_gateway: MakeGateway, log_sink: Sink
) -> None:
    """Streams send their headers before the cost is known: no x-gateway-cost-usd; the
    access log has the cost, tokens × price, and so does the metric."""
    log_sink.configure()
    gw = await make_gateway(models=priced_models())
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="gpt-priced", messages=HI, stream=True, stream_options={"include_usage": True}
    )
    usage = [c.usage async for c in raw.parse() if c.usage is not None]
    assert "x-gateway-cost-usd" not in raw.headers
    line = await line_of(log_sink, raw.headers["x-request-id"])
    (u,) = usage
    assert line["tokens"] == {"prompt": u.prompt_tokens, "completion": u.completion_tokens}
    want = usd(u.prompt_tokens, u.completion_tokens, PRICED)
    assert want > 0 and line["cost_usd"] == round(want, 8)
    assert gw.metric("llm_gateway_cost_usd_total", team="team-a", model="gpt-priced",
                     kind="answer") == pytest.approx(want, rel=1e-12)  # fmt: skip


async def test_admin_policies_shows_prices_and_their_source(make_gateway: MakeGateway) -> None:
    """GET /admin/policies: each model's price per deployment, with its source."""
    gw = await make_gateway(models=priced_models(), admin_key=ADMIN_KEY)
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    async with (
        aiohttp.ClientSession() as s,
        s.get(gw.url + "/admin/policies", headers=headers) as r,
    ):
        assert r.status == 200
        prices = (await r.json())["prices"]
    assert prices["gpt-priced"] == {"fake": {"input": 2.5, "output": 10.0, "cache_read": 2.5,
                                             "cache_write": 2.5, "source": "policy"}}  # fmt: skip
    assert prices["gpt-test"] == {"fake": {"source": "none"}}


# ---- a model priced from the genai-prices table: an Azure deployment ------------------


def azure_policy(url: str) -> dict[str, Any]:
    providers = {"azure": {"api": "azure", "base_url": url, "api_key_env": "COST_AZURE_KEY"}}
    models = {
        "gpt-4o-mini": {"provider": "azure"},
        "gpt-4o-mini-ours": {"provider": "azure", "upstream_model": "gpt-4o-mini",
                             "price": {"input": 1, "output": 1}},
    }  # fmt: skip
    return {
        "platform.yaml": {"providers": providers, "models": models,
                          "policies": {"fast": FAST_POLICY}},
        "teams/apps.yaml": {"teams": {"apps": {
            "keys": [hash_key(CLIENT_KEY)],
            "routes": [{"match": {"model": "*"}, "policy": "fast"}]}}},
    }  # fmt: skip


async def test_a_table_priced_model_costs_what_genai_prices_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_sink: Sink
) -> None:
    """An Azure deployment of gpt-4o-mini without price: costs genai-prices' own
    calc_price of the same usage; the same upstream model with price: costs that instead."""
    monkeypatch.setenv("COST_AZURE_KEY", "az-key")
    log_sink.configure()
    async with (
        FakeAzure(keys={"az-key"}, deployments={"gpt-4o-mini"}) as azure,
        FakeProvider() as unused,
    ):
        azure.script("gpt-4o-mini", [
            Success(usage={"prompt_tokens": 5000, "completion_tokens": 700}),
            Success(usage={"prompt_tokens": 5000, "completion_tokens": 700}),
        ])  # fmt: skip
        gw = await Harness(unused, write_policies(tmp_path / "p", azure_policy(azure.url))).start()
        try:
            table, table_id = await json_answer(gw, "gpt-4o-mini")
            ours, ours_id = await json_answer(gw, "gpt-4o-mini-ours")
            want = calc_price(
                TableUsage(input_tokens=5000, output_tokens=700), "gpt-4o-mini",
                provider_id="azure",
            ).total_price  # fmt: skip
            assert want > 0
            line = await line_of(log_sink, table_id)
            assert line["cost_usd"] == pytest.approx(float(want), rel=1e-9, abs=1e-8)
            assert table["x-gateway-cost-usd"] == f"{float(want):.8f}"
            assert gw.metric("llm_gateway_cost_usd_total", team="apps", model="gpt-4o-mini",
                             kind="answer") == pytest.approx(float(want), rel=1e-9)  # fmt: skip
            line = await line_of(log_sink, ours_id)
            assert line["cost_usd"] == round(usd(5000, 700, {"input": 1, "output": 1}), 8)
            assert ours["x-gateway-cost-usd"] == "0.00570000"
        finally:
            await gw.stop()
