"""OpenTelemetry traces, received on a real OTLP/HTTP endpoint and decoded from protobuf.

The gateway exports with the SDK's own OTLP/HTTP exporter to a small aiohttp server
that decodes ``ExportTraceServiceRequest`` bodies; the tests look at the span tree of
a request that was retried and then moved to its fallback, and at what never appears
in a span (prompt, answer, keys).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import web

from gateway.policy.merge import deep_merge
from gateway.testing import CutAfter, Delay, Error, FakeProvider
from tests.harness import CLIENT_KEY, PROVIDER_KEY, Harness, policy_files, write_policies

pytest.importorskip("opentelemetry.sdk", reason="tracing needs the 'otel' extra")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

MARKER = "purple-giraffe-7341"  # the prompt: must never reach a span
REPLY = "the-answer-text-5512"  # the answer: likewise
STATUS_ERROR = 2  # Status.STATUS_CODE_ERROR
CLIENT_SPAN, SERVER_SPAN = 3, 2


@dataclass
class Span:
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int
    start_ns: int = 0
    end_ns: int = 0


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


@dataclass
class Collector:
    """An OTLP/HTTP traces endpoint: every span it was sent, decoded."""

    spans: list[Span] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.raw.append(body)
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        for rs in export.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(
                        Span(
                            name=s.name,
                            kind=s.kind,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            events=[
                                (e.name, {a.key: _value(a.value) for a in e.attributes})
                                for e in s.events
                            ],
                            status_code=s.status.code,
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                        )
                    )
        return web.Response(body=b"", content_type="application/x-protobuf")


@pytest.fixture
async def collector(aiohttp_server: Callable[..., Any]) -> AsyncIterator[Collector]:
    c = Collector()
    app = web.Application()
    app.router.add_post("/v1/traces", c.handle)
    server = await aiohttp_server(app)
    c.url = str(server.make_url("")).rstrip("/")
    yield c


async def start_traced(
    collector: Collector,
    fake: FakeProvider,
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    policy: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> Harness:
    """A gateway exporting traces to the collector (batch delay 50 ms); ``extra`` merged
    into the policy files."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gateway-under-test")
    write_policies(root, deep_merge(policy_files(fake.url, policy), extra or {}))
    return await Harness(fake, root).start()


