"""The fake Gemini is what Google's own ``google-genai`` SDK accepts (gateway/testing/
fake_gemini.py): answers, streams, token counts, thought signatures, refusals and scripted
errors and faults, on real sockets; and the fake Vertex's native Gemini routes."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import google.oauth2.credentials
import pytest
from google import genai
from google.genai import errors, types

from gateway.testing import (
    DEFAULT_REPLY,
    CutAfter,
    Error,
    ErrorEventAfter,
    FakeGemini,
    FakeVertex,
    Success,
    tokens_of,
)
from gateway.testing.prompt_cache import PromptCache

# the SDK subclasses aiohttp's ClientSession, which aiohttp discourages with a warning
pytestmark = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession from ClientSession:DeprecationWarning"
)

FLASH = "gemini-2.5-flash"
PRO3 = "gemini-3-pro-preview"
KEY = "AIza-fake-key"
WEATHER = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="get_weather",
            description="The weather in a city.",
            parameters=types.Schema(
                type="OBJECT",
                properties={"city": types.Schema(type="STRING")},
                required=["city"],
            ),
        )
    ]
)
#: Tools offered, no automatic function calling (the test plays the client's part).
TOOLS = types.GenerateContentConfig(
    tools=[WEATHER],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeGemini]:
    async with FakeGemini(keys={KEY}) as f:
        yield f


@pytest.fixture
async def client(fake: FakeGemini) -> AsyncIterator[Any]:
    """The SDK's async client on the fake (no retries: the SDK's default)."""
    options = types.HttpOptions(base_url=fake.url)
    async with genai.Client(api_key=KEY, http_options=options).aio as c:
        yield c


def reply(model: str) -> str:
    return DEFAULT_REPLY.format(model=model)


async def test_generate_content_answers_text_and_usage(fake: FakeGemini, client: Any) -> None:
    """generateContent gets one candidate of the model's reply, STOP, the usage by the
    tokens rule; the request is recorded with its path's model and its key."""
    r = await client.models.generate_content(model=FLASH, contents="Say hello.")
    assert r.text == reply(FLASH)
    assert r.candidates[0].finish_reason == types.FinishReason.STOP
    assert r.model_version == FLASH and r.response_id
    usage = r.usage_metadata
    assert usage.prompt_token_count == tokens_of("Say hello.")
    assert usage.candidates_token_count == tokens_of(reply(FLASH))
    assert usage.total_token_count == usage.prompt_token_count + usage.candidates_token_count
    (req,) = fake.requests
    assert req.path == f"/v1/models/{FLASH}:generateContent"
    assert req.model == FLASH and req.key == KEY
    assert req.headers["x-goog-api-key"] == KEY
    assert "model" not in req.body and req.body["contents"][0]["role"] == "user"


async def test_stream_sends_the_reply_in_pieces_then_the_finish(
    fake: FakeGemini, client: Any
) -> None:
    """streamGenerateContent?alt=sse: the text in fake.chunks pieces, then a last chunk
    with the finish reason and the final usage."""
    chunks = [c async for c in await client.models.generate_content_stream(
        model=FLASH, contents="Say hello.")]  # fmt: skip
    assert "".join(c.text or "" for c in chunks) == reply(FLASH)
    assert len(chunks) == fake.chunks + 1
    assert [c.candidates[0].finish_reason for c in chunks[:-1]] == [None] * fake.chunks
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    assert chunks[-1].usage_metadata.candidates_token_count == tokens_of(reply(FLASH))
    assert fake.requests[0].path.endswith(":streamGenerateContent")
    assert fake.requests[0].query == {"alt": "sse"}


async def test_count_tokens(client: Any) -> None:
    r = await client.models.count_tokens(model=FLASH, contents="Count these words, please.")
    assert r.total_tokens == tokens_of("Count these words, please.")


