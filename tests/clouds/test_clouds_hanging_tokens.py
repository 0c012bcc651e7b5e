"""A cloud token service that never answers, at start or at a refresh, through the real
gateway: the port opens at once and the other providers serve; the cloud deployment is
out (reason auth, the event) once its first token is late or its token expires with the
refresh still waiting, its sibling takes the requests, and it serves again as soon as
the token service answers."""

from __future__ import annotations

import asyncio
import datetime as dt
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from gateway.testing import FakeProvider
from gateway.testing.fake_aws_credentials import FakeAwsCredentials
from gateway.testing.fake_azure import FakeAzure
from gateway.testing.fake_azure_identity import FakeAzureIdentity
from gateway.testing.fake_bedrock import FakeBedrock
from gateway.testing.fake_google_token import FakeGoogleToken
from gateway.testing.fake_vertex import FakeVertex
from gateway.testing.token_service import TokenService
from tests.clouds.cloud_env import isolate, until
from tests.harness import Harness, platform_files, write_policies
from tests.integration.test_operations import Served, serve  # noqa: F401 (a fixture)
from tests.log_sink import Sink

ADMIN = {"authorization": "Bearer adm"}
MESSAGES = [{"role": "user", "content": "hi"}]
#: The cloud's model name upstream, per kind.
UPSTREAM = {
    "vertex": "claude-sonnet-4-5@20250929",
    "azure": "gpt-4o-prod",
    "bedrock": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
}


@dataclass
class Cloud:
    """A cloud provider behind a token service: its fake API, its token service, and the
    policy fields of its provider."""

    kind: str
    api: FakeProvider
    tokens: TokenService
    provider: dict[str, Any]
    #: Teaches the fake API the credentials the token service issued so far (AWS only).
    learn: Callable[[], None] = lambda: None


@asynccontextmanager
async def cloud_of(
    kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, lifetime: float
) -> AsyncIterator[Cloud]:
    """The fakes of ``kind`` with the environment that points its library at them."""
    async with AsyncExitStack() as stack:
        if kind == "vertex":
            google = await stack.enter_async_context(FakeGoogleToken(lifetime=lifetime))
            path = google.service_account_file(tmp_path)
            monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
            vertex = await stack.enter_async_context(FakeVertex(tokens=google.valid))
            fields = {"api": "vertex", "project": "acme-ml", "region": "europe-west1",
                      "base_url": vertex.url}  # fmt: skip
            yield Cloud(kind, vertex, google, fields)
        elif kind == "azure":
            identity = await stack.enter_async_context(FakeAzureIdentity(lifetime=lifetime))
            monkeypatch.setenv("IDENTITY_ENDPOINT", identity.endpoint)
            monkeypatch.setenv("IDENTITY_HEADER", identity.secret)
            azure = FakeAzure(tokens=identity.valid, deployments={UPSTREAM["azure"]})
            await stack.enter_async_context(azure)
            yield Cloud(kind, azure, identity, {"api": "azure", "base_url": azure.url})
        else:
            aws = await stack.enter_async_context(FakeAwsCredentials(lifetime=lifetime))
            monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", aws.endpoint)
            bedrock = await stack.enter_async_context(FakeBedrock(region="us-east-1"))

            def learn() -> None:
                for key in list(aws.issued):
                    known = aws.secrets_of(key)
                    if known is not None:
                        bedrock.add_key(key, known[0], known[1])

            fields = {"api": "bedrock", "region": "us-east-1", "base_url": bedrock.url}
            yield Cloud(kind, bedrock, aws, fields, learn)


