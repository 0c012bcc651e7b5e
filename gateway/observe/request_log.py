"""What one request's access-log line and response headers say (``RequestLog``), and
how a client-derived name is made fit for a header or a log line (:func:`visible`).

The events and metrics are written from it by :mod:`gateway.observe.events`; the
access-log line by :meth:`gateway.observe.events.Events.request_completed`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.money.bill import NO_BILL, Bill

#: At most this many characters of one dropped field name (a client's unknown key or
#: ``type`` may be any text), and at most this many bytes of ``x-gateway-dropped`` and of
#: the access log's ``dropped``; at most ``MAX_DROPPED_NAMES`` names are kept, the rest
#: only counted.
MAX_NAME = 64
MAX_DROPPED = 1024
MAX_DROPPED_NAMES = 256
#: Anything but visible ASCII, and the comma that separates the names.
_UNSAFE = re.compile(r"[^!-+\--~]")


def visible(text: str, limit: int = MAX_NAME) -> str:
    """``text`` as a header value or a logged name may hold it: at most ``limit``
    characters (a longer text is cut and ends in ``...``), each visible ASCII; any other
    character (a control character, CR, LF, NUL, a space, non-ASCII) and the comma
    become ``?``."""
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if text.isascii() and text.isprintable() and " " not in text and "," not in text:
        return text  # (cheaper than the regular expression's search)
    return _UNSAFE.sub("?", text)


@dataclass(slots=True)
class RequestLog:
    """What the access log and the response headers say about one request."""

    request_id: str
    started: float  # monotonic
    path: str = "-"  # the client's endpoint (third: given by position on every request)
    team: str = "-"
    route: str = "-"
    model: str = "-"  # public model name asked for
    answered_by: str = ""  # public model name that answered
    provider: str = "-"
    deployment: str = ""  # of the last attempt (on a model of one: its provider's name)
    session: str | None = None  # the session's digest (gateway/resilience/affinity.py label)
    status: int = 0
    attempts: int = 0
    ttfb: float | None = None
    recovery: tuple[str, ...] = ()  # the layers used, each once (grown by a new tuple)
    error: str | None = None
    span: Any = None  # the request's trace span, when tracing is on and it is sampled
    traceparent: str | None = None  # sent upstream for a request traced but not sampled
    finish_reasons: tuple[str, ...] = ()  # set when traced
    dropped: DroppedNames | None = None  # request fields a translation dropped
    cache_markers: int = 0  # prompt-cache markers the gateway added to a translated attempt
    # what the request was billed: its handler's bill, reported here (never decided from)
    bill: Bill = NO_BILL

    def close(self) -> None:
        """The request is over: a status never set (an exception escaped) is a 500."""
        if self.status == 0:
            self.status = 500

    def used(self, what: str) -> None:
        if what not in self.recovery:
            self.recovery += (what,)

    def drop(self, names: list[str]) -> None:
        """The names an attempt's translation dropped."""
        if names:
            if self.dropped is None:
                self.dropped = DroppedNames()
            self.dropped.add(names)

    def headers(self) -> dict[str, str]:
        h = {
            "x-request-id": self.request_id,
            "x-gateway-attempts": str(self.attempts),
            "x-gateway-model": self.answered_by or self.model,
        }
        if self.recovery:
            h["x-gateway-recovery"] = ",".join(self.recovery)
        if self.dropped is not None:
            h["x-gateway-dropped"] = self.dropped.text()
        if self.cache_markers:
            h["x-gateway-cache-markers"] = str(self.cache_markers)
        return h


class DroppedNames:
    """The request fields a request's translations dropped, as ``x-gateway-dropped`` and
    the access log say them: each once, made :func:`visible`; the first
    ``MAX_DROPPED_NAMES`` kept and of the rest, the most any attempt had, counted (every
    attempt of a request names its own; most name the same)."""

    __slots__ = ("_text", "kept", "more")

    def __init__(self) -> None:
        self.kept: dict[str, None] = {}
        self.more = 0
        self._text: str | None = None

    def add(self, names: list[str]) -> None:
        kept, before = self.kept, len(self.kept)
        extra: set[str] | None = None  # the names past the kept ones
        for name in names:
            name = visible(name)
            if name in kept:
                continue
            if len(kept) < MAX_DROPPED_NAMES:
                kept[name] = None
            elif extra is None:
                extra = {name}
            else:
                extra.add(name)
        if extra is not None and len(extra) > self.more:
            self.more = len(extra)
            self._text = None
        elif len(kept) != before:
            self._text = None

    def text(self) -> str:
        """The names, comma-separated, in at most ``MAX_DROPPED`` bytes: those that do not
        fit are counted in a last ``(+N more)``."""
        if self._text is None:
            self._text = self._render()
        return self._text

    def _render(self) -> str:
        total = len(self.kept) + self.more
        room = MAX_DROPPED - 20  # what ",(+N more)" takes
        shown: list[str] = []
        for name in self.kept:
            room -= len(name) + 1
            if room < 0:
                break
            shown.append(name)
        if len(shown) < total:
            shown.append(f"(+{total - len(shown)} more)")
        return ",".join(shown)
