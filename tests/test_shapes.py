"""check_shape: the JSON types of the fields the gateway reads, as a table and by hypothesis.

The integration side (a 400 in the endpoint's format, nothing upstream) is in
tests/integration/test_errors.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import GatewayError
from gateway.formats.endpoints import Endpoint
from gateway.translate.request_check import check
from gateway.web.shapes import INTEGER_FIELDS, TOKEN_FIELDS, check_shape
from tests.fuzz.test_fuzz_nested import SEEDS

pytestmark = pytest.mark.fast

CHAT, MESSAGES, RESPONSES = Endpoint.chat, Endpoint.messages, Endpoint.responses
COMPLETIONS, EMBEDDINGS = Endpoint.completions, Endpoint.embeddings
USER = [{"role": "user", "content": "hi"}]
TOOL_TURN = [
    {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sun"}]},
]

# What the official SDKs and the clients of tests/clients send: all must pass.
VALID: list[tuple[Endpoint, dict[str, Any]]] = [
    (CHAT, {"model": "m", "messages": USER}),
    (CHAT, {"model": "m", "messages": USER, "stream": True,
            "stream_options": {"include_usage": True}}),
    (CHAT, {"model": "m", "messages": USER, "stream": False, "max_tokens": 16}),
    (CHAT, {"model": "m", "messages": USER, "max_completion_tokens": 1, "max_tokens": None,
            "stream": None, "tools": [{"type": "function", "function": {"name": "f"}}]}),
    (CHAT, {"model": "m", "messages": []}),  # empty: the provider's to refuse
    (CHAT, {"model": "m"}),  # absent: likewise
    (CHAT, {"model": "m", "messages": USER, "x_unread": {"deep": [1, {"a": None}]}}),
    *((Endpoint(path), {"model": "m", **seed}) for path, seed in SEEDS.items()),
    (MESSAGES, {"model": "m", "max_tokens": 1024, "messages": USER}),
    (MESSAGES, {"model": "m", "max_tokens": 1024, "messages": TOOL_TURN, "stream": True,
                "system": "be brief"}),
    (MESSAGES, {"model": "m", "max_tokens": 1024, "messages": USER,
                "system": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}),
    (MESSAGES, {"model": "m", "max_tokens": 2**40, "messages": USER, "system": None}),
    (RESPONSES, {"model": "m", "input": "hi"}),
    (RESPONSES, {"model": "m", "input": [{"role": "user", "content": "hi"}], "stream": True,
                 "max_output_tokens": 100, "instructions": "x", "store": False}),
    (RESPONSES, {"model": "m", "previous_response_id": "r1"}),  # no input at all
    (RESPONSES, {"model": "m", "input": None}),
    (COMPLETIONS, {"model": "m", "prompt": "once upon", "max_tokens": 5}),
    (COMPLETIONS, {"model": "m", "prompt": ["a", "b"]}),
    (COMPLETIONS, {"model": "m", "prompt": [1, 2, 3]}),
    (COMPLETIONS, {"model": "m", "prompt": [[1, 2], [3]], "stream": True}),
    (COMPLETIONS, {"model": "m", "prompt": None}),
    (EMBEDDINGS, {"model": "m", "input": "text"}),
    (EMBEDDINGS, {"model": "m", "input": ["a", "b"], "encoding_format": "base64"}),
    (EMBEDDINGS, {"model": "m", "input": [[1, 2, 3]], "dimensions": 8}),
]  # fmt: skip

# (endpoint, body, param, message)
INVALID: list[tuple[Endpoint, dict[str, Any], str, str]] = [
    (CHAT, {"messages": "hi"}, "messages",
     "'messages' must be an array of message objects, got a string"),
    (CHAT, {"messages": {"role": "user"}}, "messages",
     "'messages' must be an array of message objects, got an object"),
    (CHAT, {"messages": None}, "messages",
     "'messages' must be an array of message objects, got null"),
    (CHAT, {"messages": [*USER, "hi"]}, "messages[1]",
     "'messages[1]' must be a message object, got a string"),
    (CHAT, {"messages": [[{"role": "user"}]]}, "messages[0]",
     "'messages[0]' must be a message object, got an array"),
    (CHAT, {"messages": USER, "seed": 2.0**70}, "seed",
     "'seed' must be an integer of at most 64 bits, got a larger integer"),
    (RESPONSES, {"input": ["hi"]}, "input[0]", "'input[0]' must be an object, got a string"),
    (CHAT, {"messages": USER, "stream": "true"}, "stream",
     "'stream' must be true or false, got a string"),
    (CHAT, {"messages": USER, "stream": 1}, "stream", "'stream' must be true or false, got the number 1"),
    (CHAT, {"messages": USER, "max_tokens": "100"}, "max_tokens",
     "'max_tokens' must be a positive integer, got a string"),
    (CHAT, {"messages": USER, "max_tokens": 0}, "max_tokens",
     "'max_tokens' must be a positive integer, got the number 0"),
    (CHAT, {"messages": USER, "max_tokens": -5}, "max_tokens",
     "'max_tokens' must be a positive integer, got the number -5"),
    (CHAT, {"messages": USER, "max_tokens": 10.5}, "max_tokens",
     "'max_tokens' must be a positive integer, got the number 10.5"),
    (CHAT, {"messages": USER, "max_tokens": 10.0}, "max_tokens",
     "'max_tokens' must be a positive integer, got the number 10.0"),
    (CHAT, {"messages": USER, "max_completion_tokens": True}, "max_completion_tokens",
     "'max_completion_tokens' must be a positive integer, got true"),
    (CHAT, {"messages": USER, "max_tokens": -(10**30)}, "max_tokens",
     "'max_tokens' must be a positive integer, got a number"),  # too long to be shown
    (MESSAGES, {"messages": "hi", "max_tokens": 10}, "messages",
     "'messages' must be an array of message objects, got a string"),
    (MESSAGES, {"messages": [None], "max_tokens": 10}, "messages[0]",
     "'messages[0]' must be a message object, got null"),
    (MESSAGES, {"messages": USER, "system": {"text": "x"}}, "system",
     "'system' must be a string or an array of content blocks, got an object"),
    (MESSAGES, {"messages": USER, "system": 3}, "system",
     "'system' must be a string or an array of content blocks, got the number 3"),
    (MESSAGES, {"messages": USER, "max_tokens": False}, "max_tokens",
     "'max_tokens' must be a positive integer, got false"),
    (MESSAGES, {"messages": USER, "max_tokens": 10, "stream": "yes"}, "stream",
     "'stream' must be true or false, got a string"),
    (RESPONSES, {"input": {"role": "user", "content": "hi"}}, "input",
     "'input' must be a string or an array, got an object"),
    (RESPONSES, {"input": 42}, "input", "'input' must be a string or an array, got the number 42"),
    (RESPONSES, {"input": "hi", "max_output_tokens": "lots"}, "max_output_tokens",
     "'max_output_tokens' must be a positive integer, got a string"),
    (COMPLETIONS, {"prompt": {"text": "x"}}, "prompt",
     "'prompt' must be a string or an array, got an object"),
    (EMBEDDINGS, {"input": None}, "input", "'input' must be a string or an array, got null"),
    (EMBEDDINGS, {"input": 7}, "input", "'input' must be a string or an array, got the number 7"),
]  # fmt: skip


# Nested: checked when the request is translated (gateway/translate/request_check.py);
# relayed in its own format, the provider judges them. (endpoint, body, param, message)
NESTED: list[tuple[Endpoint, dict[str, Any], str, str]] = [
    (CHAT, {"messages": USER, "temperature": "hot"}, "temperature",
     "'temperature' must be a number, got a string"),  # the Anthropic writer compares it
    (CHAT, {"messages": [{"role": "user", "content": ["hi"]}]}, "messages[0].content[0]",
     "'messages[0].content[0]' must be an object, got a string"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url",
                                                        "image_url": {"url": {"u": 1}}}]}]},
     "messages[0].content[0].image_url.url",
     "'messages[0].content[0].image_url.url' must be a string, got an object"),
    (CHAT, {"messages": USER, "tools": ["x"]}, "tools[0]", "'tools[0]' must be an object, got a string"),
    (RESPONSES, {"input": [{"type": "function_call", "call_id": "c", "name": "f",
                            "arguments": {"a": 1}}]}, "input[0].arguments",
     "'input[0].arguments' must be a string, got an object"),
    (MESSAGES, {"messages": [{"role": "user", "content": [{"type": "tool_result",
                              "tool_use_id": "t", "content": [5]}]}]},
     "messages[0].content[0].content[0]",
     "'messages[0].content[0].content[0]' must be an object, got the number 5"),
    (MESSAGES, {"messages": USER, "system": [{"type": "text", "text": 3}]}, "system[0].text",
     "'system[0].text' must be a string, got the number 3"),
    (CHAT, {"messages": USER, "seed": 1.5}, "seed", "'seed' must be an integer, got the number 1.5"),
    (MESSAGES, {"messages": USER, "thinking": {"type": "enabled", "budget_tokens": 2.0**70}},
     "thinking.budget_tokens",
     "'thinking.budget_tokens' must be an integer of at most 64 bits, got a larger integer"),
]  # fmt: skip
TRANSLATED = (CHAT, MESSAGES, RESPONSES)


@pytest.mark.parametrize(("endpoint", "body"), VALID, ids=lambda v: getattr(v, "name", ""))
def test_what_clients_send_passes(endpoint: Endpoint, body: dict[str, Any]) -> None:
    check_shape(endpoint, body)  # no GatewayError
    if endpoint in TRANSLATED:
        check(body, endpoint.fmt.name)  # nor when it is translated


@pytest.mark.parametrize(
    ("endpoint", "body", "param", "message"), NESTED, ids=[m for *_, m in NESTED]
)
def test_nested_wrong_types_are_400_naming_the_field_when_translated(
    endpoint: Endpoint, body: dict[str, Any], param: str, message: str
) -> None:
    body = {"model": "m", **body}
    check_shape(endpoint, body)  # relayed as it is: the provider's to judge
    refused(lambda: check(body, endpoint.fmt.name), param, message)


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


# Read on every path, whatever the request's format and wherever it goes: checked at the
# edge, the same words as the translators' check. (endpoint, body, param, message)
EVERY_PATH: list[tuple[Endpoint, dict[str, Any], str, str]] = [
    (CHAT, {"messages": [{"role": "user", "content": [{"type": 5}]}]},
     "messages[0].content[0].type", "'messages[0].content[0].type' must be a string, got the number 5"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": {"a": 1}}]}]},
     "messages[0].content[0].type", "'messages[0].content[0].type' must be a string, got an object"),
    (CHAT, {"messages": [{"role": "assistant", "tool_calls": [{"type": ["function"]}]}]},
     "messages[0].tool_calls[0].type", "'messages[0].tool_calls[0].type' must be a string, got an array"),
    (RESPONSES, {"input": [{"type": ["message"], "role": "user", "content": "hi"}]},
     "input[0].type", "'input[0].type' must be a string, got an array"),
    (RESPONSES, {"input": [{"role": "user", "content": [{"type": {}, "text": "hi"}]}]},
     "input[0].content[0].type", "'input[0].content[0].type' must be a string, got an object"),
    (MESSAGES, {"messages": [{"role": "user", "content": [{"type": "tool_result",
                              "tool_use_id": "t", "content": [{"type": ["text"]}]}]}]},
     "messages[0].content[0].content[0].type",
     "'messages[0].content[0].content[0].type' must be a string, got an array"),
    (MESSAGES, {"messages": USER, "system": [{"type": {"t": 1}, "text": "s"}]}, "system[0].type",
     "'system[0].type' must be a string, got an object"),
    (CHAT, {"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": "f", "arguments": _deep(195)}}]}]}, "messages[0].tool_calls[0].function.arguments",
     "'messages[0].tool_calls[0].function.arguments' is JSON nested deeper than the gateway's "
     "limit of 200 levels (counted from the top of the request)"),
    (RESPONSES, {"input": [{"type": "function_call", "call_id": "c", "name": "f",
                            "arguments": _deep(1100)}]}, "input[0].arguments",
     "'input[0].arguments' is JSON nested deeper than the gateway's limit of 200 levels "
     "(counted from the top of the request)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("endpoint", "body", "param", "message"), EVERY_PATH, ids=[m[:60] for *_, m in EVERY_PATH]
)
def test_fields_read_on_every_path_are_400_naming_the_field(
    endpoint: Endpoint, body: dict[str, Any], param: str, message: str
) -> None:
    """A ``type`` that is not a string, and tool call arguments nested past the body's
    depth limit once read, are refused at the edge whether the request is relayed or
    translated (and before an estimate or a translator reads them)."""
    refused(lambda: check_shape(endpoint, {"model": "m", **body}), param, message)


def test_arguments_as_deep_as_the_limit_allows_pass() -> None:
    """Arguments that keep the body within its depth limit (chat's sit 6 levels in,
    a Responses call's 3), and arguments that are not JSON, pass."""
    call = {"type": "function", "function": {"name": "f", "arguments": _deep(194)}}
    check_shape(CHAT, {"model": "m", "messages": [{"role": "assistant", "tool_calls": [call]}]})
    item = {"type": "function_call", "call_id": "c", "name": "f", "arguments": _deep(197)}
    check_shape(RESPONSES, {"model": "m", "input": [item]})
    item = {**item, "arguments": "[" * 300}
    check_shape(RESPONSES, {"model": "m", "input": [item]})


def refused(call: Callable[[], None], param: str, message: str) -> GatewayError:
    """The 400 ``call`` raises, naming ``param`` with ``message``."""
    with pytest.raises(GatewayError) as caught:
        call()
    err = caught.value
    assert (err.status, err.param, err.message, err.code) == (
        400,
        param,
        message,
        "invalid_request",
    )
    return err


@pytest.mark.parametrize(
    ("endpoint", "body", "param", "message"), INVALID, ids=[m for *_, m in INVALID]
)
def test_wrong_types_are_400_naming_the_field(
    endpoint: Endpoint, body: dict[str, Any], param: str, message: str
) -> None:
    err = refused(lambda: check_shape(endpoint, {"model": "m", **body}), param, message)
    assert err.openai_body()["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert err.anthropic_body()[
        "error"
    ] == {  # the Anthropic form has no param: the message names it
        "type": "invalid_request_error",
        "message": message,
    }


# ---- the rule, restated as an oracle, against arbitrary JSON --------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)  # orjson reads larger ones as floats
    | st.sampled_from([2.0**70, -(2.0**64)])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
CHECKED = {
    CHAT: ("messages", "stream", *TOKEN_FIELDS, *INTEGER_FIELDS),
    MESSAGES: ("messages", "system", "stream", *TOKEN_FIELDS, *INTEGER_FIELDS),
    RESPONSES: ("input", "stream", *TOKEN_FIELDS, *INTEGER_FIELDS),
    COMPLETIONS: ("prompt", "stream", *TOKEN_FIELDS, *INTEGER_FIELDS),
    EMBEDDINGS: ("input", "stream", *TOKEN_FIELDS, *INTEGER_FIELDS),
}


def sound(endpoint: Endpoint, name: str, value: Any) -> bool:
    """Whether ``value`` is an acceptable ``name`` on ``endpoint`` (the documented table)."""
    if name == "messages":
        return isinstance(value, list) and all(isinstance(m, dict) for m in value)
    if name == "stream":
        return value is None or isinstance(value, bool)
    if name in TOKEN_FIELDS:
        return value is None or (
            isinstance(value, int) and not isinstance(value, bool) and value > 0
        )
    if name in INTEGER_FIELDS:  # only integers beyond 64 bits (read as floats) are refused
        integral = isinstance(value, float) and value.is_integer()
        return not (integral and not -(2**63) <= value < 2**64)
    if name == "input" and endpoint is EMBEDDINGS:
        return isinstance(value, str | list)
    if name in ("system", "input"):  # arrays of blocks / items: objects
        return (
            value is None
            or isinstance(value, str)
            or (isinstance(value, list) and all(isinstance(v, dict) for v in value))
        )
    return value is None or isinstance(value, str | list)  # prompt


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    endpoint=st.sampled_from(list(CHECKED)),
    data=st.data(),
)
def test_accepts_exactly_the_documented_types(endpoint: Endpoint, data: st.DataObject) -> None:
    """For arbitrary JSON in the checked fields (and in one field nobody reads), an unsound
    field is the one reported (its path, in the field's place); a body with none passes."""
    fields = CHECKED[endpoint]
    chosen = data.draw(st.lists(st.sampled_from(fields), unique=True, max_size=3))
    body: dict[str, Any] = {"model": "m", "x_unread": data.draw(json_values)}
    if endpoint in (CHAT, MESSAGES):
        body["messages"] = USER
    for name in chosen:
        body[name] = data.draw(json_values | st.sampled_from([USER, "text", 5, True, None]))
    bad = [n for n in fields if n in body and not sound(endpoint, n, body[n])]
    if not bad:
        check_shape(endpoint, body)
        return
    with pytest.raises(GatewayError) as caught:
        check_shape(endpoint, body)
    param = str(caught.value.param)
    assert caught.value.status == 400 and param.split("[")[0].split(".")[0] in bad, param
