"""A stream the client leaves just before its end is billed what it delivered: at least the
output the client was sent, whatever the policy (with a max-tokens cap, the usual case, no
transcript is kept), in the access log, ``tokens_per_minute``, the cost metric and the
team's budget; on each client API, from a provider of the same format and a translated
one. A Messages provider that reports no usage at all is billed its output, estimated.

Real sockets: the gateway in front of the scripted fake provider, the official SDKs as
clients. The fake sends each delta after a short wait, so that the client has closed
before the provider's last delta (and its usage) reaches the gateway."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import openai
import pytest

from gateway.testing import Delay, FakeProvider, Success, Tamper
from tests.harness import Harness, policy_files
from tests.log_sink import Sink

Start = Callable[..., Awaitable[Harness]]
ADMIN = "cut-streams-admin-key"
ASK = [{"role": "user", "content": "Tell me a long story."}]
#: USD per million tokens: a token costs a thousandth of a dollar.
PRICE = {"input": 1000.0, "output": 1000.0}
#: 300 tokens of answer (1,200 characters) in 20 deltas of 60.
REPLY = "The gateway bills what it delivered. " * 32 + "The end, at last"
CHUNKS = 20
WAIT_S = 0.015  # before each delta of the provider's stream
#: Under the delivered output (19 of 20 deltas, 285 tokens), far over the prompt alone.
TOKENS_PER_MINUTE = 200
CAP = 2000  # the client's max tokens: above the answer, so nothing is cut at the limit
#: client API, model (its provider's format: same or translated)
PAIRS = [
    ("chat", "gpt-priced"),
    ("chat", "claude-priced"),
    ("responses", "gpt-priced"),
    ("responses", "claude-priced"),
    ("messages", "claude-priced"),
    ("messages", "gpt-priced"),
]
UPSTREAM = {"gpt-priced": "fake-model", "claude-priced": "claude-model"}


@pytest.fixture
def priced(fake: FakeProvider, gateway_of: Start) -> Start:
    """A gateway whose team-a has a budget and ``tokens_per_minute``, with two priced
    models: one on the OpenAI-format fake, one on the Anthropic-format fake."""

    async def start() -> Harness:
        assert len(REPLY) == 1200
        files = policy_files(fake.url, limits={"tokens_per_minute": TOKENS_PER_MINUTE})
        models = files["platform.yaml"]["models"]
        models["gpt-priced"] = {
            "provider": "fake",
            "upstream_model": "fake-model",
            "upstream_api": ["chat", "responses"],
            "price": PRICE,
        }
        models["claude-priced"] = {"provider": "fake-anthropic",
                                   "upstream_model": "claude-model", "price": PRICE}  # fmt: skip
        files["teams/team-a.yaml"]["teams"]["team-a"]["budget"] = {"usd": 100, "per": "day"}
        fake.chunks = CHUNKS
        for upstream in UPSTREAM.values():
            fake.reply[upstream] = REPLY
        return await gateway_of(files, admin_key=ADMIN)

    return start


async def leave_before_the_end(gw: Harness, api: str, model: str) -> tuple[str, str]:
    """Stream ``model`` on ``api`` with a max-tokens cap, read every text delta but the
    last, and close the connection: the text read and the request id."""
    text, n = "", 0
    if api == "chat":
        chat = await gw.async_openai().chat.completions.with_raw_response.create(
            model=model, messages=ASK, max_tokens=CAP, stream=True
        )
        stream: Any = chat.parse()
        headers = chat.headers
        async for chunk in stream:
            piece = "".join(c.delta.content or "" for c in chunk.choices)
            if piece:
                text, n = text + piece, n + 1
            if n == CHUNKS - 1:
                break
    elif api == "responses":
        resp = await gw.async_openai().responses.with_raw_response.create(
            model=model, input=ASK, max_output_tokens=CAP, stream=True
        )
        stream, headers = resp.parse(), resp.headers
        async for event in stream:
            if event.type == "response.output_text.delta":
                text, n = text + event.delta, n + 1
            if n == CHUNKS - 1:
                break
    else:
        msg = await gw.async_anthropic().messages.with_raw_response.create(
            model=model, messages=ASK, max_tokens=CAP, stream=True
        )
        stream, headers = await msg.parse(), msg.headers
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                text, n = text + event.delta.text, n + 1
            if n == CHUNKS - 1:
                break
    await stream.close()  # the connection goes with the unread rest
    assert n == CHUNKS - 1 and REPLY.startswith(text)
    return text, headers["x-request-id"]


async def spent(gw: Harness) -> float:
    auth = {"authorization": f"Bearer {ADMIN}"}
    async with (
        aiohttp.ClientSession() as s,
        s.get(gw.url + "/admin/budgets", headers=auth) as r,
    ):
        assert r.status == 200
        return float((await r.json())["teams"]["team-a"]["spent_usd"])


def tokens(text: str) -> int:
    """The text's tokens as the gateway's estimate counts them (ASCII: 4 characters each)."""
    return math.ceil(len(text) / 4)


@pytest.mark.parametrize(("api", "model"), PAIRS)
async def test_a_stream_left_before_its_end_is_billed_what_it_delivered(
    priced: Start, fake: FakeProvider, log_sink: Sink, api: str, model: str
) -> None:
    """Left after 19 of 20 deltas: the access log's completion tokens and cost, the cost
    metric and the budget's spend count at least the 285 tokens delivered (estimated),
    and the team's next request is over its 200 tokens a minute."""
    log_sink.configure()
    gw = await priced()
    fake.script(UPSTREAM[model], [Delay(WAIT_S)])
    text, request_id = await leave_before_the_end(gw, api, model)
    delivered = tokens(text)
    assert delivered == 285
    _, line = await log_sink.line(request_id)
    assert line["tokens"]["completion"] >= delivered
    assert line["tokens"]["estimated"] is True
    least = delivered * PRICE["output"] / 1e6
    assert line["cost_usd"] >= least
    cost = gw.metric("llm_gateway_cost_usd_total", team="team-a", model=model, kind="answer")
    assert cost >= least
    assert await spent(gw) >= least
    with pytest.raises(openai.RateLimitError):
        await gw.async_openai().chat.completions.create(model="gpt-test", messages=ASK)


