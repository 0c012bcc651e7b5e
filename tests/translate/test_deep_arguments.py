"""Tool-call arguments nested past the body's depth limit, sent with the official OpenAI
SDK to a Claude model (Anthropic's Messages) and a Bedrock Converse model: the arguments
are JSON in a string, which these formats carry as an object; read so, they are held to
the depth limit of the body, and past it the request is a 400 naming them (it was a
text/plain 500: the translated body could not be encoded)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.clouds import test_clouds_e2e
from tests.clouds.test_clouds_e2e import CLAUDE, Clouds

clouds = test_clouds_e2e.clouds  # the gateway, fake Anthropic and fake Bedrock

MODELS = [CLAUDE, "nova-pro"]  # Anthropic's Messages first; Bedrock Converse


def _deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def _chat(arguments: str) -> list[Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    return [
        {"role": "user", "content": "Call f."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"},
    ]


def _responses(arguments: str) -> list[Any]:
    return [
        {"role": "user", "content": "Call f."},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": arguments},
        {"type": "function_call_output", "call_id": "call_1", "output": "done"},
    ]


TOOLS_CHAT: Any = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
TOOLS_RESPONSES: Any = [{"type": "function", "name": "f", "parameters": {}}]


@pytest.mark.parametrize("levels", [250, 300])
@pytest.mark.parametrize("model", MODELS)
async def test_chat_arguments_past_the_depth_limit_are_400(
    clouds: Clouds, model: str, levels: int
) -> None:
    client = clouds.gw.async_openai()
    with pytest.raises(openai.BadRequestError) as e:
        await client.chat.completions.create(
            model=model, messages=_chat(_deep(levels)), tools=TOOLS_CHAT
        )
    where = "messages[1].tool_calls[0].function.arguments"
    assert e.value.param == where  # type: ignore[attr-defined]
    assert "nested deeper than the gateway's limit of 200 levels" in e.value.message
    assert not clouds.direct.requests and not clouds.bedrock.requests


@pytest.mark.parametrize("levels", [250, 300])
@pytest.mark.parametrize("model", MODELS)
async def test_responses_arguments_past_the_depth_limit_are_400(
    clouds: Clouds, model: str, levels: int
) -> None:
    client = clouds.gw.async_openai()
    with pytest.raises(openai.BadRequestError) as e:
        await client.responses.create(
            model=model, input=_responses(_deep(levels)), tools=TOOLS_RESPONSES
        )
    assert e.value.param == "input[1].arguments"  # type: ignore[attr-defined]
    assert "nested deeper than the gateway's limit of 200 levels" in e.value.message


@pytest.mark.parametrize("model", MODELS)
async def test_arguments_within_the_limit_are_sent_as_an_object(clouds: Clouds, model: str) -> None:
    """190 levels (chat's arguments sit 6 levels into the body) go through, translated."""
    client = clouds.gw.async_openai()
    answer = await client.chat.completions.create(
        model=model, messages=_chat(_deep(190)), tools=TOOLS_CHAT
    )
    assert answer.choices[0].message is not None
    fake = clouds.direct if model == CLAUDE else clouds.bedrock
    sent = fake.requests[-1].body
    block = sent["messages"][1]["content"][0]
    arguments = block["input"] if model == CLAUDE else block["toolUse"]["input"]
    for _ in range(189):
        arguments = arguments["a"]
    assert arguments == {"a": 1}


@pytest.mark.parametrize("model", MODELS)
async def test_long_arguments_past_the_depth_limit_are_400(clouds: Clouds, model: str) -> None:
    """Arguments long enough to be held apart while the body is checked (a megabyte and
    more) are held to the depth limit all the same."""
    padded = "[" + "1," * (1 << 19) + "[" * 300 + "]" * 301  # no escapes: held apart
    client = clouds.gw.async_openai()
    with pytest.raises(openai.BadRequestError) as e:
        await client.chat.completions.create(model=model, messages=_chat(padded), tools=TOOLS_CHAT)
    assert e.value.param == "messages[1].tool_calls[0].function.arguments"  # type: ignore[attr-defined]
    assert not clouds.direct.requests and not clouds.bedrock.requests
