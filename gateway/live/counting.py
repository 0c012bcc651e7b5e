"""Anthropic's token count (``POST /v1/messages/count_tokens``) as attempts of the engine.

A deployment whose provider has a count endpoint for the model's format (Claude on
Anthropic itself, Bedrock and Vertex; Gemini on AI Studio and Vertex:
:func:`gateway.providers.kinds.counts`) is asked for its own count, the request
translated into that format where it differs; the attempts go through
:func:`gateway.recovery.engine.recover` like any request's (retries, sibling deployments,
fallback), with no compaction (a count is not a conversation to shrink).
Any other deployment (an OpenAI-format model, a Bedrock Converse model) answers with the
gateway's own estimate, the one compaction sizes prompts with
(:func:`gateway.resilience.conversation.estimate_tokens`), marked ``x-gateway-estimate:
true``; a model with no deployment of the first kind is estimated without an attempt.
"""

from __future__ import annotations

from typing import Any

import orjson
from yarl import URL

from gateway.errors import Category, GatewayError
from gateway.formats import MESSAGES, Format
from gateway.formats.endpoints import endpoint_of
from gateway.formats.usage import count
from gateway.live.attempter import HttpAttempter
from gateway.live.exchange import Attempt, exchange
from gateway.policy.schema import Compaction
from gateway.providers import Target, Wiring, kinds, target
from gateway.providers.cloud_target import cloud_target
from gateway.recovery.admission import past_deadline
from gateway.recovery.seams import Outcome, Request
from gateway.resilience.classify import transport_failure
from gateway.resilience.conversation import estimate_tokens
from gateway.resilience.decide import Progress
from gateway.resilience.failure import Failure
from gateway.routing.policyset import Deployed, PolicySet
from gateway.upstream.client import Body

#: The header of an answer that is the gateway's estimate, not the provider's count.
ESTIMATE_HEADER = "x-gateway-estimate"
_NO_COMPACTION = Compaction(enabled=False)


def counts(policies: PolicySet, d: Deployed) -> bool:
    """The deployment's provider counts tokens for the model (:func:`kinds.counts`)."""
    return kinds.counts(policies.providers[d.provider].api, d.fmts[0])


def estimate(body: dict[str, Any]) -> Outcome:
    """The gateway's own count of a Messages body, marked as an estimate."""
    n = estimate_tokens(body, MESSAGES)
    return Outcome(body=orjson.dumps({"input_tokens": n}), headers={ESTIMATE_HEADER: "true"})


class CountAttempter(HttpAttempter):
    """The engine's attempts of a count request (never streamed; ``endpoint`` is Messages)."""

    __slots__ = ()

    async def send(self, model: str, body: dict[str, Any], progress: Progress) -> Outcome:
        ctx = self.ctx
        d = self._deployment(model, progress.deployment)
        self.log.provider = d.provider
        self.log.deployment = d.name
        if not counts(ctx.policies, d):
            return estimate(body)
        remaining = ctx.req.deadline - ctx.live.monotonic()
        if remaining <= 0:
            return Outcome(past_deadline())
        wiring = ctx.live.wiring(d.provider, d.key_env)
        if d.fmts[0] is not MESSAGES:
            crossed = self._count_body(body, d.fmts[0])
            if isinstance(crossed, Outcome):
                return crossed
            body = crossed
        call = self._count_call(wiring, d, body)
        if isinstance(call, Failure):
            self._count(d.provider, model, call)
            return Outcome(call, status=0)
        t, data = call
        a = Attempt(d.provider, model, progress.deployment, t, wiring, data, remaining, False)
        del data
        out = await exchange(ctx, self.log, self.sent, a)
        if out.failure is not None:
            return out
        n = _input_tokens(out.json())
        if n is None:  # a broken provider: retried like a server error
            f = transport_failure(Category.server_error, "the provider's count has no token count")
            return Outcome(f, status=502)
        return Outcome(body=orjson.dumps({"input_tokens": n}))

    def _count_call(
        self, wiring: Wiring, d: Deployed, body: dict[str, Any]
    ) -> tuple[Target, Body] | Failure:
        """The target and body of the count on ``d``, or a failure (no credential; a body
        the translators refuse: invalid_request). The client's query (Claude Code's
        ``?beta=true``) and provider headers go along to a Messages count."""
        ctx = self.ctx
        client = ctx.client
        cloud = wiring.cloud
        beta = client.headers.get("anthropic-beta")
        fmt = d.fmts[0]
        if cloud is not None:
            if fmt is MESSAGES:
                body, beta, dropped = cloud.dialect(body, beta)
                if dropped:
                    self.log.drop(dropped)
            url, shaped = cloud.count(d.upstream_model, fmt, body, beta)
            return cloud_target(wiring, d.provider, url, shaped, beta, ctx.request_id)
        base = wiring.targets[endpoint_of(MESSAGES)]
        counting = Target(URL(f"{base.url}/count_tokens"), base.headers)
        t = target(counting, client.headers, client.rel_url.raw_query_string)
        t.headers["x-request-id"] = ctx.request_id
        return t, Body(ctx.req.encode(body, d.upstream_model))

    def _count_body(self, body: dict[str, Any], fmt: Format) -> dict[str, Any] | Outcome:
        """The count request in the deployment's format (what it drops named in the
        access log), or the client's 400 when the translators refuse it."""
        from gateway.translate import convert as translate

        try:
            translate.check(body, MESSAGES)
            translated, dropped = translate.request(body, MESSAGES, fmt, max_output_tokens=None)
        except GatewayError as e:
            return self._refused(e)
        self.log.drop(dropped)
        return translated


def _input_tokens(data: dict[str, Any] | None) -> int | None:
    """The count of an answer: Anthropic's and Vertex's ``input_tokens``, Bedrock's
    ``inputTokens``, Gemini's ``totalTokens``; None when there is no count there (a whole
    number from 0 to 2**63-1: :func:`gateway.formats.usage.count`)."""
    if data is None:
        return None
    return count(data.get("input_tokens", data.get("inputTokens", data.get("totalTokens"))))


def without_compaction(req: Request) -> Request:
    """The engine's request for a count: its route's recovery, without compaction."""
    req.policy = req.policy.model_copy(update={"compaction": _NO_COMPACTION})
    return req
