"""Gemini as the client's format: every source format's streams and JSON answers written
as Gemini's (gateway/translate/streams/write_gemini.py, gemini_answers.write_gemini) and
read back by Google's own SDK (``google-genai``): each event a valid
``GenerateContentResponse``, the joined stream saying what the source said (text,
thoughts, calls with their thought signatures, the finish reason, the usage), errors
raised as the SDK raises Google's, and no keepalive the SDK cannot read."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from google import genai
from google.genai import errors, types

from gateway.formats import CHAT, CONVERSE, GEMINI, MESSAGES, RESPONSES
from gateway.formats.usage import Usage
from gateway.testing.answer import FakeAnswer, FakeToolCall
from gateway.testing.gemini_shapes import gemini_chunks, gemini_json
from gateway.translate import answers, convert
from gateway.translate.converse_answers import write_converse
from gateway.translate.errors import UpstreamError, from_anthropic, from_google, from_openai
from gateway.translate.gemini_answers import write_gemini
from gateway.translate.ir import Answer, Part, Reasoning, Refusal, Text, ToolCall, signed_id
from gateway.translate.streams import WRITERS, StreamTranslator
from gateway.translate.streams.write_gemini import google_error, is_base64
from tests.translate.test_streams import EXPECT, MODEL, fixture, translate

pytestmark = pytest.mark.fast

SOURCES = ("chat", "messages", "responses", "converse", "gemini")
FORMAT = {"chat": CHAT, "messages": MESSAGES, "responses": RESPONSES, "converse": CONVERSE,
          "gemini": GEMINI}  # fmt: skip
PREFIX = {"chat": "chatcmpl-", "messages": "msg_", "responses": "resp_", "converse": "",
          "gemini": ""}  # fmt: skip
RID = "abc123"
#: A thought signature as Gemini sends one (base64 of opaque bytes).
SIG_BYTES = b"\n$\x01\x8f=k_\xef\xec thought signature \xff\x00"
SIG = base64.b64encode(SIG_BYTES).decode()
USAGE = Usage(100, 20, 40, 0, 5)  # 100 prompt (40 cached), 20 output (5 thinking)
MESSAGE = "Resource has been exhausted (e.g. check quota)."
RATE_LIMITED = from_google({"code": 429, "message": MESSAGE, "status": "RESOURCE_EXHAUSTED"})
FINISH = {"end_turn": "STOP", "tool_use": "STOP", "max_tokens": "MAX_TOKENS",
          "refusal": "SAFETY"}  # fmt: skip


@dataclass
class Scenario:
    """A neutral answer: parts ("text" | "reasoning" | "refusal", pieces) or ("call", id,
    name, argument pieces), its stop, or an error after its parts."""

    parts: list[tuple[Any, ...]]
    stop: str = "end_turn"
    error: UpstreamError | None = None
    usage: Usage = field(default_factory=lambda: USAGE)


WEATHER = ("call", signed_id("call_1", SIG), "get_weather",
           ['{"city": ', '"Paris", "da', 'ys": 2}'])  # fmt: skip
CLOCK = ("call", "call_2", "get_time", ['{"tz":', ' "UTC"}'])
SCENARIOS = {
    "text": Scenario([("text", ["Hel", "lo, ", "world."])]),
    "reasoning": Scenario([("reasoning", ["Let me ", "think."]), ("text", ["Yes", "."])]),
    "tool": Scenario([("text", ["Checking."]), WEATHER], "tool_use"),
    "parallel": Scenario([WEATHER, CLOCK], "tool_use"),
    "cut": Scenario([("text", ["Once upon ", "a time"])], "max_tokens"),
    "refusal": Scenario([("refusal", ["I can't ", "help with that."])], "refusal"),
}
ERRORED = Scenario([("text", ["Hel"])], error=RATE_LIMITED)


# ---------------------------------------------------------------- sources rendered


def render_with_writer(source: str, sc: Scenario) -> bytes:
    """Chat, Messages, Responses: the stream as that format's own writer sends it."""
    w = WRITERS[source](MODEL, True, 1_750_000_000)
    w.start(PREFIX[source] + RID)
    for part in sc.parts:
        kind = part[0]
        if kind == "call":
            _, call_id, name, pieces = part
            w.tool_start(call_id, call_id, name)
            for p in pieces:
                w.tool_args(call_id, p)
            w.block_end()
            continue
        for t in part[1]:
            getattr(w, kind)(t)
    if sc.error is not None:
        w.error(sc.error)
    else:
        w.usage, w.stop = sc.usage, sc.stop
        w.end()
    return b"".join(w.out)


