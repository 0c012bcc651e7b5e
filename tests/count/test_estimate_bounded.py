"""The token estimate reads the fields a provider counts and nothing else: a field no
format has is never looked at (whatever it holds), a wrongly typed ``type`` is no crash,
and the worst body the request limits allow is estimated in bounded time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from gateway.formats import CHAT, MESSAGES, RESPONSES, Format
from gateway.resilience.conversation import estimate_tokens
from tests.count.worst_bodies import WORST

pytestmark = pytest.mark.fast


class Trap(dict[str, Any]):
    """A JSON object that fails the test if anything reads it."""

    def _read(self, *_: Any, **__: Any) -> Any:
        raise AssertionError("the estimate read a field no format has")

    get = __getitem__ = __iter__ = __len__ = items = keys = values = _read  # type: ignore[assignment]


class TrapList(list[Any]):
    def _read(self, *_: Any, **__: Any) -> Any:
        raise AssertionError("the estimate read a field no format has")

    __iter__ = __getitem__ = __len__ = _read  # type: ignore[assignment]


def _bodies() -> list[tuple[Format, dict[str, Any]]]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    chat = {"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi there"},
                                     {"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]}  # fmt: skip
    messages = {"system": [{"type": "text", "text": "Be brief."}], "messages": [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": [1, "b"]}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "42"}]}]},
    ], "tools": [{"name": "f", "input_schema": {"type": "object"}}]}  # fmt: skip
    responses = {"instructions": "Be brief.", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Hi there"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ]}  # fmt: skip
    return [(CHAT, chat), (MESSAGES, messages), (RESPONSES, responses)]


#: Fields whose whole JSON is counted (a tool call's input, the tool definitions).
_JSON = frozenset({"input", "tools"})


def _trapped(value: Any) -> Any:
    """``value`` with a trap in a field no format has, in every object of it (but inside
    the fields counted as whole JSON, where any field is the model's to read)."""
    if isinstance(value, dict):
        out = {k: v if k in _JSON else _trapped(v) for k, v in value.items()}
        out["x_extra"] = Trap(a=1)
        out["x_list"] = TrapList([1])
        return out
    if isinstance(value, list):
        return [_trapped(v) for v in value]
    return value


@pytest.mark.parametrize(("fmt", "body"), _bodies(), ids=lambda v: getattr(v, "name", ""))
def test_fields_no_format_has_are_never_read(fmt: Format, body: dict[str, Any]) -> None:
    """Every object of the body, top to bottom, gets two fields no format has holding an
    object and an array that fail when read: the estimate is the same and reads neither
    (their size costs nothing, however large)."""
    assert estimate_tokens(_trapped(body), fmt) == estimate_tokens(body, fmt) > 8


@pytest.mark.parametrize("kind", [{"a": 1}, ["text"], 5, None, True])
@pytest.mark.parametrize("fmt", [CHAT, MESSAGES, RESPONSES], ids=lambda f: f.name)
def test_a_type_of_any_json_type_is_no_crash(fmt: Format, kind: Any) -> None:
    """A ``type`` that is an object or an array (unhashable) is read as an unknown type."""
    key = fmt.entries_key
    part = {"type": kind, "text": "hello"}
    body = {
        key: [{"role": "user", "type": kind, "content": [part, {"type": "x", "content": [part]}]}]
    }
    assert estimate_tokens(body, fmt) >= 4


@pytest.mark.parametrize("name", sorted(WORST))
def test_the_worst_allowed_bodies_cost_at_most_an_encode(name: str) -> None:
    """The bodies the request limits allow that cost the estimate most
    (``python -m tests.count.worst_bodies`` prints the figures): each is estimated in at
    most twice the time the body takes to parse (which its request pays anyway), measured
    on the same machine at the same moment. Before, a field no format has cost the
    estimate several parses (6 million strings: 0.4-2.2 s)."""
    fmt, body = WORST[name]()
    estimate_tokens(body, fmt)  # warm
    raw = orjson.dumps(body)
    parse = min(_timed(lambda: orjson.loads(raw)) for _ in range(2))
    took = min(_timed(lambda: estimate_tokens(body, fmt)) for _ in range(2))
    print(f"\n{name}: estimate {took * 1000:.1f} ms, parse {parse * 1000:.1f} ms")
    assert took < 2 * parse + 0.02, (took, parse)


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started
