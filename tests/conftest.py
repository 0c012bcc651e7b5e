from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import FakeProvider
from tests.harness import PROVIDER_KEY, PROVIDER_KEY_ENV, Harness, policy_files, write_policies
from tests.log_sink import log_sink  # noqa: F401  (a shared fixture)
from tests.redis_server import redis, redis_server  # noqa: F401  (shared fixtures)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``pytest -m fast`` does not import the modules that hold no fast test (the socket
    suites and their SDKs): about a third of the fast tier's time was collecting them."""
    if config.getoption("markexpr") != "fast" or not collection_path.name.startswith("test_"):
        return None
    if collection_path.suffix != ".py":
        return None
    return "pytest.mark.fast" not in collection_path.read_text(encoding="utf-8") or None


@pytest.fixture(autouse=True)
def _provider_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROVIDER_KEY_ENV, PROVIDER_KEY)


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as fp:
        yield fp


@pytest.fixture
async def gateway_of(
    fake: FakeProvider, tmp_path: Path
) -> AsyncIterator[Callable[..., Awaitable[Harness]]]:
    """``await gateway_of(files, **settings)``: a gateway in front of ``fake`` serving the
    policy ``files`` ({relative path: YAML data}, as ``policy_files`` makes them)."""
    started: list[Harness] = []

    async def start(files: dict[str, Any], **settings: Any) -> Harness:
        root = write_policies(tmp_path / f"policies{len(started)}", files)
        h = await Harness(fake, root, **settings).start()
        started.append(h)
        return h

    yield start
    for h in started:
        await h.stop()


@pytest.fixture
def make_gateway(
    fake: FakeProvider, gateway_of: Callable[..., Awaitable[Harness]]
) -> Callable[..., Awaitable[Harness]]:
    """Start a gateway in front of ``fake``; ``policy=`` replaces the fast test policy."""

    async def make(
        policy: dict[str, Any] | None = None,
        limits: dict[str, int] | None = None,
        models: dict[str, Any] | None = None,
        **settings: Any,
    ) -> Harness:
        """``models``: more models (or replacements) for the platform file."""
        files = policy_files(fake.url, policy, limits)
        files["platform.yaml"]["models"].update(models or {})
        return await gateway_of(files, **settings)

    return make


@pytest.fixture
async def gw(make_gateway: Callable[..., Any]) -> Harness:
    """A gateway with the fast test policy in front of the fake provider."""
    h: Harness = await make_gateway()
    return h
