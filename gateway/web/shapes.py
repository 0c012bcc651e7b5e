"""A request body checked at the edge, before anything reads it: what it may contain
(:class:`gateway.settings.RequestLimits`), the JSON types of the fields the gateway reads on
every path, and how deep it is nested.

The gateway passes a body on re-encoded, and its recovery layers read a few fields: the
conversation (``messages``, Responses ``input``, Anthropic ``system``) for compaction and
continuation, ``stream`` for how to answer, the output caps for continuation. A field of
the wrong type there would go upstream, come back as a provider's 400 after a round trip
(or be retried and fall back first), and the recovery paths would meanwhile work on a
shape they do not expect. :func:`check_shape` answers such a request with a 400 in the
endpoint's format naming the field (``param``) instead. A request that is translated
into another format has every field the translators read checked as well, nested
(:mod:`gateway.translate.request_check`), when it is translated.

Three more refusals, each a 400 naming the field or the limit:

- more messages (Responses input items), content blocks in all, or tools than the
  limits allow: the work a request makes (translation, compaction) grows with them, and
  it runs on the event loop every client shares;
- a body nested deeper than ``RequestLimits.depth``: the body is re-encoded on its way
  upstream, and orjson encodes at most 254 levels;
- an integer beyond 64 bits in a field that is an integer (``seed``, ``n``, the output
  caps...): orjson reads it as a float, which would reach the provider as another
  number.

The cost for a sound body is a few dictionary lookups, one pass over the message list
and one encode (the depth): about 1 µs for a short request, 15 µs for a 56 KB one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.errors import GatewayError, bad_request, huge_integer, wrong_type
from gateway.formats.endpoints import Endpoint
from gateway.settings import RequestLimits

__all__ = ["ENCODABLE_DEPTH", "INTEGER_FIELDS", "TOKEN_FIELDS", "check_raw", "check_shape"]

#: Output caps the engine and continuation read, on any endpoint.
TOKEN_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
#: Integer fields of the official APIs, checked for integers beyond 64 bits only (the
#: provider judges the rest of their values, as it would without the gateway).
INTEGER_FIELDS = ("seed", "n", "top_logprobs", "top_k", "max_tool_calls", "dimensions")
#: The deepest nesting orjson encodes (a body deeper than this cannot be sent on).
ENCODABLE_DEPTH = 254
DEFAULT_LIMITS = RequestLimits()
#: The endpoints, read from the class once: on Python 3.11 reading an enum's member from
#: its class (``Endpoint.chat``) goes through ``EnumType.__getattr__``'s slot, about 1k
#: instructions each time; a module global is a dictionary lookup.
_CHAT, _MESSAGES, _RESPONSES = Endpoint.chat, Endpoint.messages, Endpoint.responses
_COMPLETIONS, _EMBEDDINGS = Endpoint.completions, Endpoint.embeddings
#: The optional fields checked on every endpoint, in the order checked (the first wrong one
#: is named); each looked for with ``in``, cheaper than ``get`` for the usual absent one.
_OPTIONAL_ORDER = ("stream", *TOKEN_FIELDS, *INTEGER_FIELDS)
_TOKENS = frozenset(TOKEN_FIELDS)


def check_shape(
    endpoint: Endpoint,
    body: dict[str, Any],
    limits: RequestLimits = DEFAULT_LIMITS,
    size: int | None = None,
) -> None:
    """Raise a 400 :class:`GatewayError` for a body over ``limits``, with a field the
    gateway reads of the wrong JSON type (the first one, by its path), or nested deeper
    than ``limits.depth``; return ``None`` for a sound body. The body is not changed.
    ``size``: its length in bytes, when known (a body of under ``2 * limits.blocks`` bytes
    cannot hold too many blocks: they are not counted).

    ============  ===================================================================
    chat          ``messages``: an array of objects
    messages      ``messages``: an array of objects; ``system``: a string or an array
                  of objects
    responses     ``input``: a string or an array of objects
    completions   ``prompt``: a string or an array
    embeddings    ``input``: a string or an array
    every one     ``stream``: true or false; ``max_tokens``, ``max_completion_tokens``,
                  ``max_output_tokens``: a positive integer; :data:`INTEGER_FIELDS`:
                  no integer beyond 64 bits
    ============  ===================================================================

    ``null`` passes for the optional fields (``system``, Responses ``input``,
    ``prompt``, ``stream``, the caps), not for ``messages`` or the embeddings ``input``.
    """
    _check_counts(endpoint, body, limits, size)
    _check_types(endpoint, body)
    if size is None or size > 2 * limits.depth:  # each level takes 2 bytes or more
        _check_depth(body, limits.depth)


def _check_types(endpoint: Endpoint, body: Mapping[str, Any]) -> None:
    get = body.get
    if endpoint is _CHAT or endpoint is _MESSAGES:
        messages = get("messages")
        if messages is not None or "messages" in body:
            _objects(messages, "messages", "an array of message objects", "a message object")
        if endpoint is _MESSAGES:
            system = get("system")
            if system is not None and not isinstance(system, str):
                _objects(system, "system", "a string or an array of content blocks")
    elif endpoint is _RESPONSES:
        value = get("input")
        if value is not None and not isinstance(value, str):
            _objects(value, "input", "a string or an array")
    elif endpoint is _COMPLETIONS or endpoint is _EMBEDDINGS:
        _check_prompt(endpoint, body)
    for name in _OPTIONAL_ORDER:
        if name not in body or (value := body[name]) is None:
            continue
        if name == "stream":
            if value is not True and value is not False:
                raise wrong_type(name, "true or false", value)
        elif name in _TOKENS:
            if type(value) is not int or value < 1:
                raise wrong_type(name, "a positive integer", value)
        elif type(value) is float and huge_integer(value):
            raise wrong_type(name, "an integer", value)


def _check_prompt(endpoint: Endpoint, body: Mapping[str, Any]) -> None:
    """Completions' ``prompt``, embeddings' ``input``: a string or an array."""
    if endpoint is _COMPLETIONS:
        _text_or_array(body.get("prompt"), "prompt")
        return
    value = body.get("input")
    if value is not None or "input" in body:
        _text_or_array(value, "input", nullable=False)


def _objects(value: Any, name: str, expected: str, each: str = "an object") -> None:
    """``value`` must be an array of objects."""
    if not isinstance(value, list):
        raise wrong_type(name, expected, value)
    for item in value:  # orjson makes plain dicts: the quickest test first
        if type(item) is not dict:
            break
    else:
        return
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise wrong_type(f"{name}[{i}]", each, item)


def _text_or_array(value: Any, name: str, nullable: bool = True) -> None:
    if isinstance(value, str | list) or (value is None and nullable):
        return
    raise wrong_type(name, "a string or an array", value)


# ---- limits -------------------------------------------------------------------------------


def check_raw(raw: bytes, limits: RequestLimits) -> None:
    """Before the body is parsed: at most ``limits.containers`` JSON objects and arrays,
    counted as ``{`` and ``[`` bytes (an upper bound: those inside strings count too).
    Parsing is the one step whose cost no later check bounds: 10 million empty arrays
    (30 MB) take orjson seconds, on the event loop every client shares. Counting costs
    about 1 ms per MB, and only bodies of more than twice the limit in bytes are counted
    (a smaller one cannot hold that many)."""
    if len(raw) <= 2 * limits.containers:
        return
    count = raw.count(b"{") + raw.count(b"[")
    if count > limits.containers:
        raise GatewayError(
            400,
            f"the request holds {count} JSON objects and arrays (counting '{{' and '[' "
            f"inside strings); this gateway accepts at most {limits.containers}",
            code="request_too_large",
        )


def _check_counts(
    endpoint: Endpoint, body: dict[str, Any], limits: RequestLimits, size: int | None
) -> None:
    tools = body.get("tools")
    if type(tools) is list and len(tools) > limits.tools:
        raise _over("tools", "tools", len(tools), limits.tools)
    if endpoint is _MESSAGES and type(system := body.get("system")) is list:
        _check_parts(system, "system", limits.depth)
    name = endpoint.fmt.entries_key
    entries = body.get(name)
    if type(entries) is not list:
        return
    if len(entries) > limits.messages:
        what = "input items" if name == "input" else "messages"
        raise _over(name, what, len(entries), limits.messages)
    if size is None or size >= 2 * limits.blocks:  # each block takes 2 bytes or more
        blocks = _blocks(entries, limits.blocks)
        if blocks > limits.blocks:
            raise _over(name, "content blocks in all", blocks, limits.blocks)
    _check_parts(entries, name, limits.depth)


def check_parts(
    endpoint: Endpoint, body: dict[str, Any], limits: RequestLimits = DEFAULT_LIMITS
) -> None:
    """The checks of :func:`check_shape` that read a string's content (a tool call's
    ``arguments``), again: for a body first checked with its long strings held apart
    (:mod:`gateway.formats.body_parts`), once they are back. A walk of the parts, no encode."""
    entries = body.get(endpoint.fmt.entries_key)
    if type(entries) is list:
        _check_parts(entries, endpoint.fmt.entries_key, limits.depth)


def _blocks(entries: list[Any], limit: int) -> int:
    """Content blocks in all: the entries, their content parts, tool calls, Responses
    outputs and reasoning summaries, and what tool results hold (looked into only when
    the rest is within ``limit``, so a huge request is refused without a walk)."""
    count = len(entries)
    nested: list[Any] = []
    for entry in entries:
        if type(entry) is not dict:
            continue
        for key in _PART_LISTS:
            value = entry.get(key)
            if type(value) is list:
                count += len(value)
                nested.append(value)
    if count > limit:
        return count
    for parts in nested:
        for part in parts:
            if type(part) is dict and type(inner := part.get("content")) is list:
                count += len(inner)
    return count


#: An entry's fields that hold parts (content blocks, tool calls, outputs, summaries).
_PART_LISTS = ("content", "tool_calls", "output", "summary")
#: Those whose presence sends an entry to the full check (``content`` only when it is a
#: list: it is usually a string).
_ONLY_PART_LISTS = frozenset(_PART_LISTS[1:])


def _check_parts(entries: list[Any], name: str, depth: int) -> None:
    """The ``type`` of every entry, part and tool result's block (the levels whose blocks
    are counted) is a string or absent: the gateway picks how it reads an object by its
    ``type``. A tool call's ``arguments`` (chat's ``tool_calls[].function``, a Responses
    ``function_call``) are JSON in a string that a translation into Anthropic or Converse
    reads as an object: read so, they obey the body's depth limit, counted from the top of
    the body. About 0.1 µs per part."""
    for entry in entries:  # the usual messages (text, no type, no parts): nothing to read
        if type(entry) is dict and (
            "type" in entry
            or type(entry.get("content")) is list
            or not _ONLY_PART_LISTS.isdisjoint(entry)
        ):
            break
    else:
        return
    for i, entry in enumerate(entries):
        if type(entry) is not dict:
            continue
        kind = entry.get("type")
        if kind is not None and type(kind) is not str:
            _check_type(entry, name, i)
        if kind == "function_call":  # a Responses call: arguments in the item
            _check_arguments(entry, f"{name}[{i}]", depth, 3)
        for key in _PART_LISTS:
            parts = entry.get(key)
            if type(parts) is not list:
                continue
            for j, part in enumerate(parts):
                if type(part) is not dict:
                    continue
                kind = part.get("type")
                if kind is not None and type(kind) is not str:
                    _check_type(part, name, i, key, j)
                inner = part.get("content")
                if type(inner) is list:  # a tool result's blocks
                    _check_blocks(inner, name, i, key, j)
                if key == "tool_calls" and type(function := part.get("function")) is dict:
                    where = f"{name}[{i}].tool_calls[{j}].function"
                    _check_arguments(function, where, depth, 6)


def _check_blocks(blocks: list[Any], name: str, *at: str | int) -> None:
    """The ``type`` of each block a part holds (a tool result's content)."""
    for k, block in enumerate(blocks):
        if type(block) is dict:
            _check_type(block, name, *at, "content", k)


def _check_type(value: dict[str, Any], name: str, *at: str | int) -> None:
    kind = value.get("type")
    if kind is None or type(kind) is str:
        return
    path = name + "".join(f"[{p}]" if type(p) is int else f".{p}" for p in at)
    raise wrong_type(f"{path}.type", "a string", kind)


def _check_arguments(holder: dict[str, Any], where: str, depth: int, above: int) -> None:
    """``holder["arguments"]``, read as JSON where it sits (``above`` levels into the
    body), keeps the body within ``depth`` levels: one count of brackets, and a parse
    only of arguments with more brackets than the levels left."""
    args = holder.get("arguments")
    levels = depth - above
    if type(args) is not str or args.count("{") + args.count("[") <= levels:
        return
    try:
        value = orjson.loads(args)
    except orjson.JSONDecodeError as e:
        if "depth" not in str(e):
            return  # not JSON: the provider (or the translator, dropping it) judges it
    else:
        if _fits(value, ENCODABLE_DEPTH - levels):
            return
    path = f"{where}.arguments"
    raise bad_request(
        f"'{path}' is JSON nested deeper than the gateway's limit of {depth} levels "
        "(counted from the top of the request)",
        path,
    )


def _over(param: str, what: str, count: int, limit: int) -> GatewayError:
    return GatewayError(
        400,
        f"the request has {count} {what}; this gateway accepts at most {limit}",
        code="request_too_large",
        param=param,
    )


# ---- nesting -------------------------------------------------------------------------------


def _check_depth(body: dict[str, Any], depth: int) -> None:
    """orjson refuses to encode past :data:`ENCODABLE_DEPTH` levels: the body inside
    ``ENCODABLE_DEPTH - depth`` arrays encodes only if it is at most ``depth`` deep. One
    encode (about 2 µs for a typical request), no walk in Python."""
    if _fits(body, ENCODABLE_DEPTH - depth):
        return
    for key, value in body.items():  # which field: one more encode per field
        if not _fits(value, ENCODABLE_DEPTH - depth + 1):
            raise bad_request(
                f"'{key}' is nested deeper than the gateway's limit of {depth} levels", key
            )
    raise bad_request(f"the request is nested deeper than {depth} levels")  # pragma: no cover


class _Chain:
    """``levels`` arrays one inside the other; ``inner`` takes the value to encode."""

    __slots__ = ("inner", "outer")

    def __init__(self, levels: int) -> None:
        self.inner: list[Any] = [None]
        outer = self.inner
        for _ in range(levels - 1):
            outer = [outer]
        self.outer = outer


_chains = threading.local()  # per thread: the chain holds a value only during one encode


def _fits(value: Any, levels: int) -> bool:
    """Whether ``value`` inside ``levels`` arrays can be encoded."""
    chains: dict[int, _Chain] = _chains.__dict__  # type: ignore[assignment]
    chain = chains.get(levels)
    if chain is None:
        chain = chains[levels] = _Chain(levels)
    chain.inner[0] = value
    try:
        orjson.dumps(chain.outer)
    except orjson.JSONEncodeError:
        return False
    finally:
        chain.inner[0] = None
    return True
