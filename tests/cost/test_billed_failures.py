"""A failed attempt the provider billed is recovery, and the counts a provider reported win
over the gateway's estimate.

An Anthropic stream reports its input tokens in ``message_start``, its first event: one
that resets (or sends its error event) before any text is retried invisibly, yet its
provider counted the prompt. That attempt is recovery cost (the client never got its
output), counted as the provider reported it, in the access log, the cost metric and the
team's budget alike. A stream cut after some text is billed its input as its provider
reported it, not as estimated, whether it reached the client in its own format or
translated (chat completions, Responses). A stream reset before it reported anything
costs nothing, as before: no count, no bill.

Real sockets: the gateway in front of the scripted fake provider (the Anthropic-format
fake), the official SDKs as clients. The prompt is long enough that its estimate (114
tokens) is far from the count the fake reports (10), so the log tells which was billed.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from gateway.testing import CutAfter, ErrorEventAfter, FakeProvider, Reset, Success
from tests.cost.test_cut_streams import ADMIN, spent
from tests.harness import Harness, policy_files
from tests.log_sink import Sink

PRICE = {"input": 1000.0, "output": 1000.0}  # USD per million: a token costs $0.001
ASK = [{"role": "user", "content": "Tell me a long story. " * 20}]
COUNTS = {"prompt_tokens": 10, "completion_tokens": 20}  # what the fake reports
ESTIMATE = 114  # the gateway's estimate of the prompt's tokens
MODEL = "claude-priced"


async def start(
    gateway_of: Any, fake: FakeProvider, policy: dict[str, Any] | None = None
) -> Harness:
    files = policy_files(fake.url, policy)
    files["platform.yaml"]["models"][MODEL] = {
        "provider": "fake-anthropic", "upstream_model": "claude-model", "price": PRICE
    }  # fmt: skip
    files["teams/team-a.yaml"]["teams"]["team-a"]["budget"] = {"usd": 100, "per": "day"}
    fake.chunks = 20
    return await gateway_of(files, admin_key=ADMIN)


async def stream(gw: Harness, api: str) -> str:
    """Stream ``MODEL`` on ``api`` to its end (or its error event): the request id."""
    if api == "messages":
        raw: Any = await gw.async_anthropic().messages.with_raw_response.create(
            model=MODEL, messages=ASK, max_tokens=100, stream=True
        )
        events = await raw.parse()
    elif api == "chat":
        raw = await gw.async_openai().chat.completions.with_raw_response.create(
            model=MODEL, messages=ASK, max_tokens=100, stream=True
        )
        events = raw.parse()
    else:
        raw = await gw.async_openai().responses.with_raw_response.create(
            model=MODEL, input=ASK, max_output_tokens=100, stream=True
        )
        events = raw.parse()
    try:
        async for _ in events:
            pass
    except (anthropic.APIError, openai.APIError):  # a cut stream's error event
        pass
    return str(raw.headers["x-request-id"])


APIS = ["messages", "chat", "responses"]


@pytest.mark.parametrize("fault", [CutAfter(0), ErrorEventAfter(0)], ids=["reset", "error"])
@pytest.mark.parametrize("api", APIS)
async def test_a_stream_billed_then_failed_before_its_text_is_recovery(
    gateway_of: Any, fake: FakeProvider, log_sink: Sink, api: str, fault: Any
) -> None:
    """``message_start`` (10 input tokens, 1 output token) then a reset or an error event:
    retried, answered by the second attempt; the first is recovery as its provider
    counted it (11 tokens, $0.011), in the log, the cost metric and the budget."""
    log_sink.configure()
    gw = await start(gateway_of, fake)
    fake.script("claude-model", [(Success(usage=COUNTS), fault), Success(usage=COUNTS)])
    _, line = await log_sink.line(await stream(gw, api))
    assert line["attempts"] == 2
    assert line["tokens"] == {"prompt": 10, "completion": 20}
    assert line["recovery_tokens"] == {"prompt": 10, "completion": 1}
    assert line["cost_usd"] == pytest.approx(0.030)
    assert line["recovery_cost_usd"] == pytest.approx(0.011)
    labels = {"team": "team-a", "model": MODEL}
    assert gw.metric("llm_gateway_cost_usd_total", **labels, kind="recovery") == pytest.approx(
        0.011
    )
    assert gw.metric("llm_gateway_cost_usd_total", **labels, kind="answer") == pytest.approx(0.030)
    assert await spent(gw) == pytest.approx(0.041)


async def test_a_stream_reset_before_it_reported_anything_costs_nothing(
    gateway_of: Any, fake: FakeProvider, log_sink: Sink
) -> None:
    """A reset before any byte: no count, nothing billed for it (as before)."""
    log_sink.configure()
    gw = await start(gateway_of, fake)
    fake.script("claude-model", [Reset(), Success(usage=COUNTS)])
    _, line = await log_sink.line(await stream(gw, "messages"))
    assert line["attempts"] == 2
    assert line["recovery_cost_usd"] == 0.0 and "recovery_tokens" not in line


@pytest.mark.parametrize("api", APIS)
async def test_a_cut_stream_is_billed_the_input_its_provider_reported(
    gateway_of: Any, fake: FakeProvider, log_sink: Sink, api: str
) -> None:
    """Cut after 5 of 20 deltas, the client gets the error event: the prompt is billed as
    ``message_start`` counted it (10), not estimated (114), translated or not; the output
    is what was delivered (estimated, so the line says ``estimated``)."""
    log_sink.configure()
    gw = await start(gateway_of, fake)
    fake.script("claude-model", [(Success(usage=COUNTS), CutAfter(5))])
    _, line = await log_sink.line(await stream(gw, api))
    assert line["attempts"] == 1
    assert line["tokens"]["prompt"] == 10
    assert line["tokens"]["completion"] >= 5 and line["tokens"]["estimated"] is True


@pytest.mark.parametrize("api", APIS)
async def test_a_regenerated_stream_bills_the_cut_one_as_its_provider_reported(
    gateway_of: Any, fake: FakeProvider, log_sink: Sink, api: str
) -> None:
    """With ``on_midstream_failure: continue`` a stream cut after 5 deltas is asked again
    (regenerated: the model has no prefill); the cut one is recovery, its prompt as
    reported (10), not estimated (114)."""
    log_sink.configure()
    gw = await start(gateway_of, fake, {"stream": {"on_midstream_failure": "continue"}})
    fake.script("claude-model", [(Success(usage=COUNTS), CutAfter(5)), Success(usage=COUNTS)])
    _, line = await log_sink.line(await stream(gw, api))
    assert line["attempts"] == 2
    assert line["recovery_tokens"]["prompt"] == 10
    assert line["tokens"]["prompt"] == 10
