"""How the gateway reaches a provider: through which proxy, trusting which certificates.

:func:`egress_for` turns a provider's policy settings (``proxy``, ``ca_file``,
``client_cert`` / ``client_key``, ``tls_verify``) and the environment into an
:class:`Egress`: the proxy URL to pass per request (or ``None``) and the ``ssl``
argument of the HTTP client. The HTTP client is called with ``trust_env=False``:
the environment is read here, once, with the rules of the standard library.

**Proxy.** An explicit ``proxy`` always wins. Otherwise the proxy of the base
URL's scheme comes from the environment as :func:`urllib.request.getproxies`
reads it (``https_proxy`` / ``HTTPS_PROXY`` for ``https://`` URLs, ``http_proxy``
/ ``HTTP_PROXY`` for ``http://``; the lower-case name wins when both are set; a
value without a scheme means ``http://``), unless ``no_proxy`` / ``NO_PROXY``
bypasses the host (:func:`urllib.request.proxy_bypass_environment`: ``*``,
host names and domain suffixes, ``host:port``; here also IP networks such as
``10.0.0.0/8``, like curl and requests). Only ``http://`` proxies are accepted;
they carry ``https://`` requests with ``CONNECT``. The built-in ``sim`` provider
is served in-process and is always reached directly.

**Trust.** For an ``https://`` base URL, with ``ca_file`` the bundle replaces the
system store for that provider. Without it, ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``
replace OpenSSL's default file / directory (as OpenSSL does), and
``REQUESTS_CA_BUNDLE`` (a file or a hashed directory; ignored when
``SSL_CERT_FILE`` is set) is added to the default store. ``client_cert`` +
``client_key`` are presented for mutual TLS. ``tls_verify: false`` turns
verification off. ``Egress.ssl`` is ``True`` (the HTTP client's default context)
when nothing of this applies, ``False`` only for ``tls_verify: false`` without a
client certificate, else a context built here and cached: the same settings, the
same environment and unchanged files give the same object.

Nothing here writes a proxy's user or password anywhere: :attr:`Egress.label`,
``repr(Egress)``, :func:`redact_url` and every error message leave them out. The
HTTP client's own errors may not (aiohttp's proxy errors show both): the gateway never
writes their text anywhere (:func:`gateway.upstream.client.failure` words each one itself).
The one scrubber, :mod:`gateway.upstream.egress_scrub`, keeps the proxy's credentials and the
provider credentials each attempt sent out of any provider text before it reaches a
client (:meth:`gateway.live.attempter.HttpAttempter.scrubbed`).

This module is the API; the proxy rules are carried out in :mod:`gateway.upstream.egress_proxy`,
the trust rules in :mod:`gateway.upstream.egress_tls`; what the policy schema checks is in
:mod:`gateway.policy.egress` (pure).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gateway.policy.egress import FILE_FIELDS
from gateway.upstream.egress_proxy import host_port, proxy_for, redact_url
from gateway.upstream.egress_tls import existing_dirs, ssl_for

if TYPE_CHECKING:
    from gateway.policy.schema import Provider

__all__ = ["Egress", "egress_for", "redact_url", "warnings"]


@dataclass(frozen=True, slots=True, repr=False)
class Egress:
    """How to reach one provider: pass ``proxy=`` and ``ssl=`` with each request."""

    #: ``http://[user:pass@]host[:port]`` or ``None`` (direct). Holds credentials:
    #: pass it to the client, never log it (log :attr:`label`).
    proxy: str | None
    #: ``True``: the client's default verified context; ``False``: no verification
    #: (``tls_verify: false``); or a context with the provider's CA / client certificate.
    ssl: ssl.SSLContext | bool

    @property
    def label(self) -> str:
        """``proxy.corp:3128`` or ``direct``, for logs: never credentials."""
        if self.proxy is None:
            return "direct"
        return host_port(self.proxy)

    def __repr__(self) -> str:
        trust = self.ssl if isinstance(self.ssl, bool) else "SSLContext"
        return f"Egress(proxy={self.label!r}, ssl={trust})"


# ---- the API -------------------------------------------------------------------------


def egress_for(provider: Provider, base_url: str, env: Mapping[str, str]) -> Egress:
    """The proxy and TLS settings to reach ``base_url`` of ``provider`` (see the module doc).

    ``base_url`` is the URL actually called (the ``sim`` provider's is only known at
    start). Call it once per provider and policy set, not per request: it reads files
    (cached while they are unchanged). Raises :class:`EgressError` for an environment
    proxy that is not ``http://`` or a certificate file that cannot be loaded.
    """
    if provider.api == "sim":
        return Egress(None, True)
    parts = urlsplit(base_url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    proxy = proxy_for(provider, scheme, parts.hostname or "", port, env)
    return Egress(proxy, ssl_for(provider, env) if scheme == "https" else True)


def warnings(providers: Mapping[str, Provider], env: Mapping[str, str] | None = None) -> list[str]:
    """What an operator should hear at start (one line each, no secrets).

    With ``env``, also environment trust settings that point at nothing.
    """
    out: list[str] = []
    for name, p in sorted(providers.items()):
        if p.api == "sim":
            continue
        if not p.tls_verify:
            out.append(
                f"provider '{name}': tls_verify is false: its TLS certificates are not checked"
            )
            if p.ca_file:
                out.append(f"provider '{name}': ca_file is ignored: tls_verify is false")
        tls_set = [f for f in FILE_FIELDS if getattr(p, f)]
        tls_set += [] if p.tls_verify else ["tls_verify"]
        if tls_set and urlsplit(p.base_url).scheme.lower() == "http":
            out.append(
                f"provider '{name}': base_url is http://, so {', '.join(tls_set)}"
                f" {'has' if len(tls_set) == 1 else 'have'} no effect"
            )
    if env is not None:
        for variable in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
            path = env.get(variable)
            if path and not os.path.exists(path):
                out.append(f"{variable}={path}: no such file; it is ignored")
        cert_dir = env.get("SSL_CERT_DIR")
        if cert_dir and existing_dirs(cert_dir) is None:
            out.append(f"SSL_CERT_DIR={cert_dir}: no such directory; it is ignored")
    return out
