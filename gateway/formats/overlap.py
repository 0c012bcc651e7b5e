"""The resumed text against the text the client already has (docs/recovery.md, Streams):
:class:`Pipe`.

The text of a resumed or continued stream passes through a :class:`Pipe` on its way to
the client, so that no character is repeated or lost: appended as it comes, held back
until a regenerated text covers what was sent, or with the whitespace an Anthropic
continuation repeats dropped. A regenerated text that differs from what was sent, or
ends before covering it, is :class:`Diverged`. :mod:`gateway.formats.splice` feeds it
the text of each endpoint's events.

Pure: no aiohttp, asyncio, time or random.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.formats.event_kinds import Kind


@dataclass(frozen=True, slots=True)
class Diverged:
    """The resumed stream cannot continue the client's stream."""

    reason: str


@dataclass(slots=True)
class Out:
    """What a splice sends for one resumed event: rewritten events (each with its kind),
    then (``raw``) the event as it came."""

    events: list[tuple[dict[str, Any], Kind]] = field(default_factory=list)
    raw: bool = False


class Pipe:
    """The resumed stream's text on its way to the client.

    ``append``: passed as it comes. ``regenerate``: held back until it covers
    ``sent``, then only what follows; a mismatch is a divergence. ``trim``
    (Anthropic continuation, ``sent`` ending in whitespace ``W`` that was trimmed
    from the prefill): the continuation's leading whitespace run ``L`` is held
    until a non-whitespace character arrives; when ``L`` starts with ``W``, the
    repeated ``W`` is dropped (``join_texts`` keeps the model's whitespace, which
    here extends what the client has); otherwise ``L`` is dropped and the client
    keeps the whitespace it already has (it cannot be taken back).
    """

    def __init__(self, sent: str, regenerate: bool, trim: bool) -> None:
        self.sent = sent
        self.regenerate = regenerate
        self.pos = 0
        self.ws = sent[len(sent.rstrip()) :] if trim and not regenerate else ""
        self.held = ""
        self.settled = not sent if regenerate else not self.ws

    def push(self, text: str) -> str | Diverged:
        if self.settled or not text:
            return text if self.settled else ""
        if self.regenerate:
            head = text[: len(self.sent) - self.pos]
            if self.sent[self.pos : self.pos + len(head)] != head:
                return Diverged(
                    f"regenerated text differs from the text already sent at character "
                    f"{self.pos + _common(self.sent[self.pos :], head)}"
                )
            self.pos += len(head)
            if self.pos < len(self.sent):
                return ""
            self.settled = True
            return text[len(head) :]
        self.held += text
        rest = self.held.lstrip()
        if not rest:
            return ""
        return self._settle(self.held[: len(self.held) - len(rest)], rest)

    def flush(self) -> str | Diverged:
        """The text held back when the resumed text ends."""
        if self.settled:
            return ""
        if self.regenerate:
            return Diverged(
                f"regenerated text ended after {self.pos} of the {len(self.sent)} characters "
                "already sent"
            )
        return self._settle(self.held, "")

    def _settle(self, lead: str, rest: str) -> str:
        self.settled, self.held = True, ""
        if lead.startswith(self.ws):
            return lead[len(self.ws) :] + rest
        return rest


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
