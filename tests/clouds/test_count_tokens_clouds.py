"""Token counts on cloud deployments: Bedrock's CountTokens (signed, the InvokeModel body
wrapped in base64) and Vertex's ``count-tokens:rawPredict``, reached through the same
recovery as any request (a rate-limited deployment hands the count to the next at once)."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import anthropic
import pytest
from botocore.exceptions import ClientError

from gateway.testing import Error
from gateway.testing.bedrock_errors import BedrockError
from gateway.testing.conversation import parse_messages
from gateway.testing.fake_bedrock import FakeBedrock
from tests.clouds import test_clouds_e2e
from tests.clouds.test_clouds_e2e import BEDROCK_CLAUDE, CLAUDE, CLAUDE_CODE, VERTEX_CLAUDE, Clouds
from tests.clouds.test_fake_bedrock import INVOKE, call, client

clouds = test_clouds_e2e.clouds  # the end-to-end tests' fixture: the gateway and its fakes

MESSAGES: list[Any] = [{"role": "user", "content": "How many tokens is this prompt? " * 8}]
BETA = "token-counting-2024-11-01,interleaved-thinking-2025-05-14"


def _unwrapped(body: dict[str, Any]) -> dict[str, Any]:
    """The InvokeModel body a CountTokens body carries."""
    decoded: dict[str, Any] = json.loads(base64.b64decode(body["input"]["invokeModel"]["body"]))
    return decoded


async def test_anthropic_rate_limited_bedrock_counts_at_once(clouds: Clouds) -> None:
    """A 429 on Anthropic's count goes to the Bedrock deployment at once: a signed
    CountTokens whose body is the InvokeModel body (no model, Bedrock's version, a
    max_tokens, the client's betas Bedrock takes) in base64; the client gets Bedrock's count."""
    clouds.direct.push(Error.anthropic_rate_limit(retry_after=30), model=CLAUDE)
    client = clouds.gw.async_anthropic()
    started = time.monotonic()
    raw = await client.messages.with_raw_response.count_tokens(
        model=CLAUDE,
        messages=MESSAGES,
        extra_headers={"anthropic-beta": BETA},
        **{k: v for k, v in CLAUDE_CODE.items() if k != "metadata"},  # type: ignore[arg-type]
    )
    counted = await raw.parse()
    assert time.monotonic() - started < 1.0
    assert raw.headers["x-gateway-attempts"] == "2" and "x-gateway-estimate" not in raw.headers
    assert clouds.direct.requests[0].path == "/v1/messages/count_tokens"
    (call,) = clouds.bedrock.requests
    assert call.path == f"/model/{BEDROCK_CLAUDE.replace(':', '%3A')}/count-tokens"
    assert call.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")
    inner = _unwrapped(call.body)
    assert inner["anthropic_version"] == "bedrock-2023-05-31" and inner["max_tokens"] >= 1
    # of the client's betas, the one Bedrock takes (the other is named as dropped)
    assert inner["anthropic_beta"] == ["interleaved-thinking-2025-05-14"]
    assert raw.headers["x-gateway-dropped"] == "anthropic-beta:token-counting-2024-11-01"
    assert inner["messages"] == MESSAGES and inner["tools"] == CLAUDE_CODE["tools"]
    assert "model" not in inner and "stream" not in inner
    assert counted.input_tokens == parse_messages(inner).prompt_tokens > 50
    assert not clouds.vertex.requests


async def test_bedrock_throttled_vertex_counts(clouds: Clouds) -> None:
    """Anthropic overloaded, Bedrock throttled: Vertex counts, by count-tokens:rawPredict
    with a Google token and the Messages body naming the Vertex model."""
    clouds.direct.push(Error.anthropic_overloaded(), model=CLAUDE)
    clouds.bedrock.push(BedrockError.throttling(), model=BEDROCK_CLAUDE)
    client = clouds.gw.async_anthropic()
    raw = await client.messages.with_raw_response.count_tokens(
        model=CLAUDE, messages=MESSAGES, system="Count me."
    )
    counted = await raw.parse()
    assert raw.headers["x-gateway-attempts"] == "3"
    (call,) = clouds.vertex.requests
    assert call.path.endswith("/publishers/anthropic/models/count-tokens:rawPredict")
    assert "/projects/acme-ml/locations/europe-west1/" in call.path
    assert call.headers["authorization"].startswith("Bearer ")
    assert call.body["model"] == VERTEX_CLAUDE
    assert call.body["anthropic_version"] == "vertex-2023-10-16"
    assert counted.input_tokens == parse_messages(call.body).prompt_tokens > 50


async def test_invalid_count_not_tried_elsewhere(clouds: Clouds) -> None:
    """A count the first deployment refuses as invalid (400) is not tried on the others:
    the client gets the error in Anthropic's shape."""
    bad = Error.bad_request("messages: text content blocks must be non-empty")
    clouds.direct.push(bad, model=CLAUDE)
    client = clouds.gw.async_anthropic()
    with pytest.raises(anthropic.BadRequestError) as e:
        await client.messages.count_tokens(model=CLAUDE, messages=MESSAGES)
    assert e.value.body["type"] == "error"  # type: ignore[index]
    assert "non-empty" in e.value.body["error"]["message"]  # type: ignore[index]
    assert not clouds.bedrock.requests


async def test_converse_model_estimated(clouds: Clouds) -> None:
    """A Bedrock model spoken to by Converse has no Messages count: the gateway estimates,
    with no call to Bedrock."""
    client = clouds.gw.async_anthropic()
    raw = await client.messages.with_raw_response.count_tokens(model="nova-pro", messages=MESSAGES)
    assert raw.headers["x-gateway-estimate"] == "true"
    assert (await raw.parse()).input_tokens > 50
    assert not clouds.bedrock.requests


async def test_fake_bedrock_counts_for_botocore() -> None:
    """The fake's CountTokens is what botocore's own count_tokens sends (the body in
    base64, signed); a body that is not an InvokeModel body is Bedrock's 400."""
    async with FakeBedrock() as fake:
        c = client(fake)
        try:
            inner = json.dumps(INVOKE).encode()
            r = await call(
                c.count_tokens, modelId=BEDROCK_CLAUDE, input={"invokeModel": {"body": inner}}
            )
            assert r["inputTokens"] == parse_messages(INVOKE).prompt_tokens > 0
            no_tokens = json.dumps({**INVOKE, "max_tokens": None} | {"stream": True}).encode()
            with pytest.raises(ClientError) as e:
                await call(c.count_tokens, modelId=BEDROCK_CLAUDE,
                           input={"invokeModel": {"body": no_tokens}})  # fmt: skip
        finally:
            c.close()
    assert e.value.response["Error"]["Code"] == "ValidationException"
    assert "stream" in e.value.response["Error"]["Message"]