async def test_a_function_call_round_trip_with_its_signature(fake: FakeGemini, client: Any) -> None:
    """A Gemini 3 model calls the tool the user names, with arguments from its schema and
    a thought signature it minted; sent back with it, the function response is answered."""
    ask = types.Content(role="user", parts=[types.Part(text="What does get_weather say?")])
    first = await client.models.generate_content(model=PRO3, contents=[ask], config=TOOLS)
    call = first.candidates[0].content
    (part,) = call.parts
    assert part.function_call.name == "get_weather"
    assert part.function_call.args == {"city": "fake city"}
    assert part.thought_signature in fake.signatures
    result = types.Part(
        function_response=types.FunctionResponse(name="get_weather", response={"temp": 21})
    )
    answer = types.Content(role="user", parts=[result])
    second = await client.models.generate_content(
        model=PRO3, contents=[ask, call, answer], config=TOOLS
    )
    assert second.text == 'The tool returned: {"temp": 21}'
    sent = fake.requests[-1].body["contents"][1]["parts"][0]
    assert base64.urlsafe_b64decode(sent["thoughtSignature"]) == part.thought_signature


async def test_a_function_call_without_its_signature_is_refused(
    fake: FakeGemini, client: Any
) -> None:
    """Stripped of its signature, the call in the current turn gets Gemini's 400; one the
    fake did not mint, "Corrupted thought signature."; Google's skip value passes."""
    ask = types.Content(role="user", parts=[types.Part(text="Call get_weather.")])
    first = await client.models.generate_content(model=PRO3, contents=[ask], config=TOOLS)
    call = first.candidates[0].content.parts[0].function_call
    result = types.Content(role="user", parts=[types.Part(
        function_response=types.FunctionResponse(name="get_weather", response={"temp": 21}))])  # fmt: skip

    def history(signature: bytes | None) -> list[types.Content]:
        said = types.Part(function_call=call, thought_signature=signature)
        return [ask, types.Content(role="model", parts=[said]), result]

    with pytest.raises(errors.ClientError) as missing:
        await client.models.generate_content(model=PRO3, contents=history(None), config=TOOLS)
    assert missing.value.code == 400 and missing.value.status == "INVALID_ARGUMENT"
    assert missing.value.message.startswith(
        "Function call is missing a thought_signature in functionCall parts."
    )
    assert "function call `default_api:get_weather` , position 2." in missing.value.message
    with pytest.raises(errors.ClientError) as forged:
        await client.models.generate_content(model=PRO3, contents=history(b"forged"), config=TOOLS)
    assert forged.value.message == "Corrupted thought signature."
    skip = b"skip_thought_signature_validator"
    r = await client.models.generate_content(model=PRO3, contents=history(skip), config=TOOLS)
    assert r.text.startswith("The tool returned:")
    # a model that does not require signatures takes the call without one
    r = await client.models.generate_content(model=FLASH, contents=history(None), config=TOOLS)
    assert r.text.startswith("The tool returned:")


async def test_a_schema_keyword_gemini_lacks_is_refused(client: Any) -> None:
    """``additionalProperties`` in ``parameters`` (the OpenAPI subset) is Google's JSON
    parser error, with its path; the same schema as ``parametersJsonSchema`` passes. (The
    SDK sends the keyword as ``additional_properties``, which Gemini refuses just the same:
    https://github.com/google/adk-python/issues/1277.)"""
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "additionalProperties": False}  # fmt: skip
    decl: dict[str, Any] = {"name": "get_weather", "parameters": schema}
    config = {"tools": [{"function_declarations": [decl]}],
              "automatic_function_calling": {"disable": True}}  # fmt: skip
    with pytest.raises(errors.ClientError) as refused:
        await client.models.generate_content(model=FLASH, contents="hi", config=config)
    assert refused.value.code == 400
    assert refused.value.message == (
        'Invalid JSON payload received. Unknown name "additional_properties" at '
        "'tools[0].function_declarations[0].parameters': Cannot find field."
    )
    (detail,) = refused.value.details["error"]["details"]
    assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert detail["fieldViolations"][0]["field"] == "tools[0].function_declarations[0].parameters"
    decl = {"name": "get_weather", "parameters_json_schema": schema}
    config["tools"] = [{"function_declarations": [decl]}]
    r = await client.models.generate_content(model=FLASH, contents="hi", config=config)
    assert r.text == reply(FLASH)


async def test_a_scripted_rate_limit_exposes_its_retry_info(fake: FakeGemini, client: Any) -> None:
    fake.push(Error.gemini_rate_limit(retry_delay="7s"), model=FLASH)
    with pytest.raises(errors.ClientError) as limited:
        await client.models.generate_content(model=FLASH, contents="hi")
    assert limited.value.code == 429 and limited.value.status == "RESOURCE_EXHAUSTED"
    details = {d["@type"].rsplit(".", 1)[1]: d for d in limited.value.details["error"]["details"]}
    assert details["RetryInfo"]["retryDelay"] == "7s"
    (violation,) = details["QuotaFailure"]["violations"]
    assert violation["quotaId"] == "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"
    assert limited.value.message.endswith("Please retry in 7s.")
    r = await client.models.generate_content(model=FLASH, contents="hi")  # the script is spent
    assert r.text == reply(FLASH)


