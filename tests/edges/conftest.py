"""Fixtures of the edge tests: a hostile upstream, gateways in front of any upstream."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.edges.support import ROOT, Answer, EvilUpstream, Process
from tests.harness import Harness, policy_files, write_policies
from tests.process import GatewayProcess


@pytest.fixture
async def evil() -> AsyncIterator[Callable[[Answer], Awaitable[EvilUpstream]]]:
    """``await evil(answer)`` starts an :class:`EvilUpstream`."""
    started: list[EvilUpstream] = []

    async def make(answer: Answer) -> EvilUpstream:
        up = await EvilUpstream(answer).start()
        started.append(up)
        return up

    yield make
    for up in started:
        await up.stop()


@pytest.fixture
async def gateway_at(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Harness]]]:
    """An in-process gateway whose providers point at ``url`` (any upstream, not the fake)."""
    started: list[Harness] = []

    async def make(url: str, policy: dict[str, Any] | None = None, **settings: Any) -> Harness:
        root = write_policies(tmp_path / f"at{len(started)}", policy_files(url, policy))
        h = await Harness(None, root, **settings).start()  # type: ignore[arg-type]
        started.append(h)
        return h

    yield make
    for h in started:
        await h.stop()


@pytest.fixture
async def gateway_process(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Process]]]:
    """``await gateway_process(upstream_url, policy=None, **settings)``: a gateway process
    with ``GATEWAY_<SETTING>`` from ``settings`` (strings), its providers at ``upstream_url``."""
    started: list[Process] = []

    async def make(url: str, policy: dict[str, Any] | None = None, **settings: str) -> Process:
        root = write_policies(tmp_path / f"proc{len(started)}", policy_files(url, policy))
        gp = GatewayProcess(root, **settings)
        # The process runs the gateway of this tree, whatever is installed.
        gp.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
        proc = Process(gp)
        started.append(proc)
        await gp.start()
        return proc

    yield make
    for p in started:
        await p.stop()
