"""Any client on any model (docs/translation.md): the official SDKs against fake providers
of the other format, through the gateway."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from gateway.testing import CutAfter, Error, FakeProvider, MalformedEventAt
from tests.harness import Harness

HELLO = [{"role": "user", "content": "Say hello"}]
WEATHER_OPENAI = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}  # fmt: skip
WEATHER_ANTHROPIC = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": WEATHER_OPENAI["function"]["parameters"],  # type: ignore[index]
}


async def test_openai_chat_on_an_anthropic_model(gw: Harness, fake: FakeProvider) -> None:
    """An OpenAI chat request to an Anthropic-format model goes out as Messages and comes
    back as a chat completion naming the model that answered."""
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="claude-test", messages=[{"role": "system", "content": "Be brief"}, *HELLO]
    )
    c = raw.parse()
    assert c.object == "chat.completion"
    assert c.choices[0].message.content.startswith("Hello! This is the fake provider")
    assert c.choices[0].finish_reason == "stop"
    assert c.model == "claude-test"
    assert c.usage is not None and c.usage.completion_tokens > 0
    assert raw.headers["x-gateway-model"] == "claude-test"
    seen = fake.requests[-1]
    assert seen.path == "/v1/messages"
    assert seen.body["system"] == "Be brief"
    assert seen.body["max_tokens"] > 0  # Anthropic requires one


async def test_anthropic_sdk_on_an_openai_model_streams(gw: Harness, fake: FakeProvider) -> None:
    """The Anthropic SDK streams from an OpenAI-format model: Messages events built from chat
    chunks, usage included."""
    async with gw.async_anthropic().messages.stream(
        model="gpt-test", max_tokens=200, messages=HELLO
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text.startswith("Hello! This is the fake provider")
    assert final.stop_reason == "end_turn"
    assert final.model == "gpt-test"
    assert final.usage.output_tokens > 0
    seen = fake.requests[-1]
    assert seen.path == "/v1/chat/completions"
    assert seen.body["stream_options"] == {"include_usage": True}


async def test_tools_round_trip_across_formats(gw: Harness, fake: FakeProvider) -> None:
    """An OpenAI client's tool call on an Anthropic model, then its tool result: the ids
    survive both ways."""
    client = gw.async_openai()
    ask = [{"role": "user", "content": "Use get_weather for Paris"}]
    first = await client.chat.completions.create(model="claude-test", messages=ask,
                                                 tools=[WEATHER_OPENAI])  # fmt: skip
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert set(json.loads(call.function.arguments)) == {"city"}
    follow = [*ask, choice.message.model_dump(exclude_none=True),
              {"role": "tool", "tool_call_id": call.id, "content": "18C and sunny"}]  # fmt: skip
    second = await client.chat.completions.create(model="claude-test", messages=follow,
                                                  tools=[WEATHER_OPENAI])  # fmt: skip
    assert "18C and sunny" in (second.choices[0].message.content or "")
    sent = fake.requests[-1].body["messages"]
    assert sent[-1]["role"] == "user"
    assert sent[-1]["content"][0]["type"] == "tool_result"
    assert sent[-1]["content"][0]["tool_use_id"] == call.id


async def test_an_upstream_error_reaches_the_client_in_its_format(
    gw: Harness, fake: FakeProvider
) -> None:
    """A 400 from an Anthropic model reaches an OpenAI client as an OpenAI error, status kept."""
    fake.script("claude-test", [Error.bad_request("messages: bad thing")])
    with pytest.raises(openai.BadRequestError) as exc:
        await gw.async_openai().chat.completions.create(model="claude-test", messages=HELLO)
    assert exc.value.status_code == 400
    assert "bad thing" in exc.value.message


async def test_a_cut_stream_ends_with_the_clients_error_event(
    gw: Harness, fake: FakeProvider
) -> None:
    """A translated stream cut after the first byte ends with the client format's error
    event: the Anthropic SDK raises."""
    fake.script("fake-model", [CutAfter(3)])
    with pytest.raises(anthropic.APIStatusError):
        async with gw.async_anthropic().messages.stream(
            model="gpt-test", max_tokens=200, messages=HELLO
        ) as stream:
            async for _ in stream.text_stream:
                pass


async def test_responses_client_on_an_anthropic_model(gw: Harness, fake: FakeProvider) -> None:
    """The Responses API (the Codex CLI's) on an Anthropic-format model, JSON and streamed."""
    client = gw.async_openai()
    r = await client.responses.create(model="claude-test", input="Say hello",
                                      instructions="Be brief")  # fmt: skip
    assert r.output_text.startswith("Hello! This is the fake provider")
    assert r.status == "completed"
    assert fake.requests[-1].body["system"] == "Be brief"
    async with client.responses.stream(model="claude-test", input="Say hello") as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.output_text.startswith("Hello! This is the fake provider")


REPLY = (
    "Streams break in the middle of an answer more often than anyone likes; the gateway "
    "picks the answer up where it broke so the client never notices the seam at all."
)


async def test_claude_overloaded_falls_back_to_an_openai_model(make_gateway, fake) -> None:  # type: ignore[no-untyped-def]
    """Claude overloaded twice: the Anthropic client is answered by the OpenAI-format
    fallback, in Anthropic's format, naming the model that answered."""
    gw: Harness = await make_gateway(policy={"fallback": {"chain": ["gpt-backup"]}})
    fake.script("claude-test", [Error.anthropic_overloaded()] * 2)
    raw = await gw.async_anthropic().messages.with_raw_response.create(
        model="claude-test", max_tokens=300, messages=HELLO
    )
    m = await raw.parse()
    assert m.type == "message" and m.content[0].type == "text"
    assert m.content[0].text.startswith("Hello! This is the fake provider")
    assert m.model == "gpt-backup"
    assert raw.headers["x-gateway-model"] == "gpt-backup"
    assert "fallback" in raw.headers["x-gateway-recovery"]
    assert [r.path for r in fake.requests] == ["/v1/messages"] * 2 + ["/v1/chat/completions"]


async def test_a_streamed_fallback_crosses_formats(make_gateway, fake) -> None:  # type: ignore[no-untyped-def]
    """An OpenAI stream whose model fails twice before the first byte is answered by an
    Anthropic-format fallback, as chat chunks."""
    gw: Harness = await make_gateway(policy={"fallback": {"chain": ["claude-backup"]}})
    fake.script("fake-model", [Error.openai_server(500)] * 2)
    stream = await gw.async_openai().chat.completions.create(
        model="gpt-test", messages=HELLO, stream=True, stream_options={"include_usage": True}
    )
    text, finishes, usage, models = "", [], None, set()
    async for chunk in stream:
        models.add(chunk.model)
        usage = chunk.usage or usage
        for c in chunk.choices:
            text += c.delta.content or ""
            if c.finish_reason:
                finishes.append(c.finish_reason)
    assert text.startswith("Hello! This is the fake provider")
    assert finishes == ["stop"]
    assert models == {"claude-backup"}
    assert usage is not None and usage.completion_tokens > 0
    assert fake.requests[-1].path == "/v1/messages"


async def test_a_broken_stream_resumes_on_a_model_of_the_other_format(make_gateway, fake) -> None:  # type: ignore[no-untyped-def]
    """With `continue`, an Anthropic stream cut mid-way whose model then fails is resumed on
    the OpenAI-format fallback: the client sees one Messages stream, every character once."""
    policy = {
        "stream": {"on_midstream_failure": "continue"},
        "fallback": {"chain": ["gpt-backup"], "after_consecutive_server_errors": 1},
        "retry": {"max_retries": 0},
        "turn_retry": {"max": 0},
    }
    gw: Harness = await make_gateway(policy=policy)
    fake.reply["claude-test"] = REPLY
    fake.reply["gpt-backup"] = REPLY
    fake.script(
        "claude-test", [CutAfter(4), Error.anthropic_server(500), Error.anthropic_server(500)]
    )
    async with gw.async_anthropic().messages.stream(
        model="claude-test", max_tokens=400, messages=HELLO
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text == REPLY
    assert final.stop_reason == "end_turn"
    assert fake.requests[-1].path == "/v1/chat/completions"
    assert fake.requests[-1].model == "gpt-backup"


async def test_upstream_api_chat_translates_a_responses_client(make_gateway, fake) -> None:  # type: ignore[no-untyped-def]
    """A model of an OpenAI-format provider speaks chat completions unless it says more
    (`upstream_api`, default `chat`, as GLM, DeepSeek or vLLM): the Responses API (Codex) is
    translated to chat; a model that speaks both (`[chat, responses]`, as OpenAI does) is
    called on the Responses API itself."""
    gw: Harness = await make_gateway(
        models={
            "gpt-glm": {"provider": "fake"},
            "gpt-chat": {"provider": "fake", "upstream_api": "chat"},
        }
    )
    client = gw.async_openai()
    for model in ("gpt-glm", "gpt-chat"):
        r = await client.responses.create(model=model, input="Say hello")
        assert r.output_text.startswith("Hello! This is the fake provider")
        assert fake.requests[-1].path == "/v1/chat/completions"
    await client.responses.create(model="gpt-test", input="Say hello")  # [chat, responses]
    assert fake.requests[-1].path == "/v1/responses"
    await client.chat.completions.create(model="gpt-test", messages=HELLO)
    assert fake.requests[-1].path == "/v1/chat/completions"


async def test_upstream_api_responses_translates_a_chat_client(make_gateway, fake) -> None:  # type: ignore[no-untyped-def]
    """A model served only on the Responses API: a chat client's request goes out as a
    Responses request and its answer comes back as a chat completion."""
    gw: Harness = await make_gateway(
        models={"gpt-resp": {"provider": "fake", "upstream_api": "responses"}}
    )
    c = await gw.async_openai().chat.completions.create(model="gpt-resp", messages=HELLO)
    assert c.choices[0].message.content.startswith("Hello! This is the fake provider")
    assert fake.requests[-1].path == "/v1/responses"


async def test_max_output_tokens_fills_anthropics_required_cap(make_gateway, fake) -> None:  # type: ignore[no-untyped-def]
    """A chat request without max_tokens to an Anthropic model sends the model's
    max_output_tokens (Anthropic requires a cap); a client cap above it is lowered to it."""
    gw: Harness = await make_gateway(
        models={"claude-capped": {"provider": "fake-anthropic", "max_output_tokens": 1234}}
    )
    client = gw.async_openai()
    await client.chat.completions.create(model="claude-capped", messages=HELLO)
    assert fake.requests[-1].body["max_tokens"] == 1234
    await client.chat.completions.create(model="claude-capped", messages=HELLO, max_tokens=99999)
    assert fake.requests[-1].body["max_tokens"] == 1234
    await client.chat.completions.create(model="claude-test", messages=HELLO)
    assert fake.requests[-1].body["max_tokens"] == 4096  # the documented default


async def test_a_field_with_no_equivalent_is_refused_naming_it(gw: Harness, fake) -> None:  # type: ignore[no-untyped-def]
    """`n: 2` cannot be asked of an Anthropic model: a 400 in the client's format naming
    the field, and nothing goes upstream."""
    with pytest.raises(openai.BadRequestError) as exc:
        await gw.async_openai().chat.completions.create(model="claude-test", messages=HELLO, n=2)
    assert exc.value.param == "n" or "'n'" in exc.value.message or "n:" in exc.value.message
    assert fake.requests == []


async def test_a_dropped_field_is_named_in_x_gateway_dropped(gw: Harness, fake) -> None:  # type: ignore[no-untyped-def]
    """A field without an Anthropic equivalent that changes nothing essential (`seed`) is
    dropped and named in `x-gateway-dropped`."""
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="claude-test", messages=HELLO, seed=7
    )
    assert "seed" in raw.headers["x-gateway-dropped"].split(",")
    assert "seed" not in fake.requests[-1].body


async def test_a_same_format_request_is_relayed_untranslated(gw: Harness, fake) -> None:  # type: ignore[no-untyped-def]
    """Chat on an OpenAI-format model: the body goes up as the client wrote it (fields the
    translation would drop included) and no x-gateway-dropped header appears."""
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="gpt-test", messages=HELLO, seed=7
    )
    assert "x-gateway-dropped" not in raw.headers
    assert fake.requests[-1].body["seed"] == 7


