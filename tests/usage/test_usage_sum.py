"""The usage of an answer in several parts is the sum of its parts, the same in the client's
usage block, the access log and ``llm_gateway_tokens_total``: a continued JSON answer, a
continued stream, a stream resumed with prefill and a regenerated one, on the three client
APIs, through the real gateway and the scripted fake provider."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.formats import CHAT, MESSAGES, RESPONSES
from gateway.recovery.billing import estimate
from gateway.testing import CutAfter, FakeProvider, Success
from gateway.testing.answer import split_pieces
from tests.harness import Harness
from tests.log_sink import Sink

REPLY = (
    "Parts of one answer are billed once each, and the client sees their sum in its usage,"
    " as the access log and the metrics do."
)  # 125 characters: cut at 16 tokens (64 characters), two parts
ASK = "Tell me about usage."
POLICY = {
    "output_recovery": {"max_continuations": 3, "respect_client_max_tokens": False},
    "stream": {"on_midstream_failure": "continue"},
}
# what the fake reports for each part (each answer part's usage differs)
U1 = {"prompt_tokens": 100, "completion_tokens": 16}
U2 = {"prompt_tokens": 140, "completion_tokens": 15}
APIS = ["chat", "messages", "responses"]
FMT = {"chat": CHAT, "messages": MESSAGES, "responses": RESPONSES}


def body_of(api: str, model: str) -> dict[str, Any]:
    """The request as the client sends it (what a part without usage is estimated from)."""
    if api == "responses":
        return {"model": model, "input": ASK}
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": ASK}]}
    if api == "messages":
        body["max_tokens"] = 1000
    return body


async def ask(gw: Harness, api: str, model: str, stream: bool) -> tuple[str, tuple[int, int]]:
    """The answer's text and its usage (every prompt token, completion tokens) as the
    client's SDK gives them."""
    body = body_of(api, model)
    if api == "chat":
        c = gw.async_openai()
        if not stream:
            r = await c.chat.completions.create(**body)
            assert r.usage is not None
            return r.choices[0].message.content or "", (
                r.usage.prompt_tokens,
                r.usage.completion_tokens,
            )
        text, usage = "", None
        async for ch in await c.chat.completions.create(
            **body, stream=True, stream_options={"include_usage": True}
        ):
            usage = ch.usage or usage
            text += "".join(x.delta.content or "" for x in ch.choices)
        assert usage is not None
        return text, (usage.prompt_tokens, usage.completion_tokens)
    if api == "messages":
        a = gw.async_anthropic()
        if stream:
            async with a.messages.stream(**body) as s:
                m = await s.get_final_message()
        else:
            m = await a.messages.create(**body)
        u = m.usage
        prompt = u.input_tokens + (u.cache_read_input_tokens or 0)
        prompt += u.cache_creation_input_tokens or 0
        text = "".join(b.text for b in m.content if b.type == "text")
        return text, (prompt, u.output_tokens)
    o = gw.async_openai()
    if not stream:
        r = await o.responses.create(**body)
        assert r.usage is not None
        return r.output_text, (r.usage.input_tokens, r.usage.output_tokens)
    final = None
    async for ev in await o.responses.create(**body, stream=True):
        if ev.type in ("response.completed", "response.incomplete"):
            final = ev.response
    assert final is not None and final.usage is not None
    return final.output_text, (final.usage.input_tokens, final.usage.output_tokens)


async def access_log(log_sink: Sink) -> dict[str, Any]:
    """The one request_completed line (written once the answer was sent)."""
    deadline = time.monotonic() + 5
    while True:
        done = [e for e in log_sink.lines() if e.get("event") == "request_completed"]
        if done:
            (line,) = done
            return line
        assert time.monotonic() < deadline, "no request_completed line"
        await asyncio.sleep(0.01)


