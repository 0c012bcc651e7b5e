"""What requests cost, as the access log and the events say it (the metric
``llm_gateway_cost_usd_total`` is counted in gateway/observe/metrics.py).

``request_completed`` carries ``cost_usd`` (the answer's billed parts) and
``recovery_cost_usd`` (attempts whose output the client never got), in USD rounded to
1e-8 (gateway/observe/events.py writes them). ``cost_usd`` is ``null`` when a part was
billed without a price and no part of the answer was priced: the cost is not known, which
is not the same as 0. When some parts were priced and one was not (a continued answer
whose parts came from two deployments, one unpriced), the costs are of the priced parts
only, and ``x-gateway-cost-usd`` is left out. The event ``price_unknown`` says, the first
time a process bills a model without a price, which one; ``usage_implausible``, the first
time a provider reports counts for a model that the gateway does not believe, which.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from gateway.observe.request_log import RequestLog

log = structlog.get_logger("gateway")

#: The models this process has said ``price_unknown`` about.
told: set[str] = set()
#: The (provider, model) pairs this process has said ``usage_implausible`` about.
doubted: set[tuple[str, str]] = set()


def price_unknown(r: RequestLog) -> None:
    """The event ``price_unknown``, once per model per process: ``r`` billed a part of
    its bill's ``unpriced`` model without a price. ``deployment`` and ``provider`` are those
    of the request's last attempt when that was the model's, else null (a recovery call
    of another model: a compaction summary)."""
    model = r.bill.unpriced
    if model is None or model in told:
        return
    told.add(model)
    answered = model == (r.answered_by or r.model)
    log.warning(
        "price_unknown",
        model=model,
        deployment=(r.deployment or r.provider) if answered else None,
        provider=r.provider if answered else None,
        request_id=r.request_id,
    )


def usage_implausible(r: RequestLog, model: str, fields: tuple[str, ...]) -> None:
    """The event ``usage_implausible``, once per provider and model per process: the
    provider of ``r``'s attempt reported for ``model`` counts it cannot have meant (not
    counts, or more than the request could have produced; docs/recovery.md, "Tokens and
    cost"), which were estimated or clamped. ``fields`` names them (``input``, ``output``,
    ``cache_read``, ``cache_creation``); their values are never logged."""
    key = (r.provider, model)
    if key in doubted:
        return
    doubted.add(key)
    log.warning(
        "usage_implausible",
        provider=r.provider,
        model=model,
        fields=list(fields),
        request_id=r.request_id,
    )
