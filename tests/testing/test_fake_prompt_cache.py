"""The fake providers' prompt caches on real sockets: the official ``anthropic`` and
``openai`` SDKs read the cache counts of a second turn in each API's usage, a fake's
cache is its own (per key and model), scripted errors and token counts leave it alone,
and more than 4 markers get Anthropic's 400; the fake Bedrock (botocore) reports Converse's
and InvokeModel's counts, the fake Vertex shares one cache across access tokens."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import anthropic
import botocore.session
import openai
import pytest
from botocore.config import Config

from gateway.testing import DEFAULT_REPLY, Error, FakeProvider, FakeVertex, Success, tokens_of
from gateway.testing.fake_bedrock import FakeBedrock
from gateway.testing.prompt_cache import PromptCache

MODEL = "fake-model"
REPLY = DEFAULT_REPLY.format(model=MODEL)
SYSTEM = "You are a careful assistant who reads every file twice. " * 100  # 1,400 tokens
MARK = {"type": "ephemeral"}


def marked(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": MARK}]


def anthropic_turn(n: int) -> dict[str, Any]:
    """The body of turn ``n`` (1, 2, ...) of a chat whose marker follows its last message."""
    messages: list[dict[str, Any]] = []
    for i in range(1, n + 1):
        if i > 1:
            messages.append({"role": "assistant", "content": REPLY})
        messages.append({"role": "user", "content": f"Question {i}?"})
    messages[-1] = {"role": "user", "content": marked(messages[-1]["content"])}
    return {"system": [{"type": "text", "text": SYSTEM, "cache_control": MARK}],
            "messages": messages}  # fmt: skip


def prompt_of(n: int) -> int:
    """The fake's prompt tokens of turn ``n``: the system and every message's text."""
    said = [f"Question {i}?" for i in range(1, n + 1)] + [REPLY] * (n - 1)
    return tokens_of(SYSTEM + "".join(said))


@pytest.fixture
async def fp() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as provider:
        yield provider


def ant_client(fp: FakeProvider, key: str = "sk-ant-test") -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=fp.url, api_key=key, max_retries=0, timeout=5)


def oai_client(fp: FakeProvider, key: str = "sk-test") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=fp.url + "/v1", api_key=key, max_retries=0, timeout=5)


async def test_anthropic_second_turn_reads_the_first(fp: FakeProvider) -> None:
    """Turn 1 writes its marked prefix; turn 2, the marker moved to its new last message,
    reads it and writes only what was added; the stream's message_start says the same."""
    async with ant_client(fp) as ant:
        one = await ant.messages.create(model=MODEL, max_tokens=100, **anthropic_turn(1))
        assert one.usage.cache_read_input_tokens == 0
        assert one.usage.cache_creation_input_tokens == prompt_of(1)
        assert one.usage.input_tokens == 0

        two = await ant.messages.create(model=MODEL, max_tokens=100, **anthropic_turn(2))
        assert two.usage.cache_read_input_tokens == prompt_of(1)
        assert two.usage.cache_creation_input_tokens == prompt_of(2) - prompt_of(1)
        assert two.usage.input_tokens == 0

        async with ant.messages.stream(model=MODEL, max_tokens=100, **anthropic_turn(3)) as s:
            events = [e async for e in s]
        start = next(e for e in events if e.type == "message_start")
        assert start.message.usage.cache_read_input_tokens == prompt_of(2)
        assert start.message.usage.cache_creation_input_tokens == prompt_of(3) - prompt_of(2)
    reads = [r.cache_read for r in fp.requests]
    assert reads == [0, prompt_of(1), prompt_of(2)]
    assert fp.cache_reads == sum(reads) and fp.cache_writes == prompt_of(3)


