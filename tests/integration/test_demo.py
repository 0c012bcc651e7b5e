"""`llm-gateway serve --demo` as the README shows it: the bundled policies and the built-in
sim provider, driven by the official SDKs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import openai
import pytest
from prometheus_client import CollectorRegistry

from gateway.observe.metrics import Metrics
from gateway.settings import GatewaySettings
from gateway.testing.sim import SimProvider
from gateway.web.app import create_app
from gateway.web.gateway import Gateway

BUNDLED = Path(__file__).resolve().parents[2] / "policies"
HELLO = [{"role": "user", "content": "Hello"}]


@pytest.fixture
async def demo() -> AsyncIterator[str]:
    gw: Gateway = create_app(
        GatewaySettings(demo=True, policy_dir=BUNDLED), metrics=Metrics(CollectorRegistry())
    )
    port = await gw.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await gw.stop()


async def test_claude_code_style_client_falls_back_across_formats(demo: str) -> None:
    """The Anthropic SDK asks sim-claude (Anthropic format, always overloaded): it is answered
    by sim-gpt (OpenAI format), as an Anthropic message naming sim-gpt."""
    async with anthropic.AsyncAnthropic(base_url=demo, api_key="demo-key", max_retries=0) as c:
        raw = await c.messages.with_raw_response.create(
            model="sim-claude", max_tokens=200, messages=HELLO
        )
        m = await raw.parse()
        async with c.messages.stream(model="sim-claude", max_tokens=200, messages=HELLO) as s:
            text = "".join([t async for t in s.text_stream])
    assert m.type == "message" and m.model == "sim-gpt" and m.content[0].text
    assert raw.headers["x-gateway-model"] == "sim-gpt"
    assert "fallback" in raw.headers["x-gateway-recovery"]
    assert text


async def test_openai_client_on_the_anthropic_demo_model(demo: str) -> None:
    """An OpenAI chat client on sim-claude: translated to Messages, overloaded, then answered
    by sim-gpt; the retry and the fallback are in the headers."""
    async with openai.AsyncOpenAI(base_url=demo + "/v1", api_key="demo-key", max_retries=0) as c:
        raw = await c.chat.completions.with_raw_response.create(model="sim-claude", messages=HELLO)
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-gateway-model"] == "sim-gpt"


async def test_the_readme_demo_models_recover(demo: str) -> None:
    """sim-flaky's 429 is retried, sim-down falls back to sim-ok, sim-long is continued."""
    async with openai.AsyncOpenAI(base_url=demo + "/v1", api_key="demo-key", max_retries=0) as c:
        flaky = await c.chat.completions.with_raw_response.create(model="sim-flaky", messages=HELLO)
        down = await c.chat.completions.with_raw_response.create(model="sim-down", messages=HELLO)
        long = await c.chat.completions.with_raw_response.create(model="sim-long", messages=HELLO)
    assert (
        flaky.headers["x-gateway-attempts"] == "2"
        and flaky.headers["x-gateway-recovery"] == "retry"
    )
    assert down.headers["x-gateway-model"] == "sim-ok"
    assert "continuation" in long.headers["x-gateway-recovery"]
    assert long.parse().choices[0].finish_reason == "stop"


# What Claude Code sends (seen from Claude Code 2.1): its context wrapped in
# <system-reminder> blocks before the prompt, and a `role: system` message after it.
BASH = {
    "name": "Bash",
    "description": "Run a shell command",
    "input_schema": {
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "description": {"type": "string"},
            "timeout": {"type": "number"},
        },
        "required": ["command"],
    },
}
REMINDER = {"type": "text", "text": "<system-reminder>Use Read before Edit.</system-reminder>"}
AGENT_NOTE = {"role": "system", "content": "Available agent types for the Agent tool: ..."}


def claude_code_turn(prompt: str) -> list[dict[str, object]]:
    return [{"role": "user", "content": [REMINDER, {"type": "text", "text": prompt}]}, AGENT_NOTE]


