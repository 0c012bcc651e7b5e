"""Helpers of the egress tests: certificate files, server contexts, one chat request."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import trustme

from gateway.policy.schema import Provider
from gateway.upstream.egress import Egress, egress_for

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "Hello"}]}


@dataclass(frozen=True)
class Certs:
    """PEM files of a private CA, a server certificate and a client certificate."""

    ca: trustme.CA
    server: trustme.LeafCert
    ca_file: Path  # the CA that signed the server and client certificates
    other_ca_file: Path  # an unrelated CA
    client_cert: Path
    client_key: Path
    client_combined: Path  # key and certificate in one file
    folder: Path


def make_certs(folder: Path) -> Certs:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client.gateway.test")
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    trustme.CA().cert_pem.write_to_path(str(folder / "other-ca.pem"))
    for blob in client.cert_chain_pems:
        blob.write_to_path(str(folder / "client.crt"), append=True)
    client.private_key_pem.write_to_path(str(folder / "client.key"))
    client.private_key_and_cert_chain_pem.write_to_path(str(folder / "client.pem"))
    return Certs(
        ca=ca,
        server=server,
        ca_file=folder / "ca.pem",
        other_ca_file=folder / "other-ca.pem",
        client_cert=folder / "client.crt",
        client_key=folder / "client.key",
        client_combined=folder / "client.pem",
        folder=folder,
    )


def server_context(certs: Certs, require_client_cert: bool = False) -> ssl.SSLContext:
    """A server context with the private CA's certificate for 127.0.0.1 / localhost."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    certs.server.configure_cert(ctx)
    if require_client_cert:
        certs.ca.configure_trust(ctx)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def provider(base_url: str, **fields: Any) -> Provider:
    """An openai provider at ``base_url``; Path values become strings."""
    values = {k: str(v) if isinstance(v, Path) else v for k, v in fields.items()}
    return Provider.model_validate({"api": "openai", "base_url": base_url, **values})


def egress(base_url: str, env: dict[str, str] | None = None, **fields: Any) -> Egress:
    return egress_for(provider(base_url, **fields), base_url, env or {})


async def chat(base_url: str, via: Egress) -> dict[str, Any]:
    """POST one chat completion to ``base_url`` the way the gateway would; the JSON answer."""
    async with (
        aiohttp.ClientSession(trust_env=False) as session,
        session.post(
            base_url + "/v1/chat/completions", json=CHAT, proxy=via.proxy, ssl=via.ssl
        ) as response,
    ):
        assert response.status == 200, await response.text()
        answer: dict[str, Any] = await response.json()
        return answer
