"""Proxy URLs of the egress layer: checking, redacting and scrubbing them, and choosing a
provider's proxy from its ``proxy`` setting or the environment (``*_proxy``, ``no_proxy``).

The rules are described in :mod:`gateway.upstream.egress`, which is the API.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from gateway.errors import EgressError
from gateway.policy.egress import check_proxy_url

if TYPE_CHECKING:
    from gateway.policy.schema import Provider


def redact_url(url: str) -> str:
    """``http://user:pass@proxy:3128/`` -> ``http://***@proxy:3128/``; other URLs unchanged.

    Works on any string (no parsing that could fail), so it is safe in error paths.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return f"{scheme}{sep}{authority}{slash}{path}"


@functools.lru_cache(maxsize=64)
def proxy_secrets(url: str) -> tuple[str, ...]:
    """The forms in which a proxy URL's credentials can show up in a message: the user
    and password as in the URL and decoded, their Basic token, a password of 4 or more
    characters alone (scrubbed by :mod:`gateway.upstream.egress_scrub`)."""
    authority = url.partition("://")[2].partition("/")[0]
    if "@" not in authority:
        return ()
    raw = authority.rpartition("@")[0]
    user, _, password = raw.partition(":")
    plain = f"{unquote(user)}:{unquote(password)}"
    token = base64.b64encode(plain.encode("utf-8")).decode("ascii")
    forms = {raw, plain, token}
    forms.update(p for p in (password, unquote(password)) if len(p) >= 4)
    return tuple(forms)


def host_port(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port or 80}"


def _env_proxies(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """``{scheme: (variable, value)}``: :func:`urllib.request.getproxies_environment` on ``env``."""
    proxies: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        key = name.lower()
        if value and key.endswith("_proxy"):
            proxies[key[:-6]] = (name, value)
    if "REQUEST_METHOD" in env:  # a CGI script: HTTP_PROXY may come from a request header
        proxies.pop("http", None)
    for name, value in env.items():
        if name.endswith("_proxy"):  # the lower-case spelling wins
            if value:
                proxies[name.lower()[:-6]] = (name, value)
            else:
                proxies.pop(name.lower()[:-6], None)
    return proxies


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``no_proxy`` exempts ``host``: the standard library's rules, plus IP networks."""
    shown = f"[{host}]" if ":" in host else host
    hostport = shown if port is None else f"{shown}:{port}"
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed
    if bypass(hostport, {"no": no_proxy}):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    for entry in no_proxy.split(","):
        entry = entry.strip().strip("[]")
        if not entry:
            continue
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def proxy_for(
    provider: Provider, scheme: str, host: str, port: int | None, env: Mapping[str, str]
) -> str | None:
    if provider.proxy is not None:
        return provider.proxy
    proxies = _env_proxies(env)
    found = proxies.get(scheme)
    if found is None:
        return None
    no_proxy = proxies.get("no")
    if no_proxy is not None and _bypassed(host, port, no_proxy[1]):
        return None
    variable, value = found
    url = value if "://" in value else f"http://{value}"
    try:
        return check_proxy_url(url)
    except ValueError as exc:
        raise EgressError(f"{variable}: {exc}") from None
