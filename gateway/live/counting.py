"""Anthropic's token count (``POST /v1/messages/count_tokens``) as attempts of the engine.

A deployment that speaks Anthropic's Messages where the provider has a count endpoint
(Anthropic itself, Claude on Bedrock, Claude on Vertex) is asked for its own count; the
attempts go through :func:`gateway.recovery.engine.recover` like any request's (retries, sibling
deployments, fallback), with no compaction (a count is not a conversation to shrink).
Any other deployment (an OpenAI-format model, a Bedrock Converse model) answers with the
gateway's own estimate, the one compaction sizes prompts with
(:func:`gateway.resilience.conversation.estimate_tokens`), marked ``x-gateway-estimate:
true``; a model with no deployment of the first kind is estimated without an attempt.
"""

from __future__ import annotations

from typing import Any

import orjson
from yarl import URL

from gateway.errors import Category
from gateway.formats import MESSAGES
from gateway.formats.endpoints import endpoint_of
from gateway.live.attempter import HttpAttempter
from gateway.live.exchange import Attempt, exchange
from gateway.policy.schema import Compaction
from gateway.providers import Target, Wiring, target
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
_COUNTING_APIS = frozenset({"anthropic", "bedrock", "vertex"})
_NO_COMPACTION = Compaction(enabled=False)


def counts(policies: PolicySet, d: Deployed) -> bool:
    """The deployment has a count endpoint: Claude through Anthropic, Bedrock or Vertex."""
    return MESSAGES in d.fmts and policies.providers[d.provider].api in _COUNTING_APIS


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
        """The target and body of the count on ``d``, or a failure (no credential). The
        client's query (Claude Code's ``?beta=true``) and provider headers go along."""
        ctx = self.ctx
        client = ctx.client
        cloud = wiring.cloud
        beta = client.headers.get("anthropic-beta")
        if cloud is not None:
            body, beta, dropped = cloud.dialect(body, beta)
            if dropped:
                self.log.drop(dropped)
            url, shaped = cloud.count(d.upstream_model, body, beta)
            return cloud_target(wiring, d.provider, url, shaped, beta, ctx.request_id)
        base = wiring.targets[endpoint_of(MESSAGES)]
        counting = Target(URL(f"{base.url}/count_tokens"), base.headers)
        t = target(counting, client.headers, client.rel_url.raw_query_string)
        t.headers["x-request-id"] = ctx.request_id
        return t, Body(ctx.req.encode(body, d.upstream_model))


def _input_tokens(data: dict[str, Any] | None) -> int | None:
    """The count of an answer: Anthropic's and Vertex's ``input_tokens``, Bedrock's
    ``inputTokens``; None when there is no whole number there."""
    if data is None:
        return None
    n = data.get("input_tokens", data.get("inputTokens"))
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def without_compaction(req: Request) -> Request:
    """The engine's request for a count: its route's recovery, without compaction."""
    req.policy = req.policy.model_copy(update={"compaction": _NO_COMPACTION})
    return req
