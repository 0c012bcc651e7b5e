"""The stream relay: upstream events to the client, honestly, resumed where the policy says.

Events pass through as the provider sent them. A stream is complete only when the
upstream's final event arrived. When it breaks after the first byte, the client gets
the endpoint's error event; with ``stream.on_midstream_failure: continue`` the answer
is first resumed in the same stream (prefill where the model supports it, else a
regeneration that must start with what was already sent). An answer cut at the token
limit is continued in the same stream (``output_recovery``), its closing events held
back until the gateway knows whether it goes on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web

from gateway import streaming
from gateway.deadlines import Limit
from gateway.engine import Env, Request, recover
from gateway.errors import Category
from gateway.observe.events import RequestLog
from gateway.observe.tracing import finish_reasons
from gateway.policy.schema import Fallback
from gateway.providers import Endpoint
from gateway.proxy import HttpAttempter, OpenStream
from gateway.resilience import continuation
from gateway.resilience.classify import classify_error_event, transport_failure
from gateway.resilience.failure import Failure
from gateway.resume import API_OF, Diverged, Splice, Transcript, partial_response
from gateway.upstream import MAPPED, UpstreamFailure, failure

Kind = streaming.Kind
READ, WRITE = "read", "write"  # the waits of a stream
MAX_RESUMES = 2
STREAM_ERROR_TYPE = {
    Category.rate_limit: "rate_limit_error",
    Category.server_overload: "overloaded_error",
    Category.timeout: "timeout_error",
}


@dataclass(slots=True)
class Segment:
    """How one upstream stream ended."""

    complete: bool = False
    failure: Failure | None = None
    diverged: bool = False
    held: list[streaming.Event] = field(default_factory=list)


class ClientStalled(ConnectionError):
    """The client stopped reading: a write made no progress for ``client_write_timeout_s``."""


async def relay(
    att: HttpAttempter, s: OpenStream, req: Request, log: RequestLog, env: Env
) -> web.StreamResponse:
    out = await att.commit()
    ep = att.endpoint
    active = (out, ep)
    att.streams.add(active)
    try:
        return await _relay(att, out, s, req, log, env)
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
) -> web.StreamResponse:
    ep = att.endpoint
    tx = Transcript(ep) if ep in API_OF and _may_resume(req) else None
    splice: Splice | None = None
    original: Failure | None = None  # the first failure: the one the client is told about
    resumes = continuations = 0
    while True:
        seg = await _pump(att, out, s, tx, splice, log, env)
        if seg.complete:
            if (
                tx is not None
                and _cut_at_length(seg.held, ep)
                and _may_continue(req, continuations)
                and tx.resumable
                and (nxt := await _continue(att, req, tx, log, env)) is not None
            ):
                s, splice = nxt, Splice(tx, ep, regenerate=False)
                continuations += 1
                log.used("continuation")
                env.events.output_continuation(log, log.answered_by, continuations)
                continue
            await _flush(out, seg.held, tx, splice)
            break
        original = original or seg.failure
        assert original is not None
        resuming = (
            not seg.diverged
            and tx is not None
            and resumes < MAX_RESUMES
            and req.policy.stream.on_midstream_failure == "continue"
            and tx.resumable
        )
        action = "resume" if resuming else "error_event"
        env.events.stream_interrupted(log, log.answered_by, seg.failure or original, action)
        if resuming and tx is not None and (nxt2 := await _resume(att, req, tx, log, env)):
            s, splice = nxt2
            resumes += 1
            log.used("retry")
            continue
        log.error = f"stream interrupted: {original.category.value}"
        etype = STREAM_ERROR_TYPE.get(original.category, "api_error")
        message = f"upstream stream interrupted ({original.category.value}): {original.message}"
        rid = (tx.id if tx is not None else None) or f"resp_{log.request_id}"
        await out.write(streaming.error_event(ep, etype, message[:500], original.code, rid))
        break
    await end(out, att.write_timeout)
    return out


async def end(out: web.StreamResponse, write_timeout: float) -> None:
    """End the answer; a client that takes none of it within ``write_timeout`` is gone."""
    try:
        with Limit(write_timeout):
            await out.write_eof()
    except TimeoutError:
        raise ClientStalled(f"the client read nothing for {write_timeout:g} s") from None


def _may_resume(req: Request) -> bool:
    return req.policy.stream.on_midstream_failure == "continue" or _may_continue(req, 0)


def _may_continue(req: Request, done: int) -> bool:
    oc = req.policy.output_recovery
    if done >= oc.max_continuations:
        return False
    return not (
        oc.respect_client_max_tokens and continuation.client_capped_output(req.body, req.api)
    )


async def _pump(
    att: HttpAttempter,
    out: web.StreamResponse,
    s: OpenStream,
    tx: Transcript | None,
    splice: Splice | None,
    log: RequestLog,
    env: Env,
) -> Segment:
    """Relay one upstream stream until it ends, breaks or diverges.

    Pieces are read as they arrive and written at once; a client that does not read
    holds the next read back (aiohttp then stops reading the upstream socket), up to
    ``client_write_timeout_s``. One :class:`~gateway.deadlines.Limit` bounds every wait:
    the upstream's silence by ``timeouts.stream_idle``, a stalled client by the write
    timeout.
    """
    ep = att.endpoint
    rules = att.req.policy.classify
    seg = Segment()

    def take(batch: list[streaming.Event]) -> bytes:
        keep: list[bytes] = []
        for ev in batch:
            kind = ev.kind
            if kind is Kind.malformed:
                env.events.stream_event_dropped(log, log.answered_by)
                continue
            if kind is Kind.error:
                seg.failure = classify_error_event(ev.data, rules=rules, now=time.time())
                break
            if kind is Kind.final:
                seg.complete = True
                if log.span is not None:
                    log.finish_reasons = tuple(finish_reasons(ev.data))
            if ev.data is not None and (u := streaming.usage_of(ev.data, ep)):
                log.prompt_tokens += u[0]
                log.completion_tokens = max(log.completion_tokens, u[1])
            if tx is not None and (seg.held or tx.closes(ev)):
                seg.held.append(ev)  # until we know whether the answer goes on
            elif splice is not None:
                data = splice.feed(ev)
                if isinstance(data, Diverged):
                    seg.diverged = True
                    break
                keep.append(data)
            else:
                if tx is not None:
                    tx.observe(ev)
                keep.append(ev.raw)
        return b"".join(keep)

    idle = att.req.policy.timeouts.stream_idle
    write_s = att.write_timeout
    cap = att.upstream.limits.max_event_bytes
    content = s.resp.content
    feed, classify = s.splitter.feed, streaming.classify_event
    lim = Limit(None)
    broken: UpstreamFailure | None = None
    try:
        with lim:
            data = take(s.head)
            while True:
                if data:
                    lim.set(write_s, WRITE)
                    await out.write(data)  # a client that left raises here: not ours to handle
                if seg.failure is not None or seg.diverged:
                    break
                lim.set(idle, READ)
                try:
                    piece = await content.readany()
                except MAPPED as e:
                    broken = failure(e, "stream")
                    break
                lim.set(None)
                if not piece:
                    break
                batch = [classify(r, ep) for r in feed(piece)]
                data = take(batch) if batch else b""
                if len(s.splitter.pending) > cap:
                    broken = UpstreamFailure(
                        Category.connection, f"upstream event over {cap} bytes", "stream"
                    )
                    break
    except TimeoutError:
        if lim.expired == WRITE:
            raise ClientStalled(f"the client read nothing for {write_s:g} s") from None
        broken = UpstreamFailure(
            Category.timeout, f"upstream went quiet for {idle:g} s mid-stream", "stream"
        )
    finally:
        s.resp.close()
    if broken is not None and not seg.complete:
        seg.failure = transport_failure(broken.category, broken.message)
    if seg.diverged:
        seg.failure = seg.failure or transport_failure(Category.connection, "resume diverged")
    elif seg.failure is None and not seg.complete:
        seg.failure = transport_failure(
            Category.connection, "upstream stream ended before its final event"
        )
    if seg.failure is not None:
        seg.complete = False
    return seg


async def _flush(
    out: web.StreamResponse,
    held: list[streaming.Event],
    tx: Transcript | None,
    splice: Splice | None,
) -> None:
    """Send the closing events that were held back (through the splice, if resumed)."""
    if not held:
        return
    if splice is None:
        if tx is not None:
            for ev in held:
                tx.observe(ev)
        await out.write(b"".join(ev.raw for ev in held))
        return
    fed = [splice.feed(ev) for ev in held]
    await out.write(b"".join(d for d in fed if isinstance(d, bytes)))


def _cut_at_length(held: list[streaming.Event], ep: Endpoint) -> bool:
    for ev in held:
        d: Any = ev.data
        if not isinstance(d, dict):
            continue
        if ep is Endpoint.chat:
            if any(
                isinstance(c, dict) and c.get("finish_reason") == "length"
                for c in d.get("choices") or ()
            ):
                return True
        elif ep is Endpoint.messages:
            if (
                d.get("type") == "message_delta"
                and (d.get("delta") or {}).get("stop_reason") == "max_tokens"
            ):
                return True
        elif d.get("type") == "response.incomplete":
            details = (d.get("response") or {}).get("incomplete_details") or {}
            if details.get("reason") == "max_output_tokens":
                return True
    return False


async def _open(att: HttpAttempter, sub: Request, log: RequestLog, env: Env) -> OpenStream | None:
    result = await recover(sub, log, env, att)
    stream = result.outcome.stream
    return stream if result.outcome.failure is None and isinstance(stream, OpenStream) else None


async def _continue(
    att: HttpAttempter, req: Request, tx: Transcript, log: RequestLog, env: Env
) -> OpenStream | None:
    """Ask the model that answered to go on after an answer cut at the token limit."""
    model = log.answered_by or req.model
    prefill = att.policies.models[model].prefill
    api = API_OF[att.endpoint]
    follow = continuation.continuation_request(
        req.body, [partial_response(tx)], api, prefill=prefill
    )
    same_model = req.policy.model_copy(update={"fallback": Fallback()})
    sub = replace(req, body=follow, model=model, policy=same_model)
    return await _open(att, sub, log, env)


async def _resume(
    att: HttpAttempter, req: Request, tx: Transcript, log: RequestLog, env: Env
) -> tuple[OpenStream, Splice] | None:
    """Resume a broken answer: prefill where the model supports it, else regenerate."""
    model = log.answered_by or req.model
    api = API_OF[att.endpoint]
    if att.policies.models[model].prefill:
        follow = continuation.continuation_request(
            req.body, [partial_response(tx)], api, prefill=True
        )
        sub = replace(req, body=follow, model=model)
        stream = await _open(att, sub, log, env)
        if stream is not None:
            return stream, Splice(tx, att.endpoint, regenerate=False)
    stream = await _open(att, req, log, env)  # regenerate: the original request again
    if stream is not None:
        return stream, Splice(tx, att.endpoint, regenerate=True)
    return None
