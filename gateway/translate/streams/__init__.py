"""Streams between the client APIs, translated event by event (docs/translation.md,
Streams; the stream rules of docs/recovery.md, Streams, hold for them).

``StreamTranslator(source, target, model=...)`` is fed one complete upstream SSE event at
a time (as framed by :class:`gateway.formats.sse.Splitter`) and returns the client-format
events it makes complete; :meth:`~StreamTranslator.finish` returns what is still owed
when the upstream body ended after its final event. Formats: ``openai`` (chat
completions chunks), ``anthropic`` (Messages events), ``responses`` (Responses events),
``gemini`` (streamGenerateContent chunks, read_gemini.py and write_gemini.py);
``converse`` (Bedrock ConverseStream events, read_converse.py) is a source only.
A reader per source format (read.py) calls a writer per target format (write.py,
write_responses.py, write_gemini.py): no intermediate objects, so a text delta costs one
``orjson.loads`` and one ``dumps``.
Nothing buffers the answer, except that a Responses client's last event repeats the
whole response object, so its writer keeps the output items' text (and a call's
arguments) until then, and a Gemini client gets each tool call whole, so its writer
keeps a call's arguments until the call's block ends.

What maps to what (chat | anthropic | responses | gemini)::

    start       first chunk (id, created)
                | message_start (id, input usage)
                | response.created (id, created_at) + response.in_progress
                | nothing (the first piece's chunk; responseId, modelVersion on each)
    text        delta.content
                | text block, text_delta
                | message item, output_text part, output_text.delta
                | a chunk with a text part
    reasoning   delta.reasoning_content (read also: delta.reasoning)
                | thinking block, thinking_delta
                | reasoning item, summary_text part, reasoning_summary_text.delta
                  (read also: reasoning_text.delta)
                | a chunk with a "thought": true text part
    signature   dropped | signature_delta | dropped | dropped
    refusal     delta.refusal | text | message item, refusal part, refusal.delta | text
    tool call   tool_calls[i] with index, id, function.name, function.arguments deltas
                | a tool_use block per call, input_json_delta
                | a function_call item per call, function_call_arguments.delta
                | a chunk with a whole functionCall part (id, name, args) at the call's
                  block end, its thoughtSignature from the id (ir.split_id)
    stop        finish_reason | message_delta.stop_reason | completed / incomplete with
                incomplete_details.reason | finishReason (all via stops.py)
    usage       usage chunk, when the client asked (include_usage)
                | message_start input tokens, message_delta totals
                | response.completed usage
                | the last chunk's usageMetadata (all via usage.py)
    end         finish chunk [+ usage chunk] + data: [DONE]
                | message_delta + message_stop
                | response.completed (or response.incomplete) with the whole response
                | a chunk with an empty text part, finishReason and usageMetadata
    error       data: {"error": {...}} | event: error | event: error + response.failed
                | data: {"error": {"code", "message", "status"}} (Google's)
    keepalive   ": ..." comments pass through; an Anthropic ping becomes ": ping" (a
                ping for Anthropic clients); a Gemini client gets neither (an SSE
                comment breaks google-genai's reader: write_gemini.py)

Rules, one per field:

- ids: the client's id is the upstream's with the target's prefix (``chatcmpl-``,
  ``msg_``, ``resp_``, none for Gemini's ``responseId``) in place of the source's; item
  ids derive from it (``msg_<id>``, ``rs_<id>_<n>``, ``fc_<call id>``). Tool call ids are
  kept (made Anthropic-safe for Anthropic clients; a Gemini client gets the id without
  its thought signature, which goes in the part's ``thoughtSignature``). ``model`` is the
  public model name given. ``created`` comes from the upstream when it has one (chat,
  Responses), else the translator's start time.
- blocks: one at a time on the client side; a piece of another kind closes the open block.
  A chat tool-call delta for a call whose block was already closed (interleaved parallel
  calls) is still sent to that call's index (SDKs accumulate by index). A Gemini client
  gets a call whole when its block ends (chat's calls, which have no end, at the end).
- stop: an answer with tool calls whose upstream said ``stop`` / ``end_turn`` stops with
  ``tool_calls`` / ``tool_use`` / (Responses) ``completed`` so that the client runs them.
- chat: only choice 0 is read (``n`` > 1 has no equivalent); ``logprobs`` are dropped. The
  finish chunk completes the stream (``final_seen``); the answer is closed on the usage
  chunk that follows, on ``[DONE]``, or at :meth:`finish`.
- anthropic: ``redacted_thinking``, server tool blocks (``server_tool_use``,
  ``*_tool_result``) and ``citations_delta`` are dropped; ``stop_sequence`` is kept for
  Anthropic clients only.
- responses: built-in tool items (web search, file search, code interpreter, ...),
  annotations and reasoning ``encrypted_content`` are dropped; several summary parts are
  joined with a blank line. A call's arguments sent only in its ``.done`` events are
  passed on then; an answer whose output comes only in ``response.completed`` is replayed.
- usage: missing counts are zeros (chat usage chunk, Anthropic events) or null (Responses).
- undecodable events (not JSON, not an object, a field of the wrong type) are dropped and
  counted (``malformed``), never an end; events of a type with no equivalent (``ping``
  aside) are dropped without counting.
- reasoning without a signature (from chat or Responses) reaches Anthropic clients as a
  thinking block with ``signature: ""``; a provider may refuse it if sent back.
- same format on both sides works but normalises (the rules above apply): a stream whose
  format matches the client's is better relayed as it is, as the gateway does with a
  request whose format matches its model's (docs/translation.md).
- after an error event (translated with ``UpstreamError``, see errors.py) or the client's
  final event, upstream events are dropped (comments still pass, but to Gemini clients).
"""

