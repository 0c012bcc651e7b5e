"""The fake provider speaks the real wire formats: the official SDKs parse it.

Every test points the official ``openai`` / ``anthropic`` SDK (or a raw aiohttp
client, where the bytes matter) straight at a :class:`FakeProvider`.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

try:  # the SDKs moved from httpx to httpx2; a cut stream may surface its error raw
    import httpx2 as _httpx
except ImportError:  # pragma: no cover
    import httpx as _httpx

from gateway.testing import (
    DEFAULT_REPLY,
    CutAfter,
    Delay,
    Error,
    ErrorEventAfter,
    FakeProvider,
    Hang,
    HeadersThenSilence,
    MalformedEventAt,
    NoDone,
    Reset,
    SlowFirstByte,
    StallAfter,
    Success,
    tokens_of,
)
from tests.waiting import eventually

MODEL = "fake-model"
REPLY = DEFAULT_REPLY.format(model=MODEL)
HELLO = [{"role": "user", "content": "Hello there"}]
WEATHER_TOOL_OPENAI = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
WEATHER_TOOL_ANTHROPIC = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": WEATHER_TOOL_OPENAI["function"]["parameters"],
}
WEATHER_TOOL_RESPONSES = {"type": "function", **WEATHER_TOOL_OPENAI["function"]}
ASK_WEATHER = "What is the weather in Paris? Use get_weather."
#: What an Anthropic SDK stream raises when the connection drops mid-body.
ANTHROPIC_CUT_ERRORS = (anthropic.APIConnectionError, _httpx.TransportError)


@pytest.fixture
async def fp() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as provider:
        yield provider


@pytest.fixture
async def oai(fp: FakeProvider) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=fp.url + "/v1", api_key="sk-test", max_retries=0, timeout=5
    ) as client:
        yield client


@pytest.fixture
async def ant(fp: FakeProvider) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        base_url=fp.url, api_key="sk-ant-test", max_retries=0, timeout=5
    ) as client:
        yield client


async def raw_post(fp: FakeProvider, path: str, body: dict[str, Any]) -> tuple[int, str]:
    """POST ``body`` and return the status and the whole body text."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(fp.url + path, json=body) as resp,
    ):
        return resp.status, await resp.text()


def sse_data(text: str) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order."""
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


# --- OpenAI chat completions ---------------------------------------------------------


async def test_chat_plain(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """A chat completion answers the default reply, echoes the model, counts tokens."""
    resp = await oai.chat.completions.create(model=MODEL, messages=HELLO)
    assert resp.choices[0].message.content == REPLY
    assert resp.choices[0].finish_reason == "stop"
    assert resp.model == MODEL
    assert resp.object == "chat.completion"
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == math.ceil(len("Hello there") / 4)
    assert resp.usage.completion_tokens == tokens_of(REPLY)
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


async def test_chat_reply_configurable(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """``fp.reply[model]`` sets the answer of one model."""
    fp.reply["m2"] = "Custom answer."
    resp = await oai.chat.completions.create(model="m2", messages=HELLO)
    assert resp.choices[0].message.content == "Custom answer."
    assert resp.model == "m2"


async def test_chat_stream(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """A stream sends the reply in ``chunks`` pieces, a finish chunk and a usage chunk."""
    stream = await oai.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, finishes, usage = [], [], None
    async for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        assert chunk.model == MODEL
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    assert "".join(pieces) == REPLY
    assert len(pieces) == 8
    assert finishes == ["stop"]
    assert usage is not None
    assert usage.completion_tokens == tokens_of(REPLY)


async def test_chat_stream_wire_ends_with_done(fp: FakeProvider) -> None:
    """On the wire the stream ends with ``data: [DONE]``, after the finish chunk."""
    fp.chunks = 3
    status, text = await raw_post(
        fp, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "stream": True}
    )
    assert status == 200
    data = sse_data(text)
    assert data[-1] == "[DONE]"
    assert json.loads(data[-2])["choices"][0]["finish_reason"] == "stop"
    assert len(data) == 1 + 3 + 1 + 1  # role, pieces, finish, [DONE]


async def test_chat_tool_call(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """A user message naming an offered tool gets a tool call with schema-made arguments."""
    resp = await oai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": ASK_WEATHER}],
        tools=[WEATHER_TOOL_OPENAI],
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "fake city", "unit": "celsius"}


async def test_chat_tool_call_stream(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """Streamed tool calls arrive as tool_call deltas the SDK's accumulator joins."""
    async with oai.chat.completions.stream(
        model=MODEL,
        messages=[{"role": "user", "content": ASK_WEATHER}],
        tools=[WEATHER_TOOL_OPENAI],
    ) as stream:
        final = await stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] == "fake city"


