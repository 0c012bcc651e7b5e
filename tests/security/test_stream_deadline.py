"""A request's deadline (``timeouts.total``, or the client's own shorter timeout) ends a
live stream: a provider that keeps sending cannot hold a request past it.

Real sockets: the official SDKs -> a real gateway -> the fake provider streaming a long
answer, an event every few milliseconds, for far longer than the deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from structlog.testing import capture_logs

from gateway.testing import Delay, FakeProvider
from tests.harness import Harness

HELLO = [{"role": "user", "content": "Say hello"}]
DEADLINE = 1.0  # timeouts.total of these tests, seconds
SLACK = 0.35  # how late after the deadline the gateway may end it (a timer tick is 20 ms)
CLIENT_SLACK = 1.0  # the same seen by the client, SDK overhead included (Responses' first use)
CAP = 5.0  # the client gives up reading after this: the stream ran past the deadline
LONG = "word " * 2000  # 2,000 pieces of 5 characters


@dataclass
class Read:
    elapsed: float  # from sending the request to the end of the stream (or CAP)
    chars: int  # answer text received before the end
    error: BaseException | None  # what the SDK raised at the end
    capped: bool  # still streaming when the client gave up


async def read_stream(gw: Harness, api: str, model: str, **client: Any) -> Read:
    """Stream ``model`` on ``api`` with the official SDK, for at most CAP seconds."""
    chars = 0
    error: BaseException | None = None
    c = gw.async_openai(**client)  # made before the clock starts: it loads CA certificates
    a = gw.async_anthropic(**client)
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(CAP):
            if api == "chat":
                stream = await c.chat.completions.create(model=model, messages=HELLO, stream=True)
                async for chunk in stream:
                    for choice in chunk.choices:
                        chars += len(choice.delta.content or "")
            elif api == "responses":
                rstream = await c.responses.create(model=model, input="Say hello", stream=True)
                async for event in rstream:
                    if event.type == "response.output_text.delta":
                        chars += len(event.delta)
            else:
                async with a.messages.stream(model=model, max_tokens=20000, messages=HELLO) as s:
                    async for text in s.text_stream:
                        chars += len(text)
    except TimeoutError:
        return Read(time.monotonic() - t0, chars, None, True)
    except (openai.APIError, anthropic.APIError) as e:
        error = e
    return Read(time.monotonic() - t0, chars, error, False)


def error_text(e: BaseException | None) -> str:
    """The error event's type and message, as the SDK raised them."""
    if isinstance(e, anthropic.APIStatusError):
        body: Any = e.body
        err = body.get("error", {}) if isinstance(body, dict) else {}
        return f"{err.get('type')}: {err.get('message')}"
    if isinstance(e, openai.APIError):
        body = e.body if isinstance(e.body, dict) else {}
        etype = body.get("type") or body.get("code") or getattr(e, "type", None)
        return f"{etype}: {e.message}"
    return repr(e)


async def wait_for(check: Callable[[], bool], within: float) -> bool:
    end = time.monotonic() + within
    while not check():
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.02)
    return True


def long_stream(fake: FakeProvider) -> None:
    """Every answer: 2,000 pieces, one every 3 ms or more (at least 6 s of streaming)."""
    fake.chunks = 2000
    for name in ("fake-model", "claude-test"):  # the upstream names of gpt-test, claude-test
        fake.reply[name] = LONG
    fake.push(Delay(0.003))


def completed(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e.get("event") == "request_completed"]


