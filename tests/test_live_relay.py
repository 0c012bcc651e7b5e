"""The live relay (gateway/live/relay.py, pump.py) over in-memory streams.

Each case scripts the provider's streams (tests/live_fakes.py): the first answers the
request, the next ones a resume or a continuation. The engine opens the first through the
real attempter, the relay sends it to a fake client writer; the cases check what the
client got, what was billed, and that every upstream response was let go of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from gateway.formats import CHAT, MESSAGES, Format
from gateway.live.relay import relay
from gateway.live.stream_head import OpenStream
from gateway.recovery.engine import recover
from tests.live_fakes import (
    DONE,
    ROLE,
    SECRET,
    START,
    STOP,
    USAGE,
    FakeResponse,
    chunk,
    cut,
    delta,
    event,
    live,
    policy,
    stream,
)

pytestmark = pytest.mark.fast

CONVERSATION = [{"role": "user", "content": "hello"}]
STREAMED = {"model": "gpt-test", "messages": CONVERSATION, "stream": True}
WITH_USAGE = {**STREAMED, "stream_options": {"include_usage": True}}
ERROR_EVENT = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
MESSAGES_BODY = {
    "model": "claude-test",
    "max_tokens": 100,
    "messages": CONVERSATION,
    "stream": True,
}
RESUME = {"stream": {"on_midstream_failure": "continue", "keepalive": "30s"}}


def text_of(body: bytes) -> str:
    """The answer's text the client was sent (the chat or Messages deltas, in order)."""
    out = []
    for line in body.split(b"\n"):
        if line.startswith(b"data: {"):
            data = orjson.loads(line[6:])
            for choice in data.get("choices") or []:
                out.append(choice.get("delta", {}).get("content") or "")
            if data.get("type") == "content_block_delta":
                out.append(data["delta"].get("text") or "")
    return "".join(out)


def finals(body: bytes) -> int:
    return body.count(b'"finish_reason":"') + body.count(b"event: message_stop")


def ends(body: bytes) -> bool:
    """The stream's last event is its end: chat's [DONE], Messages' message_stop."""
    return body.endswith(DONE) or body.endswith(event("message_stop"))


@dataclass
class Case:
    name: str
    responses: list[FakeResponse]
    text: str  # the answer's text the client got
    body: dict[str, Any] = field(default_factory=lambda: dict(STREAMED))
    policy: dict[str, Any] = field(default_factory=dict)
    error: bytes | None = None  # the stream ends with the endpoint's error event, saying this
    done: bool = True  # the client got the stream's end ([DONE], message_stop)
    fmt: Format = CHAT
    sent: list[bytes] = field(default_factory=list)  # in what the client got
    not_sent: list[bytes] = field(default_factory=list)
    output_tokens: int | None = None  # billed
    used: tuple[str, ...] = ()  # the recovery the access log names