def policies(cloud: Cloud, direct: FakeProvider) -> dict[str, Any]:
    """``both``: the cloud first, a direct OpenAI deployment as its sibling; ``cloud``: the
    cloud alone; ``direct``: the direct provider alone."""
    upstream = UPSTREAM[cloud.kind]
    return platform_files(
        {
            "cloud": cloud.provider,
            "direct": {
                "api": "openai",
                "base_url": direct.url + "/v1",
                "api_key_env": "DIRECT_KEY",
            },
        },
        {
            "both": {
                "deployments": [
                    {"provider": "cloud", "upstream_model": upstream},
                    {"provider": "direct", "upstream_model": "direct-model"},
                ],
                "balance": "ordered",
            },
            "cloud": {"provider": "cloud", "upstream_model": upstream},
            "direct": {"provider": "direct", "upstream_model": "direct-model"},
        },
    )


async def ask(client: openai.AsyncOpenAI, model: str) -> tuple[int, str]:
    """The status and the answer's text (or error body) of one chat request."""
    try:
        raw = await client.chat.completions.with_raw_response.create(model=model, messages=MESSAGES)
    except openai.APIStatusError as e:
        return e.status_code, str(e.body)
    return raw.status_code, raw.parse().choices[0].message.content or ""


async def cloud_state(gw: Harness) -> dict[str, Any]:
    """The cloud deployment of model ``both`` as /admin/deployments shows it."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(gw.url + "/admin/deployments", headers=ADMIN) as r,
    ):
        admin = await r.json()
    (row,) = [d for d in admin["models"]["both"]["deployments"] if d["deployment"] == "cloud"]
    return row  # type: ignore[no-any-return]


async def ready(http: aiohttp.ClientSession, url: str) -> bool:
    async with http.get(url + "/readyz") as r:
        return r.status == 200


async def until_up(gw: Harness, seconds: float = 3.0) -> None:
    """Wait until the cloud deployment of model ``both`` is up."""
    end = time.monotonic() + seconds
    while (await cloud_state(gw))["state"] != "up":
        assert time.monotonic() < end, "the cloud deployment is not up"
        await asyncio.sleep(0.02)


def events(sink: Sink, name: str) -> list[dict[str, Any]]:
    return [e for e in sink.lines() if e.get("event") == name]


@pytest.mark.parametrize("kind", ["vertex", "azure", "bedrock"])
async def test_a_token_service_that_never_answers_keeps_nothing_else_from_serving(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_sink: Sink
) -> None:
    """The token service hangs from the start: the gateway answers /healthz at once and
    /readyz once the first-token limit (0.5 s) is up, the direct provider answers, the cloud deployment is out (auth, credentials_failed) after
    the first-token limit while its sibling answers; once the service answers, the cloud
    deployment serves again (credentials_recovered)."""
    isolate(monkeypatch, tmp_path / "home")
    monkeypatch.setenv("DIRECT_KEY", "direct-secret-key")
    async with FakeProvider() as direct, cloud_of(kind, monkeypatch, tmp_path, 3600.0) as cloud:
        cloud.tokens.hang = True
        log_sink.configure()
        started = time.monotonic()
        gw = Harness(
            direct,
            write_policies(tmp_path / "p", policies(cloud, direct)),
            admin_key="adm",
            cloud_token_timeout_s=0.5,
        )
        await asyncio.wait_for(gw.start(ready=False), 5.0)
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(gw.url + "/healthz") as r:
                    assert r.status == 200
                assert time.monotonic() - started < 1.0
                # ready once the first token came or its time (0.5 s) is up
                while not await ready(http, gw.url):
                    assert time.monotonic() - started < 5.0
                    await asyncio.sleep(0.02)
            assert time.monotonic() - started < 2.0
            client = gw.async_openai()
            assert (await ask(client, "direct"))[0] == 200
            failed = await wait_event(log_sink, "credentials_failed", 3.0)
            assert failed["provider"] == "cloud" and "0.5 s" in failed["reason"]
            state = await cloud_state(gw)
            assert (state["state"], state["why"]) == ("out", "auth")
            status, text = await ask(client, "both")
            assert status == 200 and "direct-model" in text  # the sibling
            assert cloud.api.requests == []
            cloud.tokens.hang = False
            await wait_event(log_sink, "credentials_recovered", 10.0)
            cloud.learn()
            assert (await cloud_state(gw))["state"] == "up"
            status, text = await ask(client, "cloud")
            assert status == 200, text
            assert len(cloud.api.requests) == 1
        finally:
            await gw.stop()


async def test_a_refresh_that_hangs_past_the_tokens_expiry_takes_the_deployment_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_sink: Sink
) -> None:
    """Vertex tokens of 1.2 s whose refresh hangs: requests go on being answered (by the
    sibling once the token expired: no 502), the deployment is out (auth) the moment the
    token expires with the event, and back with the next token once the refresh
    answers."""
    isolate(monkeypatch, tmp_path / "home")
    monkeypatch.setenv("DIRECT_KEY", "direct-secret-key")
    async with FakeProvider() as direct, cloud_of("vertex", monkeypatch, tmp_path, 1.2) as cloud:
        log_sink.configure()
        gw = await Harness(
            direct, write_policies(tmp_path / "p", policies(cloud, direct)), admin_key="adm"
        ).start()
        try:
            client = gw.async_openai()
            await until_up(gw)  # the first token came
            assert (await ask(client, "both"))[0] == 200
            assert len(cloud.api.requests) == 1
            cloud.tokens.hang = True  # the refresh (at 0.6 s) gets no answer
            (expires_at,) = cloud.tokens.issued.values()
            statuses = []
            while time.time() < expires_at + 0.6:
                statuses.append((await ask(client, "both"))[0])
                await asyncio.sleep(0.02)
            assert set(statuses) == {200}
            failed = await wait_event(log_sink, "credentials_failed", 0.1)
            assert failed["provider"] == "cloud" and "expired" in failed["reason"]
            assert abs(failed["timestamp_s"] - expires_at) < 0.3
            state = await cloud_state(gw)
            assert (state["state"], state["why"]) == ("out", "auth")
            on_cloud = len(cloud.api.requests)
            cloud.tokens.hang = False
            await wait_event(log_sink, "credentials_recovered", 3.0)
            await until_up(gw, 0.5)
            assert (await ask(client, "both"))[0] == 200
            assert len(cloud.api.requests) == on_cloud + 1  # the cloud again
        finally:
            await gw.stop()


async def test_sigterm_ends_a_gateway_whose_token_service_never_answers(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    serve: Callable[..., Awaitable[Served]],  # noqa: F811
) -> None:
    """``python -m gateway serve`` with a Google token endpoint that never answers: it
    starts at once, and SIGTERM ends it promptly (exit 0) while the token request still
    hangs in its thread."""
    isolate(monkeypatch, tmp_path / "home")
    monkeypatch.setenv("DIRECT_KEY", "direct-secret-key")
    async with FakeProvider() as direct, cloud_of("vertex", monkeypatch, tmp_path, 3600.0) as cloud:
        cloud.tokens.hang = True
        root = write_policies(tmp_path / "p", policies(cloud, direct))
        began = time.monotonic()
        gw = await asyncio.wait_for(serve(root, shutdown_grace_s="0.3"), 10.0)
        assert time.monotonic() - began < 5.0
        await until(lambda: len(cloud.tokens.requests) >= 1, 5.0)  # the fetch is waiting
        gw.proc.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        assert await gw.wait_exit(5.0) == 0
        assert time.monotonic() - stopping < 3.0
        assert cloud.tokens.hang and gw.named("gateway_stopped")


async def wait_event(sink: Sink, name: str, seconds: float) -> dict[str, Any]:
    """The first log line of event ``name`` (waiting up to ``seconds``), with its time in
    epoch seconds as ``timestamp_s``."""
    await until(lambda: bool(events(sink, name)), seconds)
    line = events(sink, name)[0]
    stamp = dt.datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00"))
    return {**line, "timestamp_s": stamp.timestamp()}