async def test_anthropic_unmarked_and_short_prompts_are_not_cached(fp: FakeProvider) -> None:
    """No marker, no cache; a marked prefix under 1,024 tokens is not cached either."""
    async with ant_client(fp) as ant:
        for _ in range(2):
            r = await ant.messages.create(
                model=MODEL, max_tokens=100, system=SYSTEM,
                messages=[{"role": "user", "content": "Hello"}],
            )  # fmt: skip
            assert (r.usage.cache_read_input_tokens, r.usage.cache_creation_input_tokens) == (0, 0)
            assert r.usage.input_tokens == tokens_of(SYSTEM + "Hello")
            short = await ant.messages.create(
                model=MODEL, max_tokens=100,
                messages=[{"role": "user", "content": marked("Hello " * 100)}],
            )  # fmt: skip
            assert short.usage.cache_read_input_tokens == 0
            assert short.usage.cache_creation_input_tokens == 0
    assert fp.cache_reads == fp.cache_writes == 0


async def test_five_markers_get_anthropics_400(fp: FakeProvider) -> None:
    body = anthropic_turn(3)
    body["messages"] = [
        {**m, "content": marked(m["content"] if isinstance(m["content"], str) else "x")}
        for m in body["messages"]
    ]
    async with ant_client(fp) as ant:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await ant.messages.create(model=MODEL, max_tokens=100, **body)
    assert raised.value.status_code == 400
    error = raised.value.body["error"]
    assert error == {
        "type": "invalid_request_error",
        "message": "A maximum of 4 blocks with cache_control may be provided. Found 6.",
    }
    assert fp.requests[0].cache_write == 0


