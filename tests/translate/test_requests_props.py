"""Property tests: on the supported subset (text, images, tools, tool calls and results
with ids, system, max tokens, temperature, top_p, stop), a request translated to another
format and back is the request it was, up to the representation choices the rule table
documents (the NORMAL forms); and every translation is valid per the official SDK."""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.translate.requests import translate
from tests.translate.test_requests_helpers import ANTHROPIC_SAMPLING, NORMAL, check_request

pytestmark = pytest.mark.fast

TEXT = st.text(string.ascii_letters + string.digits + " .,?!é\n", min_size=1, max_size=16)
B64 = st.from_regex(r"[A-Za-z0-9+/]{4,12}={0,2}", fullmatch=True)
SCHEMAS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]},
    "search": {"type": "object", "properties": {"q": {"type": "string"},
                                                "n": {"type": "integer"}}},
    "now": {"type": "object", "properties": {}},
}  # fmt: skip
ARGS = st.dictionaries(st.sampled_from(["city", "q", "n"]), st.one_of(TEXT, st.integers(0, 99)),
                       max_size=2)  # fmt: skip


@dataclass
class Script:
    """A conversation, neutral, that each format renders its own way."""

    system: str | list[str] | None
    turns: list[tuple[Any, ...]]
    tools: list[tuple[str, str | None]] = field(default_factory=list)
    tool_choice: Any = None
    no_parallel: bool = False
    max_tokens: int = 100
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None


@st.composite
def user_parts(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    part = st.one_of(
        TEXT.map(lambda t: ("text", t)),
        st.integers(0, 999).map(lambda n: ("url", f"https://example.com/img/{n}.png")),
        st.tuples(st.just("b64"), st.sampled_from(["image/png", "image/jpeg"]), B64),
    )
    parts: list[tuple[Any, ...]] = draw(st.lists(part, min_size=1, max_size=3))
    return parts


@st.composite
def scripts(draw: st.DrawFn, stop: bool = True) -> Script:
    names = draw(st.lists(st.sampled_from(sorted(SCHEMAS)), unique=True, max_size=3))
    tools = [(n, draw(st.one_of(st.none(), TEXT))) for n in names]
    ids = iter(range(1000))
    turns: list[tuple[Any, ...]] = [("user", draw(user_parts()))]
    for _ in range(draw(st.integers(0, 3))):
        calls = []
        if tools:
            for _ in range(draw(st.integers(0, 3))):
                calls.append((f"call_{next(ids)}{draw(st.sampled_from(['', 'x', 'Ab9']))}",
                              draw(st.sampled_from(names)), draw(ARGS)))  # fmt: skip
        text = draw(TEXT) if not calls else draw(st.one_of(st.none(), TEXT))
        turns.append(("assistant", text, calls))
        if calls:
            turns.append(("results", [(c[0], draw(TEXT)) for c in calls]))
            if draw(st.booleans()):
                turns.append(("user", draw(user_parts())))
        else:
            turns.append(("user", draw(user_parts())))
    choice = None
    if tools:
        choice = draw(st.sampled_from([None, "auto", "none", "required", ("tool", names[0])]))
    return Script(
        system=draw(st.one_of(st.none(), TEXT, st.lists(TEXT, min_size=2, max_size=2))),
        turns=turns,
        tools=tools,
        tool_choice=choice,
        no_parallel=bool(tools) and choice != "none" and draw(st.booleans()),
        max_tokens=draw(st.integers(1, 8192)),
        temperature=draw(st.sampled_from([None, 0, 0.25, 1])),
        top_p=draw(st.sampled_from([None, 0.5, 1])),
        stop=draw(st.one_of(st.none(), st.lists(TEXT, min_size=1, max_size=3))) if stop else None,
    )


def _args(a: dict[str, Any]) -> str:
    return orjson.dumps(a).decode()


# ---------------------------------------------------------------- rendering


def to_chat(s: Script) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = []
    if s.system is not None:
        content: Any = s.system
        if isinstance(s.system, list):
            content = [{"type": "text", "text": t} for t in s.system]
        msgs.append({"role": "system", "content": content})
    for turn in s.turns:
        if turn[0] == "user":
            msgs.append({"role": "user", "content": _chat_content(turn[1])})
        elif turn[0] == "assistant":
            m: dict[str, Any] = {"role": "assistant", "content": turn[1]}
            if turn[2]:
                m["tool_calls"] = [{"id": i, "type": "function",
                                    "function": {"name": n, "arguments": _args(a)}}
                                   for i, n, a in turn[2]]  # fmt: skip
            msgs.append(m)
        else:
            msgs += [{"role": "tool", "tool_call_id": i, "content": t} for i, t in turn[1]]
    body: dict[str, Any] = {"model": "m", "messages": msgs, "max_tokens": s.max_tokens}
    if s.tools:
        body["tools"] = [{"type": "function", "function": _fn(n, d)} for n, d in s.tools]
    if s.tool_choice is not None:
        body["tool_choice"] = (
            {"type": "function", "function": {"name": s.tool_choice[1]}}
            if isinstance(s.tool_choice, tuple)
            else s.tool_choice
        )
    if s.no_parallel:
        body["parallel_tool_calls"] = False
    _sampling(s, body)
    if s.stop is not None:
        body["stop"] = s.stop
    return body


def _fn(name: str, description: str | None) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name}
    if description is not None:
        fn["description"] = description
    fn["parameters"] = SCHEMAS[name]
    return fn


