"""Mutated nested fields through every endpoint x every model format: never a 500.

Each seed is a valid request rich in the nested shapes the translators read (content
parts of every kind, tool calls and results, tools, tool_choice, image and file
sources, Responses input items, Anthropic system blocks). A seeded mutation replaces
one value anywhere in it with a value of another JSON type; the body goes to a real
gateway in front of the echo upstream, on a model of each format (``gpt-echo`` speaks
the client's OpenAI format, ``gpt-resp-echo`` only Responses, ``claude-echo``
Anthropic). Every answer is a success or a 4xx in the endpoint's format; a refusal
of the gateway's validation names the field's path.
"""

from __future__ import annotations

import copy
import random
import time
from typing import Any

import orjson
import pytest

from tests.fuzz.live import LiveGateway, error_shape_ok, raw_http
from tests.harness import CLIENT_KEY
from tests.json_paths import paths

AUTH = ("authorization", f"Bearer {CLIENT_KEY}")
MODELS = ["gpt-echo", "gpt-resp-echo", "claude-echo"]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}
PNG = "data:image/png;base64,iVBORw0KGgo="

CHAT: dict[str, Any] = {
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE",
                                      "filename": "a.pdf"}},
        ]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "sun"}]},
        {"role": "assistant", "content": "sunny", "refusal": None},
        {"role": "user", "content": "thanks", "name": "bob"},
    ],
    "tools": [{"type": "function", "function": {"name": "weather", "description": "w",
                                                "parameters": SCHEMA, "strict": False}}],
    "tool_choice": {"type": "function", "function": {"name": "weather"}},
    "parallel_tool_calls": True,
    "max_tokens": 50,
    "temperature": 0.5,
    "top_p": 0.9,
    "stop": ["\n\n"],
    "stream_options": {"include_usage": True},
    "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}},
    "user": "u1",
    "metadata": {"k": "v"},
}  # fmt: skip
RESPONSES: dict[str, Any] = {
    "instructions": "be brief",
    "input": [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "what is this?"},
            {"type": "input_image", "image_url": PNG, "detail": "auto"},
            {"type": "input_file", "file_data": "data:application/pdf;base64,JVBE",
             "filename": "a.pdf"},
        ]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
        {"type": "function_call", "call_id": "call_1", "name": "weather",
         "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sun"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "sunny"}]},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [
        {"type": "function", "name": "weather", "description": "w", "parameters": SCHEMA,
         "strict": False},
        {"type": "namespace", "name": "ns", "description": "group",
         "tools": [{"type": "function", "name": "f", "parameters": SCHEMA}]},
    ],
    "tool_choice": {"type": "function", "name": "weather"},
    "max_output_tokens": 50,
    "temperature": 0.5,
    "reasoning": {"effort": "low", "summary": "auto"},
    "text": {"format": {"type": "json_schema", "name": "r", "schema": SCHEMA},
             "verbosity": "low"},
    "user": "u1",
}  # fmt: skip
MESSAGES: dict[str, Any] = {
    "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                            "data": "doc"}, "title": "t"},
        ]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": [{"type": "text", "text": "sun"}], "is_error": False},
        ]},
        {"role": "assistant", "content": "sunny"},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [{"name": "weather", "description": "w", "input_schema": SCHEMA}],
    "tool_choice": {"type": "tool", "name": "weather", "disable_parallel_tool_use": True},
    "max_tokens": 50,
    "temperature": 0.5,
    "stop_sequences": ["\n\n"],
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "metadata": {"user_id": "u1"},
}  # fmt: skip
SEEDS = {"/v1/chat/completions": CHAT, "/v1/responses": RESPONSES, "/v1/messages": MESSAGES}
#: Values of every JSON type a mutation puts in place of the original.
REPLACEMENTS: list[Any] = [
    "x", "", 7, -1, 2.5, True, None, [], ["x"], [1], [None], [{}], {}, {"x": 1}, {"type": 5},
    [["x"]], {"type": "text"}, {"url": {"u": 1}},
]  # fmt: skip