@pytest.fixture
async def traced(
    collector: Collector, fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    policy = {"fallback": {"chain": ["gpt-backup"], "after_consecutive_server_errors": 2}}
    h = await start_traced(collector, fake, tmp_path / "policies", monkeypatch, policy)
    yield h
    await h.stop()


async def test_retried_then_fallback_request_has_its_whole_story_in_one_trace(
    traced: Harness, fake: FakeProvider, collector: Collector
) -> None:
    """One server span continuing the client's trace; one client span per attempt (two on
    the primary, one on the fallback) carrying the GenAI conventions; the waits and the
    fallback as events; the attempt's traceparent sent to the provider."""
    fake.reply["fake-model"] = REPLY
    fake.reply["gpt-backup"] = REPLY
    fake.push(Error.openai_server(), model="fake-model")
    fake.push(Error.openai_server(), model="fake-model")
    client_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    client_span = "00f067aa0ba902b7"
    client = traced.async_openai(
        default_headers={"traceparent": f"00-{client_trace}-{client_span}-01"}
    )
    r = await client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": MARKER}]
    )
    assert r.choices[0].message.content == REPLY
    await traced.stop()  # flushes the exporter
    spans = collector.spans

    (server,) = [s for s in spans if s.kind == 2]  # SPAN_KIND_SERVER
    assert server.trace_id == client_trace and server.parent_id == client_span
    assert server.name == "POST /v1/chat/completions"
    a = server.attributes
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "gpt-test"
    assert a["gen_ai.response.model"] == "gpt-backup"
    assert a["http.response.status_code"] == 200
    assert a["llm_gateway.attempts"] == 3
    assert set(a["llm_gateway.recovery"]) == {"retry", "fallback"}
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    names = [name for name, _ in server.events]
    assert names.count("api_retry") >= 1
    assert "fallback" in names and "fallback_model_activated" in names
    (retry,) = [attrs for name, attrs in server.events if name == "api_retry"][:1]
    assert retry["error.type"] == "server_error" and retry["llm_gateway.wait_seconds"] >= 0

    attempts = sorted(
        (s for s in spans if s.kind == 3), key=lambda s: s.attributes["llm_gateway.attempt"]
    )
    assert [s.parent_id for s in attempts] == [server.span_id] * 3
    assert [s.trace_id for s in attempts] == [client_trace] * 3
    assert [s.attributes["gen_ai.request.model"] for s in attempts] == [
        "fake-model", "fake-model", "gpt-backup",
    ]  # fmt: skip
    assert [s.attributes.get("error.type") for s in attempts] == [
        "server_error", "server_error", None,
    ]  # fmt: skip
    assert [s.attributes["http.response.status_code"] for s in attempts] == [500, 500, 200]
    assert all(s.attributes["gen_ai.provider.name"] == "fake" for s in attempts)
    ok = attempts[-1].attributes
    assert ok["gen_ai.operation.name"] == "chat" and ok["gen_ai.usage.output_tokens"] > 0
    assert ok["gen_ai.response.finish_reasons"] == ["stop"]

    # the provider saw each attempt's own traceparent: same trace, the attempt as parent
    sent = [rq.headers["traceparent"].split("-") for rq in fake.requests]
    assert [(t, p) for _, t, p, _ in sent] == [(client_trace, s.span_id) for s in attempts]

    # nothing secret or private in any span
    blob = b"".join(collector.raw)
    for secret in (MARKER, REPLY, CLIENT_KEY, PROVIDER_KEY, "Bearer "):
        assert secret.encode() not in blob


async def test_stream_interruption_is_an_event(
    traced: Harness, fake: FakeProvider, collector: Collector
) -> None:
    """A stream that breaks mid-way shows as a stream_interrupted event (action
    error_event) on the request's span, and its attempt's span ends as an error (the
    category of the cut), not as the OK its headers looked like."""
    fake.push(CutAfter(3), model="fake-model")
    client = traced.async_openai()
    stream = await client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": MARKER}], stream=True
    )
    with pytest.raises(openai.APIError):  # the in-band error event
        async for _ in stream:
            pass
    await traced.stop()
    (server,) = [s for s in collector.spans if s.kind == SERVER_SPAN]
    events = dict(server.events)
    assert events["stream_interrupted"]["llm_gateway.action"] == "error_event"
    assert events["stream_interrupted"]["error.type"] == "connection"
    (attempt,) = [s for s in collector.spans if s.kind == CLIENT_SPAN]
    assert attempt.attributes["error.type"] == "connection"
    assert attempt.attributes["http.response.status_code"] == 200
    assert attempt.status_code == STATUS_ERROR
    assert "gen_ai.response.finish_reasons" not in attempt.attributes
    assert MARKER.encode() not in b"".join(collector.raw)


