"""The fake Vertex AI and the fake Azure OpenAI speak the real wire: the official SDKs
(``AsyncAnthropicVertex``, ``AsyncAzureOpenAI``, ``AsyncOpenAI``) reach them, parse their
answers and streams, and turn their refusals and scripted faults into their typed errors.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

try:  # the SDKs moved from httpx to httpx2; a cut stream may surface its error raw
    import httpx2 as _httpx
except ImportError:  # pragma: no cover
    import httpx as _httpx

from gateway.testing import (
    DEFAULT_REPLY,
    CutAfter,
    Error,
    ErrorEventAfter,
    FakeAzure,
    FakeVertex,
    azure_content_filter,
    azure_filtered_answer,
    azure_rate_limit,
    azure_server_error,
    tokens_of,
    vertex_resource_exhausted,
    vertex_server_error,
)

PROJECT, REGION = "acme-ml", "europe-west1"
TOKEN = "ya29.fake-access-token"
CLAUDE = "claude-sonnet-4-5@20250929"
GEMINI = "google/gemini-2.0-flash-001"
HELLO = [{"role": "user", "content": "Hello there"}]
CLAUDE_PATH = f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/{CLAUDE}"
COUNT_PATH = CLAUDE_PATH.removesuffix(CLAUDE) + "count-tokens:rawPredict"
CHAT_PATH = f"/v1/projects/{PROJECT}/locations/{REGION}/endpoints/openapi/chat/completions"

AZ_KEY, AZ_TOKEN = "az-key-1", "eyJ.fake-entra-token"
DEPLOYMENT, API_VERSION = "gpt-4o-prod", "2024-10-21"
ANTHROPIC_CUT_ERRORS = (anthropic.APIConnectionError, _httpx.TransportError)
#: The SDK fills in its own ``anthropic_version`` unless the body has one: Vertex's.
VERTEX_BODY: dict[str, Any] = {"extra_body": {"anthropic_version": "vertex-2023-10-16"}}


def reply(model: str) -> str:
    return DEFAULT_REPLY.format(model=model)


@pytest.fixture
async def fv() -> AsyncIterator[FakeVertex]:
    async with FakeVertex(tokens={TOKEN}, project=PROJECT, region=REGION) as fake:
        yield fake


@pytest.fixture
async def vertex(fv: FakeVertex) -> AsyncIterator[anthropic.AsyncAnthropicVertex]:
    async with anthropic.AsyncAnthropicVertex(
        region=REGION,
        project_id=PROJECT,
        access_token=TOKEN,
        base_url=fv.url + "/v1",
        max_retries=0,
        timeout=5,
    ) as client:
        yield client


@pytest.fixture
async def gemini(fv: FakeVertex) -> AsyncIterator[openai.AsyncOpenAI]:
    base = fv.url + CHAT_PATH.removesuffix("/chat/completions")
    async with openai.AsyncOpenAI(base_url=base, api_key=TOKEN, max_retries=0, timeout=5) as client:
        yield client


@pytest.fixture
async def fa() -> AsyncIterator[FakeAzure]:
    async with FakeAzure(
        keys={AZ_KEY}, tokens={AZ_TOKEN}, deployments={DEPLOYMENT, "embed-small", "instruct"}
    ) as fake:
        yield fake


@pytest.fixture
async def azure(fa: FakeAzure) -> AsyncIterator[openai.AsyncAzureOpenAI]:
    async with openai.AsyncAzureOpenAI(
        azure_endpoint=fa.url, api_key=AZ_KEY, api_version=API_VERSION, max_retries=0, timeout=5
    ) as client:
        yield client


async def raw_post(
    url: str, body: Any, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """POST ``body`` as JSON; the status and the decoded JSON answer."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers or {}) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


# --- Vertex: Claude -------------------------------------------------------------------


