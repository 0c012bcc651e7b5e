"""One attempt's exchange with a provider: the request sent, its answer (or the head of its
stream) read, in the client's format, and classified.

The attempter (:mod:`gateway.live.attempter`) prepares an :class:`Attempt` (where it goes,
what it sends, how its answer is read) and :func:`exchange` carries it out. A streamed
answer is read up to its first event (:func:`gateway.live.stream_head.read_head`): an
error there is a failed attempt, not a cut stream.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import orjson

from gateway.errors import Category, Malformed, UpstreamFailure
from gateway.formats import sse
from gateway.formats.usage import Usage, limit
from gateway.live.context import Crossing, LiveRequest, frozen
from gateway.live.stream_head import OpenStream, asks_usage, read_head, reported, splitter_for
from gateway.observe.request_log import RequestLog
from gateway.providers import Target, Wiring
from gateway.recovery.billing import bill_failed, estimate
from gateway.recovery.seams import Outcome, json_object
from gateway.resilience.classify import classify_error_event, classify_response, transport_failure
from gateway.resilience.decide import FIRST_BYTE_TIMEOUT
from gateway.resilience.failure import Failure
from gateway.upstream.client import Body, Response
from gateway.upstream.egress_scrub import scrub, scrub_bytes, secrets_of

#: The headers and proxy of each attempt a request sent: the credentials a provider's
#: error text may quote (:func:`scrubbed`).
Sent = list[tuple[Mapping[str, str], str | None]]


@frozen
class Attempt:
    """One request to a provider, prepared: built once per attempt."""

    provider: str
    model: str  # the public model name
    deployment: int  # the model's deployment it goes to (its price)
    target: Target  # the URL and headers
    wiring: Wiring  # the proxy, TLS and cloud of the provider
    body: Body  # the encoded body, let go of once sent
    within: float  # seconds it may take: the request's deadline, or an ask's own bound
    stream: bool
    crossing: Crossing | None = None  # translated: the formats out and back
    hide_usage: bool = False  # the stream's usage chunk is the gateway's, not the client's
    eventstream: bool = False  # the stream comes in AWS event-stream frames (Bedrock)


async def exchange(ctx: LiveRequest, log: RequestLog, sent: Sent, a: Attempt) -> Outcome:
    """Carry out ``a``: the provider's answer, or the head of its stream, in the client's
    format; a failure classified (and counted in ``upstream_attempts_total``)."""
    req, upstream = ctx.req, ctx.live.upstream
    timeouts = req.policy.timeouts
    first_byte = min(timeouts.first_byte, a.within)
    sent.append((a.target.headers, a.wiring.proxy))
    try:
        resp = await upstream.open(
            a.target.url,
            a.target.headers,
            a.body,
            connect_timeout=min(timeouts.connect, a.within),
            first_byte_timeout=first_byte,
            proxy=a.wiring.proxy,
            ssl_context=a.wiring.tls,
        )
        if resp.status >= 300:
            raw = await upstream.read(resp, timeouts.stream_idle, req.deadline)
            return _refused(ctx, sent, a, resp, raw)
        if a.stream:
            return await _open_stream(ctx, log, sent, a, resp, first_byte)
        raw = await upstream.read(resp, timeouts.stream_idle, req.deadline)
    except UpstreamFailure as e:
        f = transport_failure(e.category, e.message)
        if e.category is Category.timeout and e.stage == "first_byte":
            f = Failure(
                Category.timeout, None, e.message, code=FIRST_BYTE_TIMEOUT, stage=FIRST_BYTE_TIMEOUT
            )
        count(ctx, a, f)
        return Outcome(f, status=0)
    if a.crossing is not None:
        return _translated(ctx, a, raw, resp.headers, a.crossing)
    count(ctx, a, None)
    ctype = resp.headers.get("content-type", "application/json")
    return Outcome(None, 200, raw, ctype, resp.headers)  # the fields in order: no failure


def _refused(ctx: LiveRequest, sent: Sent, a: Attempt, resp: Response, raw: bytes) -> Outcome:
    """The provider's error answer (a status of 300 or more), classified as it said it,
    free of the gateway's credentials and shown in the client's format."""
    raw = scrub_bytes(raw, secrets_of(sent))  # before anything reads it
    cloud = a.wiring.cloud
    if cloud is not None:  # Bedrock's errors in Anthropic's shape
        raw = cloud.error_body(resp.headers, raw)
    rules = ctx.req.policy.classify
    f = classify_response(resp.status, resp.headers, raw, rules=rules, now=time.time())
    count(ctx, a, f)
    ctype = resp.headers.get("content-type", "application/json")
    crossing = a.crossing
    if crossing is not None:  # classified as the provider said, shown as the client's
        from gateway.translate import convert as translate

        raw = translate.error(resp.status, raw, crossing.upstream_fmt, crossing.client_fmt)
        ctype = "application/json"
    return Outcome(f, resp.status, raw, ctype, resp.headers)


def _translated(
    ctx: LiveRequest, a: Attempt, raw: bytes, headers: Any, crossing: Crossing
) -> Outcome:
    """A provider's JSON answer in the client's format (an undecodable one: a failure)."""
    from gateway.translate import convert as translate

    data = json_object(raw)
    try:
        if data is None:
            raise Malformed("the provider's answer is not JSON")
        answer = translate.answer(
            data, crossing.upstream_fmt, crossing.client_fmt, crossing.model, crossing.names
        )
    except Malformed as e:  # a broken provider: retried like a server error
        f = transport_failure(Category.server_error, str(e))
        count(ctx, a, f)
        return Outcome(f, status=502)
    count(ctx, a, None)
    return Outcome(body=orjson.dumps(answer), headers=headers, data=answer)


async def _open_stream(
    ctx: LiveRequest, log: RequestLog, sent: Sent, a: Attempt, resp: Response, first_byte: float
) -> Outcome:
    """Read up to the first event: an error there is a failed attempt, not a cut stream
    (recovery cost when its provider reported counts before it: :func:`_bill_failed`)."""
    hide_usage, crossing, endpoint = a.hide_usage, a.crossing, ctx.endpoint
    if crossing is not None:
        # the usage chunk, a chat client's own choice (others always have usage), is
        # written all the same, for the gateway to count: kept from a client that did not
        # ask for it, as the relay does with a chat provider's
        hide_usage = crossing.client_fmt.usage_if_asked and not asks_usage(ctx.req.body)
    splitter = splitter_for(crossing, a.eventstream)
    head: list[sse.Event] = []
    f = await read_head(resp, splitter, endpoint, first_byte, ctx.live.max_event_bytes, head)
    if f is not None:
        count(ctx, a, f)
        _bill_failed(ctx, log, a, reported(splitter, head, endpoint))
        return Outcome(f, status=0)
    first = next((e for e in head if not sse.is_preamble(e)), head[-1])
    if first.kind is sse.Kind.error:
        resp.close()
        rules = ctx.req.policy.classify
        f = classify_error_event(first.data, rules=rules, now=time.time())
        count(ctx, a, f)
        _bill_failed(ctx, log, a, reported(splitter, head, endpoint))
        secrets = secrets_of(sent)
        return Outcome(scrubbed(f, secrets), status=0, body=scrub_bytes(first.raw, secrets))
    count(ctx, a, None)
    return Outcome(
        stream=OpenStream(resp, splitter, head, hide_usage=hide_usage), headers=resp.headers
    )


def _bill_failed(ctx: LiveRequest, log: RequestLog, a: Attempt, u: Usage | None) -> None:
    """A failed attempt whose provider reported the counts ``u``
    (:func:`gateway.recovery.billing.bill_failed`: recovery cost)."""
    if u is not None:
        req, model = ctx.req, a.model
        window = ctx.policies.models[model].context_window
        bill_failed(
            req.bill, log, u, ctx.price(model, a.deployment), model, limit(window),
            lambda: estimate(req.body, req.fmt, 0),
        )  # fmt: skip


def count(ctx: LiveRequest, a: Attempt, f: Failure | None) -> None:
    """Count the attempt ``a`` in ``upstream_attempts_total``: ok, or its failure's category."""
    ctx.live.events.upstream_attempt(a.provider, a.model, "ok" if f is None else f.category.value)


def scrubbed(f: Failure, secrets: tuple[str, ...]) -> Failure:
    """``f`` with the provider's message and code free of the gateway's credentials
    (``secrets``: :func:`gateway.upstream.egress_scrub.secrets_of`)."""
    message, code = scrub(f.message, secrets), f.code and scrub(f.code, secrets)
    return f if (message, code) == (f.message, f.code) else replace(f, message=message, code=code)
