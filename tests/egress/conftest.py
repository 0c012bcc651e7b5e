"""Fixtures for egress tests: a hermetic environment, a private CA, https fake providers."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from gateway.testing import FakeProvider
from tests.egress.support import Certs, make_certs, server_context
from tests.proxy_server import tinyproxy, tinyproxy_auth  # noqa: F401  (shared fixtures)

#: What the egress layer reads from the environment; cleared for every test here
#: (CI machines and sandboxes often set them), so each test states its own.
EGRESS_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "REQUEST_METHOD")


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name in EGRESS_ENV:
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A private CA with server and client certificates, written once per session."""
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
async def https_fake(certs: Certs) -> AsyncIterator[FakeProvider]:
    """A fake provider on https://127.0.0.1:PORT with a certificate of the private CA."""
    async with FakeProvider(ssl_context=server_context(certs)) as fp:
        yield fp


@pytest.fixture
async def mtls_fake(certs: Certs) -> AsyncIterator[FakeProvider]:
    """Like ``https_fake``, but the server requires a client certificate of the private CA."""
    async with FakeProvider(ssl_context=server_context(certs, require_client_cert=True)) as fp:
        yield fp


@pytest.fixture
async def http_fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider() as fp:
        yield fp
