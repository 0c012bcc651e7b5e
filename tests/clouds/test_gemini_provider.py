"""Gemini served natively, end to end: the official OpenAI and Anthropic SDKs through the
real gateway to a fake Google AI Studio (``api: gemini``) and a fake Vertex AI (Gemini by
its own ``generateContent``), JSON and streams; multi-turn tool conversations on a model
that requires its thought signatures back; and recovery from what Gemini fails with."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.policy.merge import deep_merge
from gateway.routing.policyset import hash_key
from gateway.testing import CutAfter, Error, ErrorEventAfter, FakeProvider, Success
from gateway.testing.fake_gemini import FakeGemini
from gateway.testing.fake_google_token import FakeGoogleToken
from gateway.testing.fake_vertex import FakeVertex
from tests.clouds.cloud_env import isolate
from tests.harness import CLIENT_KEY, FAST_POLICY, Harness, write_policies
from tests.log_sink import Sink

GEMINI_KEY = "AIza-gemini-secret-0123456789"
FLASH = "gemini-2.5-flash"
PRO3 = "gemini-3-pro-preview"
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"], "additionalProperties": False}}}  # fmt: skip
ANTHROPIC_TOOL = {"name": "get_weather", "description": "The weather in a city",
                  "input_schema": TOOL["function"]["parameters"]}  # fmt: skip


@dataclass
class Google:
    ai: FakeGemini
    vertex: FakeVertex
    gw: Harness
    logs: Sink


def policy(ai: str, vertex: str) -> dict[str, Any]:
    fast = deep_merge(FAST_POLICY, {"stream": {"on_midstream_failure": "continue"}})
    return {
        "platform.yaml": {
            "providers": {
                "google-ai": {"api": "gemini", "base_url": ai, "api_key_env": "GEMINI_KEY"},
                "vertex-eu": {"api": "vertex", "project": "acme-ml", "region": "europe-west1",
                              "base_url": vertex},
            },
            "models": {
                "flash": {"provider": "google-ai", "upstream_model": FLASH},
                "pro3": {"provider": "google-ai", "upstream_model": PRO3},
                "vertex-flash": {"provider": "vertex-eu", "upstream_model": FLASH},
                "flash-both": {"deployments": [
                    {"provider": "google-ai", "upstream_model": FLASH},
                    {"provider": "vertex-eu", "upstream_model": FLASH}]},
                "flash-primary": {"provider": "google-ai", "upstream_model": "gemini-primary"},
            },
            "policies": {"fast": fast, "to-vertex": deep_merge(
                fast, {"fallback": {"chain": ["vertex-flash"]}})},
        },
        "teams/apps.yaml": {"teams": {"apps": {
            "keys": [hash_key(CLIENT_KEY)],
            "routes": [
                {"match": {"model": "flash-primary"}, "policy": "to-vertex"},
                {"match": {"model": "*"}, "policy": "fast"}],
        }}},
    }  # fmt: skip


@pytest.fixture
async def google(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_sink: Sink
) -> AsyncIterator[Google]:
    isolate(monkeypatch, tmp_path / "home")
    async with (
        FakeProvider() as direct,
        FakeGoogleToken() as token,
        FakeGemini(keys={GEMINI_KEY}) as ai,
    ):
        vertex = FakeVertex(tokens=token.valid, project="acme-ml", region="europe-west1")
        await vertex.start()
        monkeypatch.setenv("GEMINI_KEY", GEMINI_KEY)
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS", str(token.service_account_file(tmp_path))
        )
        log_sink.configure()
        files = write_policies(tmp_path / "p", policy(ai.url, vertex.url))
        gw = await Harness(direct, files).start()
        try:
            yield Google(ai, vertex, gw, log_sink)
        finally:
            await gw.stop()
            await vertex.stop()


def _no_secret(g: Google) -> None:
    """Neither the client's key nor the Gemini key shows in a log line; the client's key
    never went upstream."""
    text = json.dumps(g.logs.lines())
    assert GEMINI_KEY not in text and CLIENT_KEY not in text
    for r in g.ai.requests + g.vertex.requests:
        assert CLIENT_KEY not in json.dumps(r.headers) and CLIENT_KEY not in r.query_string


# ---- answers ------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_an_openai_client_on_gemini_in_ai_studio(google: Google, stream: bool) -> None:
    """The chat request goes to generateContent (streamGenerateContent?alt=sse) with the key
    as x-goog-api-key, no model or stream in the body; the answer and its usage come back
    in chat's own fields."""
    c = google.gw.async_openai()
    messages: Any = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    if stream:
        chunks = [
            ch
            async for ch in await c.chat.completions.create(
                model="flash", messages=messages, stream=True,
                stream_options={"include_usage": True},
            )
        ]  # fmt: skip
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        usage = chunks[-1].usage
        finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1]
    else:
        resp = await c.chat.completions.create(model="flash", messages=messages)
        text, usage = resp.choices[0].message.content, resp.usage
        finish = resp.choices[0].finish_reason
        assert resp.model == "flash"
    r = google.ai.requests[-1]
    method = "streamGenerateContent" if stream else "generateContent"
    assert r.path == f"/v1beta/models/{FLASH}:{method}"
    assert (r.query_string == "alt=sse") is stream
    assert r.headers["x-goog-api-key"] == GEMINI_KEY and "authorization" not in r.headers
    assert "model" not in r.body and "stream" not in r.body
    assert r.body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert text and text.startswith("Hello")
    assert finish == "stop"
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    _no_secret(google)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_an_anthropic_client_on_gemini_in_vertex(google: Google, stream: bool) -> None:
    """Vertex's own Gemini endpoint (publishers/google, a bearer token), for an Anthropic
    client: its text, stop and usage in Messages' fields."""
    a = google.gw.async_anthropic()
    kw: Any = {"model": "vertex-flash", "max_tokens": 200,
               "messages": [{"role": "user", "content": "Hi"}]}  # fmt: skip
    if stream:
        async with a.messages.stream(**kw) as s:
            m = await s.get_final_message()
    else:
        m = await a.messages.create(**kw)
    r = google.vertex.requests[-1]
    assert "/publishers/google/models/gemini-2.5-flash:" in r.path
    assert r.headers["authorization"].startswith("Bearer ")
    assert r.body["generationConfig"]["maxOutputTokens"] == 200
    assert m.content[0].type == "text" and m.content[0].text.startswith("Hello")
    assert m.stop_reason == "end_turn" and m.usage.output_tokens > 0


