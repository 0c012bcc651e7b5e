"""The ``summarize`` compaction strategy over real sockets, with the official SDKs.

The fake provider rejects the long prompt (its ``context_window``), answers the
summary request like any chat request (``fake.reply`` of the summarize model is the
summary), then accepts the compacted prompt that carries the summary.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from gateway.resilience.compaction import SUMMARY_INSTRUCTIONS
from gateway.testing import Error, FakeProvider, Hang, SlowFirstByte
from tests.harness import CLIENT_KEY, Harness
from tests.integration.test_prompt_and_output import agent_transcript

SUMMARY = "Read f0.py to f4.py; f3.py sleeps on the real clock. Open: inject the clock."


def summarize_policy(**compaction: Any) -> dict[str, Any]:
    return {"compaction": {"strategies": ["summarize"], "summarize_model": "gpt-backup",
                           "keep_recent": 2, **compaction}}  # fmt: skip


def recoveries(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["strategy"], e["outcome"]) for e in events
            if e["event"] == "prompt_too_long_recovery"]  # fmt: skip


def anthropic_transcript(turns: int = 6, result_chars: int = 6000) -> list[dict[str, Any]]:
    """A task, tool_use / tool_result rounds with large results, a last question."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(turns):
        use = {"type": "tool_use", "id": f"toolu_{i}", "name": "read_file"}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i}"}
        result["content"] = f"line {i}\n" + "x" * result_chars
        messages.append({"role": "assistant", "content": [{**use, "input": {"path": f"f{i}.py"}}]})
        messages.append({"role": "user", "content": [result]})
    messages[-1]["content"].append({"type": "text", "text": "Now summarise what you found."})
    return messages


async def test_summarize_openai_end_to_end(make_gateway, fake: FakeProvider) -> None:  # type: ignore[no-untyped-def]
    """Too long, then the summary on summarize_model, then the compacted prompt with it fits."""
    gw: Harness = await make_gateway(policy=summarize_policy())
    fake.context_window["fake-model"] = 3000
    fake.reply["gpt-backup"] = SUMMARY
    messages = agent_transcript()
    with capture_logs() as events:
        raw = await gw.async_openai().chat.completions.with_raw_response.create(
            model="gpt-test", messages=messages
        )
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-gateway-recovery"] == "compaction"
    assert raw.headers["x-gateway-attempts"] == "2"  # the summary call is not an attempt
    assert [r.model for r in fake.requests] == ["fake-model", "gpt-backup", "fake-model"]
    too_long, ask, compacted = fake.requests
    assert too_long.body["messages"] == messages
    assert ask.path == "/v1/chat/completions" and ask.body["stream"] is False
    assert ask.body["messages"][0] == {"role": "system", "content": SUMMARY_INSTRUCTIONS}
    transcript = ask.body["messages"][1]["content"]
    assert "Fix the failing test." in transcript
    assert 'assistant called read_file({"path": "f0.py"})' in transcript
    assert "tool result: line 4" in transcript
    assert "line 5" not in transcript  # the kept recent window is not summarised
    sent = compacted.body["messages"]
    assert sent[:2] == messages[:2] and sent[3:] == messages[-3:]
    assert sent[2]["role"] == "user" and sent[2]["content"].startswith("[llm-gateway replaced 10")
    assert sent[2]["content"].endswith(SUMMARY)
    ((strategy, outcome),) = recoveries(events)
    assert (strategy, outcome) == ("summarize", "applied")
    event = next(e for e in events if e["event"] == "prompt_too_long_recovery")
    assert event["summary_model"] == "gpt-backup"
    assert event["messages_after"] == 6 < event["messages_before"] == 15
    assert event["tokens_after"] < event["tokens_before"]
    assert gw.metric("llm_gateway_compactions_total", team="team-a", model="gpt-test",
                     strategy="summarize", outcome="applied") == 1  # fmt: skip
    assert gw.metric("llm_gateway_upstream_attempts_total", provider="fake", model="gpt-backup",
                     category="ok") == 1  # fmt: skip


