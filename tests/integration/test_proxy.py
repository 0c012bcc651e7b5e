"""The foundation: OpenAI-compatible traffic proxied end to end, driven by the official SDK."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import openai
import pytest

from gateway.testing import FakeProvider
from tests.harness import CLIENT_KEY, PROVIDER_KEY, Harness, policy_files, write_policies

MESSAGES = [{"role": "user", "content": "Say hello"}]


async def test_chat_completion_async(gw: Harness, fake: FakeProvider) -> None:
    """A chat completion passes through: content, usage, headers, and what the provider saw."""
    client = gw.async_openai()
    raw = await client.chat.completions.with_raw_response.create(
        model="gpt-test", messages=MESSAGES
    )
    c = raw.parse()
    assert c.choices[0].message.content.startswith("Hello! This is the fake provider")
    assert c.usage is not None and c.usage.completion_tokens > 0
    assert raw.headers["x-gateway-model"] == "gpt-test"
    assert raw.headers["x-gateway-attempts"] == "1"
    assert raw.headers["x-request-id"]
    seen = fake.requests[-1]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    assert CLIENT_KEY not in str(seen.headers)
    assert seen.body["model"] == "fake-model"  # mapped via upstream_model
    assert seen.body["messages"] == MESSAGES


async def test_chat_completion_sync_client(gw: Harness, fake: FakeProvider) -> None:
    """The synchronous SDK client gets an answer through the gateway."""
    client = gw.openai()
    c = await asyncio.to_thread(
        client.chat.completions.create, model="gpt-backup", messages=MESSAGES
    )
    assert "gpt-backup" in c.choices[0].message.content
    assert fake.requests[-1].body["model"] == "gpt-backup"  # no upstream_model: same name


async def test_chat_stream_async(gw: Harness, fake: FakeProvider) -> None:
    """A streamed chat completion arrives chunk by chunk and joins to the full answer."""
    client = gw.async_openai()
    stream = await client.chat.completions.create(
        model="gpt-test", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    parts, finish, usage = [], None, None
    async for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        usage = chunk.usage or usage
    assert "".join(parts) == fake.reply.get("gpt-test", "").strip() or "".join(parts).startswith(
        "Hello! This is the fake provider"
    )
    assert finish == "stop"
    assert usage is not None and usage.total_tokens > 0
    assert (
        gw.metric("llm_gateway_tokens_total", team="team-a", model="gpt-test", kind="completion")
        == usage.completion_tokens
    )


async def test_a_stream_without_include_usage_is_counted_all_the_same(
    gw: Harness, fake: FakeProvider
) -> None:
    """A chat stream whose client did not ask for usage: the gateway asks upstream (its
    tokens count for the team's tokens_per_minute and the metrics) and keeps the usage
    chunk, which has no choices, from the client, which did not ask for one."""
    stream = await gw.async_openai().chat.completions.create(
        model="gpt-test", messages=MESSAGES, stream=True
    )
    chunks = [c async for c in stream]
    assert chunks and all(c.choices for c in chunks)  # chunk.choices[0] never fails
    assert all(c.usage is None for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks).startswith("Hello!")
    assert fake.requests[-1].body["stream_options"] == {"include_usage": True}
    completion = gw.metric(
        "llm_gateway_tokens_total", team="team-a", model="gpt-test", kind="completion"
    )
    assert completion is not None and completion > 0


async def test_stream_usage_false_leaves_the_stream_options_alone(
    fake: FakeProvider, tmp_path: Path
) -> None:
    """``providers.*.stream_usage: false`` (a server that rejects stream_options): a chat
    stream goes up as the client sent it, and a translated one without stream_options;
    their tokens are the provider's when the chat client asks for the usage chunk itself,
    else estimated (docs/policies.md)."""
    files = policy_files(fake.url, None, None)
    files["platform.yaml"]["providers"]["fake"]["stream_usage"] = False
    gw = await Harness(fake, write_policies(tmp_path / "p", files)).start()

    def counted(kind: str = "completion") -> float:
        return gw.metric("llm_gateway_tokens_total", team="team-a", model="gpt-test", kind=kind)

    try:
        stream = await gw.async_openai().chat.completions.create(
            model="gpt-test", messages=MESSAGES, stream=True
        )
        assert "".join([c.choices[0].delta.content or "" async for c in stream]).startswith(
            "Hello!"
        )
        assert "stream_options" not in fake.requests[-1].body
        first, prompt = counted(), counted("prompt")
        assert first > 0  # no usage chunk asked for, none came: the tokens are estimated
        async with gw.async_anthropic().messages.stream(
            model="gpt-test", max_tokens=100, messages=MESSAGES
        ) as s:
            assert "".join([t async for t in s.text_stream]).startswith("Hello!")
        assert fake.requests[-1].path == "/v1/chat/completions"
        assert "stream_options" not in fake.requests[-1].body
        second = counted()
        assert counted("prompt") > prompt  # a translated stream gets no usage: estimated
        stream = await gw.async_openai().chat.completions.create(
            model="gpt-test",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        usage = [c.usage async for c in stream if c.usage is not None]
        assert fake.requests[-1].body["stream_options"] == {"include_usage": True}
        assert usage and counted() - second == usage[-1].completion_tokens > 0  # it asked
    finally:
        await gw.stop()


async def test_chat_stream_sync_client(gw: Harness) -> None:
    """The synchronous SDK client streams through the gateway."""
    client = gw.openai()

    def run() -> str:
        stream = client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
        return "".join((c.choices[0].delta.content or "") for c in stream if c.choices)

    text = await asyncio.to_thread(run)
    assert text.startswith("Hello! This is the fake provider")


async def test_responses_api(gw: Harness, fake: FakeProvider) -> None:
    """The Responses API (Codex CLI's only API) answers, JSON and streamed."""
    client = gw.async_openai()
    r = await client.responses.create(model="gpt-test", input="Say hello")
    assert r.output_text.startswith("Hello! This is the fake provider")
    assert fake.requests[-1].path == "/v1/responses"
    stream = await client.responses.create(model="gpt-test", input="Say hello", stream=True)
    kinds = [e.type async for e in stream]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"


async def test_completions_and_embeddings(gw: Harness, fake: FakeProvider) -> None:
    """Legacy completions and embeddings are proxied too."""
    client = gw.async_openai()
    c = await client.completions.create(model="gpt-test", prompt="Say hello")
    assert c.choices[0].text
    e = await client.embeddings.create(model="gpt-test", input=["a", "b"])
    assert len(e.data) == 2 and len(e.data[0].embedding) > 0
    assert fake.requests[-1].path == "/v1/embeddings"


async def test_models_lists_team_models(gw: Harness) -> None:
    """GET /v1/models lists exactly the models the team's globs allow."""
    client = gw.async_openai()
    ids = sorted([m.id async for m in client.models.list()])
    assert ids == ["claude-backup", "claude-test", "gpt-backup", "gpt-large", "gpt-prefill", "gpt-small", "gpt-test",
                   "gpt-third"]  # fmt: skip


async def test_query_string_and_provider_headers_pass(gw: Harness, fake: FakeProvider) -> None:
    """Query strings and provider headers go upstream; the client's credentials never do."""
    async with aiohttp.ClientSession() as s:
        r = await s.post(
            gw.url + "/v1/chat/completions?beta=true&x=1",
            json={"model": "gpt-test", "messages": MESSAGES},
            headers={"authorization": f"Bearer {CLIENT_KEY}", "openai-beta": "assistants=v2",
                     "anthropic-beta": "tools-2024", "x-api-key": "should-not-pass"},
        )  # fmt: skip
        assert r.status == 200
    seen = fake.requests[-1]
    assert seen.query == {"beta": "true", "x": "1"}
    assert seen.headers["openai-beta"] == "assistants=v2"
    assert seen.headers["anthropic-beta"] == "tools-2024"
    assert "x-api-key" not in seen.headers
    assert "should-not-pass" not in str(seen.headers) and CLIENT_KEY not in str(seen.headers)


async def test_root_health_ready_metrics(gw: Harness) -> None:
    """HEAD/GET /, /healthz, /readyz answer 200; /metrics counts the requests."""
    await gw.async_openai().chat.completions.create(model="gpt-test", messages=MESSAGES)
    async with aiohttp.ClientSession() as s:
        for method, path in [("HEAD", "/"), ("GET", "/"), ("GET", "/healthz"), ("GET", "/readyz")]:
            async with s.request(method, gw.url + path) as r:
                assert r.status == 200, path
        async with s.get(gw.url + "/metrics") as r:
            text = await r.text()
    assert 'llm_gateway_requests_total{model="gpt-test",status="200",team="team-a"} 1.0' in text
    assert (
        'llm_gateway_upstream_attempts_total{category="ok",model="gpt-test",provider="fake"}'
        in text
    )
    for name in ("request_duration_seconds", "time_to_first_byte_seconds", "inflight_requests",
                 "tokens_total"):  # fmt: skip
        assert f"llm_gateway_{name}" in text


@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_down_gives_502(make_gateway, stream: bool) -> None:  # type: ignore[no-untyped-def]
    """An unreachable provider ends in a 502 the client can read, with x-should-retry false."""
    gw: Harness = await make_gateway(policy={"retry": {"max_retries": 0}, "turn_retry": {"max": 0}})
    await gw.fake.stop()
    client = gw.async_openai()
    with pytest.raises(openai.APIStatusError) as exc:
        await client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=stream)
    assert exc.value.status_code == 502
    assert "upstream" in exc.value.message
    assert exc.value.response.headers["x-should-retry"] == "false"


async def test_unknown_endpoint_is_json_404(gw: Harness) -> None:
    """A path the gateway does not serve gets a JSON error listing the endpoints."""
    async with aiohttp.ClientSession() as s:
        async with s.post(gw.url + "/v1chat/completions", json={}) as r:
            assert r.status == 404
        async with s.post(gw.url + "/v1/chat/complete", json={},
                          headers={"authorization": f"Bearer {CLIENT_KEY}"}) as r:  # fmt: skip
            body = await r.json()
            assert r.status == 404
            assert body["error"]["code"] == "unknown_endpoint"
            assert "POST /v1/chat/completions" in body["error"]["message"]
        async with s.get(gw.url + "/v1/chat/completions") as r:
            assert r.status == 405
            assert (await r.json())["error"]["code"] == "method_not_allowed"


async def test_a_prompt_over_a_mebibyte_goes_upstream_whole(
    gw: Harness, fake: FakeProvider
) -> None:
    """A 3 MiB prompt is answered (aiohttp's ResourceWarning for a bytes body over 1 MiB,
    an error under this suite's warning filter, is not raised) and arrives whole."""
    content = "hello " * (512 * 1024)  # 3 MiB
    client = gw.async_openai()
    answer = await client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": content}]
    )
    assert answer.choices[0].message.content
    received = fake.requests[-1]
    assert received.body["messages"][0]["content"] == content
    # sent with its length, not chunked (some load balancers refuse chunked uploads)
    headers = {k.lower(): v for k, v in received.headers.items()}
    assert "transfer-encoding" not in headers
    assert int(headers["content-length"]) > 3 * 1024 * 1024
