"""The gateway's own errors: status, type and a message a person can act on, in the API's format."""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from tests.harness import CLIENT_KEY, Harness

AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}
CHAT = [{"role": "user", "content": "hi"}]


async def post(gw: Harness, path: str, body: Any, headers: dict[str, str] | None = None,
               raw: bytes | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:  # fmt: skip
    async with aiohttp.ClientSession() as s:
        kw: dict[str, Any] = {"data": raw} if raw is not None else {"json": body}
        async with s.post(gw.url + path, headers=headers or AUTH, **kw) as r:
            return r.status, await r.json(), {k.lower(): v for k, v in r.headers.items()}


@pytest.mark.parametrize(
    ("case", "status", "etype", "words"),
    [
        ("bad_json", 400, "invalid_request_error", "not valid JSON"),
        ("not_object", 400, "invalid_request_error", "must be a JSON object"),
        ("no_model", 400, "invalid_request_error", "has no 'model'"),
        ("no_key", 401, "authentication_error", "no API key"),
        ("wrong_key", 401, "authentication_error", "no team owns"),
        ("forbidden", 403, "permission_error", "may not use model 'forbidden-model'"),
        ("unknown_model", 404, "not_found_error", "GET /v1/models lists"),
        ("too_large", 413, "invalid_request_error", "larger than the gateway's limit"),
    ],
)
async def test_openai_format_errors(
    make_gateway: Any, case: str, status: int, etype: str, words: str
) -> None:
    """Each of the gateway's own refusals is an OpenAI-shaped error naming what to fix."""
    gw: Harness = await make_gateway(max_body_bytes=4096)
    path, body, headers, raw = (
        "/v1/chat/completions",
        {"model": "gpt-test", "messages": CHAT},
        AUTH,
        None,
    )
    if case == "bad_json":
        raw = b'{"model": "gpt-test", '
    elif case == "not_object":
        body = ["gpt-test"]
    elif case == "no_model":
        body = {"messages": CHAT}
    elif case == "no_key":
        headers = {"content-type": "application/json"}
    elif case == "wrong_key":
        headers = {"authorization": "Bearer not-a-key"}
    elif case == "forbidden":
        body = {"model": "forbidden-model", "messages": CHAT}
    elif case == "unknown_model":
        body = {"model": "gpt-nope", "messages": CHAT}
    elif case == "too_large":
        body = {"model": "gpt-test", "messages": [{"role": "user", "content": "x" * 8000}]}
    got, err, resp_headers = await post(gw, path, body, headers, raw)
    assert got == status
    assert err["error"]["type"] == etype
    assert words in err["error"]["message"]
    assert resp_headers["x-request-id"]
    assert gw.fake.requests == []  # nothing went upstream


@pytest.mark.parametrize(
    ("case", "status", "etype"),
    [("no_key", 401, "authentication_error"), ("unknown_model", 404, "not_found_error"),
     ("bad_json", 400, "invalid_request_error")],
)  # fmt: skip
async def test_anthropic_format_errors(gw: Harness, case: str, status: int, etype: str) -> None:
    """On /v1/messages the same refusals are Anthropic-shaped."""
    body: Any = {"model": "claude-test", "max_tokens": 10, "messages": CHAT}
    headers, raw = {"x-api-key": CLIENT_KEY}, None
    if case == "no_key":
        headers = {"content-type": "application/json"}
    elif case == "unknown_model":
        body = {**body, "model": "claude-nope"}
    else:
        raw = b"{"
    got, err, _ = await post(gw, "/v1/messages", body, headers, raw)
    assert got == status
    assert err["type"] == "error" and err["error"]["type"] == etype
    assert err["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "param", "words"),
    [
        ("/v1/chat/completions", {"messages": "hi"}, "messages", "'messages' must be an array"),
        ("/v1/chat/completions", {"messages": ["hi"]}, "messages[0]", "'messages[0]' must be"),
        ("/v1/chat/completions", {"messages": CHAT, "stream": "true"}, "stream", "true or false"),
        ("/v1/chat/completions", {"messages": CHAT, "max_tokens": "9"}, "max_tokens", "positive"),
        ("/v1/chat/completions", {"messages": CHAT, "max_completion_tokens": 0},
         "max_completion_tokens", "got the number 0"),
        ("/v1/responses", {"input": {"role": "user"}}, "input", "a string or an array"),
        ("/v1/responses", {"input": "hi", "max_output_tokens": True}, "max_output_tokens",
         "got true"),
        ("/v1/completions", {"prompt": 3}, "prompt", "a string or an array"),
        ("/v1/embeddings", {"input": None}, "input", "got null"),
    ],
)  # fmt: skip
async def test_wrong_field_types_are_openai_400s(
    gw: Harness, path: str, body: dict[str, Any], param: str, words: str
) -> None:
    """A field the gateway reads, of the wrong JSON type, is a 400 naming it (``param``)
    before anything goes upstream, not a provider's 400 after a round trip."""
    got, err, headers = await post(gw, path, {"model": "gpt-test", **body})
    assert got == 400, err
    assert err["error"]["type"] == "invalid_request_error"
    assert err["error"]["param"] == param and err["error"]["code"] == "invalid_request"
    assert words in err["error"]["message"]
    assert headers["x-request-id"]
    assert gw.fake.requests == []


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"messages": "hi"}, "'messages' must be an array of message objects, got a string"),
        ({"messages": [*CHAT, 5]}, "'messages[1]' must be a message object, got the number 5"),
        (
            {"system": {"text": "x"}},
            "'system' must be a string or an array of content blocks, got an object",
        ),
        ({"max_tokens": "1024"}, "'max_tokens' must be a positive integer, got a string"),
        ({"stream": "yes"}, "'stream' must be true or false, got a string"),
    ],
)
async def test_wrong_field_types_are_anthropic_400s(
    gw: Harness, body: dict[str, Any], words: str
) -> None:
    """On /v1/messages the same refusals are Anthropic-shaped, the message naming the field."""
    full = {"model": "claude-test", "max_tokens": 10, "messages": CHAT, **body}
    got, err, _ = await post(gw, "/v1/messages", full, {"x-api-key": CLIENT_KEY})
    assert got == 400
    assert err == {"type": "error", "error": {"type": "invalid_request_error", "message": words}}
    assert gw.fake.requests == []


