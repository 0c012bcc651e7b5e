"""One place that turns what happened into log events, metrics and trace events
(docs/recovery.md, "Events and metrics"; docs/operations.md, Metrics;
gateway/observe/tracing.py).

Event names are stable; fields never hold keys, Authorization headers or message
contents. Provider error *messages* are not logged either (a provider may quote the
prompt in them): events carry the category, status and provider error code; the client
still gets the provider's message. Every method both logs and counts (and, when the
request is traced, adds the same event to its span), so they can never disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from gateway.observe import cost, logs
from gateway.observe.cache_share import CacheShare
from gateway.observe.metrics import Metrics
from gateway.observe.request_log import RequestLog, visible
from gateway.resilience.deployments import Transition
from gateway.resilience.failure import Failure

log = structlog.get_logger("gateway")


def _describe(f: Failure) -> str:
    """What failed, without the provider's message text: ``HTTP 429 rate_limit_exceeded``."""
    what = f"HTTP {f.status}" if f.status else f.category.value
    return f"{what} {visible(str(f.code))}" if f.code else what  # the provider's text


def _micro(seconds: float) -> float:
    """``seconds`` to the microsecond, as the access log gives durations: the nearest
    multiple of 1e-6, as the cost fields round to 1e-8 (a third of ``round(x, 6)``'s cost,
    which goes through a decimal string); a value that is not a plausible duration
    (negative, infinite, NaN, past 1e9 s) is left to ``round``."""
    if 0.0 <= seconds < 1e9:
        return int(seconds * 1e6 + 0.5) / 1e6
    return round(seconds, 6)