async def test_a_cut_answer_is_continued(google: Google) -> None:
    """MAX_TOKENS is a cut answer: the gateway continues it (policy max_tokens recovery)
    and the client gets the whole reply."""
    reply = "A gateway continues an answer the model stopped at its output limit. " * 3
    google.ai.reply[FLASH] = reply
    google.ai.cut_at[FLASH] = 20
    c = google.gw.async_openai()
    resp = await c.chat.completions.create(
        model="flash", messages=[{"role": "user", "content": "Tell me"}]
    )
    assert resp.choices[0].message.content == reply
    assert len(google.ai.requests) >= 2


@pytest.mark.parametrize(
    ("reason", "chat", "anthropic"),
    [("SAFETY", "content_filter", "refusal"), ("RECITATION", "content_filter", "refusal")],
)
async def test_a_blocked_answer_is_a_content_filter(
    google: Google, reason: str, chat: str, anthropic: str
) -> None:
    google.ai.push(Success(finish_reason=reason), model=FLASH)
    google.ai.push(Success(finish_reason=reason), model=FLASH)
    resp = await google.gw.async_openai().chat.completions.create(
        model="flash", messages=[{"role": "user", "content": "Hi"}]
    )
    assert resp.choices[0].finish_reason == chat
    m = await google.gw.async_anthropic().messages.create(
        model="flash", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
    )
    assert m.stop_reason == anthropic


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_malformed_function_call_is_retried(google: Google, stream: bool) -> None:
    """MALFORMED_FUNCTION_CALL is no answer: the request is tried again, and the client
    gets the next one."""
    google.ai.push(Success(finish_reason="MALFORMED_FUNCTION_CALL"), model=FLASH)
    c = google.gw.async_openai()
    messages: Any = [{"role": "user", "content": "Hi"}]
    if stream:
        s = await c.chat.completions.create(model="flash", messages=messages, stream=True)
        text = "".join([ch.choices[0].delta.content or "" async for ch in s if ch.choices])
    else:
        r = await c.chat.completions.create(model="flash", messages=messages)
        text = r.choices[0].message.content or ""
    assert text.startswith("Hello") and len(google.ai.requests) == 2


# ---- tool conversations and thought signatures ------------------------------------


