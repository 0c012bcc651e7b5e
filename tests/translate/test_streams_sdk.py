"""The official SDKs read translated streams: each documented stream, translated, is served
by a local aiohttp server and streamed by the ``openai`` and ``anthropic`` clients, whose
accumulated final message must say what the source said."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from tests.translate.test_streams import EXPECT, FORMATS, fixture, translate

PATHS = {
    "chat": "/v1/chat/completions",
    "messages": "/v1/messages",
    "responses": "/v1/responses",
}


class Served:
    """What the next request to any endpoint gets: status, content type and body."""

    def __init__(self) -> None:
        self.status = 200
        self.body = b""
        self.content_type = "text/event-stream"
        self.requests: list[Any] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        if self.content_type != "text/event-stream":
            return web.Response(status=self.status, body=self.body, content_type=self.content_type)
        resp = web.StreamResponse(status=self.status, headers={"content-type": self.content_type})
        await resp.prepare(request)
        await resp.write(self.body)
        await resp.write_eof()
        return resp


@pytest.fixture
async def served(aiohttp_server: Callable[..., Any]) -> AsyncIterator[tuple[Served, str]]:
    s = Served()
    app = web.Application()
    for path in PATHS.values():
        app.router.add_post(path, s.handle)
    server = await aiohttp_server(app)
    yield s, str(server.make_url(""))


async def final_of(target: str, base: str) -> dict[str, Any]:
    """Stream with the official SDK of ``target``; what its accumulated final message says."""
    if target == "messages":
        async with (
            anthropic.AsyncAnthropic(base_url=base, api_key="k", max_retries=0) as client,
            client.messages.stream(
                model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
            ) as stream,
        ):
            texts = [t async for t in stream.text_stream]
            msg = await stream.get_final_message()
        text = "".join(b.text for b in msg.content if b.type == "text")
        assert "".join(texts) == text
        return {
            "text": text,
            "reasoning": "".join(b.thinking for b in msg.content if b.type == "thinking"),
            "signature": "".join(b.signature or "" for b in msg.content if b.type == "thinking"),
            "calls": [(b.id, b.name, b.input) for b in msg.content if b.type == "tool_use"],
            "stop": msg.stop_reason,
            "usage": (
                msg.usage.input_tokens
                + (msg.usage.cache_read_input_tokens or 0)
                + (msg.usage.cache_creation_input_tokens or 0),
                msg.usage.output_tokens,
            ),
            "model": msg.model,
            "id": msg.id,
        }
    async with openai.AsyncOpenAI(base_url=base + "/v1", api_key="k", max_retries=0) as client:
        if target == "chat":
            async with client.chat.completions.stream(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                stream_options={"include_usage": True},
            ) as stream:
                async for _ in stream:
                    pass
                completion = await stream.get_final_completion()
            choice = completion.choices[0]
            message = choice.message
            extra = message.model_extra or {}
            u = completion.usage
            return {
                "text": message.content or "",
                "reasoning": extra.get("reasoning_content") or "",
                "calls": [
                    (c.id, c.function.name, orjson.loads(c.function.arguments or "{}"))
                    for c in message.tool_calls or ()
                ],
                "stop": choice.finish_reason,
                "usage": (u.prompt_tokens, u.completion_tokens) if u else None,
                "model": completion.model,
                "id": completion.id,
            }
        async with client.responses.stream(model="m", input="hi") as rstream:
            async for _ in rstream:
                pass
            response = await rstream.get_final_response()
        ru = response.usage
        calls = [o for o in response.output if o.type == "function_call"]
        return {
            "text": response.output_text,
            "reasoning": "".join(
                s.text for o in response.output if o.type == "reasoning" for s in o.summary
            ),
            "calls": [(c.call_id, c.name, orjson.loads(c.arguments or "{}")) for c in calls],
            "stop": response.status,
            "usage": (ru.input_tokens, ru.output_tokens) if ru else None,
            "model": response.model,
            "id": response.id,
        }


SDK_STOP = {
    "chat": {"end_turn": "stop", "tool_use": "tool_calls"},
    "messages": {"end_turn": "end_turn", "tool_use": "tool_use"},
    "responses": {"end_turn": "completed", "tool_use": "completed"},
}


@pytest.mark.parametrize("target", FORMATS)
@pytest.mark.parametrize("name", sorted(EXPECT))
async def test_official_sdk_accumulates_the_translated_stream(
    served: tuple[Served, str], name: str, target: str
) -> None:
    """The official SDK of the client's format parses the translated stream, and its final
    message has the source's text, reasoning, tool calls (parsed input), stop and usage."""
    s, base = served
    e = EXPECT[name]
    out, _ = translate(fixture(name), e["format"], target)
    s.body = b"".join(out)
    got = await final_of(target, base)
    want: dict[str, Any] = {
        "text": e["text"],
        "reasoning": e["reasoning"],
        "calls": e["calls"],
        "stop": SDK_STOP[target][e["stop"]],
        "usage": e["usage"] or (0, 0),
        "model": "public-model",
    }
    if target == "messages":
        want["signature"] = e.get("signature", "") if e["format"] == "messages" else ""
    if target == "responses" and e["usage"] is None:
        want["usage"] = None  # Responses says null when the upstream gave no usage
    assert {k: got[k] for k in want} == want
    prefix = {"chat": "chatcmpl-", "messages": "msg_", "responses": "resp_"}[target]
    assert got["id"] == prefix + e["id"]


UPSTREAM_ERROR = {
    "chat": b'data: {"error": {"message": "Rate limit reached", "type": "requests", "param": null, "code": "rate_limit_exceeded"}}\n\n',
    "messages": b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n',
    "responses": b'event: error\ndata: {"type":"error","code":"server_error","message":"Something went wrong","param":null,"sequence_number":4}\n\n',
}


@pytest.mark.parametrize("target", FORMATS)
@pytest.mark.parametrize("source", FORMATS)
async def test_official_sdk_raises_on_a_translated_error_event(
    served: tuple[Served, str], source: str, target: str
) -> None:
    """A mid-stream upstream error, translated, makes the client's SDK raise with the
    upstream's message: the stream is never presented as complete."""
    s, base = served
    sample = {"chat": "chat_text", "messages": "anthropic_basic", "responses": "responses_text"}
    raw = b"".join(fixture(sample[source]).split(b"\n\n")[i] + b"\n\n" for i in range(4))
    out, _ = translate(raw + UPSTREAM_ERROR[source], source, target)
    s.body = b"".join(out)
    message = {"chat": "Rate limit reached", "messages": "Overloaded",
               "responses": "Something went wrong"}[source]  # fmt: skip
    errors = (anthropic.APIError,) if target == "messages" else (openai.APIError,)
    with pytest.raises(errors) as info:
        await final_of(target, base)
    assert message in str(info.value)
