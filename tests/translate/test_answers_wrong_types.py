"""A provider's JSON answer with fields of the wrong type, translated for a client of another
format: the translation is an answer the client's own SDK reads, whose text fields are
text, or the answer is refused as malformed (a broken provider, retried as such). Never a
``null``, a number or an object where the client's SDK expects text: the JSON answers are
held to what the stream translators already were (``tests/translate/test_streams_props.py``),
by the same rules (``gateway.translate.fields``)."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import Malformed
from gateway.formats import CHAT, CONVERSE, MESSAGES, RESPONSES, Format
from gateway.translate import convert
from tests.test_wrongly_typed_answers import broken
from tests.translate.test_answers_golden import NAMES, facts, sdk_body, source_format
from tests.translate.test_converse import converse_answer
from tests.translate.test_streams_props import TEXT_KEYS

pytestmark = pytest.mark.fast

CLIENTS = {"chat": CHAT, "messages": MESSAGES, "responses": RESPONSES}

#: A chat answer whose content is a list of parts (Mistral's, with its thinking).
MISTRAL = {
    "id": "cmpl-1", "object": "chat.completion", "created": 1700000000, "model": "magistral",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": [
        {"type": "thinking", "thinking": [{"type": "text", "text": "Let me think."}]},
        {"type": "text", "text": "Paris."},
    ]}}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
}  # fmt: skip
CONVERSE_ANSWER = converse_answer(
    [
        {"reasoningContent": {"reasoningText": {"text": "Need weather.", "signature": "s1"}}},
        {"text": "Checking."},
        {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Oslo"}}},
    ],
    "tool_use",
)
ANSWERS: dict[str, tuple[Format, dict[str, Any]]] = {
    **{name: (CLIENTS[source_format(name)], sdk_body(name)) for name in NAMES},
    "chat_mistral_parts": (CHAT, MISTRAL),
    "converse_tool_use": (CONVERSE, CONVERSE_ANSWER),
}
WRONG = (7, 1.5, {"a": 1}, True, None, "", [1], ["x"])


def fields(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every field of ``obj``, an object or a list as well as a leaf."""
    if isinstance(obj, dict):
        items: Any = obj.items()
    elif isinstance(obj, list):
        items = enumerate(obj)
    else:
        return []
    return [p for k, v in items for p in ((*path, k), *fields(v, (*path, k)))]