async def test_a_streamed_attempt_span_ends_with_its_stream(
    traced: Harness, fake: FakeProvider, collector: Collector
) -> None:
    """A streamed attempt's span lasts until the stream's last event and carries what the
    stream said: usage, finish reasons, response model (OpenAI chat and Anthropic)."""
    fake.push(Delay(0.05), model="fake-model")  # 8 pieces: the stream lasts 0.4 s
    stream = await traced.async_openai().chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": MARKER}], stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    usage = [c.usage async for c in stream if c.usage is not None]
    async with traced.async_anthropic().messages.stream(
        model="claude-test", max_tokens=100, messages=[{"role": "user", "content": MARKER}]
    ) as s:
        message = await s.get_final_message()
    await traced.stop()
    chat, claude = sorted(
        (s for s in collector.spans if s.kind == CLIENT_SPAN), key=lambda s: s.start_ns
    )
    a = chat.attributes
    assert chat.end_ns - chat.start_ns >= 0.35e9  # not at the headers: at the stream's end
    assert a["gen_ai.response.model"] == "fake-model"
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (
        usage[0].prompt_tokens, usage[0].completion_tokens,
    )  # fmt: skip
    assert a["http.response.status_code"] == 200 and "error.type" not in a
    assert chat.status_code != STATUS_ERROR
    b = claude.attributes
    assert b["gen_ai.response.model"] == "claude-test"
    assert b["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert (b["gen_ai.usage.input_tokens"], b["gen_ai.usage.output_tokens"]) == (
        message.usage.input_tokens, message.usage.output_tokens,
    )  # fmt: skip
    server = {s.trace_id: s for s in collector.spans if s.kind == SERVER_SPAN}
    assert server[chat.trace_id].end_ns >= chat.end_ns
    assert server[claude.trace_id].attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert MARKER.encode() not in b"".join(collector.raw)


DEPLOYMENTS = {
    "platform.yaml": {
        "providers": {"keys": {"api": "openai", "base_url": "", "api_key_env": ["KEY_A", "KEY_B"]},
                      "eu": {"api": "openai", "base_url": "", "api_key_env": "KEY_EU"}},
        "models": {"gpt-dep": {"deployments": [
            {"provider": "keys"}, {"provider": "eu", "name": "azure-eu", "upstream_model": "fake-eu"}],
            "balance": "ordered"}},
    }
}  # fmt: skip


