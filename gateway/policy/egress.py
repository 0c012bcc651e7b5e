"""The egress settings of a provider as the policy schema checks them: which settings
shape the connection, and what a proxy URL may be. Pure (no ``ssl``, no sockets, no
environment): the policy schema, which the recovery core reads, imports this and not
:mod:`gateway.upstream.egress`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

#: The provider settings that shape the connection (none applies to ``api: sim``).
EGRESS_FIELDS = ("proxy", "ca_file", "client_cert", "client_key", "tls_verify")
#: The provider settings naming files (the policy loader makes them absolute).
FILE_FIELDS = ("ca_file", "client_cert", "client_key")


def check_proxy_url(url: str) -> str:
    """Return ``url`` if it is a usable ``http://`` proxy URL, else raise ``ValueError``.

    The message says what is wrong without repeating the URL (it may hold a password).
    """
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise ValueError(
            "a proxy is a URL like http://proxy.corp:3128 (or http://user:pass@proxy.corp:3128)"
        )
    if scheme.lower() != "http":
        shown = scheme if scheme.isascii() and scheme.isalnum() else "this"
        raise ValueError(
            f"only http:// proxies are supported, not {shown}:// (an http:// proxy also"
            " carries https:// requests, with CONNECT)"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError("the proxy URL has an invalid host or port") from None
    if not parts.hostname:
        raise ValueError("the proxy URL has no host")
    if port == 0:
        raise ValueError("the proxy URL has an invalid host or port")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("a proxy URL is scheme, host and port only (no path or query)")
    return url
