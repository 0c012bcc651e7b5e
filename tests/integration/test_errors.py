"""The gateway's own errors: status, type and a message a person can act on, in the API's format."""

from __future__ import annotations

from typing import Any

import aiohttp
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
