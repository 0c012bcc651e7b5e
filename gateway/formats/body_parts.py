"""A large request body decoded, and encoded as it is sent, without extra copies (pure).

An attempt's body is the decoded request (or its translation) encoded again. For most
bodies that is one ``orjson.dumps``. A body that holds a very long string (an image or a
document in base64, a pasted file) would then be in memory three times while it is
encoded: the client's decoded body (which recovery keeps), the translation (a data URL
is a new string) and the encoded bytes. :func:`encode` encodes such a body as
:class:`Parts` instead: the JSON around the long strings, encoded at once (small), and
the long strings themselves, encoded slice by slice while the body is written to the
socket (:class:`gateway.upstream.client.Body`), each let go of once written. The bytes on the
wire are those ``orjson.dumps`` writes (JSON escapes a string character by character, so
its slices encode to the slices of its encoding); their length is counted first, for the
``content-length``.

Decoding has the same problem the other way: ``orjson.loads`` holds the client's bytes,
its own copy of every string and the decoded strings at once. :func:`decode` takes the
long strings of plain printable ASCII (base64, most pasted text) straight out of the
bytes, decodes the JSON around them (small) and puts them back: the same value as
``orjson.loads``, with one copy of those strings, in a fraction of the time. Anything it
cannot tell for sure (escapes, other characters, a long key) is decoded by
``orjson.loads`` as before.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["LONG", "SLICE", "Parts", "decode", "encode", "restore"]

#: A string at least this long (characters) is encoded as it is sent.
LONG = 1 << 20
#: How much of a long string is encoded at a time, and of any body written at a time.
SLICE = 256 * 1024
#: Stands for a long string in the JSON around it; random per process, so that no
#: client text can be taken for it (and if one were, the body is encoded whole).
_MARK = "\x00" + secrets.token_hex(16)
_MARK_BYTES = orjson.dumps(_MARK)[1:-1]
#: A window this long without a quote is inside a long string (or a long run of numbers).
_WINDOW = LONG // 2
#: Every byte but printable ASCII (and the backslash): what makes a string not plain.
_PLAIN = bytes(c for c in range(0x20, 0x80) if c not in b'\\"')
_BACKSLASH = 0x5C


@dataclass(slots=True)
class Parts:
    """An encoded body in pieces: ``pieces[0]``, ``strings[0]`` encoded, ``pieces[1]``, ...
    (one more piece than strings), each of ``strings`` a long string in one or two parts;
    ``size``: its length in bytes once encoded."""

    pieces: list[bytes]
    strings: list[tuple[str, ...]]
    size: int


def encode(body: dict[str, Any], source: Any = None) -> bytes | Parts:
    """``body`` as ``orjson.dumps`` writes it: whole, or as :class:`Parts` when it holds a
    string of :data:`LONG` or more characters. Raises as ``orjson.dumps`` does.

    ``source``: what ``body`` was made from (the client's body, when ``body`` is its
    translation). A long string of ``body`` that ends with one of ``source`` (a data URL
    made of an image's base64) is sent as its start and that one: the translation's own
    copy is let go of with the translation, before the body is sent."""
    found: list[str] = []
    outline = _outline(body, found)
    if not found:
        return orjson.dumps(body)
    pieces = orjson.dumps(outline).split(_MARK_BYTES)
    if len(pieces) != len(found) + 1:  # the mark in the client's text: never in practice
        return orjson.dumps(body)
    strings = _shared(found, source) if source is not None and source is not body else None
    if strings is None:
        strings = [(s,) for s in found]
    size = sum(map(len, pieces))
    for parts in strings:
        for s in parts:
            size += sum(len(orjson.dumps(s[i : i + SLICE])) - 2 for i in range(0, len(s), SLICE))
    return Parts(pieces, strings, size)


def _shared(found: list[str], source: Any) -> list[tuple[str, ...]] | None:
    """``found`` with each string that ends with a long string of ``source`` (and is not
    it) cut in two: its start, and that string; None when there is none."""
    own: list[str] = []
    _outline(source, own)
    ids = {id(s) for s in own}
    out: list[tuple[str, ...]] = []
    cut = False
    for s in found:
        if id(s) not in ids:
            tail = next((t for t in own if len(t) < len(s) and s.endswith(t)), None)
            if tail is not None:
                out.append((s[: len(s) - len(tail)], tail))
                cut = True
                continue
        out.append((s,))
    return out if cut else None


def _outline(value: Any, strings: list[str]) -> Any:
    """``value`` with each long string replaced by the mark (appended to ``strings``, in
    the order ``orjson.dumps`` writes them); containers are copied only on the way to
    one, anything else is ``value`` itself."""
    kind = type(value)
    if kind is dict:
        entries: Any = value.items()
    elif kind is list:
        entries = enumerate(value)
    else:
        return value
    copy: Any = None
    for k, v in entries:
        t = type(v)
        if t is str:
            if len(v) < LONG:
                continue
            strings.append(v)
            new: Any = _MARK
        elif t is dict or t is list:
            new = _outline(v, strings)
            if new is v:
                continue
        else:
            continue
        if copy is None:
            copy = kind(value)
        copy[k] = new
    return value if copy is None else copy


def decode(raw: bytes) -> tuple[Any, dict[str, str]]:
    """``orjson.loads(raw)``, with its long plain strings left out: the value holds a mark
    for each, ``strings`` maps each mark to its string (empty: the value is whole).
    :func:`restore` puts them back. Raises as ``orjson.loads`` does."""
    if len(raw) < LONG or not (spans := _plain_spans(raw)):
        return orjson.loads(raw), {}
    pieces: list[bytes] = []
    strings: dict[str, str] = {}
    end = 0
    for start, stop in spans:  # the string's characters: raw[start:stop]
        mark = f"{len(strings)}"
        pieces += (raw[end : start - 1], b'"', _MARK_BYTES, mark.encode(), b'"')
        strings[_MARK + mark] = str(memoryview(raw)[start:stop], "ascii")
        end = stop + 1
    pieces.append(raw[end:])
    try:
        return orjson.loads(b"".join(pieces)), strings
    except orjson.JSONDecodeError:  # not a string after all: the error is the body's own
        return orjson.loads(raw), {}


def restore(value: Any, strings: dict[str, str]) -> Any | None:
    """``value`` (from :func:`decode`, changed in place) with its strings back; None when
    one has no place (it was a key, or under a key given twice): decode it whole."""
    _restore(value, strings)
    return None if strings else value


def _plain_spans(raw: bytes) -> list[tuple[int, int]]:
    """Where ``raw`` holds a string of more than :data:`_WINDOW` plain printable ASCII
    characters: ``(start, stop)`` of its characters, between its quotes, in order.

    A window without a quote lies between two quotes with nothing but the window's kind
    of bytes between them: a string's content if the first opens a string, else JSON
    outside strings (numbers). That is told apart by decoding: a cut there leaves the
    mark right after a string's closing quote, which JSON never allows."""
    spans: list[tuple[int, int]] = []
    n = len(raw)
    at = 0
    while at < n:
        if raw.find(b'"', at, at + _WINDOW) != -1:
            at += _WINDOW
            continue
        start = raw.rfind(b'"', 0, at) + 1
        stop = raw.find(b'"', at + _WINDOW)
        if stop == -1:
            break
        at = stop + 1
        if start < 2:  # no quote before: not in a string
            continue
        if raw[start - 2] != _BACKSLASH and _plain(raw, start, stop):
            spans.append((start, stop))
    return spans


def _plain(raw: bytes, start: int, stop: int) -> bool:
    """``raw[start:stop]`` is printable ASCII only, without a backslash (read in slices)."""
    return not any(
        raw[i : min(i + SLICE, stop)].translate(None, _PLAIN) for i in range(start, stop, SLICE)
    )


def _restore(value: Any, strings: dict[str, str]) -> None:
    """Replace each mark in ``value`` (a string value) by its string, taken out of
    ``strings``."""
    kind = type(value)
    if kind is not dict and kind is not list:
        return
    for k, v in value.items() if kind is dict else enumerate(value):
        if not strings:
            return
        t = type(v)
        if t is str:
            if v.startswith(_MARK) and v in strings:
                value[k] = strings.pop(v)
        elif t is dict or t is list:
            _restore(v, strings)
