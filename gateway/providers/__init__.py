"""How a provider is reached on each client endpoint (no sockets): where a request goes
and with which headers. The endpoints themselves are :mod:`gateway.formats.endpoints`',
what a body holds is its format's (:mod:`gateway.formats`).

``api: openai``     base_url is the URL that ``/chat/completions`` etc. follow.
``api: anthropic``  base_url is the root; the gateway adds ``/v1/messages``.
``api: sim``        the built-in simulated provider at its root; it speaks every format.
``api: bedrock``, ``vertex``, ``azure``  cloud providers: the URL and body of each call
                    are their :class:`~gateway.providers.kinds.Cloud`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from yarl import URL

from gateway import formats
from gateway.formats.endpoints import Endpoint
from gateway.policy.schema import Provider
from gateway.providers.kinds import KINDS, Authorizer, Cloud, cloud_of, native_paths

# Provider headers a client may set for the provider; everything else stays at the gateway.
PASSED_HEADERS = ("anthropic-version", "anthropic-beta", "openai-beta")


@dataclass(slots=True)
class Target:
    url: URL
    headers: dict[str, str]


def speaks(provider: Provider, endpoint: Endpoint) -> bool:
    """The provider takes the endpoint's bodies as they are (no translation)."""
    if provider.api in KINDS:
        return endpoint.value in native_paths(provider.api)
    return endpoint.fmt in formats.of_provider(provider.api)


def serves(provider: Provider, endpoint: Endpoint) -> bool:
    """A model of the provider may be called on the endpoint: chat completions, Messages
    and Responses on every provider (translated when its format differs,
    docs/translation.md); legacy completions and embeddings only on OpenAI-format ones."""
    return endpoint.continuable or speaks(provider, endpoint)


@dataclass(frozen=True, slots=True)
class Wiring:
    """How one provider of a policy set is called, resolved once per set: the URL and
    base headers (with the provider's key) per endpoint, the proxy and the TLS setting;
    for a cloud provider, its :class:`Cloud` (each call's URL and body), the headers of
    every call, and the credential that authorizes each attempt (None: a static key)."""

    targets: Mapping[Endpoint, Target]
    proxy: str | None = None
    tls: Any = True  # aiohttp's ``ssl=``: True, False or an SSLContext
    cloud: Cloud | None = None
    headers: Mapping[str, str] = field(default_factory=dict)  # a cloud's, for every call
    credential: Authorizer | None = None


def wiring_of(
    provider: Provider,
    base_url: str,
    key: str | None,
    proxy: str | None = None,
    tls: Any = True,
    credential: Authorizer | None = None,
) -> Wiring:
    """The :class:`Wiring` of ``provider`` at ``base_url`` (the ``sim`` provider's address
    is only known once it runs) with ``key`` from the environment; a cloud provider's
    ``credential`` authorizes each attempt where it has no key."""
    extra = {k.lower(): v for k, v in provider.headers.items()}
    if provider.api in KINDS:
        cloud = cloud_of(provider, base_url)
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        if key:
            headers.update(cloud.key_headers(key))
        headers.update(extra)
        return Wiring({}, proxy, tls, cloud, headers, None if key else credential)
    targets = {
        ep: _base_target(provider.api == "sim", base_url, extra, ep, key)
        for ep in Endpoint
        if speaks(provider, ep)
    }
    return Wiring(targets, proxy, tls)


def _base_target(
    rooted: bool, base_url: str, extra: Mapping[str, str], endpoint: Endpoint, key: str | None
) -> Target:
    """``rooted``: the base URL is the server's root (the simulated provider), else it
    ends with what the format's provider kind puts there (``/v1`` for OpenAI's)."""
    fmt = endpoint.fmt
    path = endpoint.value if rooted else endpoint.value.removeprefix(fmt.base_path)
    # identity: answers are small and the hop usually near; a provider (or a middlebox)
    # that compresses anyway is decoded by the client (gateway/upstream/client.py).
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    headers.update(fmt.auth_headers(key))  # a client's own anthropic-version replaces it
    headers.update(extra)
    return Target(URL(base_url.rstrip("/") + path), headers)


def target(base: Target, client_headers: Mapping[str, str], query: str) -> Target:
    """The upstream URL and headers for one attempt. The client's credentials never pass:
    only the provider headers a client may set (:data:`PASSED_HEADERS`) and its query."""
    headers = dict(base.headers)
    for name in PASSED_HEADERS:
        if name in client_headers:  # (cheaper than ``get`` for the usual absent header)
            headers[name] = client_headers[name]
    url = URL(f"{base.url}?{_ascii(query)}", encoded=True) if query else base.url
    return Target(url, headers)


def _ascii(query: str) -> str:
    """The client's query string as it came (byte for byte), bytes outside ASCII escaped."""
    if query.isascii():
        return query
    return quote(query.encode("utf-8", "surrogateescape"), safe="!#$%&'()*+,/:;=?@[]~")
