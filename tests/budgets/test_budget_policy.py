"""A team's ``budget:`` as the policy loader checks it: what ``check`` and ``serve`` refuse,
with the problem's file and line."""

from __future__ import annotations

import pytest

from gateway.errors import PolicyError
from gateway.routing.load import load_policy_texts

pytestmark = pytest.mark.fast

BASE = """
providers:
  p: {api: openai, base_url: "http://127.0.0.1:9/v1"}
models:
  big: {provider: p, price: {input: 3, output: 15}}
  small: {provider: p, price: {input: 0.1, output: 0.4}}
  other: {provider: p, price: {input: 1, output: 1}}
teams:
  t:
    models: [big, small]
    budget: %s
"""


def _problems(budget: str) -> str:
    with pytest.raises(PolicyError) as e:
        load_policy_texts({"p.yaml": BASE % budget})
    return str(e.value)


def test_a_budget_that_downgrades_loads() -> None:
    """usd, per, warn_at, when_spent: downgrade and a downgrade model the team may use."""
    text = "{usd: 5, per: week, warn_at: 0.8, when_spent: downgrade, downgrade_to: [small]}"
    ps = load_policy_texts({"p.yaml": BASE % text})
    budget = ps.teams["t"].budget
    assert budget is not None
    assert (budget.usd, budget.per, budget.downgrade_to) == (5, "week", ("small",))


@pytest.mark.parametrize(
    ("budget", "says"),
    [
        ("{usd: 5, when_spent: downgrade}", "downgrade needs downgrade_to"),
        ("{usd: 5, downgrade_to: [small]}", "downgrade_to is for when_spent: downgrade"),
        ("{usd: 0}", "greater than 0"),
        ("{usd: 5, per: year}", "per"),
        ("{usd: 5, warn_at: 1.5}", "warn_at"),
        ("{usd: 5, when_spent: downgrade, downgrade_to: [smal]}", "unknown model 'smal'"),
        ("{usd: 5, when_spent: downgrade, downgrade_to: [other]}", "may not use model 'other'"),
    ],
)
def test_a_budget_the_loader_refuses(budget: str, says: str) -> None:
    """Each mistake is refused, at the file and line of the team's budget."""
    problems = _problems(budget)
    assert says in problems
    assert "p.yaml:" in problems
