"""Large bodies decoded and encoded without extra copies: the same values and the same
bytes as ``orjson``, whatever the body holds, and the long strings shared, not copied."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.formats import body_parts
from gateway.formats.body_parts import LONG, Parts, decode, encode, restore
from gateway.upstream.client import Body

BASE64 = "iVBORw0KGgo" + "QUJD" * (LONG // 4)


def whole(data: bytes | Parts) -> bytes:
    """What :class:`Body` writes for ``data``, gathered."""
    written: list[bytes] = []

    class Writer:
        async def write(self, chunk: Any) -> None:
            written.append(bytes(chunk))

    body = Body(data)
    shown = body.decode()  # leaves the body to be written
    asyncio.run(body.write(Writer()))  # type: ignore[arg-type]
    out = b"".join(written)
    assert len(out) == body.size and out.decode() == shown
    return out


def decoded(raw: bytes) -> Any:
    """The body as the gateway decodes it (gateway/web/handlers.py parse_body)."""
    value, strings = decode(raw)
    if not strings:
        return value
    restored = restore(value, strings)
    return restored if restored is not None else orjson.loads(raw)


BODIES = [
    {"model": "m", "messages": [{"role": "user", "content": BASE64}]},
    {"a": [BASE64, {"b": BASE64 + "x"}, 1, None], "c": "short", "d": BASE64[:-7]},
    {"text": "é" * LONG + '"\\\n\x00', "n": [1.5, -2, True]},  # escapes, not ASCII
    {"messages": [{"content": [{"type": "image", "source": {"data": BASE64}}]}] * 3},
]


@pytest.mark.parametrize("body", BODIES, ids=["one", "nested", "escapes", "blocks"])
def test_encoded_as_orjson_writes_it(body: dict[str, Any]) -> None:
    """Parts hold every long string apart, and the bytes written are orjson's."""
    data = encode(body)
    assert isinstance(data, Parts)
    assert whole(data) == orjson.dumps(body)


def test_a_small_body_is_encoded_whole() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * (LONG - 1)}]}
    assert encode(body) == orjson.dumps(body)


def test_a_data_url_is_sent_from_the_clients_base64() -> None:
    """A translation's data URL that ends with the client's base64 is sent as its start
    and the client's own string: the translation's copy is not held."""
    client = {"messages": [{"content": [{"type": "image", "source": {"data": BASE64}}]}]}
    url = "data:image/png;base64," + BASE64
    translated = {"messages": [{"content": [{"type": "image_url", "image_url": {"url": url}}]}]}
    data = encode(translated, client)
    assert isinstance(data, Parts)
    ((start, tail),) = data.strings
    assert start == "data:image/png;base64," and tail is BASE64
    assert whole(data) == orjson.dumps(translated)


@pytest.mark.parametrize("body", BODIES, ids=["one", "nested", "escapes", "blocks"])
def test_decoded_as_orjson_reads_it(body: dict[str, Any]) -> None:
    raw = orjson.dumps(body)
    assert decoded(raw) == orjson.loads(raw)


def test_long_plain_strings_are_taken_out_of_the_bytes() -> None:
    """A long base64 string is held apart (a mark in the value), once."""
    raw = orjson.dumps({"m": [{"data": BASE64}], "k": 1})
    value, strings = decode(raw)
    assert list(strings.values()) == [BASE64]
    assert value["m"][0]["data"] in strings and value["k"] == 1


@pytest.mark.parametrize(
    "raw",
    [
        b'{"' + BASE64.encode() + b'": 1}',  # a long key
        b'{"a": "x", "b": "' + BASE64.encode() + b'", "a": "' + BASE64.encode() + b'y"}',
        b'{"a": "' + BASE64.encode() + b'", "a": 2}',  # a key given twice
        b'{"n": [' + b"1," * LONG + b'1], "s": "t"}',  # a long run outside strings
        b'{"s": "a\\"' + BASE64.encode() + b'", "t": 1}',  # after an escaped quote
        b'[{"s": "' + BASE64.encode() + b'"}]',
    ],
    ids=["long key", "given twice", "twice, last", "numbers", "escaped quote", "array"],
)
def test_what_cannot_be_told_for_sure_is_decoded_whole(raw: bytes) -> None:
    assert decoded(raw) == orjson.loads(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": "' + BASE64.encode() + b"}",  # never closed
        b'{"a": "' + BASE64.encode() + b'" "b": 1}',  # no comma
        b'{"a": 1, ' + BASE64.encode() + b'"}',
    ],
    ids=["never closed", "no comma", "bare"],
)
def test_invalid_json_fails_as_orjson_fails(raw: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError) as ours:
        decoded(raw)
    with pytest.raises(orjson.JSONDecodeError) as theirs:
        orjson.loads(raw)
    assert str(ours.value) == str(theirs.value)


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Long strings from 8 characters: any JSON can be tried quickly."""
    monkeypatch.setattr(body_parts, "LONG", 8)
    monkeypatch.setattr(body_parts, "_WINDOW", 4)
    monkeypatch.setattr(body_parts, "SLICE", 3)
    yield


TEXT = st.text(alphabet=st.sampled_from('ab"\\{}[],: \n\x00é\U0001f600'), max_size=20)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.dictionaries(TEXT, JSON, max_size=5), tweak=st.integers(0, 40))
def test_any_json_the_same_value_and_the_same_bytes(small: None, value: Any, tweak: int) -> None:
    """Any body, and any body with one byte taken out: decoded as orjson decodes it (or
    refused as orjson refuses it), encoded as orjson encodes it."""
    raw = orjson.dumps(value)
    assert decoded(raw) == value
    assert whole(encode(value)) == raw
    cut = raw[:tweak] + raw[tweak + 1 :]
    try:
        expected = orjson.loads(cut)
    except orjson.JSONDecodeError:
        with pytest.raises(orjson.JSONDecodeError):
            decoded(cut)
    else:
        assert decoded(cut) == expected


async def test_large_bodies_reach_the_provider_as_sent(gw: Any, fake: Any) -> None:
    """Through the gateway on real sockets: a chat body with long plain, escaped and
    non-ASCII strings arrives as the client sent it; a Messages image translated for an
    OpenAI-format model arrives as its data URL."""
    import aiohttp

    from tests.harness import CLIENT_KEY

    messages = [
        {"role": "system", "content": BASE64},
        {"role": "user", "content": 'line "one"\n\\ é 😀 ' * (LONG // 10)},
        {"role": "user", "content": [{"type": "text", "text": BASE64 + "tail"}]},
    ]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": BASE64}}  # fmt: skip
    headers = {"authorization": f"Bearer {CLIENT_KEY}", "content-type": "application/json"}
    chat = {"model": "gpt-test", "messages": messages, "max_tokens": 5}
    claude = {"model": "gpt-test", "max_tokens": 5,
              "messages": [{"role": "user", "content": [image]}]}  # fmt: skip
    async with aiohttp.ClientSession() as s:
        data = io.BytesIO(orjson.dumps(chat))  # aiohttp warns about a large bytes body
        async with s.post(gw.url + "/v1/chat/completions", data=data, headers=headers) as r:
            assert r.status == 200, await r.text()
        assert fake.requests[-1].body["messages"] == messages
        data = io.BytesIO(orjson.dumps(claude))
        async with s.post(gw.url + "/v1/messages", data=data, headers=headers) as r:
            assert r.status == 200, await r.text()
    (part,) = fake.requests[-1].body["messages"][0]["content"]
    assert part["image_url"]["url"] == "data:image/png;base64," + BASE64