async def test_summarize_for_a_streaming_client_is_a_json_call(
    make_gateway, fake: FakeProvider
) -> None:  # type: ignore[no-untyped-def]
    """The client streams; the summary call does not, and its text is used."""
    gw: Harness = await make_gateway(policy=summarize_policy())
    fake.context_window["fake-model"] = 3000
    fake.reply["gpt-backup"] = SUMMARY
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="gpt-test", messages=agent_transcript(), stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in raw.parse() if c.choices])
    assert text.startswith("Hello! This is the fake provider")
    assert raw.headers["x-gateway-recovery"] == "compaction"
    too_long, ask, compacted = fake.requests
    assert too_long.body["stream"] is True and compacted.body["stream"] is True
    assert ask.body["stream"] is False
    assert SUMMARY in compacted.body["messages"][2]["content"]


async def test_a_slow_summary_sends_keepalives_to_a_streaming_client(
    make_gateway, fake: FakeProvider
) -> None:  # type: ignore[no-untyped-def]
    """A summary that takes longer than stream.keepalive: SSE comments meanwhile, then the
    answer on the same stream."""
    policy = summarize_policy()
    gw: Harness = await make_gateway(policy={**policy, "stream": {"keepalive": "200ms"}})
    fake.context_window["fake-model"] = 3000
    fake.reply["gpt-backup"] = SUMMARY
    fake.script("gpt-backup", [SlowFirstByte(0.5)])
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            gw.url + "/v1/chat/completions",
            json={"model": "gpt-test", "messages": agent_transcript(), "stream": True},
            headers={"authorization": f"Bearer {CLIENT_KEY}"},
        ) as r,
    ):
        assert r.status == 200
        assert r.headers["x-gateway-attempts"] == "1"  # committed while the summary ran
        body = await r.read()
    assert body.startswith(b": keepalive\n\n")
    assert b"data: [DONE]" in body and b"Hello!" in body
    assert SUMMARY in fake.requests[-1].body["messages"][2]["content"]


