"""Proxies on real sockets: a real tinyproxy forwards http:// and tunnels https:// (CONNECT).

Requests go out like the gateway's: ``aiohttp.ClientSession(trust_env=False)`` with
``proxy=`` and ``ssl=`` from :func:`egress_for`; tinyproxy's log proves the route.
"""

from __future__ import annotations

import base64

import aiohttp
import pytest

from gateway.testing import FakeProvider
from gateway.upstream.egress_scrub import scrub, secrets_of
from tests.egress.support import CHAT, Certs, chat, egress
from tests.proxy_server import PROXY_PASSWORD, Tinyproxy


def forwarded(fake: FakeProvider) -> str:
    return f"POST {fake.url}/v1/chat/completions HTTP/1.1"


def tunnelled(fake: FakeProvider) -> str:
    return f"CONNECT {fake.url.removeprefix('https://')} HTTP/1.1"


async def test_http_upstream_through_the_proxy(
    http_fake: FakeProvider, tinyproxy: Tinyproxy
) -> None:
    """An http:// provider: the proxy forwards the request (absolute-form request line)."""
    via = egress(http_fake.url, proxy=tinyproxy.url)
    assert via.label == tinyproxy.address
    await chat(http_fake.url, via)
    assert tinyproxy.requests() == [forwarded(http_fake)]
    assert len(http_fake.requests) == 1


async def test_https_upstream_through_the_proxy(
    https_fake: FakeProvider, tinyproxy: Tinyproxy, certs: Certs
) -> None:
    """An https:// provider: a CONNECT tunnel, TLS end to end with the provider's CA."""
    await chat(https_fake.url, egress(https_fake.url, proxy=tinyproxy.url, ca_file=certs.ca_file))
    assert tinyproxy.requests() == [tunnelled(https_fake)]
    assert len(https_fake.requests) == 1


async def test_mtls_through_the_proxy(
    mtls_fake: FakeProvider, tinyproxy: Tinyproxy, certs: Certs
) -> None:
    """The client certificate is presented inside the tunnel."""
    via = egress(
        mtls_fake.url,
        proxy=tinyproxy.url,
        ca_file=certs.ca_file,
        client_cert=certs.client_cert,
        client_key=certs.client_key,
    )
    await chat(mtls_fake.url, via)
    assert tinyproxy.requests() == [tunnelled(mtls_fake)]


async def test_environment_proxy_and_no_proxy(
    http_fake: FakeProvider, https_fake: FakeProvider, tinyproxy: Tinyproxy, certs: Certs
) -> None:
    """HTTP_PROXY / HTTPS_PROXY route through the proxy; NO_PROXY goes direct."""
    await chat(http_fake.url, egress(http_fake.url, {"HTTP_PROXY": tinyproxy.url}))
    env = {"https_proxy": tinyproxy.address}  # no scheme: http://
    await chat(https_fake.url, egress(https_fake.url, env, ca_file=certs.ca_file))
    assert tinyproxy.requests() == [forwarded(http_fake), tunnelled(https_fake)]

    bypass = {"HTTP_PROXY": tinyproxy.url, "NO_PROXY": "localhost,127.0.0.1"}
    via = egress(http_fake.url, bypass)
    assert via.proxy is None
    await chat(http_fake.url, via)
    assert len(tinyproxy.requests()) == 2
    assert len(http_fake.requests) == 2


# ---- a proxy that wants a password ----------------------------------------------------------


async def test_proxy_with_basic_auth(
    http_fake: FakeProvider, https_fake: FakeProvider, tinyproxy_auth: Tinyproxy, certs: Certs
) -> None:
    """Credentials in the proxy URL are sent as Proxy-Authorization, forwarded and tunnelled."""
    via = egress(http_fake.url, proxy=tinyproxy_auth.url)
    assert PROXY_PASSWORD in tinyproxy_auth.url
    assert PROXY_PASSWORD not in f"{via.label} {via!r}"
    await chat(http_fake.url, via)
    tls = egress(https_fake.url, proxy=tinyproxy_auth.url, ca_file=certs.ca_file)
    await chat(https_fake.url, tls)
    assert tinyproxy_auth.requests() == [forwarded(http_fake), tunnelled(https_fake)]


async def test_proxy_auth_is_required(
    http_fake: FakeProvider, https_fake: FakeProvider, tinyproxy_auth: Tinyproxy, certs: Certs
) -> None:
    """Without credentials the proxy answers 407 (forwarding) or refuses the tunnel."""
    anonymous = f"http://{tinyproxy_auth.address}"
    async with aiohttp.ClientSession(trust_env=False) as session:
        via = egress(http_fake.url, proxy=anonymous)
        url = http_fake.url + "/v1/chat/completions"
        async with session.post(url, json=CHAT, proxy=via.proxy, ssl=via.ssl) as response:
            assert response.status == 407
    with pytest.raises(aiohttp.ClientHttpProxyError) as info:
        await chat(https_fake.url, egress(https_fake.url, proxy=anonymous, ca_file=certs.ca_file))
    assert info.value.status == 407
    assert http_fake.requests == [] and https_fake.requests == []


async def test_scrub_proxy_errors_before_logging(
    https_fake: FakeProvider, tinyproxy_auth: Tinyproxy, certs: Certs
) -> None:
    """aiohttp's refused-tunnel error shows the proxy password: the scrubber removes it.

    ``str()`` holds the proxy URL with user and password, ``repr()`` the
    ``Proxy-Authorization`` header (base64 of user:password).
    """
    wrong = f"http://gw-proxy-user:wrong-pw-123@{tinyproxy_auth.address}"
    via = egress(https_fake.url, proxy=wrong, ca_file=certs.ca_file)
    with pytest.raises(aiohttp.ClientHttpProxyError) as info:
        await chat(https_fake.url, via)
    assert info.value.status in (401, 407)  # tinyproxy answers a wrong password with 401
    token = base64.b64encode(b"gw-proxy-user:wrong-pw-123").decode()
    raw = f"{info.value!s} {info.value!r}"
    assert "wrong-pw-123" in raw and token in raw  # what must never be logged as is
    clean = scrub(raw, secrets_of([({}, via.proxy)]))
    assert "wrong-pw-123" not in clean and token not in clean
    assert tinyproxy_auth.address in clean


async def test_unreachable_proxy_fails_fast(https_fake: FakeProvider, certs: Certs) -> None:
    """A proxy nobody listens on is a connection error naming the proxy, not the password."""
    via = egress(https_fake.url, proxy="http://u:pw-xyz@127.0.0.1:9", ca_file=certs.ca_file)
    with pytest.raises(aiohttp.ClientProxyConnectionError) as info:
        await chat(https_fake.url, via)
    assert "127.0.0.1:9" in str(info.value)
    assert "pw-xyz" not in f"{info.value!s} {info.value!r}"
