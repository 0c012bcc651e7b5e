"""Error answers between the formats: the status kept, the body in the client's format, the
provider's message kept, the gateway's classification unchanged, the SDKs raising the
error class the status means."""

# Provider bodies are kept as the providers document them, so some table lines are long.

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

import anthropic
import openai
import orjson
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import Category
from gateway.resilience.classify import classify_response
from gateway.translate.errors import translate_error

NOW = 1_750_000_000.0


def j(obj: Any) -> bytes:
    return orjson.dumps(obj)


def oai(message: str, etype: str | None, code: str | None, param: str | None = None) -> bytes:
    return j({"error": {"message": message, "type": etype, "param": param, "code": code}})


def ant(etype: str, message: str) -> bytes:
    return j({"type": "error", "error": {"type": etype, "message": message}})


class O2A(NamedTuple):
    status: int
    body: bytes
    anthropic_type: str
    category: Category


# OpenAI bodies as https://platform.openai.com/docs/guides/error-codes shows them
OPENAI_ERRORS = [
    O2A(429, oai("Rate limit reached for gpt-4o in organization org-abc on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.", "requests", "rate_limit_exceeded"), "rate_limit_error", Category.rate_limit),
    O2A(429, oai("Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.", "tokens", "rate_limit_exceeded"), "rate_limit_error", Category.rate_limit),
    O2A(429, oai("You exceeded your current quota, please check your plan and billing details.", "insufficient_quota", "insufficient_quota"), "billing_error", Category.quota_exhausted),
    O2A(400, oai("This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens. Please reduce the length of the messages.", "invalid_request_error", "context_length_exceeded", "messages"), "invalid_request_error", Category.prompt_too_long),
    O2A(400, oai("Invalid value for 'temperature': expected a number.", "invalid_request_error", "invalid_value", "temperature"), "invalid_request_error", Category.invalid_request),
    O2A(401, oai("Incorrect API key provided: sk-abc. You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key"), "authentication_error", Category.auth),
    O2A(403, oai("Country, region, or territory not supported", "request_forbidden", "unsupported_country_region_territory"), "permission_error", Category.auth),
    O2A(404, oai("The model `gpt-9` does not exist or you do not have access to it.", "invalid_request_error", "model_not_found"), "not_found_error", Category.invalid_request),
    O2A(500, oai("The server had an error while processing your request. Sorry about that!", "server_error", None), "api_error", Category.server_error),
    O2A(503, oai("The engine is currently overloaded, please try again later.", "server_error", None), "overloaded_error", Category.server_overload),
    O2A(503, oai("The server is overloaded or not ready yet.", "server_error", "server_is_overloaded"), "overloaded_error", Category.server_overload),
]  # fmt: skip


class A2O(NamedTuple):
    status: int
    body: bytes
    openai_type: str
    code: str | None
    category: Category


# Anthropic bodies as https://docs.anthropic.com/en/api/errors shows them
ANTHROPIC_ERRORS = [
    A2O(400, ant("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"), "invalid_request_error", "context_length_exceeded", Category.prompt_too_long),
    A2O(400, ant("invalid_request_error", "max_tokens: Field required"), "invalid_request_error", None, Category.invalid_request),
    A2O(401, ant("authentication_error", "invalid x-api-key"), "authentication_error", "invalid_api_key", Category.auth),
    A2O(402, ant("billing_error", "Your credit balance is too low to access the Anthropic API."), "insufficient_quota", "insufficient_quota", Category.quota_exhausted),
    A2O(403, ant("permission_error", "Your API key does not have permission to use the specified resource."), "permission_error", None, Category.auth),
    A2O(404, ant("not_found_error", "model: claude-9"), "not_found_error", "model_not_found", Category.invalid_request),
    A2O(413, ant("request_too_large", "Request exceeds the maximum allowed number of bytes."), "invalid_request_error", "request_too_large", Category.prompt_too_long),
    A2O(429, ant("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"), "requests", "rate_limit_exceeded", Category.rate_limit),
    A2O(500, ant("api_error", "Internal server error"), "server_error", None, Category.server_error),
    A2O(504, ant("timeout_error", "Request timed out"), "server_error", "timeout_error", Category.timeout),
    A2O(529, ant("overloaded_error", "Overloaded"), "server_error", "server_is_overloaded", Category.server_overload),
]  # fmt: skip


def category(status: int, body: bytes) -> Category:
    return classify_response(status, {}, body, now=NOW).category


