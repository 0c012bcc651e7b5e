"""Token-authenticated clouds through the gateway: an Azure deployment with a Microsoft
Entra ID token (managed identity) and a Vertex deployment whose Google tokens expire
during the test, refreshed ahead of expiry without a failed request."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gateway.testing import FakeProvider
from gateway.testing.fake_azure import FakeAzure
from gateway.testing.fake_azure_identity import FakeAzureIdentity
from gateway.testing.fake_google_token import FakeGoogleToken
from gateway.testing.fake_vertex import FakeVertex
from tests.clouds.cloud_env import isolate, leaked
from tests.harness import Harness, platform_files, write_policies
from tests.log_sink import Sink


async def test_azure_with_an_entra_id_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_sink: Sink
) -> None:
    """An Azure provider without api_key_env sends the managed identity's Entra ID token
    (for Azure's cognitive services scope) as a bearer; the token never reaches a log."""
    isolate(monkeypatch, tmp_path / "home")
    async with FakeAzureIdentity() as identity, FakeProvider() as unused:
        monkeypatch.setenv("IDENTITY_ENDPOINT", identity.endpoint)
        monkeypatch.setenv("IDENTITY_HEADER", identity.secret)
        azure = FakeAzure(tokens=identity.valid, deployments={"gpt-4o-prod"})
        await azure.start()
        providers = {"azure-entra": {"api": "azure", "base_url": azure.url}}
        models = {"gpt-4o": {"provider": "azure-entra", "upstream_model": "gpt-4o-prod"}}
        log_sink.configure()
        gw = await Harness(
            unused, write_policies(tmp_path / "p", platform_files(providers, models))
        ).start()
        try:
            client = gw.async_openai()
            answer = await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
            assert "gpt-4o-prod" in (answer.choices[0].message.content or "")
            (call,) = azure.requests
            token = call.headers["authorization"].removeprefix("Bearer ")
            assert identity.valid(token) and "api-key" not in call.headers
            assert "cognitiveservices.azure.com" in identity.requests[0].query.get("resource", "")
        finally:
            await gw.stop()
            await azure.stop()
    logs = b"".join(log_sink.raw()).decode()
    assert not leaked([token, identity.secret], logs)


async def test_vertex_tokens_expiring_mid_test_are_refreshed_without_a_failed_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_sink: Sink
) -> None:
    """Google tokens that live 1.5 s, over 3.5 s of requests: every request is answered
    (the fake Vertex refuses an expired token), with at least two different tokens."""
    isolate(monkeypatch, tmp_path / "home")
    async with FakeGoogleToken(lifetime=1.5) as google, FakeProvider() as unused:
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS", str(google.service_account_file(tmp_path))
        )
        vertex = FakeVertex(tokens=google.valid)
        await vertex.start()
        providers = {
            "vertex-eu": {"api": "vertex", "project": "acme-ml", "region": "europe-west1",
                          "base_url": vertex.url},
        }  # fmt: skip
        models = {"claude-sonnet-4-5": {"provider": "vertex-eu",
                                        "upstream_model": "claude-sonnet-4-5@20250929"}}  # fmt: skip
        log_sink.configure()
        gw = await Harness(
            unused, write_policies(tmp_path / "p", platform_files(providers, models))
        ).start()
        try:
            client = gw.async_anthropic()
            end = time.monotonic() + 3.5
            answered = 0
            while time.monotonic() < end:
                msg = await client.messages.create(
                    model="claude-sonnet-4-5",
                    max_tokens=20,
                    messages=[{"role": "user", "content": "hi"}],
                )
                assert msg.content
                answered += 1
                await asyncio.sleep(0.05)
        finally:
            await gw.stop()
            await vertex.stop()
    tokens = {r.headers["authorization"] for r in vertex.requests}
    assert answered == len(vertex.requests) >= 20
    assert len(tokens) >= 2  # refreshed while serving
    attempts = [e for e in log_sink.lines() if e.get("event") == "request_completed"]
    assert all(e["attempts"] == 1 and e["status"] == 200 for e in attempts)