async def test_chat_tool_result_answer(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """After a tool result the answer is text mentioning the result."""
    resp = await oai.chat.completions.create(
        model=MODEL,
        tools=[WEATHER_TOOL_OPENAI],
        messages=[
            {"role": "user", "content": ASK_WEATHER},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"},
        ],
    )
    assert resp.choices[0].finish_reason == "stop"
    assert "18C and sunny" in (resp.choices[0].message.content or "")


# --- OpenAI Responses, completions, embeddings, models -------------------------------


async def test_responses_plain(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """A Responses call answers a completed response with output_text and usage."""
    resp = await oai.responses.create(model=MODEL, input="Hello there", instructions="Be brief")
    assert resp.status == "completed"
    assert resp.output_text == REPLY
    assert resp.model == MODEL
    assert resp.usage is not None
    assert resp.usage.input_tokens == math.ceil(len("Be briefHello there") / 4)
    assert resp.usage.output_tokens == tokens_of(REPLY)


async def test_responses_stream_events(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """A Responses stream sends the real event sequence with increasing sequence numbers."""
    stream = await oai.responses.create(model=MODEL, input="Hello there", stream=True)
    kinds, seqs, text = [], [], ""
    async for event in stream:
        kinds.append(event.type)
        seqs.append(event.sequence_number)
        if event.type == "response.output_text.delta":
            text += event.delta
    assert text == REPLY
    assert seqs == list(range(len(seqs)))
    deltas = ["response.output_text.delta"] * 8
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


async def test_responses_stream_helper(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """The SDK's Responses stream accumulator builds the final response."""
    async with oai.responses.stream(model=MODEL, input="Hello there") as stream:
        final = await stream.get_final_response()
    assert final.output_text == REPLY
    assert final.status == "completed"


async def test_responses_function_call_stream(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """Responses tool calls stream as function_call items with argument deltas."""
    stream = await oai.responses.create(
        model=MODEL,
        input=ASK_WEATHER,
        tools=[WEATHER_TOOL_RESPONSES],
        stream=True,
    )
    args, final = "", None
    async for event in stream:
        if event.type == "response.function_call_arguments.delta":
            args += event.delta
        if event.type == "response.completed":
            final = event.response
    assert json.loads(args)["city"] == "fake city"
    assert final is not None
    item = final.output[0]
    assert item.type == "function_call"
    assert item.name == "get_weather"
    assert item.arguments == args


async def test_completions_plain_and_stream(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """The legacy completions endpoint answers JSON and streams."""
    resp = await oai.completions.create(model=MODEL, prompt="Say hi")
    assert resp.choices[0].text == REPLY
    assert resp.choices[0].finish_reason == "stop"
    stream = await oai.completions.create(model=MODEL, prompt="Say hi", stream=True)
    text = "".join([c.choices[0].text async for c in stream if c.choices])
    assert text == REPLY


async def test_embeddings(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """Embeddings are deterministic vectors (base64 as the SDK asks, or floats)."""
    resp = await oai.embeddings.create(model="embed", input=["a", "bb"])
    assert [d.index for d in resp.data] == [0, 1]
    assert len(resp.data[0].embedding) == 16
    again = await oai.embeddings.create(model="embed", input="a", encoding_format="float")
    assert again.data[0].embedding == pytest.approx(resp.data[0].embedding, rel=1e-5)
    assert resp.data[0].embedding != resp.data[1].embedding
    assert resp.usage.prompt_tokens == 2


async def test_models(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """GET /v1/models lists the models in OpenAI's list format."""
    fp.reply["other"] = "x"
    ids = [m.id async for m in oai.models.list()]
    assert ids == [MODEL, "other"]


# --- Anthropic Messages --------------------------------------------------------------


async def test_messages_plain(fp: FakeProvider, ant: anthropic.AsyncAnthropic) -> None:
    """A Messages call answers one text block, end_turn and usage."""
    msg = await ant.messages.create(model=MODEL, max_tokens=1024, system="Be brief", messages=HELLO)
    assert msg.content[0].type == "text"
    assert msg.content[0].text == REPLY
    assert msg.stop_reason == "end_turn"
    assert msg.model == MODEL
    assert msg.usage.input_tokens == math.ceil(len("Be briefHello there") / 4)
    assert msg.usage.output_tokens == tokens_of(REPLY)


async def test_messages_stream(fp: FakeProvider, ant: anthropic.AsyncAnthropic) -> None:
    """A Messages stream is parsed by the SDK's accumulator."""
    async with ant.messages.stream(model=MODEL, max_tokens=1024, messages=HELLO) as stream:
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(pieces) == REPLY
    assert len(pieces) == 8
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == tokens_of(REPLY)


async def test_messages_stream_event_order(fp: FakeProvider) -> None:
    """The raw Anthropic stream has the real event order, ``event:`` lines included."""
    fp.chunks = 2
    body = {"model": MODEL, "max_tokens": 50, "messages": HELLO, "stream": True}
    _, text = await raw_post(fp, "/v1/messages", body)
    names = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


async def test_messages_tool_use(fp: FakeProvider, ant: anthropic.AsyncAnthropic) -> None:
    """Anthropic tool use: a tool_use block and stop_reason tool_use, plain and streamed."""
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 1024,
        "tools": [WEATHER_TOOL_ANTHROPIC],
        "messages": [{"role": "user", "content": ASK_WEATHER}],
    }
    msg = await ant.messages.create(**kwargs)
    assert msg.stop_reason == "tool_use"
    block = msg.content[0]
    assert block.type == "tool_use"
    assert block.id.startswith("toolu_")
    assert block.name == "get_weather"
    assert block.input == {"city": "fake city", "unit": "celsius"}
    async with ant.messages.stream(**kwargs) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.content[0].type == "tool_use"
    assert final.content[0].input == {"city": "fake city", "unit": "celsius"}


async def test_messages_tool_result(fp: FakeProvider, ant: anthropic.AsyncAnthropic) -> None:
    """After an Anthropic tool_result the answer mentions the result."""
    msg = await ant.messages.create(
        model=MODEL,
        max_tokens=1024,
        tools=[WEATHER_TOOL_ANTHROPIC],
        messages=[
            {"role": "user", "content": ASK_WEATHER},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "rain"}],
            },
        ],
    )
    assert msg.stop_reason == "end_turn"
    assert "rain" in msg.content[0].text


# --- errors --------------------------------------------------------------------------

OPENAI_ERRORS = [
    (Error.openai_rate_limit(retry_after=3), openai.RateLimitError, 429),
    (Error.openai_quota(), openai.RateLimitError, 429),
    (Error.openai_server(), openai.InternalServerError, 500),
    (Error.openai_server(502), openai.InternalServerError, 502),
    (Error.overloaded_503(), openai.InternalServerError, 503),
    (Error.unauthorized(), openai.AuthenticationError, 401),
    (Error.bad_request("nope"), openai.BadRequestError, 400),
    (Error.context_length(8192, 9100), openai.BadRequestError, 400),
    (Error.context_length(40960, 40961, style="vllm"), openai.BadRequestError, 400),
    (Error.zhipu(1302), openai.RateLimitError, 429),
    (Error.zhipu(1261), openai.BadRequestError, 400),
    (Error.anthropic_overloaded(), openai.APIStatusError, 529),
    (Error(409, {"error": {"message": "conflict"}}), openai.ConflictError, 409),
]
ANTHROPIC_ERRORS = [
    (Error.anthropic_overloaded(), anthropic.OverloadedError, 529),
    (Error.anthropic_rate_limit(retry_after=7), anthropic.RateLimitError, 429),
    (Error.anthropic_server(), anthropic.InternalServerError, 500),
    (Error.unauthorized(), anthropic.AuthenticationError, 401),
    (Error.bad_request("nope"), anthropic.BadRequestError, 400),
    (Error.context_length(200000, 205351), anthropic.BadRequestError, 400),
    (Error.overloaded_503(), anthropic.InternalServerError, 503),
]


@pytest.mark.parametrize(("step", "exc", "status"), OPENAI_ERRORS)
async def test_openai_sdk_errors(
    fp: FakeProvider, oai: openai.AsyncOpenAI, step: Error, exc: type[Exception], status: int
) -> None:
    """Each Error step raises the expected openai SDK exception with its status."""
    fp.push(step)
    with pytest.raises(exc) as info:
        await oai.chat.completions.create(model=MODEL, messages=HELLO)
    assert isinstance(info.value, openai.APIStatusError)
    assert info.value.status_code == status
    assert info.value.response.headers["x-request-id"].startswith("req_")


@pytest.mark.parametrize(("step", "exc", "status"), ANTHROPIC_ERRORS)
async def test_anthropic_sdk_errors(
    fp: FakeProvider,
    ant: anthropic.AsyncAnthropic,
    step: Error,
    exc: type[Exception],
    status: int,
) -> None:
    """Each Error step raises the expected anthropic SDK exception with its status."""
    fp.push(step)
    with pytest.raises(exc) as info:
        await ant.messages.create(model=MODEL, max_tokens=10, messages=HELLO)
    assert isinstance(info.value, anthropic.APIStatusError)
    assert info.value.status_code == status


async def test_error_bodies_and_headers(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """Ready-made errors carry the real codes, messages and wait headers."""
    fp.script(
        steps=[
            Error.openai_rate_limit(retry_after=3),
            Error.openai_rate_limit(retry_after_ms=250),
            Error.openai_quota(),
            Error.context_length(8192, 9100),
            Error.zhipu(1113),
        ]
    )
    errors: list[openai.APIStatusError] = []
    for _ in range(5):
        with pytest.raises(openai.APIStatusError) as info:
            await oai.chat.completions.create(model=MODEL, messages=HELLO)
        errors.append(info.value)
    limited, limited_ms, quota, too_long, zhipu = errors
    assert limited.response.headers["retry-after"] == "3"
    assert limited.code == "rate_limit_exceeded"
    assert "try again in 3s" in limited.message
    assert limited_ms.response.headers["retry-after-ms"] == "250"
    assert "retry-after" not in limited_ms.response.headers
    assert quota.code == "insufficient_quota"
    assert too_long.code == "context_length_exceeded"
    assert "maximum context length is 8192 tokens" in too_long.message
    assert "resulted in 9100 tokens" in too_long.message
    assert zhipu.status_code == 429
    assert zhipu.body == {"code": "1113", "message": "您的账户已欠费，请充值后重试。"}


async def test_anthropic_rate_limit_headers(
    fp: FakeProvider, ant: anthropic.AsyncAnthropic
) -> None:
    """Anthropic 429 carries retry-after and anthropic-ratelimit-* headers."""
    fp.push(Error.anthropic_rate_limit(retry_after=7))
    with pytest.raises(anthropic.RateLimitError) as info:
        await ant.messages.create(model=MODEL, max_tokens=10, messages=HELLO)
    headers = info.value.response.headers
    assert headers["retry-after"] == "7"
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert headers["anthropic-ratelimit-requests-reset"].endswith("Z")
    assert info.value.body["error"]["type"] == "rate_limit_error"


# --- connection faults ---------------------------------------------------------------


async def test_reset(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """Reset drops the connection without a response: the SDK sees a connection error."""
    fp.push(Reset())
    with pytest.raises(openai.APIConnectionError):
        await oai.chat.completions.create(model=MODEL, messages=HELLO)
    assert fp.disconnects == 0
    resp = await oai.chat.completions.create(model=MODEL, messages=HELLO)
    assert resp.choices[0].message.content == REPLY


async def test_hang_counts_the_disconnect(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """Hang never answers; the client's timeout is counted as a disconnect."""
    fp.push(Hang())
    with pytest.raises(openai.APITimeoutError):
        await oai.chat.completions.create(model=MODEL, messages=HELLO, timeout=0.2)
    await asyncio.wait_for(fp.disconnected.wait(), 1)
    assert fp.disconnects == 1


async def test_slow_first_byte(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """SlowFirstByte delays the answer, then answers normally."""
    fp.push(SlowFirstByte(0.2))
    start = time.monotonic()
    resp = await oai.chat.completions.create(model=MODEL, messages=HELLO)
    assert time.monotonic() - start >= 0.2
    assert resp.choices[0].message.content == REPLY


async def test_headers_then_silence(fp: FakeProvider) -> None:
    """HeadersThenSilence sends 200 and SSE headers, then nothing."""
    fp.push(HeadersThenSilence())
    body = {"model": MODEL, "messages": HELLO, "stream": True}
    async with (
        aiohttp.ClientSession() as session,
        session.post(fp.url + "/v1/chat/completions", json=body) as resp,
    ):
        assert resp.status == 200
        assert resp.content_type == "text/event-stream"
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(resp.content.read(1), 0.2)
    await asyncio.wait_for(fp.disconnected.wait(), 1)


async def test_stop_ends_hanging_requests() -> None:
    """stop() returns quickly while a request hangs, without counting a disconnect."""
    fp = FakeProvider()
    await fp.start()
    fp.push(Hang())
    async with openai.AsyncOpenAI(base_url=fp.url + "/v1", api_key="k", max_retries=0) as c:
        call = asyncio.create_task(c.chat.completions.create(model=MODEL, messages=HELLO))
        await eventually(lambda: fp.requests)  # the request is hanging at the provider
        start = time.monotonic()
        await fp.stop()
        assert time.monotonic() - start < 1
        with pytest.raises(openai.APIConnectionError):
            await call
    assert fp.disconnects == 0


# --- stream faults -------------------------------------------------------------------


async def test_cut_after_openai_stream(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """CutAfter(3) sends three content pieces then drops the connection."""
    fp.push(CutAfter(3))
    stream = await oai.chat.completions.create(model=MODEL, messages=HELLO, stream=True)
    pieces: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        async for chunk in stream:
            pieces.extend(c.delta.content for c in chunk.choices if c.delta.content)
    assert len(pieces) == 3
    assert REPLY.startswith("".join(pieces))
    assert fp.disconnects == 0


async def test_cut_after_anthropic_stream(fp: FakeProvider, ant: anthropic.AsyncAnthropic) -> None:
    """CutAfter makes the Anthropic SDK stream raise before message_stop."""
    fp.push(CutAfter(2))
    pieces: list[str] = []
    with pytest.raises(ANTHROPIC_CUT_ERRORS):
        async with ant.messages.stream(model=MODEL, max_tokens=100, messages=HELLO) as stream:
            async for text in stream.text_stream:
                pieces.append(text)
    assert len(pieces) == 2


async def test_cut_after_non_stream(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """CutAfter on a JSON answer sends half of the body, then drops the connection."""
    fp.push(CutAfter(0))
    with pytest.raises(openai.APIConnectionError):
        await oai.chat.completions.create(model=MODEL, messages=HELLO)


async def test_stall_after(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """StallAfter sends n pieces then goes silent; the client's read timeout fires."""
    fp.push(StallAfter(2))
    stream = await oai.chat.completions.create(
        model=MODEL,
        messages=HELLO,
        stream=True,
        timeout=0.3,
    )
    pieces: list[str] = []
    with pytest.raises(openai.APITimeoutError):
        async for chunk in stream:
            pieces.extend(c.delta.content for c in chunk.choices if c.delta.content)
    assert len(pieces) == 2
    await stream.close()
    await asyncio.wait_for(fp.disconnected.wait(), 1)
    assert fp.disconnects == 1


async def test_error_event_openai(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """ErrorEventAfter sends an in-stream ``data: {"error": ...}``: the SDK raises APIError."""
    fp.push(ErrorEventAfter(2))
    stream = await oai.chat.completions.create(model=MODEL, messages=HELLO, stream=True)
    with pytest.raises(openai.APIError) as info:
        async for _ in stream:
            pass
    assert "server had an error" in info.value.message


async def test_error_event_responses(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """A Responses stream gets ``event: error``; the SDK raises APIError."""
    fp.push(ErrorEventAfter(1))
    stream = await oai.responses.create(model=MODEL, input="hi", stream=True)
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass
    _, text = await raw_post(fp, "/v1/responses", {"model": MODEL, "input": "hi", "stream": True})
    assert "event: error" not in text  # the script was used up


async def test_error_event_anthropic(fp: FakeProvider, ant: anthropic.AsyncAnthropic) -> None:
    """An Anthropic stream gets ``event: error`` (overloaded_error); the SDK raises."""
    fp.push(ErrorEventAfter(1))
    with pytest.raises(anthropic.APIStatusError) as info:
        async with ant.messages.stream(model=MODEL, max_tokens=100, messages=HELLO) as stream:
            async for _ in stream:
                pass
    assert info.value.body["error"]["type"] == "overloaded_error"


async def test_malformed_event(fp: FakeProvider) -> None:
    """MalformedEventAt inserts one undecodable event and the stream goes on to [DONE]."""
    fp.push(MalformedEventAt(2))
    _, text = await raw_post(
        fp, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "stream": True}
    )
    data = sse_data(text)
    assert data[3] == "{not json"  # role chunk, two pieces, then the bad event
    assert data[-1] == "[DONE]"
    good = [json.loads(d) for d in data if d not in ("{not json", "[DONE]")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in good) == REPLY


async def test_no_done(fp: FakeProvider) -> None:
    """NoDone ends the stream after the finish chunk without ``data: [DONE]``."""
    fp.push(NoDone())
    _, text = await raw_post(
        fp, "/v1/chat/completions", {"model": MODEL, "messages": HELLO, "stream": True}
    )
    data = sse_data(text)
    assert "[DONE]" not in data
    assert json.loads(data[-1])["choices"][0]["finish_reason"] == "stop"


async def test_delay_per_chunk(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """Delay sleeps before every content piece."""
    fp.chunks = 4
    fp.push(Delay(0.05))
    start = time.monotonic()
    stream = await oai.chat.completions.create(model=MODEL, messages=HELLO, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == REPLY
    assert time.monotonic() - start >= 0.2


async def test_combined_steps(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """A tuple of steps applies together to one request."""
    fp.push((SlowFirstByte(0.1), Success(text="abcdefgh"), CutAfter(1)))
    start = time.monotonic()
    stream = await oai.chat.completions.create(model=MODEL, messages=HELLO, stream=True)
    pieces: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        async for chunk in stream:
            pieces.extend(c.delta.content for c in chunk.choices if c.delta.content)
    assert time.monotonic() - start >= 0.1
    assert pieces == ["a"]


# --- Success, scripts and records ----------------------------------------------------


async def test_success_forces_answer(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """Success forces text, finish reason, tool call and usage."""
    fp.push(Success(text="Forced.", finish_reason="content_filter", usage={"prompt_tokens": 99}))
    fp.push(Success(tool_call={"name": "lookup", "arguments": {"q": 1}}))
    first = await oai.chat.completions.create(model=MODEL, messages=HELLO)
    assert first.choices[0].message.content == "Forced."
    assert first.choices[0].finish_reason == "content_filter"
    assert first.usage is not None
    assert first.usage.prompt_tokens == 99
    second = await oai.chat.completions.create(model=MODEL, messages=HELLO)
    call = second.choices[0].message.tool_calls[0]
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"q": 1}


async def test_script_per_model(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """A model's queue is used before the shared one; an empty queue answers normally."""
    fp.script(model="a", steps=[Error.openai_server()])
    fp.push(Error.overloaded_503())
    assert fp.pending("a") == 1
    assert fp.pending() == 1
    with pytest.raises(openai.InternalServerError) as info:
        await oai.chat.completions.create(model="a", messages=HELLO)
    assert info.value.status_code == 500
    with pytest.raises(openai.InternalServerError) as info:
        await oai.chat.completions.create(model="a", messages=HELLO)
    assert info.value.status_code == 503
    resp = await oai.chat.completions.create(model="a", messages=HELLO)
    assert resp.choices[0].finish_reason == "stop"


async def test_script_per_key(fp: FakeProvider, ant: anthropic.AsyncAnthropic) -> None:
    """A key's queue answers only the requests that carry that key (Bearer or x-api-key),
    whatever their order; its model's queue first, then its shared one, then the others."""
    fp.script("a", [Error.openai_rate_limit(retry_after=3)], key="key-a")
    fp.push(Error.openai_server(), key="key-a")  # key-a, any model
    fp.push(Error.overloaded_503())  # anyone
    assert (fp.pending("a", key="key-a"), fp.pending(key="key-a"), fp.pending()) == (1, 1, 1)
    statuses = []
    for key, model in (("key-b", "a"), ("key-a", "b"), ("key-b", "a"), ("key-a", "a"),
                       ("key-a", "a")):  # fmt: skip
        async with openai.AsyncOpenAI(
            base_url=fp.url + "/v1", api_key=key, max_retries=0, timeout=5
        ) as client:
            try:
                await client.chat.completions.create(model=model, messages=HELLO)
                statuses.append(200)
            except openai.APIStatusError as e:
                statuses.append(e.status_code)
    assert statuses == [503, 500, 200, 429, 200]
    assert [r.key for r in fp.requests] == ["key-b", "key-a", "key-b", "key-a", "key-a"]
    fp.push(Error.anthropic_overloaded(), key="sk-ant-test")  # Anthropic's x-api-key
    with pytest.raises(anthropic.APIStatusError) as info:
        await ant.messages.create(model="a", max_tokens=10, messages=HELLO)
    assert info.value.status_code == 529
    assert fp.requests[-1].key == "sk-ant-test"


async def test_records(fp: FakeProvider, ant: anthropic.AsyncAnthropic) -> None:
    """Requests are recorded with path, query string, headers, body and model."""
    await ant.messages.create(
        model=MODEL,
        max_tokens=10,
        messages=HELLO,
        extra_headers={"anthropic-beta": "tools-2024"},
        extra_query={"beta": "true"},
    )
    rec = fp.requests[-1]
    assert rec.method == "POST"
    assert rec.path == "/v1/messages"
    assert rec.query_string == "beta=true"
    assert rec.query == {"beta": "true"}
    key = rec.headers.get("x-api-key") or rec.headers["authorization"].removeprefix("Bearer ")
    assert key == "sk-ant-test"
    assert rec.headers["anthropic-beta"] == "tools-2024"
    assert "anthropic-version" in rec.headers
    assert rec.body["messages"] == HELLO
    assert rec.model == MODEL
    fp.push(Hang())
    fp.reset()
    assert fp.requests == []
    assert fp.pending() == 0


async def test_bad_json(fp: FakeProvider) -> None:
    """A body that is not JSON gets a 400 in the endpoint's format and is recorded."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(fp.url + "/v1/messages", data=b"{oops") as resp,
    ):
        assert resp.status == 400
        body = await resp.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert fp.requests[0].body is None


# --- context window, max tokens, continuation ----------------------------------------


async def test_context_window_openai(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """Prompts over the window (minus max tokens) get OpenAI's context_length_exceeded."""
    fp.context_window[MODEL] = 10
    long = [{"role": "user", "content": "x" * 44}]  # 11 tokens
    with pytest.raises(openai.BadRequestError) as info:
        await oai.chat.completions.create(model=MODEL, messages=long)
    assert info.value.code == "context_length_exceeded"
    assert "maximum context length is 10 tokens" in info.value.message
    assert "resulted in 11 tokens" in info.value.message
    ok = [{"role": "user", "content": "x" * 36}]  # 9 tokens
    await oai.chat.completions.create(model=MODEL, messages=ok)
    with pytest.raises(openai.BadRequestError) as info:
        await oai.chat.completions.create(model=MODEL, messages=ok, max_tokens=2)
    assert "(9 in the messages, 2 in the completion)" in info.value.message


async def test_context_window_vllm(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """``context_style = "vllm"`` answers vLLM's wording."""
    fp.context_window[MODEL] = 10
    fp.context_style[MODEL] = "vllm"
    with pytest.raises(openai.BadRequestError) as info:
        await oai.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x" * 44}],
        )
    assert "(parameter=input_tokens, value=11)" in info.value.message


async def test_context_window_anthropic(fp: FakeProvider, ant: anthropic.AsyncAnthropic) -> None:
    """Anthropic prompts over the window get ``prompt is too long: M tokens > N maximum``."""
    fp.context_window[MODEL] = 10
    with pytest.raises(anthropic.BadRequestError) as info:
        await ant.messages.create(
            model=MODEL, max_tokens=1, messages=[{"role": "user", "content": "x" * 44}]
        )
    assert "prompt is too long: 11 tokens > 10 maximum" in info.value.message


async def test_max_tokens_cut(
    fp: FakeProvider, oai: openai.AsyncOpenAI, ant: anthropic.AsyncAnthropic
) -> None:
    """A client max tokens below the answer cuts it at max*4 chars, finish length."""
    chat = await oai.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=3)
    assert chat.choices[0].message.content == REPLY[:12]
    assert chat.choices[0].finish_reason == "length"
    msg = await ant.messages.create(model=MODEL, max_tokens=3, messages=HELLO)
    assert msg.stop_reason == "max_tokens"
    assert msg.content[0].text == REPLY[:12]
    resp = await oai.responses.create(model=MODEL, input="hi", max_output_tokens=3)
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output_text == REPLY[:12]


async def test_cut_streams_report_length(fp: FakeProvider) -> None:
    """Cut streams end with finish length, Anthropic max_tokens, Responses incomplete."""
    fp.cut_at[MODEL] = 2
    chat = {"model": MODEL, "messages": HELLO, "stream": True}
    _, text = await raw_post(fp, "/v1/chat/completions", chat)
    assert json.loads(sse_data(text)[-2])["choices"][0]["finish_reason"] == "length"
    messages = {"model": MODEL, "max_tokens": 100, "messages": HELLO, "stream": True}
    _, text = await raw_post(fp, "/v1/messages", messages)
    delta = next(json.loads(d) for d in sse_data(text) if '"message_delta"' in d)
    assert delta["delta"]["stop_reason"] == "max_tokens"
    responses = {"model": MODEL, "input": "hi", "stream": True}
    _, text = await raw_post(fp, "/v1/responses", responses)
    last = json.loads(sse_data(text)[-1])
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["output"][0]["content"][0]["text"] == REPLY[:8]


async def test_served_by_aiohttp_test_server(aiohttp_client: Any) -> None:
    """``fp.app`` can be served by pytest-aiohttp's own test server."""
    fp = FakeProvider()
    fp.push(Error.openai_server())
    client = await aiohttp_client(fp.app)
    resp = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": HELLO})
    assert resp.status == 500
    resp = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": HELLO})
    assert (await resp.json())["choices"][0]["message"]["content"] == REPLY


async def test_cut_at_with_prefill_continuation(
    fp: FakeProvider, ant: anthropic.AsyncAnthropic
) -> None:
    """cut_at cuts every answer; prefill continuations join back to the full reply."""
    fp.cut_at[MODEL] = 4
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Hello"}]
    parts: list[str] = []
    for _ in range(10):
        msg = await ant.messages.create(
            model=MODEL,
            max_tokens=1000,
            messages=[*messages, {"role": "assistant", "content": "".join(parts)}]
            if parts
            else messages,
        )
        parts.append(msg.content[0].text)
        if msg.stop_reason == "end_turn":
            break
        assert msg.stop_reason == "max_tokens"
        assert len(parts[-1]) == 16
    assert "".join(parts) == REPLY
    assert len(parts) == math.ceil(len(REPLY) / 16)


async def test_continue_instruction_continuation(fp: FakeProvider, oai: openai.AsyncOpenAI) -> None:
    """Assistant parts followed by a "continue" user message get the rest of the reply."""
    fp.cut_at[MODEL] = 5
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Hello"}]
    parts: list[str] = []
    while True:
        resp = await oai.chat.completions.create(model=MODEL, messages=messages)
        part = resp.choices[0].message.content or ""
        parts.append(part)
        if resp.choices[0].finish_reason == "stop":
            break
        messages += [
            {"role": "assistant", "content": part},
            {"role": "user", "content": "Continue exactly where you stopped, no recap."},
        ]
    assert "".join(parts) == REPLY


async def test_reject_prefill(fp: FakeProvider, ant: anthropic.AsyncAnthropic) -> None:
    """``reject_prefill`` answers 400 to a request ending with an assistant message."""
    fp.reject_prefill[MODEL] = True
    with pytest.raises(anthropic.BadRequestError) as info:
        await ant.messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hel"},
            ],
        )
    assert "prefill" in info.value.message
