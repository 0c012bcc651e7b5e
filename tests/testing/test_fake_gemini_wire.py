"""The fake Gemini's bytes on the wire, read with a plain aiohttp client: SSE framing,
the streamed JSON array, the stream faults, keys, and Google's refusal bodies
(gateway/testing/fake_gemini.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.testing import (
    DEFAULT_REPLY,
    Delay,
    Error,
    ErrorEventAfter,
    FakeGemini,
    FakeVertex,
    HeadersThenSilence,
    MalformedEventAt,
    NoDone,
    StallAfter,
    Tamper,
)

MODEL = "gemini-2.5-flash"
BODY = {"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]}
REPLY = DEFAULT_REPLY.format(model=MODEL)


@pytest.fixture
async def fake() -> AsyncIterator[FakeGemini]:
    async with FakeGemini(keys={"k"}) as f:
        yield f


async def post(
    fake: FakeGemini, method: str, body: Any, *, query: str = "", key: str | None = "k"
) -> tuple[int, str, bytes]:
    """POST ``body`` to ``{model}:{method}``: the status, content type and raw body."""
    headers = {"x-goog-api-key": key} if key is not None else {}
    url = f"{fake.url}/v1beta/models/{MODEL}:{method}{query}"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers) as r,
    ):
        return r.status, r.content_type, await r.read()


def sse_data(raw: bytes) -> list[str]:
    """The data of each SSE event, checking every event ends with CRLF CRLF."""
    assert raw.endswith(b"\r\n\r\n")
    events = raw.decode().split("\r\n\r\n")[:-1]
    assert all(e.startswith("data: ") and "\n" not in e for e in events)
    return [e.removeprefix("data: ") for e in events]


async def test_sse_events_end_with_crlf_crlf_and_no_done(fake: FakeGemini) -> None:
    status, ctype, raw = await post(fake, "streamGenerateContent", BODY, query="?alt=sse")
    assert status == 200 and ctype == "text/event-stream"
    chunks = [json.loads(d) for d in sse_data(raw)]
    texts = [c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks]
    assert "".join(texts) == REPLY and texts[-1] == ""
    assert all("finishReason" not in c["candidates"][0] for c in chunks[:-1])
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    # every chunk carries the usage so far; the last one the whole of it
    said = [c["usageMetadata"]["candidatesTokenCount"] for c in chunks]
    assert said == sorted(said) and said[-1] == chunks[-1]["usageMetadata"]["totalTokenCount"] - 3
    assert {c["responseId"] for c in chunks} == {chunks[0]["responseId"]}


async def test_without_alt_sse_the_chunks_come_as_a_json_array(fake: FakeGemini) -> None:
    """Pretty-printed elements: ``[{`` first, ``\\n,\\r\\n`` between, ``\\n]`` last."""
    status, ctype, raw = await post(fake, "streamGenerateContent", BODY)
    assert status == 200 and ctype == "application/json"
    text = raw.decode()
    assert text.startswith('[{\n  "candidates": [') and text.endswith("}\n]")
    assert text.count("\n,\r\n") == fake.chunks
    chunks = json.loads(text)
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks) == REPLY


async def test_an_error_to_an_array_stream_comes_in_an_array(fake: FakeGemini) -> None:
    fake.push(Error.gemini_overloaded())
    status, _, raw = await post(fake, "streamGenerateContent", BODY)
    assert status == 503
    assert json.loads(raw) == [{"error": {"code": 503, "status": "UNAVAILABLE",
                                          "message": "The model is overloaded. Please try again later."}}]  # fmt: skip
    status, _, raw = await post(fake, "streamGenerateContent", {**BODY, "stream": True})
    assert status == 400 and json.loads(raw)[0]["error"]["status"] == "INVALID_ARGUMENT"


async def test_no_done_ends_cleanly_without_the_finish(fake: FakeGemini) -> None:
    """NoDone: the stream ends after its last text chunk, with no finishReason (what the
    Gemini CLI retries as NO_FINISH_REASON)."""
    fake.push(NoDone())
    _, _, raw = await post(fake, "streamGenerateContent", BODY, query="?alt=sse")
    chunks = [json.loads(d) for d in sse_data(raw)]
    assert len(chunks) == fake.chunks
    assert not any("finishReason" in c["candidates"][0] for c in chunks)


async def test_in_stream_error_and_malformed_events(fake: FakeGemini) -> None:
    fake.push(ErrorEventAfter(2))
    _, _, raw = await post(fake, "streamGenerateContent", BODY, query="?alt=sse")
    data = sse_data(raw)
    assert len(data) == 3
    assert json.loads(data[-1]) == {"error": {"code": 503, "status": "UNAVAILABLE",
                                              "message": "The model is overloaded. Please try again later."}}  # fmt: skip
    fake.push(MalformedEventAt(1))
    _, _, raw = await post(fake, "streamGenerateContent", BODY, query="?alt=sse")
    data = sse_data(raw)
    assert data[1] == "{not json" and len(data) == fake.chunks + 2
    fake.push(ErrorEventAfter(1, {"error": {"code": 500, "message": "boom", "status": "INTERNAL"}}))
    _, _, raw = await post(fake, "streamGenerateContent", BODY)
    assert json.loads(raw)[-1]["error"]["status"] == "INTERNAL"


async def test_tamper_rewrites_every_chunk(fake: FakeGemini) -> None:
    def drop_usage(data: Any, index: int) -> Any:
        data.pop("usageMetadata", None)
        return data

    fake.push(Tamper(drop_usage))
    _, _, raw = await post(fake, "streamGenerateContent", BODY, query="?alt=sse")
    assert not any("usageMetadata" in json.loads(d) for d in sse_data(raw))


async def test_the_key_may_come_as_a_query_parameter(fake: FakeGemini) -> None:
    fake.push(Error.gemini_internal(), key="k")
    status, _, _ = await post(fake, "generateContent", BODY, query="?key=k", key=None)
    assert status == 500 and fake.requests[-1].key == "k"
    status, _, raw = await post(fake, "generateContent", BODY, key=None)
    assert status == 403 and json.loads(raw)["error"]["status"] == "PERMISSION_DENIED"
    status, _, raw = await post(fake, "generateContent", BODY, key="")
    assert status == 403


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({**BODY, "model": MODEL},
         'Invalid JSON payload received. Unknown name "model": Cannot find field.'),
        ({"contents": [{"role": "assistant", "parts": [{"text": "hi"}]}]},
         "Please use a valid role: user, model."),
        ({"contents": []}, "* GenerateContentRequest.contents: contents is not specified\n"),
        ({"contents": [{"role": "user", "parts": []}]},
         "* GenerateContentRequest.contents[0].parts: contents.parts must not be empty.\n"),
    ],
)  # fmt: skip
async def test_bodies_gemini_refuses(fake: FakeGemini, body: Any, message: str) -> None:
    status, _, raw = await post(fake, "generateContent", body)
    assert status == 400
    error = json.loads(raw)["error"]
    assert (error["code"], error["status"], error["message"]) == (400, "INVALID_ARGUMENT", message)


async def test_count_tokens_takes_either_form(fake: FakeGemini) -> None:
    _, _, raw = await post(fake, "countTokens", BODY)
    assert json.loads(raw)["totalTokens"] == 3
    wrapped = {"generateContentRequest": {"model": f"models/{MODEL}", **BODY}}
    _, _, raw = await post(fake, "countTokens", wrapped)
    assert json.loads(raw)["totalTokens"] == 3
    status, _, raw = await post(fake, "countTokens", {**BODY, "tools": []})
    assert status == 400 and 'Unknown name "tools"' in json.loads(raw)["error"]["message"]


async def test_vertex_wants_every_role_named() -> None:
    """A content without a role: AI Studio takes it as the user's, Vertex refuses it."""
    body = {"contents": [{"parts": [{"text": "hi"}]}]}
    async with FakeVertex(tokens={"t"}) as fv, aiohttp.ClientSession() as session:
        url = (f"{fv.url}/v1/projects/p/locations/us-central1/publishers/google/models/"
               f"{MODEL}:generateContent")  # fmt: skip
        async with session.post(url, json=body, headers={"authorization": "Bearer t"}) as r:
            assert r.status == 400
            assert (await r.json())["error"]["message"] == "Please use a valid role: user, model."
        async with session.post(
            url.replace(":generateContent", ":streamGenerateContent?alt=sse"),
            json=BODY, headers={"authorization": "Bearer t"},
        ) as r:  # fmt: skip
            raw = await r.read()
    chunks = [json.loads(d) for d in sse_data(raw)]
    assert "createTime" in chunks[0] and "index" not in chunks[0]["candidates"][0]
    async with FakeGemini() as fg:
        status, _, _ = await post(fg, "generateContent", body)
    assert status == 200


async def test_stall_delay_and_silence_on_a_gemini_stream(fake: FakeGemini) -> None:
    """StallAfter sends its chunks and falls silent until the client goes (a disconnect);
    Delay spaces the content chunks; HeadersThenSilence sends SSE headers, then nothing."""
    url = f"{fake.url}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    headers = {"x-goog-api-key": "k"}
    fake.push(StallAfter(2))
    fake.push(HeadersThenSilence())
    fake.push(Delay(0.05))
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=BODY, headers=headers) as r:
            got = b""
            while got.count(b"\r\n\r\n") < 2:
                got += await r.content.readany()
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(r.content.readany(), 0.3)
        await asyncio.wait_for(fake.disconnected.wait(), 2)
        async with session.post(url, json=BODY, headers=headers) as r:
            assert r.status == 200 and r.content_type == "text/event-stream"
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(r.content.readany(), 0.3)
        started = time.monotonic()
        async with session.post(url, json=BODY, headers=headers) as r:
            data = sse_data(await r.read())
        assert time.monotonic() - started >= 0.05 * fake.chunks
        assert len(data) == fake.chunks + 1