async def _chat_tool_turns(google: Google, stream: bool) -> list[Any]:
    c = google.gw.async_openai()
    messages: Any = [{"role": "user", "content": "Use get_weather for Paris"}]
    if stream:
        calls: dict[int, Any] = {}
        async for ch in await c.chat.completions.create(
            model="pro3", messages=messages, tools=[TOOL], stream=True
        ):
            for d in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
                call = calls.setdefault(d.index, {"id": "", "name": "", "args": ""})
                call["id"] += d.id or ""
                call["name"] += d.function.name or "" if d.function else ""
                call["args"] += d.function.arguments or "" if d.function else ""
        tool_calls = [{"id": v["id"], "type": "function",
                       "function": {"name": v["name"], "arguments": v["args"]}}
                      for v in calls.values()]  # fmt: skip
    else:
        first = await c.chat.completions.create(model="pro3", messages=messages, tools=[TOOL])
        assert first.choices[0].finish_reason == "tool_calls"
        tool_calls = [tc.model_dump() for tc in first.choices[0].message.tool_calls or []]
    assert tool_calls and tool_calls[0]["function"]["name"] == "get_weather"
    messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
    messages.append({"role": "tool", "tool_call_id": tool_calls[0]["id"], "content": "Sunny"})
    second = await c.chat.completions.create(model="pro3", messages=messages, tools=[TOOL])
    return [tool_calls, second]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_an_openai_client_holds_a_tool_loop_on_a_signing_model(
    google: Google, stream: bool
) -> None:
    """Gemini 3 signs its call; the OpenAI client gets the signature inside the call's id
    and hands it back untouched; Gemini gets it back as the call's thoughtSignature (the
    fake refuses a call without the signature it minted)."""
    tool_calls, second = await _chat_tool_turns(google, stream)
    assert "__thought__" in tool_calls[0]["id"]
    assert second.choices[0].message.content == 'The tool returned: {"output": "Sunny"}'
    sent = google.ai.requests[-1].body["contents"]
    call_part = sent[1]["parts"][0]
    assert call_part["thoughtSignature"] and "__thought__" not in call_part["functionCall"]["id"]
    response = sent[2]["parts"][0]["functionResponse"]
    assert response["name"] == "get_weather" and response["response"] == {"output": "Sunny"}
    assert response["id"] == call_part["functionCall"]["id"]


