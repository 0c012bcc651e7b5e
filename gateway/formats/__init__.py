"""Wire formats: one :class:`Format` object per format holds that format's rules.

A format is how a body carries a conversation and its answer: OpenAI chat completions
(:data:`CHAT`, also the legacy completions and embeddings endpoints), Anthropic Messages
(:data:`MESSAGES`), OpenAI Responses (:data:`RESPONSES`) and Amazon Bedrock's Converse
(:data:`CONVERSE`: spoken to providers only, no client calls it) and Google's Gemini API
(:data:`GEMINI`: spoken to providers only so far). Each object says where
its text, tool calls, stop reason and usage live, how a cut (an answer stopped at the output
limit) shows, which fields cap the output, how its errors and in-band stream errors look,
which client paths it serves and how a provider speaking it takes a key; and, in the
format's ``*_stream`` module (a mixin of its class), how the client's stream is read and
a resumed stream spliced into it.

Everything outside this package and :mod:`gateway.translate` asks the object
(``fmt.cut_at_length(answer)``, ``fmt.entries_key``); nothing branches on a format's
name. An endpoint carries its format (:attr:`gateway.formats.endpoints.Endpoint.fmt`), a
deployment the formats it speaks (resolved from the policy's ``api`` and ``upstream_api``
when the policy set is built). Adding a format is one module here defining a
:class:`Format` subclass (with its stream rules when clients call it directly), registered
below, plus its translation (docs/architecture.md).
Pure: no I/O.
"""

from __future__ import annotations

from gateway.formats.base import Format
from gateway.formats.chat import CHAT
from gateway.formats.converse import CONVERSE
from gateway.formats.gemini import GEMINI
from gateway.formats.messages import MESSAGES
from gateway.formats.responses import RESPONSES

__all__ = [
    "CHAT", "CONVERSE", "FORMATS", "GEMINI", "MESSAGES", "RESPONSES", "Format", "by_name",
    "of_path", "of_provider", "register",
]  # fmt: skip

#: Every format the gateway knows, by name, in the order registered.
FORMATS: dict[str, Format] = {}

#: The format of a path no format serves (``/v1/models``, an unknown one): its errors.
DEFAULT = CHAT


def register(fmt: Format) -> Format:
    """Make ``fmt`` known (to :func:`by_name`, :func:`of_path`, :func:`of_provider`)."""
    if fmt.name in FORMATS and FORMATS[fmt.name] is not fmt:
        raise ValueError(f"a format named {fmt.name!r} is registered already")
    FORMATS[fmt.name] = fmt
    return fmt


def by_name(name: str) -> Format:
    """The format called ``name``; ``ValueError`` names the known ones."""
    fmt = FORMATS.get(name)
    if fmt is None:
        raise ValueError(f"unknown format {name!r}: expected one of {', '.join(FORMATS)}")
    return fmt


def of_path(path: str) -> Format:
    """The format of a client path (``/v1/messages/count_tokens`` is Anthropic's), or
    :data:`DEFAULT`: the one whose errors a path no format serves answers with."""
    for fmt in FORMATS.values():
        if any(path.startswith(p) for p in fmt.paths):
            return fmt
    return DEFAULT


def of_provider(api: str) -> tuple[Format, ...]:
    """The formats a provider kind (the policy's ``api``) speaks natively; the built-in
    simulated provider (``sim``) speaks every format a client calls (those with paths)."""
    if api == "sim":
        return tuple(f for f in FORMATS.values() if f.paths)
    return tuple(f for f in FORMATS.values() if f.provider_api == api)


for _fmt in (CHAT, RESPONSES, MESSAGES, CONVERSE, GEMINI):
    register(_fmt)