READ_FILE: Any = {
    "name": "read_file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}


@pytest.mark.parametrize(
    ("summarize_model", "path"),
    [("claude-backup", "/v1/messages"), ("gpt-backup", "/v1/chat/completions")],
)
async def test_summarize_anthropic_end_to_end(
    make_gateway, fake: FakeProvider, summarize_model: str, path: str
) -> None:  # type: ignore[no-untyped-def]
    """Messages API: the summary call in the summarize model's own format, the note joined to
    the task so roles alternate, the kept tool_use / tool_result pair untouched."""
    gw: Harness = await make_gateway(policy=summarize_policy(summarize_model=summarize_model))
    fake.context_window["claude-test"] = 3000
    fake.reply[summarize_model] = SUMMARY
    messages = anthropic_transcript()
    with capture_logs() as events:
        raw = await gw.async_anthropic().messages.with_raw_response.create(
            model="claude-test", max_tokens=512, system="You are a coding agent.",
            messages=messages, tools=[READ_FILE],  # (Anthropic wants the tools of tool blocks)
        )  # fmt: skip
    assert (await raw.parse()).content
    assert raw.headers["x-gateway-recovery"] == "compaction"
    assert raw.headers["x-gateway-attempts"] == "2"
    assert [r.model for r in fake.requests] == ["claude-test", summarize_model, "claude-test"]
    _, ask, compacted = fake.requests
    assert ask.path == path and ask.body["stream"] is False
    if path == "/v1/messages":
        assert ask.body["system"] == SUMMARY_INSTRUCTIONS and ask.body["max_tokens"] == 2048
        assert [m["role"] for m in ask.body["messages"]] == ["user"]
    assert "assistant called read_file" in str(ask.body["messages"])
    sent = compacted.body["messages"]
    assert compacted.body["system"] == "You are a coding agent."
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"].startswith("Fix the failing test.\n\n[llm-gateway replaced 10")
    assert sent[0]["content"].endswith(SUMMARY)
    assert sent[1:] == messages[-2:]
    assert recoveries(events) == [("summarize", "applied")]


@pytest.mark.parametrize(("failures", "outcome"), [(1, "applied"), (2, "failed")])
async def test_a_failing_summary_is_retried_once_then_the_next_strategy_runs(
    make_gateway, fake: FakeProvider, failures: int, outcome: str
) -> None:  # type: ignore[no-untyped-def]
    """One 500 is retried; two fail the step, and drop_middle (next in line) makes it fit."""
    gw: Harness = await make_gateway(
        policy=summarize_policy(strategies=["summarize", "drop_middle"])
    )
    fake.context_window["fake-model"] = 3000
    fake.reply["gpt-backup"] = SUMMARY
    fake.script("gpt-backup", [Error.openai_server(500)] * failures)
    with capture_logs() as events:
        raw = await gw.async_openai().chat.completions.with_raw_response.create(
            model="gpt-test", messages=agent_transcript()
        )
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-gateway-attempts"] == "2"
    assert raw.headers["x-gateway-recovery"] == "compaction"
    assert [r.model for r in fake.requests] == ["fake-model", "gpt-backup", "gpt-backup",
                                                "fake-model"]  # fmt: skip
    note = fake.requests[-1].body["messages"][2]["content"]
    if outcome == "applied":
        assert recoveries(events) == [("summarize", "applied")]
        assert note.endswith(SUMMARY)
    else:
        assert recoveries(events) == [("summarize", "failed"), ("drop_middle", "applied")]
        failed = next(e for e in events if e.get("outcome") == "failed")
        assert failed["error"] == "server_error" and failed["summary_model"] == "gpt-backup"
        assert note.startswith("[llm-gateway removed")
    assert gw.metric("llm_gateway_upstream_attempts_total", provider="fake", model="gpt-backup",
                     category="server_error") == failures  # fmt: skip


async def test_a_summary_past_summarize_timeout_fails_the_step(
    make_gateway, fake: FakeProvider
) -> None:  # type: ignore[no-untyped-def]
    """A summary model that does not answer within summarize_timeout: no second try (the
    deadline covers both), and the next strategy runs."""
    gw: Harness = await make_gateway(
        policy=summarize_policy(strategies=["summarize", "drop_middle"], summarize_timeout="300ms")
    )
    fake.context_window["fake-model"] = 3000
    fake.script("gpt-backup", [Hang()])
    with capture_logs() as events:
        c = await gw.async_openai().chat.completions.create(
            model="gpt-test", messages=agent_transcript()
        )
    assert c.choices[0].message.content
    assert [r.model for r in fake.requests] == ["fake-model", "gpt-backup", "fake-model"]
    assert recoveries(events) == [("summarize", "failed"), ("drop_middle", "applied")]
    assert next(e for e in events if e.get("outcome") == "failed")["error"] == "timeout"


async def test_summarize_without_summarize_model_asks_the_request_model(
    make_gateway, fake: FakeProvider
) -> None:  # type: ignore[no-untyped-def]
    """No summarize_model: the model that said the prompt is too long writes the summary, in
    a request sized to the window its error message gave."""
    gw: Harness = await make_gateway(policy=summarize_policy(summarize_model=None))
    fake.context_window["fake-model"] = 3000
    raw = await gw.async_openai().chat.completions.with_raw_response.create(
        model="gpt-test", messages=agent_transcript()
    )
    assert raw.headers["x-gateway-recovery"] == "compaction"
    assert [r.model for r in fake.requests] == ["fake-model"] * 3
    ask = fake.requests[1].body
    assert ask["messages"][0]["content"] == SUMMARY_INSTRUCTIONS
    assert len(ask["messages"][1]["content"]) < 4000  # (3000 - 2048) tokens of room
    default = "Hello! This is the fake provider answering model fake-model."
    assert fake.requests[2].body["messages"][2]["content"].endswith(default)
