"""Shared by the cloud credential tests: an environment cut off from the machine's own
cloud configuration, and the checks that run across a test (no secret leaked, no gap in
the event loop)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

#: What the clouds' libraries read from the environment to find credentials.
_CLOUD_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
    "AWS_REGION", "AWS_DEFAULT_REGION", "GOOGLE_APPLICATION_CREDENTIALS", "GCE_METADATA_HOST",
    "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH",
    "AZURE_USERNAME", "AZURE_PASSWORD", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_TOKEN_CREDENTIALS",
    "IDENTITY_ENDPOINT", "IDENTITY_HEADER", "IDENTITY_SERVER_THUMBPRINT", "IMDS_ENDPOINT",
    "MSI_ENDPOINT", "MSI_SECRET",
)  # fmt: skip


def isolate(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """No cloud credentials from this machine: no cloud variables, HOME (and the clouds'
    config folders) in ``home``, no instance or metadata service reachable."""
    for name in _CLOUD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "aws-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(home / "gcloud"))
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")  # nothing listens: refused at once
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(home / "azure"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no az, azd or pwsh of this machine's user


def leaked(secrets: Iterable[str], *texts: str) -> list[str]:
    """The secrets (their first 12 characters are enough to tell) found in ``texts``."""
    joined = "\n".join(texts)
    return [s[:6] + "..." for s in secrets if s and s[:12] in joined]


class Ticker:
    """A coroutine ticking every 10 ms; :attr:`longest` is the longest time between two
    ticks, what a blocked event loop would show."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            self.ticks += 1
            last = now

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()


async def until(condition: object, seconds: float = 5.0) -> None:
    """Wait (polling every 10 ms) until ``condition()`` is true; fails after ``seconds``."""
    assert callable(condition)
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
