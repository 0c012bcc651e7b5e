"""Real client programs through the gateway; heavy ones only on request.

``pytest`` runs the light clients (``llm``, the ``openai`` CLI) and skips those
marked ``heavy`` (Claude Code, Codex, aider) unless ``LLM_GATEWAY_HEAVY_CLIENTS=1``.
"""

from __future__ import annotations

import os

import pytest

HEAVY_ENV = "LLM_GATEWAY_HEAVY_CLIENTS"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(HEAVY_ENV) == "1":
        return
    skip = pytest.mark.skip(
        reason=f"heavy client (large install): set {HEAVY_ENV}=1 to run it "
        "(see tests/clients/README.md)"
    )
    for item in items:
        if "heavy" in item.keywords:
            item.add_marker(skip)
