"""structlog configuration: one JSON line per event, secrets redacted before rendering."""

from __future__ import annotations

import logging
import sys
import time
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


class ClientProtocolErrors(logging.Filter):
    """aiohttp logs a malformed request (bad request line, header too long, invalid bytes)
    as ``Error handling request`` at ERROR with a traceback and the offending bytes, which
    may hold the start of an ``Authorization`` header. Such a request is the client's
    fault and aiohttp already answered 400: keep one WARNING line naming the error class,
    without the bytes or the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and _is_client_protocol_error(exc):
            record.msg = "bad_http_request"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.error = type(exc).__name__
            record.status = getattr(exc, "code", 400)
        return True


def _is_client_protocol_error(exc: BaseException) -> bool:
    from aiohttp import http_exceptions

    return isinstance(exc, http_exceptions.HttpProcessingError)


class _Timestamp:
    """ISO-8601 UTC timestamps, formatted once per second (structlog's TimeStamper is slow)."""

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def __call__(
        self, _: Any, __: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._second = second
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        event["timestamp"] = f"{self._prefix}.{int((now - second) * 1e6):06d}Z"
        return event


def _orjson_dumps(obj: Any, default: Any = None) -> bytes:
    return orjson.dumps(obj, default=default or str)


def configure(level: str = "info", fmt: str | None = None) -> None:
    """Configure structlog for the process. ``fmt`` None: console on a TTY, JSON otherwise."""
    if fmt is None:
        fmt = "console" if sys.stdout.isatty() else "json"
    processors: list[Any] = [structlog.processors.add_log_level, _Timestamp(), redact]
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(serializer=_orjson_dumps)
        factory: Any = structlog.BytesLoggerFactory()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        factory = structlog.PrintLoggerFactory()
    processors.append(renderer)
    _route_stdlib(level, renderer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )


def _route_stdlib(level: str, renderer: Any) -> None:
    """Libraries' stdlib log records (aiohttp, asyncio) as the same lines, on stderr, redacted."""
    formatter = structlog.stdlib.ProcessorFormatter(
        processors=[
            _stdlib_extra,
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            redact,
            renderer
            if not isinstance(renderer, structlog.processors.JSONRenderer)
            else structlog.processors.JSONRenderer(),
        ],
        foreign_pre_chain=[
            structlog.stdlib.add_logger_name,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_gateway", False)]:
        root.removeHandler(old)
    handler._gateway = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(max(getattr(logging, level.upper()), logging.INFO))
    quiet_client_protocol_errors()


def quiet_client_protocol_errors() -> None:
    """Install :class:`ClientProtocolErrors` on aiohttp's server logger (idempotent)."""
    server = logging.getLogger("aiohttp.server")
    if _PROTOCOL_FILTER not in server.filters:
        server.addFilter(_PROTOCOL_FILTER)


_PROTOCOL_FILTER = ClientProtocolErrors()


def _stdlib_extra(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    record = event.get("_record")
    for name in ("error", "status"):
        if record is not None and hasattr(record, name):
            event[name] = getattr(record, name)
    return event
