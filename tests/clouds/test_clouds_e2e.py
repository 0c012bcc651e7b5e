"""Cloud deployments end to end: the official SDKs through the real gateway to fake
Anthropic, Bedrock, Vertex, OpenAI and Azure servers, each checking what its cloud checks
(SigV4 signatures, Google tokens, api-key and api-version), with real credentials
libraries finding and refreshing credentials."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from gateway.policy.merge import deep_merge
from gateway.routing.policyset import hash_key
from gateway.testing import CutAfter, Error, FakeProvider
from gateway.testing.bedrock_errors import BedrockError
from gateway.testing.fake_azure import FakeAzure, azure_content_filter
from gateway.testing.fake_bedrock import FakeBedrock, stream_exception
from gateway.testing.fake_google_token import FakeGoogleToken
from gateway.testing.fake_vertex import FakeVertex
from tests.clouds.cloud_env import isolate, leaked
from tests.harness import CLIENT_KEY, FAST_POLICY, Harness, write_policies
from tests.integration.test_tracing import Collector
from tests.log_sink import Sink

CLAUDE = "claude-sonnet-4-5"
BEDROCK_CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX_CLAUDE = "claude-sonnet-4-5@20250929"
NOVA = "amazon.nova-pro-v1:0"
GEMINI = "google/gemini-2.0-flash-001"
BEDROCK_API_KEY = "bedrock-api-key-0123456789abcdef"
AZURE_KEY = "azure-secret-key-0123456789"
PROVIDER_KEY = "direct-provider-secret-key"
REPLY = "Streams carry an answer piece by piece, and a gateway keeps them whole when one breaks."


@dataclass
class Clouds:
    direct: FakeProvider  # Anthropic and OpenAI themselves
    bedrock: FakeBedrock
    vertex: FakeVertex
    azure: FakeAzure
    google: FakeGoogleToken
    gw: Harness
    logs: Sink

    def secrets(self) -> list[str]:
        """Every credential the gateway held or sent: none may show anywhere."""
        found = [self.bedrock.secret_key, self.bedrock.access_key, AZURE_KEY, PROVIDER_KEY]
        found.append(BEDROCK_API_KEY)
        found += list(self.google.issued)
        for fake in (self.bedrock, self.vertex, self.azure):
            for r in fake.requests:
                auth = r.headers.get("authorization") or r.headers.get("Authorization")
                if auth:
                    found.append(auth.rsplit("=", 1)[-1] if "Signature=" in auth else auth[7:])
        return found


def policy(urls: dict[str, str]) -> dict[str, Any]:
    return {
        "platform.yaml": {
            "providers": {
                "anthropic": {
                    "api": "anthropic",
                    "base_url": urls["direct"],
                    "api_key_env": "DIRECT_KEY",
                },
                "openai": {
                    "api": "openai",
                    "base_url": urls["direct"] + "/v1",
                    "api_key_env": "DIRECT_KEY",
                },
                "bedrock-us": {
                    "api": "bedrock",
                    "region": "us-east-1",
                    "base_url": urls["bedrock"],
                },
                "vertex-eu": {
                    "api": "vertex",
                    "project": "acme-ml",
                    "region": "europe-west1",
                    "base_url": urls["vertex"],
                },
                "azure-eu": {
                    "api": "azure",
                    "base_url": urls["azure"],
                    "api_key_env": "AZURE_EU_KEY",
                },
                "bedrock-key": {
                    "api": "bedrock",
                    "region": "us-east-1",
                    "base_url": urls["bedrock"],
                    "api_key_env": "BEDROCK_API_KEY",
                },
            },
            "models": {
                CLAUDE: {
                    "deployments": [
                        {"provider": "anthropic", "upstream_model": CLAUDE},
                        {"provider": "bedrock-us", "upstream_model": BEDROCK_CLAUDE},
                        {"provider": "vertex-eu", "upstream_model": VERTEX_CLAUDE},
                    ],
                    "balance": "ordered",
                    "prefill": True,
                },
                "gpt-4o": {
                    "deployments": [
                        {"provider": "openai"},
                        {"provider": "azure-eu", "upstream_model": "gpt-4o-prod"},
                    ],
                    "balance": "ordered",
                },
                "nova-pro": {"provider": "bedrock-us", "upstream_model": NOVA},
                "claude-keyed": {
                    "provider": "bedrock-key",
                    "upstream_model": BEDROCK_CLAUDE,
                    "prefill": True,
                },
                "gemini-flash": {"provider": "vertex-eu", "upstream_model": GEMINI},
                # Claude on one cloud only, under a name of the platform's choosing
                "claude-bedrock": {"provider": "bedrock-us", "upstream_model": BEDROCK_CLAUDE},
                "claude-vertex": {"provider": "vertex-eu", "upstream_model": VERTEX_CLAUDE},
            },
            "policies": {
                "fast": deep_merge(FAST_POLICY, {"stream": {"on_midstream_failure": "continue"}})
            },
        },
        "teams/apps.yaml": {
            "teams": {
                "apps": {
                    "keys": [hash_key(CLIENT_KEY)],
                    "routes": [{"match": {"model": "*"}, "policy": "fast"}],
                }
            }
        },
    }


@pytest.fixture
async def clouds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_sink: Sink
) -> AsyncIterator[Clouds]:
    isolate(monkeypatch, tmp_path / "home")
    async with (
        FakeProvider() as direct,
        FakeBedrock(region="us-east-1") as bedrock,
        FakeGoogleToken() as google,
    ):
        vertex = FakeVertex(tokens=google.valid, project="acme-ml", region="europe-west1")
        azure = FakeAzure(keys={AZURE_KEY}, deployments={"gpt-4o-prod"})
        await vertex.start()
        await azure.start()
        monkeypatch.setenv("DIRECT_KEY", PROVIDER_KEY)
        monkeypatch.setenv("AZURE_EU_KEY", AZURE_KEY)
        monkeypatch.setenv("BEDROCK_API_KEY", BEDROCK_API_KEY)
        bedrock.add_api_key(BEDROCK_API_KEY)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", bedrock.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", bedrock.secret_key)
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS", str(google.service_account_file(tmp_path))
        )
        urls = {"direct": direct.url, "bedrock": bedrock.url, "vertex": vertex.url,
                "azure": azure.url}  # fmt: skip
        log_sink.configure()
        gw = await Harness(direct, write_policies(tmp_path / "p", policy(urls))).start()
        try:
            yield Clouds(direct, bedrock, vertex, azure, google, gw, log_sink)
        finally:
            await gw.stop()
            await vertex.stop()
            await azure.stop()


CLAUDE_CODE = {
    "system": [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."}
    ],
    "tools": [
        {
            "name": "Bash",
            "description": "Executes a given bash command",
            "input_schema": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        }
    ],
    "metadata": {"user_id": "user_abc_account_def_session_ghi"},
}


async def event(sink: Sink, name: str, seconds: float = 3.0) -> dict[str, Any]:
    """The first log line of event ``name`` (waiting for it up to ``seconds``)."""
    deadline = time.monotonic() + seconds
    while True:
        found = [e for e in sink.lines() if e.get("event") == name]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no {name} event"
        await asyncio.sleep(0.02)


async def test_anthropic_overloaded_goes_to_bedrock_at_once(clouds: Clouds) -> None:
    """Claude Code's request shape on a model served by Anthropic, Bedrock and Vertex: a
    529 on Anthropic is answered by Bedrock on the next attempt, with no wait; Bedrock got
    a signed InvokeModel with its own body and the client's betas in it."""
    clouds.direct.push(Error.anthropic_overloaded(), model=CLAUDE)
    client = clouds.gw.async_anthropic()
    raw = await client.messages.with_raw_response.create(
        model=CLAUDE,
        max_tokens=200,
        messages=[{"role": "user", "content": "say hello"}],
        extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
        extra_query={"beta": "true"},
        **CLAUDE_CODE,  # type: ignore[arg-type]
    )
    msg = await raw.parse()
    assert raw.headers["x-gateway-attempts"] == "2"
    assert BEDROCK_CLAUDE in msg.content[0].text  # type: ignore[union-attr]
    (call,) = clouds.bedrock.requests
    assert call.path.endswith("/invoke") and call.body["anthropic_version"] == "bedrock-2023-05-31"
    assert call.body["anthropic_beta"] == ["interleaved-thinking-2025-05-14"]
    assert "model" not in call.body and "beta" not in call.path
    assert call.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=")
    assert not clouds.vertex.requests


