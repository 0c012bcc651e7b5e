"""egress_for without sockets: which proxy, which ssl argument, what is cached, what is warned."""

from __future__ import annotations

import base64
import os
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gateway.errors import EgressError
from gateway.policy.schema import Provider
from gateway.upstream.egress import Egress, egress_for, redact_url, warnings
from gateway.upstream.egress_scrub import scrub, secrets_of
from tests.egress.support import Certs, egress, provider

pytestmark = pytest.mark.fast

OPENAI = "https://api.openai.com/v1"
PLAIN = "http://vllm.internal:8000/v1"


# ---- the proxy ------------------------------------------------------------------------


def test_direct_without_settings() -> None:
    e = egress(OPENAI)
    assert e == Egress(None, True)
    assert e.label == "direct"


@pytest.mark.parametrize(
    ("url", "env", "expected"),
    [
        (OPENAI, {"HTTPS_PROXY": "http://p:3128"}, "http://p:3128"),
        (OPENAI, {"https_proxy": "http://p:3128"}, "http://p:3128"),
        (OPENAI, {"HTTP_PROXY": "http://p:3128"}, None),  # not for https URLs
        (PLAIN, {"HTTP_PROXY": "http://p:3128"}, "http://p:3128"),
        (PLAIN, {"HTTPS_PROXY": "http://p:3128"}, None),
        (OPENAI, {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2"}, "http://lower:2"),
        (OPENAI, {"HTTPS_PROXY": "http://upper:1", "https_proxy": ""}, None),  # "" unsets
        (OPENAI, {"HTTPS_PROXY": "p:3128"}, "http://p:3128"),  # no scheme: http://
        (PLAIN, {"HTTP_PROXY": "http://p:3128", "REQUEST_METHOD": "GET"}, None),  # CGI rule
    ],
)  # fmt: skip
def test_environment_proxies(url: str, env: dict[str, str], expected: str | None) -> None:
    assert egress(url, env).proxy == expected


@pytest.mark.parametrize(
    ("url", "no_proxy", "bypassed"),
    [
        ("https://api.openai.com/v1", "api.openai.com", True),
        ("https://api.openai.com/v1", "openai.com", True),  # a domain covers its subdomains
        ("https://api.openai.com/v1", ".openai.com", True),
        ("https://API.OpenAI.com/v1", "api.openai.COM", True),
        ("https://notopenai.com/v1", "openai.com", False),
        ("https://api.openai.com/v1", "example.com, api.openai.com", True),
        ("https://api.openai.com/v1", "*", True),
        ("https://vllm.internal:8443/v1", "vllm.internal:8443", True),
        ("https://vllm.internal:8443/v1", "vllm.internal:9999", False),
        ("https://10.1.2.3:8443/v1", "10.0.0.0/8", True),  # IP networks, like curl/requests
        ("https://10.1.2.3:8443/v1", "192.168.0.0/16", False),
        ("https://[fd00::5]:8443/v1", "fd00::/8", True),
        ("https://api.openai.com/v1", "", False),
    ],
)
def test_no_proxy(url: str, no_proxy: str, bypassed: bool) -> None:
    for name in ("NO_PROXY", "no_proxy"):
        e = egress(url, {"HTTPS_PROXY": "http://p:3128", name: no_proxy})
        assert e.proxy == (None if bypassed else "http://p:3128"), name


@pytest.mark.parametrize(
    "env",
    [
        {"HTTPS_PROXY": "http://a:1"},
        {"HTTPS_PROXY": "http://a:1", "https_proxy": "http://b:2"},
        {"https_proxy": "http://b:2", "HTTPS_PROXY": ""},
        {"HTTPS_PROXY": "http://a:1", "https_proxy": ""},
        {"HTTPS_PROXY": "http://a:1", "NO_PROXY": "openai.com"},
        {"HTTPS_PROXY": "http://a:1", "no_proxy": "example.com,.openai.com"},
        {"HTTPS_PROXY": "http://a:1", "NO_PROXY": "*"},
        {"HTTPS_PROXY": "http://a:1", "NO_PROXY": "api.openai.com:443"},
        {"HTTP_PROXY": "http://a:1"},
    ],
)
def test_same_answer_as_urllib(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """With the env in os.environ, the standard library chooses the same proxy."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    proxies = urllib.request.getproxies_environment()
    host = "api.openai.com"
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    expected = None if bypass(host) else proxies.get("https")
    assert egress(OPENAI, dict(os.environ)).proxy == expected


def test_explicit_proxy_wins() -> None:
    """A provider's own proxy beats the environment, NO_PROXY included."""
    env = {"HTTPS_PROXY": "http://env:1", "NO_PROXY": "*"}
    assert egress(OPENAI, env, proxy="http://mine:3128").proxy == "http://mine:3128"


def test_sim_is_always_direct() -> None:
    """The built-in simulator is served in-process: no environment proxy, no TLS."""
    sim = Provider(api="sim")
    env = {"HTTP_PROXY": "http://p:3128", "SSL_CERT_FILE": "/x"}
    assert egress_for(sim, "http://127.0.0.1:4000", env) == Egress(None, True)


@pytest.mark.parametrize(
    "value", ["socks5://user:pw-secret@p:1080", "https://user:pw-secret@p:3128"]
)
def test_an_unusable_environment_proxy_is_an_error(value: str) -> None:
    with pytest.raises(EgressError) as info:
        egress(OPENAI, {"HTTPS_PROXY": value})
    assert str(info.value).startswith("HTTPS_PROXY: only http:// proxies are supported")
    assert "pw-secret" not in str(info.value)


# ---- never the credentials ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("proxy", "label"),
    [
        ("http://user:pw-secret@proxy.corp:3128", "proxy.corp:3128"),
        ("http://proxy.corp", "proxy.corp:80"),
        ("http://u%40x:pw-secret@[fd00::1]:3128/", "[fd00::1]:3128"),
        (None, "direct"),
    ],
)
def test_label_and_repr_have_no_credentials(proxy: str | None, label: str) -> None:
    e = Egress(proxy, True)
    assert e.label == label
    assert repr(e) == f"Egress(proxy={label!r}, ssl=True)"
    assert "pw-secret" not in f"{e!r} {e!s} {e.label}"


def test_egress_from_the_environment_is_redacted_too() -> None:
    e = egress(OPENAI, {"https_proxy": "user:pw-secret@proxy.corp:3128"})
    assert e.proxy == "http://user:pw-secret@proxy.corp:3128"  # what the client needs
    assert e.label == "proxy.corp:3128"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:pw@proxy:3128", "http://***@proxy:3128"),
        ("http://user:p@ss@proxy:3128/x", "http://***@proxy:3128/x"),
        ("http://proxy:3128", "http://proxy:3128"),
        ("user:pw@proxy:3128", "***@proxy:3128"),
        ("", ""),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


# ---- the ssl argument ------------------------------------------------------------------


def test_default_verification_is_the_clients_own() -> None:
    assert egress(OPENAI).ssl is True


def test_plain_http_needs_no_tls(certs: Certs) -> None:
    e = egress(
        PLAIN, ca_file=certs.ca_file, client_cert=certs.client_cert, client_key=certs.client_key
    )
    assert e.ssl is True


def test_tls_verify_false() -> None:
    assert egress(OPENAI, tls_verify=False).ssl is False


def test_tls_verify_false_with_a_client_certificate(certs: Certs) -> None:
    ctx = egress(
        OPENAI, tls_verify=False, client_cert=certs.client_cert, client_key=certs.client_key
    ).ssl
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_NONE
    assert ctx.check_hostname is False


def test_ca_file_makes_a_verifying_context(certs: Certs) -> None:
    ctx = egress(OPENAI, ca_file=certs.ca_file).ssl
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.check_hostname is True
    assert [c["subject"] for c in ctx.get_ca_certs()] == [
        c["subject"] for c in ssl.create_default_context(cafile=str(certs.ca_file)).get_ca_certs()
    ]  # only the provider's CA: the system store is replaced


@pytest.mark.parametrize("name", ["SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE"])
def test_trust_variables_make_a_context(name: str, certs: Certs) -> None:
    """The env given is applied explicitly (the client's default context predates it)."""
    value = str(certs.folder if name == "SSL_CERT_DIR" else certs.ca_file)
    assert isinstance(egress(OPENAI, {name: value}).ssl, ssl.SSLContext)


def test_contexts_are_cached(certs: Certs) -> None:
    """The same settings give the same context, from different Provider objects too."""
    fields: dict[str, Any] = {
        "ca_file": certs.ca_file,
        "client_cert": certs.client_cert,
        "client_key": certs.client_key,
    }
    a = egress(OPENAI, **fields)
    b = egress_for(provider("https://other.example/v1", **fields), "https://other.example/v1", {})
    assert a.ssl is b.ssl
    assert egress(OPENAI, ca_file=certs.ca_file).ssl is not a.ssl
    bundle = {"REQUESTS_CA_BUNDLE": str(certs.ca_file)}
    assert egress(OPENAI, bundle).ssl is egress(OPENAI, bundle).ssl


def test_a_rewritten_file_gives_a_new_context(tmp_path: Path, certs: Certs) -> None:
    """A rotated certificate is picked up the next time egress_for is asked (e.g. a reload)."""
    ca = tmp_path / "ca.pem"
    ca.write_bytes(certs.ca_file.read_bytes())
    first = egress(OPENAI, ca_file=ca).ssl
    assert egress(OPENAI, ca_file=ca).ssl is first
    ca.write_bytes(certs.other_ca_file.read_bytes())
    os.utime(ca, ns=(0, 1_000_000_000))
    assert egress(OPENAI, ca_file=ca).ssl is not first


def test_a_file_gone_since_loading_is_an_error(tmp_path: Path, certs: Certs) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(certs.ca_file.read_bytes())
    p = provider(OPENAI, ca_file=ca)
    ca.unlink()
    with pytest.raises(EgressError) as info:
        egress_for(p, OPENAI, {})
    assert str(info.value) == f"cannot load the CA certificates {ca}: No such file or directory"


# ---- warnings ---------------------------------------------------------------------------


def test_warnings(certs: Certs) -> None:
    providers = {
        "ok": provider(OPENAI),
        "lab": provider("https://lab.internal/v1", tls_verify=False, ca_file=certs.ca_file),
        "plain": provider(PLAIN, ca_file=certs.ca_file),
        "sim": Provider(api="sim"),
    }
    assert warnings(providers) == [
        "provider 'lab': tls_verify is false: its TLS certificates are not checked",
        "provider 'lab': ca_file is ignored: tls_verify is false",
        "provider 'plain': base_url is http://, so ca_file has no effect",
    ]
    assert warnings({"ok": provider(OPENAI)}) == []


def test_warnings_about_the_environment(tmp_path: Path) -> None:
    env = {
        "SSL_CERT_FILE": str(tmp_path / "gone.pem"),
        "SSL_CERT_DIR": str(tmp_path / "gone"),
        "REQUESTS_CA_BUNDLE": str(tmp_path),
    }
    assert warnings({}, env) == [
        f"SSL_CERT_FILE={tmp_path / 'gone.pem'}: no such file; it is ignored",
        f"SSL_CERT_DIR={tmp_path / 'gone'}: no such directory; it is ignored",
    ]


def test_scrub() -> None:
    """Plain, percent-encoded and Basic-token forms of the credentials are all removed."""
    proxy = "http://gw:pw%2Fsecret@proxy:3128"
    token = base64.b64encode(b"gw:pw/secret").decode()
    text = f"url={proxy} auth='Basic {token}' pw=pw/secret raw=gw:pw%2Fsecret@"
    clean = scrub(text, secrets_of([({}, proxy)]))
    assert clean == "url=http://***@proxy:3128 auth='Basic ***' pw=*** raw=***@"
    assert scrub(text, secrets_of([({}, None)])) == text
    assert scrub(text, secrets_of([({}, "http://proxy:3128")])) == text
