"""What the fake provider sends back for one request, and how it goes on the wire.

:func:`answer` composes a normal answer (text or tool call, continuation, max-tokens
cut, usage; a ``Success`` step forces parts of it) and :func:`embeddings` an embeddings
answer. :func:`before_answer` plays the steps that act before any answer (wait, reset,
hang, error, headers then silence); :func:`send_answer` writes the answer as a JSON body
or an SSE stream with the scripted faults that cut, stall, delay or break it; and
:func:`error_response` writes an error in the endpoint's format. An :class:`Exchange`
carries one request's state; :class:`~gateway.testing.FakeProvider` calls these.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from aiohttp import web

from gateway.testing import shapes
from gateway.testing.answer import dump
from gateway.testing.conversation import Conversation, example_arguments, parse_messages, tokens_of
from gateway.testing.script import (
    CutAfter,
    Delay,
    Error,
    ErrorEventAfter,
    Hang,
    HeadersThenSilence,
    MalformedEventAt,
    NoDone,
    Reset,
    SlowFirstByte,
    StallAfter,
    Step,
    Success,
    Tamper,
)

DEFAULT_REPLY = "Hello! This is the fake provider answering model {model}."
_POLL_S = 0.02

_ID_PREFIX = {
    "chat": "chatcmpl-fake",
    "completions": "cmpl-fake",
    "responses": "resp_fake",
    "messages": "msg_fake",
    "gemini": "fakeGeminiResp",
}


@dataclass
class Exchange:
    """Per-request state of the handler."""

    request: web.Request
    api: str
    n: int
    #: The provider's ``_note_disconnect``: called when the client goes away.
    note_disconnect: Callable[[Exchange], None]
    steps: list[Step] = field(default_factory=list)
    # Set when the fake itself ends the connection (Reset, CutAfter) or has already
    # counted the client going away, so that the disconnect is not counted again.
    settled: bool = False

    @property
    def style(self) -> str:
        if self.api == "gemini":
            return "gemini"
        return "anthropic" if self.api == "messages" else "openai"

    def step(self, kind: type[Any]) -> Any:
        return next((s for s in self.steps if isinstance(s, kind)), None)


# --- answers ----------------------------------------------------------------------------


def answer(
    ex: Exchange,
    conv: Conversation,
    model: str,
    *,
    reply: dict[str, str],
    cut_at: dict[str, int],
    chunks: int,
    cache: tuple[int, int] = (0, 0),
) -> shapes.FakeAnswer:
    """The normal answer to ``conv`` (shaped by a ``Success`` step), before any fault;
    ``cache``: the prompt tokens read from and written to the prompt cache. A forced
    ``usage`` wins: with its own ``prompt_tokens`` the cache counts are its
    ``cache_read`` and ``cache_write`` (else 0)."""
    forced = ex.step(Success) or Success()
    prefix = "toolu_fake" if ex.api == "messages" else "call_fake"
    call_id = f"{prefix}{ex.n:05d}"
    tool: shapes.FakeToolCall | None = None
    if forced.tool_call is not None:
        spec = forced.tool_call
        if isinstance(spec, str):
            match = next((t for t in conv.tools if t.name == spec), None)
            args = example_arguments(match) if match else {}
            tool = shapes.FakeToolCall(spec, json.dumps(args), call_id)
        else:
            args_json = json.dumps(spec.get("arguments", {}))
            tool = shapes.FakeToolCall(str(spec["name"]), args_json, call_id)
    elif forced.text is None and (wanted := conv.wants_tool_call()):
        tool = shapes.FakeToolCall(wanted.name, json.dumps(example_arguments(wanted)), call_id)

    if tool is not None:
        text, finish = "", "tool_calls"
        completion = tokens_of(tool.name + tool.arguments)
    else:
        text, finish = _text(conv, model, forced.text, reply, cut_at)
        completion = tokens_of(text)
    usage = forced.usage or {}
    read, write = (0, 0) if "prompt_tokens" in usage else cache
    return shapes.FakeAnswer(
        id=f"{_ID_PREFIX[ex.api]}{ex.n:05d}",
        model=model,
        text=text,
        finish=forced.finish_reason or finish,
        prompt_tokens=usage.get("prompt_tokens", conv.prompt_tokens),
        completion_tokens=usage.get("completion_tokens", completion),
        created=int(time.time()),
        chunks=chunks,
        tool_call=tool,
        cache_read=usage.get("cache_read", read),
        cache_write=usage.get("cache_write", write),
    )


def _text(
    conv: Conversation,
    model: str,
    forced: str | None,
    reply: dict[str, str],
    cut_at: dict[str, int],
) -> tuple[str, str]:
    """The answer text (after continuation and max-tokens cut) and finish reason."""
    last = conv.last
    if forced is not None:
        full = forced
    elif last is not None and last.role == "tool":
        full = f"The tool returned: {last.text[:200]}"
    else:
        full = reply.get(model, DEFAULT_REPLY.format(model=model))
    text = full
    already = conv.already_said()
    if already is not None and full.startswith(already):
        text = full[len(already) :]
    limits = [n for n in (conv.max_tokens, cut_at.get(model)) if n is not None]
    if limits and tokens_of(text) > min(limits):
        return text[: min(limits) * 4], "length"
    return text, "stop"


async def embeddings(
    ex: Exchange,
    body: dict[str, Any],
    model: str,
    *,
    context_window: dict[str, int],
    embedding_dimensions: int,
) -> web.StreamResponse:
    raw = body.get("input")
    items = raw if isinstance(raw, list) and raw and not isinstance(raw[0], int) else [raw]
    inputs = [i if isinstance(i, str) else json.dumps(i) for i in items]
    window = context_window.get(model)
    longest = max((tokens_of(i) for i in inputs), default=0)
    if window is not None and longest > window:
        return error_response(ex, Error.context_length(window, longest, "openai"))
    dims = body.get("dimensions") or embedding_dimensions
    payload = shapes.embeddings_json(model, inputs, dims, body.get("encoding_format"))
    return await json_answer(ex, payload)


# --- sending ----------------------------------------------------------------------------


def base_headers(style: str, n: int) -> dict[str, str]:
    if style == "gemini":  # what Google's front end adds to an answer: its timing, its vary
        return {"server-timing": f"gfet4t7; dur={n}", "vary": "Origin, X-Origin, Referer"}
    if style == "anthropic":
        return {"request-id": f"req_fake{n:05d}", "anthropic-organization-id": "fake-org"}
    return {
        "x-request-id": f"req_fake{n:05d}",
        "openai-processing-ms": "1",
        "openai-version": "2020-10-01",
    }


def _success_headers(ex: Exchange) -> dict[str, str]:
    forced = ex.step(Success)
    return dict(forced.headers) if forced is not None else {}


def error_response(ex: Exchange, error: Error) -> web.Response:
    data, content_type = error.render(ex.style)
    for name in error.quote:  # the request's own header, JSON-escaped as a provider would
        value = json.dumps(ex.request.headers.get(name, ""))[1:-1]
        data = data.replace(f"{{{name}}}".encode(), value.encode())
    headers = {**base_headers(ex.style, ex.n), **error.headers, "Content-Type": content_type}
    return web.Response(status=error.status, body=data, headers=headers)


async def before_answer(
    ex: Exchange, body: dict[str, Any], stream: bool | None = None
) -> web.StreamResponse | None:
    """Play the steps that act before the answer: wait (``SlowFirstByte``), reset, hang,
    answer an ``Error``, or send the headers and fall silent; ``None``: go on. ``stream``:
    whether the answer is a stream, where the path says it (default: the body's
    ``stream``)."""
    slow = ex.step(SlowFirstByte)
    if slow:
        await asyncio.sleep(slow.delay_s)
    if ex.step(Reset):
        abort(ex, rst=True)
    if ex.step(Hang):
        await until_gone(ex)
    error = ex.step(Error)
    if error:
        return error_response(ex, error)
    if ex.step(HeadersThenSilence):
        response = web.StreamResponse(headers=base_headers(ex.style, ex.n))
        streaming = body.get("stream") if stream is None else stream
        response.content_type = "text/event-stream" if streaming else "application/json"
        await send(ex, response.prepare(ex.request))
        await until_gone(ex)
    return None


async def send_answer(
    ex: Exchange, answer: shapes.FakeAnswer, conv: Conversation, body: dict[str, Any]
) -> web.StreamResponse:
    """Send ``answer`` as an SSE stream (``"stream": true``) or as a JSON body."""
    if conv.stream:
        return await stream(ex, answer, conv, body)
    payload = {
        "chat": lambda: shapes.chat_json(answer),
        "completions": lambda: shapes.completion_json(answer),
        "responses": lambda: shapes.responses_json(answer, body),
        "messages": lambda: shapes.messages_json(answer),
    }[ex.api]()
    return await json_answer(ex, payload)


async def token_count(ex: Exchange, body: dict[str, Any], name: str) -> web.StreamResponse:
    """A token count's answer: the prompt tokens of the Messages ``body``, as ``{name: N}``."""
    return await json_answer(ex, {name: parse_messages(body).prompt_tokens})