async def test_vertex_claude_json(fv: FakeVertex, vertex: anthropic.AsyncAnthropicVertex) -> None:
    """messages.create goes to rawPredict with Vertex's body; the answer is Anthropic's."""
    message = await vertex.messages.create(
        model=CLAUDE, max_tokens=100, messages=HELLO, **VERTEX_BODY
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == reply(CLAUDE)
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == tokens_of(reply(CLAUDE))
    sent = fv.requests[-1]
    assert sent.path == CLAUDE_PATH + ":rawPredict"
    assert sent.model == CLAUDE
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.body["anthropic_version"] == "vertex-2023-10-16"
    assert "model" not in sent.body


async def test_vertex_claude_stream(fv: FakeVertex, vertex: anthropic.AsyncAnthropicVertex) -> None:
    """A stream goes to streamRawPredict with ``stream: true``; the SDK joins the SSE."""
    async with vertex.messages.stream(
        model=CLAUDE, max_tokens=100, messages=HELLO, **VERTEX_BODY
    ) as stream:
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(pieces) == reply(CLAUDE)
    assert len(pieces) == fv.chunks
    assert final.stop_reason == "end_turn"
    sent = fv.requests[-1]
    assert sent.path == CLAUDE_PATH + ":streamRawPredict"
    assert sent.body["stream"] is True
    assert "model" not in sent.body


async def test_vertex_count_tokens(fv: FakeVertex, vertex: anthropic.AsyncAnthropicVertex) -> None:
    """count_tokens goes to count-tokens:rawPredict and answers the prompt's tokens."""
    fv.push(vertex_resource_exhausted())
    counted = await vertex.messages.count_tokens(model=CLAUDE, messages=HELLO, **VERTEX_BODY)
    assert counted.input_tokens == tokens_of("Hello there")
    assert fv.requests[-1].path.endswith("/models/count-tokens:rawPredict")
    assert fv.pending() == 1  # the token count is never scripted


async def test_vertex_version_checked(
    fv: FakeVertex, vertex: anthropic.AsyncAnthropicVertex
) -> None:
    """A body without Vertex's anthropic_version (the SDK's own default) is a 400."""
    fv.anthropic_versions = {"vertex-2023-10-16"}
    with pytest.raises(anthropic.BadRequestError) as info:
        await vertex.messages.create(
            model=CLAUDE, max_tokens=10, messages=HELLO,
            extra_body={"anthropic_version": "2023-06-01"},
        )  # fmt: skip
    assert "anthropic_version" in info.value.body["error"]["message"]


async def test_vertex_unknown_token_refused(fv: FakeVertex) -> None:
    """A token the fake did not issue gets Google's 401 UNAUTHENTICATED, script untouched."""
    fv.push(vertex_resource_exhausted())
    async with anthropic.AsyncAnthropicVertex(
        region=REGION, project_id=PROJECT, access_token="ya29.stolen",
        base_url=fv.url + "/v1", max_retries=0,
    ) as client:  # fmt: skip
        with pytest.raises(anthropic.AuthenticationError) as info:
            await client.messages.create(model=CLAUDE, max_tokens=10, messages=HELLO, **VERTEX_BODY)
    assert info.value.status_code == 401
    assert info.value.body["error"]["status"] == "UNAUTHENTICATED"
    assert info.value.body["error"]["message"].startswith(
        "Request had invalid authentication credentials"
    )
    assert fv.pending() == 1


async def test_vertex_missing_token_refused(fv: FakeVertex) -> None:
    """A request without any bearer token is refused with 401."""
    status, body = await raw_post(
        fv.url + CLAUDE_PATH + ":rawPredict",
        {"anthropic_version": "vertex-2023-10-16", "max_tokens": 5, "messages": HELLO},
    )
    assert status == 401
    assert body["error"]["code"] == 401


async def test_vertex_token_expires(fv: FakeVertex, vertex: anthropic.AsyncAnthropicVertex) -> None:
    """A predicate decides validity: once it says expired, the same token is refused."""
    expired: set[str] = set()
    fv.tokens = lambda token: token == TOKEN and token not in expired
    await vertex.messages.create(model=CLAUDE, max_tokens=10, messages=HELLO, **VERTEX_BODY)
    expired.add(TOKEN)
    with pytest.raises(anthropic.AuthenticationError):
        await vertex.messages.create(model=CLAUDE, max_tokens=10, messages=HELLO, **VERTEX_BODY)


async def test_vertex_other_project_denied(fv: FakeVertex) -> None:
    """A path naming another project than the fake's is a 403 PERMISSION_DENIED."""
    async with anthropic.AsyncAnthropicVertex(
        region=REGION, project_id="someone-else", access_token=TOKEN,
        base_url=fv.url + "/v1", max_retries=0,
    ) as client:  # fmt: skip
        with pytest.raises(anthropic.PermissionDeniedError) as info:
            await client.messages.create(model=CLAUDE, max_tokens=10, messages=HELLO, **VERTEX_BODY)
    assert info.value.body["error"]["status"] == "PERMISSION_DENIED"


@pytest.mark.parametrize(
    ("action", "body", "wording"),
    [
        ("rawPredict", {"model": CLAUDE}, "model: Extra inputs are not permitted"),
        ("rawPredict", {"anthropic_version": None}, "anthropic_version: Field required"),
        ("rawPredict", {"anthropic_version": "2023-06-01"}, "Input should be"),
        ("streamRawPredict", {}, "stream"),
        ("rawPredict", {"stream": True}, "stream"),
    ],
)
async def test_vertex_claude_body_checked(
    fv: FakeVertex, action: str, body: dict[str, Any], wording: str
) -> None:
    """A Claude body with a model, without Vertex's version or with a wrong stream is a 400."""
    sent = {"anthropic_version": "vertex-2023-10-16", "max_tokens": 5, "messages": HELLO}
    sent = {k: v for k, v in (sent | body).items() if v is not None}
    status, answer = await raw_post(
        fv.url + f"{CLAUDE_PATH}:{action}", sent, {"authorization": f"Bearer {TOKEN}"}
    )
    assert status == 400
    assert answer["error"]["type"] == "invalid_request_error"
    assert wording in answer["error"]["message"]


@pytest.mark.parametrize(
    ("messages", "beta", "wording"),
    [
        ([*HELLO, {"role": "system", "content": "Be brief."}], None,
         "messages.1: role must be user or assistant"),
        (HELLO, "interleaved-thinking-2025-05-14,claude-code-20250219",
         "Unexpected value(s) `claude-code-20250219` for the `anthropic-beta` header"),
    ],
)  # fmt: skip
async def test_vertex_refuses_system_turns_and_unknown_betas(
    fv: FakeVertex, messages: list[dict[str, Any]], beta: str | None, wording: str
) -> None:
    """A ``system`` turn in ``messages``, or a beta Vertex does not take, is a 400
    invalid_request_error, on rawPredict as on the token count."""
    headers = {"authorization": f"Bearer {TOKEN}"} | ({"anthropic-beta": beta} if beta else {})
    sent = {"anthropic_version": "vertex-2023-10-16", "max_tokens": 5, "messages": messages}
    counted = {**sent, "model": CLAUDE}
    for path, body in ((f"{CLAUDE_PATH}:rawPredict", sent), (COUNT_PATH, counted)):
        status, answer = await raw_post(fv.url + path, body, headers)
        assert status == 400
        assert answer["error"]["type"] == "invalid_request_error"
        assert wording in answer["error"]["message"]


async def test_vertex_resource_exhausted(
    fv: FakeVertex, vertex: anthropic.AsyncAnthropicVertex
) -> None:
    """A scripted RESOURCE_EXHAUSTED is the SDK's RateLimitError in Google's shape."""
    fv.push(vertex_resource_exhausted(), model=CLAUDE)
    with pytest.raises(anthropic.RateLimitError) as info:
        await vertex.messages.create(model=CLAUDE, max_tokens=10, messages=HELLO, **VERTEX_BODY)
    assert info.value.body["error"] == {
        "code": 429,
        "message": info.value.body["error"]["message"],
        "status": "RESOURCE_EXHAUSTED",
    }
    assert info.value.body["error"]["message"].startswith("Resource exhausted.")


@pytest.mark.parametrize(
    ("step", "status", "kind"),
    [
        (Error.anthropic_overloaded(), 529, "overloaded_error"),
        (vertex_server_error(503), 503, "UNAVAILABLE"),
        (vertex_server_error(500), 500, "INTERNAL"),
    ],
)
async def test_vertex_server_faults(
    fv: FakeVertex,
    vertex: anthropic.AsyncAnthropicVertex,
    step: Error,
    status: int,
    kind: str,
) -> None:
    """Anthropic's 529 and Google's 500/503 come back as status errors with their status."""
    fv.push(step, key=TOKEN)
    with pytest.raises(anthropic.APIStatusError) as info:
        await vertex.messages.create(model=CLAUDE, max_tokens=10, messages=HELLO, **VERTEX_BODY)
    assert info.value.status_code == status
    error = info.value.body["error"]
    assert kind in (error.get("type"), error.get("status"))


async def test_vertex_stream_cut(fv: FakeVertex, vertex: anthropic.AsyncAnthropicVertex) -> None:
    """The base fake's CutAfter cuts a streamRawPredict stream after n deltas."""
    fv.push(CutAfter(2), model=CLAUDE)
    pieces: list[str] = []
    with pytest.raises(ANTHROPIC_CUT_ERRORS):
        async with vertex.messages.stream(
            model=CLAUDE, max_tokens=100, messages=HELLO, **VERTEX_BODY
        ) as s:
            async for text in s.text_stream:
                pieces.append(text)
    assert len(pieces) == 2


async def test_vertex_stream_error_event(
    fv: FakeVertex, vertex: anthropic.AsyncAnthropicVertex
) -> None:
    """A mid-stream ``event: error`` (overloaded_error) reaches the SDK as on Anthropic."""
    fv.push(ErrorEventAfter(1))
    with pytest.raises(anthropic.APIStatusError) as info:
        async with vertex.messages.stream(
            model=CLAUDE, max_tokens=100, messages=HELLO, **VERTEX_BODY
        ) as s:
            async for _ in s:
                pass
    assert info.value.body["error"]["type"] == "overloaded_error"


async def test_vertex_prompt_too_long(
    fv: FakeVertex, vertex: anthropic.AsyncAnthropicVertex
) -> None:
    """A context window gives Anthropic's prompt-too-long 400 on the Claude route."""
    fv.context_window[CLAUDE] = 2
    with pytest.raises(anthropic.BadRequestError) as info:
        await vertex.messages.create(model=CLAUDE, max_tokens=1, messages=HELLO, **VERTEX_BODY)
    assert "prompt is too long" in info.value.body["error"]["message"]


# --- Vertex: OpenAI-compatible ----------------------------------------------------------


async def test_vertex_openai_chat(fv: FakeVertex, gemini: openai.AsyncOpenAI) -> None:
    """The OpenAI SDK reaches the OpenAI-compatible endpoint with the model in the body."""
    resp = await gemini.chat.completions.create(model=GEMINI, messages=HELLO)
    assert resp.choices[0].message.content == reply(GEMINI)
    assert resp.model == GEMINI
    assert fv.requests[-1].path == CHAT_PATH
    assert fv.requests[-1].model == GEMINI


async def test_vertex_openai_chat_stream(fv: FakeVertex, gemini: openai.AsyncOpenAI) -> None:
    """A chat stream on the OpenAI-compatible endpoint is OpenAI's SSE."""
    stream = await gemini.chat.completions.create(model=GEMINI, messages=HELLO, stream=True)
    pieces = [c.delta.content async for chunk in stream for c in chunk.choices if c.delta.content]
    assert "".join(pieces) == reply(GEMINI)


async def test_vertex_openai_faults(fv: FakeVertex, gemini: openai.AsyncOpenAI) -> None:
    """RESOURCE_EXHAUSTED and a bad token are the OpenAI SDK's typed errors."""
    fv.push(vertex_resource_exhausted(), model=GEMINI)
    with pytest.raises(openai.RateLimitError) as limited:
        await gemini.chat.completions.create(model=GEMINI, messages=HELLO)
    assert limited.value.status_code == 429
    fv.tokens = set()
    with pytest.raises(openai.AuthenticationError):
        await gemini.chat.completions.create(model=GEMINI, messages=HELLO)


# --- Azure: deployments ---------------------------------------------------------------


async def test_azure_chat_json(fa: FakeAzure, azure: openai.AsyncAzureOpenAI) -> None:
    """Chat goes to the deployment's path with api-version and api-key."""
    resp = await azure.chat.completions.create(model=DEPLOYMENT, messages=HELLO)
    assert resp.choices[0].message.content == reply(DEPLOYMENT)
    sent = fa.requests[-1]
    assert sent.path == f"/openai/deployments/{DEPLOYMENT}/chat/completions"
    assert sent.query["api-version"] == API_VERSION
    assert sent.headers["api-key"] == AZ_KEY
    assert "authorization" not in sent.headers
    assert sent.key == AZ_KEY


async def test_azure_chat_stream(fa: FakeAzure, azure: openai.AsyncAzureOpenAI) -> None:
    """A chat stream from a deployment is OpenAI's SSE."""
    stream = await azure.chat.completions.create(model=DEPLOYMENT, messages=HELLO, stream=True)
    pieces = [c.delta.content async for chunk in stream for c in chunk.choices if c.delta.content]
    assert "".join(pieces) == reply(DEPLOYMENT)
    assert len(pieces) == fa.chunks


async def test_azure_embeddings_and_completions(
    fa: FakeAzure, azure: openai.AsyncAzureOpenAI
) -> None:
    """Embeddings and legacy completions go to their deployments' paths."""
    vectors = await azure.embeddings.create(model="embed-small", input=["a", "b"])
    assert len(vectors.data) == 2
    assert fa.requests[-1].path == "/openai/deployments/embed-small/embeddings"
    done = await azure.completions.create(model="instruct", prompt="Say hi")
    assert done.choices[0].text == reply("instruct")
    assert fa.requests[-1].path == "/openai/deployments/instruct/completions"


async def test_azure_entra_token(fa: FakeAzure) -> None:
    """An Entra ID token is sent as a bearer and accepted; an unknown one is a 401."""
    async with openai.AsyncAzureOpenAI(
        azure_endpoint=fa.url, azure_ad_token=AZ_TOKEN, api_version=API_VERSION, max_retries=0
    ) as client:
        resp = await client.chat.completions.create(model=DEPLOYMENT, messages=HELLO)
    assert resp.choices[0].message.content == reply(DEPLOYMENT)
    assert fa.requests[-1].headers["authorization"] == f"Bearer {AZ_TOKEN}"
    async with openai.AsyncAzureOpenAI(
        azure_endpoint=fa.url, azure_ad_token="eyJ.other", api_version=API_VERSION, max_retries=0
    ) as client:
        with pytest.raises(openai.AuthenticationError) as info:
            await client.chat.completions.create(model=DEPLOYMENT, messages=HELLO)
    assert "Access token is missing, invalid" in info.value.message


async def test_azure_wrong_key(fa: FakeAzure) -> None:
    """A wrong api-key is Azure's 401, before the script is consulted."""
    fa.push(azure_server_error())
    async with openai.AsyncAzureOpenAI(
        azure_endpoint=fa.url, api_key="az-wrong", api_version=API_VERSION, max_retries=0
    ) as client:
        with pytest.raises(openai.AuthenticationError) as info:
            await client.chat.completions.create(model=DEPLOYMENT, messages=HELLO)
    assert info.value.status_code == 401
    assert info.value.body["code"] == "401"
    assert "invalid subscription key" in info.value.message
    assert fa.pending() == 1


async def test_azure_api_version_required(fa: FakeAzure) -> None:
    """Without api-version a deployment path is a 404 Resource not found."""
    status, body = await raw_post(
        fa.url + f"/openai/deployments/{DEPLOYMENT}/chat/completions",
        {"messages": HELLO},
        {"api-key": AZ_KEY},
    )
    assert status == 404
    assert body == {"error": {"code": "404", "message": "Resource not found"}}


async def test_azure_unknown_api_version(fa: FakeAzure) -> None:
    """An api-version the service does not have is a 400."""
    async with openai.AsyncAzureOpenAI(
        azure_endpoint=fa.url, api_key=AZ_KEY, api_version="2099-01-01", max_retries=0
    ) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model=DEPLOYMENT, messages=HELLO)
    assert info.value.body == {"code": "BadRequest", "message": "API version not supported"}