async def check_ended_by_deadline(
    gw: Harness, fake: FakeProvider, r: Read, deadline: float, logs: list[dict[str, Any]]
) -> None:
    """The stream ended at the deadline with the timeout error event; nothing left behind."""
    observed = (
        f"ran {r.elapsed:.2f} s (deadline {deadline:g} s), {r.chars} chars, "
        f"{'still streaming when the client gave up' if r.capped else 'ended'}: "
        f"{error_text(r.error)}"
    )
    assert not r.capped, observed
    assert deadline - 0.05 <= r.elapsed <= deadline + CLIENT_SLACK, observed
    assert r.chars > 0, observed  # it was a live stream, ended mid-answer
    text = error_text(r.error)
    assert text.startswith("timeout_error: upstream stream interrupted (timeout):"), observed
    assert "deadline" in text, observed
    # the upstream request is closed, the request is no longer in flight, it is logged
    assert await wait_for(lambda: fake.disconnects >= 1, 1.0), "upstream still open"
    assert await wait_for(lambda: gw.metric("llm_gateway_inflight_requests") == 0, 1.0)
    assert await wait_for(lambda: bool(completed(logs)), 1.0), "no access log line"
    [line] = completed(logs)
    observed += f"; the gateway's access log: {line['duration_s']:.3f} s"
    assert line["status"] == 200 and line["error"] == "stream interrupted: timeout", line
    assert deadline <= line["duration_s"] <= deadline + SLACK, observed


@pytest.mark.parametrize(
    ("api", "model"),
    [
        ("chat", "gpt-test"),
        ("responses", "gpt-test"),
        ("messages", "claude-test"),
        ("messages", "gpt-test"),  # translated: Messages client, OpenAI-format model
        ("chat", "claude-test"),  # translated: chat client, Anthropic-format model
    ],
)
async def test_total_deadline_ends_a_live_stream(
    make_gateway: Callable[..., Any], fake: FakeProvider, api: str, model: str
) -> None:
    """``timeouts.total: 1s`` and a provider sending an event every few ms for 6 s or more:
    the client's stream ends at 1 s with the endpoint's timeout error event."""
    gw: Harness = await make_gateway(policy={"timeouts": {"total": f"{DEADLINE:g}s"}})
    long_stream(fake)
    with capture_logs() as logs:
        r = await read_stream(gw, api, model)
        await check_ended_by_deadline(gw, fake, r, DEADLINE, logs)
    assert len(fake.requests) == 1


@pytest.mark.parametrize("how", ["x-gateway-timeout", "x-stainless-read-timeout", "anthropic"])
async def test_clients_own_shorter_deadline_ends_a_live_stream(
    gw: Harness, fake: FakeProvider, how: str
) -> None:
    """The client's own timeout (0.8 s; the policy's total is 10 s) ends the stream alike:
    sent as ``x-gateway-timeout``, or by the SDKs themselves (``x-stainless-read-timeout``
    from the OpenAI SDK, ``x-stainless-timeout`` from the Anthropic SDK)."""
    long_stream(fake)
    own = 0.8
    with capture_logs() as logs:
        if how == "x-gateway-timeout":
            r = await read_stream(
                gw, "chat", "gpt-test", default_headers={"x-gateway-timeout": f"{own:g}"}
            )
        elif how == "anthropic":
            r = await read_stream(gw, "messages", "claude-test", timeout=own)
        else:  # the SDK's read timeout: pieces arrive every few ms, so it never fires
            r = await read_stream(gw, "chat", "gpt-test", timeout=own)
        await check_ended_by_deadline(gw, fake, r, own, logs)
    sent = fake.requests[0].headers
    assert sent.get("x-gateway-timeout") is None  # the client's timeout is not passed on


async def test_deadline_is_final_no_resume_past_it(
    make_gateway: Callable[..., Any], fake: FakeProvider
) -> None:
    """With ``on_midstream_failure: continue``, a stream ended by the deadline is not
    resumed: one upstream request, the timeout error event, reason ``deadline``."""
    gw: Harness = await make_gateway(
        policy={
            "timeouts": {"total": f"{DEADLINE:g}s"},
            "stream": {"on_midstream_failure": "continue", "max_resumes": 2},
        }
    )
    long_stream(fake)
    with capture_logs() as logs:
        r = await read_stream(gw, "chat", "gpt-test")
        await check_ended_by_deadline(gw, fake, r, DEADLINE, logs)
        await asyncio.sleep(0.2)  # a resume would have gone out by now
    assert len(fake.requests) == 1, [q.body.get("messages") for q in fake.requests]
    [broke] = [e for e in logs if e.get("event") == "stream_interrupted"]
    assert (broke["action"], broke.get("reason"), broke["category"]) == (
        "error_event",
        "deadline",
        "timeout",
    ), broke
