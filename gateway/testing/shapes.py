"""Wire shapes of the fake provider: JSON bodies and SSE events of each API.

Everything here is pure: a :class:`FakeAnswer` (what the model "said") goes in, dicts
and :class:`FakeEvent` lists come out. The shapes follow the real APIs closely enough
for the official ``openai`` and ``anthropic`` SDKs, including their stream
accumulators (``client.chat.completions.stream``, ``client.responses.stream``,
``client.messages.stream``).

The shapes live in one module per API format -- :mod:`~gateway.testing.openai_shapes`
(chat completions, legacy completions, embeddings, models),
:mod:`~gateway.testing.responses_shapes`, :mod:`~gateway.testing.anthropic_shapes`,
:mod:`~gateway.testing.gemini_shapes` --
over the shared types of :mod:`~gateway.testing.answer`; this module gathers them under
one name and writes the in-stream error event, which depends on the API.
"""

from __future__ import annotations

from typing import Any

from gateway.testing.answer import FakeAnswer, FakeEvent, FakeToolCall, dump, split_pieces
from gateway.testing.anthropic_shapes import ANTHROPIC_STOP, messages_events, messages_json
from gateway.testing.error_bodies import (
    GEMINI_OVERLOADED,
    OPENAI_SERVER_MESSAGE,
    google_error,
    openai_error,
)
from gateway.testing.openai_shapes import (
    FINGERPRINT,
    chat_events,
    chat_json,
    completion_events,
    completion_json,
    embedding_vector,
    embeddings_json,
    models_json,
)
from gateway.testing.responses_shapes import responses_events, responses_json

# --- in-stream errors ----------------------------------------------------------------


def stream_error_event(api: str, payload: dict[str, Any] | None, sequence_number: int) -> FakeEvent:
    """The API's own in-stream error event (see :class:`~gateway.testing.ErrorEventAfter`)."""
    if api == "gemini":
        # Gemini ends a 200 stream that fails part-way with an event whose data is Google's
        # error object (https://github.com/diegosouzapw/OmniRoute/issues/4177)
        return FakeEvent(dump(payload or google_error(503, "UNAVAILABLE", GEMINI_OVERLOADED)))
    if api == "messages":
        data = payload or {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
        }
        return FakeEvent(dump(data), event="error")
    error = openai_error(OPENAI_SERVER_MESSAGE, "server_error", "server_error")["error"]
    if api == "responses":
        data = payload or {"type": "error", "sequence_number": sequence_number, "error": error}
        return FakeEvent(dump(data), event="error")
    return FakeEvent(dump(payload or {"error": error}))


__all__ = [
    "ANTHROPIC_STOP",
    "FINGERPRINT",
    "FakeAnswer",
    "FakeEvent",
    "FakeToolCall",
    "chat_events",
    "chat_json",
    "completion_events",
    "completion_json",
    "embedding_vector",
    "embeddings_json",
    "messages_events",
    "messages_json",
    "models_json",
    "responses_events",
    "responses_json",
    "split_pieces",
    "stream_error_event",
]
