"""structlog configuration: one JSON line per event, secrets redacted before rendering."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import orjson
import structlog

# Field names whose values must never reach a log line, whatever the caller passed.
_SECRET_FIELDS = frozenset(
    {"authorization", "api_key", "x-api-key", "key", "password", "token", "messages", "prompt",
     "input", "content", "system", "body"}
)  # fmt: skip


def redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Replace the value of any secret-bearing field with a marker (defence in depth)."""
    for name in _SECRET_FIELDS.intersection(event):
        event[name] = "[redacted]"
    return event


def _orjson_dumps(obj: Any, default: Any = None) -> bytes:
    return orjson.dumps(obj, default=default or str)


def configure(level: str = "info", fmt: str | None = None) -> None:
    """Configure structlog for the process. ``fmt`` None: console on a TTY, JSON otherwise."""
    if fmt is None:
        fmt = "console" if sys.stdout.isatty() else "json"
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact,
    ]
    if fmt == "json":
        processors.append(structlog.processors.JSONRenderer(serializer=_orjson_dumps))
        factory: Any = structlog.BytesLoggerFactory()
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=False))
        factory = structlog.PrintLoggerFactory()
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
