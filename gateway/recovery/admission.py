"""What the gateway decides about a request before the engine's first attempt.

The live handler (``gateway/web/handlers.py``) and ``llm-gateway simulate`` both go
through these steps, so a simulated request starts where a live one does:

1. :func:`resolve`: the model exists, the team may use it, a route serves it on the
   endpoint, and its providers serve that endpoint (404 / 403 / 404 / 400 otherwise);
2. :func:`within_budget`: a team with a budget that is spent is refused (429) or, with
   ``when_spent: downgrade``, served by a ``downgrade_to`` model; then :func:`admit`:
   the team is within ``limits.requests_per_minute`` and
   ``tokens_per_minute`` (429 otherwise); ``max_concurrent`` is held by the handler;
3. :func:`request_for`: the :class:`~gateway.recovery.seams.Request` with its deadline, the
   route's ``timeouts.total`` shortened by the client's own timeout header;
4. :func:`prepare`: proactive compaction of a prompt already over the model's window,
   then the request counted in the route's retry allowance (a retry may add ``ratio`` of
   the requests: this one is one of them).

And before each attempt, the failures of an attempt that is not made, for the live
attempter and simulate's alike: :func:`past_deadline` and :func:`untranslatable`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.errors import Category, GatewayError, bad_request
from gateway.formats.endpoints import Endpoint
from gateway.money.bill import Bill
from gateway.money.budgets import iso
from gateway.observe.request_log import RequestLog
from gateway.providers import serves
from gateway.recovery.compacting import compact_ahead
from gateway.recovery.seams import Request
from gateway.resilience.decide import DEADLINE_PASSED, UNTRANSLATABLE
from gateway.resilience.failure import Failure

if TYPE_CHECKING:
    from gateway.formats import Format
    from gateway.money.budgets import Book, Period
    from gateway.policy.schema import Budget, Model, TeamLimits
    from gateway.recovery.seams import Env
    from gateway.routing.policyset import PolicySet, ResolvedRoute
    from gateway.state.base import StateBackend

#: The client's own timeout, in seconds (the first SDK header that is set and valid).
CLIENT_TIMEOUT_HEADERS = ("x-gateway-timeout", "x-stainless-timeout", "x-stainless-read-timeout")


def resolve(
    policies: PolicySet, team: str, model: Any, endpoint: Endpoint, path: str, log: RequestLog
) -> tuple[Model, ResolvedRoute]:
    """The model's spec and the team's route for it on ``endpoint`` (at ``path``, its
    value); a GatewayError (404 unknown model, 403 not allowed, 404 no route, 400 wrong
    endpoint) otherwise. A known model and its route are named in the request's log
    as soon as they are found."""
    if not isinstance(model, str) or not model:
        raise bad_request("the request has no 'model': name one of GET /v1/models", "model")
    spec = policies.models.get(model)
    if spec is None:
        raise GatewayError(
            404,
            f"unknown model {model!r}: GET /v1/models lists the models you may use",
            code="model_not_found",
            param="model",
        )
    log.model = model
    if not policies.model_allowed(team, model):
        raise GatewayError(
            403, f"team {team!r} may not use model {model!r}", code="model_not_allowed"
        )
    route = policies.route(team, model, path)
    if route is None:
        raise GatewayError(
            404,
            f"no route of team {team!r} serves model {model!r} on {endpoint.value}",
            code="no_route",
        )
    log.route = route.id
    for name in () if endpoint.continuable else spec.providers:  # every provider serves those
        provider = policies.providers[name]
        if not serves(provider, endpoint):
            raise bad_request(
                f"model {model!r} is served by an {provider.api}-format "
                f"provider and cannot be called on {endpoint.value}"
            )
    return spec, route


def _serving(
    policies: PolicySet, team: str, model: str, endpoint: Endpoint, path: str
) -> tuple[Model, ResolvedRoute] | None:
    """:func:`resolve` for a model the gateway picks: None when ``model`` cannot serve the
    team on ``endpoint``. The request's log is not written (a scratch one takes what
    :func:`resolve` names): only the model chosen is."""
    try:
        return resolve(policies, team, model, endpoint, path, RequestLog("", 0.0))
    except GatewayError:
        return None


def within_budget(
    policies: PolicySet,
    book: Book,
    budget: Budget,
    asked: tuple[Model, ResolvedRoute, dict[str, Any]],
    endpoint: Endpoint,
    path: str,
    log: RequestLog,
    now: float,
) -> tuple[Model, ResolvedRoute, dict[str, Any]]:
    """The model, route and body that serve a request of a team with a budget (``asked``:
    the resolved ones): as asked while the budget lasts, or for a ``downgrade_to`` model;
    once it is spent, with ``downgrade``, the first ``downgrade_to`` model that serves the
    endpoint (``x-gateway-recovery: budget_downgrade``); else a 429 until the reset.

    Decided on the request's facts (the team is its route's, the model asked for its
    body's); the access log is only written: the route that serves, the downgrade used,
    the model that answers (it keeps naming the model asked for)."""
    spec, route, body = asked
    team = route.team
    period = book.spent(team, budget, now)
    if period is None:
        return asked
    if budget.when_spent == "downgrade":
        if body["model"] in budget.downgrade_to:
            return asked
        for name in budget.downgrade_to:
            found = _serving(policies, team, name, endpoint, path)
            if found is None:
                continue
            spec, route = found
            log.route = route.id
            log.used("budget_downgrade")
            log.answered_by = name
            return spec, route, {**body, "model": name}
    raise budget_spent(team, budget, period, now)


def budget_spent(team: str, budget: Budget, period: Period, now: float) -> GatewayError:
    """The 429 of a team whose budget is spent until ``period`` ends."""
    wait = max(1, math.ceil(period.end - now))
    return GatewayError(
        429,
        f"team {team!r} has spent its budget of {budget.usd:g} USD per {budget.per} "
        f"({period.key}); it resets at {iso(period.end)}",
        code="budget_exceeded",
        headers={"retry-after": str(wait), "x-should-retry": "false"},
    )


def has_limits(limits: TeamLimits) -> bool:
    """The team has a request or token rate to keep (``max_concurrent`` aside)."""
    return limits.requests_per_minute is not None or limits.tokens_per_minute is not None


async def admit(state: StateBackend, team: str, limits: TeamLimits, now: float) -> None:
    """Count the request in the team's rates; a 429 when it is over them."""
    wait = await state.admit(team, limits, now)
    if wait is not None:
        raise GatewayError(
            429,
            f"team {team!r} is over its limits; retry in {math.ceil(wait)} s",
            code="team_rate_limited",
            headers={"retry-after": str(max(1, math.ceil(wait))), "x-should-retry": "true"},
        )