async def test_azure_unknown_deployment(azure: openai.AsyncAzureOpenAI) -> None:
    """A deployment the resource does not have is a 404 DeploymentNotFound."""
    with pytest.raises(openai.NotFoundError) as info:
        await azure.chat.completions.create(model="gpt-5-nowhere", messages=HELLO)
    assert info.value.code == "DeploymentNotFound"


async def test_azure_rate_limit(fa: FakeAzure, azure: openai.AsyncAzureOpenAI) -> None:
    """Azure's 429 carries retry-after-ms, retry-after, x-ratelimit-* and its wording."""
    fa.push(azure_rate_limit(retry_after=6), model=DEPLOYMENT)
    with pytest.raises(openai.RateLimitError) as info:
        await azure.chat.completions.create(model=DEPLOYMENT, messages=HELLO)
    headers = info.value.response.headers
    assert headers["retry-after-ms"] == "6000"
    assert headers["retry-after"] == "6"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    message = info.value.body["message"]
    assert message.startswith(
        "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version"
    )
    assert "Please retry after 6 seconds." in message


async def test_azure_rate_limit_without_hints(
    fa: FakeAzure, azure: openai.AsyncAzureOpenAI
) -> None:
    """``send`` picks the hints: with none, the 429 has no retry header."""
    fa.push(azure_rate_limit(retry_after=2, send=()), key=AZ_KEY)
    with pytest.raises(openai.RateLimitError) as info:
        await azure.chat.completions.create(model=DEPLOYMENT, messages=HELLO)
    assert "retry-after" not in info.value.response.headers
    assert "retry-after-ms" not in info.value.response.headers


