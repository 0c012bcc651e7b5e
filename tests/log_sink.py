"""The gateway's logs as it writes them to stdout, captured in a file: ``log_sink``."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog

from gateway.observe import logs


class Sink:
    """``logs.configure`` with stdout swapped for a file, as the gateway writes to its stdout."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = path.open("w")

    def configure(self, level: str = "info", fmt: str = "json") -> None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sys, "stdout", self.file)
            logs.configure(level, fmt)
        # the module-level lazy loggers must not keep this test's file once it is over
        structlog.configure(cache_logger_on_first_use=False)

    def lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.path.read_bytes().splitlines()]

    def raw(self) -> list[bytes]:
        return self.path.read_bytes().splitlines(keepends=True)

    async def line(self, request_id: str) -> tuple[bytes, dict[str, Any]]:
        """The ``request_completed`` line of ``request_id`` (written after the answer)."""
        deadline = time.monotonic() + 5
        while True:
            for raw in self.raw():
                if request_id.encode() in raw and b"request_completed" in raw:
                    return raw, orjson.loads(raw)
            assert time.monotonic() < deadline, f"no access log line for {request_id}"
            await asyncio.sleep(0.01)  # the line is written once the loop has a pass


@pytest.fixture
def log_sink(tmp_path: Path) -> Iterator[Sink]:
    """A :class:`Sink` (call its ``configure``); the logging set-up is restored after."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    config, fast = structlog.get_config(), logs.fast_json
    s = Sink(tmp_path / "stdout")
    yield s
    s.file.close()
    structlog.configure(**config)
    logs.fast_json = fast
    for h in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(h)
    root.setLevel(level)
