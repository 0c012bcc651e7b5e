"""The events of team budgets (docs/reference.md, Events): ``budget_warning`` and
``budget_exceeded``, each once per team and period (for all the replicas together with
Redis: :mod:`gateway.state.redis_budgets`), and
``budget_not_shared`` at the start of ``serve --workers N`` with budgets and no
``GATEWAY_STATE_URL`` (each worker then keeps its own count)."""

from __future__ import annotations

import structlog

from gateway.money.budgets import BudgetCrossing, iso

log = structlog.get_logger("gateway")


def crossed(c: BudgetCrossing) -> None:
    """A team's spending crossed its ``warn_at`` share or its limit."""
    fields = {
        "team": c.team,
        "per": c.period.per,
        "period": c.period.key,
        "spent_usd": round(c.spent_usd, 6),
        "limit_usd": c.limit_usd,
        "resets_at": iso(c.period.end),
    }
    if c.kind == "budget_warning":
        log.warning("budget_warning", **fields)
    else:
        log.warning("budget_exceeded", **fields)


def not_shared(teams: list[str], workers: int) -> None:
    """Budgets counted by each worker on its own: a team may spend ``workers`` times its
    budget."""
    log.warning(
        "budget_not_shared",
        teams=teams,
        workers=workers,
        reason="no GATEWAY_STATE_URL: each worker counts budgets on its own",
    )
