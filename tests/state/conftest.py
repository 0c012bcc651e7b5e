"""Fixtures for the state backends: a real redis-server per test, and backend factories."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gateway.state import StateBackend, open_state
from tests.redis_server import RedisServer


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def state_url(request: pytest.FixtureRequest) -> str:
    """The GATEWAY_STATE_URL of each backend kind."""
    if request.param == "memory":
        return ""
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
async def make_backend(state_url: str) -> AsyncIterator[Callable[..., StateBackend]]:
    """Open backends of the parametrized kind (closed after the test)."""
    made: list[StateBackend] = []

    def factory(**options: Any) -> StateBackend:
        backend = open_state(state_url, **options)
        made.append(backend)
        return backend

    yield factory
    for backend in made:
        with contextlib.suppress(Exception):
            await backend.close()
