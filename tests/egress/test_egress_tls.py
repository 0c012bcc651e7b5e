"""Private CAs and mutual TLS on real sockets: a fake provider served over https by a test CA.

Requests go out like the gateway's: ``aiohttp.ClientSession(trust_env=False)`` with
``proxy=`` and ``ssl=`` from :func:`egress_for`.
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
from pathlib import Path

import aiohttp
import pytest

from gateway.testing import FakeProvider
from gateway.upstream.egress import Egress, egress_for, warnings
from tests.egress.support import Certs, chat, egress, provider

OPENSSL = shutil.which("openssl")


def hashed_dir(folder: Path, ca_file: Path) -> Path:
    """An OpenSSL CA directory holding ``ca_file`` as ``<subject hash>.0``."""
    assert OPENSSL is not None
    digest = subprocess.run(
        [OPENSSL, "x509", "-hash", "-noout", "-in", str(ca_file)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    folder.mkdir()
    (folder / f"{digest}.0").write_bytes(ca_file.read_bytes())
    return folder


async def test_https_fake_provider_serves_https(https_fake: FakeProvider) -> None:
    assert https_fake.url.startswith("https://127.0.0.1:")


async def test_ca_file_verifies_the_provider(https_fake: FakeProvider, certs: Certs) -> None:
    answer = await chat(https_fake.url, egress(https_fake.url, ca_file=certs.ca_file))
    assert answer["object"] == "chat.completion"
    assert len(https_fake.requests) == 1


async def test_without_the_ca_verification_fails(https_fake: FakeProvider, certs: Certs) -> None:
    """The system store does not know the private CA; another CA file does not either."""
    for via in (egress(https_fake.url), egress(https_fake.url, ca_file=certs.other_ca_file)):
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await chat(https_fake.url, via)
    assert https_fake.requests == []


async def test_ca_file_replaces_the_environment(https_fake: FakeProvider, certs: Certs) -> None:
    """A provider's ca_file wins over SSL_CERT_FILE / REQUESTS_CA_BUNDLE, which would trust it."""
    env = {"SSL_CERT_FILE": str(certs.ca_file), "REQUESTS_CA_BUNDLE": str(certs.ca_file)}
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await chat(https_fake.url, egress(https_fake.url, env, ca_file=certs.other_ca_file))


async def test_ssl_cert_file(
    https_fake: FakeProvider, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSL_CERT_FILE is honoured: by OpenSSL's default paths, and by egress_for's env."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca_file))
    await chat(https_fake.url, egress_for(provider(https_fake.url), https_fake.url, os.environ))
    await chat(https_fake.url, egress(https_fake.url, {"SSL_CERT_FILE": str(certs.ca_file)}))
    # what the claim rests on: a default context built now reads the variable
    await chat(https_fake.url, Egress(None, ssl.create_default_context()))


async def test_ssl_cert_dir(
    https_fake: FakeProvider, certs: Certs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSL_CERT_DIR (a hashed directory, as `openssl rehash` makes) is honoured too."""
    if OPENSSL is None:
        pytest.skip("openssl not found on PATH (apt-get install openssl)")
    folder = hashed_dir(tmp_path / "cas", certs.ca_file)
    await chat(https_fake.url, egress(https_fake.url, {"SSL_CERT_DIR": str(folder)}))
    monkeypatch.setenv("SSL_CERT_DIR", str(folder))
    await chat(https_fake.url, egress_for(provider(https_fake.url), https_fake.url, os.environ))
    await chat(https_fake.url, Egress(None, ssl.create_default_context()))


async def test_requests_ca_bundle(https_fake: FakeProvider, certs: Certs) -> None:
    """REQUESTS_CA_BUNDLE is added to the default store, unless SSL_CERT_FILE is set."""
    bundle = {"REQUESTS_CA_BUNDLE": str(certs.ca_file)}
    await chat(https_fake.url, egress(https_fake.url, bundle))
    env = {**bundle, "SSL_CERT_FILE": str(certs.other_ca_file)}
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await chat(https_fake.url, egress(https_fake.url, env))


async def test_tls_verify_false(https_fake: FakeProvider) -> None:
    """No verification at all: the unknown CA is accepted, and the start warns about it."""
    p = provider(https_fake.url, tls_verify=False)
    via = egress_for(p, https_fake.url, {})
    assert via.ssl is False
    await chat(https_fake.url, via)
    assert warnings({"lab": p}) == [
        "provider 'lab': tls_verify is false: its TLS certificates are not checked"
    ]


# ---- mutual TLS ---------------------------------------------------------------------------


async def test_mtls_needs_the_client_certificate(mtls_fake: FakeProvider, certs: Certs) -> None:
    with pytest.raises(aiohttp.ClientError):
        await chat(mtls_fake.url, egress(mtls_fake.url, ca_file=certs.ca_file))
    assert mtls_fake.requests == []


async def test_mtls_with_client_cert_and_key(mtls_fake: FakeProvider, certs: Certs) -> None:
    via = egress(
        mtls_fake.url,
        ca_file=certs.ca_file,
        client_cert=certs.client_cert,
        client_key=certs.client_key,
    )
    await chat(mtls_fake.url, via)
    assert len(mtls_fake.requests) == 1


async def test_mtls_with_one_combined_file(mtls_fake: FakeProvider, certs: Certs) -> None:
    """One PEM holding key and certificate: name it as both."""
    combined = certs.client_combined
    via = egress(mtls_fake.url, ca_file=certs.ca_file, client_cert=combined, client_key=combined)
    await chat(mtls_fake.url, via)


async def test_mtls_with_the_system_store_and_ssl_cert_file(
    mtls_fake: FakeProvider, certs: Certs
) -> None:
    """A client certificate without ca_file: the default trust (here SSL_CERT_FILE) applies."""
    env = {"SSL_CERT_FILE": str(certs.ca_file)}
    via = egress(mtls_fake.url, env, client_cert=certs.client_cert, client_key=certs.client_key)
    await chat(mtls_fake.url, via)
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        no_env = egress(mtls_fake.url, client_cert=certs.client_cert, client_key=certs.client_key)
        await chat(mtls_fake.url, no_env)


async def test_mtls_without_verification(mtls_fake: FakeProvider, certs: Certs) -> None:
    """tls_verify false still presents the client certificate."""
    via = egress(
        mtls_fake.url,
        tls_verify=False,
        client_cert=certs.client_cert,
        client_key=certs.client_key,
    )
    assert isinstance(via.ssl, ssl.SSLContext)
    await chat(mtls_fake.url, via)
