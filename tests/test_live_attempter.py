"""The live attempter (gateway/live/attempter.py, exchange.py) driven by the engine, in memory.

Each case scripts the provider's responses (tests/live_fakes.py), runs the engine's
``recover`` with the real attempter, and checks the outcome, what went upstream and what
the client was sent (keepalives while waiting). Waits run on a virtual clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.recovery.engine import recover
from gateway.resilience.decide import Progress
from tests.live_fakes import (
    DONE,
    ROLE,
    SECRET,
    USAGE,
    FakeResponse,
    answer,
    chunk,
    error,
    live,
    policy,
    stream,
)

pytestmark = pytest.mark.fast

MESSAGES = [{"role": "user", "content": "hello"}]
STREAMED = {"model": "gpt-test", "messages": MESSAGES, "stream": True}


@dataclass
class Case:
    name: str
    responses: list[FakeResponse]
    status: int  # of the outcome (0: a transport failure)
    category: str | None = None  # of its failure; None: an answer
    attempts: int = 1
    body: dict[str, Any] | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    waits: list[float] = field(default_factory=list)  # on the virtual clock
    client: list[bytes] = field(default_factory=list)  # what the client got while waiting
    text: bytes = b""  # in the outcome's body


CASES = [
    Case("plain answer", [answer("yo")], 200, text=b'"content":"yo"'),
    Case("a 500 is retried after its wait", [error(500), answer("ok")], 200,
         attempts=2, waits=[2.0], text=b'"ok"'),
    Case("a 429 is retried", [error(429, kind="rate_limit_error"), answer("ok")], 200,
         attempts=2, waits=[1.0]),
    Case("a 400 is relayed, not retried", [error(400, "bad field", "invalid_request_error")],
         400, "invalid_request", text=b"bad field"),
    Case("a 500 that stays: the last is relayed", [error(500), error(500), error(500)],
         500, "server_error", attempts=3, waits=[2.0, 2.0]),
    Case("a provider's error quoting the key is scrubbed",
         [error(400, f"key {SECRET} is wrong", "invalid_request_error")], 400,
         "invalid_request", text=b"key *** is wrong"),
    Case("a stream is open at its first event", [stream(ROLE, chunk("Hi"), DONE)], 200,
         body=STREAMED),
    Case("an error as the first event is a failed attempt, retried",
         [stream(b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'),
          stream(ROLE, chunk("Hi"), DONE)], 200, attempts=2, body=STREAMED,
         waits=[0.5, 0.5, 0.5, 0.5], client=[b": gateway api_retry", b": keepalive", b": keepalive",
                                             b": keepalive"]),
    Case("a stream that ends before its first event is a failed attempt",
         [stream(ROLE), stream(ROLE, chunk("Hi"), DONE)], 200, attempts=2, body=STREAMED,
         policy={"stream": {"keepalive": "5s"}}, waits=[2.0]),
    Case("keepalives while a streaming client waits",
         [error(503), stream(ROLE, chunk("Hi"), DONE)], 200, attempts=2, body=STREAMED,
         policy={"retry": {"transient": {"base": "1200ms", "cap": "1200ms", "jitter": 0}}},
         waits=[0.5, 0.5, pytest.approx(0.2)], client=[b": gateway api_retry", b": keepalive",
                                                       b": keepalive"]),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_attempts(case: Case) -> None:
    lv = live(*case.responses, body=case.body, pol=policy(**case.policy))
    result = await recover(lv.ctx.req, lv.log, lv.env, lv.att)
    out = result.outcome
    assert out.status == case.status
    f = out.failure
    assert (None if f is None else f.category.value) == case.category
    assert result.progress.attempts == case.attempts == len(lv.upstream.requests)
    assert lv.clock.waits == case.waits
    assert case.text in out.body
    assert SECRET.encode() not in out.body
    sent = lv.writer.chunks
    assert [c[: len(w)] for c, w in zip(sent, case.client, strict=False)] == case.client
    assert len(sent) == len(case.client)
    if out.stream is not None:
        assert not out.stream.resp.closed  # open for the relay
    for resp in lv.upstream.opened[:-1]:
        assert resp.closed  # every failed attempt's response let go of


async def test_what_goes_upstream() -> None:
    """The model's upstream name, the request id, the provider's key; a streaming chat
    request that did not ask for the usage chunk asks for it (the gateway counts it)."""
    lv = live(stream(ROLE, chunk("Hi"), USAGE, DONE), body=STREAMED)
    await recover(lv.ctx.req, lv.log, lv.env, lv.att)
    url, headers, body = lv.upstream.requests[0]
    assert str(url).endswith("/v1/chat/completions")
    assert headers["x-request-id"] == "req-1"
    assert headers["authorization"] == f"Bearer {SECRET}"
    assert body["model"] == "up-model"
    assert body["stream_options"] == {"include_usage": True}
    assert lv.att.hide_usage
    assert lv.log.provider == "up"


async def test_past_the_deadline_nothing_is_sent() -> None:
    lv = live(answer())
    lv.clock.now += 61.0
    out = await lv.att.send(
        "gpt-test", lv.ctx.req.body, Progress(lv.ctx.req.deadline, ("gpt-test",))
    )
    assert out.failure is not None and out.failure.category.value == "timeout"
    assert lv.upstream.requests == []


async def test_a_cut_answer_is_a_transport_failure() -> None:
    """The connection cut while the answer is read: a failure of category connection."""
    from tests.live_fakes import cut

    lv = live(FakeResponse(200, [b'{"id":', cut()]))
    out = await lv.att.send(
        "gpt-test", lv.ctx.req.body, Progress(lv.ctx.req.deadline, ("gpt-test",))
    )
    assert out.status == 0
    assert out.failure is not None


async def test_the_compaction_call_is_never_streamed() -> None:
    """``ask``: a JSON request of the gateway's own, in the format asked, to that
    format's endpoint, without the client's headers."""
    from gateway.formats import CHAT

    lv = live(answer("summary"), body=STREAMED)
    out = await lv.att.ask("gpt-test", CHAT, {"model": "gpt-test", "messages": MESSAGES}, 5.0, 0)
    assert out.failure is None and b"summary" in out.body
    _, headers, body = lv.upstream.requests[0]
    assert "stream" not in body
    assert headers["x-request-id"] == "req-1"
    assert lv.writer.chunks == []  # answered within a keepalive: nothing written