def _sampling(s: Script, body: dict[str, Any]) -> None:
    if s.temperature is not None:
        body["temperature"] = s.temperature
    if s.top_p is not None:
        body["top_p"] = s.top_p


def _chat_content(parts: list[tuple[Any, ...]]) -> Any:
    if len(parts) == 1 and parts[0][0] == "text":
        return parts[0][1]
    out = []
    for p in parts:
        if p[0] == "text":
            out.append({"type": "text", "text": p[1]})
        else:
            url = p[1] if p[0] == "url" else f"data:{p[1]};base64,{p[2]}"
            out.append({"type": "image_url", "image_url": {"url": url}})
    return out


def to_anthropic(s: Script) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = []
    for turn in s.turns:
        if turn[0] == "user":
            if msgs and msgs[-1]["role"] == "user":  # after tool results: the same turn
                msgs[-1]["content"] += _anthropic_blocks(turn[1])
            elif len(turn[1]) == 1 and turn[1][0][0] == "text":
                msgs.append({"role": "user", "content": turn[1][0][1]})
            else:
                msgs.append({"role": "user", "content": _anthropic_blocks(turn[1])})
        elif turn[0] == "assistant":
            if not turn[2]:
                msgs.append({"role": "assistant", "content": turn[1]})
                continue
            blocks: list[dict[str, Any]] = [{"type": "text", "text": turn[1]}] if turn[1] else []
            blocks += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in turn[2]]
            msgs.append({"role": "assistant", "content": blocks})
        else:
            results = [{"type": "tool_result", "tool_use_id": i, "content": t} for i, t in turn[1]]
            msgs.append({"role": "user", "content": results})
    body: dict[str, Any] = {"model": "m", "messages": msgs, "max_tokens": s.max_tokens}
    if s.system is not None:
        body["system"] = (
            [{"type": "text", "text": t} for t in s.system]
            if isinstance(s.system, list)
            else s.system
        )
    if s.tools:
        body["tools"] = [
            {**({"description": d} if d is not None else {}), "name": n,
             "input_schema": SCHEMAS[n]} for n, d in s.tools
        ]  # fmt: skip
    choice: dict[str, Any] | None = None
    if s.tool_choice is not None:
        if isinstance(s.tool_choice, tuple):
            choice = {"type": "tool", "name": s.tool_choice[1]}
        else:
            choice = {"type": {"required": "any"}.get(s.tool_choice, s.tool_choice)}
    if s.no_parallel:
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if choice is not None:
        body["tool_choice"] = choice
    _sampling(s, body)
    if s.stop is not None:
        body["stop_sequences"] = s.stop
    return body