async def json_answer(ex: Exchange, payload: dict[str, Any]) -> web.StreamResponse:
    tamper = ex.step(Tamper)
    sent: Any = payload if tamper is None else tamper.rewrite(payload, -1)
    data = json.dumps(sent, ensure_ascii=False).encode()
    headers = {**base_headers(ex.style, ex.n), **_success_headers(ex)}
    cut, stall = ex.step(CutAfter), ex.step(StallAfter)
    if not (cut or stall):
        return web.Response(body=data, headers=headers, content_type="application/json")
    response = web.StreamResponse(headers=headers)
    response.content_type = "application/json"
    response.content_length = len(data)
    await send(ex, response.prepare(ex.request))
    await send(ex, response.write(data[: len(data) // 2]))
    if cut:
        abort(ex)
    await until_gone(ex)


async def stream(
    ex: Exchange, answer: shapes.FakeAnswer, conv: Conversation, body: dict[str, Any]
) -> web.StreamResponse:
    events = {
        "chat": lambda: shapes.chat_events(answer, conv.include_usage),
        "completions": lambda: shapes.completion_events(answer, conv.include_usage),
        "responses": lambda: shapes.responses_events(answer, body),
        "messages": lambda: shapes.messages_events(answer),
    }[ex.api]()
    if ex.step(NoDone):
        events = [e for e in events if not e.done]
    malformed = ex.step(MalformedEventAt)
    if malformed:
        at = _position(events, malformed.n)
        events.insert(at, shapes.FakeEvent("{not json"))
    tamper = ex.step(Tamper)
    if tamper is not None:
        events = [_tampered(e, i, tamper) for i, e in enumerate(events)]
    terminal = ex.step(CutAfter) or ex.step(StallAfter) or ex.step(ErrorEventAfter)
    stop_at = _position(events, terminal.n_chunks) if terminal else None
    delay = ex.step(Delay)

    headers = {**base_headers(ex.style, ex.n), **_success_headers(ex)}
    response = web.StreamResponse(headers=headers)
    response.content_type = "text/event-stream"
    response.charset = "utf-8"
    response.headers["Cache-Control"] = "no-cache"
    await send(ex, response.prepare(ex.request))
    for index, event in enumerate(events):
        if index == stop_at:
            await _stream_fault(ex, response, terminal, events[:index])
            return response
        if event.delta and delay:
            await asyncio.sleep(delay.per_chunk_s)
        await send(ex, response.write(event.encode()))
    await _finish(ex, response)
    return response


async def _stream_fault(
    ex: Exchange,
    response: web.StreamResponse,
    fault: CutAfter | StallAfter | ErrorEventAfter | None,
    sent: list[shapes.FakeEvent],
) -> None:
    if isinstance(fault, CutAfter):
        abort(ex)
    if isinstance(fault, StallAfter):
        await until_gone(ex)
    if isinstance(fault, ErrorEventAfter):
        sequence = sum(1 for e in sent if e.event and e.event.startswith("response."))
        event = shapes.stream_error_event(ex.api, fault.payload, sequence)
        await send(ex, response.write(event.encode()))
        await _finish(ex, response)


async def _finish(ex: Exchange, response: web.StreamResponse) -> None:
    """End the body; every event is out, so a client closing now is no disconnect."""
    ex.settled = True
    await send(ex, response.write_eof())


async def send(ex: Exchange, write: Any) -> None:
    """Await a write; a failed write means the client went away."""
    try:
        await write
    except ConnectionError:
        ex.note_disconnect(ex)
        raise asyncio.CancelledError from None


def abort(ex: Exchange, rst: bool = False) -> NoReturn:
    """Drop the connection now (with a TCP RST when ``rst``); ends the handler."""
    ex.settled = True
    transport = ex.request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if rst and sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    raise asyncio.CancelledError


async def until_gone(ex: Exchange) -> NoReturn:
    """Wait until the client closes the connection (or the server stops), then end."""
    while True:
        transport = ex.request.transport
        if transport is None or transport.is_closing():
            ex.note_disconnect(ex)
            raise asyncio.CancelledError
        await asyncio.sleep(_POLL_S)


def _tampered(event: shapes.FakeEvent, index: int, tamper: Tamper) -> shapes.FakeEvent:
    """``event`` with its data rewritten by ``tamper`` (``[DONE]`` and non-JSON kept)."""
    if event.done:
        return event
    try:
        data = json.loads(event.data)
    except ValueError:
        return event
    return replace(event, data=dump(tamper.rewrite(data, index)))


def _position(events: list[shapes.FakeEvent], n: int) -> int:
    """Index in ``events`` just after ``n`` content deltas (before the next one)."""
    deltas = [i for i, e in enumerate(events) if e.delta]
    if not deltas:
        return min(1, len(events))
    if n < len(deltas):
        return deltas[n]
    return deltas[-1] + 1
