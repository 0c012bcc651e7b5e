"""Wire formats of the providers (no sockets): where a request goes and with which headers.

``api: openai``     base_url is the URL that ``/chat/completions`` etc. follow.
``api: anthropic``  base_url is the root; the gateway adds ``/v1/messages``.
``api: sim``        the built-in simulated provider; it speaks both formats.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote

from yarl import URL

from gateway.policy.schema import Provider


class Endpoint(enum.StrEnum):
    chat = "/v1/chat/completions"
    responses = "/v1/responses"
    completions = "/v1/completions"
    embeddings = "/v1/embeddings"
    messages = "/v1/messages"

    @property
    def client_format(self) -> str:
        """The error and stream dialect of this endpoint: ``openai`` or ``anthropic``."""
        return "anthropic" if self is Endpoint.messages else "openai"

    @property
    def wire(self) -> str:
        """Which upstream API format this endpoint needs."""
        return "anthropic" if self is Endpoint.messages else "openai"


# Provider headers a client may set for the provider; everything else stays at the gateway.
PASSED_HEADERS = ("anthropic-version", "anthropic-beta", "openai-beta")
_OPENAI_SUFFIX = {
    Endpoint.chat: "/chat/completions",
    Endpoint.responses: "/responses",
    Endpoint.completions: "/completions",
    Endpoint.embeddings: "/embeddings",
}


@dataclass(frozen=True, slots=True)
class Target:
    url: URL
    headers: dict[str, str]


def speaks(provider: Provider, endpoint: Endpoint) -> bool:
    return provider.api == "sim" or provider.api == endpoint.wire


@lru_cache(maxsize=1024)
def _base_target(
    api: str, base_url: str, extra: tuple[tuple[str, str], ...], endpoint: Endpoint, key: str | None
) -> Target:
    # identity: answers are small and the hop usually near; a provider (or a middlebox)
    # that compresses anyway is decoded by the client (gateway/upstream.py).
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    if endpoint is Endpoint.messages:
        url = URL(base_url.rstrip("/") + "/v1/messages")
        if key:
            headers["x-api-key"] = key
    else:
        base = base_url.rstrip("/")
        if api == "sim":
            base += "/v1"
        url = URL(base + _OPENAI_SUFFIX[endpoint])
        if key:
            headers["authorization"] = f"Bearer {key}"
    headers.update({k.lower(): v for k, v in extra})
    return Target(url, headers)


def target(
    provider: Provider,
    endpoint: Endpoint,
    client_headers: Mapping[str, str],
    query: str,
    base_url: str | None = None,
) -> Target:
    """The upstream URL and headers for one attempt. The client's credentials never pass.

    ``base_url`` overrides the provider's (the built-in ``sim`` provider's address is only
    known once it runs).
    """
    key = os.environ.get(provider.api_key_env) if provider.api_key_env else None
    extra = tuple(provider.headers.items())
    base = _base_target(provider.api, base_url or provider.base_url, extra, endpoint, key)
    headers = dict(base.headers)
    for name in PASSED_HEADERS:
        value = client_headers.get(name)
        if value is not None:
            headers[name] = value
    if endpoint is Endpoint.messages and "anthropic-version" not in headers:
        headers["anthropic-version"] = "2023-06-01"
    url = URL(f"{base.url}?{_ascii(query)}", encoded=True) if query else base.url
    return Target(url, headers)


def _ascii(query: str) -> str:
    """The client's query string as it came (byte for byte), bytes outside ASCII escaped."""
    if query.isascii():
        return query
    return quote(query.encode("utf-8", "surrogateescape"), safe="!#$%&'()*+,/:;=?@[]~")