async def tokens_metric(gw: Harness, model: str) -> tuple[int, int]:
    """``llm_gateway_tokens_total`` of ``model`` as ``GET /metrics`` shows it."""
    async with aiohttp.ClientSession() as s, s.get(gw.url + "/metrics") as r:
        text = await r.text()
    found = {"prompt": 0, "completion": 0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "llm_gateway_tokens_total" and labels.get("model") == model:
                found[labels["kind"]] = int(sample.value)
    return found["prompt"], found["completion"]


async def agree(
    gw: Harness, log_sink: Sink, api: str, model: str, stream: bool
) -> tuple[str, tuple[int, int], dict[str, Any]]:
    """Ask once; the client's usage, the access log and the metric agree: the usage."""
    text, client = await ask(gw, api, model, stream)
    line = await access_log(log_sink)
    assert (line["tokens"]["prompt"], line["tokens"]["completion"]) == client
    assert await tokens_metric(gw, model) == client
    return text, client, line


def summed(*parts: dict[str, int]) -> tuple[int, int]:
    return sum(p["prompt_tokens"] for p in parts), sum(p["completion_tokens"] for p in parts)


@pytest.fixture
async def usage_gw(make_gateway: Callable[..., Awaitable[Harness]], log_sink: Sink) -> Harness:
    log_sink.configure()
    return await make_gateway(policy=POLICY)


MODEL = {"chat": "gpt-test", "messages": "claude-test", "responses": "gpt-test"}
UPSTREAM = {"gpt-test": "fake-model", "claude-test": "claude-test", "gpt-prefill": "gpt-prefill"}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", APIS)
async def test_a_continued_answer_counts_every_part(
    usage_gw: Harness, fake: FakeProvider, log_sink: Sink, api: str, stream: bool
) -> None:
    """An answer cut at the token limit and continued once: the client's usage, the access
    log and the token metric are the two parts' usage summed."""
    model = MODEL[api]
    upstream = UPSTREAM[model]
    fake.reply[upstream] = REPLY
    fake.cut_at[upstream] = 16
    fake.script(upstream, [Success(usage=U1), Success(usage=U2)])
    text, usage, line = await agree(usage_gw, log_sink, api, model, stream)
    assert text == REPLY and len(fake.requests) == 2
    assert usage == summed(U1, U2)
    assert "estimated" not in line["tokens"]


PREFILL_MODEL = {"chat": "gpt-prefill", "messages": "claude-test", "responses": "gpt-prefill"}


@pytest.mark.parametrize("api", APIS)
async def test_a_stream_resumed_with_prefill_counts_both_attempts(
    usage_gw: Harness, fake: FakeProvider, log_sink: Sink, api: str
) -> None:
    """A stream cut mid-answer and resumed with prefill: both attempts are parts of the
    answer; the cut one (no usage event) is estimated from the request and the text it
    sent, and the tokens are marked estimated."""
    model = PREFILL_MODEL[api]
    fake.reply[UPSTREAM[model]] = REPLY
    fake.script(UPSTREAM[model], [(Success(usage=U1), CutAfter(3)), Success(usage=U2)])
    text, usage, line = await agree(usage_gw, log_sink, api, model, True)
    assert text == REPLY
    first = estimate(body_of(api, model), FMT[api], len("".join(split_pieces(REPLY, 8)[:3])))
    if api == "messages":  # its message_start told the prompt; the output is estimated
        first.input = U1["prompt_tokens"]
    assert usage == (first.input + U2["prompt_tokens"], first.output + U2["completion_tokens"])
    assert line["tokens"]["estimated"] is True


REGENERATE_MODEL = {"chat": "gpt-test", "messages": "claude-backup", "responses": "gpt-test"}


@pytest.mark.parametrize("api", APIS)
async def test_a_regenerated_stream_counts_the_new_answer(
    usage_gw: Harness, fake: FakeProvider, log_sink: Sink, api: str
) -> None:
    """A stream cut mid-answer and regenerated: the answer's usage is the regenerated
    attempt's own (the cut attempt is recovery, not in the client's usage)."""
    model = REGENERATE_MODEL[api]
    fake.reply[UPSTREAM.get(model, model)] = REPLY
    fake.script(UPSTREAM.get(model, model), [(Success(usage=U1), CutAfter(3)), Success(usage=U2)])
    text, usage, _ = await agree(usage_gw, log_sink, api, model, True)
    assert text == REPLY
    assert usage == summed(U2)


@pytest.mark.parametrize(
    ("api", "model"),
    [("chat", "claude-test"), ("responses", "claude-test"), ("messages", "gpt-test")],
)
async def test_a_translated_stream_continued_counts_every_part(
    usage_gw: Harness, fake: FakeProvider, log_sink: Sink, api: str, model: str
) -> None:
    """A client on a model of another format (a chat client on an Anthropic-format model,
    say), its stream continued: the usage the client reads is the parts' sum."""
    upstream = UPSTREAM[model]
    fake.reply[upstream] = REPLY
    fake.cut_at[upstream] = 16
    fake.script(upstream, [Success(usage=U1), Success(usage=U2)])
    text, usage, _ = await agree(usage_gw, log_sink, api, model, True)
    assert text == REPLY
    assert usage == summed(U1, U2)


async def test_a_translated_stream_resumed_counts_every_part(
    usage_gw: Harness, fake: FakeProvider, log_sink: Sink
) -> None:
    """A chat client on an Anthropic-format model, its stream cut and resumed with prefill:
    the cut attempt's prompt as its ``message_start`` counted it (the client's format has
    no usage before the end, the gateway read it all the same), its output estimated from
    what it delivered, plus the resumed attempt's usage."""
    fake.reply["claude-test"] = REPLY
    fake.script("claude-test", [(Success(usage=U1), CutAfter(3)), Success(usage=U2)])
    text, usage, line = await agree(usage_gw, log_sink, "chat", "claude-test", True)
    assert text == REPLY
    first = estimate(body_of("chat", "x"), CHAT, len("".join(split_pieces(REPLY, 8)[:3])))
    first.input = U1["prompt_tokens"]  # its message_start told the prompt
    assert usage == (first.input + U2["prompt_tokens"], first.output + U2["completion_tokens"])
    assert line["tokens"]["estimated"] is True


async def test_tokens_per_minute_counts_the_recovery_too(
    make_gateway: Callable[..., Awaitable[Harness]], fake: FakeProvider, log_sink: Sink
) -> None:
    """A regenerated stream: its answer (155 tokens) is under the team's 200 tokens a
    minute, but the cut attempt the provider billed (100 prompt tokens and more) counts
    too: the next request is refused."""
    log_sink.configure()
    gw = await make_gateway(policy=POLICY, limits={"tokens_per_minute": 200})
    fake.reply["claude-backup"] = REPLY
    fake.script("claude-backup", [(Success(usage=U1), CutAfter(3)), Success(usage=U2)])
    _, usage, _ = await agree(gw, log_sink, "messages", "claude-backup", True)
    assert usage == summed(U2) and sum(usage) < 200
    with pytest.raises(openai.RateLimitError):
        await gw.async_openai().chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": ASK}]
        )


async def test_a_translated_stream_is_counted_when_the_client_did_not_ask(
    usage_gw: Harness, fake: FakeProvider, log_sink: Sink
) -> None:
    """A chat client that did not ask for usage, on an Anthropic-format model: the
    provider's counts are in the access log (not estimated), and no usage chunk reaches
    the client."""
    fake.script("claude-test", [Success(usage=U1)])
    chunks = [
        c
        async for c in await usage_gw.async_openai().chat.completions.create(
            model="claude-test", messages=[{"role": "user", "content": ASK}], stream=True
        )
    ]
    assert chunks and all(c.usage is None and c.choices for c in chunks)
    line = await access_log(log_sink)
    assert line["tokens"] == {"prompt": 100, "completion": 16}
