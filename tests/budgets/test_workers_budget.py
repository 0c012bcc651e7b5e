"""``serve --workers N`` with budgets and no shared state says each worker counts alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.testing import FakeProvider
from tests.harness import policy_files, write_policies
from tests.integration.test_workers import workers  # noqa: F401  (the fixture)


async def test_workers_without_state_backend_warn_about_budgets(
    workers: Callable[..., Any],  # noqa: F811
    fake: FakeProvider,
    tmp_path: Path,
) -> None:
    """Two workers, a team with a budget, no GATEWAY_STATE_URL: budget_not_shared at start,
    naming the teams and the number of workers."""
    files = policy_files(fake.url)
    files["teams/team-a.yaml"]["teams"]["team-a"]["budget"] = {"usd": 5, "per": "day"}
    served = await workers(write_policies(tmp_path / "policies", files), 2, state_url="")
    [event] = served.named("budget_not_shared")
    assert (event["teams"], event["workers"], event["level"]) == (["team-a"], 2, "warning")
