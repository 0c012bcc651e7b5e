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

from dataclasses import replace
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.errors import Category, ClientStalled, exhausted
from gateway.formats import sse
from gateway.formats.splice import Splice, Transcript, partial_response
from gateway.formats.usage import Usage, limit
from gateway.live.attempter import HttpAttempter
from gateway.live.context import LiveRequest
from gateway.live.pump import pump
from gateway.live.stream_head import OpenStream
from gateway.observe.request_log import RequestLog
from gateway.recovery.billing import checked, estimate
from gateway.recovery.continuing import Segment, follow_stream, same_model
from gateway.recovery.engine import recover
from gateway.recovery.seams import Env, Request, Result
from gateway.resilience import continuation, followup
from gateway.resilience.classify import transport_failure
from gateway.resilience.failure import Failure
from gateway.resilience.verdict import cut_at_length
from gateway.upstream.deadlines import Limit

if TYPE_CHECKING:
    from gateway.money.pricing import Price

__all__ = ["LiveStream", "end", "relay"]


async def relay(
    ctx: LiveRequest, att: HttpAttempter, s: OpenStream, log: RequestLog, env: Env, result: Result
) -> web.StreamResponse:
    """Relay the stream ``s``, the answer of the attempt ``result`` tells of; ``att`` makes
    the attempts of a continuation or a resume, and holds the client's answer once
    committed."""
    try:
        out = await att.commit()
    except BaseException:
        if s.trace is not None:
            s.trace.end("cancelled")  # the client left before the stream began
        raise
    active = (out, ctx.endpoint)
    streams = ctx.live.streams
    streams.add(active)
    try:
        return await _relay(ctx, att, out, s, log, env, result)
    except ClientStalled:
        transport = ctx.client.transport
        if transport is not None:
            transport.abort()  # drop what it did not read; the connection is done
        raise
    finally:
        streams.discard(active)


async def _relay(
    ctx: LiveRequest,
    att: HttpAttempter,
    out: web.StreamResponse,
    s: OpenStream,
    log: RequestLog,
    env: Env,
    result: Result,
) -> web.StreamResponse:
    ep, req = ctx.endpoint, ctx.req
    tracked = ep.continuable and followup.tracks_answer(
        req.body, req.fmt, req.policy.output_recovery, req.policy.stream
    )
    side = LiveStream(ctx, att, out, s, log, env, Transcript(ep) if tracked else None)
    side.attempt(result)
    try:
        await follow_stream(side, req, log, env)
    finally:
        side.settle()  # also when the client left: what the provider streamed is billed
    await end(out, ctx.live.write_timeout)
    return out


class LiveStream:
    """The relay's side of :func:`gateway.recovery.continuing.follow_stream`: real upstream
    streams, relayed to the client as they arrive (:func:`gateway.live.pump.pump`)."""

    def __init__(
        self,
        ctx: LiveRequest,
        att: HttpAttempter,
        out: web.StreamResponse,
        s: OpenStream,
        log: RequestLog,
        env: Env,
        tx: Transcript | None,
    ) -> None:
        self.ctx, self.att, self.out, self.s, self.log, self.env = ctx, att, out, s, log, env
        self.req = req = ctx.req
        self.tx = tx  # what the client was sent, kept when a decision may need it
        self.splice: Splice | None = None  # set once a continued / resumed stream is spliced in
        # the answer's parts, billed once its end is known: (usage, price, model, estimated)
        self.parts: list[tuple[Usage, Price | None, str, bool]] = []
        # the current stream's attempt: its model (the one that answered), price, the
        # request it sent, and where its output starts in the transcript
        self.model, self.sent, self.output_at = req.model, req.body, 0
        self.price: Price | None = None
        self.most = 0  # the largest count its provider may report (gateway.formats.usage.limit)

    def attempt(self, result: Result) -> None:
        """The current stream is the answer of ``result``'s attempt (billed as it says)."""
        model = result.progress.model
        self.model, self.sent = model, result.body
        self.price = self.ctx.price(model, result.progress.deployment)
        self.most = limit(self.ctx.policies.models[model].context_window)
        self.output_at = self.tx.output if self.tx is not None else 0

    async def pump(self) -> Segment:
        s, seg = self.s, Segment()
        try:
            if s.trace is None:
                await pump(self, seg)
                return seg
            try:  # traced: the attempt's span ends with its stream
                await pump(self, seg)
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
        bill = self.req.bill
        for u, price, model, estimated in self.parts:
            bill.add(u, price, model, recovery, estimated)
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
        return self.tx is not None and cut_at_length(seg.held, self.ctx.endpoint)

    def text(self) -> str:
        return self.tx.text if self.tx is not None else ""

    def continuable(self) -> bool:
        return self.tx is not None and self.tx.resumable

    def prefill(self) -> bool:
        return self.ctx.policies.models[self.model].prefill

    async def open_continuation(self) -> bool:
        assert self.tx is not None
        follow = continuation.continuation_request(
            self.req.body, [partial_response(self.tx)], self.req.fmt, prefill=self.prefill()
        )
        opened = await _open(self.att, same_model(self.req, self.model, follow), self.log, self.env)
        if opened is None:
            return False
        self.s, result = opened
        self.splice = Splice(self.tx, self.ctx.endpoint, regenerate=False, base=self._sum())
        self.attempt(result)
        return True

    async def open_resume(self, modes: tuple[str, ...]) -> bool:
        assert self.tx is not None
        model = self.model  # the one that answered
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
                    self.tx, self.ctx.endpoint, regenerate=regenerate, base=self._sum()
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
        ep, tx = self.ctx.endpoint, self.tx
        original = self.att.scrubbed(original)  # an error event may quote our credentials
        _, etype = exhausted(original.category)
        message = f"upstream stream interrupted ({original.category.value}): {original.message}"
        rid = (tx.id if tx is not None else None) or f"resp_{self.ctx.request_id}"
        event = ep.fmt.stream_error(etype, message[:500], original.code, rid)
        write_s = self.ctx.live.write_timeout  # the break may have come while a write was waiting
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