def _anthropic_blocks(parts: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in parts:
        if p[0] == "text":
            out.append({"type": "text", "text": p[1]})
        elif p[0] == "url":
            out.append({"type": "image", "source": {"type": "url", "url": p[1]}})
        else:
            src = {"type": "base64", "media_type": p[1], "data": p[2]}
            out.append({"type": "image", "source": src})
    return out


def to_responses(s: Script) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    body: dict[str, Any] = {"model": "m"}
    if isinstance(s.system, str):
        body["instructions"] = s.system
    elif s.system is not None:
        items.append({"type": "message", "role": "system",
                      "content": [{"type": "input_text", "text": t} for t in s.system]})  # fmt: skip
    for turn in s.turns:
        if turn[0] == "user":
            items.append({"type": "message", "role": "user", "content": _resp_content(turn[1])})
        elif turn[0] == "assistant":
            if turn[1] is not None:
                items.append({"type": "message", "role": "assistant", "content": turn[1]})
            items += [{"type": "function_call", "call_id": i, "name": n, "arguments": _args(a)}
                      for i, n, a in turn[2]]  # fmt: skip
        else:
            items += [{"type": "function_call_output", "call_id": i, "output": t}
                      for i, t in turn[1]]  # fmt: skip
    body["input"] = items
    if s.tools:
        body["tools"] = [{"type": "function", **_fn(n, d), "strict": False} for n, d in s.tools]
    if s.tool_choice is not None:
        body["tool_choice"] = (
            {"type": "function", "name": s.tool_choice[1]}
            if isinstance(s.tool_choice, tuple)
            else s.tool_choice
        )
    if s.no_parallel:
        body["parallel_tool_calls"] = False
    body["max_output_tokens"] = s.max_tokens
    _sampling(s, body)
    return body


def _resp_content(parts: list[tuple[Any, ...]]) -> Any:
    if len(parts) == 1 and parts[0][0] == "text":
        return parts[0][1]
    out = []
    for p in parts:
        if p[0] == "text":
            out.append({"type": "input_text", "text": p[1]})
        else:
            url = p[1] if p[0] == "url" else f"data:{p[1]};base64,{p[2]}"
            out.append({"type": "input_image", "image_url": url, "detail": "auto"})
    return out


RENDER = {"chat": to_chat, "messages": to_anthropic, "responses": to_responses}
EXTRA = {"messages": ANTHROPIC_SAMPLING, "chat": frozenset(), "responses": frozenset()}


def round_trip(script: Script, client: str, provider: str) -> None:
    body = RENDER[client](script)
    check_request(client, body, EXTRA[client])  # the generator makes valid requests
    there, _, drops = translate(body, client, provider)
    assert drops.names == []  # nothing of the supported subset is lost
    check_request(provider, there, EXTRA[provider])
    back, _, drops = translate(there, provider, client)
    assert drops.names == []
    assert NORMAL[client](back) == NORMAL[client](body)


SETTINGS = settings(max_examples=100, deadline=None)


@SETTINGS
@given(scripts())
def test_chat_to_anthropic_and_back(script: Script) -> None:
    """chat -> anthropic -> chat is the identity on the supported subset."""
    round_trip(script, "chat", "messages")


@SETTINGS
@given(scripts(stop=False))
def test_chat_to_responses_and_back(script: Script) -> None:
    """chat -> responses -> chat is the identity (Responses has no stop sequences)."""
    round_trip(script, "chat", "responses")


@SETTINGS
@given(scripts())
def test_anthropic_to_chat_and_back(script: Script) -> None:
    """anthropic -> chat -> anthropic is the identity on the supported subset."""
    round_trip(script, "messages", "chat")


@SETTINGS
@given(scripts(stop=False))
def test_anthropic_to_responses_and_back(script: Script) -> None:
    """anthropic -> responses -> anthropic is the identity on the supported subset."""
    round_trip(script, "messages", "responses")


@SETTINGS
@given(scripts(stop=False))
def test_responses_to_chat_and_back(script: Script) -> None:
    """responses -> chat -> responses is the identity on the supported subset."""
    round_trip(script, "responses", "chat")


@SETTINGS
@given(scripts(stop=False))
def test_responses_to_anthropic_and_back(script: Script) -> None:
    """responses -> anthropic -> responses is the identity on the supported subset."""
    round_trip(script, "responses", "messages")


@SETTINGS
@given(scripts(stop=False), st.sampled_from(["chat", "messages", "responses"]))
def test_one_script_reads_alike_in_every_format(script: Script, provider: str) -> None:
    """The same conversation, rendered by each client format, translates to the same
    provider body (up to representation): the formats agree on meaning."""
    outs = []
    for client in ("chat", "messages", "responses"):
        body = RENDER[client](script)
        out = body if client == provider else translate(body, client, provider)[0]
        outs.append(NORMAL[provider](out))
    assert outs[0] == outs[1] == outs[2]