async def test_reasoning_false_drops_thinking_for_a_model_without_it(make_gateway, fake) -> None:  # type: ignore[no-untyped-def]
    """Claude Code asks for thinking; an OpenAI-format model marked `reasoning: false`
    gets no reasoning setting (named in x-gateway-dropped), one not marked gets the effort."""
    gw: Harness = await make_gateway(models={"gpt-plain": {"provider": "fake", "reasoning": False}})
    client = gw.async_anthropic()
    thinking = {"type": "enabled", "budget_tokens": 2048}
    raw = await client.messages.with_raw_response.create(
        model="gpt-plain", max_tokens=4000, messages=HELLO, thinking=thinking
    )
    assert "reasoning_effort" not in fake.requests[-1].body
    assert {"thinking", "reasoning_effort"} & set(raw.headers["x-gateway-dropped"].split(","))
    await client.messages.create(model="gpt-test", max_tokens=4000, messages=HELLO,
                                 thinking=thinking)  # fmt: skip
    assert fake.requests[-1].body["reasoning_effort"] == "low"


async def test_a_translated_stream_counts_its_tokens(gw: Harness, fake: FakeProvider) -> None:
    """A Messages stream answered by an OpenAI-format model: the chat usage chunk arrives
    last, so the input tokens come in message_delta; they are counted (tokens_total, which
    team token limits use) as the output tokens are."""
    async with gw.async_anthropic().messages.stream(
        model="gpt-test", max_tokens=200, messages=HELLO
    ) as stream:
        final = await stream.get_final_message()
    assert final.usage.input_tokens > 0
    labels = {"team": "team-a", "model": "gpt-test"}
    assert (
        gw.metric("llm_gateway_tokens_total", kind="prompt", **labels) == final.usage.input_tokens
    )
    assert (
        gw.metric("llm_gateway_tokens_total", kind="completion", **labels)
        == final.usage.output_tokens
    )