async def test_openai_chat_and_responses_report_cached_tokens(fp: FakeProvider) -> None:
    """Chat and Responses are cached automatically: a second turn's prompt_tokens count
    every token and cached_tokens the repeated prefix (JSON and the stream's usage)."""
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Question 1?"}]
    second = [*first, {"role": "assistant", "content": REPLY},
              {"role": "user", "content": "Question 2?"}]  # fmt: skip
    async with oai_client(fp) as oai:
        one = await oai.chat.completions.create(model=MODEL, messages=first)
        assert one.usage is not None and one.usage.prompt_tokens_details is not None
        assert one.usage.prompt_tokens_details.cached_tokens == 0
        two = await oai.chat.completions.create(model=MODEL, messages=second)
        assert two.usage is not None and two.usage.prompt_tokens_details is not None
        assert two.usage.prompt_tokens == prompt_of(2)
        assert two.usage.prompt_tokens_details.cached_tokens == prompt_of(1)
        stream = await oai.chat.completions.create(
            model=MODEL, messages=second, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        usage = [c.usage async for c in stream if c.usage is not None]
        assert usage[0].prompt_tokens_details is not None
        assert usage[0].prompt_tokens_details.cached_tokens == prompt_of(2)

        r1 = await oai.responses.create(model=MODEL, instructions=SYSTEM, input="Question 1?")
        r2 = await oai.responses.create(
            model=MODEL, instructions=SYSTEM,
            input=[{"role": "user", "content": "Question 1?"},
                   {"role": "assistant", "content": REPLY},
                   {"role": "user", "content": "Question 2?"}],
        )  # fmt: skip
    assert r1.usage is not None and r1.usage.input_tokens_details.cached_tokens == 0
    assert r2.usage is not None and r2.usage.input_tokens == prompt_of(2)
    assert r2.usage.input_tokens_details.cached_tokens == prompt_of(1)
    assert [r.cache_write for r in fp.requests] == [0] * 5  # OpenAI reports no writes


async def test_caches_are_per_fake_and_per_key() -> None:
    """Two fakes (two deployments) never share a cache, nor two keys of one fake."""
    async with FakeProvider() as a, FakeProvider() as b:
        for fake, key in ((a, "k1"), (b, "k1"), (a, "k2"), (a, "k1")):
            async with ant_client(fake, key) as ant:
                await ant.messages.create(model=MODEL, max_tokens=100, **anthropic_turn(1))
        reads = [r.cache_read for r in [*a.requests, *b.requests]]
        assert reads == [0, 0, prompt_of(1), 0]
        assert [r.key for r in a.requests] == ["k1", "k2", "k1"]
        async with ant_client(a, "k1") as ant:  # another model: another cache
            r = await ant.messages.create(model="other", max_tokens=100, **anthropic_turn(1))
        assert r.usage.cache_read_input_tokens == 0


async def test_errors_and_counts_leave_the_cache_alone(fp: FakeProvider) -> None:
    """A scripted error and a token count neither read nor write; a forced usage wins
    over the cache's counts; prompt_cache = None turns the cache off."""
    fp.push(Error.anthropic_overloaded())
    async with ant_client(fp) as ant:
        with pytest.raises(anthropic.APIStatusError):
            await ant.messages.create(model=MODEL, max_tokens=100, **anthropic_turn(1))
        count = await ant.messages.count_tokens(model=MODEL, **anthropic_turn(1))
        assert count.input_tokens == prompt_of(1)
        r = await ant.messages.create(model=MODEL, max_tokens=100, **anthropic_turn(1))
        assert (r.usage.cache_read_input_tokens, r.usage.cache_creation_input_tokens) == (
            0,
            prompt_of(1),
        )
        fp.push(Success(usage={"prompt_tokens": 50, "completion_tokens": 5}))
        forced = await ant.messages.create(model=MODEL, max_tokens=100, **anthropic_turn(1))
        assert forced.usage.input_tokens == 50
        assert forced.usage.cache_read_input_tokens == 0
        fp.push(Success(usage={"cache_read": 7}))
        read = await ant.messages.create(model=MODEL, max_tokens=100, **anthropic_turn(1))
        assert read.usage.cache_read_input_tokens == 7
        fp.prompt_cache = None
        off = await ant.messages.create(model=MODEL, max_tokens=100, **anthropic_turn(1))
        assert off.usage.cache_read_input_tokens == 0
        assert off.usage.input_tokens == prompt_of(1)
    assert [r.cache_read for r in fp.requests] == [0, 0, 0, prompt_of(1), prompt_of(1), 0]


async def test_a_virtual_clock_expires_entries(fp: FakeProvider) -> None:
    now = [0.0]
    fp.prompt_cache = PromptCache(clock=lambda: now[0], ttl=60)
    async with ant_client(fp) as ant:
        await ant.messages.create(model=MODEL, max_tokens=100, **anthropic_turn(1))
        now[0] = 59
        hit = await ant.messages.create(model=MODEL, max_tokens=100, **anthropic_turn(1))
        now[0] = 119.5  # read at 59: refreshed until 119
        miss = await ant.messages.create(model=MODEL, max_tokens=100, **anthropic_turn(1))
    assert hit.usage.cache_read_input_tokens == prompt_of(1)
    assert miss.usage.cache_read_input_tokens == 0


# --- the cloud fakes ---------------------------------------------------------------------

NOVA = "amazon.nova-pro-v1:0"
CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
POINT = {"cachePoint": {"type": "default"}}


def bedrock_client(fake: FakeBedrock) -> Any:
    return botocore.session.get_session().create_client(
        "bedrock-runtime", region_name="us-east-1", endpoint_url=fake.url,
        config=Config(retries={"total_max_attempts": 1}),
        aws_access_key_id=fake.access_key, aws_secret_access_key=fake.secret_key,
    )  # fmt: skip


async def call(fn: Callable[..., Any], **kwargs: Any) -> Any:
    return await asyncio.to_thread(fn, **kwargs)


def converse_turn(n: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for i in range(1, n + 1):
        if i > 1:
            messages.append({"role": "assistant", "content": [{"text": REPLY}]})
        messages.append({"role": "user", "content": [{"text": f"Question {i}?"}]})
    messages[-1]["content"].append(POINT)
    return {"system": [{"text": SYSTEM}, POINT], "messages": messages}


async def test_converse_second_turn_reads_the_first() -> None:
    """Converse's cache points mark the block before them; the second turn reports
    cacheReadInputTokens (and the stream's metadata event), inputTokens the rest."""
    async with FakeBedrock() as fake:
        c = bedrock_client(fake)
        try:
            one = await call(c.converse, modelId=NOVA, **converse_turn(1))
            two = await call(c.converse, modelId=NOVA, **converse_turn(2))
            r = await call(c.converse_stream, modelId=NOVA, **converse_turn(3))
            events = await asyncio.to_thread(lambda: list(r["stream"]))
            plain = await call(c.converse, modelId=NOVA, messages=[
                {"role": "user", "content": [{"text": "Hello"}]}])  # fmt: skip
            six = converse_turn(1)
            six["messages"][0]["content"] = [{"text": "x"}, POINT] * 5
            with pytest.raises(c.exceptions.ValidationException) as raised:
                await call(c.converse, modelId=NOVA, **six)
        finally:
            c.close()
    assert one["usage"]["cacheWriteInputTokens"] == prompt_of(1)
    assert one["usage"]["cacheReadInputTokens"] == 0 == one["usage"]["inputTokens"]
    usage = two["usage"]
    assert usage["cacheReadInputTokens"] == prompt_of(1)
    assert usage["cacheWriteInputTokens"] == prompt_of(2) - prompt_of(1)
    assert usage["inputTokens"] == 0
    assert usage["totalTokens"] == prompt_of(2) + usage["outputTokens"]
    (meta,) = [e["metadata"] for e in events if "metadata" in e]
    assert meta["usage"]["cacheReadInputTokens"] == prompt_of(2)
    assert "cacheReadInputTokens" not in plain["usage"]  # no cache used: left out
    assert "A maximum of 4 blocks with cache_control may be provided. Found 6." in str(raised.value)


async def test_invoke_model_reports_anthropics_counts() -> None:
    """InvokeModel with Anthropic's markers: every key of the fake shares the account's
    cache for the model."""
    async with FakeBedrock() as fake:
        fake.add_key("AKIAOTHERKEY00000002", "other/secret")
        c = bedrock_client(fake)
        other = botocore.session.get_session().create_client(
            "bedrock-runtime", region_name="us-east-1", endpoint_url=fake.url,
            aws_access_key_id="AKIAOTHERKEY00000002", aws_secret_access_key="other/secret",
        )  # fmt: skip
        try:
            body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 100,
                    **anthropic_turn(1)}  # fmt: skip
            r1 = await call(c.invoke_model, modelId=CLAUDE, body=json.dumps(body))
            r2 = await call(other.invoke_model, modelId=CLAUDE, body=json.dumps(body))
            one, two = json.loads(r1["body"].read()), json.loads(r2["body"].read())
        finally:
            c.close()
            other.close()
    assert one["usage"]["cache_creation_input_tokens"] == prompt_of(1)
    assert two["usage"]["cache_read_input_tokens"] == prompt_of(1)
    assert two["usage"]["input_tokens"] == 0


async def test_vertex_shares_its_cache_across_access_tokens() -> None:
    """A Vertex project's cache outlives the access token that wrote it."""
    model = "claude-sonnet-4-5@20250929"
    path = f"/v1/projects/p/locations/us-east5/publishers/anthropic/models/{model}:rawPredict"
    body = {"anthropic_version": "vertex-2023-10-16", "max_tokens": 100, **anthropic_turn(1)}
    async with FakeVertex() as fv, aiohttp.ClientSession() as session:
        usages = []
        for token in ("ya29.first", "ya29.second"):
            headers = {"authorization": f"Bearer {token}"}
            async with session.post(fv.url + path, json=body, headers=headers) as resp:
                assert resp.status == 200
                usages.append((await resp.json())["usage"])
    assert usages[0]["cache_creation_input_tokens"] == prompt_of(1)
    assert usages[1]["cache_read_input_tokens"] == prompt_of(1)