#: A tool call whose arguments are 1,195 characters (in 20 deltas of 60 but the last).
STORY = {"name": "write_story", "arguments": {"story": "x" * 1182}}


@pytest.mark.parametrize("api", ["chat", "messages"])
async def test_a_tool_call_left_before_its_end_is_billed_its_arguments(
    priced: Start, fake: FakeProvider, log_sink: Sink, api: str
) -> None:
    """A tool call's arguments are output too: left after 19 of 20 argument deltas, on a
    chat stream with no cap (its transcript is kept: a continuation may need it) and on a
    Messages one (none kept), the arguments delivered are billed."""
    log_sink.configure()
    gw = await priced()
    model = "gpt-priced" if api == "chat" else "claude-priced"
    fake.script(UPSTREAM[model], [(Success(tool_call=STORY), Delay(WAIT_S))])
    args, n = "", 0
    if api == "chat":
        raw: Any = await gw.async_openai().chat.completions.with_raw_response.create(
            model=model, messages=ASK, stream=True
        )
        stream = raw.parse()
        async for chunk in stream:
            for c in chunk.choices:
                for call in c.delta.tool_calls or []:
                    if call.function is not None and call.function.arguments:
                        args, n = args + call.function.arguments, n + 1
            if n == CHUNKS - 1:
                break
    else:
        raw = await gw.async_anthropic().messages.with_raw_response.create(
            model=model, messages=ASK, max_tokens=CAP, stream=True
        )
        stream = await raw.parse()
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                args, n = args + event.delta.partial_json, n + 1
            if n == CHUNKS - 1:
                break
    await stream.close()
    assert n == CHUNKS - 1 and len(args) == 1140
    _, line = await log_sink.line(raw.headers["x-request-id"])
    assert line["tokens"]["completion"] >= tokens(args) == 285
    assert line["cost_usd"] >= 285 * PRICE["output"] / 1e6


def no_usage(data: Any, index: int) -> Any:
    """A Messages stream event without its usage (message_start's and message_delta's)."""
    if isinstance(data, dict):
        message = data.get("message")
        if isinstance(message, dict):
            message.pop("usage", None)
        data.pop("usage", None)
    return data


async def test_a_messages_stream_without_usage_is_billed_its_output(
    priced: Start, fake: FakeProvider, log_sink: Sink
) -> None:
    """A Messages provider whose stream reports no usage: read in full, the answer's 300
    tokens are billed (estimated), not 0."""
    log_sink.configure()
    gw = await priced()
    fake.script("claude-model", [Tamper(no_usage)])
    msg = await gw.async_anthropic().messages.with_raw_response.create(
        model="claude-priced", messages=ASK, max_tokens=CAP, stream=True
    )
    text = ""
    async for event in await msg.parse():
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            text += event.delta.text
    assert text == REPLY
    _, line = await log_sink.line(msg.headers["x-request-id"])
    assert line["tokens"]["completion"] >= tokens(REPLY) == 300
    assert line["tokens"]["estimated"] is True
    assert line["cost_usd"] >= 300 * PRICE["output"] / 1e6