async def test_a_stripped_signature_is_refused_by_the_model(google: Google) -> None:
    """Without the signature (a client that rewrote the id), Gemini's own 400 reaches the
    client, in its format: the fake plays Gemini's rule."""
    tool_calls, _ = await _chat_tool_turns(google, False)
    bare = tool_calls[0]["id"].split("__thought__")[0]
    c = google.gw.async_openai()
    import openai

    with pytest.raises(openai.BadRequestError, match="thought_signature"):
        await c.chat.completions.create(
            model="pro3", tools=[TOOL],
            messages=[
                {"role": "user", "content": "Use get_weather for Paris"},
                {"role": "assistant", "content": None,
                 "tool_calls": [{**tool_calls[0], "id": bare}]},
                {"role": "tool", "tool_call_id": bare, "content": "Sunny"},
            ],
        )  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_an_anthropic_client_holds_a_tool_loop_on_a_signing_model(
    google: Google, stream: bool
) -> None:
    """Claude Code's shape: tool_use ids carry the signature ([A-Za-z0-9_-] only), over
    three turns."""
    a = google.gw.async_anthropic()
    messages: Any = [{"role": "user", "content": "Use get_weather for Paris"}]
    for turn in range(2):
        kw: Any = {"model": "pro3", "max_tokens": 300, "tools": [ANTHROPIC_TOOL],
                   "messages": messages}  # fmt: skip
        if stream:
            async with a.messages.stream(**kw) as s:
                m = await s.get_final_message()
        else:
            m = await a.messages.create(**kw)
        if turn == 1:
            break
        assert m.stop_reason == "tool_use"
        use = next(b for b in m.content if b.type == "tool_use")
        assert "__thought__" in use.id and all(ch.isalnum() or ch in "_-" for ch in use.id)
        messages.append({"role": "assistant", "content": [b.model_dump() for b in m.content]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny"}]})  # fmt: skip
    assert m.content[-1].text == 'The tool returned: {"output": "Sunny"}'
    assert google.ai.requests[-1].body["contents"][1]["parts"][0]["thoughtSignature"]


async def test_a_responses_client_holds_a_tool_loop_on_a_signing_model(google: Google) -> None:
    c = google.gw.async_openai()
    first = await c.responses.create(model="pro3", input="Use get_weather for Paris",
                                     tools=[{"type": "function", **TOOL["function"]}])  # fmt: skip
    call = next(i for i in first.output if i.type == "function_call")
    second = await c.responses.create(
        model="pro3", tools=[{"type": "function", **TOOL["function"]}],
        input=[{"role": "user", "content": "Use get_weather for Paris"}, call.model_dump(),
               {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny"}],
    )  # fmt: skip
    assert second.output_text == 'The tool returned: {"output": "Sunny"}'


# ---- recovery ------------------------------------------------------------------------


async def test_a_429_waits_what_its_retry_info_says(google: Google) -> None:
    """RESOURCE_EXHAUSTED with RetryInfo retryDelay 0.3s: the same deployment is asked again
    after that wait."""
    google.ai.push(Error.gemini_rate_limit(retry_delay="0.3s"), model=FLASH)
    started = time.monotonic()
    resp = await google.gw.async_openai().chat.completions.create(
        model="flash", messages=[{"role": "user", "content": "Hi"}]
    )
    assert resp.choices[0].message.content
    assert time.monotonic() - started >= 0.3
    assert len(google.ai.requests) == 2


async def test_a_429_moves_to_a_sibling_deployment_at_once(google: Google) -> None:
    """A rate-limited AI Studio deployment of a model that Vertex serves too: the next
    attempt goes to Vertex without waiting the 20 s Google asked for."""
    google.ai.push(Error.gemini_rate_limit(retry_delay="20s"), model=FLASH)
    started = time.monotonic()
    resp = await google.gw.async_openai().chat.completions.create(
        model="flash-both", messages=[{"role": "user", "content": "Hi"}]
    )
    assert resp.choices[0].message.content and time.monotonic() - started < 5
    assert google.vertex.requests[-1].path.endswith(f"{FLASH}:generateContent")


async def test_an_overloaded_model_falls_back(google: Google) -> None:
    """503 UNAVAILABLE "The model is overloaded" twice: the route's fallback answers."""
    for _ in range(4):
        google.ai.push(Error.gemini_overloaded(), model="gemini-primary")
    resp = await google.gw.async_openai().chat.completions.create(
        model="flash-primary", messages=[{"role": "user", "content": "Hi"}]
    )
    assert resp.choices[0].message.content
    assert google.vertex.requests and resp.model == "vertex-flash"


async def test_a_stream_cut_mid_answer_is_resumed(google: Google) -> None:
    """The connection drops after two chunks: the gateway resumes, and the client's text is
    the whole reply, once."""
    reply = "One two three four five six seven eight nine ten eleven twelve."
    google.ai.reply[FLASH] = reply
    google.ai.push(CutAfter(2), model=FLASH)
    s = await google.gw.async_openai().chat.completions.create(
        model="flash", messages=[{"role": "user", "content": "Count"}], stream=True
    )
    text = "".join([ch.choices[0].delta.content or "" async for ch in s if ch.choices])
    assert text == reply
    assert len(google.ai.requests) == 2


@pytest.mark.parametrize("client", ["openai", "anthropic"])
async def test_an_error_inside_a_stream_is_resumed(google: Google, client: str) -> None:
    """Gemini's in-stream error (503 UNAVAILABLE after two chunks) is a mid-stream
    failure: classified as an overload and resumed, the client's text whole and once."""
    reply = "Alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu."
    google.ai.reply[FLASH] = reply
    google.ai.push(ErrorEventAfter(2), model=FLASH)
    messages: Any = [{"role": "user", "content": "Letters"}]
    if client == "openai":
        s = await google.gw.async_openai().chat.completions.create(
            model="flash", messages=messages, stream=True
        )
        text = "".join([ch.choices[0].delta.content or "" async for ch in s if ch.choices])
    else:
        async with google.gw.async_anthropic().messages.stream(
            model="flash", max_tokens=300, messages=messages
        ) as st:
            text = "".join([t async for t in st.text_stream])
    assert text == reply and len(google.ai.requests) == 2
    cut = [e for e in google.logs.lines() if e.get("event") == "stream_interrupted"]
    assert cut and cut[0]["category"] == "server_overload" and cut[0]["action"] == "resume"


async def test_count_tokens_on_vertex_gemini(google: Google) -> None:
    count = await google.gw.async_anthropic().messages.count_tokens(
        model="vertex-flash", messages=[{"role": "user", "content": "Hi there"}]
    )
    r = google.vertex.requests[-1]
    assert r.path.endswith(f"/publishers/google/models/{FLASH}:countTokens")
    assert r.body == {"contents": [{"role": "user", "parts": [{"text": "Hi there"}]}]}
    assert count.input_tokens > 0


async def test_count_tokens_asks_gemini(google: Google) -> None:
    """Anthropic's count_tokens on a Gemini model is Gemini's own countTokens (the request
    translated, system and tools included), not an estimate."""
    a = google.gw.async_anthropic()
    raw = await a.messages.with_raw_response.count_tokens(
        model="flash", system="Be brief.", tools=[ANTHROPIC_TOOL],  # type: ignore[list-item]
        messages=[{"role": "user", "content": "Hi there"}],
    )  # fmt: skip
    count = await raw.parse()
    r = google.ai.requests[-1]
    assert r.path == f"/v1beta/models/{FLASH}:countTokens"
    inner = r.body["generateContentRequest"]
    assert inner["model"] == f"models/{FLASH}" and inner["systemInstruction"]
    assert count.input_tokens > 0 and "x-gateway-estimate" not in raw.headers


# ---- tokens and cost ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_cached_tokens_are_counted_and_priced(google: Google, stream: bool) -> None:
    """Gemini's implicit cache read on the second turn (cachedContentTokenCount) reaches
    the client in chat's own fields, the access log and the metric, priced by
    genai-prices' Google rates (cache reads at their own rate)."""
    from gateway.money.pricing import table_price

    c = google.gw.async_openai()
    long = "A gateway keeps the prompt a model has seen warm in its cache. " * 120
    messages: Any = [{"role": "system", "content": long}, {"role": "user", "content": "Hi"}]
    rid = ""
    for n in range(2):
        rid = f"cache-{stream}-{n}"
        kw: Any = {"model": "flash", "messages": messages, "reasoning_effort": "low",
                   "extra_headers": {"x-request-id": rid}}  # fmt: skip
        if stream:
            chunks = await c.chat.completions.create(
                stream=True, stream_options={"include_usage": True}, **kw
            )
            usage = [ch.usage async for ch in chunks if ch.usage][-1]
        else:
            usage = (await c.chat.completions.create(**kw)).usage
    assert usage is not None
    read = google.ai.requests[-1].cache_read
    assert read > 1000 and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == read
    _, line = await google.logs.line(rid)
    assert line["tokens"]["cache_read"] == read
    price = table_price(FLASH, provider_id="google")
    assert price is not None
    r = price.rates
    want = ((usage.prompt_tokens - read) * r.input + read * r.cache_read
            + usage.completion_tokens * r.output)  # fmt: skip
    assert line["cost_usd"] == pytest.approx(want, rel=1e-6)
    labels = {"team": "apps", "model": "flash", "deployment": "google-ai"}
    assert google.gw.metric("llm_gateway_cached_tokens_total", kind="read", **labels) >= read


async def test_thinking_is_reasoning_and_billed_as_output(google: Google) -> None:
    """An Anthropic client's thinking budget asks Gemini for its thoughts: they come back
    as a thinking block, and thoughtsTokenCount is in the output the client and the bill
    count."""
    from gateway.money.pricing import table_price

    a = google.gw.async_anthropic()
    raw = await a.messages.with_raw_response.create(
        model="flash", max_tokens=3000, thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": "Hi"}], extra_headers={"x-request-id": "think"},
    )  # fmt: skip
    m = await raw.parse()
    config = google.ai.requests[-1].body["generationConfig"]["thinkingConfig"]
    assert config == {"thinkingBudget": 1024, "includeThoughts": True}
    assert m.content[0].type == "thinking" and m.content[1].type == "text"
    _, line = await google.logs.line("think")
    assert line["tokens"]["completion"] == m.usage.output_tokens > len(m.content[1].text) // 4
    price = table_price(FLASH, provider_id="google")
    assert price is not None
    want = m.usage.input_tokens * price.rates.input + m.usage.output_tokens * price.rates.output
    assert line["cost_usd"] == pytest.approx(want, rel=1e-6)