async def test_server_errors_reach_the_sdk(fake: FakeGemini, client: Any) -> None:
    for error, status in ((Error.gemini_overloaded(), "UNAVAILABLE"),
                          (Error.gemini_internal(), "INTERNAL"),
                          (Error.gemini_deadline(), "DEADLINE_EXCEEDED")):  # fmt: skip
        fake.push(error)
        with pytest.raises(errors.ServerError) as failed:
            await client.models.generate_content(model=FLASH, contents="hi")
        assert (failed.value.code, failed.value.status) == (error.status, status)


async def test_max_output_tokens_cut_the_answer(client: Any) -> None:
    config = types.GenerateContentConfig(max_output_tokens=3)
    r = await client.models.generate_content(model=FLASH, contents="hi", config=config)
    assert r.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS
    assert r.text == reply(FLASH)[:12]


async def test_a_scripted_safety_finish(fake: FakeGemini, client: Any) -> None:
    """Success(finish_reason="SAFETY") ends the answer so, with the blocking rating; with
    no text the candidate has no content, as a blocked answer has none."""
    fake.push(Success(finish_reason="SAFETY"))
    r = await client.models.generate_content(model=FLASH, contents="hi")
    candidate = r.candidates[0]
    assert candidate.finish_reason == types.FinishReason.SAFETY
    assert candidate.safety_ratings[0].blocked is True
    fake.push(Success(text="", finish_reason="SAFETY"))
    r = await client.models.generate_content(model=FLASH, contents="hi")
    assert r.candidates[0].content is None and r.text is None
    fake.push(Success(finish_reason="MALFORMED_FUNCTION_CALL"))
    r = await client.models.generate_content(model=FLASH, contents="hi")
    assert r.candidates[0].finish_reason == types.FinishReason.MALFORMED_FUNCTION_CALL


async def test_a_cut_stream_fails_in_the_sdk(fake: FakeGemini, client: Any) -> None:
    """CutAfter(2): two chunks arrive, then the connection drops without a finish."""
    fake.push(CutAfter(2))
    got: list[str] = []
    with pytest.raises(Exception) as cut:  # the transport's error: the SDK wraps none
        async for chunk in await client.models.generate_content_stream(model=FLASH, contents="hi"):
            got.append(chunk.text)
    assert not isinstance(cut.value, errors.APIError)
    assert "".join(got) == reply(FLASH)[: len("".join(got))] and len(got) == 2


async def test_an_in_stream_error_is_raised_by_the_sdk(fake: FakeGemini, client: Any) -> None:
    fake.push(ErrorEventAfter(3))
    got: list[str] = []
    with pytest.raises(errors.ServerError) as failed:
        async for chunk in await client.models.generate_content_stream(model=FLASH, contents="hi"):
            got.append(chunk.text)
    assert len(got) == 3
    assert failed.value.code == 503 and failed.value.status == "UNAVAILABLE"


async def test_thoughts_come_first_and_are_counted(client: Any) -> None:
    config = types.GenerateContentConfig(
        thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=1024)
    )
    r = await client.models.generate_content(model=FLASH, contents="hi", config=config)
    thought, said = r.candidates[0].content.parts
    assert thought.thought is True and said.thought is None and said.text == reply(FLASH)
    usage = r.usage_metadata
    assert usage.thoughts_token_count == tokens_of(thought.text)
    assert usage.total_token_count == (
        usage.prompt_token_count + usage.candidates_token_count + usage.thoughts_token_count
    )


async def test_a_json_response_follows_its_schema(client: Any) -> None:
    config = types.GenerateContentConfig(
        response_mime_type="application/json",
        response_json_schema={"type": "object", "properties": {
            "score": {"type": "integer"}, "reason": {"type": "string"}}},
    )  # fmt: skip
    r = await client.models.generate_content(model=FLASH, contents="Rate it.", config=config)
    assert r.parsed == {"score": 1, "reason": "fake reason"}