def mutate(seed: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    body = copy.deepcopy(seed)
    path = rng.choice(paths(body))
    parent: Any = body
    for key in path[:-1]:
        parent = parent[key]
    old = parent[path[-1]]
    new = rng.choice([r for r in REPLACEMENTS if type(r) is not type(old) or r != old])
    parent[path[-1]] = copy.deepcopy(new)
    return body


def post(live: LiveGateway, path: str, body: dict[str, Any]) -> Any:
    data = orjson.dumps(body)
    return raw_http(live.port, "POST", path, [AUTH, ("content-type", "application/json")], data)


@pytest.mark.parametrize("path", list(SEEDS))
@pytest.mark.parametrize("model", MODELS)
def test_seeds_are_answered(live: LiveGateway, path: str, model: str) -> None:
    """The unmutated seeds are valid requests: 200 on every model format (or a named
    refusal of translation, never of the gateway's validation)."""
    reply = post(live, path, {**SEEDS[path], "model": model})
    if reply.status == 400:
        error = reply.json()["error"]
        assert "no equivalent" in error["message"] or "not available" in error["message"], reply
    else:
        assert reply.status == 200, reply


@pytest.mark.parametrize("path", list(SEEDS))
def test_mutated_nested_fields_never_500(live: LiveGateway, path: str) -> None:
    """120 seeded mutations per endpoint, each on the three model formats: no 500, every
    refusal a 4xx in the endpoint's format, a validation refusal naming the field."""
    rng = random.Random(f"nested-{path}")
    failures: list[str] = []
    sent = 0
    started = time.monotonic()
    for _ in range(120):
        body = mutate(SEEDS[path], rng)
        for model in MODELS:
            reply = post(live, path, {**body, "model": model})
            sent += 1
            if reply.status >= 500 or (reply.status >= 400 and not error_shape_ok(reply, path)):
                failures.append(f"{model} {reply!r} for {orjson.dumps(body)[:400]!r}")
    assert not failures, f"{len(failures)} of {sent} failed; first: {failures[:3]}"
    assert live.errors.records == [], live.errors.records[:3]
    assert time.monotonic() - started < 30


# ---- the examples ---------------------------------------------------------------

#: (endpoint, model) pairs relayed in the client's own format: nested fields the gateway
#: does not read are the provider's to judge there (the echo upstream takes anything).
RELAYED = {
    ("/v1/chat/completions", "gpt-echo"),
    ("/v1/responses", "gpt-echo"),
    ("/v1/responses", "gpt-resp-echo"),
    ("/v1/messages", "claude-echo"),
}
# (path, body, the field named, refused at the edge on every model)
CASES = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": ["hi"]}]},
     "messages[0].content[0]", False),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": ["x"]},
     "tools[0]", False),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": {"u": 1}}}]}]},
     "messages[0].content[0].image_url.url", False),
    ("/v1/responses", {"input": ["hi"]}, "input[0]", True),
    ("/v1/messages", {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [5]}]}], "max_tokens": 5},
     "messages[0].content[0].content[0]", False),
    ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                      "system": [{"type": "text", "text": 3}]}, "system[0].text", False),
    ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                      "system": ["be brief"]}, "system[0]", True),
]  # fmt: skip


def named(reply: Any, path: str) -> str:
    """The field a 400 names: ``param`` (OpenAI), else the quoted path opening the message."""
    error = reply.json()["error"]
    if not path.startswith("/v1/messages"):
        return str(error.get("param"))
    return str(error["message"]).split("'")[1]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("path", "body", "field", "edge"), CASES)
def test_wrong_nested_types_are_400_naming_the_field(
    live: LiveGateway, model: str, path: str, body: dict[str, Any], field: str, edge: bool
) -> None:
    """Refused naming the field wherever the gateway reads it: at the edge for the fields
    every request's recovery reads, when translated for the rest; relayed in its own
    format, a field only the provider reads reaches it as the client wrote it."""
    before = len(live.upstream.requests)
    reply = post(live, path, {**body, "model": model})
    if edge or (path, model) not in RELAYED:
        assert reply.status == 400, reply
        assert error_shape_ok(reply, path), reply
        assert named(reply, path) == field, reply
        assert len(live.upstream.requests) == before  # nothing went upstream
    else:
        assert reply.status == 200, reply
        sent = orjson.loads(live.upstream.requests[before][3])
        assert {k: sent[k] for k in body} == body


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("depth", [255, 600, 1024])
@pytest.mark.parametrize("path", list(SEEDS))
def test_deep_nesting_is_400(live: LiveGateway, path: str, depth: int, model: str) -> None:
    """A body nested deeper than the bound is refused, same-format and translated alike;
    the refusal names the field that holds the deep value."""
    raw = orjson.dumps({**SEEDS[path], "model": model, "metadata": {}}).replace(
        b'"metadata":{}',
        b'"metadata":{"deep":' + b"[" * (depth - 2) + b"1" + b"]" * (depth - 2) + b"}",
    )
    reply = raw_http(live.port, "POST", path, [AUTH, ("content-type", "application/json")], raw)
    assert reply.status == 400, reply
    assert error_shape_ok(reply, path), reply
    assert "nested" in reply.json()["error"]["message"], reply
    assert named(reply, path) == "metadata", reply


@pytest.mark.parametrize("path", list(SEEDS))
def test_nesting_within_the_bound_is_served(live: LiveGateway, path: str) -> None:
    """Deep but allowed (190 levels, the limit being 200): forwarded, translated or not."""
    for model in MODELS:
        deep = nested(190)
        reply = post(live, path, {**SEEDS[path], "model": model, "metadata": {"deep": deep}})
        assert reply.status in (200, 400), reply
        if reply.status == 400:
            assert "nested" not in reply.json()["error"]["message"], reply


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("path", list(SEEDS))
def test_integers_beyond_64_bits_are_400_naming_the_field(
    live: LiveGateway, path: str, model: str
) -> None:
    """``seed: 2**70`` would reach the provider as a float: refused, naming ``seed``."""
    raw = orjson.dumps({**SEEDS[path], "model": model})[:-1] + b',"seed":' + str(2**70).encode()
    reply = raw_http(
        live.port, "POST", path, [AUTH, ("content-type", "application/json")], raw + b"}"
    )
    assert reply.status == 400, reply
    assert error_shape_ok(reply, path), reply
    assert named(reply, path) == "seed", reply
    # 64-bit integers pass (the largest unsigned one too) and reach upstream exactly
    before = len(live.upstream.requests)
    same = "claude-echo" if path == "/v1/messages" else "gpt-echo"
    ok = orjson.dumps({**SEEDS[path], "model": same})[:-1] + b',"seed":18446744073709551615}'
    reply = raw_http(live.port, "POST", path, [AUTH, ("content-type", "application/json")], ok)
    assert reply.status == 200, reply
    assert b'"seed":18446744073709551615' in live.upstream.requests[before][3]
