"""Helpers of the request / answer translation tests (no tests here): fixtures, a strict
checker of request bodies against the official SDKs' TypedDicts, and the normal forms
that the rule table of ``gateway.translate.requests`` allows between a body and its
round trip."""

from __future__ import annotations

import collections.abc
import copy
import types
import typing
from pathlib import Path
from typing import Any, Literal, NotRequired, Required, Union, get_args, get_origin

import orjson
import pytest
from typing_extensions import is_typeddict

pytestmark = pytest.mark.fast

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(kind: str, name: str) -> dict[str, Any]:
    """A fixture file: ``{"source": where it came from, "body": the documented body, ...}``."""
    data: dict[str, Any] = orjson.loads((FIXTURES / kind / f"{name}.json").read_bytes())
    return data


def fixtures(kind: str) -> list[str]:
    return sorted(p.stem for p in (FIXTURES / kind).glob("*.json"))


# ---------------------------------------------------------------- SDK type check


class Mismatch(AssertionError):
    pass


_SEQUENCES = (list, tuple, collections.abc.Iterable, collections.abc.Sequence)
_MAPPINGS = (dict, collections.abc.Mapping)


def check(value: Any, tp: Any, path: str = "$", extra_ok: frozenset[str] = frozenset()) -> None:
    """Raise :class:`Mismatch` unless ``value`` is of the SDK type ``tp``: TypedDicts with
    their required keys and *no other keys* (the APIs reject unknown fields), Literals,
    unions (one member must fit), sequences, mappings and scalars. ``extra_ok`` names keys
    allowed at the top level beyond the TypedDict's."""
    if tp is Any or tp is object:
        return
    origin = get_origin(tp)
    if origin in (Required, NotRequired, typing.Annotated):
        check(value, get_args(tp)[0], path)
        return
    if is_typeddict(tp):
        _check_typeddict(value, tp, path, extra_ok)
        return
    if origin in (Union, types.UnionType):
        errors = []
        for member in get_args(tp):
            try:
                check(value, member, path)
                return
            except Mismatch as e:
                shallow = str(e).startswith(f"{path}: expected")
                errors.append((_same_type(value, member), not shallow, str(e)))
        best = max(errors)[2]  # the member of the value's own "type", else the deepest

        raise Mismatch(f"{path}: fits no member of the union; closest: {best}")
    if origin is Literal:
        if value not in get_args(tp):
            raise Mismatch(f"{path}: {value!r} is not one of {get_args(tp)}")
        return
    if origin in _SEQUENCES:
        if not isinstance(value, list):
            raise Mismatch(f"{path}: expected a list, got {type(value).__name__}")
        (item,) = get_args(tp)[:1] or (Any,)
        for i, v in enumerate(value):
            check(v, item, f"{path}[{i}]")
        return
    if origin in _MAPPINGS:
        if not isinstance(value, dict):
            raise Mismatch(f"{path}: expected an object, got {type(value).__name__}")
        return
    if tp is type(None):
        if value is not None:
            raise Mismatch(f"{path}: expected null, got {value!r}")
        return
    if tp is float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise Mismatch(f"{path}: expected a number, got {value!r}")
        return
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise Mismatch(f"{path}: expected an integer, got {value!r}")
        return
    if tp in (str, bool):
        if not isinstance(value, tp):
            raise Mismatch(f"{path}: expected {tp.__name__}, got {value!r}")
        return
    if tp in (dict, list):
        if not isinstance(value, tp):
            raise Mismatch(f"{path}: expected {tp.__name__}, got {value!r}")
        return
    raise Mismatch(f"{path}: the checker does not know the type {tp!r}")


def _same_type(value: Any, member: Any) -> bool:
    if not (is_typeddict(member) and isinstance(value, dict) and "type" in value):
        return False
    hint = typing.get_type_hints(member, include_extras=True).get("type")
    while get_origin(hint) in (Required, NotRequired):
        hint = get_args(hint)[0]
    return get_origin(hint) is Literal and value["type"] in get_args(hint)


def _check_typeddict(value: Any, tp: Any, path: str, extra_ok: frozenset[str]) -> None:
    if not isinstance(value, dict):
        raise Mismatch(f"{path}: expected an object ({tp.__name__}), got {value!r}")
    hints = typing.get_type_hints(tp, include_extras=True)
    # (``__required_keys__`` misses a ``Required[...]`` written as a string annotation)
    marked = {k for k, h in hints.items() if get_origin(h) is Required}
    optional = {k for k, h in hints.items() if get_origin(h) is NotRequired}
    for key in sorted((tp.__required_keys__ | marked) - optional):
        if key not in value:
            raise Mismatch(f"{path}: {tp.__name__} is missing {key!r}")
    for key, v in value.items():
        if key not in hints:
            if key in extra_ok:
                continue
            raise Mismatch(f"{path}: unexpected key {key!r} for {tp.__name__}")
        check(v, hints[key], f"{path}.{key}")