async def test_sdks_see_the_field_named(gw: Harness) -> None:
    """The official SDKs raise their BadRequestError with the field: OpenAI in ``param``,
    Anthropic in the message; neither retries it."""
    with pytest.raises(openai.BadRequestError) as oa:
        await gw.async_openai().chat.completions.create(
            model="gpt-test", messages=CHAT, max_tokens="many"
        )
    assert oa.value.param == "max_tokens"
    with pytest.raises(anthropic.BadRequestError) as an:
        await gw.async_anthropic().messages.create(  # type: ignore[call-overload]
            model="claude-test", max_tokens=10, messages=CHAT, system=7
        )
    assert "'system' must be a string or an array" in an.value.message
    assert gw.fake.requests == []


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def _parts(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": "a"}] * n}]


#: (setting, value, a body at the limit, the same one past it); bodies of /v1/chat/completions.
LIMITS = [
    ("MAX_MESSAGES", 3, {"messages": CHAT * 3}, {"messages": CHAT * 4}),
    ("MAX_CONTENT_BLOCKS", 4, {"messages": _parts(3)}, {"messages": _parts(4)}),
    ("MAX_TOOLS", 2,
     {"messages": CHAT, "tools": [{"type": "function", "function": {"name": "f"}}] * 2},
     {"messages": CHAT, "tools": [{"type": "function", "function": {"name": "f"}}] * 3}),
    ("MAX_JSON_DEPTH", 16, {"messages": CHAT, "x": _nested(15)},
     {"messages": CHAT, "x": _nested(16)}),  # the body's own level, then "x"'s arrays
    ("MAX_JSON_CONTAINERS", 1000, {"messages": CHAT, "x": [[]] * 900},
     {"messages": CHAT, "x": [[]] * 1000}),
]  # fmt: skip


@pytest.mark.parametrize(("setting", "value", "at", "past"), LIMITS, ids=[c[0] for c in LIMITS])
async def test_each_request_limit_is_its_setting(
    make_gateway: Any,
    monkeypatch: pytest.MonkeyPatch,
    setting: str,
    value: int,
    at: dict[str, Any],
    past: dict[str, Any],
) -> None:
    """``GATEWAY_<setting>`` moves the limit: a body at it is served, one past it is a 400
    in the endpoint's format (the defaults are in tests/fuzz/test_request_limits.py)."""
    monkeypatch.setenv(f"GATEWAY_{setting}", str(value))
    gw: Harness = await make_gateway()
    async with aiohttp.ClientSession() as s:
        for body, status in ((at, 200), (past, 400)):
            async with s.post(
                gw.url + "/v1/chat/completions", json={"model": "gpt-test", **body}, headers=AUTH
            ) as r:
                answer = await r.json()
                assert r.status == status, (setting, status, answer)
    assert answer["error"]["type"] == "invalid_request_error"
    assert str(value) in answer["error"]["message"], answer
