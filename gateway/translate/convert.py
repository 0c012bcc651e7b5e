"""Any client on any model (docs/translation.md): requests, answers, streams and errors
translated between OpenAI chat completions (``openai``), OpenAI Responses (``responses``) and
Anthropic Messages (``anthropic``), and from every one of them to Bedrock Converse
(``converse``) and Gemini (``gemini``), upstream formats only: requests are written in
them, answers, streams and errors read from them. Pure: no I/O. The functions here take
:class:`~gateway.formats.Format` objects; inside, the translators are keyed by the
format's name.

The attempter (:mod:`gateway.live.attempter`) is the only user: when the deployment an attempt
goes to speaks another format than the client's endpoint, it sends
:func:`request`'s body, and turns what comes back into the client's format with
:func:`answer`, :func:`error` or a :class:`TranslatingSplitter` that translates the stream event by
event. Everything else (compaction, continuation, resume, the relay, the transcript)
works on the client's format, before the request is translated and after the answer is;
so a fallback chain may cross formats inside one request, streaming included.

The rules per field are in :mod:`gateway.translate.requests` (requests),
:mod:`gateway.translate.streams` (stream events) and :mod:`gateway.translate.errors`;
docs/translation.md has the tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.errors import Malformed
from gateway.formats import Format, sse
from gateway.formats.usage import Usage
from gateway.translate import answers, request_check, requests
from gateway.translate.converse_answers import read_converse, write_converse
from gateway.translate.errors import translate_error
from gateway.translate.gemini_answers import read_gemini, write_gemini
from gateway.translate.ir import Answer, Caps, Dropped, Names
from gateway.translate.streams import StreamTranslator

__all__ = [
    "Names", "TranslatingSplitter", "answer", "check", "error", "request", "tool_names",
]  # fmt: skip

_READ: dict[str, Callable[[dict[str, Any]], Answer]] = {
    "chat": answers.read_chat,
    "messages": answers.read_anthropic,
    "responses": answers.read_responses,
    "converse": read_converse,
    "gemini": read_gemini,
}
_WRITE: dict[str, Callable[[Answer], dict[str, Any]]] = {
    "chat": answers.write_chat,
    "messages": answers.write_anthropic,
    "responses": answers.write_responses,
    "converse": write_converse,  # what a provider would send: simulate's summary call
    "gemini": write_gemini,
}


def request(
    body: dict[str, Any],
    source: Format,
    target: Format,
    *,
    max_output_tokens: int | None,
    reasoning: bool | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The client's body (format ``source``, sound by :func:`check`) in the provider's
    format ``target``, and the names of the fields dropped on the way. Raises
    :class:`Refused` (a 400 naming the field) for a field whose loss would change what the
    answer means. ``max_output_tokens`` and ``reasoning`` are the model's (policy
    ``models.*``): its output cap, and whether it takes reasoning settings (None: they are
    sent and the provider judges; False: dropped).

    A streamed request to a chat completions provider asks for the usage chunk, so that
    an Anthropic or Responses client gets its token counts.
    """
    drops = Dropped()
    conv = requests.READERS[source.name](body, drops)
    out = requests.write(conv, target.name, drops, max_output_tokens, Caps(reasoning=reasoning))
    if target.usage_if_asked and out.get("stream") is True:
        out["stream_options"] = {**(out.get("stream_options") or {}), "include_usage": True}
    return out, drops.names


def answer(
    data: dict[str, Any], source: Format, target: Format, model: str, names: Names | None = None
) -> dict[str, Any]:
    """A JSON answer of the provider (format ``source``) as the client's (``target``); its
    ``model`` is the public name of the model that answered. ``names``: the request's
    namespaced functions (:func:`tool_names`), whose calls a Responses client gets back in
    their namespace."""
    try:
        a = _READ[source.name](data)
        a.model = model
        if target.name == "responses":
            return answers.write_responses(a, names)
        return _WRITE[target.name](a)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError) as e:
        raise Malformed(f"the provider's answer is not a {source.name} answer ({e})") from None


def check(body: dict[str, Any], source: Format) -> None:
    """Raise a 400 naming the field when ``body`` (format ``source``) has a field the
    translators read of the wrong type (:func:`gateway.translate.request_check.check`)."""
    request_check.check(body, source.name)


def tool_names(body: dict[str, Any], source: Format) -> Names:
    """The functions of a Responses client's namespace tools, as the other formats call
    them -> (namespace, name); empty for every other request (no cost)."""
    if source.name != "responses":
        return {}
    return requests.responses.namespaces(body.get("tools"))


def error(status: int, body: bytes, source: Format, target: Format) -> bytes:
    """An error body of the provider (``source``) in the client's format (``target``): the
    status is kept; the provider's message and its meaning stay recognisable."""
    return translate_error(status, body, source.name, target.name)


class TranslatingSplitter:
    """:class:`gateway.formats.sse.Splitter` for a stream of another format: whole upstream
    events in, the client's events out (:class:`StreamTranslator`).

    An upstream in-band error event is handed on as the provider sent it: it is classified
    as such (never written to the client as is: the relay ends the stream with its own
    error event in the client's format, or the attempt is retried).
    """

    __slots__ = ("_split", "_tr")

    def __init__(
        self,
        source: Format,
        target: Format,
        model: str,
        include_usage: bool,
        names: Names | None = None,
    ) -> None:
        self._split = sse.Splitter()
        self._tr = StreamTranslator(
            source.name, target.name, model=model, include_usage=include_usage, names=names
        )

    def feed(self, piece: bytes) -> list[bytes]:
        out: list[bytes] = []
        tr = self._tr
        for raw in self._split.feed(piece):
            if b"error" in raw and sse.is_error_event(raw):
                out.append(raw)
            else:
                out.extend(tr.feed(raw))
        return out

    def close(self) -> list[bytes]:
        """What still closes the client's stream when the upstream body ended."""
        return self._tr.finish()

    @property
    def pending(self) -> bytes:
        return self._split.pending

    @property
    def malformed(self) -> int:
        """Undecodable upstream events dropped so far (the relay counts them)."""
        return self._tr.malformed

    @property
    def usage(self) -> Usage | None:
        """The counts the provider's events reported so far (None: none yet), whether or
        not the client's events carry them yet."""
        return self._tr.usage