async def test_bedrock_throttle_goes_to_vertex_at_once_streaming(clouds: Clouds) -> None:
    """A stream: Anthropic overloaded, then Bedrock throttled: Vertex answers (with a
    Google token and rawPredict's body) on the third attempt, within the first second."""
    clouds.direct.push(Error.anthropic_overloaded(), model=CLAUDE)
    clouds.bedrock.push(BedrockError.throttling(), model=BEDROCK_CLAUDE)
    client = clouds.gw.async_anthropic()
    async with client.messages.stream(
        model=CLAUDE, max_tokens=200, messages=[{"role": "user", "content": "hello"}]
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
    assert VERTEX_CLAUDE in text
    (call,) = clouds.vertex.requests
    assert call.path.endswith(f"/models/{VERTEX_CLAUDE}:streamRawPredict")
    assert call.body["anthropic_version"] == "vertex-2023-10-16"
    assert clouds.google.valid(call.headers["authorization"][7:])
    line = await event(clouds.logs, "request_completed")
    assert line["attempts"] == 3 and line["duration_s"] < 1.0


async def test_a_stream_cut_on_bedrock_is_resumed(clouds: Clouds) -> None:
    """Bedrock's event stream cut after three deltas: the client's stream goes on (resumed)
    and reads the whole answer once."""
    clouds.direct.push(Error.anthropic_overloaded(), model=CLAUDE)
    clouds.bedrock.push(CutAfter(3), model=BEDROCK_CLAUDE)
    client = clouds.gw.async_anthropic()
    for fake, model in ((clouds.bedrock, BEDROCK_CLAUDE), (clouds.vertex, VERTEX_CLAUDE)):
        fake.reply[model] = REPLY
    async with client.messages.stream(
        model=CLAUDE, max_tokens=300, messages=[{"role": "user", "content": "hello"}]
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
        final = await stream.get_final_message()
    assert text == REPLY
    assert final.stop_reason == "end_turn"
    line = await event(clouds.logs, "stream_interrupted")
    assert line["action"] == "resume"
    resumed = clouds.bedrock.requests[-1]
    assert resumed.path.endswith("/invoke-with-response-stream")
    assert resumed.body["messages"][-1]["role"] == "assistant"  # resumed by prefill


@pytest.mark.parametrize("api", ["messages", "chat"])
async def test_a_bedrock_stream_reset_after_its_first_event_is_recovery(
    clouds: Clouds, api: str
) -> None:
    """Bedrock's event stream reset after ``message_start`` (its input tokens), before any
    text: retried, and the failed attempt is recovery as Bedrock counted it (the prompt
    the answer's attempt counts too), for a Messages client (the events as they came)
    and a chat client (translated out of the frames)."""
    clouds.bedrock.push(CutAfter(0), model=BEDROCK_CLAUDE)
    clouds.bedrock.reply[BEDROCK_CLAUDE] = REPLY
    ask = [{"role": "user", "content": "hello"}]
    if api == "messages":
        async with clouds.gw.async_anthropic().messages.stream(
            model="claude-keyed", max_tokens=300, messages=ask
        ) as stream:
            text = "".join([t async for t in stream.text_stream])
    else:
        chunks = await clouds.gw.async_openai().chat.completions.create(
            model="claude-keyed",
            messages=ask,
            stream=True,  # type: ignore[arg-type]
        )
        text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    assert text == REPLY
    line = await event(clouds.logs, "request_completed")
    assert line["attempts"] == 2
    assert line["recovery_tokens"]["prompt"] == line["tokens"]["prompt"] > 0


async def test_gpt_rate_limited_on_openai_goes_to_azure(clouds: Clouds) -> None:
    """The OpenAI SDK on gpt-4o: OpenAI rate-limits, Azure answers at once (its deployment
    path, api-version and api-key), JSON and stream."""
    clouds.direct.push(Error.openai_rate_limit(retry_after=30), model="gpt-4o")
    client = clouds.gw.async_openai()
    answer = await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    assert "gpt-4o-prod" in (answer.choices[0].message.content or "")
    (call,) = clouds.azure.requests
    assert call.path == "/openai/deployments/gpt-4o-prod/chat/completions"
    assert call.headers["api-key"] == AZURE_KEY
    stream = await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert "gpt-4o-prod" in text  # OpenAI is cooling down: Azure serves meanwhile


async def test_a_responses_client_on_bedrock_converse(clouds: Clouds) -> None:
    """A Responses client (the Codex CLI's API) on a non-Anthropic Bedrock model: the
    request goes by Converse, JSON and stream, and the answer comes back as a Response."""
    client = clouds.gw.async_openai()
    answer = await client.responses.create(model="nova-pro", input="hello", max_output_tokens=200)
    assert NOVA in answer.output_text
    assert clouds.bedrock.requests[-1].path.endswith("/converse")
    stream = await client.responses.create(
        model="nova-pro", input="hello", max_output_tokens=200, stream=True
    )
    events = [e async for e in stream]
    assert events[-1].type == "response.completed"
    assert NOVA in events[-1].response.output_text
    assert clouds.bedrock.requests[-1].path.endswith("/converse-stream")


async def test_an_agents_summary_request_on_bedrock_converse(clouds: Clouds) -> None:
    """The OpenAI SDK asks a non-Anthropic Bedrock model for a summary of an agent's
    conversation: tool calls and results in the history, blank text beside them, no
    tools offered. Bedrock refuses that as sent (a blank text block; tool blocks without a
    toolConfig: the fake checks both); the translation sends what it takes, and the
    client gets its answer."""
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    messages: Any = [
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": " ", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": ""},
        {"role": "user", "content": "Summarise the conversation."},
    ]
    client = clouds.gw.async_openai()
    answer = await client.chat.completions.create(model="nova-pro", messages=messages)
    assert NOVA in (answer.choices[0].message.content or "")
    sent = clouds.bedrock.requests[-1].body
    assert [t["toolSpec"]["name"] for t in sent["toolConfig"]["tools"]] == ["ls"]


async def test_no_credential_reaches_logs_metrics_or_admin(clouds: Clouds) -> None:
    """After calls on every cloud, no key, secret, token or signature appears in a log
    line, the metrics, /admin/deployments or a client's answer."""
    clouds.direct.push(Error.anthropic_overloaded(), model=CLAUDE)
    clouds.bedrock.push(BedrockError.throttling(), model=BEDROCK_CLAUDE)
    clouds.direct.push(Error.openai_rate_limit(retry_after=30), model="gpt-4o")
    anthropic_client = clouds.gw.async_anthropic()
    answer = await anthropic_client.messages.create(
        model=CLAUDE, max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    chat = await clouds.gw.async_openai().chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    async with aiohttp.ClientSession() as http:
        async with http.get(clouds.gw.url + "/metrics") as r:
            metrics = await r.text()
        admin_key = clouds.gw.settings.admin_key
        headers = {"authorization": f"Bearer {admin_key}"} if admin_key else {}
        async with http.get(clouds.gw.url + "/admin/deployments", headers=headers) as r:
            admin = await r.text()
    logs = b"".join(clouds.logs.raw()).decode()
    secrets = clouds.secrets()
    assert len(secrets) >= 6  # keys, a Google token, SigV4 signatures
    assert not leaked(
        secrets, logs, metrics, admin, answer.model_dump_json(), chat.model_dump_json()
    )


async def test_vertex_without_credentials_is_out_while_the_others_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_sink: Sink
) -> None:
    """A Vertex provider whose credentials cannot be found does not stop the gateway: the
    event names it, its deployment is out with reason auth, and the model is served by
    its other deployments."""
    isolate(monkeypatch, tmp_path / "home")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    async with FakeProvider() as direct, FakeBedrock() as bedrock:
        monkeypatch.setenv("DIRECT_KEY", PROVIDER_KEY)
        monkeypatch.setenv("AZURE_EU_KEY", AZURE_KEY)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", bedrock.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", bedrock.secret_key)
        urls = {"direct": direct.url, "bedrock": bedrock.url, "vertex": "http://127.0.0.1:9",
                "azure": "http://127.0.0.1:9"}  # fmt: skip
        log_sink.configure()
        gw = await Harness(
            direct, write_policies(tmp_path / "p", policy(urls)), admin_key="adm"
        ).start()
        try:
            failed = await event(log_sink, "credentials_failed")
            assert (
                failed["provider"] == "vertex-eu"
                and "GOOGLE_APPLICATION_CREDENTIALS" in failed["reason"]
            )
            async with (
                aiohttp.ClientSession() as http,
                http.get(
                    gw.url + "/admin/deployments", headers={"authorization": "Bearer adm"}
                ) as r,
            ):
                admin = await r.json()
            states = {d["deployment"]: d for d in admin["models"][CLAUDE]["deployments"]}
            assert states["vertex-eu"]["state"] == "out" and states["vertex-eu"]["why"] == "auth"
            assert states["bedrock-us"]["state"] == "up"
            direct.push(Error.anthropic_overloaded(), model=CLAUDE)
            bedrock.push(BedrockError.throttling(), model=BEDROCK_CLAUDE)
            raw = await gw.async_anthropic().messages.with_raw_response.create(
                model=CLAUDE, max_tokens=50, messages=[{"role": "user", "content": "hi"}]
            )
            answer = await raw.parse()
            # Vertex is out: the gateway waits for the first cooldown to end (1 s) rather
            # than trying it, and that deployment answers
            assert VERTEX_CLAUDE not in answer.content[0].text  # type: ignore[union-attr]
            assert raw.headers["x-gateway-attempts"] == "3"
            with pytest.raises(anthropic.APIStatusError) as refused:  # Vertex's only model
                await gw.async_anthropic().messages.create(
                    model="gemini-flash",
                    max_tokens=50,
                    messages=[{"role": "user", "content": "hi"}],
                )
            message = refused.value.body["error"]["message"]  # type: ignore[index]
            assert message.startswith("the gateway has no usable credentials for model")
            assert "missing.json" not in message  # why is in the credentials_failed event
        finally:
            await gw.stop()