def converse_event(name: str, payload: dict[str, Any]) -> bytes:
    """One ConverseStream event as the gateway frames it."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


CONVERSE_STOP = {"end_turn": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens",
                 "refusal": "content_filtered"}  # fmt: skip


def render_converse(sc: Scenario) -> bytes:
    out = [converse_event("messageStart", {"role": "assistant"})]
    for i, part in enumerate(sc.parts):
        at = {"contentBlockIndex": i}
        if part[0] == "call":
            _, call_id, name, pieces = part
            use = {"toolUse": {"toolUseId": call_id, "name": name}}
            out.append(converse_event("contentBlockStart", {**at, "start": use}))
            deltas = [{"toolUse": {"input": p}} for p in pieces]
        elif part[0] == "reasoning":
            deltas = [{"reasoningContent": {"text": t}} for t in part[1]]
        else:
            deltas = [{"text": t} for t in part[1]]
        out += [converse_event("contentBlockDelta", {**at, "delta": d}) for d in deltas]
        out.append(converse_event("contentBlockStop", at))
    if sc.error is not None:
        out.append(converse_event("throttlingException", {"message": sc.error.message}))
        return b"".join(out)
    out.append(converse_event("messageStop", {"stopReason": CONVERSE_STOP[sc.stop]}))
    u = sc.usage
    counts = {"inputTokens": u.input - u.cache_read, "cacheReadInputTokens": u.cache_read,
              "outputTokens": u.output, "totalTokens": u.input + u.output}  # fmt: skip
    out.append(converse_event("metadata", {"usage": counts, "metrics": {"latencyMs": 9}}))
    return b"".join(out)


def gemini_chunk(parts: list[Any], reason: str | None = None, usage: Any = None) -> bytes:
    """One streamGenerateContent event as Google sends it (CRLF framing, as AI Studio's)."""
    c: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if reason:
        c["finishReason"] = reason
    body: dict[str, Any] = {"candidates": [c], "modelVersion": "gemini-3-pro", "responseId": RID}
    if usage:
        body["usageMetadata"] = usage
    return b"data: " + orjson.dumps(body) + b"\r\n\r\n"


def gemini_usage(u: Usage) -> dict[str, Any]:
    return {"promptTokenCount": u.input, "candidatesTokenCount": u.output - (u.reasoning or 0),
            "thoughtsTokenCount": u.reasoning, "cachedContentTokenCount": u.cache_read,
            "totalTokenCount": u.input + u.output}  # fmt: skip


def gemini_part(part: tuple[Any, ...], piece: Any) -> dict[str, Any]:
    if part[0] == "call":
        _, call_id, name, pieces = part
        own, _, _ = call_id.partition("__thought__")
        out = {"functionCall": {"id": own, "name": name, "args": json.loads("".join(pieces))}}
        return {**out, "thoughtSignature": SIG} if own != call_id else out
    return {"text": piece, "thought": True} if part[0] == "reasoning" else {"text": piece}


def render_gemini(sc: Scenario) -> bytes:
    """Text in pieces, each a chunk; consecutive calls whole in one chunk (Gemini's
    parallel calls, the first signed); a last chunk with an empty text part."""
    out: list[bytes] = []
    calls: list[dict[str, Any]] = []
    for part in sc.parts:
        if part[0] == "call":
            calls.append(gemini_part(part, None))
            continue
        if calls:
            out.append(gemini_chunk(calls))
            calls = []
        out += [gemini_chunk([gemini_part(part, t)]) for t in part[1]]
    if calls:
        out.append(gemini_chunk(calls))
    if sc.error is not None:
        out.append(b"data: " + orjson.dumps({"error": google_error(sc.error)}) + b"\r\n\r\n")
    else:
        out.append(gemini_chunk([{"text": ""}], FINISH[sc.stop], gemini_usage(sc.usage)))
    return b"".join(out)


def render(source: str, sc: Scenario) -> bytes:
    if source == "converse":
        return render_converse(sc)
    if source == "gemini":
        return render_gemini(sc)
    return render_with_writer(source, sc)


# ---------------------------------------------------------------- what the SDK sees


def data_of(event: bytes) -> bytes:
    """The one data line of a Gemini event (the SSE framing checked on the way)."""
    assert event.startswith(b"data: ") and event.endswith(b"\n\n"), event
    assert b"\n" not in event[:-2], event
    return event[6:-2]


def validated(out: list[bytes], complete: bool = True) -> list[types.GenerateContentResponse]:
    """Each event through the SDK's model (which forbids unknown fields); the same ids on
    each; ``usageMetadata`` on the last only (none before the answer is complete)."""
    chunks = [types.GenerateContentResponse.model_validate_json(data_of(e)) for e in out]
    assert chunks, "no event"
    assert {c.model_version for c in chunks} == {MODEL}
    assert len({c.response_id for c in chunks}) == 1
    assert [c.usage_metadata is not None for c in chunks] == [False] * (len(chunks) - 1) + [
        complete
    ]
    return chunks


def view(chunks: list[types.GenerateContentResponse]) -> dict[str, Any]:
    """What the SDK's accessors say of the joined stream."""
    parts = [p for c in chunks if c.candidates and c.candidates[0].content
             for p in c.candidates[0].content.parts or ()]  # fmt: skip
    text = "".join(p.text for p in parts if p.text and not p.thought)
    assert "".join(c.text or "" for c in chunks) == text
    calls = [fc for c in chunks for fc in c.function_calls or ()]
    assert calls == [p.function_call for p in parts if p.function_call]
    signatures = [p.thought_signature for p in parts if p.function_call]
    reasons = [c.candidates[0].finish_reason for c in chunks if c.candidates]
    assert all(r is None for r in reasons[:-1])
    u = chunks[-1].usage_metadata
    counts = u and (u.prompt_token_count, u.candidates_token_count, u.thoughts_token_count,
                    u.cached_content_token_count, u.total_token_count)  # fmt: skip
    return {
        "text": text,
        "thoughts": "".join(p.text for p in parts if p.text and p.thought),
        "calls": [(fc.id, fc.name, fc.args, s) for fc, s in zip(calls, signatures, strict=True)],
        "finish": reasons[-1].value if reasons[-1] else None,
        "usage": counts,
    }


def expected(source: str, sc: Scenario) -> dict[str, Any]:
    calls = []
    for part in sc.parts:
        if part[0] == "call":
            own, _, sig = part[1].partition("__thought__")
            calls.append((own, part[2], json.loads("".join(part[3])), SIG_BYTES if sig else None))
    u = sc.usage
    thoughts = None if source == "converse" else u.reasoning  # Converse counts no thinking
    return {
        "text": "".join("".join(p[1]) for p in sc.parts if p[0] in ("text", "refusal")),
        "thoughts": "".join("".join(p[1]) for p in sc.parts if p[0] == "reasoning"),
        "calls": calls,
        "finish": FINISH[sc.stop],
        "usage": (u.input, u.output - (thoughts or 0), thoughts, u.cache_read, u.input + u.output),
    }


def _httpx() -> Any:
    """The HTTP library google-genai takes a client of: httpx, or its fork httpx2."""
    for name in ("httpx", "httpx2"):
        try:
            return __import__(name)
        except ImportError:
            continue
    pytest.skip("neither httpx nor httpx2: google-genai's HTTP client cannot be given")


def sdk_stream(body: bytes) -> list[types.GenerateContentResponse]:
    """google-genai's own ``generate_content_stream`` over ``body``: its line reader, error
    detection and response parsing, on an in-memory transport (no socket)."""
    httpx = _httpx()

    def handler(request: Any) -> Any:
        assert request.url.path.endswith(f"/models/{MODEL}:streamGenerateContent")
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    http = httpx.Client(transport=httpx.MockTransport(handler))
    options = types.HttpOptions(base_url="http://gateway.test", httpx_client=http)
    client = genai.Client(api_key="k", http_options=options)
    try:
        return list(client.models.generate_content_stream(model=MODEL, contents="hi"))
    finally:
        http.close()


# ---------------------------------------------------------------- streams


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("source", SOURCES)
def test_every_source_streams_to_a_gemini_client(source: str, name: str) -> None:
    sc = SCENARIOS[name]
    out, t = translate(render(source, sc), source, "gemini")
    chunks = validated(out)
    assert view(chunks) == expected(source, sc)
    assert t.done and t.malformed == 0
    if source != "converse":  # Converse's stream has no id
        assert chunks[0].response_id == RID


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("source", SOURCES)
def test_googles_sdk_reads_the_stream(source: str, name: str) -> None:
    """The SDK's own streaming call over the translated bytes (its SSE line reader, error
    check and response conversion) says what the source said."""
    sc = SCENARIOS[name]
    out, _ = translate(render(source, sc), source, "gemini")
    assert view(sdk_stream(b"".join(out))) == expected(source, sc)


@pytest.mark.parametrize("source", SOURCES)
def test_an_error_mid_stream_is_raised_by_the_sdk(source: str) -> None:
    """Google's error object (the kind's status and HTTP code, the message kept): the SDK
    raises it as a ClientError, after the text that came before."""
    out, t = translate(render(source, ERRORED), source, "gemini")
    *before, last = out
    assert view(validated(before, complete=False))["text"] == "Hel"
    err = {"code": 429, "message": MESSAGE, "status": "RESOURCE_EXHAUSTED"}
    assert orjson.loads(data_of(last)) == {"error": err} and t.done
    with pytest.raises(errors.ClientError) as raised:
        sdk_stream(b"".join(out))
    assert (raised.value.code, raised.value.status, raised.value.message) == (
        429, "RESOURCE_EXHAUSTED", MESSAGE)  # fmt: skip


@pytest.mark.parametrize("name", [n for n in EXPECT if EXPECT[n]["format"] != "gemini"])
def test_the_providers_own_streams_reach_a_gemini_client(name: str) -> None:
    """The documented and recorded streams of test_streams.py, as a Gemini client reads them."""
    want = EXPECT[name]
    out, _ = translate(fixture(name), want["format"], "gemini")
    got = view(validated(out))
    assert (got["text"], got["thoughts"]) == (want["text"], want["reasoning"])
    assert [(i, n, a) for i, n, a, _ in got["calls"]] == [tuple(c) for c in want["calls"]]
    assert got["finish"] == FINISH[want["stop"]]
    prompt, candidates, thoughts, _, _ = got["usage"]
    assert (prompt, candidates + (thoughts or 0)) == (want["usage"] or (0, 0))
    assert view(sdk_stream(b"".join(out))) == got


def test_the_fake_geminis_stream_through_the_gateway_to_a_gemini_client() -> None:
    """The fake Gemini's own rendering (gateway/testing/gemini_shapes.py): a thought, then a
    signed call; the Gemini client gets the thought, the call, its id and signature back."""
    call = FakeToolCall("get_weather", '{"city": "Paris"}', "")
    a = FakeAnswer("r-9", "gemini-3-pro", "", "tool_calls", 12, 7, 1_750_000_000, 3, call)
    raw = b"".join(e.encode() for e in gemini_chunks(a, thought="Hmm.", signature=SIG))
    out, _ = translate(raw, "gemini", "gemini")
    got = view(validated(out))
    ((call_id, name, args, signature),) = got["calls"]
    assert (got["thoughts"], name, args, signature) == ("Hmm.", "get_weather", {"city": "Paris"},
                                                        SIG_BYTES)  # fmt: skip
    assert call_id.startswith("call_") and got["finish"] == "STOP"
    assert view(sdk_stream(b"".join(out))) == got


def through_splitter(source: str, raw: bytes, size: int = 7) -> list[bytes]:
    s = convert.TranslatingSplitter(FORMAT[source], GEMINI, MODEL, False)
    out = [e for i in range(0, len(raw), size) for e in s.feed(raw[i : i + size])] + s.close()
    assert s.usage is not None and s.malformed == 0
    return out


@pytest.mark.parametrize("source", SOURCES)
def test_the_splitter_serves_a_gemini_client_from_every_source(source: str) -> None:
    """convert.TranslatingSplitter(source, GEMINI): the bytes in small pieces (Gemini's
    with LF framing: see the next test), the stream closed at the end of the body."""
    raw = render(source, SCENARIOS["tool"]).replace(b"\r\n", b"\n")
    out = through_splitter(source, raw)
    assert view(validated(out)) == expected(source, SCENARIOS["tool"])


def test_a_crlf_boundary_split_between_pieces_keeps_both_events() -> None:
    """A read that ends between the \\r and the \\n of Google's CRLF framing loses no event."""
    raw = render("gemini", SCENARIOS["tool"])
    cut = raw.index(b"\r\n\r\n") + 3  # the first piece ends in the event's last \r
    s = convert.TranslatingSplitter(GEMINI, GEMINI, MODEL, False)
    out = s.feed(raw[:cut]) + s.feed(raw[cut:]) + s.close()
    assert view(validated(out))["text"] == "Checking."


def test_keepalives_are_not_written_to_a_gemini_client() -> None:
    """An upstream comment passes to the other clients but not to a Gemini one, nor does
    an Anthropic ping: google-genai reads a line that is not ``data:`` as raw JSON (its
    ``_RawJsonLineBuffer``) and fails on ``: ping``; it skips a blank line."""
    comment = b": OPENROUTER PROCESSING\n\n"
    assert StreamTranslator("chat", "chat", model=MODEL).feed(comment) == [comment]
    assert StreamTranslator("chat", "gemini", model=MODEL).feed(comment) == []
    t = StreamTranslator("messages", "gemini", model=MODEL)
    assert t.feed(b'event: ping\ndata: {"type": "ping"}\n\n') == []
    out, _ = translate(render("chat", SCENARIOS["text"]), "chat", "gemini")
    with pytest.raises(errors.UnknownApiResponseError):
        sdk_stream(out[0] + b": ping\n\n" + b"".join(out[1:]))
    assert view(sdk_stream(out[0] + b"\n" + b"".join(out[1:])))["text"] == "Hello, world."


def test_tool_arguments_that_are_no_object_are_an_empty_one() -> None:
    sc = Scenario([("call", "call_1", "f", ["[1, ", "2]"]), ("call", "call_2", "g", ["{"])],
                  "tool_use")  # fmt: skip
    out, _ = translate(render("chat", sc), "chat", "gemini")
    assert [(c[0], c[2]) for c in view(validated(out))["calls"]] == [("call_1", {}), ("call_2", {})]


def test_a_signature_that_is_not_base64_is_left_out() -> None:
    """The SDK reads thoughtSignature as bytes and refuses the chunk when it is not base64;
    the writer's test is the SDK's own (checked against it on every shape)."""
    for sig, ok in [(SIG, True), ("CiQBjz1rX-_s", True), ("abc", True), ("c2lnbmF0dXJl=", False),
                    ("CiQBjz1rX+/signature==", False), ("ImW", False), ("a b", False),
                    ("ab-/", False)]:  # fmt: skip
        part = {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": sig}
        body = {"candidates": [{"content": {"parts": [part]}}]}
        try:
            types.GenerateContentResponse.model_validate(body)
            sdk = True
        except ValueError:
            sdk = False
        assert is_base64(sig) is ok is sdk, sig
    sc = Scenario([("call", signed_id("call_1", "not base64!"), "f", ["{}"])], "tool_use")
    out, _ = translate(render("chat", sc), "chat", "gemini")
    assert view(validated(out))["calls"] == [("call_1", "f", {}, None)]


@pytest.mark.parametrize(
    ("err", "code", "status"),
    [
        (RATE_LIMITED, 429, "RESOURCE_EXHAUSTED"),
        (from_google({"code": 400, "message": "m", "status": "FAILED_PRECONDITION"}), 400,
         "FAILED_PRECONDITION"),
        (from_google({"code": 500, "message": "m", "status": "DATA_LOSS"}), 500, "DATA_LOSS"),
        (from_google({"code": 409, "message": "m", "status": "ABORTED"}), 409, "ABORTED"),
        (from_google({"code": 503, "message": "m"}), 503, "UNAVAILABLE"),
        (from_anthropic({"type": "overloaded_error", "message": "m"}), 503, "UNAVAILABLE"),
        (from_anthropic({"type": "api_error", "message": "m"}), 500, "INTERNAL"),
        (from_anthropic({"type": "billing_error", "message": "m"}), 403, "PERMISSION_DENIED"),
        (from_anthropic({"type": "request_too_large", "message": "m"}), 400, "INVALID_ARGUMENT"),
        (from_anthropic({"type": "timeout_error", "message": "m"}), 504, "DEADLINE_EXCEEDED"),
        (from_anthropic({"type": "not_found_error", "message": "m"}), 404, "NOT_FOUND"),
        (from_openai({"message": "m", "code": "context_length_exceeded"}), 400,
         "INVALID_ARGUMENT"),
        (from_openai({"message": "m", "code": "invalid_api_key"}), 401, "UNAUTHENTICATED"),
    ],
)  # fmt: skip
def test_error_kinds_in_googles_shape(err: UpstreamError, code: int, status: str) -> None:
    assert google_error(err) == {"code": code, "message": err.message, "status": status}


# ---------------------------------------------------------------- JSON answers


def answer_of(source: str, sc: Scenario) -> Answer:
    parts: list[Part] = []
    for part in sc.parts:
        text = "".join(part[-1])
        if part[0] == "call":
            parts.append(ToolCall(part[1], part[2], text))
        else:
            parts.append({"text": Text, "reasoning": Reasoning, "refusal": Refusal}[part[0]](text))
    return Answer(PREFIX[source] + RID, "upstream-model", parts, sc.stop, sc.usage)


def json_answer(source: str, sc: Scenario) -> dict[str, Any]:
    """The answer as a provider of ``source`` format writes it (Gemini's by hand)."""
    if source in answers.WRITERS:
        return answers.WRITERS[source](answer_of(source, sc))
    if source == "converse":
        return write_converse(answer_of(source, sc))
    parts = [gemini_part(p, "".join(p[-1])) for p in sc.parts]
    c = {"content": {"role": "model", "parts": parts}, "finishReason": FINISH[sc.stop],
         "index": 0}  # fmt: skip
    return {"candidates": [c], "usageMetadata": gemini_usage(sc.usage),
            "modelVersion": "gemini-3-pro", "responseId": RID}  # fmt: skip


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("source", SOURCES)
def test_every_source_answers_a_gemini_client(source: str, name: str) -> None:
    sc = SCENARIOS[name]
    body = convert.answer(json_answer(source, sc), FORMAT[source], GEMINI, MODEL)
    r = types.GenerateContentResponse.model_validate(body)
    assert types.GenerateContentResponse.model_validate_json(orjson.dumps(body)) == r
    assert r.model_version == MODEL
    if source != "converse":
        assert r.response_id == RID
    assert view([r]) == expected(source, sc)


def test_the_fake_geminis_answer_to_a_gemini_client() -> None:
    call = FakeToolCall("get_weather", '{"city": "Paris"}', "")
    a = FakeAnswer("r-9", "gemini-3-pro", "", "tool_calls", 12, 7, 1_750_000_000, 3, call)
    data = gemini_json(a, thought="Hmm.", signature=SIG)
    r = types.GenerateContentResponse.model_validate(convert.answer(data, GEMINI, GEMINI, MODEL))
    got = view([r])
    assert got["thoughts"] == "Hmm." and got["calls"][0][1:] == ("get_weather",
                                                                 {"city": "Paris"}, SIG_BYTES)  # fmt: skip
    assert r.response_id == "r-9" and got["finish"] == "STOP"


def test_write_gemini_leaves_out_what_the_sdk_would_refuse() -> None:
    """A signature that is not base64, arguments that are no object."""
    call = ToolCall(signed_id("c1", "not base64!"), "f", "[1]")
    body = write_gemini(Answer("chatcmpl-x", MODEL, [call], "tool_use", None))
    (part,) = body["candidates"][0]["content"]["parts"]
    assert part == {"functionCall": {"id": "c1", "name": "f", "args": {}}}
    assert body["responseId"] == "x" and body["usageMetadata"]["totalTokenCount"] == 0
    types.GenerateContentResponse.model_validate(body)
