"""A provider's usage that no request could have produced is not billed: counts over the
bound, cache counts over the prompt, counts that are not counts, through the real gateway
and the scripted fakes, on JSON answers and streams, same format and translated; and an
embeddings answer's usage is found wherever it sits in the body."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from gateway.observe import cost
from gateway.testing import FakeProvider, Success, Tamper
from tests.clouds.test_clouds_e2e import NOVA, Clouds, clouds  # noqa: F401  (a shared fixture)
from tests.harness import Harness, policy_files
from tests.log_sink import Sink

MakeGateway = Callable[..., Awaitable[Harness]]
HUGE = 2**63 - 1
#: USD per million tokens.
PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3}
ASK = "Say something about usage."
#: The keys of a usage block that hold the prompt and output counts, in every format.
COUNTS = frozenset(
    {"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
     "inputTokens", "outputTokens"}
)  # fmt: skip
ADMIN = "usage-admin-key"


def forged(value: Any, *, only: frozenset[str] = COUNTS) -> Tamper:
    """Every count of every usage block the provider sends (the JSON answer's, each stream
    event's) says ``value``."""

    def walk(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {
                k: (
                    {kk: (value if kk in only else vv) for kk, vv in v.items()}
                    if k == "usage" and isinstance(v, dict)
                    else walk(v)
                )
                for k, v in obj.items()
            }
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        return obj

    return Tamper(lambda data, index: walk(data))


def priced() -> dict[str, Any]:
    return {
        "gpt-test": {"provider": "fake", "upstream_model": "fake-model",
                     "upstream_api": ["chat", "responses"], "price": PRICE},
        "gpt-resp": {"provider": "fake", "upstream_model": "fake-model",
                     "upstream_api": "responses", "price": PRICE},
        "claude-test": {"provider": "fake-anthropic", "price": PRICE},
    }  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``usage_implausible`` is said once per provider and model per process: each test
    starts as a new process would."""
    monkeypatch.setattr(cost, "doubted", set(), raising=False)


async def ask(gw: Harness, api: str, model: str, stream: bool) -> tuple[str, dict[str, str]]:
    """One request through the official SDK of ``api``: its request id and headers."""
    if api == "messages":
        client = gw.async_anthropic()
        if stream:
            async with client.messages.with_streaming_response.create(
                model=model, max_tokens=500, messages=[{"role": "user", "content": ASK}],
                stream=True,
            ) as r:  # fmt: skip
                async for _ in r.iter_lines():
                    pass
                headers = dict(r.headers)
        else:
            raw = await client.messages.with_raw_response.create(
                model=model, max_tokens=500, messages=[{"role": "user", "content": ASK}]
            )
            await raw.parse()
            headers = dict(raw.headers)
    elif api == "chat":
        oai = gw.async_openai()
        if stream:
            async with oai.chat.completions.with_streaming_response.create(
                model=model, messages=[{"role": "user", "content": ASK}], stream=True,
                stream_options={"include_usage": True},
            ) as r:  # fmt: skip
                async for _ in r.iter_lines():
                    pass
                headers = dict(r.headers)
        else:
            raw = await oai.chat.completions.with_raw_response.create(
                model=model, messages=[{"role": "user", "content": ASK}]
            )
            raw.parse()
            headers = dict(raw.headers)
    else:
        oai = gw.async_openai()
        if stream:
            async with oai.responses.with_streaming_response.create(
                model=model, input=ASK, stream=True
            ) as r:
                async for _ in r.iter_lines():
                    pass
                headers = dict(r.headers)
        else:
            raw = await oai.responses.with_raw_response.create(model=model, input=ASK)
            raw.parse()
            headers = dict(raw.headers)
    return headers["x-request-id"], headers


#: (client API, model, upstream fake model): same format and translated.
PATHS = [
    ("chat", "gpt-test", "fake-model"),
    ("responses", "gpt-resp", "fake-model"),
    ("messages", "claude-test", "claude-test"),
    ("messages", "gpt-test", "fake-model"),  # translated to chat
    ("chat", "claude-test", "claude-test"),  # translated to Messages
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(("api", "model", "upstream"), PATHS, ids=[f"{a}-{m}" for a, m, _ in PATHS])
async def test_counts_of_2_63_are_estimated_and_said_once(
    make_gateway: MakeGateway,
    fake: FakeProvider,
    log_sink: Sink,
    api: str,
    model: str,
    upstream: str,
    stream: bool,
) -> None:
    """Counts of 2**63-1 for the prompt and the output: the header, the access log and
    the cost counter say the estimate's cost (well under a cent), the tokens are marked
    estimated, and ``usage_implausible`` is logged once for two such answers, naming the
    provider, the model and the fields, never the values."""
    log_sink.configure()
    gw = await make_gateway(models=priced())
    fake.script(upstream, [forged(HUGE), forged(HUGE)])
    ids = []
    for _ in range(2):
        request_id, headers = await ask(gw, api, model, stream)
        ids.append(request_id)
        if not stream:
            assert float(headers["x-gateway-cost-usd"]) < 0.01
    for request_id in ids:
        _, line = await log_sink.line(request_id)
        assert line["tokens"]["estimated"] is True
        assert 0 < line["tokens"]["prompt"] < 1000 and line["tokens"]["completion"] < 1000
        assert line["cost_usd"] < 0.01
    counted = gw.metric("llm_gateway_cost_usd_total", team="team-a", model=model, kind="answer")
    assert 0 < counted < 0.02
    said = [e for e in log_sink.lines() if e["event"] == "usage_implausible"]
    assert len(said) == 1, said
    provider = "fake-anthropic" if upstream == "claude-test" else "fake"
    assert (said[0]["provider"], said[0]["model"]) == (provider, model)
    assert set(said[0]["fields"]) >= {"input", "output"}
    assert said[0]["level"] == "warning" and said[0]["request_id"] == ids[0]
    assert str(HUGE) not in str(said[0])


async def test_cached_tokens_over_the_prompt_are_clamped(
    make_gateway: MakeGateway, fake: FakeProvider, log_sink: Sink
) -> None:
    """10 prompt tokens "of which 10**15 cached": priced as 10 cached tokens (not $3e8),
    and said."""
    log_sink.configure()
    gw = await make_gateway(models=priced())
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
             "prompt_tokens_details": {"cached_tokens": 10**15}}  # fmt: skip
    fake.script("fake-model", [Tamper(lambda data, i: {**data, "usage": usage})])
    request_id, headers = await ask(gw, "chat", "gpt-test", False)
    want = (10 * PRICE["cache_read"] + 5 * PRICE["output"]) / 1e6
    assert headers["x-gateway-cost-usd"] == f"{want:.8f}"
    _, line = await log_sink.line(request_id)
    assert line["tokens"] == {
        "prompt": 10,
        "completion": 5,
        "cache_read": 10,
        "cache_write": 0,
        "estimated": True,
    }
    assert line["cost_usd"] == round(want, 8)
    (said,) = [e for e in log_sink.lines() if e["event"] == "usage_implausible"]
    assert said["fields"] == ["cache_read"]


WRONG = [("NaN", "NaN"), (-5, -5), (True, 1.5)]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(("api", "model", "upstream"), PATHS, ids=[f"{a}-{m}" for a, m, _ in PATHS])
@pytest.mark.parametrize("wrong", WRONG, ids=["nan", "negative", "bool-fraction"])
async def test_counts_that_are_not_counts_are_estimated_not_zero(
    make_gateway: MakeGateway,
    fake: FakeProvider,
    log_sink: Sink,
    api: str,
    model: str,
    upstream: str,
    stream: bool,
    wrong: tuple[Any, Any],
) -> None:
    """A prompt count of ``"NaN"``, -5 or true (and, in a JSON answer, an output count
    likewise, or 1.5):
    the access log's prompt tokens are the estimate's (not 0), marked estimated, and the
    answer costs more than nothing."""
    log_sink.configure()
    gw = await make_gateway(models=priced())
    prompt, output = wrong
    fields = {"prompt_tokens": prompt, "input_tokens": prompt, "inputTokens": prompt}

    def rewrite(data: Any, index: int) -> Any:
        data = forged(prompt, only=frozenset(fields)).rewrite(data, index)
        if stream:  # the output count stands: a stream of no counts at all was estimated
            return data
        outs = frozenset({"completion_tokens", "output_tokens", "outputTokens"})
        return forged(output, only=outs).rewrite(data, index)

    fake.script(upstream, [Tamper(rewrite)])
    request_id, headers = await ask(gw, api, model, stream)
    _, line = await log_sink.line(request_id)
    assert line["tokens"]["estimated"] is True
    assert line["tokens"]["prompt"] > 0 and line["cost_usd"] > 0
    # a stream whose transcript is not kept (a Messages client caps its output) is
    # estimated from the output the relay counted as it passed
    assert line["tokens"]["completion"] > 0
    if not stream:
        assert float(headers["x-gateway-cost-usd"]) > 0


async def test_a_team_budget_is_not_charged_absurdly(
    fake: FakeProvider, gateway_of: Callable[..., Awaitable[Harness]]
) -> None:
    """A team with $1,000 a month whose provider reports 2**63-1 tokens: charged the
    estimate (well under a cent), still ``ok``, its next request served."""
    files = policy_files(fake.url)
    files["platform.yaml"]["models"].update(priced())
    files["teams/team-a.yaml"]["teams"]["team-a"]["budget"] = {"usd": 1000, "per": "month"}
    gw = await gateway_of(files, admin_key=ADMIN)
    fake.script("fake-model", [forged(HUGE)])
    await ask(gw, "chat", "gpt-test", False)
    await ask(gw, "chat", "gpt-test", True)
    async with aiohttp.ClientSession() as s:
        auth = {"authorization": f"Bearer {ADMIN}"}
        async with s.get(gw.url + "/admin/budgets", headers=auth) as r:
            team = (await r.json())["teams"]["team-a"]
    assert 0 < team["spent_usd"] < 0.01 and team["state"] == "ok"


async def test_embeddings_usage_before_data_is_billed(
    make_gateway: MakeGateway, fake: FakeProvider, log_sink: Sink
) -> None:
    """An embeddings answer whose ``usage`` comes before ``data`` (and one whose usage is
    absurd, and one with none) is billed: its own count, else the estimate."""
    log_sink.configure()
    gw = await make_gateway(
        models={"gpt-emb": {"provider": "fake", "upstream_model": "fake-emb", "price": PRICE}}
    )

    def none(data: Any, index: int = -1) -> Any:
        return {k: v for k, v in data.items() if k != "usage"}

    def first(data: Any, index: int) -> Any:
        return {"usage": {"prompt_tokens": 1234, "total_tokens": 1234}, **none(data)}

    def huge(data: Any, index: int) -> Any:
        return {"usage": {"prompt_tokens": HUGE, "total_tokens": HUGE}, **none(data)}

    fake.script("fake-emb", [Tamper(first), Tamper(huge), Tamper(none)])
    client = gw.async_openai()
    lines = []
    for _ in range(3):
        raw = await client.embeddings.with_raw_response.create(
            model="gpt-emb", input=["a" * 400, "b" * 400]
        )
        raw.parse()
        lines.append((await log_sink.line(raw.headers["x-request-id"]))[1])
    assert lines[0]["tokens"] == {"prompt": 1234, "completion": 0}
    assert lines[0]["cost_usd"] == round(1234 * PRICE["input"] / 1e6, 8)
    for line in lines[1:]:
        assert line["tokens"] == {"prompt": 200, "completion": 0, "estimated": True}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_converse_counts_of_2_63_are_estimated(
    clouds: Clouds,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    stream: bool,
) -> None:
    """Bedrock Converse's usage (the answer's, the stream's ``metadata`` event) of
    2**63-1: estimated, and said."""
    clouds.logs.configure()
    clouds.bedrock.script(NOVA, [forged(HUGE)])
    client = clouds.gw.async_openai()
    if stream:
        async with client.responses.with_streaming_response.create(
            model="nova-pro", input=ASK, max_output_tokens=200, stream=True
        ) as r:
            async for _ in r.iter_lines():
                pass
            request_id = r.headers["x-request-id"]
    else:
        raw = await client.responses.with_raw_response.create(
            model="nova-pro", input=ASK, max_output_tokens=200
        )
        raw.parse()
        request_id = raw.headers["x-request-id"]
    _, line = await clouds.logs.line(request_id)
    assert line["tokens"]["estimated"] is True
    assert 0 < line["tokens"]["prompt"] < 1000 and line["tokens"]["completion"] < 1000
    (said,) = [e for e in clouds.logs.lines() if e["event"] == "usage_implausible"]
    assert said["model"] == "nova-pro" and set(said["fields"]) >= {"input", "output"}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_continued_part_of_2_63_is_estimated(
    make_gateway: MakeGateway, fake: FakeProvider, log_sink: Sink, stream: bool
) -> None:
    """An answer cut at the token limit and continued, whose continuation reports 2**63-1
    tokens: the first part is billed as it came, the second estimated."""
    log_sink.configure()
    gw = await make_gateway(policy={"output_recovery": {"max_continuations": 1}}, models=priced())
    fake.reply["fake-model"] = "word " * 40
    fake.cut_at["fake-model"] = 8
    fake.script("fake-model", [Success(usage={"prompt_tokens": 100, "completion_tokens": 8}),
                               forged(HUGE)])  # fmt: skip
    request_id, _ = await ask(gw, "chat", "gpt-test", stream)
    assert len(fake.requests) == 2
    _, line = await log_sink.line(request_id)
    assert line["tokens"]["estimated"] is True
    assert 100 < line["tokens"]["prompt"] < 1000 and 8 < line["tokens"]["completion"] < 1000
    assert line["cost_usd"] < 0.01