def _dump(value: Any) -> str:
    return json.dumps(value, default=str)


async def test_simulate_tells_the_cloud_chain_the_live_gateway_follows(clouds: Clouds) -> None:
    """``llm-gateway simulate`` on the same policies: Anthropic overloaded, Bedrock
    throttled, Vertex answers on the third attempt with no wait, as live."""
    out = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable, "-m", "gateway.cli", "simulate", "--policies",
            str(clouds.gw.policy_dir), "--team", "apps", "--model", CLAUDE, "--path",
            "/v1/messages", "--script", "200", "--deployment", "anthropic=529",
            "--deployment", "bedrock-us=429",
        ],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [(r[0], r[2]) for r in rows] == [
        ("1", f"{CLAUDE}@anthropic"),
        ("2", f"{CLAUDE}@bedrock-us"),
        ("3", f"{CLAUDE}@vertex-eu"),
    ]
    assert all(r[1] == "0.00" for r in rows)
    clouds.direct.push(Error.anthropic_overloaded(), model=CLAUDE)
    clouds.bedrock.push(BedrockError.throttling(), model=BEDROCK_CLAUDE)
    raw = await clouds.gw.async_anthropic().messages.with_raw_response.create(
        model=CLAUDE, max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-gateway-attempts"] == "3" and len(clouds.vertex.requests) == 1


async def test_bedrock_with_an_api_key_and_an_exception_frame_mid_stream(clouds: Clouds) -> None:
    """A Bedrock API key goes as a bearer token (no signature); an exception frame in the
    middle of the event stream is a mid-stream failure, resumed: the client reads the
    whole answer once."""
    clouds.bedrock.reply[BEDROCK_CLAUDE] = REPLY
    clouds.bedrock.push(stream_exception(3, "modelStreamErrorException"), model=BEDROCK_CLAUDE)
    client = clouds.gw.async_anthropic()
    async with client.messages.stream(
        model="claude-keyed", max_tokens=300, messages=[{"role": "user", "content": "hello"}]
    ) as stream:
        text = "".join([t async for t in stream.text_stream])
    assert text == REPLY
    first, resumed = clouds.bedrock.requests
    assert first.headers["authorization"] == f"Bearer {BEDROCK_API_KEY}"
    assert resumed.body["messages"][-1]["role"] == "assistant"
    line = await event(clouds.logs, "stream_interrupted")
    assert line["category"] == "server_error" and line["action"] == "resume"


async def test_a_gemini_model_on_vertex_by_its_openai_endpoint(clouds: Clouds) -> None:
    """A non-Claude Vertex model goes to Vertex's OpenAI-compatible chat completions with
    the model in the body and a Google token; a Messages client is translated to it."""
    chat = await clouds.gw.async_openai().chat.completions.create(
        model="gemini-flash", messages=[{"role": "user", "content": "hi"}]
    )
    assert GEMINI in (chat.choices[0].message.content or "")
    msg = await clouds.gw.async_anthropic().messages.create(
        model="gemini-flash", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    assert GEMINI in msg.content[0].text  # type: ignore[union-attr]
    for call in clouds.vertex.requests:
        assert call.path.endswith("/locations/europe-west1/endpoints/openapi/chat/completions")
        assert call.body["model"] == GEMINI
        assert clouds.google.valid(call.headers["authorization"][7:])


async def test_azure_content_filter_is_the_clients_answer_not_a_retry(clouds: Clouds) -> None:
    """Azure's content filter (400 content_filter) is classified content filter: the
    client gets the 400 with Azure's reason, after one attempt on Azure."""
    clouds.direct.push(Error.openai_rate_limit(retry_after=30), model="gpt-4o")
    clouds.azure.push(azure_content_filter(), model="gpt-4o-prod")
    with pytest.raises(openai.BadRequestError) as refused:
        await clouds.gw.async_openai().chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
        )
    assert "content management policy" in refused.value.message
    assert len(clouds.azure.requests) == 1
    line = await event(clouds.logs, "request_completed")
    assert line["status"] == 400 and line["attempts"] == 2


async def test_no_credential_reaches_a_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_sink: Sink, collector: Collector
) -> None:
    """Traced requests on Bedrock (signed) and Azure (keyed): the exported spans name the
    deployments and models, and hold no key, secret or signature."""
    isolate(monkeypatch, tmp_path / "home")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    async with FakeProvider() as direct, FakeBedrock() as bedrock:
        azure = FakeAzure(keys={AZURE_KEY}, deployments={"gpt-4o-prod"})
        await azure.start()
        monkeypatch.setenv("DIRECT_KEY", PROVIDER_KEY)
        monkeypatch.setenv("AZURE_EU_KEY", AZURE_KEY)
        monkeypatch.setenv("BEDROCK_API_KEY", BEDROCK_API_KEY)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", bedrock.access_key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", bedrock.secret_key)
        urls = {"direct": direct.url, "bedrock": bedrock.url, "vertex": "http://127.0.0.1:9",
                "azure": azure.url}  # fmt: skip
        log_sink.configure()
        gw = await Harness(direct, write_policies(tmp_path / "p", policy(urls))).start()
        try:
            direct.push(Error.anthropic_overloaded(), model=CLAUDE)
            direct.push(Error.openai_rate_limit(retry_after=30), model="gpt-4o")
            await gw.async_anthropic().messages.create(
                model=CLAUDE, max_tokens=50, messages=[{"role": "user", "content": "hi"}]
            )
            await gw.async_openai().chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
            deadline = time.monotonic() + 5
            while len({s.attributes.get("llm_gateway.deployment") for s in collector.spans}) < 4:
                assert time.monotonic() < deadline, "spans not exported"
                await asyncio.sleep(0.05)
        finally:
            await gw.stop()
            await azure.stop()
    signatures = [r.headers["authorization"].rsplit("=", 1)[-1] for r in bedrock.requests]
    exported = b"".join(collector.raw).decode("utf-8", "replace")
    assert "bedrock-us" in exported and "azure-eu" in exported
    secrets = [bedrock.secret_key, bedrock.access_key, AZURE_KEY, PROVIDER_KEY, *signatures]
    assert not leaked(secrets, exported)
