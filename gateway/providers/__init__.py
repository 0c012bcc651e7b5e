"""Wire formats of the providers (no sockets): where a request goes and with which headers.

``api: openai``     base_url is the URL that ``/chat/completions`` etc. follow.
``api: anthropic``  base_url is the root; the gateway adds ``/v1/messages``.
``api: sim``        the built-in simulated provider; it speaks both formats.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
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
    def dialect(self) -> str:
        """``openai`` or ``anthropic``: the format of this endpoint's errors and stream
        events, and the format a provider must speak to serve it."""
        return "anthropic" if self is Endpoint.messages else "openai"

    @property
    def shape(self) -> str:
        """How its bodies hold a conversation: ``openai`` (chat messages, also legacy
        completions and embeddings), ``anthropic`` (Messages) or ``responses`` (items);
        what compaction, continuation and the stream transcript read."""
        return _SHAPE.get(self, "openai")

    @property
    def continuable(self) -> bool:
        """An answer of this endpoint can be continued or resumed (chat, Messages, Responses)."""
        return self in _CONTINUABLE


_SHAPE = {Endpoint.messages: "anthropic", Endpoint.responses: "responses"}
_CONTINUABLE = frozenset({Endpoint.chat, Endpoint.messages, Endpoint.responses})


def dialect_of(path: str) -> str:
    """The error format for any path under ``/v1`` (``/v1/messages...`` is Anthropic's)."""
    return "anthropic" if path.startswith("/v1/messages") else "openai"


#: The endpoint of each path (a dict lookup: ``Endpoint(path)`` is slow).
ENDPOINT_OF: dict[str, Endpoint] = {}

# Provider headers a client may set for the provider; everything else stays at the gateway.
PASSED_HEADERS = ("anthropic-version", "anthropic-beta", "openai-beta")
ENDPOINT_OF.update((ep.value, ep) for ep in Endpoint)
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
    """The provider takes the endpoint's bodies as they are (no translation)."""
    return provider.api == "sim" or provider.api == endpoint.dialect


def serves(provider: Provider, endpoint: Endpoint) -> bool:
    """A model of the provider may be called on the endpoint: chat completions, Messages
    and Responses on every provider (translated when its format differs,
    docs/translation.md); legacy completions and embeddings only on OpenAI-format ones."""
    return endpoint.continuable or speaks(provider, endpoint)


@dataclass(frozen=True, slots=True)
class Wiring:
    """How one provider of a policy set is called, resolved once per set: the URL and
    base headers (with the provider's key) per endpoint, the proxy and the TLS setting."""

    targets: Mapping[Endpoint, Target]
    proxy: str | None = None
    tls: Any = True  # aiohttp's ``ssl=``: True, False or an SSLContext


def wire(
    provider: Provider,
    base_url: str,
    key: str | None,
    proxy: str | None = None,
    tls: Any = True,
) -> Wiring:
    """The :class:`Wiring` of ``provider`` at ``base_url`` (the ``sim`` provider's address
    is only known once it runs) with ``key`` from the environment."""
    extra = {k.lower(): v for k, v in provider.headers.items()}
    targets = {
        ep: _base_target(provider.api, base_url, extra, ep, key)
        for ep in Endpoint
        if speaks(provider, ep)
    }
    return Wiring(targets, proxy, tls)


def _base_target(
    api: str, base_url: str, extra: Mapping[str, str], endpoint: Endpoint, key: str | None
) -> Target:
    # identity: answers are small and the hop usually near; a provider (or a middlebox)
    # that compresses anyway is decoded by the client (gateway/upstream.py).
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    if endpoint is Endpoint.messages:
        url = URL(base_url.rstrip("/") + "/v1/messages")
        if key:
            headers["x-api-key"] = key
        headers["anthropic-version"] = "2023-06-01"  # a client's own version replaces it
    else:
        base = base_url.rstrip("/")
        if api == "sim":
            base += "/v1"
        url = URL(base + _OPENAI_SUFFIX[endpoint])
        if key:
            headers["authorization"] = f"Bearer {key}"
    headers.update(extra)
    return Target(url, headers)


def target(base: Target, client_headers: Mapping[str, str], query: str) -> Target:
    """The upstream URL and headers for one attempt. The client's credentials never pass:
    only the provider headers a client may set (:data:`PASSED_HEADERS`) and its query."""
    headers = dict(base.headers)
    for name in PASSED_HEADERS:
        value = client_headers.get(name)
        if value is not None:
            headers[name] = value
    url = URL(f"{base.url}?{_ascii(query)}", encoded=True) if query else base.url
    return Target(url, headers)


def _ascii(query: str) -> str:
    """The client's query string as it came (byte for byte), bytes outside ASCII escaped."""
    if query.isascii():
        return query
    return quote(query.encode("utf-8", "surrogateescape"), safe="!#$%&'()*+,/:;=?@[]~")
