"""The proxy side of the engine: attempts over HTTP, and the waits between them, with keepalives.

:class:`HttpAttempter` is what :func:`gateway.recovery.engine.recover` drives for a live
request. It prepares each attempt (the deployment, the translation, the target and body)
and :func:`gateway.live.exchange.exchange` carries it out. Streams are peeked up to their
first event before an attempt counts as a success (:mod:`gateway.live.stream_head`), so
an error that arrives as the first event is recovered invisibly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.errors import Category, GatewayError, Refused
from gateway.formats import MESSAGES, Format, sse
from gateway.formats.endpoints import endpoint_of
from gateway.live.context import Crossing, LiveRequest
from gateway.live.exchange import Attempt, Sent, exchange, scrubbed
from gateway.live.stream_head import USAGE_CHUNK, OpenStream, asks_usage, with_usage
from gateway.observe.request_log import RequestLog
from gateway.providers import Target, Wiring, target
from gateway.providers.cloud_target import cloud_target
from gateway.recovery.admission import past_deadline, untranslatable
from gateway.recovery.seams import Outcome
from gateway.resilience.classify import transport_failure
from gateway.resilience.conversation import estimate_tokens
from gateway.resilience.decide import Progress, Retry
from gateway.resilience.failure import Failure
from gateway.routing.policyset import Deployed
from gateway.upstream.client import Body
from gateway.upstream.deadlines import Limit
from gateway.upstream.egress_scrub import secrets_of

if TYPE_CHECKING:
    from gateway.money.pricing import Price
# gateway.translate is imported where a request crosses formats: a gateway whose models
# all speak their clients' formats never loads the translation modules (0.7 MB of RSS).


class HttpAttempter:
    __slots__ = ("ctx", "hide_usage", "log", "response", "sent")

    def __init__(self, ctx: LiveRequest, log: RequestLog) -> None:
        self.ctx = ctx
        self.log = log
        self.response: web.StreamResponse | None = None  # committed early for keepalives
        # the headers and proxy of each attempt sent: the credentials a provider's error
        # text may quote, scrubbed from it before it reaches the client (:meth:`scrubbed`)
        self.sent: Sent = []
        # A chat (or legacy completions) stream whose client did not ask for the usage
        # chunk: the gateway asks for it all the same (its tokens are counted, for the team's
        # tokens_per_minute and the metrics) and keeps it from the client.
        self.hide_usage = (
            ctx.stream and ctx.endpoint in USAGE_CHUNK and not asks_usage(ctx.req.body)
        )

    # ---- Attempter -------------------------------------------------------------------
    def deployments(self, model: str) -> tuple[Sequence[Deployed], str]:
        policies = self.ctx.policies
        return policies.deployments[model], policies.models[model].rule

    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        """One attempt on ``model``'s deployment ``progress.deployment``: prepared (translated
        when the deployment speaks another format; asking for the usage chunk the gateway
        counts), then carried out (:func:`gateway.live.exchange.exchange`); or the outcome
        that ends it before it is sent (the deadline passed, a body the translators refuse,
        a format the deployment cannot take, no credential)."""
        ctx, log = self.ctx, self.log
        deployment = progress.deployment
        d = self._deployment(model, deployment)
        provider = d.provider
        log.provider = provider
        log.deployment = d.name
        wiring = ctx.live.wiring(provider, d.key_env)
        remaining = ctx.req.deadline - ctx.live.monotonic()
        if remaining <= 0:
            return Outcome(past_deadline())
        endpoint = ctx.endpoint
        crossing: Crossing | None = None
        if endpoint.fmt in d.fmts or not endpoint.continuable:  # relayed as it is
            if wiring.cloud is None and endpoint not in wiring.targets:
                return self._unserved(model, provider)
            # the usage chunk this attempt asks for only for the gateway
            hide_usage = self.hide_usage and ctx.policies.providers[provider].stream_usage
            if hide_usage:
                body = with_usage(body)
        else:
            crossed = self._crossing(model, d, body)
            if isinstance(crossed, Outcome):
                return crossed
            body, crossing = crossed
            del crossed  # the translated body is let go of once sent, as the client's
            hide_usage = False
        call = self._call(wiring, d, body, crossing, ctx.stream)
        del body  # one encoded copy, let go of once sent (in the call)
        if isinstance(call, Failure):
            self._count(provider, model, call)
            return Outcome(call, status=0)
        t, data, eventstream = call
        a = Attempt(
            provider, model, deployment, t, wiring, data, remaining, ctx.stream,
            crossing, hide_usage, eventstream,
        )  # fmt: skip
        del data
        if ctx.tracing is not None:
            return await self._traced(a, d)
        if ctx.traceparent is not None:  # traced, not sampled: the context goes on
            t.headers["traceparent"] = ctx.traceparent
        return await exchange(ctx, log, self.sent, a)

    async def _traced(self, a: Attempt, d: Deployed) -> Outcome:
        """:func:`exchange` of ``a`` (on ``d``) in a span of its own, ended with its answer,
        or with its stream (by the relay)."""
        ctx = self.ctx
        tracing = ctx.tracing
        assert tracing is not None
        headers = a.target.headers
        span = tracing.attempt(
            self.log, ctx.endpoint, a.provider, d.name, a.model, d.upstream_model, headers
        )
        out: Outcome | None = None
        try:
            out = await exchange(ctx, self.log, self.sent, a)
        finally:
            if out is None:  # cancelled: the client left
                tracing.attempt_done(span, 0, "cancelled")
            elif isinstance(out.stream, OpenStream):  # ends with its stream (gateway/live/relay.py)
                s = out.stream
                s.trace = tracing.streamed(span, s.resp.status, (e.data for e in s.head))
            else:
                f = out.failure
                answer = out.json() if f is None and out.stream is None else None
                tracing.attempt_done(span, out.status, f.category.value if f else None, answer)
        return out

    def _unserved(self, model: str, provider: str) -> Outcome:
        """The client's format is not one the deployment's provider takes: the client's 400."""
        kind = self.ctx.policies.providers[provider].api
        msg = f"model {model!r} is served by an {kind!r}-format provider"
        return Outcome(Failure(Category.invalid_request, 400, msg), status=400)

    def _crossing(
        self, model: str, d: Deployed, body: dict[str, Any]
    ) -> tuple[dict[str, Any], Crossing] | Outcome:
        """``body`` translated for deployment ``d`` (into the first format it speaks; what
        it drops named in the access log; with prompt-cache markers under policy
        ``prompt_cache.breakpoints: auto``, counted in the log), and the translation the
        answer needs back; a body the translators cannot read (a field of the wrong type,
        named) or refuse: the client's 400, in its format."""
        from gateway.translate import cache_marks
        from gateway.translate import convert as translate

        ctx = self.ctx
        provider, fmts = d.provider, d.fmts
        client = ctx.endpoint.fmt
        try:
            translate.check(body, client)
            crossing = Crossing(fmts[0], client, model, translate.tool_names(body, client))
        except GatewayError as e:  # a field the translators read, of the wrong type
            return self._refused(e)
        spec = ctx.policies.models[model]
        try:
            translated, dropped = translate.request(
                body,
                client,
                crossing.upstream_fmt,
                max_output_tokens=spec.max_output_tokens,
                reasoning=spec.reasoning,
            )
        except Refused as e:
            return self._refused(e)
        self.log.drop(dropped)
        if ctx.req.policy.prompt_cache.breakpoints == "auto":
            self.log.cache_markers = cache_marks.mark(
                translated,
                crossing.upstream_fmt.name,
                d.upstream_model,
                lambda: estimate_tokens(body, client),
            )
        if ctx.stream and not ctx.policies.providers[provider].stream_usage:
            translated.pop("stream_options", None)  # a server that rejects it: no usage chunk
        return translated, crossing

    def _call(
        self,
        wiring: Wiring,
        d: Deployed,
        body: dict[str, Any],
        crossing: Crossing | None,
        stream: bool,
        fmt: Format | None = None,
    ) -> tuple[Target, Body, bool] | Failure:
        """The URL, headers and encoded body of an attempt on ``d`` (in the client's format,
        or translated by ``crossing``, or in ``fmt``: a request of the gateway's own), and
        whether its stream comes in AWS event-stream frames. The client's query and
        provider headers go along only with its own, untranslated, request. A cloud call
        is authorized last; a credential with nothing to sign with is a failure (auth)."""
        ctx = self.ctx
        own = crossing is None and fmt is None
        if fmt is None:
            fmt = ctx.endpoint.fmt if crossing is None else crossing.upstream_fmt
        cloud = wiring.cloud
        if cloud is None:
            if own:
                client = ctx.client
                query = client.rel_url.raw_query_string  # as the client wrote it
                t = target(wiring.targets[ctx.endpoint], client.headers, query)
            else:
                t = target(wiring.targets[endpoint_of(fmt)], {}, "")
            t.headers["x-request-id"] = ctx.request_id  # traceable across the hop
            return t, Body(ctx.req.encode(body, d.upstream_model)), False
        path = ctx.endpoint.value if own else (fmt.paths[0] if fmt.paths else "")
        beta = None
        if own:  # Claude's Messages as the cloud takes them (a translation is already so)
            beta = ctx.client.headers.get("anthropic-beta")
            if fmt is MESSAGES:
                body, beta, dropped = cloud.dialect(body, beta)
                if dropped:
                    self.log.drop(dropped)
        url, shaped = cloud.call(path, fmt, d.upstream_model, body, stream, beta)
        signed = cloud_target(wiring, d.provider, url, shaped, beta, ctx.request_id)
        if isinstance(signed, Failure):
            return signed
        return *signed, cloud.eventstream(fmt, stream)

    def _refused(self, e: GatewayError) -> Outcome:
        """A request this attempt cannot translate: the client's 400, in its format."""
        return Outcome(untranslatable(e), status=400, body=e.body_bytes(self.ctx.endpoint.fmt))

    # ---- the summarize compaction step's call (gateway/recovery/compacting.py summarize) --------
    def price(self, model: str, deployment: int) -> Price | None:
        return self.ctx.price(model, deployment)

    def model_info(self, model: str, deployment: int) -> tuple[Format, int | None]:
        fmt = self._deployment(model, deployment).fmts[0]
        return fmt, self.ctx.policies.models[model].context_window

    async def ask(
        self, model: str, fmt: Format, body: dict[str, Any], within: float, deployment: int
    ) -> Outcome:
        """A JSON request of the gateway's own (the compaction summary) to ``model``, on
        its deployment ``deployment``.

        Never streamed, whatever the client asked; in ``fmt``, sent to that format's
        endpoint whatever the client's; none of the client's headers or
        query go along. The whole exchange is bounded by ``within`` seconds. It counts in
        ``upstream_attempts_total`` but not in the request's attempts. A streaming
        client gets keepalive comments while it runs longer than ``stream.keepalive``.
        """
        ctx = self.ctx
        d = self._deployment(model, deployment)
        wiring = ctx.live.wiring(d.provider, d.key_env)
        if wiring.cloud is None and endpoint_of(fmt) not in wiring.targets:
            msg = f"model {model!r} cannot answer a {fmt.name!r}-format request"
            return Outcome(Failure(Category.invalid_request, 400, msg), status=400)
        call = self._call(wiring, d, body, None, False, fmt)
        del body
        if isinstance(call, Failure):
            self._count(d.provider, model, call)
            return Outcome(call, status=0)
        t, data, _ = call
        a = Attempt(d.provider, model, deployment, t, wiring, data, within, False)
        del data
        task = asyncio.ensure_future(self._ask(a))
        del a
        try:
            if ctx.stream:
                keepalive = ctx.req.policy.stream.keepalive
                while not (await asyncio.wait({task}, timeout=keepalive))[0]:
                    out = await self.commit()
                    await out.write(sse.KEEPALIVE)
            return await task
        finally:
            task.cancel()  # a no-op when done; else the client left, and so does the call

    async def _ask(self, a: Attempt) -> Outcome:
        try:
            with Limit(a.within):
                return await exchange(self.ctx, self.log, self.sent, a)
        except TimeoutError:
            f = transport_failure(Category.timeout, f"no answer within {a.within:.1f}s")
            self._count(a.provider, a.model, f)
            return Outcome(f, status=0)

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None:
        ctx = self.ctx
        keepalive = ctx.req.policy.stream.keepalive
        sleep, monotonic = ctx.live.sleep, ctx.live.monotonic
        if not ctx.stream or seconds <= keepalive:
            await sleep(seconds)
            return
        out = await self.commit()
        await out.write(sse.retry_comment(decision.retry_number + 1, seconds, failure.category))
        end = monotonic() + seconds
        while (left := end - monotonic()) > 0:
            await sleep(min(keepalive, left))
            if end - monotonic() > 0:
                await out.write(sse.KEEPALIVE)

    def _deployment(self, model: str, index: int) -> Deployed:
        deps = self.ctx.policies.deployments[model]
        return deps[index] if index < len(deps) else deps[0]

    def secrets(self) -> tuple[str, ...]:
        """The credentials this request's attempts sent, in the forms a provider's text may
        quote them (:func:`gateway.upstream.egress_scrub.secrets_of`); for error paths only."""
        return secrets_of(self.sent)

    def scrubbed(self, f: Failure) -> Failure:
        """``f`` with the provider's message and code free of the gateway's credentials."""
        return scrubbed(f, self.secrets())

    def _count(self, provider: str, model: str, f: Failure | None) -> None:
        self.ctx.live.events.upstream_attempt(
            provider, model, "ok" if f is None else f.category.value
        )

    # ---- client side ----------------------------------------------------------------
    async def commit(self) -> web.StreamResponse:
        """Send the 200 and SSE headers (once); from here on only in-band events are left."""
        if self.response is None:
            log = self.log
            headers = log.headers()  # the request's own headers (x-request-id...)
            headers["content-type"] = "text/event-stream"
            headers["cache-control"] = "no-cache"
            out = web.StreamResponse(status=200, headers=headers)
            await out.prepare(self.ctx.client)
            self.response = out
            log.status = 200
            log.ttfb = self.ctx.live.monotonic() - log.started
        return self.response