async def test_a_request_a_model_cannot_take_goes_to_the_next_one(make_gateway, fake) -> None:  # type: ignore[no-untyped-def]
    """`n: 2` has no Anthropic equivalent: with an OpenAI-format model next in the chain,
    that model answers it as it is, instead of a 400."""
    gw: Harness = await make_gateway(policy={"fallback": {"chain": ["gpt-backup"]}})
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="claude-test", messages=HELLO, n=2
    )
    assert raw.headers["x-gateway-model"] == "gpt-backup"
    assert [r.path for r in fake.requests] == ["/v1/chat/completions"]
    assert fake.requests[-1].body["n"] == 2


async def test_a_field_the_translators_cannot_read_goes_to_the_next_model(
    make_gateway, fake
) -> None:  # type: ignore[no-untyped-def]
    """A content part of the wrong type is refused where it would be translated (the
    Anthropic-format model), naming its path; the OpenAI-format model next in the chain
    gets the request as the client wrote it; with no chain, the client gets the 400."""
    bad: Any = [{"role": "user", "content": ["hi"]}]  # a part must be an object
    gw: Harness = await make_gateway(policy={"fallback": {"chain": ["gpt-backup"]}})
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="claude-test", messages=bad
    )
    assert raw.headers["x-gateway-model"] == "gpt-backup"
    assert [r.path for r in fake.requests] == ["/v1/chat/completions"]
    assert fake.requests[-1].body["messages"] == bad
    alone: Harness = await make_gateway()
    with pytest.raises(openai.BadRequestError) as caught:
        await alone.async_openai(max_retries=0).chat.completions.create(
            model="claude-test", messages=bad
        )
    assert caught.value.response.json()["error"]["param"] == "messages[0].content[0]"
    assert len(fake.requests) == 1  # nothing more went upstream