@pytest.mark.parametrize("row", OPENAI_ERRORS, ids=lambda r: f"{r.status}-{r.anthropic_type}")
def test_openai_errors_to_anthropic(row: O2A) -> None:
    """An OpenAI error becomes the Anthropic error of the same meaning, message kept."""
    out = orjson.loads(translate_error(row.status, row.body, "chat", "messages"))
    message = orjson.loads(row.body)["error"]["message"]
    assert out["type"] == "error" and set(out) == {"type", "error"}
    assert out["error"]["type"] == row.anthropic_type
    assert out["error"]["message"].endswith(message)


@pytest.mark.parametrize("row", ANTHROPIC_ERRORS, ids=lambda r: f"{r.status}-{r.openai_type}")
@pytest.mark.parametrize("target", ["chat", "responses"])
def test_anthropic_errors_to_openai(row: A2O, target: str) -> None:
    """An Anthropic error becomes the OpenAI-shaped error (chat and Responses alike) of the
    same meaning, message kept."""
    out = orjson.loads(translate_error(row.status, row.body, "messages", target))
    assert set(out) == {"error"} and set(out["error"]) == {"message", "type", "param", "code"}
    assert out["error"]["message"] == orjson.loads(row.body)["error"]["message"]
    assert (out["error"]["type"], out["error"]["code"]) == (row.openai_type, row.code)


@pytest.mark.parametrize("row", OPENAI_ERRORS, ids=lambda r: f"{r.status}-{r.anthropic_type}")
def test_classification_unchanged_from_openai(row: O2A) -> None:
    """The translated body classifies as the provider's did (docs/translation.md, Errors),
    token counts of a prompt too long included."""
    out = translate_error(row.status, row.body, "chat", "messages")
    assert category(row.status, row.body) == row.category == category(row.status, out)
    a = classify_response(row.status, {}, row.body, now=NOW)
    b = classify_response(row.status, {}, out, now=NOW)
    assert (a.prompt_tokens, a.context_limit) == (b.prompt_tokens, b.context_limit)


@pytest.mark.parametrize("row", ANTHROPIC_ERRORS, ids=lambda r: f"{r.status}-{r.openai_type}")
def test_classification_unchanged_from_anthropic(row: A2O) -> None:
    """The translated body classifies as the provider's did."""
    out = translate_error(row.status, row.body, "messages", "chat")
    assert category(row.status, row.body) == row.category == category(row.status, out)
    a = classify_response(row.status, {}, row.body, now=NOW)
    b = classify_response(row.status, {}, out, now=NOW)
    assert (a.prompt_tokens, a.context_limit) == (b.prompt_tokens, b.context_limit)


def test_prompt_too_long_stays_recognisable() -> None:
    """OpenAI's context_length_exceeded reads as Anthropic's "prompt is too long" (what its
    clients look for), with the provider's own text and counts after it."""
    body = OPENAI_ERRORS[3].body
    out = orjson.loads(translate_error(400, body, "chat", "messages"))
    assert out["error"]["message"] == (
        "prompt is too long: This model's maximum context length is 8192 tokens. However, "
        "your messages resulted in 9100 tokens. Please reduce the length of the messages."
    )
    back = orjson.loads(translate_error(400, j(out), "messages", "chat"))
    assert back["error"]["code"] == "context_length_exceeded"
    assert back["error"]["param"] == "messages"


def test_chat_and_responses_share_the_shape() -> None:
    """Between chat and Responses a well-formed error is passed on unchanged."""
    for row in OPENAI_ERRORS:
        assert translate_error(row.status, row.body, "chat", "responses") == row.body
        assert translate_error(row.status, row.body, "responses", "chat") == row.body


