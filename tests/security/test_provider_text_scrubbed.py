"""A provider's error text that quotes the gateway's own credentials reaches the client
without them: relayed JSON errors, translated errors, stream error events and the errors
the gateway words itself from a provider's message.

Real sockets throughout: the official SDKs as clients, the real gateway, the fake
providers quoting the headers the gateway actually sent (the provider key, the Bedrock
session token, SigV4 access key id and signature).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.testing import Error, ErrorEventAfter, FakeProvider
from gateway.testing.bedrock_errors import BedrockError
from gateway.testing.fake_bedrock import FakeBedrock, stream_exception
from tests.clouds.cloud_env import isolate
from tests.harness import PROVIDER_KEY, Harness, platform_files, write_policies

QUOTED_KEY = "the key {authorization} is not allowed to use this model"


def clean(*texts: object, secrets: list[str]) -> None:
    joined = "\n".join(str(t) for t in texts)
    found = [s[:6] + "..." for s in secrets if s and s in joined]
    assert not found, f"secrets reached the client: {found}: {joined[:300]}"


async def failed_stream(
    claude: anthropic.AsyncAnthropic, model: str
) -> tuple[anthropic.APIError, list[str]]:
    """A Messages stream that must end in an error: the error and the events before it."""
    events: list[str] = []
    with pytest.raises(anthropic.APIError) as caught:
        async with claude.messages.stream(
            model=model, max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        ) as s:
            async for event in s:
                events.append(event.model_dump_json())
    return caught.value, events


def openai_error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


def anthropic_error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


async def test_relayed_json_error_quoting_the_provider_key(gw: Harness, fake: FakeProvider) -> None:
    """An OpenAI 400 quoting the gateway's Authorization header: the client's error keeps
    the message and the status, not the key."""
    fake.push(Error(400, openai_error(QUOTED_KEY), quote=("authorization",)), model="fake-model")
    client = gw.async_openai()
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}]
        )
    assert fake.requests[-1].headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    text = info.value.response.text
    clean(text, info.value, secrets=[PROVIDER_KEY])
    assert "is not allowed to use this model" in text


async def test_translated_error_quoting_the_provider_key(gw: Harness, fake: FakeProvider) -> None:
    """An OpenAI client on an Anthropic-format model: Anthropic's 400 quoting the
    ``x-api-key`` it got is translated without the key."""
    body = anthropic_error("invalid x-api-key {x-api-key} for this workspace")
    fake.push(Error(400, body, quote=("x-api-key",)), model="claude-test")
    client = gw.async_openai()
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(
            model="claude-test", messages=[{"role": "user", "content": "hi"}]
        )
    assert fake.requests[-1].headers["x-api-key"] == PROVIDER_KEY
    text = info.value.response.text
    clean(text, info.value, secrets=[PROVIDER_KEY])
    assert "for this workspace" in text


async def test_first_stream_event_quoting_the_key(gw: Harness, fake: FakeProvider) -> None:
    """An error as a stream's first event quoting the key: the gateway's own error, worded
    from the provider's message, without the key."""
    payload = openai_error(f"the key Bearer {PROVIDER_KEY} is revoked")
    payload["error"]["type"] = "invalid_request_error"
    fake.push(ErrorEventAfter(0, payload), model="fake-model")
    client = gw.async_openai()
    with pytest.raises(openai.APIError) as info:
        stream = await client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        async for _ in stream:
            pass
    response = getattr(info.value, "response", None)
    clean(info.value, response.text if response is not None else "", secrets=[PROVIDER_KEY])
    assert "is revoked" in str(info.value)


async def test_midstream_error_event_quoting_the_key(gw: Harness, fake: FakeProvider) -> None:
    """A chat stream cut by an error event quoting the key, read by an Anthropic client
    (translated) and by an OpenAI client: neither sees the key."""
    payload = openai_error(f"key {PROVIDER_KEY} over its quota")
    payload["error"]["type"] = "server_error"
    fake.push(ErrorEventAfter(2, payload), model="fake-model")
    client = gw.async_openai()
    seen: list[str] = []
    with pytest.raises(openai.APIError) as info:
        stream = await client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        async for chunk in stream:
            seen.append(chunk.model_dump_json())
    clean(info.value, *seen, secrets=[PROVIDER_KEY])
    assert "over its quota" in str(info.value)

    fake.push(ErrorEventAfter(2, payload), model="fake-model")
    error, events = await failed_stream(gw.async_anthropic(), "gpt-test")
    clean(error, *events, secrets=[PROVIDER_KEY])
    assert "over its quota" in str(error)


