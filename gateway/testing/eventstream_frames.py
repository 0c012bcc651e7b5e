"""AWS event-stream frames, as Bedrock sends them, for tests and the fake Bedrock.

A frame (an event-stream *message*) is a prelude (total length, headers length, both
big-endian uint32, then the CRC32 of those 8 bytes), the headers (each a name of one
length byte, a type byte, 7 for a string, and a value of two length bytes), the payload,
and the CRC32 of everything before it. Bedrock's frames carry string headers only:

- :func:`chunk_frame`: an ``InvokeModelWithResponseStream`` ``chunk`` event, whose JSON
  payload wraps the model's own stream event in base64 (``{"bytes": ..., "p": ...}``;
  ``p`` is the padding Bedrock adds so that a frame's length does not tell its content);
- :func:`event_frame`: a ``ConverseStream`` event (``messageStart``,
  ``contentBlockDelta``, ...) whose payload is the event's JSON;
- :func:`exception_frame`: a modelled exception in the middle of a stream
  (``throttlingException``, ``modelStreamErrorException``, ...), payload ``{"message": M}``;
- :func:`error_frame`: an ``error`` message, whose code and message are headers.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

#: A padding value of the kind Bedrock sends (letters and digits, varying in length).
PADDING = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

_STRING = 7


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string ``headers`` and ``payload``, both CRCs right."""
    parts = []
    for name, value in headers.items():
        n, v = name.encode(), value.encode()
        parts.append(struct.pack(">B", len(n)) + n + struct.pack(">BH", _STRING, len(v)) + v)
    head = b"".join(parts)
    prelude = struct.pack(">II", 12 + len(head) + len(payload) + 4, len(head))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + head + payload
    return message + struct.pack(">I", zlib.crc32(message))


def _json(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def _padded(payload: dict[str, Any], padding: str | None) -> dict[str, Any]:
    return payload if padding is None else {**payload, "p": padding}


def chunk_frame(event: dict[str, Any], padding: str | None = PADDING[:12]) -> bytes:
    """An ``InvokeModelWithResponseStream`` chunk carrying the stream event ``event``."""
    inner = base64.b64encode(_json(event)).decode()
    payload = _padded({"bytes": inner}, padding)
    return frame(_event_headers("chunk"), _json(payload))


def event_frame(event_type: str, payload: dict[str, Any], padding: str | None = None) -> bytes:
    """A ``ConverseStream`` event ``event_type`` (``contentBlockDelta``, ...) of ``payload``."""
    return frame(_event_headers(event_type), _json(_padded(payload, padding)))


def exception_frame(exception_type: str, message: str) -> bytes:
    """A modelled exception ``exception_type`` (as AWS spells it: ``throttlingException``)."""
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return frame(headers, _json({"message": message}))


def error_frame(code: str, message: str) -> bytes:
    """An ``error`` message: its code and message are headers, its payload is empty."""
    headers = {":error-code": code, ":error-message": message, ":message-type": "error"}
    return frame(headers, b"")


def _event_headers(event_type: str) -> dict[str, str]:
    return {
        ":event-type": event_type,
        ":content-type": "application/json",
        ":message-type": "event",
    }


__all__ = ["PADDING", "chunk_frame", "error_frame", "event_frame", "exception_frame", "frame"]
