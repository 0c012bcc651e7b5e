"""A live gateway (echo upstream) shared by the fuzz tests of a module; see live.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.fuzz.live import LiveGateway

# Fixed, bounded runs: the same examples every time, a few seconds per test.
settings.register_profile(
    "fuzz",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
FUZZ = settings.get_profile("fuzz")
MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGateway]:
    root: Path = tmp_path_factory.mktemp("live")
    g = LiveGateway(root, max_body_bytes=MAX_BODY, client_read_timeout_s=2.0).start()
    yield g
    g.stop()


@pytest.fixture(autouse=True)
def _fresh_error_log(request: pytest.FixtureRequest) -> None:
    """Each test judges only the aiohttp/asyncio ERROR records of its own requests."""
    if "live" in request.fixturenames:
        request.getfixturevalue("live").errors.records.clear()
