"""structlog configuration: one JSON line per event, secrets redacted before rendering.

The access log (``request_completed``, one per request) has a fast path for the JSON
format: :class:`FastJson` writes the line that structlog's chain would write (same fields
in the same order, then ``event``, ``level``, ``timestamp``; same sink) without the chain,
at a fraction of its cost. It is used only while the chain :func:`configure` installed is
still structlog's configuration (what it passed to ``structlog.configure``, compared with
structlog's public ``structlog.get_config()``): under ``structlog.testing.capture_logs`` or
after another ``structlog.configure`` the event goes through structlog as before.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import sys
import time
from collections.abc import MutableMapping
from typing import IO, Any

import orjson
import structlog

# The fields whose values never reach a log line, whatever the caller passed: secrets, by
# what their names say they hold (compared lower-case, "-" read as "_"), and the client's
# text. A name that only names or counts something (``key``: a Redis key's name,
# ``tokens``: counts) is not one.
_SECRET_FIELDS = frozenset(
    {"authorization", "api_key", "apikey", "token", "secret", "password", "passwd",
     "signature", "cookie", "set_cookie", "credential", "credentials", "private_key",
     "messages", "prompt", "input", "content", "system", "body"}
)  # fmt: skip
_SECRET_ENDINGS = (
    "_authorization", "_api_key", "_apikey", "_token", "_secret", "_password",
    "_signature", "_cookie", "_credentials", "_private_key", "_secret_key", "_access_key",
)  # fmt: skip
_decided: dict[str, bool] = {}  # field name -> secret_field(name), for the names seen


def secret_field(name: str) -> bool:
    """Whether a field of this name holds a secret or the client's text (its value is
    redacted): ``api_key``, ``x-api-key``, ``authorization``, ``session_token``,
    ``client_secret``, ``password``, ``x-amz-signature``, ``cookie``, ``prompt``, ...;
    not ``key``, ``tokens`` or ``prompt_tokens``."""
    n = name.lower().replace("-", "_")
    return n in _SECRET_FIELDS or n.endswith(_SECRET_ENDINGS)


def redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Replace the value of any secret-bearing field with a marker (defence in depth)."""
    decided = _decided
    for name in [n for n in event if decided.get(n) is not False]:
        secret = decided.get(name)
        if secret is None:
            if len(decided) >= 4096:  # names are the code's own; a bound all the same
                decided.clear()
            secret = decided[name] = secret_field(str(name))
        if secret:
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
    """ISO-8601 UTC timestamps with microseconds, the date and time formatted once per second
    (structlog's TimeStamper is slow)."""

    __slots__ = ("_second",)

    def __init__(self) -> None:
        # start and end of the current second, and its "...T12:34:56.%06dZ" format; one
        # tuple, so that another thread never reads a start with the wrong format
        self._second: tuple[float, float, str] = (0.0, 0.0, "")

    def __call__(
        self, _: Any, __: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        event["timestamp"] = self.now()
        return event

    def now(self) -> str:
        now = time.time()
        start, end, fmt = self._second
        if not start <= now < end:
            start = float(int(now))
            end = start + 1.0
            fmt = time.strftime("%Y-%m-%dT%H:%M:%S.%%06dZ", time.gmtime(start))
            self._second = (start, end, fmt)
        return fmt % ((now - start) * 1e6)  # %d truncates: 0..999999


def _orjson_dumps(obj: Any, default: Any = None) -> bytes:
    return orjson.dumps(obj, default=default or str)


class JsonLines:
    """Where JSON lines go: stdout, as structlog's ``BytesLogger`` wrote them, but written
    with ``os.write`` to the file descriptor (what was buffered before goes first, at
    creation): a reader of a pipe or file sees whole lines at once. Access-log lines
    (:meth:`batch`) are gathered for one pass of the event loop and written together;
    any other line (:meth:`write`) first writes what is gathered, so the order holds, and
    what is gathered at exit is written then. A file with no descriptor (a test's
    capture) gets ``write`` and ``flush``. structlog calls the method named after the
    level with the rendered bytes; :class:`FastJson` calls :meth:`batch` with a line that
    already ends in a newline."""

    __slots__ = ("fd", "file", "pending")

    def __init__(self, file: IO[bytes] | None = None) -> None:
        if file is None:
            sys.stdout.flush()
            file = sys.stdout.buffer
        self.file = file
        file.flush()
        try:
            self.fd: int | None = self.file.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation, closed
            self.fd = None
        self.pending: list[bytes] = []

    def batch(self, line: bytes) -> None:
        """Write ``line`` at the end of this pass of the event loop, with the other lines of
        the same pass, in one system call (the access log under load: one ``write`` for
        many requests instead of one each). Without a running loop: at once."""
        if not self.pending:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:
                self.write(line)
                return
        self.pending.append(line)

    def flush(self) -> None:
        if self.pending:
            lines, self.pending = self.pending, []
            self._write(lines[0] if len(lines) == 1 else b"".join(lines))

    def write(self, line: bytes) -> None:
        if self.pending:
            self.flush()  # keep the order of lines
        self._write(line)

    def _write(self, line: bytes) -> None:
        if self.fd is None:
            self.file.write(line)
            self.file.flush()
            return
        n = os.write(self.fd, line)
        while n < len(line):  # a signal cut the write short: write the rest
            line = line[n:]
            n = os.write(self.fd, line)

    def msg(self, message: bytes) -> None:
        self.write(message + b"\n")

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class FastJson:
    """The JSON line of an info event with fixed, non-secret field names, written without
    structlog's processor chain (for the access log: one per request).

    The caller builds the dict the chain would render: its fields in order, then ``event``,
    ``level`` and ``timestamp`` (left None), and calls :meth:`write`. That writes it only
    while the chain :func:`configure` installed is still in force (nobody reconfigured
    structlog since, no ``capture_logs`` active); else, or when a value needs the chain's
    fallback encoding, it returns False and the caller logs through structlog. :attr:`info`
    says whether info events pass the level, decided once here as the filtering logger
    decides it; it holds while :meth:`current`. :func:`redact` is skipped: the callers'
    field names are fixed and none is secret-bearing (tests/test_observe_fast.py checks
    ``request_completed``'s with :func:`secret_field`, and that other events are still
    redacted)."""

    __slots__ = ("_factory", "_now", "_processors", "_renderer", "_wrapper", "_write", "info")

    def __init__(
        self,
        processors: list[Any],
        wrapper: Any,
        factory: Any,
        out: JsonLines,
        stamp: _Timestamp,
        info: bool,
    ) -> None:
        self._processors, self._renderer = processors, processors[-1]
        self._wrapper, self._factory = wrapper, factory
        self.info = info
        self._now = stamp.now  # the chain's timestamps
        self._write = out.batch

    def current(self) -> bool:
        """Whether the chain :func:`configure` installed is still structlog's: the
        processors, wrapper class and logger factory it passed to ``structlog.configure``
        are those ``structlog.get_config()`` returns (the same objects), and the renderer
        is still last in that processor list (``capture_logs`` swaps its processors in place,
        in the same list)."""
        c = _get_config()
        processors = self._processors
        return (
            c["processors"] is processors
            and processors[-1] is self._renderer
            and c["wrapper_class"] is self._wrapper
            and c["logger_factory"] is self._factory
        )

    def write(self, line: dict[str, Any]) -> bool:
        """Stamp ``line`` and write it as one JSON line; False, nothing written, when the
        chain is not :meth:`current` or a value needs the chain's fallback encoding."""
        if not self.current():
            return False
        line["timestamp"] = self._now()
        try:
            data = orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:
            return False
        self._write(data)
        return True


_get_config = structlog.get_config  # public; a fresh dict of the live configuration per call

#: Set by :func:`configure` for the JSON format, else None.
fast_json: FastJson | None = None
#: Where configure() sends JSON lines; what it still gathers is written at exit.
_out: JsonLines | None = None


@atexit.register
def _flush_at_exit() -> None:
    if _out is not None:
        _out.flush()


def configure(level: str = "info", fmt: str | None = None) -> None:
    """Configure structlog for the process. ``fmt`` None: console on a TTY, JSON otherwise."""
    global fast_json, _out
    if fmt is None:
        fmt = "console" if sys.stdout.isatty() else "json"
    stamp = _Timestamp()
    processors: list[Any] = [structlog.processors.add_log_level, stamp, redact]
    renderer: Any
    out: JsonLines | None = None
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(serializer=_orjson_dumps)
        out = _out = JsonLines()
        factory: Any = _same_logger(out)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        factory = structlog.PrintLoggerFactory()
    processors.append(renderer)
    _route_stdlib(level, renderer)
    level_no = getattr(logging, level.upper())
    wrapper = structlog.make_filtering_bound_logger(level_no)
    structlog.configure(
        processors=processors,
        wrapper_class=wrapper,
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    fast_json = (
        None
        if out is None
        else FastJson(processors, wrapper, factory, out, stamp, info=level_no <= logging.INFO)
    )


def _same_logger(out: JsonLines) -> Any:
    """A structlog logger factory: every logger writes through ``out``."""

    def factory(*_: Any) -> JsonLines:
        return out

    return factory


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