@pytest.mark.parametrize(
    ("status", "body", "message", "atype"),
    [
        (502, b"<html><body><h1>502 Bad Gateway</h1></body></html>", "upstream error (HTTP 502)", "api_error"),
        (503, b"upstream connect error or disconnect/reset before headers. reset reason: overflow", "upstream connect error or disconnect/reset before headers. reset reason: overflow", "overloaded_error"),
        (500, b"", "upstream error (HTTP 500)", "api_error"),
        (429, b'{"detail": "slow down"}', "slow down", "rate_limit_error"),
        (400, b"\xff\xfe\x00garbage", "upstream error (HTTP 400)", "invalid_request_error"),
        (418, b"[1, 2, 3]", "upstream error (HTTP 418)", "invalid_request_error"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("source", ["chat", "messages", "responses"])
def test_unparseable_bodies_become_generic_errors(
    status: int, body: bytes, message: str, atype: str, source: str
) -> None:
    """A body that holds no error object becomes a generic error of the target format with
    the status's meaning, its plain text as message."""
    a = orjson.loads(translate_error(status, body, source, "messages"))
    assert a == {"type": "error", "error": {"type": atype, "message": message}}
    o = orjson.loads(translate_error(status, body, source, "chat"))
    assert o["error"]["message"] == message and set(o["error"]) == {
        "message",
        "type",
        "param",
        "code",
    }


def test_the_shape_decides_when_the_source_is_wrong() -> None:
    """An OpenAI-shaped body from an Anthropic upstream (a compatible proxy) is still read."""
    out = orjson.loads(translate_error(429, OPENAI_ERRORS[0].body, "messages", "messages"))
    assert out["error"]["type"] == "rate_limit_error"
    out = orjson.loads(translate_error(529, ANTHROPIC_ERRORS[-1].body, "chat", "chat"))
    assert out["error"]["code"] == "server_is_overloaded"


@settings(max_examples=200, deadline=None)
@given(
    status=st.integers(100, 599),
    body=st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=20)),
            lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.sampled_from(
                ["error", "type", "message", "code", "param", "detail"]), c, max_size=4)),
            max_leaves=12,
        ).map(orjson.dumps),
    ),
    source=st.sampled_from(["chat", "messages", "responses"]),
    target=st.sampled_from(["chat", "messages", "responses"]),
)  # fmt: skip
def test_any_body_gives_a_well_formed_error(
    status: int, body: bytes, source: str, target: str
) -> None:
    """Whatever the body, the result is a well-formed error of the target format."""
    out = orjson.loads(translate_error(status, body, source, target))
    if target == "messages":
        assert out["type"] == "error"
        assert isinstance(out["error"]["type"], str) and isinstance(out["error"]["message"], str)
    else:
        assert isinstance(out["error"]["message"], str) and out["error"]["message"]


# ---------------------------------------------------------------- the SDKs


@pytest.fixture
async def error_server(
    aiohttp_server: Callable[..., Any],
) -> AsyncIterator[tuple[dict[str, Any], str]]:
    answer: dict[str, Any] = {}

    async def handle(request: web.Request) -> web.Response:
        return web.Response(
            status=answer["status"], body=answer["body"], content_type="application/json"
        )

    app = web.Application()
    for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
        app.router.add_post(path, handle)
    server = await aiohttp_server(app)
    yield answer, str(server.make_url(""))


OPENAI_CLASS = {400: openai.BadRequestError, 401: openai.AuthenticationError, 402: openai.APIStatusError,
                403: openai.PermissionDeniedError, 404: openai.NotFoundError, 413: openai.APIStatusError,
                429: openai.RateLimitError, 500: openai.InternalServerError, 503: openai.InternalServerError,
                504: openai.InternalServerError, 529: openai.InternalServerError}  # fmt: skip
ANTHROPIC_CLASS = {400: anthropic.BadRequestError, 401: anthropic.AuthenticationError,
                   403: anthropic.PermissionDeniedError, 404: anthropic.NotFoundError,
                   429: anthropic.RateLimitError, 500: anthropic.InternalServerError,
                   503: anthropic.InternalServerError}  # fmt: skip
# (503 may be a subclass of InternalServerError, ServiceUnavailableError, in newer SDKs)


@pytest.mark.parametrize("row", ANTHROPIC_ERRORS, ids=lambda r: f"{r.status}-{r.openai_type}")
async def test_openai_sdk_raises_on_a_translated_anthropic_error(
    error_server: tuple[dict[str, Any], str], row: A2O
) -> None:
    """The OpenAI SDK raises the class of the status, with the provider's message, its type
    and code readable."""
    answer, base = error_server
    answer.update(status=row.status, body=translate_error(row.status, row.body, "messages", "chat"))
    async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="k", max_retries=0) as client:
        with pytest.raises(openai.APIStatusError) as info:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )
    assert type(info.value) is OPENAI_CLASS[row.status]
    assert info.value.status_code == row.status
    assert (info.value.type, info.value.code) == (row.openai_type, row.code)
    assert orjson.loads(row.body)["error"]["message"] in info.value.message


@pytest.mark.parametrize("row", OPENAI_ERRORS, ids=lambda r: f"{r.status}-{r.anthropic_type}")
async def test_anthropic_sdk_raises_on_a_translated_openai_error(
    error_server: tuple[dict[str, Any], str], row: O2A
) -> None:
    """The Anthropic SDK raises the class of the status, with the provider's message and the
    Anthropic error type in its body."""
    answer, base = error_server
    answer.update(status=row.status, body=translate_error(row.status, row.body, "chat", "messages"))
    async with anthropic.AsyncAnthropic(base_url=base, api_key="k", max_retries=0) as client:
        with pytest.raises(anthropic.APIStatusError) as info:
            await client.messages.create(
                model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
    assert isinstance(info.value, ANTHROPIC_CLASS.get(row.status, anthropic.APIStatusError))
    assert info.value.status_code == row.status
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"]["type"] == row.anthropic_type
    assert orjson.loads(row.body)["error"]["message"] in str(info.value)
