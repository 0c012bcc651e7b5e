"""The :class:`Format` type: one wire format's rules, asked by everything that reads or
writes that format's bodies (see :mod:`gateway.formats`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from gateway.formats.parts import plain_text, role

if TYPE_CHECKING:
    from gateway.formats.event_kinds import Kind
    from gateway.formats.overlap import Diverged, Out
    from gateway.formats.splice import Splice
    from gateway.formats.transcript import Transcript
    from gateway.formats.usage import Usage


class ErrorLike(Protocol):
    """What a format renders as its error body (:class:`gateway.errors.GatewayError`)."""

    status: int

    def openai_body(self) -> dict[str, object]: ...
    def anthropic_body(self) -> dict[str, object]: ...


class Format:
    """One wire format: where its bodies keep what the gateway reads and writes.

    A subclass per format sets the attributes and overrides the methods whose rule differs;
    one instance of it is registered (:func:`gateway.formats.register`). Everything is
    pure and read-only over the bodies given.
    """

    #: The format's one name: the key of the translators (docs/translation.md), a model's
    #: ``upstream_api`` value, and what messages and the simulator's trace call it.
    name: str = ""
    #: The ``api:`` of the provider kind that speaks it natively (``sim`` speaks them all).
    provider_api: str = ""
    #: The client paths it serves; the first is its conversation endpoint, where a request
    #: translated into this format goes.
    paths: tuple[str, ...] = ()
    #: What such a provider's ``base_url`` already ends with (the gateway adds the rest).
    base_path: str = ""
    #: The body key holding the conversation.
    entries_key: str = "messages"
    #: Top-level request keys with model-read text outside the conversation.
    fixed_keys: tuple[str, ...] = ()
    #: Request fields by which a client caps the answer's output tokens.
    output_caps: tuple[str, ...] = ()
    #: The output cap field of a request the gateway writes itself (a summary).
    output_cap: str = "max_tokens"
    #: Roles alternate strictly (user, assistant): a cut lies between a user message and
    #: the assistant one after it, and a note joins the user message before a gap.
    alternating: bool = False
    #: A prefill (a final assistant message) must not end in whitespace: it is trimmed.
    trims_prefill: bool = False
    #: A stream carries usage only when the request asks for it (``stream_options``).
    usage_if_asked: bool = False
    #: The key every stream event carrying usage has: events without it are not looked
    #: at for usage (None: each event is).
    usage_key: str | None = None
    #: The key of a JSON answer's usage block.
    answer_usage_key: str = "usage"
    #: Types of a stream's final event; None: the stream's chunks carry ``choices`` and
    #: ``finish_reason`` (chat completions framing).
    final_events: frozenset[str] | None = None
    #: A stream's events name their type on an ``event:`` line.
    named_events: bool = False
    #: A stream's events carry a ``sequence_number`` that grows by one.
    sequenced: bool = False

    def __repr__(self) -> str:
        return f"<Format {self.name}>"

    # ---- requests ----------------------------------------------------------------

    def auth_headers(self, key: str | None) -> dict[str, str]:
        """The headers that carry a provider key (and any header the format requires)."""
        return {"authorization": f"Bearer {key}"} if key else {}

    def entries(self, body: Mapping[str, Any]) -> list[Any]:
        """The conversation's entries (a new list; the entries themselves are not copied)."""
        value = body.get(self.entries_key)
        return list(value) if isinstance(value, list) else []

    def capped(self, request: Mapping[str, Any]) -> bool:
        """The request sets its own output limit."""
        return any(request.get(name) is not None for name in self.output_caps)

    def requested_output(self, request: Mapping[str, Any]) -> int | None:
        """The output tokens the request caps its answer at (its first cap field holding
        a number), or None."""
        for name in self.output_caps:
            value = request.get(name)
            if isinstance(value, int):
                return value
        return None

    def several_choices(self, request: Mapping[str, Any]) -> bool:
        """The request asks for more than one answer."""
        return False

    def prefill_allowed(self, request: Mapping[str, Any]) -> bool:
        """A final assistant message may be continued by the model."""
        return True

    def text_turn(self, role: str, text: str) -> dict[str, Any]:
        """A conversation entry of ``role`` (``user`` or ``assistant``) holding ``text``:
        what a continuation appends (its prefill, its instruction)."""
        return {"role": role, "content": text}

    def assistant_text(self, entry: Any) -> str | None:
        """The text of ``entry`` when it is an assistant turn (a client's own prefill),
        else None."""
        if isinstance(entry, Mapping) and entry.get("role") == "assistant":
            return plain_text(entry.get("content"))
        return None

    def summary_request(
        self, model: str, instructions: str, prompt: str, max_tokens: int
    ) -> dict[str, Any]:
        """A one-turn, never streamed request: ``instructions`` as the system text."""
        return {
            "model": model,
            "messages": [
                {"role": "system", "content": instructions},
                {"role": "user", "content": prompt},
            ],
            "temperature": 0,
            self.output_cap: max_tokens,
            "stream": False,
        }

    # ---- conversations -----------------------------------------------------------

    def opened_calls(self, entry: Any) -> list[str]:
        """The call ids this entry opens (tool calls waiting for a result)."""
        raise NotImplementedError

    def closed_calls(self, entry: Any) -> list[str]:
        """The call ids this entry answers (tool results)."""
        raise NotImplementedError

    def may_cut(self, before: Any, after: Any) -> bool:
        """The format allows splitting the conversation between these two entries (calls
        aside: :func:`gateway.resilience.conversation.allowed_cuts` checks those). Where
        roles alternate, only between a user message and the assistant one after it."""
        return not self.alternating or (role(before) == "user" and role(after) == "assistant")

    def problems(self, items: Sequence[Any]) -> list[str]:
        """What makes these entries a conversation the provider would reject."""
        raise NotImplementedError

    def transcript_lines(self, entry: Any) -> list[str]:
        """The entry as lines of a plain-text transcript (for a summary request)."""
        raise NotImplementedError

    def snip_results(self, entry: Any, snip: Callable[[Any], Any]) -> Any:
        """The entry with ``snip`` applied to the tool results it holds (a new entry when
        it holds any, else the same)."""
        raise NotImplementedError

    # ---- answers -----------------------------------------------------------------

    def answer_text(self, response: Mapping[str, Any], sep: str = "") -> str:
        """A JSON answer's text, its text blocks joined with ``sep`` (a continuation
        splices them as one text; a summary keeps them apart with a newline). A part of the
        wrong type is no text."""
        raise NotImplementedError

    def cut_at_length(self, response: Mapping[str, Any]) -> bool:
        """The JSON answer stopped at the output token limit and is not a tool call. An
        answer whose fields have the wrong types is not cut."""
        raise NotImplementedError

    def text_answer(
        self, text: str, *, id: Any, model: Any, created: Any, index: int, item_id: Any
    ) -> dict[str, Any]:
        """A minimal JSON answer holding ``text`` (not finished): what a stream sent so
        far, as :meth:`answer_text` and a continuation read it. ``created``, ``index`` and
        ``item_id``: the stream's creation time, choice index and message item id."""
        raise NotImplementedError

    def merge(self, merged: dict[str, Any], parts: Sequence[Mapping[str, Any]], text: str) -> None:
        """Put the joined ``text`` and the last part's stop reason into ``merged`` (a deep
        copy of the first part)."""
        raise NotImplementedError

    # ---- streams -----------------------------------------------------------------

    def event_cut(self, data: Any) -> bool:
        """A decoded stream event says the answer stopped at the output token limit."""
        raise NotImplementedError

    def answer_usage(self, block: dict[str, Any]) -> Usage:
        """The neutral counts of an answer's usage block (:attr:`answer_usage_key`;
        :mod:`gateway.formats.usage`)."""
        raise NotImplementedError

    def event_usage(self, obj: dict[str, Any], so_far: Usage | None) -> Usage | None:
        """The stream's usage after one decoded event that carries some (None: the event
        carries none); ``so_far``: what the stream's earlier events reported (an Anthropic
        ``message_delta`` updates its ``message_start``). May raise
        ``AttributeError``/``TypeError`` on a field of the wrong type."""
        raise NotImplementedError

    # The client's stream, as :mod:`gateway.formats.transcript` records it and
    # :mod:`gateway.formats.splice` continues it (each format's ``*_stream`` module). These
    # read one decoded event and may raise what a field of the wrong type makes them
    # (:data:`gateway.formats.transcript.UNREADABLE`).

    def stream_read(self, t: Transcript, obj: dict[str, Any], hold: bool = False) -> bool:
        """Record the event the client was sent in ``t``: its ids, text, tool calls and
        whether it ended the answer. ``hold``: an event that :meth:`stream_closes` the
        answer is not recorded but answered True (the relay holds it back)."""
        raise NotImplementedError

    def stream_closes(self, t: Transcript, obj: dict[str, Any]) -> bool:
        """The event ends the answer's text (its stop reason, a closing event)."""
        raise NotImplementedError

    def stream_output(self, obj: dict[str, Any]) -> int:
        """The size of what the model wrote that one event carries (text, reasoning, tool
        calls' names and arguments), in the token estimate's units
        (:func:`~gateway.formats.parts.text_size`): what a stream relayed without a
        transcript counts, to bill a cut stream. Never raises; a field of the wrong type
        counts 0."""
        raise NotImplementedError

    def stream_resumable(self, t: Transcript) -> bool:
        """What the format adds to whether a resumed stream can continue ``t`` (the
        common conditions are the transcript's)."""
        raise NotImplementedError

    def splice_event(self, s: Splice, obj: dict[str, Any], kind: Kind) -> Out | Diverged:
        """What to send the client for one event of the resumed stream ``s`` splices in."""
        raise NotImplementedError

    # ---- errors ------------------------------------------------------------------

    def error_body(self, err: ErrorLike) -> dict[str, object]:
        """The gateway's own error as this format's error body."""
        return err.openai_body()

    def stream_error(
        self, etype: str, message: str, code: str | None = None, response_id: str = ""
    ) -> bytes:
        """The in-band error event of this format's streams, so that a client's SDK raises."""
        err = {"type": etype, "code": code or etype, "message": message, "param": None}
        return b"data: " + orjson.dumps({"error": err}) + b"\n\n"