class Events:
    """The live emitter: what the recovery loops report through the seam they declare
    (:class:`gateway.recovery.seams.RecoveryEvents`), and the request's and the
    process's own events."""

    #: ``upstream_attempt(provider, model, category)``: count one upstream attempt (a
    #: metric only). The metrics' own method, bound here: one call less per attempt.
    upstream_attempt: Callable[[str, str, str], None]

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.upstream_attempt = metrics.upstream_attempt
        #: per deployment, the share of prompt tokens read from cache (``/admin/deployments``)
        self.cache_share = CacheShare()

    # ---- per request ---------------------------------------------------------------
    def request_completed(self, r: RequestLog, now: float) -> None:
        duration = now - r.started
        model = r.answered_by or r.model
        bill = r.bill
        cost_usd, recovery_usd = bill.cost_usd, bill.recovery_cost_usd
        prompt, completion = bill.prompt_tokens, bill.completion_tokens
        self.metrics.request_done(
            r.team, model, r.status, duration, r.ttfb, prompt, completion, cost_usd, recovery_usd
        )
        if bill.unpriced is not None and bill.unpriced not in cost.told:
            cost.price_unknown(r)
        read, write = bill.cache_read, bill.cache_write
        if read or write:
            self.metrics.cached(r.team, model, r.deployment or r.provider, read, write)
        share = self.cache_share
        if model in share.models and prompt:
            share.add(model, r.deployment, now, prompt, read, write)
        fast = logs.fast_json  # the JSON line without structlog's chain, while it is in force
        if fast is not None and not fast.info and fast.current():
            return  # below the configured level: nothing to build
        ttfb = r.ttfb
        tokens = {"prompt": prompt, "completion": completion}
        if read or write:  # the provider's prompt cache, when it said it read or wrote
            tokens["cache_read"] = read
            tokens["cache_write"] = write
        if bill.estimated:
            tokens["estimated"] = True
        fields = {
            "request_id": r.request_id,
            "team": r.team,
            "path": r.path,
            "route": r.route,
            "model": model,
            "requested_model": r.model,
            "status": r.status,
            "attempts": r.attempts,
            "deployment": r.deployment or None,
            "session": r.session,
            "recovery": ",".join(r.recovery) if r.recovery else None,
            "duration_s": _micro(duration),
            "ttfb_s": None if ttfb is None else _micro(ttfb),
            "tokens": tokens,
            # to 1e-8 USD; null: billed without a price, nothing priced (observe/cost.py)
            "cost_usd": None
            if bill.unpriced is not None and not cost_usd
            else int(cost_usd * 1e8 + 0.5) / 1e8,
            "recovery_cost_usd": int(recovery_usd * 1e8 + 0.5) / 1e8 if recovery_usd else 0.0,
        }
        # the optional fields in their place, added only when present
        if bill.recovery_prompt_tokens or bill.recovery_completion_tokens:
            fields["recovery_tokens"] = {
                "prompt": bill.recovery_prompt_tokens,
                "completion": bill.recovery_completion_tokens,
            }
        fields["error"] = r.error
        if r.dropped is not None:
            fields["dropped"] = r.dropped.text()
        if r.cache_markers:
            fields["cache_markers"] = r.cache_markers
        # what structlog's chain appends: event, then level and timestamp
        fields["event"] = "request_completed"
        fields["level"] = "info"
        fields["timestamp"] = None
        if fast is None or not fast.write(fields):
            del fields["event"], fields["level"], fields["timestamp"]
            log.info("request_completed", **fields)

    def api_retry(
        self,
        r: RequestLog,
        model: str,
        attempt: int,
        max_retries: int,
        wait: float,
        f: Failure,
        *,
        reason: str | None = None,
    ) -> None:
        """A wait before the next attempt: a retry scheduled after ``f`` or, with
        ``reason``, a wait of the gateway's own (every deployment of the model out, ``f``
        says for how long): that one is counted in the wait, not as a retry, and its
        ``error`` is ``reason`` (names and numbers only)."""
        if reason is None:
            self.metrics.retries.labels(r.team, model, f.category.value).inc()
        self.metrics.retry_wait.labels(r.team, model).inc(wait)
        log.info(
            "api_retry",
            request_id=r.request_id,
            team=r.team,
            model=model,
            attempt=attempt,
            max_retries=max_retries,
            wait_seconds=round(wait, 3),
            category=f.category.value,
            is_rate_limit=f.is_rate_limit,
            status=f.status,
            error=reason or _describe(f),  # never the provider's message: it may quote the prompt
        )
        if r.span is not None:
            attrs = {"llm_gateway.attempt": attempt, "llm_gateway.wait_seconds": round(wait, 3),
                     "error.type": f.category.value, "gen_ai.request.model": model}  # fmt: skip
            if reason is not None:
                attrs["llm_gateway.reason"] = reason
            r.span.add_event("api_retry", attrs)

    def turn_retry(self, r: RequestLog, model: str, wait: float, f: Failure) -> None:
        self.metrics.retry_wait.labels(r.team, model).inc(wait)
        log.info(
            "turn_retry",
            request_id=r.request_id,
            team=r.team,
            model=model,
            wait_seconds=round(wait, 3),
            category=f.category.value,
        )
        if r.span is not None:
            r.span.add_event(
                "turn_retry",
                {"llm_gateway.wait_seconds": round(wait, 3), "error.type": f.category.value},
            )

    def retry_budget_exhausted(self, r: RequestLog, model: str, f: Failure) -> None:
        self.metrics.budget_exhausted.labels(r.team).inc()
        log.warning(
            "retry_budget_exhausted",
            request_id=r.request_id,
            team=r.team,
            route=r.route,
            model=model,
            category=f.category.value,
        )

    def gave_up(self, r: RequestLog, model: str, reason: str, f: Failure) -> None:
        """The engine stopped trying before the first byte: ``reason`` is the GiveUp's."""
        self.metrics.recovery_stopped("give_up", reason)
        log.info(
            "give_up", request_id=r.request_id, team=r.team, model=model, reason=reason,
            category=f.category.value,
        )  # fmt: skip

    def not_continued(self, r: RequestLog, model: str, reason: str, n: int) -> None:
        """An answer cut at the token limit that is not continued (``n`` continuations
        so far): ``reason`` is the decision's, or ``continuation_failed``."""
        self.metrics.recovery_stopped("continuation", reason)
        log.info(
            "output_not_continued", request_id=r.request_id, team=r.team, model=model,
            reason=reason, n=n,
        )  # fmt: skip

    def fallback(self, r: RequestLog, from_model: str, to_model: str, reason: str) -> None:
        self.metrics.fallbacks.labels(r.team, from_model, to_model).inc()
        log.info(
            "fallback_used",
            request_id=r.request_id,
            team=r.team,
            model=from_model,
            fallback_model=to_model,
            reason=reason,
        )
        if r.span is not None:
            r.span.add_event(
                "fallback",
                {"llm_gateway.from_model": from_model, "llm_gateway.to_model": to_model,
                 "llm_gateway.reason": reason},
            )  # fmt: skip

    def deployment_attempt(self, model: str, deployment: str, f: Failure | None) -> None:
        """One attempt on a deployment of a model that has several."""
        outcome = "ok" if f is None else f.category.value
        self.metrics.deployment_attempts.labels(model, deployment, outcome).inc()

    def deployment_changed(
        self, team: str, model: str, deployment: str, t: Transition, r: RequestLog | None = None
    ) -> None:
        """A deployment of ``model`` went out of service (``deployment_cooldown`` for a
        rate limit or overload, ``deployment_ejected`` for quota, auth or server errors)
        or came back (``deployment_recovered``). Names only: never a key. (The gauge
        ``deployment_up`` is read from the board when scraped: see ``Metrics``.)"""
        if t.kind == "recovered":
            log.info("deployment_recovered", team=team, model=model, deployment=deployment)
            event = "deployment_recovered"
        else:
            event = "deployment_cooldown" if t.kind == "cooldown" else "deployment_ejected"
            log.warning(
                event,
                team=team,
                model=model,
                deployment=deployment,
                reason=t.why,
                seconds=round(t.seconds, 3),
            )
        if r is not None and r.span is not None:
            r.span.add_event(
                event,
                {"gen_ai.request.model": model, "llm_gateway.deployment": deployment,
                 "llm_gateway.reason": t.why},
            )  # fmt: skip

    def fallback_model_activated(
        self,
        team: str,
        model: str,
        fallback_model: str,
        reason: str,
        r: RequestLog | None = None,
    ) -> None:
        """The route's model moved to its fallback; ``r``: the request whose failure did it."""
        self.metrics.fallback_active.labels(team, model).set(1)
        log.warning(
            "fallback_model_activated",
            team=team,
            model=model,
            fallback_model=fallback_model,
            reason=reason,
        )
        if r is not None and r.span is not None:
            r.span.add_event(
                "fallback_model_activated",
                {"gen_ai.request.model": model, "llm_gateway.to_model": fallback_model,
                 "llm_gateway.reason": reason},
            )  # fmt: skip

    def fallback_model_recovered(self, team: str, model: str) -> None:
        self.metrics.fallback_active.labels(team, model).set(0)
        log.info("fallback_model_recovered", team=team, model=model)

    def prompt_too_long_recovery(
        self, r: RequestLog, model: str, strategy: str, outcome: str, **sizes: Any
    ) -> None:
        self.metrics.compactions.labels(r.team, model, strategy, outcome).inc()
        log.info(
            "prompt_too_long_recovery",
            request_id=r.request_id,
            team=r.team,
            model=model,
            strategy=strategy,
            outcome=outcome,
            **sizes,
        )
        if r.span is not None:
            attrs = {f"llm_gateway.{k}": v for k, v in sizes.items() if isinstance(v, int)}
            r.span.add_event(
                "prompt_too_long_recovery",
                {"llm_gateway.strategy": strategy, "llm_gateway.outcome": outcome, **attrs},
            )

    def output_continuation(self, r: RequestLog, model: str, n: int) -> None:
        self.metrics.continuations.labels(r.team, model).inc()
        log.info("output_continuation", request_id=r.request_id, team=r.team, model=model, n=n)
        if r.span is not None:
            r.span.add_event(
                "output_continuation", {"gen_ai.request.model": model, "llm_gateway.n": n}
            )

    def stream_interrupted(
        self, r: RequestLog, model: str, f: Failure, action: str, *, reason: str = ""
    ) -> None:
        """``action``: ``resume`` or ``error_event``; ``reason``: why not resumed."""
        if reason:
            self.metrics.recovery_stopped("resume", reason)
        log.warning(
            "stream_interrupted",
            request_id=r.request_id,
            team=r.team,
            model=model,
            category=f.category.value,
            error=_describe(f),  # never the provider's message: it may quote the prompt
            action=action,
            reason=reason or None,
        )
        if r.span is not None:
            r.span.add_event(
                "stream_interrupted",
                {"error.type": f.category.value, "llm_gateway.action": action,
                 "gen_ai.request.model": model},
            )  # fmt: skip

    def stream_event_dropped(self, r: RequestLog, model: str, count: int = 1) -> None:
        """``count`` undecodable upstream events dropped (one line, however many)."""
        self.metrics.stream_events_dropped.labels(model).inc(count)
        if count == 1:
            log.warning("stream_event_dropped", request_id=r.request_id, team=r.team, model=model)
        else:
            log.warning(
                "stream_event_dropped", request_id=r.request_id, team=r.team, model=model,
                count=count,
            )  # fmt: skip

    def client_disconnected(self, r: RequestLog) -> None:
        self.metrics.client_disconnects.inc()
        log.info("client_disconnected", request_id=r.request_id, team=r.team, model=r.model)

    # ---- process -------------------------------------------------------------------
    def policy_reloaded(self, files: int, trigger: str) -> None:
        self.metrics.policy_reloads.labels("ok").inc()
        log.info("policy_reloaded", files=files, trigger=trigger)

    def policy_reload_rejected(self) -> None:
        """Counted once per rejected reload, however many problems it had."""
        self.metrics.policy_reloads.labels("rejected").inc()

    def policy_rejected(self, file: str, line: int, message: str, trigger: str) -> None:
        log.error("policy_rejected", file=file, line=line, message=message, trigger=trigger)