async def test_azure_content_filter(fa: FakeAzure, azure: openai.AsyncAzureOpenAI) -> None:
    """A filtered prompt is a 400 content_filter with ResponsibleAIPolicyViolation inside."""
    fa.push(azure_content_filter(jailbreak=True))
    with pytest.raises(openai.BadRequestError) as info:
        await azure.chat.completions.create(model=DEPLOYMENT, messages=HELLO)
    assert info.value.code == "content_filter"
    assert info.value.param == "prompt"
    inner = info.value.body["innererror"]
    assert inner["code"] == "ResponsibleAIPolicyViolation"
    assert inner["content_filter_result"]["jailbreak"] == {"filtered": True, "detected": True}


async def test_azure_filtered_answer(fa: FakeAzure, azure: openai.AsyncAzureOpenAI) -> None:
    """An output filter ends the answer with finish_reason content_filter, JSON and stream."""
    fa.push(azure_filtered_answer("Partial"))
    resp = await azure.chat.completions.create(model=DEPLOYMENT, messages=HELLO)
    choice = resp.choices[0]
    assert (choice.message.content, choice.finish_reason) == ("Partial", "content_filter")
    assert choice.model_extra["content_filter_results"]["violence"]["filtered"] is True
    fa.push(azure_filtered_answer("Partial"))
    stream = await azure.chat.completions.create(model=DEPLOYMENT, messages=HELLO, stream=True)
    finishes = [c.finish_reason async for chunk in stream for c in chunk.choices if c.finish_reason]
    assert finishes == ["content_filter"]


