"""One upstream stream relayed to the client, until it ends, breaks or diverges.

Pieces are read as they arrive and written at once; a client that does not read holds
the next read back (aiohttp then stops reading the upstream socket), up to
``client_write_timeout_s``. One :class:`~gateway.upstream.deadlines.Limit` bounds every
wait: the upstream's silence by ``timeouts.stream_idle``, a stalled client by the write
timeout. A second one, set once, is the request's deadline: however busy the upstream,
the stream breaks there (a timeout that is not resumed).

Each read's events go through a ``take`` function chosen once per stream: relayed as they
came (:func:`_plain`), or kept track of in a transcript and spliced after a continuation
or a resume (:func:`_tracked`). What is rare (an event that is not data, an event that
carries usage) is handled apart, so the usual event costs no call of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from gateway.errors import Category, ClientStalled, UpstreamFailure
from gateway.formats import sse
from gateway.formats.splice import Diverged, Splice, Transcript
from gateway.formats.usage import Usage
from gateway.live.context import LiveRequest
from gateway.live.stream_head import OpenStream
from gateway.observe.request_log import RequestLog
from gateway.observe.tracing import finish_reasons
from gateway.recovery.continuing import Segment
from gateway.recovery.seams import Env
from gateway.resilience.classify import classify_error_event
from gateway.resilience.verdict import DEADLINE_MESSAGE, verdict
from gateway.upstream.client import MAPPED, failure
from gateway.upstream.deadlines import Limit

if TYPE_CHECKING:
    from gateway.observe.tracing import StreamTrace

DATA, FINAL, ERROR, MALFORMED = sse.DATA, sse.FINAL, sse.ERROR, sse.MALFORMED
READ, WRITE = "read", "write"  # the waits of a stream
DEADLINE = "deadline"  # the request's own: timeouts.total, or the client's shorter timeout
# what an event that is not data comes to (:func:`_marker`)
GO, DROP, STOP = 0, 1, 2

Take = Callable[[Iterable[sse.Classified]], bytes]


class Side(Protocol):
    """What the pump reads of the relay's side (:class:`gateway.live.relay.LiveStream`)."""

    ctx: LiveRequest
    out: web.StreamResponse
    s: OpenStream
    tx: Transcript | None
    splice: Splice | None
    log: RequestLog
    env: Env
    model: str  # the model whose stream it is


async def pump(side: Side, seg: Segment) -> None:
    """Relay ``side``'s current stream until it ends, breaks or diverges (how: ``seg``).

    The read and write loop runs in this coroutine's own frame: a wait that suspends it
    (every read, most writes) passes through no other coroutine."""
    ctx, s, out = side.ctx, side.s, side.out
    idle, write_s = ctx.req.policy.timeouts.stream_idle, ctx.live.write_timeout
    cap = ctx.live.max_event_bytes
    content, splitter = s.resp.content, s.splitter
    feed, classify = splitter.feed, sse.classifier(ctx.endpoint)
    take = _taker(side, seg)
    lim = Limit(None)
    total = Limit(ctx.req.deadline - time.monotonic(), DEADLINE)  # no work per piece
    broken: UpstreamFailure | None = None
    try:
        with total, lim:
            data = take([(ev.raw, ev.kind, ev.data) for ev in s.head])
            s.head = []  # relayed: their decoded data is not kept for the rest of the stream
            while True:
                if data:
                    lim.set(write_s, WRITE)
                    await out.write(data)  # a client that left raises here: not ours to handle
                if seg.failure is not None or seg.diverged:
                    break
                lim.set(idle, READ)  # no wait until the next set: no need to clear it
                try:
                    piece = await content.readany()
                except MAPPED as e:
                    broken = failure(e, "stream")
                    break
                if not piece:
                    await _tail(side, take, classify, lim)
                    break
                raws = feed(piece)
                if len(raws) == 1:  # the usual read: one event (no comprehension to call)
                    data = take((classify(raws[0]),))
                else:
                    data = take([classify(r) for r in raws]) if raws else b""
                # what is left over is at most this piece: a piece that yielded events and
                # is under the cap cannot have put the splitter over it
                if (not raws or len(piece) > cap) and len(splitter.pending) > cap:
                    message = f"upstream event over {cap} bytes"
                    broken = UpstreamFailure(Category.connection, message, "stream")
                    break
    except TimeoutError:
        broken = _timed_out(lim, total, idle, write_s)
    finally:
        _close(side)
    _settle(seg, broken, total.expired is not None)


async def _tail(side: Side, take: Take, classify: Any, lim: Limit) -> None:
    """The end of the upstream stream: a translated stream's closing events, sent."""
    if tail := side.s.splitter.close():
        data = take([classify(r) for r in tail])
        if data:
            lim.set(side.ctx.live.write_timeout, WRITE)
            await side.out.write(data)


def _timed_out(lim: Limit, total: Limit, idle: float, write_s: float) -> UpstreamFailure:
    """What a wait that ran out means: a stalled client (raised), the request's deadline,
    or an upstream gone quiet."""
    if lim.expired == WRITE:
        raise ClientStalled(f"the client read nothing for {write_s:g} s") from None
    if total.expired is not None:
        return UpstreamFailure(Category.timeout, DEADLINE_MESSAGE, "stream")
    return UpstreamFailure(
        Category.timeout, f"upstream went quiet for {idle:g} s mid-stream", "stream"
    )


def _close(side: Side) -> None:
    """Let the upstream stream go; a translated stream's undecodable events counted at once."""
    s = side.s
    s.resp.close()
    if s.splitter.malformed:
        side.env.events.stream_event_dropped(side.log, side.model, s.splitter.malformed)