async def test_attempt_spans_name_their_deployment(
    collector: Collector, fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each attempt's llm_gateway.deployment is the deployment's name (keys#1, keys#2,
    azure-eu), not its provider's; a wait for a deployment when every one is out is an
    api_retry event of the request's span, with the wait and its reason."""
    for k, v in {"KEY_A": "key-a", "KEY_B": "key-b", "KEY_EU": "key-eu"}.items():
        monkeypatch.setenv(k, v)
    extra = deep_merge(DEPLOYMENTS, {"platform.yaml": {"providers": {
        "keys": {"base_url": fake.url + "/v1"}, "eu": {"base_url": fake.url + "/v1"}}}})  # fmt: skip
    policy = {"retry": {"max_retries": 2}}
    h = await start_traced(collector, fake, tmp_path / "policies", monkeypatch, policy, extra)
    try:
        fake.push(Error.openai_rate_limit(retry_after=30), key="key-a")
        fake.push(Error.openai_rate_limit(retry_after=30), key="key-b")
        fake.push(Error.openai_rate_limit(retry_after_ms=300), key="key-eu")
        client = h.async_openai()
        with pytest.raises(openai.RateLimitError):  # three deployments out: retries spent
            await client.chat.completions.create(
                model="gpt-dep", messages=[{"role": "user", "content": MARKER}]
            )
        await client.chat.completions.create(  # waits for azure-eu
            model="gpt-dep", messages=[{"role": "user", "content": MARKER}]
        )
    finally:
        await h.stop()
    attempts = sorted(
        (s for s in collector.spans if s.kind == CLIENT_SPAN), key=lambda s: s.start_ns
    )
    assert [s.attributes["llm_gateway.deployment"] for s in attempts] == [
        "keys#1", "keys#2", "azure-eu", "azure-eu"]  # fmt: skip
    assert [s.attributes["gen_ai.provider.name"] for s in attempts] == ["keys", "keys", "eu", "eu"]
    assert attempts[2].attributes["gen_ai.request.model"] == "fake-eu"
    second = next(
        s for s in collector.spans if s.kind == SERVER_SPAN and s.trace_id == attempts[3].trace_id
    )
    (wait,) = [attrs for name, attrs in second.events if name == "api_retry"]
    assert wait["error.type"] == "rate_limit" and 0 < wait["llm_gateway.wait_seconds"] <= 0.3
    assert wait["llm_gateway.reason"].startswith("every deployment of gpt-dep is out of service")


async def test_a_resumed_stream_shows_the_resume(
    collector: Collector, fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With on_midstream_failure: continue, the break is an event (action resume) and a
    second attempt span continues the answer; the client gets the whole text."""
    policy = {"stream": {"on_midstream_failure": "continue"}}
    h = await start_traced(collector, fake, tmp_path / "policies", monkeypatch, policy)
    try:
        fake.push(CutAfter(3), model="fake-model")
        stream = await h.async_openai().chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": MARKER}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    finally:
        await h.stop()
    assert text == "Hello! This is the fake provider answering model fake-model."
    (server,) = [s for s in collector.spans if s.kind == 2]
    events = dict(server.events)
    assert events["stream_interrupted"]["llm_gateway.action"] == "resume"
    attempts = [s for s in collector.spans if s.kind == 3]
    assert len(attempts) == 2 and all(s.parent_id == server.span_id for s in attempts)
    assert "retry" in server.attributes["llm_gateway.recovery"]


async def test_no_traces_without_an_endpoint(gw: Harness) -> None:
    """Without OTEL_EXPORTER_OTLP_ENDPOINT the gateway makes no spans at all."""
    assert gw.gateway.tracing is None


async def test_an_unsampled_request_passes_its_trace_context_on(
    collector: Collector, fake: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client's unsampled traceparent: no span is exported, and the provider still gets
    the trace id (with the sampled flag off) so its own logs line up."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
    h = await start_traced(collector, fake, tmp_path / "policies", monkeypatch, {})
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    try:
        client = h.async_openai(
            default_headers={"traceparent": f"00-{trace_id}-b7ad6b7169203331-00"}
        )
        await client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": MARKER}]
        )
    finally:
        await h.stop()
    assert collector.spans == []
    version, sent_trace, _, flags = fake.requests[-1].headers["traceparent"].split("-")
    assert (version, sent_trace, flags) == ("00", trace_id, "00")


async def test_compaction_and_continuation_are_events(
    traced: Harness, fake: FakeProvider, collector: Collector
) -> None:
    """A prompt compacted to fit and an answer continued past the token limit: both show
    as events of the request's span, with sizes and counts only (no content)."""
    tool_result = f"{MARKER} " + "x" * 6000
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(6):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "read_file", "arguments": "{}"}}  # fmt: skip
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": tool_result},
        ]
    messages.append({"role": "user", "content": "Now summarise what you found."})
    fake.context_window["fake-model"] = 6000
    fake.reply["fake-model"] = REPLY * 20  # 100 tokens, cut at 40: three parts
    fake.cut_at["fake-model"] = 40
    r = await traced.async_openai().chat.completions.create(model="gpt-test", messages=messages)  # type: ignore[arg-type]
    assert r.choices[0].message.content == REPLY * 20
    await traced.stop()
    (server,) = [s for s in collector.spans if s.kind == 2]
    names = [name for name, _ in server.events]
    assert "prompt_too_long_recovery" in names and "output_continuation" in names
    compaction = dict(server.events)["prompt_too_long_recovery"]
    assert compaction["llm_gateway.strategy"] == "snip_tool_results"
    assert compaction["llm_gateway.tokens_after"] < compaction["llm_gateway.tokens_before"]
    assert set(server.attributes["llm_gateway.recovery"]) >= {"compaction", "continuation"}
    assert MARKER.encode() not in b"".join(collector.raw)
    assert REPLY.encode() not in b"".join(collector.raw)


def test_tracing_is_off_without_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configured but not installed: a warning and no tracing (never a crash)."""
    import sys

    from gateway.observe import tracing

    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert tracing.configure(env) is None
    assert tracing.configure({}) is None  # not configured
    assert tracing.configure({**env, "OTEL_SDK_DISABLED": "true"}) is None
