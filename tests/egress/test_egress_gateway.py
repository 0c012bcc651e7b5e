"""The gateway end to end through its egress settings: the official SDK as client, a
private-CA or mutual-TLS fake provider, a real forward / CONNECT proxy in between."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.testing import FakeProvider
from tests.egress.support import Certs
from tests.harness import Harness, policy_files, write_policies
from tests.proxy_server import Tinyproxy

MESSAGES = [{"role": "user", "content": "Hello"}]


async def gateway_for(
    tmp_path: Path, fake: FakeProvider, monkeypatch: pytest.MonkeyPatch, **egress: Any
) -> Harness:
    """A gateway whose 'fake' provider is reached with the given egress settings."""
    files = policy_files(fake.url)
    fake_provider = files["platform.yaml"]["providers"]["fake"]
    fake_provider.update({k: str(v) if isinstance(v, Path) else v for k, v in egress.items()})
    root = write_policies(tmp_path / "policies", files)
    return await Harness(fake, root).start()


async def ask(h: Harness) -> str:
    r = await h.async_openai().chat.completions.create(model="gpt-test", messages=MESSAGES)
    return r.choices[0].message.content or ""


async def test_private_ca_through_ca_file(
    tmp_path: Path, https_fake: FakeProvider, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider with a certificate of a private CA answers when its ca_file names that CA."""
    h = await gateway_for(tmp_path, https_fake, monkeypatch, ca_file=certs.ca_file)
    try:
        assert "fake provider" in await ask(h)
    finally:
        await h.stop()


async def test_private_ca_without_trust_is_a_clear_502(
    tmp_path: Path, https_fake: FakeProvider, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the CA the TLS handshake fails: the client gets 502 naming a TLS error."""
    h = await gateway_for(tmp_path, https_fake, monkeypatch, ca_file=certs.other_ca_file)
    try:
        with pytest.raises(openai.APIStatusError) as info:
            await ask(h)
        assert info.value.status_code == 502
        assert "TLS error" in info.value.message
        assert https_fake.requests == []
    finally:
        await h.stop()


async def test_mutual_tls_with_client_certificate(
    tmp_path: Path, mtls_fake: FakeProvider, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider that requires a client certificate answers the gateway that presents one."""
    h = await gateway_for(
        tmp_path,
        mtls_fake,
        monkeypatch,
        ca_file=certs.ca_file,
        client_cert=certs.client_cert,
        client_key=certs.client_key,
    )
    try:
        assert "fake provider" in await ask(h)
    finally:
        await h.stop()


async def test_ssl_cert_file_from_the_environment(
    tmp_path: Path, https_fake: FakeProvider, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSL_CERT_FILE in the gateway's environment is trusted with no per-provider setting."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca_file))
    h = await gateway_for(tmp_path, https_fake, monkeypatch)
    try:
        assert "fake provider" in await ask(h)
    finally:
        await h.stop()


async def test_https_through_a_connect_proxy_from_the_environment(
    tmp_path: Path,
    https_fake: FakeProvider,
    certs: Certs,
    tinyproxy: Tinyproxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTPS_PROXY from the environment carries the provider's TLS through CONNECT."""
    monkeypatch.setenv("HTTPS_PROXY", tinyproxy.url)
    h = await gateway_for(tmp_path, https_fake, monkeypatch, ca_file=certs.ca_file)
    try:
        assert "fake provider" in await ask(h)
        assert any(line.startswith("CONNECT") for line in tinyproxy.requests())
    finally:
        await h.stop()


async def test_per_provider_proxy_with_credentials(
    tmp_path: Path,
    http_fake: FakeProvider,
    tinyproxy_auth: Tinyproxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A provider's own proxy (basic auth in the URL) carries plain-HTTP requests; the
    credentials never show in /admin/policies."""
    h = await gateway_for(tmp_path, http_fake, monkeypatch, proxy=tinyproxy_auth.url)
    try:
        assert "fake provider" in await ask(h)
        assert any("/v1/chat/completions" in line for line in tinyproxy_auth.requests())
        described = repr(h.gateway.policies.describe())
        assert tinyproxy_auth.auth is not None
        assert tinyproxy_auth.auth[1] not in described
    finally:
        await h.stop()


async def test_no_proxy_bypasses_the_environment_proxy(
    tmp_path: Path, http_fake: FakeProvider, tinyproxy: Tinyproxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NO_PROXY naming the provider's host sends it direct even with HTTP_PROXY set."""
    monkeypatch.setenv("HTTP_PROXY", tinyproxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    h = await gateway_for(tmp_path, http_fake, monkeypatch)
    try:
        assert "fake provider" in await ask(h)
        assert tinyproxy.requests() == []
    finally:
        await h.stop()