def client_deadline(headers: Mapping[str, str], total: float) -> float:
    """Seconds the request may take: the policy's total, shortened by the client's own timeout."""
    limit = total
    for name in CLIENT_TIMEOUT_HEADERS:
        if name not in headers:  # the usual case, and cheaper than ``get``
            continue
        value = headers[name]
        if value:
            try:
                seconds = float(value)
            except ValueError:
                continue
            if math.isfinite(seconds) and seconds > 0:
                limit = min(limit, seconds)
    return limit


def request_for(
    fmt: Format,
    body: dict[str, Any],
    route: ResolvedRoute,
    context_window: int | None,
    started: float,
    headers: Mapping[str, str],
    size: int = 0,
    bill: Bill | None = None,
) -> Request:
    """The engine's request: ``body`` (``size`` bytes as the client sent it) in format
    ``fmt``, due by the deadline (monotonic), billed to ``bill`` (the handler's; None: a
    bill of its own)."""
    policy = route.policy
    deadline = started + client_deadline(headers, policy.timeouts.total)
    # by position, in the order of Request's fields (keywords cost a dict, per request)
    return Request(
        fmt, body, body["model"], route.id, route.team, policy, deadline, context_window, size,
        Bill() if bill is None else bill, headers,
    )  # fmt: skip


async def prepare(req: Request, log: RequestLog, env: Env) -> Request:
    """Just before the first attempt: proactive compaction when the policy asks for it,
    then the request counted in its route's retry allowance."""
    comp = req.policy.compaction
    if comp.enabled and comp.proactive and req.context_window:
        req = compact_ahead(req, req.context_window, log, env.events)
    await env.state.note_request(req.route_id, env.wall())
    return req


def past_deadline() -> Failure:
    """An attempt not made: the request's deadline passed before it."""
    passed = "the request's deadline passed"
    return Failure(Category.timeout, None, passed, code=DEADLINE_PASSED, stage=DEADLINE_PASSED)


def untranslatable(e: GatewayError) -> Failure:
    """An attempt not made: the translators refuse the body for the model's format (a
    field with no equivalent, or of the wrong type). The client's 400, unless another
    model of the chain takes the request as it is."""
    return Failure(Category.invalid_request, 400, e.message, code=e.code, stage=UNTRANSLATABLE)