async def test_azure_base_faults(fa: FakeAzure, azure: openai.AsyncAzureOpenAI) -> None:
    """The base fake's faults work on a deployment: a cut stream, a prompt too long."""
    fa.push(CutAfter(3), model=DEPLOYMENT)
    stream = await azure.chat.completions.create(model=DEPLOYMENT, messages=HELLO, stream=True)
    with pytest.raises(openai.APIConnectionError):
        async for _ in stream:
            pass
    fa.context_window[DEPLOYMENT] = 2
    with pytest.raises(openai.BadRequestError) as info:
        await azure.chat.completions.create(model=DEPLOYMENT, messages=HELLO)
    assert info.value.code == "context_length_exceeded"


# --- Azure: the v1 Responses route ------------------------------------------------------


async def test_azure_responses(fa: FakeAzure) -> None:
    """Responses at /openai/v1/responses: the model is the deployment, a key or a token."""
    for secret in (AZ_KEY, AZ_TOKEN):
        async with openai.AsyncOpenAI(
            base_url=fa.url + "/openai/v1", api_key=secret, max_retries=0
        ) as client:
            resp = await client.responses.create(model=DEPLOYMENT, input="Hello there")
        assert resp.output_text == reply(DEPLOYMENT)
        assert fa.requests[-1].path == "/openai/v1/responses"
    async with openai.AsyncOpenAI(
        base_url=fa.url + "/openai/v1", api_key=AZ_KEY, max_retries=0
    ) as client:
        with pytest.raises(openai.NotFoundError):
            await client.responses.create(model="gpt-5-nowhere", input="Hello")
        stream = await client.responses.create(model=DEPLOYMENT, input="Hi", stream=True)
        kinds = [event.type async for event in stream]
    assert kinds[-1] == "response.completed"