async def test_claude_code_shaped_request_gets_a_tool_call_from_its_prompt(demo: str) -> None:
    """A Claude-Code-shaped request (reminders, a trailing system message) naming Bash gets
    a tool_use whose command is the one the prompt gave, not a placeholder."""
    async with anthropic.AsyncAnthropic(base_url=demo, api_key="demo-key", max_retries=0) as c:
        m = await c.messages.create(
            model="sim-ok",
            max_tokens=16000,
            tools=[BASH],  # type: ignore[list-item]
            messages=claude_code_turn("Use Bash to run `ls -la`"),  # type: ignore[arg-type]
        )
        async with c.messages.stream(
            model="sim-flaky",  # a 429 first: the call still comes, once
            max_tokens=16000,
            tools=[BASH],  # type: ignore[list-item]
            messages=claude_code_turn("Use Bash to run echo hello."),  # type: ignore[arg-type]
        ) as s:
            streamed = await s.get_final_message()
    assert m.stop_reason == "tool_use", m
    (call,) = [b for b in m.content if b.type == "tool_use"]
    assert call.name == "Bash" and call.input == {"command": "ls -la"}
    assert streamed.stop_reason == "tool_use", streamed
    (call,) = [b for b in streamed.content if b.type == "tool_use"]
    assert call.input == {"command": "echo hello"}


async def test_claude_code_shaped_tool_result_is_answered(demo: str) -> None:
    """After the tool ran, the result (followed by Claude Code's system message) is what the
    answer reports."""
    messages = [
        *claude_code_turn("Use Bash to run `echo hi`")[:1],
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "hi"}],
        },
        AGENT_NOTE,
    ]
    async with anthropic.AsyncAnthropic(base_url=demo, api_key="demo-key", max_retries=0) as c:
        m = await c.messages.create(
            model="sim-ok",
            max_tokens=16000,
            tools=[BASH],  # type: ignore[list-item]
            messages=messages,  # type: ignore[arg-type]
        )
    assert m.stop_reason == "end_turn"
    assert m.content[0].type == "text" and m.content[0].text == "The tool returned: hi"


async def test_a_prompt_that_names_no_tool_gets_text(demo: str) -> None:
    """Tools offered but not named in the prompt (only in a reminder): a plain answer."""
    async with anthropic.AsyncAnthropic(base_url=demo, api_key="demo-key", max_retries=0) as c:
        m = await c.messages.create(
            model="sim-ok",
            max_tokens=16000,
            tools=[BASH, {**BASH, "name": "Read"}],  # type: ignore[list-item]
            messages=claude_code_turn("Say hello"),  # type: ignore[arg-type]
        )
    assert m.stop_reason == "end_turn" and m.content[0].type == "text"


async def test_claude_code_on_sim_long_gets_the_whole_answer(demo: str) -> None:
    """An Anthropic client always sends max_tokens; on sim-long the demo route continues the
    cut answer anyway, so the stream carries the whole text, ending at end_turn."""
    client = anthropic.AsyncAnthropic(base_url=demo, api_key="demo-key", max_retries=0)
    async with (
        client as c,
        c.messages.stream(
            model="sim-long",
            max_tokens=16000,
            messages=claude_code_turn("Tell me a story"),  # type: ignore[arg-type]
        ) as s,
    ):
        text = "".join([t async for t in s.text_stream])
        final = await s.get_final_message()
    assert text == SimProvider().reply["sim-long"]
    assert final.stop_reason == "end_turn"


async def test_tool_arguments_come_from_the_prompt_for_openai_clients(demo: str) -> None:
    """An OpenAI client's function tool gets its argument from the prompt ("for Paris")."""
    tool = {
        "type": "function",
        "function": {
            "name": "lookup_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    async with openai.AsyncOpenAI(base_url=demo + "/v1", api_key="demo-key", max_retries=0) as c:
        r = await c.chat.completions.create(
            model="sim-ok",
            tools=[tool],  # type: ignore[list-item]
            messages=[{"role": "user", "content": "Use lookup_weather for Paris"}],
        )
    (call,) = r.choices[0].message.tool_calls or []
    assert call.function.name == "lookup_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