async def test_a_responses_stream_on_a_chat_only_model(make_gateway, fake) -> None:  # type: ignore[no-untyped-def]
    """The Codex CLI's way (a streamed Responses request) on a chat-only model: chat chunks
    upstream, Responses events to the client, ending with response.completed and usage."""
    gw: Harness = await make_gateway(
        models={"gpt-glm": {"provider": "fake", "upstream_api": "chat"}}
    )
    async with gw.async_openai().responses.stream(model="gpt-glm", input="Say hello") as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text.startswith("Hello! This is the fake provider")
    assert final.usage is not None and final.usage.output_tokens > 0
    assert fake.requests[-1].path == "/v1/chat/completions"
    assert fake.requests[-1].body["stream_options"] == {"include_usage": True}


async def test_a_translated_streams_undecodable_event_is_dropped_and_counted(
    gw: Harness, fake: FakeProvider
) -> None:
    """The stream rules (docs/recovery.md, Streams) on a translated stream: an undecodable
    upstream event (here in an Anthropic stream read by a chat client) is dropped and
    counted, and the answer is whole."""
    fake.push(MalformedEventAt(2))
    stream = await gw.async_openai().chat.completions.create(
        model="claude-test", messages=HELLO, stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Hello! This is the fake provider answering model claude-test."
    assert fake.requests[-1].path == "/v1/messages"
    assert gw.metric("llm_gateway_stream_events_dropped_total", model="claude-test") == 1