def check_request(fmt: str, body: dict[str, Any], extra_ok: frozenset[str] = frozenset()) -> None:
    """``body`` is a valid request of ``fmt`` per the official SDK's request TypedDicts."""
    stream = bool(body.get("stream"))
    if fmt == "messages":
        from anthropic.types import message_create_params as a

        tp: Any = a.MessageCreateParamsStreaming if stream else a.MessageCreateParamsNonStreaming
    elif fmt == "responses":
        from openai.types.responses import response_create_params as r

        tp = r.ResponseCreateParamsStreaming if stream else r.ResponseCreateParamsNonStreaming
    else:
        from openai.types.chat import completion_create_params as c

        tp = c.CompletionCreateParamsStreaming if stream else c.CompletionCreateParamsNonStreaming
    check(body, tp, "$", extra_ok)


#: The installed anthropic SDK no longer lists sampling controls (Claude Opus 4.7 and later
#: reject them); earlier Claude models take them and the translation sends them unless
#: ``Caps(sampling=False)``: the only keys allowed beyond the SDK's.
ANTHROPIC_SAMPLING = frozenset({"temperature", "top_p", "top_k"})


# ---------------------------------------------------------------- normal forms


def _single_text(content: Any, kinds: tuple[str, ...]) -> Any:
    if isinstance(content, list) and len(content) == 1:
        part = content[0]
        if isinstance(part, dict) and part.get("type") in kinds and set(part) <= {"type", "text"}:
            return part["text"]
    return content


def normal_chat(body: dict[str, Any]) -> dict[str, Any]:
    """Chat body, modulo the documented representation choices."""
    b = copy.deepcopy(body)
    for m in b.get("messages", []):
        if "content" in m:
            m["content"] = _single_text(m["content"], ("text",))
        if m.get("role") == "assistant":
            if m.get("content") in ("", None):
                m["content"] = None
            for call in m.get("tool_calls") or ():
                call["function"]["arguments"] = _args(call["function"]["arguments"])
        if m.get("role") == "developer":
            m["role"] = "system"
    for t in b.get("tools") or ():
        if t["function"].get("strict") is False:
            del t["function"]["strict"]
    _defaults(b)
    if "max_completion_tokens" in b:
        b["max_tokens"] = b.pop("max_completion_tokens")
    if isinstance(b.get("stop"), str):
        b["stop"] = [b["stop"]]
    if b.get("stream"):
        b.pop("stream_options", None)
    return b


def normal_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    b = copy.deepcopy(body)
    b["system"] = _single_text(b.get("system"), ("text",))
    if b["system"] is None:
        del b["system"]
    for m in b.get("messages", []):
        m["content"] = _single_text(m["content"], ("text",))
        for block in m["content"] if isinstance(m["content"], list) else ():
            if block.get("type") == "tool_result" and "content" in block:
                block["content"] = _single_text(block["content"], ("text",))
    choice = b.get("tool_choice")
    if isinstance(choice, dict) and choice.get("disable_parallel_tool_use") is False:
        del choice["disable_parallel_tool_use"]  # the default
    if choice == {"type": "auto"}:
        del b["tool_choice"]
    return b


def normal_responses(body: dict[str, Any]) -> dict[str, Any]:
    b = copy.deepcopy(body)
    if isinstance(b.get("input"), str):
        b["input"] = [{"type": "message", "role": "user", "content": b["input"]}]
    for item in b.get("input", []):
        item.setdefault("type", "message")
        if item["type"] == "message":
            item["content"] = _single_text(item["content"], ("input_text", "output_text"))
            if item.get("role") == "developer":
                item["role"] = "system"
            for part in item["content"] if isinstance(item["content"], list) else ():
                if part.get("type") == "input_image":
                    part.setdefault("detail", "auto")
        elif item["type"] == "function_call":
            item["arguments"] = _args(item["arguments"])
        elif item["type"] == "function_call_output":
            item["output"] = _single_text(item["output"], ("input_text",))
    for t in b.get("tools") or ():
        # a tool without ``strict`` goes out without it and is written back ``false``
        t.setdefault("strict", False)
    _defaults(b)
    return b


def _defaults(b: dict[str, Any]) -> None:
    """Defaults of every format: parallel tool calls on, ``tool_choice`` auto with tools."""
    if b.get("parallel_tool_calls") is True:
        del b["parallel_tool_calls"]
    if b.get("tool_choice") == "auto" and b.get("tools"):
        del b["tool_choice"]


def _args(arguments: str) -> Any:
    """Tool-call arguments compare as JSON (they are re-serialised compactly)."""
    try:
        return orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        return arguments


NORMAL = {"chat": normal_chat, "messages": normal_anthropic, "responses": normal_responses}