CASES = [
    Case("plain pass-through", [stream(ROLE, chunk("Hel"), chunk("lo"), chunk(finish="stop"),
                                       USAGE, DONE)],
         "Hello", body=WITH_USAGE, sent=[b'"completion_tokens":3'], output_tokens=3),
    Case("the usage chunk the client did not ask for: counted, not sent",
         [stream(ROLE, chunk("Hi"), chunk(finish="stop"), USAGE, DONE)], "Hi",
         not_sent=[b'"usage"'], output_tokens=3),
    Case("pieces split mid-event are whole events to the client",
         [stream(ROLE, chunk("Hel")[:20], chunk("Hel")[20:] + chunk("lo"), chunk(finish="stop"),
                 DONE)], "Hello"),
    Case("an undecodable event is dropped", [stream(ROLE, b"data: {not json\n\n", chunk("Hi"),
                                                   chunk(finish="stop"), DONE)],
         "Hi", not_sent=[b"not json"]),
    Case("upstream cut mid-stream: the error event, in the client's format",
         [stream(ROLE, chunk("Hel"), cut())], "Hel", error=b"upstream stream interrupted",
         done=False),
    Case("an error event mid-stream: the client's error event",
         [stream(ROLE, chunk("Hel"), ERROR_EVENT, chunk("never"))], "Hel",
         error=b"overloaded", done=False, not_sent=[b"never"]),
    Case("a cut stream resumed: regenerated, spliced after what was sent",
         [stream(ROLE, chunk("Hel"), chunk("lo"), cut()),
          stream(ROLE, chunk("Hello"), chunk(" world"), chunk(finish="stop"), DONE)],
         "Hello world", policy=RESUME, used=("retry",)),
    Case("a resume that says something else: the error event",
         [stream(ROLE, chunk("Hel"), chunk("lo"), cut()),
          stream(ROLE, chunk("Goodbye"), chunk(finish="stop"), DONE)],
         "Hello", policy=RESUME, error=b"upstream stream interrupted", done=False,
         used=("retry",)),
    Case("Messages: pass-through", [stream(START, delta("Hel"), delta("lo"), STOP)], "Hello",
         body=MESSAGES_BODY, fmt=MESSAGES, output_tokens=4),
    Case("Messages: cut mid-stream, the error event in Messages' format",
         [stream(START, delta("Hel"), cut())], "Hel", body=MESSAGES_BODY, fmt=MESSAGES,
         error=b"upstream stream interrupted", done=False, sent=[b"event: error\ndata:"]),
    Case("chat client, Messages model: the stream translated",
         [stream(START, delta("Hel"), delta("lo"), STOP)], "Hello",
         body={**STREAMED, "model": "claude-test"}),
    Case("an answer cut at the token limit: continued in the same stream",
         [stream(ROLE, chunk("Hello"), chunk(finish="length"), DONE),
          stream(ROLE, chunk(" world"), chunk(finish="stop"), DONE)],
         "Hello world", used=("continuation",)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_relay(case: Case) -> None:
    model = case.body["model"]
    lv = live(*case.responses, body=case.body, model=model, fmt=case.fmt, pol=policy(**case.policy))
    result = await recover(lv.ctx.req, lv.log, lv.env, lv.att)
    assert isinstance(result.outcome.stream, OpenStream)
    out = await relay(lv.ctx, lv.att, result.outcome.stream, lv.log, lv.env, result)
    assert out is lv.att.response
    body = lv.writer.body
    assert lv.writer.status_line == "HTTP/1.1 200 OK" and lv.writer.eof
    assert text_of(body) == case.text
    assert ends(body) == case.done
    assert finals(body) == (1 if case.done else 0)
    if case.error is None:
        assert b'"error"' not in body and lv.log.error is None
    else:
        assert case.error in body.rsplit(b"\n\n", 2)[-2]  # the last event
        assert lv.log.error is not None and lv.log.error.startswith("stream interrupted")
    for s in case.sent:
        assert s in body
    for s in case.not_sent:
        assert s not in body
    assert SECRET.encode() not in body
    if case.output_tokens is not None:
        assert lv.ctx.req.bill.completion_tokens == case.output_tokens
    assert tuple(lv.log.recovery) == case.used
    assert len(lv.upstream.requests) == len(case.responses)
    assert all(r.closed for r in lv.upstream.opened)  # every upstream stream let go of
    assert lv.ctx.live.streams == set()  # no longer among the streams a drain would end


@pytest.mark.parametrize("gone_after", [0, 1, 2])
async def test_client_gone_releases_the_upstream(gone_after: int) -> None:
    """A client that left: the write raises, the upstream stream is closed, nothing more
    is read of it, and what it streamed is billed."""
    resp = stream(ROLE, chunk("Hel"), chunk("lo"), chunk(" there"), chunk(finish="stop"), DONE)
    lv = live(resp, body=dict(STREAMED), gone_after=gone_after)
    result = await recover(lv.ctx.req, lv.log, lv.env, lv.att)
    assert isinstance(result.outcome.stream, OpenStream)
    with pytest.raises(ConnectionResetError):
        await relay(lv.ctx, lv.att, result.outcome.stream, lv.log, lv.env, result)
    assert resp.closed
    assert resp.content.pieces  # the rest was never read
    assert lv.ctx.live.streams == set()
    assert lv.ctx.req.bill.prompt_tokens > 0  # estimated: the stream was cut before its usage


async def test_a_stalled_client_is_dropped() -> None:
    """A client that reads nothing within the write timeout (1 ms of the loop's clock):
    its connection is aborted, the upstream stream closed."""
    import asyncio

    from gateway.errors import ClientStalled

    lv = live(stream(ROLE, chunk("Hi"), chunk(finish="stop"), DONE), body=dict(STREAMED),
              write_timeout=0.001)  # fmt: skip
    result = await recover(lv.ctx.req, lv.log, lv.env, lv.att)
    assert isinstance(result.outcome.stream, OpenStream)
    never = asyncio.get_running_loop().create_future()

    async def hang(chunk: Any) -> None:
        await never  # the client's socket buffer is full: the write never completes

    lv.writer.write = hang  # type: ignore[method-assign]
    with pytest.raises(ClientStalled):
        await relay(lv.ctx, lv.att, result.outcome.stream, lv.log, lv.env, result)
    assert lv.transport.aborted
    assert all(r.closed for r in lv.upstream.opened)