def replaced(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    obj = copy.deepcopy(obj)
    target = obj
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return obj


def typed(obj: Any) -> None:
    """Every field a client reads as text is text (a chat message's ``refusal`` may be
    null), and a stop or a stop sequence is text or null."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in TEXT_KEYS and not (k == "refusal" and v is None):
                assert isinstance(v, str), (k, v)
            elif k in ("stop_reason", "finish_reason", "stop_sequence"):
                assert v is None or isinstance(v, str), (k, v)
            typed(v)
    elif isinstance(obj, list):
        for v in obj:
            typed(v)


def check(source: Format, data: dict[str, Any], client: str) -> None:
    """The translation of ``data`` for ``client``: malformed, or read whole by its SDK."""
    try:
        out = convert.answer(data, source, CLIENTS[client], "public-model")
    except Malformed:
        return
    typed(out)
    again = orjson.loads(orjson.dumps(out))
    got = facts(client, again)  # the SDK's model validates it; arguments are JSON
    assert all(isinstance(text, str) for text in (got["text"], *(c[1] for c in got["calls"])))
    if client == "messages":
        assert all(isinstance(b["input"], dict) for b in out["content"] if b["type"] == "tool_use")


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_every_field_of_the_wrong_type_never_breaks_the_answer(name: str) -> None:
    """Each field of each documented answer, in turn, a number, an object, a bool, null, an
    empty string or a list: for every client of another format, an answer its SDK reads."""
    source, body = ANSWERS[name]
    for path in fields(body):
        for value in WRONG:
            data = replaced(body, path, value)
            for client, fmt in CLIENTS.items():
                if fmt is not source:
                    check(source, data, client)


WIRE = st.sampled_from(sorted(ANSWERS)).flatmap(
    lambda name: st.tuples(st.just(ANSWERS[name][0]), broken(ANSWERS[name][1]))
)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(WIRE, st.sampled_from(sorted(CLIENTS)))
def test_fields_of_any_type_never_break_the_answer(
    case: tuple[Format, dict[str, Any]], client: str
) -> None:
    """One to three fields given any JSON value (as read off the wire): the same."""
    source, data = case
    if CLIENTS[client] is source:
        return
    try:
        data = orjson.loads(json.dumps(data))  # what orjson reads: no integer past 64 bits
    except orjson.JSONDecodeError:
        return
    check(source, data, client)


# ---------------------------------------------------------------- what is kept


def test_a_null_field_is_absent() -> None:
    """A text, a call id, a stop sequence or arguments of ``null`` are absent: the answer's
    other parts are kept, the call gets its default id and ``{}`` as arguments."""
    content = [{"text": None}, {"text": "Hello"}]
    out = convert.answer(converse_answer(content, "end_turn"), CONVERSE, MESSAGES, "m")
    assert out["content"] == [{"type": "text", "text": "Hello"}]
    body = sdk_body("anthropic_tool_use")
    body["content"][0]["text"] = None
    body["content"][1]["id"] = None
    body["stop_sequence"] = None
    chat = convert.answer(body, MESSAGES, CHAT, "m")["choices"][0]["message"]
    assert chat["content"] is None
    assert chat["tool_calls"][0]["id"] == "toolu_1"
    body = sdk_body("chat_functions")
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = None
    out = convert.answer(body, CHAT, RESPONSES, "m")
    assert [i["arguments"] for i in out["output"] if i["type"] == "function_call"] == ["{}"]


WRONGLY_TYPED = [
    ("converse", CONVERSE, ("output", "message", "content", 1, "text"), 7, "content[].text is int"),
    ("anthropic_tool_use", MESSAGES, ("content", 1, "name"), ["x"], "content[].name is list"),
    ("anthropic_tool_use", MESSAGES, ("content", 1, "input"), [1], "content[].input is list"),
    ("anthropic_basic", MESSAGES, ("content", 0), "secret text", "content[] is str"),
    ("chat_functions", CHAT, ("choices", 0, "message", "tool_calls", 0, "function", "arguments"),
     5.5, "arguments is float"),
    ("responses_reasoning", RESPONSES, ("output", 0, "content", 0, "text"), {"a": 1},
     "output[].content[] is dict"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "source", "path", "value", "said"), WRONGLY_TYPED)
def test_a_field_of_another_wrong_type_makes_the_answer_malformed(
    name: str, source: Format, path: tuple[Any, ...], value: Any, said: str
) -> None:
    """A text that is a number, a name that is a list, an input that is not an object, a
    block that is a string: nothing of the answer is dropped silently, it is a broken
    provider's answer (retried); the reason names the field and its type, not its value."""
    body = CONVERSE_ANSWER if name == "converse" else sdk_body(name)
    data = replaced(body, path, value)
    for fmt in CLIENTS.values():
        if fmt is not source:
            with pytest.raises(Malformed, match=re.escape(said)) as e:
                convert.answer(data, source, fmt, "m")
            assert "secret" not in str(e.value)


def test_arguments_that_are_not_an_object_are_an_empty_object_towards_anthropic() -> None:
    """Arguments that are JSON text of a list: a chat client gets them as they are, an
    Anthropic client an empty ``input`` (its ``input`` is an object)."""
    body = sdk_body("chat_functions")
    body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "[1]"
    out = convert.answer(body, CHAT, MESSAGES, "m")
    assert [b["input"] for b in out["content"] if b["type"] == "tool_use"] == [{}]
    out = convert.answer(body, CHAT, RESPONSES, "m")
    assert [i["arguments"] for i in out["output"] if i["type"] == "function_call"] == ["[1]"]


def test_a_mistral_answer_in_parts_reaches_every_client() -> None:
    """A chat answer whose content is a list of parts, as Mistral sends it, is read as its
    stream is: the text parts are the text, the thinking parts the reasoning."""
    assert facts("messages", convert.answer(MISTRAL, CHAT, MESSAGES, "m"))["text"] == "Paris."
    out = convert.answer(MISTRAL, CHAT, MESSAGES, "m")
    assert out["content"][0] == {"type": "thinking", "thinking": "Let me think.", "signature": ""}
    out = convert.answer(MISTRAL, CHAT, RESPONSES, "m")
    assert out["output"][0]["summary"][0]["text"] == "Let me think."
    assert out["output"][1]["content"][0]["text"] == "Paris."


def test_an_omitted_thinking_keeps_its_signature() -> None:
    """A thinking block whose text is omitted (an empty string) with its signature is still
    reasoning: its signature reaches a Responses client."""
    body = sdk_body("anthropic_thinking")
    block = next(b for b in body["content"] if b["type"] == "thinking")
    block["thinking"] = ""
    out = convert.answer(body, MESSAGES, RESPONSES, "m")
    item = next(i for i in out["output"] if i["type"] == "reasoning")
    assert item["encrypted_content"].endswith(block["signature"])
