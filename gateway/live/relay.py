"""The stream relay: upstream events to the client, honestly, resumed where the policy says.

Events pass through as the provider sent them. A stream is complete only when the
upstream's final event arrived. When it breaks after the first byte, the client gets
the endpoint's error event; with ``stream.on_midstream_failure: continue`` the answer
is first resumed in the same stream (prefill where the model supports it, else a
regeneration that must start with what was already sent). An answer cut at the token
limit is continued in the same stream (``output_recovery``), its closing events held
back until the gateway knows whether it goes on.

Each upstream stream is billed once, when the answer's end is known, on the price of the
deployment that served it: a part of the answer (its output reached the client), or
recovery (a stream cut and then regenerated: the new stream's output replaced it). Its
usage is the last its provider reported (a translated stream's, as its splitter read
it: the client's events carry it only at the end); a stream cut before any is estimated
from the request sent and what the model wrote that it relayed, counted whatever the
policy (:func:`gateway.recovery.billing.estimate`; the transcript's output, else a running count of
each event's :meth:`~gateway.formats.Format.stream_output`). The
usage events of a resumed or continued stream tell the client the parts' sum
(:class:`~gateway.formats.splice.Splice`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.errors import Category, UpstreamFailure, exhausted
from gateway.formats import sse
from gateway.formats.splice import Diverged, Splice, Transcript, partial_response
from gateway.formats.usage import Usage, limit
from gateway.live.attempter import HttpAttempter
from gateway.live.stream_head import OpenStream
from gateway.observe.request_log import RequestLog
from gateway.observe.tracing import finish_reasons
from gateway.recovery.billing import checked, estimate
from gateway.recovery.continuing import Segment, follow_stream, same_model
from gateway.recovery.engine import recover
from gateway.recovery.seams import Env, Request, Result
from gateway.resilience import continuation, followup
from gateway.resilience.classify import classify_error_event, transport_failure
from gateway.resilience.failure import Failure
from gateway.resilience.verdict import DEADLINE_MESSAGE, cut_at_length, verdict
from gateway.upstream.client import MAPPED, failure
from gateway.upstream.deadlines import Limit

if TYPE_CHECKING:
    from gateway.money.pricing import Price

DATA, FINAL, ERROR, MALFORMED = sse.DATA, sse.FINAL, sse.ERROR, sse.MALFORMED
READ, WRITE = "read", "write"  # the waits of a stream
DEADLINE = "deadline"  # the request's own: timeouts.total, or the client's shorter timeout


class ClientStalled(ConnectionError):
    """The client stopped reading: a write made no progress for ``client_write_timeout_s``."""


async def relay(
    att: HttpAttempter, s: OpenStream, req: Request, log: RequestLog, env: Env, result: Result
) -> web.StreamResponse:
    """Relay the stream ``s``, the answer of the attempt ``result`` tells of."""
    try:
        out = await att.commit()
    except BaseException:
        if s.trace is not None:
            s.trace.end("cancelled")  # the client left before the stream began
        raise
    ep = att.endpoint
    active = (out, ep)
    att.streams.add(active)
    try:
        return await _relay(att, out, s, req, log, env, result)
    except ClientStalled:
        transport = att.request.transport
        if transport is not None:
            transport.abort()  # drop what it did not read; the connection is done
        raise
    finally:
        att.streams.discard(active)


async def _relay(
    att: HttpAttempter,
    out: web.StreamResponse,
    s: OpenStream,
    req: Request,
    log: RequestLog,
    env: Env,
    result: Result,
) -> web.StreamResponse:
    ep = att.endpoint
    tracked = ep.continuable and followup.tracks_answer(
        req.body, req.fmt, req.policy.output_recovery, req.policy.stream
    )
    side = LiveStream(att, out, s, req, log, env, Transcript(ep) if tracked else None)
    side.attempt(result)
    try:
        await follow_stream(side, req, log, env)
    finally:
        side.settle()  # also when the client left: what the provider streamed is billed
    await end(out, att.write_timeout)
    return out


class LiveStream:
    """The relay's side of :func:`gateway.recovery.continuing.follow_stream`: real upstream
    streams, relayed to the client as they arrive."""

    def __init__(
        self,
        att: HttpAttempter,
        out: web.StreamResponse,
        s: OpenStream,
        req: Request,
        log: RequestLog,
        env: Env,
        tx: Transcript | None,
    ) -> None:
        self.att, self.out, self.s, self.req, self.log, self.env = att, out, s, req, log, env
        self.tx = tx  # what the client was sent, kept when a decision may need it
        self.splice: Splice | None = None  # set once a continued / resumed stream is spliced in
        # the answer's parts, billed once its end is known: (usage, price, model, estimated)
        self.parts: list[tuple[Usage, Price | None, str, bool]] = []
        # the current stream's attempt: its model, price, the request it sent, and where
        # its output starts in the transcript
        self.model, self.sent, self.output_at = req.model, req.body, 0
        self.price: Price | None = None
        self.most = 0  # the largest count its provider may report (gateway.formats.usage.limit)

    def attempt(self, result: Result) -> None:
        """The current stream is the answer of ``result``'s attempt (billed as it says)."""
        model = result.progress.model
        self.model, self.sent = model, result.body
        self.price = self.att.price(model, result.progress.deployment)
        self.most = limit(self.att.policies.models[model].context_window)
        self.output_at = self.tx.output if self.tx is not None else 0

    async def pump(self) -> Segment:
        s, seg = self.s, Segment()
        try:
            if s.trace is None:
                await _pump(self.att, self.out, s, self.tx, self.splice, self.log, self.env, seg)
                return seg
            try:  # traced: the attempt's span ends with its stream
                await _pump(self.att, self.out, s, self.tx, self.splice, self.log, self.env, seg)
            except BaseException:
                s.trace.end("cancelled")  # the client left or stalled
                raise
            s.trace.end(None if seg.failure is None else seg.failure.category.value)
            return seg
        finally:
            self.parts.append(self._part(seg))

    def _part(self, seg: Segment) -> tuple[Usage, Price | None, str, bool]:
        """The stream that ended as ``seg``, as a part to bill: what it reported (a
        translated stream cut before its usage event: what its splitter read, the
        ``message_start`` counts of an Anthropic provider, say), else (cut before its usage
        event, or before its last count) estimated from what it relayed (the transcript's
        output when one is kept, else the stream's running count). A count the provider
        reported wins over the estimate, but for the output of a cut stream: at least
        what it delivered."""
        u, estimated = seg.usage, False
        if u is None:
            u = self.s.splitter.usage
        if u is not None and not u.input and not u.output:
            u = None  # a translated stream's usage with no counts from the provider
        tx = self.tx
        output = seg.output if tx is None else tx.output - self.output_at
        if u is not None:  # the provider's counts: those it cannot have meant, estimated
            u, estimated = checked(
                self.log, u, self.model, self.most,
                lambda: estimate(self.sent, self.req.fmt, output),
            )  # fmt: skip
        if u is None or not seg.complete:
            guess = estimate(self.sent, self.req.fmt, output)
            if u is None:
                u, estimated = guess, True
            elif guess.output > u.output:  # an Anthropic message_start's count, say
                u, estimated = replace(u, output=guess.output), True
        return u, self.price, self.model, estimated

    def _bill(self, recovery: bool) -> None:
        for u, price, model, estimated in self.parts:
            self.log.bill(u, price, model, recovery=recovery, estimated=estimated)
        self.parts.clear()

    def _sum(self) -> Usage:
        """The usage of the answer's parts so far."""
        total = Usage()
        for u, *_ in self.parts:
            total.add(u)
        return total

    def settle(self) -> None:
        """Bill the answer's parts (the stream is over)."""
        self._bill(recovery=False)

    def cut(self, seg: Segment) -> bool:
        return self.tx is not None and cut_at_length(seg.held, self.att.endpoint)

    def text(self) -> str:
        return self.tx.text if self.tx is not None else ""

    def continuable(self) -> bool:
        return self.tx is not None and self.tx.resumable

    def prefill(self) -> bool:
        return self.att.policies.models[self.log.answered_by or self.req.model].prefill

    async def open_continuation(self) -> bool:
        assert self.tx is not None
        model = self.log.answered_by or self.req.model
        follow = continuation.continuation_request(
            self.req.body, [partial_response(self.tx)], self.req.fmt, prefill=self.prefill()
        )
        opened = await _open(self.att, same_model(self.req, model, follow), self.log, self.env)
        if opened is None:
            return False
        self.s, result = opened
        self.splice = Splice(self.tx, self.att.endpoint, regenerate=False, base=self._sum())
        self.attempt(result)
        return True

    async def open_resume(self, modes: tuple[str, ...]) -> bool:
        assert self.tx is not None
        model = self.log.answered_by or self.req.model
        for mode in modes:
            if mode == followup.PREFILL:
                follow = continuation.continuation_request(
                    self.req.body, [partial_response(self.tx)], self.req.fmt, prefill=True
                )
                sub = replace(self.req, body=follow, model=model)
            else:
                sub = self.req  # regenerate: the original request again
            opened = await _open(self.att, sub, self.log, self.env)
            if opened is not None:
                regenerate = mode == followup.REGENERATE
                if regenerate:  # the new stream's output replaces what was sent: recovery
                    self._bill(recovery=True)
                self.s, result = opened
                self.splice = Splice(
                    self.tx, self.att.endpoint, regenerate=regenerate, base=self._sum()
                )
                self.attempt(result)
                return True
        return False

    async def finish(self, seg: Segment) -> None:
        if not await _flush(self.out, seg.held, self.tx, self.splice):
            f = transport_failure(Category.connection, "resume diverged at its end")
            self.log.error = f"stream interrupted: {f.category.value}"
            await self.fail(f)  # never a stream without its final event

    async def fail(self, original: Failure) -> None:
        ep, tx = self.att.endpoint, self.tx
        original = self.att.scrubbed(original)  # an error event may quote our credentials
        _, etype = exhausted(original.category)
        message = f"upstream stream interrupted ({original.category.value}): {original.message}"
        rid = (tx.id if tx is not None else None) or f"resp_{self.log.request_id}"
        event = ep.fmt.stream_error(etype, message[:500], original.code, rid)
        write_s = self.att.write_timeout  # the break may have come while a write was waiting
        try:
            with Limit(write_s):
                await self.out.write(event)
        except TimeoutError:
            raise ClientStalled(f"the client read nothing for {write_s:g} s") from None


