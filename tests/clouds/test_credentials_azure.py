"""Azure credentials for Azure OpenAI: a Microsoft Entra ID token from azure-identity's
DefaultAzureCredential (here its managed identity), refreshed ahead of expiry."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from yarl import URL

from gateway.errors import CredentialUnavailable
from gateway.testing.fake_azure_identity import API_VERSION, FakeAzureIdentity
from gateway.upstream import azure_credentials
from gateway.upstream.azure_credentials import SCOPE, AzureCredential
from tests.clouds.cloud_env import Ticker, isolate, leaked, until


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


def _identity(monkeypatch: pytest.MonkeyPatch, azure: FakeAzureIdentity) -> None:
    monkeypatch.setenv("IDENTITY_ENDPOINT", azure.endpoint)
    monkeypatch.setenv("IDENTITY_HEADER", azure.secret)


def _token(credential: AzureCredential) -> str:
    headers: dict[str, str] = {}
    credential.authorize(
        "POST", URL("https://acme.openai.azure.com/openai/v1/responses"), headers, b""
    )
    scheme, _, token = headers["authorization"].partition(" ")
    assert scheme == "Bearer"
    return token


async def test_managed_identity_gives_a_token(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With IDENTITY_ENDPOINT and IDENTITY_HEADER (App Service, Functions), the token of
    the managed identity for Cognitive Services is sent; the identity endpoint was asked
    as App Service expects."""
    caplog.set_level(logging.DEBUG)
    async with FakeAzureIdentity() as azure:
        _identity(monkeypatch, azure)
        credential = AzureCredential("azure-eu")
        await credential.start()
        assert credential.problem is None
        token = _token(credential)
        assert azure.valid(token)
        await credential.close()
    assert azure.rejected == []
    (asked,) = azure.requests
    assert asked.query == {"api-version": API_VERSION, "resource": SCOPE.removesuffix("/.default")}
    assert asked.headers["x-identity-header"] == azure.secret
    assert leaked([token, azure.secret], repr(credential), caplog.text) == []


async def test_a_token_is_refreshed_across_its_expiry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens of 3 s (App Service rounds expiries to seconds): every request over 4.5 s
    carries a token the identity endpoint still accepts, from several refreshes."""
    async with FakeAzureIdentity(lifetime=3.0) as azure:
        _identity(monkeypatch, azure)
        credential = AzureCredential("azure-eu")
        await credential.start()
        tokens, refused = set(), 0
        end = time.monotonic() + 4.5
        while time.monotonic() < end:
            token = _token(credential)
            tokens.add(token)
            refused += not azure.valid(token)
            await asyncio.sleep(0.02)
        await credential.close()
    assert refused == 0
    assert len(tokens) >= 3


async def test_a_slow_refresh_does_not_block_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """azure-identity's get_token taking 2 s runs in a thread: a coroutine ticking every
    10 ms never waits more than 100 ms meanwhile."""
    async with FakeAzureIdentity(lifetime=1.0) as azure:
        _identity(monkeypatch, azure)
        credential = AzureCredential("azure-eu")
        await credential.start()
        azure.delay = 2.0
        with Ticker() as ticker:
            await until(lambda: len(azure.requests) > 1, 2.0)
            started = time.monotonic()
            await until(lambda: len(azure.issued) > 1, 3.0)
            took = time.monotonic() - started
        await credential.close()
    assert took >= 1.9
    assert ticker.longest < 0.1, f"the event loop stalled {ticker.longest * 1000:.0f} ms"


async def test_a_refused_identity_is_a_problem_until_it_serves(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The identity endpoint refusing (no identity assigned yet): a problem naming the
    provider and where it looked, authorize refuses, on_change hears it; the endpoint
    serves: the retry gets a token and on_change(provider, None). No secret leaks."""
    caplog.set_level(logging.DEBUG)
    async with FakeAzureIdentity() as azure:
        _identity(monkeypatch, azure)
        azure.refuse = 400
        changes: list[tuple[str, str | None]] = []
        credential = AzureCredential(
            "azure-eu", lambda p, q: changes.append((p, q)), retry_first=0.05, retry_cap=0.1
        )
        await credential.start()
        problem = credential.problem
        assert problem is not None and problem.startswith("azure-eu: no usable Azure credentials")
        assert "managed identity" in problem
        assert changes == [("azure-eu", problem)]
        with pytest.raises(CredentialUnavailable, match="azure-eu"):
            _token(credential)
        azure.refuse = None
        await until(lambda: credential.problem is None)
        assert changes[-1] == ("azure-eu", None)
        token = _token(credential)
        assert azure.valid(token)
        await credential.close()
    out = capsys.readouterr()
    texts = [repr(credential), problem, caplog.text, out.out, out.err]
    assert leaked([token, azure.secret], *texts) == []


async def test_a_token_request_that_hangs_is_given_up_at_the_request_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The managed-identity endpoint never answers: azure-identity's requests end at the
    gateway's request limit (0.3 s here; azure-core alone waits 300 s per request), a
    failed fetch after its own few retries."""
    monkeypatch.setattr(azure_credentials, "REQUEST_TIMEOUT_S", 0.3)
    async with FakeAzureIdentity() as azure:
        azure.hang = True
        _identity(monkeypatch, azure)
        began = time.monotonic()
        problem = await asyncio.to_thread(AzureCredential("azure-eu").check)
        assert time.monotonic() - began < 10.0
        assert azure.requests  # it was asked, and gave no answer
    assert problem is not None
