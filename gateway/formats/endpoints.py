"""The client endpoints, each with the format of its bodies: where a request enters and
which :class:`~gateway.formats.Format` reads it. How a provider is reached on one is
:mod:`gateway.providers`'."""

from __future__ import annotations

import enum

from gateway import formats
from gateway.formats import Format


class Endpoint(enum.StrEnum):
    chat = "/v1/chat/completions"
    responses = "/v1/responses"
    completions = "/v1/completions"
    embeddings = "/v1/embeddings"
    messages = "/v1/messages"

    #: The endpoint's format: how its bodies hold a conversation and its answer, how its
    #: errors and stream events look (legacy completions and embeddings: chat's). A plain
    #: attribute, set below (a property costs a call on every request).
    fmt: Format
    #: Where a streamed choice of this endpoint holds its text: ``content`` of its
    #: ``delta`` (chat), or ``text`` of the choice itself (legacy completions).
    text_key: str
    #: An answer of this endpoint can be continued or resumed (chat, Messages, Responses).
    #: A plain attribute too, set below.
    continuable: bool


_CONTINUABLE = frozenset({Endpoint.chat, Endpoint.messages, Endpoint.responses})
for _ep in Endpoint:
    _ep.fmt = formats.of_path(_ep.value)
    _ep.text_key = "content"
    _ep.continuable = _ep in _CONTINUABLE
Endpoint.completions.text_key = "text"


def endpoint_of(fmt: Format) -> Endpoint:
    """The endpoint a request in ``fmt`` is sent to (its conversation endpoint)."""
    return ENDPOINT_OF[fmt.paths[0]]


#: The endpoint of each path (a dict lookup: ``Endpoint(path)`` is slow).
ENDPOINT_OF: dict[str, Endpoint] = {ep.value: ep for ep in Endpoint}