async def test_the_context_window_refuses_a_long_prompt(fake: FakeGemini, client: Any) -> None:
    fake.context_window[FLASH] = 10
    with pytest.raises(errors.ClientError) as refused:
        await client.models.generate_content(model=FLASH, contents="x" * 44)
    assert refused.value.message == (
        "The input token count (11) exceeds the maximum number of tokens allowed (10)."
    )


async def test_implicit_cache_reports_cached_tokens(fake: FakeGemini, client: Any) -> None:
    """A second turn repeating a long first one reads it from the implicit cache."""
    fake.prompt_cache = PromptCache(minimum=16)
    system = "You read every file twice. " * 10
    config = types.GenerateContentConfig(system_instruction=system)
    first = await client.models.generate_content(model=FLASH, contents="One?", config=config)
    assert first.usage_metadata.cached_content_token_count is None
    turns = ["One?", first.candidates[0].content, "Two?"]
    second = await client.models.generate_content(model=FLASH, contents=turns, config=config)
    cached = second.usage_metadata.cached_content_token_count
    assert cached == tokens_of(system + "One?") and fake.cache_reads == cached


async def test_keys_are_checked(fake: FakeGemini) -> None:
    options = types.HttpOptions(base_url=fake.url)
    async with genai.Client(api_key="AIza-wrong", http_options=options).aio as wrong:
        with pytest.raises(errors.ClientError) as refused:
            await wrong.models.generate_content(model=FLASH, contents="hi")
    assert refused.value.code == 400
    assert refused.value.details["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    assert fake.requests[-1].key == "AIza-wrong"


async def test_models_are_listed(fake: FakeGemini, client: Any) -> None:
    fake.context_window[PRO3] = 200_000
    names = [m.name async for m in await client.models.list()]
    assert names == [f"models/{FLASH}", f"models/{PRO3}"]
    model = await client.models.get(model=PRO3)
    assert model.input_token_limit == 200_000


# --- the fake Vertex's native Gemini ---------------------------------------------------


@pytest.fixture
async def vertex() -> AsyncIterator[FakeVertex]:
    async with FakeVertex(tokens={"ya29.good"}, project="acme", region="us-central1") as f:
        yield f


def vertex_client(fake: FakeVertex, token: str = "ya29.good") -> Any:
    creds = google.oauth2.credentials.Credentials(token)
    return genai.Client(
        vertexai=True, project="acme", location="us-central1", credentials=creds,
        http_options=types.HttpOptions(base_url=fake.url),
    ).aio  # fmt: skip


async def test_vertex_serves_gemini_natively(vertex: FakeVertex) -> None:
    async with vertex_client(vertex) as client:
        r = await client.models.generate_content(model=FLASH, contents="Say hello.")
        assert r.text == reply(FLASH) and r.create_time is not None
        assert r.usage_metadata.traffic_type == types.TrafficType.ON_DEMAND
        chunks = [c async for c in await client.models.generate_content_stream(
            model=FLASH, contents="Say hello.")]  # fmt: skip
        assert "".join(c.text or "" for c in chunks) == reply(FLASH)
        counted = await client.models.count_tokens(model=FLASH, contents="Say hello.")
        assert counted.total_tokens == tokens_of("Say hello.")
    paths = [r.path for r in vertex.requests]
    prefix = "/v1beta1/projects/acme/locations/us-central1/publishers/google/models/" + FLASH
    assert paths == [prefix + m for m in (":generateContent", ":streamGenerateContent",
                                          ":countTokens")]  # fmt: skip
    assert {r.key for r in vertex.requests} == {"ya29.good"}


async def test_vertex_checks_the_token_and_scripts_gemini(vertex: FakeVertex) -> None:
    async with vertex_client(vertex, "ya29.revoked") as client:
        with pytest.raises(errors.ClientError) as refused:
            await client.models.generate_content(model=FLASH, contents="hi")
    assert refused.value.code == 401 and refused.value.status == "UNAUTHENTICATED"
    vertex.push(Error.gemini_overloaded(), model=PRO3)
    async with vertex_client(vertex) as client:
        with pytest.raises(errors.ServerError):
            await client.models.generate_content(model=PRO3, contents="hi")
        first = await client.models.generate_content(
            model=PRO3, contents="Call get_weather.", config=TOOLS
        )
        assert first.candidates[0].content.parts[0].thought_signature in vertex.signatures