async def end(out: web.StreamResponse, write_timeout: float) -> None:
    """End the answer; a client that takes none of it within ``write_timeout`` is gone."""
    try:
        with Limit(write_timeout):
            await out.write_eof()
    except TimeoutError:
        raise ClientStalled(f"the client read nothing for {write_timeout:g} s") from None


async def _pump(
    att: HttpAttempter,
    out: web.StreamResponse,
    s: OpenStream,
    tx: Transcript | None,
    splice: Splice | None,
    log: RequestLog,
    env: Env,
    seg: Segment,
) -> None:
    """Relay one upstream stream until it ends, breaks or diverges (how: ``seg``).

    Pieces are read as they arrive and written at once; a client that does not read
    holds the next read back (aiohttp then stops reading the upstream socket), up to
    ``client_write_timeout_s``. One :class:`~gateway.upstream.deadlines.Limit` bounds every wait:
    the upstream's silence by ``timeouts.stream_idle``, a stalled client by the write
    timeout. A second one, set once, is the request's deadline: however busy the
    upstream, the stream breaks there (a timeout that is not resumed).
    """
    ep = att.endpoint
    rules = att.req.policy.classify
    held = seg.held
    trace = s.trace  # None unless traced: then it collects what the attempt's span ends with
    # Where only events with a "usage" key carry usage (chat), the others are not looked
    # at for it (Format.usage_key).
    usage_key = ep.fmt.usage_key
    hide_usage = s.hide_usage  # the chat usage chunk the client did not ask for: not sent
    output = ep.fmt.stream_output

    def take(batch: Iterable[sse.Classified]) -> bytes:
        keep: list[bytes] = []
        for raw, kind, data in batch:
            if kind is not DATA:  # the usual event is data: it skips these tests
                if kind is MALFORMED:
                    env.events.stream_event_dropped(log, log.answered_by)
                    continue
                if kind is ERROR:
                    seg.failure = classify_error_event(data, rules=rules, now=time.time())
                    break
                if kind is FINAL:
                    seg.complete = True
                    if trace is not None:
                        trace.final(data)
                        log.finish_reasons = tuple(trace.reasons)
                    elif log.span is not None:
                        log.finish_reasons = tuple(finish_reasons(data))
            if (
                data is not None
                and (usage_key is None or data.get(usage_key) is not None)
                and (u := sse.usage_of(data, ep, seg.usage)) is not None
            ):
                if trace is not None:
                    before = 0 if seg.usage is None else seg.usage.input
                    trace.usage((u.input - before, u.output), data)
                seg.usage = u  # the stream's counts so far (billed when the answer ends)
                if splice is not None:
                    splice.usage = u  # what its usage events tell the client, summed
                if hide_usage and not data.get("choices"):
                    continue  # the usage chunk only the gateway asked for: counted, not sent
            if tx is None:  # nothing to keep track of: relayed as it came, its output counted
                if data is not None:
                    seg.output += output(data)
                keep.append(raw)
            elif held:
                held.append(sse.Event(raw, kind, data))  # after a closing event: held
            elif splice is None:
                if tx.record(kind, data):  # closing: held until we know if the answer goes on
                    held.append(sse.Event(raw, kind, data))
                else:
                    keep.append(raw)
            elif tx.closes(ev := sse.Event(raw, kind, data)):
                held.append(ev)
            else:
                fed = splice.feed(ev)  # a resumed or continued answer, spliced in
                if isinstance(fed, Diverged):
                    seg.diverged = True
                    break
                keep.append(fed)
        return keep[0] if len(keep) == 1 else b"".join(keep)

    idle = att.req.policy.timeouts.stream_idle
    write_s = att.write_timeout
    cap = att.upstream.limits.max_event_bytes
    content = s.resp.content
    splitter = s.splitter
    feed, classify = splitter.feed, sse.classifier(ep)
    lim = Limit(None)
    total = Limit(att.req.deadline - time.monotonic(), DEADLINE)  # no work per piece
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
                    if tail := splitter.close():  # a translated stream's closing events
                        data = take([classify(r) for r in tail])
                        if data:
                            lim.set(write_s, WRITE)
                            await out.write(data)
                    break
                raws = feed(piece)
                if len(raws) == 1:  # the usual read: one event (no comprehension to call)
                    data = take((classify(raws[0]),))
                else:
                    data = take([classify(r) for r in raws]) if raws else b""
                # what is left over is at most this piece: a piece that yielded events and
                # is under the cap cannot have put the splitter over it
                if (not raws or len(piece) > cap) and len(splitter.pending) > cap:
                    broken = UpstreamFailure(
                        Category.connection, f"upstream event over {cap} bytes", "stream"
                    )
                    break
    except TimeoutError:
        if lim.expired == WRITE:
            raise ClientStalled(f"the client read nothing for {write_s:g} s") from None
        if total.expired is not None:
            broken = UpstreamFailure(Category.timeout, DEADLINE_MESSAGE, "stream")
        else:
            broken = UpstreamFailure(
                Category.timeout, f"upstream went quiet for {idle:g} s mid-stream", "stream"
            )
    finally:
        s.resp.close()
        if splitter.malformed:  # a translated stream's undecodable events, counted at once
            env.events.stream_event_dropped(log, log.answered_by, splitter.malformed)
    seg.failure = verdict(
        seg.complete,
        seg.failure,
        seg.diverged,
        None if broken is None else (broken.category, broken.message),
        total.expired is not None,
    )
    if seg.failure is not None:
        seg.complete = False


async def _flush(
    out: web.StreamResponse,
    held: list[sse.Event],
    tx: Transcript | None,
    splice: Splice | None,
) -> bool:
    """Send the closing events that were held back (through the splice, if resumed);
    False when the resumed answer diverged there (what came before is sent)."""
    if not held:
        return True
    if splice is None:
        if tx is not None:
            for ev in held:
                tx.observe(ev)
        await out.write(b"".join(ev.raw for ev in held))
        return True
    fed = [splice.feed(ev) for ev in held]
    sent = [d for d in fed if isinstance(d, bytes)]
    await out.write(b"".join(sent))
    return len(sent) == len(fed)


async def _open(
    att: HttpAttempter, sub: Request, log: RequestLog, env: Env
) -> tuple[OpenStream, Result] | None:
    result = await recover(sub, log, env, att)
    stream = result.outcome.stream
    if result.outcome.failure is None and isinstance(stream, OpenStream):
        return stream, result
    return None