def _settle(seg: Segment, broken: UpstreamFailure | None, deadline_passed: bool) -> None:
    """How the stream ended (:func:`gateway.resilience.verdict.verdict`): ``seg.failure``
    and ``seg.complete``."""
    seg.failure = verdict(
        seg.complete,
        seg.failure,
        seg.diverged,
        None if broken is None else (broken.category, broken.message),
        deadline_passed,
    )
    if seg.failure is not None:
        seg.complete = False


def _taker(side: Side, seg: Segment) -> Take:
    """The ``take`` of ``side``'s current stream: what of a read's events goes to the
    client (their bytes), what is held back, counted or recorded."""
    ep = side.ctx.endpoint
    mark = _marker(side, seg)
    counted = _counter(side, seg)
    if side.tx is None:
        return _plain(ep.fmt.usage_key, ep, seg, mark, counted)
    return _tracked(ep.fmt.usage_key, ep, seg, mark, counted, side.tx, side.splice)


def _plain(
    usage_key: str | None,
    ep: Any,
    seg: Segment,
    mark: Callable[[sse.Kind, Any], int],
    counted: Callable[[Usage, Any], bool],
) -> Take:
    """Events relayed as they came, the model's output counted as it passes. Where only
    events with a ``usage_key`` carry usage (chat), the others are not looked at for it."""
    output, usage_of = ep.fmt.stream_output, sse.usage_of

    def take(batch: Iterable[sse.Classified]) -> bytes:
        keep: list[bytes] = []
        for raw, kind, data in batch:
            if kind is not DATA:  # the usual event is data: it skips these tests
                m = mark(kind, data)
                if m == DROP:
                    continue
                if m == STOP:
                    break
            if (
                data is not None
                and (usage_key is None or data.get(usage_key) is not None)
                and (u := usage_of(data, ep, seg.usage)) is not None
                and counted(u, data)
            ):
                continue  # the usage chunk only the gateway asked for: counted, not sent
            if data is not None:
                seg.output += output(data)
            keep.append(raw)
        return keep[0] if len(keep) == 1 else b"".join(keep)

    return take


def _tracked(
    usage_key: str | None,
    ep: Any,
    seg: Segment,
    mark: Callable[[sse.Kind, Any], int],
    counted: Callable[[Usage, Any], bool],
    tx: Transcript,
    splice: Splice | None,
) -> Take:
    """Events recorded in the transcript ``tx``, the closing ones held back until it is
    known whether the answer goes on; through ``splice`` once continued or resumed."""
    held, usage_of, Event = seg.held, sse.usage_of, sse.Event

    def take(batch: Iterable[sse.Classified]) -> bytes:
        keep: list[bytes] = []
        for raw, kind, data in batch:
            if kind is not DATA:
                m = mark(kind, data)
                if m == DROP:
                    continue
                if m == STOP:
                    break
            if (
                data is not None
                and (usage_key is None or data.get(usage_key) is not None)
                and (u := usage_of(data, ep, seg.usage)) is not None
                and counted(u, data)
            ):
                continue
            if held:
                held.append(Event(raw, kind, data))  # after a closing event: held
            elif splice is None:
                if tx.record(kind, data):  # closing: held until we know if the answer goes on
                    held.append(Event(raw, kind, data))
                else:
                    keep.append(raw)
            elif tx.closes(ev := Event(raw, kind, data)):
                held.append(ev)
            else:
                fed = splice.feed(ev)  # a resumed or continued answer, spliced in
                if isinstance(fed, Diverged):
                    seg.diverged = True
                    break
                keep.append(fed)
        return keep[0] if len(keep) == 1 else b"".join(keep)

    return take


def _marker(side: Side, seg: Segment) -> Callable[[sse.Kind, Any], int]:
    """What an event that is not data comes to: dropped (undecodable: counted), the end of
    the read (an error event: the stream's failure), or relayed (the final event: the
    stream is complete; its finish reasons go to the trace, or the access log when
    traced)."""
    log, env, trace = side.log, side.env, side.s.trace
    rules, traced = side.ctx.req.policy.classify, side.ctx.tracing is not None
    model = side.model

    def mark(kind: sse.Kind, data: Any) -> int:
        if kind is MALFORMED:
            env.events.stream_event_dropped(log, model)
            return DROP
        if kind is ERROR:
            seg.failure = classify_error_event(data, rules=rules, now=time.time())
            return STOP
        if kind is FINAL:
            seg.complete = True
            _final(trace, traced, log, data)
        return GO

    return mark


def _final(trace: StreamTrace | None, traced: bool, log: RequestLog, data: Any) -> None:
    """The stream's final event: its finish reasons, for the span (when traced)."""
    if trace is not None:
        trace.final(data)
        log.finish_reasons = tuple(trace.reasons)
    elif traced:
        log.finish_reasons = tuple(finish_reasons(data))


def _counter(side: Side, seg: Segment) -> Callable[[Usage, Any], bool]:
    """What an event that carries the counts ``u`` does: they are the stream's so far
    (billed when the answer ends; told to the trace; summed by the splice); True for the
    usage chunk only the gateway asked for (counted, not sent)."""
    trace, splice, hide_usage = side.s.trace, side.splice, side.s.hide_usage

    def counted(u: Usage, data: Any) -> bool:
        if trace is not None:
            before = 0 if seg.usage is None else seg.usage.input
            trace.usage((u.input - before, u.output), data)
        seg.usage = u
        if splice is not None:
            splice.usage = u  # what its usage events tell the client, summed
        return hide_usage and not data.get("choices")

    return counted
