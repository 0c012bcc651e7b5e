"""The proxy side of the engine: attempts over HTTP, waits with keepalives, the relay.

:class:`HttpAttempter` is what :func:`gateway.recovery.engine.recover` drives for a live
request. Streams are peeked up to their first event before an attempt counts as a
success (:mod:`gateway.live.stream_head`), so an error that arrives as the first event is
recovered invisibly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from gateway.errors import Category, GatewayError, Malformed, Refused, UpstreamFailure
from gateway.formats import MESSAGES, Format, sse
from gateway.formats.endpoints import Endpoint, endpoint_of
from gateway.formats.usage import Usage, limit
from gateway.live.stream_head import (
    USAGE_CHUNK,
    OpenStream,
    asks_usage,
    read_head,
    reported,
    splitter_for,
    with_usage,
)
from gateway.observe.events import Events
from gateway.observe.request_log import RequestLog
from gateway.observe.tracing import Tracing
from gateway.providers import Target, Wiring, target
from gateway.providers.cloud_target import cloud_target
from gateway.recovery.admission import past_deadline, untranslatable
from gateway.recovery.billing import bill_failed, estimate
from gateway.recovery.seams import Outcome, Request, json_object
from gateway.resilience.classify import classify_error_event, classify_response, transport_failure
from gateway.resilience.decide import (
    FIRST_BYTE_TIMEOUT,
    Progress,
    Retry,
)
from gateway.resilience.failure import Failure
from gateway.routing.policyset import Deployed, PolicySet
from gateway.upstream.client import Body, Response, Upstream
from gateway.upstream.deadlines import Limit
from gateway.upstream.egress_scrub import scrub, scrub_bytes, secrets_of

if TYPE_CHECKING:
    from gateway.money.pricing import Price
    from gateway.translate import convert as translate
# Otherwise imported where a request crosses formats: a gateway whose models all speak
# their clients' formats never loads the translation modules (0.7 MB of RSS).


@dataclass(frozen=True, slots=True)
class Crossing:
    """An attempt whose deployment speaks another format than the client's endpoint: the
    request goes out translated (into ``upstream_fmt``), what comes back is translated to
    ``client_fmt``."""

    upstream_fmt: Format
    client_fmt: Format
    model: str  # the public model name, which a translated answer names
    # a Responses client's namespaced functions, flattened upstream: named back in answers
    names: translate.Names = field(default_factory=dict)


class HttpAttempter:
    def __init__(  # called by position on the request path (gateway/web/handlers.py)
        self,
        policies: PolicySet,
        upstream: Upstream,
        events: Events,
        endpoint: Endpoint,
        request: web.BaseRequest,
        req: Request,
        log: RequestLog,
        stream: bool,
        wiring: Callable[[str, str | None], Wiring],
        write_timeout: float = 30.0,
        streams: set[tuple[web.StreamResponse, Endpoint]] | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.policies = policies
        self.upstream = upstream
        self.events = events
        self.endpoint = endpoint
        self.request = request
        self.req = req
        self.log = log
        self.stream = stream
        self.wiring = wiring
        self.write_timeout = write_timeout  # a client that reads nothing this long is gone
        self.streams = streams if streams is not None else set()  # streams being relayed
        self.tracing = tracing
        self.response: web.StreamResponse | None = None  # committed early for keepalives
        # the headers and proxy of each attempt sent: the credentials a provider's error
        # text may quote, scrubbed from it before it reaches the client (:meth:`scrubbed`)
        self.sent: list[tuple[Mapping[str, str], str | None]] = []
        # A chat (or legacy completions) stream whose client did not ask for the usage
        # chunk: the gateway asks for it all the same (its tokens are counted, for the team's
        # tokens_per_minute and the metrics) and keeps it from the client.
        self.hide_usage = stream and endpoint in USAGE_CHUNK and not asks_usage(req.body)

    # ---- Attempter -------------------------------------------------------------------
    def deployments(self, model: str) -> tuple[Sequence[Deployed], str]:
        return self.policies.deployments[model], self.policies.models[model].balance

    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        d = self._deployment(model, progress.deployment)
        provider = d.provider
        self.log.provider = provider
        self.log.deployment = d.name
        wiring = self.wiring(provider, d.key_env)
        remaining = self.req.deadline - time.monotonic()
        if remaining <= 0:
            return Outcome(past_deadline())
        try:
            crossing = self._crossing(d.fmts, model, body)
        except GatewayError as e:  # a field the translators read, of the wrong type
            return self._refused(e)
        hide_usage = False  # the usage chunk this attempt asks for only for the gateway
        if crossing is None:
            if wiring.cloud is None and self.endpoint not in wiring.targets:
                kind = self.policies.providers[provider].api
                msg = f"model {model!r} is served by an {kind!r}-format provider"
                return Outcome(Failure(Category.invalid_request, 400, msg), status=400)
            hide_usage = self.hide_usage and self.policies.providers[provider].stream_usage
            if hide_usage:
                body = with_usage(body)
        else:
            from gateway.translate import convert as translate

            try:
                spec = self.policies.models[model]
                body, dropped = translate.request(
                    body,
                    crossing.client_fmt,
                    crossing.upstream_fmt,
                    max_output_tokens=spec.max_output_tokens,
                    reasoning=spec.reasoning,
                )
            except Refused as e:
                return self._refused(e)
            self.log.drop(dropped)
            if self.stream and not self.policies.providers[provider].stream_usage:
                body.pop("stream_options", None)  # a server that rejects it: no usage chunk
        call = self._call(wiring, d, body, crossing, self.stream)
        del body  # one encoded copy, let go of once sent (in the call)
        if isinstance(call, Failure):
            self._count(provider, model, call)
            return Outcome(call, status=0)
        t, data, eventstream = call
        upstream_model = d.upstream_model
        tracing = self.tracing
        if tracing is None or self.log.span is None:
            if self.log.traceparent is not None:  # traced, not sampled: the context goes on
                t.headers["traceparent"] = self.log.traceparent
            return await self._exchange(
                provider,
                model,
                t,
                wiring,
                data,
                remaining,
                self.stream,
                crossing,
                hide_usage,
                eventstream,
                progress.deployment,
            )
        span = tracing.attempt(
            self.log, self.endpoint, provider, d.name, model, upstream_model, t.headers
        )
        out: Outcome | None = None
        try:
            out = await self._exchange(
                provider,
                model,
                t,
                wiring,
                data,
                remaining,
                self.stream,
                crossing,
                hide_usage,
                eventstream,
                progress.deployment,
            )
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
        own = crossing is None and fmt is None
        if fmt is None:
            fmt = self.endpoint.fmt if crossing is None else crossing.upstream_fmt
        cloud = wiring.cloud
        if cloud is None:
            if own:
                query = self.request.rel_url.raw_query_string  # as the client wrote it
                t = target(wiring.targets[self.endpoint], self.request.headers, query)
            else:
                t = target(wiring.targets[endpoint_of(fmt)], {}, "")
            t.headers["x-request-id"] = self.log.request_id  # traceable across the hop
            return t, Body(self.req.encode(body, d.upstream_model)), False
        path = self.endpoint.value if own else (fmt.paths[0] if fmt.paths else "")
        beta = None
        if own:  # Claude's Messages as the cloud takes them (a translation is already so)
            beta = self.request.headers.get("anthropic-beta")
            if fmt is MESSAGES:
                body, beta, dropped = cloud.dialect(body, beta)
                if dropped:
                    self.log.drop(dropped)
        url, shaped = cloud.call(path, fmt, d.upstream_model, body, stream, beta)
        signed = cloud_target(wiring, d.provider, url, shaped, beta, self.log.request_id)
        if isinstance(signed, Failure):
            return signed
        return *signed, cloud.eventstream(fmt, stream)

    def _crossing(
        self, fmts: tuple[Format, ...], model: str, body: dict[str, Any]
    ) -> Crossing | None:
        """The translation an attempt on a deployment speaking ``fmts`` needs (into the
        first of them); None when it speaks the client's format: relayed as it is. Raises
        a 400 :class:`GatewayError` for a body the translators cannot read (a field of
        the wrong type, named)."""
        client = self.endpoint.fmt
        if client in fmts or not self.endpoint.continuable:
            return None
        from gateway.translate import convert as translate

        translate.check(body, client)
        return Crossing(fmts[0], client, model, translate.tool_names(body, client))

    def _refused(self, e: GatewayError) -> Outcome:
        """A request this attempt cannot translate: the client's 400, in its format."""
        return Outcome(untranslatable(e), status=400, body=e.body_bytes(self.endpoint.fmt))

    async def _exchange(
        self,
        provider: str,
        model: str,
        t: Target,
        wiring: Wiring,
        data: Body,
        remaining: float,
        stream: bool,
        crossing: Crossing | None = None,
        hide_usage: bool = False,
        eventstream: bool = False,
        deployment: int = 0,
    ) -> Outcome:
        """One request to the provider and its answer (or the head of its stream), in the
        client's format; ``hide_usage``: the stream's usage chunk is not the client's;
        ``eventstream``: the stream comes in AWS event-stream frames (Bedrock);
        ``deployment``: the model's deployment it goes to (its price)."""
        timeouts = self.req.policy.timeouts
        first_byte = min(timeouts.first_byte, remaining)
        self.sent.append((t.headers, wiring.proxy))
        try:
            resp = await self.upstream.open(
                t.url,
                t.headers,
                data,
                connect_timeout=min(timeouts.connect, remaining),
                first_byte_timeout=first_byte,
                proxy=wiring.proxy,
                ssl_context=wiring.tls,
            )
            if resp.status >= 300:
                raw = await self.upstream.read(resp, timeouts.stream_idle, self.req.deadline)
                raw = scrub_bytes(raw, self.secrets())  # before anything reads it
                if wiring.cloud is not None:  # Bedrock's errors in Anthropic's shape
                    raw = wiring.cloud.error_body(resp.headers, raw)
                f = classify_response(
                    resp.status, resp.headers, raw, rules=self.req.policy.classify, now=time.time()
                )
                self._count(provider, model, f)
                ctype = resp.headers.get("content-type", "application/json")
                if crossing is not None:  # classified as the provider said, shown as the client's
                    from gateway.translate import convert as translate

                    raw = translate.error(
                        resp.status, raw, crossing.upstream_fmt, crossing.client_fmt
                    )
                    ctype = "application/json"
                return Outcome(f, resp.status, raw, ctype, resp.headers)
            if stream:
                return await self._open_stream(
                    resp, provider, model, first_byte, crossing, hide_usage, eventstream, deployment
                )
            raw = await self.upstream.read(resp, timeouts.stream_idle, self.req.deadline)
        except UpstreamFailure as e:
            f = transport_failure(e.category, e.message)
            if e.category is Category.timeout and e.stage == "first_byte":
                f = Failure(
                    Category.timeout,
                    None,
                    e.message,
                    code=FIRST_BYTE_TIMEOUT,
                    stage=FIRST_BYTE_TIMEOUT,
                )
            self._count(provider, model, f)
            return Outcome(f, status=0)
        if crossing is not None:
            return self._translated(provider, model, raw, resp.headers, crossing)
        self._count(provider, model, None)
        ctype = resp.headers.get("content-type", "application/json")
        return Outcome(None, 200, raw, ctype, resp.headers)  # the fields in order: no failure

    def _translated(
        self, provider: str, model: str, raw: bytes, headers: Any, crossing: Crossing
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
            self._count(provider, model, f)
            return Outcome(f, status=502)
        self._count(provider, model, None)
        return Outcome(body=orjson.dumps(answer), headers=headers, data=answer)

    async def _open_stream(
        self,
        resp: Response,
        provider: str,
        model: str,
        first_byte: float,
        crossing: Crossing | None = None,
        hide_usage: bool = False,
        eventstream: bool = False,
        deployment: int = 0,
    ) -> Outcome:
        """Read up to the first event: an error there is a failed attempt, not a cut stream
        (recovery cost when its provider reported counts before it: :meth:`_bill_failed`)."""
        if crossing is not None:
            # the usage chunk, a chat client's own choice (others always have usage), is
            # written all the same, for the gateway to count: kept from a client that did not
            # ask for it, as the relay does with a chat provider's
            hide_usage = crossing.client_fmt.usage_if_asked and not asks_usage(self.req.body)
        splitter = splitter_for(crossing, eventstream)
        cap = self.upstream.limits.max_event_bytes
        head: list[sse.Event] = []
        f = await read_head(resp, splitter, self.endpoint, first_byte, cap, head)
        if f is not None:
            self._count(provider, model, f)
            self._bill_failed(model, deployment, reported(splitter, head, self.endpoint))
            return Outcome(f, status=0)
        first = next((e for e in head if not sse.is_preamble(e)), head[-1])
        if first.kind is sse.Kind.error:
            resp.close()
            f = classify_error_event(first.data, rules=self.req.policy.classify, now=time.time())
            self._count(provider, model, f)
            self._bill_failed(model, deployment, reported(splitter, head, self.endpoint))
            return Outcome(self.scrubbed(f), status=0, body=scrub_bytes(first.raw, self.secrets()))
        self._count(provider, model, None)
        return Outcome(
            stream=OpenStream(resp, splitter, head, hide_usage=hide_usage), headers=resp.headers
        )

    # ---- the summarize compaction step's call (gateway/recovery/compacting.py summarize) --------
    def price(self, model: str, deployment: int) -> Price | None:
        prices = self.policies.price_lists[model]
        return prices[deployment] if deployment < len(prices) else prices[0]

    def model_info(self, model: str, deployment: int) -> tuple[Format, int | None]:
        fmt = self._deployment(model, deployment).fmts[0]
        return fmt, self.policies.models[model].context_window

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
        d = self._deployment(model, deployment)
        wiring = self.wiring(d.provider, d.key_env)
        if wiring.cloud is None and endpoint_of(fmt) not in wiring.targets:
            msg = f"model {model!r} cannot answer a {fmt.name!r}-format request"
            return Outcome(Failure(Category.invalid_request, 400, msg), status=400)
        call = self._call(wiring, d, body, None, False, fmt)
        del body
        if isinstance(call, Failure):
            self._count(d.provider, model, call)
            return Outcome(call, status=0)
        t, data, _ = call
        task = asyncio.ensure_future(self._ask(d.provider, model, t, wiring, data, within))
        del data
        try:
            if self.stream:
                keepalive = self.req.policy.stream.keepalive
                while not (await asyncio.wait({task}, timeout=keepalive))[0]:
                    out = await self.commit()
                    await out.write(sse.KEEPALIVE)
            return await task
        finally:
            task.cancel()  # a no-op when done; else the client left, and so does the call

    async def _ask(
        self, provider: str, model: str, t: Target, wiring: Wiring, data: Body, within: float
    ) -> Outcome:
        try:
            with Limit(within):
                return await self._exchange(provider, model, t, wiring, data, within, False)
        except TimeoutError:
            f = transport_failure(Category.timeout, f"no answer within {within:.1f}s")
            self._count(provider, model, f)
            return Outcome(f, status=0)

    async def sleep(self, seconds: float, decision: Retry, failure: Failure) -> None:
        keepalive = self.req.policy.stream.keepalive
        if not self.stream or seconds <= keepalive:
            await asyncio.sleep(seconds)
            return
        out = await self.commit()
        await out.write(sse.retry_comment(decision.retry_number + 1, seconds, failure.category))
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(keepalive, left))
            if end - time.monotonic() > 0:
                await out.write(sse.KEEPALIVE)

    def _deployment(self, model: str, index: int) -> Deployed:
        deps = self.policies.deployments[model]
        return deps[index] if index < len(deps) else deps[0]

    def secrets(self) -> tuple[str, ...]:
        """The credentials this request's attempts sent, in the forms a provider's text may
        quote them (:func:`gateway.upstream.egress_scrub.secrets_of`); for error paths only."""
        return secrets_of(self.sent)

    def scrubbed(self, f: Failure) -> Failure:
        """``f`` with the provider's message and code free of the gateway's credentials."""
        secrets = self.secrets()
        message, code = scrub(f.message, secrets), f.code and scrub(f.code, secrets)
        return (
            f if (message, code) == (f.message, f.code) else replace(f, message=message, code=code)
        )

    def _bill_failed(self, model: str, deployment: int, u: Usage | None) -> None:
        """A failed attempt on ``model``'s deployment ``deployment`` whose provider reported
        the counts ``u`` (:func:`gateway.recovery.billing.bill_failed`: recovery cost)."""
        if u is not None:
            window = self.policies.models[model].context_window
            bill_failed(
                self.log, u, self.price(model, deployment), model, limit(window),
                lambda: estimate(self.req.body, self.req.fmt, 0),
            )  # fmt: skip

    def _count(self, provider: str, model: str, f: Failure | None) -> None:
        self.events.upstream_attempt(provider, model, "ok" if f is None else f.category.value)

    # ---- client side ----------------------------------------------------------------
    async def commit(self) -> web.StreamResponse:
        """Send the 200 and SSE headers (once); from here on only in-band events are left."""
        if self.response is None:
            headers = self.log.headers()
            headers["content-type"] = "text/event-stream"
            headers["cache-control"] = "no-cache"
            out = web.StreamResponse(status=200, headers=headers)
            await out.prepare(self.request)
            self.response = out
            self.log.status = 200
            self.log.ttfb = time.monotonic() - self.log.started
        return self.response