# ---- Bedrock: temporary credentials, SigV4 ------------------------------------------

BEDROCK_CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
ACCESS_KEY = "ASIAFAKESESSION0001"
SECRET_KEY = "fake-secret-key-for-the-session-0001"
SESSION_TOKEN = "IQoJb3JpZ2luX2VjEFAKE/session+token/0123456789abcdef=="


@dataclass
class Bedrock:
    fake: FakeBedrock
    gw: Harness

    def secrets(self) -> list[str]:
        found = [ACCESS_KEY, SECRET_KEY, SESSION_TOKEN]
        for r in self.fake.requests:
            auth = r.headers.get("authorization", "")
            found.append(auth.rsplit("Signature=", 1)[-1])
        return found


@pytest.fixture
async def bedrock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeProvider
) -> AsyncIterator[Bedrock]:
    isolate(monkeypatch, tmp_path / "home")
    async with FakeBedrock(region="us-east-1") as br:
        br.add_key(ACCESS_KEY, SECRET_KEY, SESSION_TOKEN)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION_TOKEN)
        files = platform_files(
            {"bedrock": {"api": "bedrock", "region": "us-east-1", "base_url": br.url}},
            {"claude-br": {"provider": "bedrock", "upstream_model": BEDROCK_CLAUDE}},
        )
        gw = await Harness(fake, write_policies(tmp_path / "p", files)).start()
        try:
            yield Bedrock(br, gw)
        finally:
            await gw.stop()


def quoting_validation() -> Error:
    """Bedrock's 400 quoting the request it refused: the session token, the Authorization
    header (access key id and signature)."""
    message = (
        "Malformed input request: x-amz-security-token={x-amz-security-token} "
        "authorization={authorization}, please reformat your input and try again."
    )
    return dataclasses.replace(
        BedrockError.validation(message), quote=("x-amz-security-token", "authorization")
    )


async def test_bedrock_400_quoting_the_session_token(bedrock: Bedrock) -> None:
    """Bedrock's 400 quoting the session token and the SigV4 header: the Anthropic client
    (same format) and an OpenAI client (translated) see the error without any of them."""
    bedrock.fake.push(quoting_validation(), model=BEDROCK_CLAUDE)
    claude = bedrock.gw.async_anthropic()
    with pytest.raises(anthropic.BadRequestError) as info:
        await claude.messages.create(
            model="claude-br", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        )
    sent = bedrock.fake.requests[-1].headers
    assert sent["x-amz-security-token"] == SESSION_TOKEN
    clean(info.value.response.text, info.value, secrets=bedrock.secrets())
    assert "please reformat your input" in info.value.response.text

    bedrock.fake.push(quoting_validation(), model=BEDROCK_CLAUDE)
    client = bedrock.gw.async_openai()
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(
            model="claude-br", messages=[{"role": "user", "content": "hi"}]
        )
    clean(caught.value.response.text, caught.value, secrets=bedrock.secrets())
    assert "please reformat your input" in caught.value.response.text


async def test_bedrock_stream_exception_quoting_the_session_token(bedrock: Bedrock) -> None:
    """An exception frame mid-stream quoting the session token: the client's stream ends
    with an error event that does not hold it."""
    message = f"token {SESSION_TOKEN} rejected by the model ({ACCESS_KEY})"
    bedrock.fake.push(stream_exception(2, "validationException", message), model=BEDROCK_CLAUDE)
    error, events = await failed_stream(bedrock.gw.async_anthropic(), "claude-br")
    clean(error, *events, secrets=bedrock.secrets())
    assert "rejected by the model" in str(error)