from __future__ import annotations

import time

import orjson

from gateway.formats.usage import Usage
from gateway.translate.ir import Names
from gateway.translate.streams.read import READERS, Reader
from gateway.translate.streams.read_converse import ConverseReader
from gateway.translate.streams.read_gemini import GeminiReader
from gateway.translate.streams.write import AnthropicWriter, ChatWriter, Writer
from gateway.translate.streams.write_gemini import GeminiWriter
from gateway.translate.streams.write_responses import ResponsesWriter

WRITERS: dict[str, type[Writer]] = {
    "chat": ChatWriter,
    "messages": AnthropicWriter,
    "responses": ResponsesWriter,
    "gemini": GeminiWriter,
}
#: The formats a stream is read from: the clients', Bedrock Converse and Gemini.
SOURCES: dict[str, type[Reader]] = {**READERS, "converse": ConverseReader, "gemini": GeminiReader}
#: The formats a stream is written in: the clients' and Gemini.
FORMATS = frozenset(WRITERS)
#: The formats whose clients take SSE comments (``: ...``); Google's SDKs do not.
_COMMENTS = frozenset({"chat", "messages", "responses"})
_DECODE_ERRORS = (KeyError, TypeError, AttributeError, ValueError, IndexError)


def _name(event: bytes) -> bytes:
    """The name of one SSE event (its ``event:`` line), or b""."""
    if event[:6] == b"event:":
        start = 6
    else:
        start = event.find(b"\nevent:") + 7
        if start == 6:
            return b""
    return event[start : event.find(b"\n", start)].strip()


def _payload(event: bytes) -> bytes | None:
    """The data of one SSE event (its ``data:`` lines joined); None when it has none."""
    if event[:6] == b"data: " and event.find(b"\n") == len(event) - 2:
        return event[6:-2]  # chat: one data line
    i = event.find(b"\ndata: ")
    if i > 0 and event.find(b"\n", i + 1) == len(event) - 2:
        return event[i + 7 : -2]  # "event: ..." and one data line
    lines = [ln[5:].strip() for ln in event.split(b"\n") if ln.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


class StreamTranslator:
    """One upstream stream of ``source`` format -> the client's stream of ``target`` format.

    ``feed(event)`` takes one complete upstream SSE event (bytes ending in a blank line,
    possibly a ``: comment``, passed on as it is but to a Gemini client, or ``data: [DONE]``)
    and returns zero or more complete client events. ``finish()`` is called when the
    upstream body ended: when its final event came it returns what still closes the
    client's stream (nothing if that was sent already); when it did not, nothing, and the
    caller ends the stream with an error event.

    ``final_seen``: the upstream's final event arrived (the answer is complete).
    ``done``: the client's stream is closed (final or error event sent).
    ``usage``: the neutral :class:`Usage` so far, or None. ``malformed``: events dropped
    as undecodable.
    """

    __slots__ = ("_comments", "_named", "_r", "_w", "malformed", "source", "target")

    def __init__(
        self,
        source: str,
        target: str,
        *,
        model: str,
        include_usage: bool = True,
        names: Names | None = None,
    ):
        if source not in SOURCES or target not in FORMATS:
            raise ValueError(f"unknown stream format: {source} -> {target}")
        self.source = source
        self.target = target
        self._w = WRITERS[target](model, include_usage, int(time.time()))
        if names and isinstance(self._w, ResponsesWriter):
            self._w.names = names  # calls of namespaced functions named in their namespace
        self._r = SOURCES[source](self._w)
        self._named = self._r.named
        self._comments = target in _COMMENTS
        self.malformed = 0

    @property
    def final_seen(self) -> bool:
        return self._r.final

    @property
    def done(self) -> bool:
        return self._w.done

    @property
    def usage(self) -> Usage | None:
        self._r.settle()
        return self._w.usage

    def feed(self, event: bytes) -> list[bytes]:
        if event[:1] == b":":
            return [event] if self._comments else []
        w = self._w
        if w.done:
            return []
        data = _payload(event)
        if data is None:  # event:, id: or retry: lines only
            return []
        out: list[bytes] = []
        w.out = out
        if data == b"[DONE]":
            self._r.done_marker()
            return out
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.malformed += 1
            return out
        if type(obj) is not dict:
            self.malformed += 1
            return out
        try:
            if self._named:
                self._r.feed_named(_name(event), obj)
            else:
                self._r.feed(obj)
        except _DECODE_ERRORS:  # a field of an unexpected type: what was made still holds
            self.malformed += 1
        return out

    def finish(self) -> list[bytes]:
        w = self._w
        if w.done or not self._r.final:
            return []
        out: list[bytes] = []
        w.out = out
        self._r.settle()
        w.end()
        return out


__all__ = ["FORMATS", "SOURCES", "WRITERS", "StreamTranslator"]
