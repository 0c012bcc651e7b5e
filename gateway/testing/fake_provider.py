"""A scripted fake LLM provider: a real aiohttp server speaking the OpenAI and Anthropic APIs.

Use it to test the gateway (or your own policies) against real sockets, with faults
scripted request by request::

    from gateway.testing import Error, FakeProvider, CutAfter

    async with FakeProvider() as fp:
        fp.push(Error.openai_rate_limit(retry_after=2))      # first request: 429
        fp.push(CutAfter(3), model="m")                      # first request for "m": cut
        client = AsyncOpenAI(base_url=fp.url + "/v1", api_key="x")
        ...
        assert fp.requests[0].headers["authorization"] == "Bearer x"

Endpoints: ``POST /v1/chat/completions``, ``/v1/responses``, ``/v1/completions``,
``/v1/embeddings`` (OpenAI), ``POST /v1/messages`` (Anthropic), ``GET /v1/models``.
JSON answers, and SSE streams for ``"stream": true``. The OpenAI ``base_url`` is
``fp.url + "/v1"``; the Anthropic base URL is ``fp.url``.

**TLS.** ``FakeProvider(ssl_context=ctx)`` serves https (``fp.url`` starts with
``https://``) with a server context you build, e.g. from a test CA
(``trustme``); set ``ctx.verify_mode = ssl.CERT_REQUIRED`` and trust a CA in it
to require client certificates (mutual TLS).

**Answers.** The full reply of a model is ``fp.reply[model]`` or, by default,
``"Hello! This is the fake provider answering model <model>."``; a stream sends it in
``fp.chunks`` pieces (default 8). ``model`` echoes the request's model. Tokens follow
a fixed rule, ``ceil(chars / 4)``: prompt tokens over all message text (system,
messages, tool results, earlier tool-call arguments), completion tokens over the
answer text (or the tool call's name + arguments).

- *Tools*: when the request offers tools and its last message is a user message that
  names one of them as a word (``read`` is not named by "already"), and is not a request
  to continue an earlier answer (or ``tool_choice`` forces one), the answer is a call of that tool
  with arguments made from its JSON schema (finish ``tool_calls`` / ``tool_use``).
  When the last message is a tool result, the answer is ``"The tool returned: <result>"``.
- *Max tokens*: when ``max_tokens`` / ``max_completion_tokens`` / ``max_output_tokens``
  (or ``fp.cut_at[model]``) is below the answer's tokens, the answer is its first
  ``limit * 4`` characters with finish ``length`` (Anthropic ``max_tokens``;
  Responses ``incomplete`` with ``max_output_tokens``).
- *Continuation*: when the last message is an assistant message (prefill), or
  assistant messages are followed only by user messages asking to continue /
  resume, and the full reply starts with what the assistant already said, the answer
  is the rest of the full reply. Joining the parts gives the full reply back.
- *Context window*: with ``fp.context_window[model] = N`` a request whose prompt
  tokens exceed ``N - (max tokens or 0)`` gets the real prompt-too-long 400, in the
  endpoint's wording or ``fp.context_style[model]`` (``openai``/``anthropic``/``vllm``).
- *Prefill*: with ``fp.reject_prefill[model] = True`` a request ending with an
  assistant message gets a 400.

**Script.** ``fp.push(step, model=None)`` appends one entry, ``fp.script(model, steps)``
replaces a queue. Each POST request consumes one entry: first from its model's queue,
else from the shared queue (``model=None``); an empty queue means a normal answer.
Both take ``key=``: a queue for the requests that carry that API key (the
``Authorization: Bearer`` token, else ``x-api-key``), so a test can make one key of
several fail whatever order the requests come in; such a request consumes from its
key's queue for its model, then its key's shared queue (``model=None``), then the
queues above::

    fp.script("gpt-4o", [Error.openai_rate_limit(retry_after=30)], key="key-a")
    fp.push(Error.openai_quota(), key="key-b")   # the next request with key-b, any model
An entry is a step or a tuple of steps for the same request. The steps live in
:mod:`gateway.testing.script`: ``Error`` (with realistic constructors such as
``Error.openai_rate_limit(retry_after=3)``, ``Error.anthropic_overloaded()``,
``Error.context_length(8192, 9100)``, ``Error.zhipu(1302)``), ``Reset``, ``Hang``,
``SlowFirstByte``, ``HeadersThenSilence``, ``Success``, and the stream faults
``CutAfter``, ``StallAfter``, ``ErrorEventAfter``, ``MalformedEventAt``, ``NoDone``,
``Delay``.

**Records.** ``fp.requests`` lists every request (:class:`RecordedRequest`: method,
path, query string, lower-cased headers, parsed JSON body, model, and ``key``: the API
key it carried). ``fp.disconnects``
counts requests whose client went away before the answer was complete (a failed
write, a cancelled handler or a closed connection while hanging), and
``fp.disconnected`` (an :class:`asyncio.Event`) is set at the first one.
``fp.reset()`` clears the script and the records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, NoReturn
from urllib.parse import parse_qsl

from aiohttp import web

from gateway.testing import shapes
from gateway.testing.conversation import (
    Conversation,
    example_arguments,
    parse_chat,
    parse_completions,
    parse_messages,
    parse_responses,
    tokens_of,
)
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
    ScriptEntry,
    SlowFirstByte,
    StallAfter,
    Step,
    Success,
    context_length_body,
)

DEFAULT_REPLY = "Hello! This is the fake provider answering model {model}."
PREFILL_MESSAGE = (
    "This model does not support assistant message prefill. "
    "The conversation must end with a user message."
)
_POLL_S = 0.02

_PARSERS = {
    "chat": parse_chat,
    "completions": parse_completions,
    "responses": parse_responses,
    "messages": parse_messages,
}
_ID_PREFIX = {
    "chat": "chatcmpl-fake",
    "completions": "cmpl-fake",
    "responses": "resp_fake",
    "messages": "msg_fake",
}


@dataclass
class RecordedRequest:
    """One request the fake provider received."""

    method: str
    path: str
    query_string: str
    #: Header names lower-cased; a repeated header keeps its last value.
    headers: dict[str, str]
    #: The parsed JSON body, or ``None`` (no body, or not JSON).
    body: Any
    model: str | None

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(self.query_string, keep_blank_values=True))

    @property
    def key(self) -> str | None:
        """The API key: the ``Authorization: Bearer`` token, else ``x-api-key``."""
        auth = self.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        return self.headers.get("x-api-key") or None


@dataclass
class _Exchange:
    """Per-request state of the handler."""

    request: web.Request
    api: str
    n: int
    steps: list[Step] = field(default_factory=list)
    # Set when the fake itself ends the connection (Reset, CutAfter) or has already
    # counted the client going away, so that the disconnect is not counted again.
    settled: bool = False

    @property
    def style(self) -> str:
        return "anthropic" if self.api == "messages" else "openai"

    def step(self, kind: type[Any]) -> Any:
        return next((s for s in self.steps if isinstance(s, kind)), None)


class FakeProvider:
    """A scripted fake LLM provider served on ``127.0.0.1`` (see the module docstring)."""

    def __init__(
        self,
        *,
        chunks: int = 8,
        models: Iterable[str] = ("fake-model",),
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        #: Full reply per model; others answer :data:`DEFAULT_REPLY`.
        self.reply: dict[str, str] = {}
        #: Number of content pieces of a streamed answer.
        self.chunks = chunks
        #: Context window per model, in tokens of the fixed rule.
        self.context_window: dict[str, int] = {}
        #: Wording of the prompt-too-long error per model: openai, anthropic or vllm.
        self.context_style: dict[str, str] = {}
        #: Cut every answer of a model at this many tokens (finish ``length``).
        self.cut_at: dict[str, int] = {}
        #: Models that reject a request ending with an assistant message.
        self.reject_prefill: dict[str, bool] = {}
        #: Models listed by ``GET /v1/models`` (plus every model configured above).
        self.models: list[str] = list(models)
        #: Dimensions of ``/v1/embeddings`` vectors when the request names none.
        self.embedding_dimensions = 16
        #: The server TLS context (https) or ``None`` (http).
        self.ssl_context = ssl_context

        self.requests: list[RecordedRequest] = []
        self.disconnects = 0
        self.disconnected = asyncio.Event()

        self._scripts: dict[tuple[str | None, str | None], deque[ScriptEntry]] = {}
        self._app: web.Application | None = None
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._counter = 0

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def app(self) -> web.Application:
        """The aiohttp application (serve it yourself, or use :meth:`start`)."""
        if self._app is None:
            # a provider takes prompts of many megabytes (aiohttp's default limit is 1 MiB)
            app = web.Application(client_max_size=64 * 1024 * 1024)
            for path, api in (
                ("/v1/chat/completions", "chat"),
                ("/v1/completions", "completions"),
                ("/v1/responses", "responses"),
                ("/v1/messages", "messages"),
                ("/v1/embeddings", "embeddings"),
            ):
                app.router.add_post(path, self._endpoint(api))
            app.router.add_get("/v1/models", self._models)
            self._app = app
        return self._app

    async def start(self, port: int = 0) -> None:
        """Serve on ``127.0.0.1:port`` (``0``: an ephemeral port, see :attr:`url`)."""
        if self._runner is not None:
            raise RuntimeError("FakeProvider is already started")
        self._stopping = False
        runner = web.AppRunner(
            self.app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5
        )
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=self.ssl_context)
        await site.start()
        self._runner = runner
        self._port = runner.addresses[0][1]

    async def stop(self) -> None:
        """Stop serving; hanging and stalled requests are cancelled."""
        if self._runner is None:
            return
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        await self._runner.cleanup()
        self._runner = None
        self._port = None

    async def __aenter__(self) -> FakeProvider:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, or ``https://`` with ``ssl_context``; OpenAI: ``+ "/v1"``."""
        if self._port is None:
            raise RuntimeError("FakeProvider is not started")
        scheme = "http" if self.ssl_context is None else "https"
        return f"{scheme}://127.0.0.1:{self._port}"

    # --- script and records -----------------------------------------------------------

    def script(
        self,
        model: str | None = None,
        steps: Iterable[ScriptEntry] = (),
        *,
        key: str | None = None,
    ) -> None:
        """Replace the script of ``model`` (``None``: the queue shared by all models); with
        ``key``, the script of the requests that carry that API key."""
        self._scripts[model, key] = deque(steps)

    def push(self, step: ScriptEntry, model: str | None = None, *, key: str | None = None) -> None:
        """Append one entry to the script of ``model`` (``None``: the shared queue); with
        ``key``, to the script of the requests that carry that API key."""
        self._scripts.setdefault((model, key), deque()).append(step)

    def pending(self, model: str | None = None, *, key: str | None = None) -> int:
        """How many scripted entries of ``model`` (or the shared queue), for ``key``, are left."""
        return len(self._scripts.get((model, key), ()))

    def reset(self) -> None:
        """Clear the script, the recorded requests and the disconnect count."""
        self._scripts.clear()
        self.requests.clear()
        self.disconnects = 0
        self.disconnected.clear()

    def _steps(self, model: str | None, key: str | None) -> list[Step]:
        """The steps of the next request: its key's queues first, then :meth:`_next_steps`."""
        if key is not None:
            for which in ((model, key), (None, key)):
                queue = self._scripts.get(which)
                if queue:
                    return _entry(queue.popleft())
        return self._next_steps(model)

    def _next_steps(self, model: str | None) -> list[Step]:
        for which in ((model, None), (None, None)):
            queue = self._scripts.get(which)
            if queue:
                return _entry(queue.popleft())
        return []

    def _note_disconnect(self, ex: _Exchange) -> None:
        if ex.settled or self._stopping:
            return
        ex.settled = True
        self.disconnects += 1
        self.disconnected.set()

    # --- handlers -----------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        self._record(request, None)
        names = [*self.models]
        for table in (self.reply, self.context_window, self.cut_at, self.reject_prefill):
            names.extend(m for m in table if m not in names)
        return web.json_response(shapes.models_json(names), headers=self._headers("openai", 0))

    def _endpoint(self, api: str) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            self._counter += 1
            ex = _Exchange(request, api, self._counter)
            try:
                return await self._serve(ex)
            except asyncio.CancelledError:
                self._note_disconnect(ex)
                raise
            finally:
                self._tasks.discard(task)

        return handler

    def _record(self, request: web.Request, body: Any) -> RecordedRequest:
        model = body.get("model") if isinstance(body, dict) else None
        record = RecordedRequest(
            method=request.method,
            path=request.path,
            query_string=request.query_string,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            model=model if isinstance(model, str) else None,
        )
        self.requests.append(record)
        return record

    async def _serve(self, ex: _Exchange) -> web.StreamResponse:
        raw = await ex.request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = self._record(ex.request, body)
        if not isinstance(body, dict):
            return self._error(ex, Error.bad_request("We could not parse the JSON body."))
        model = record.model
        if model is None:
            return self._error(ex, Error.bad_request("you must provide a model parameter"))

        ex.steps = self._steps(model, record.key)
        slow = ex.step(SlowFirstByte)
        if slow:
            await asyncio.sleep(slow.delay_s)
        if ex.step(Reset):
            self._abort(ex, rst=True)
        if ex.step(Hang):
            await self._until_gone(ex)
        error = ex.step(Error)
        if error:
            return self._error(ex, error)
        if ex.step(HeadersThenSilence):
            response = web.StreamResponse(headers=self._headers(ex.style, ex.n))
            response.content_type = (
                "text/event-stream" if body.get("stream") else "application/json"
            )
            await self._send(ex, response.prepare(ex.request))
            await self._until_gone(ex)

        if ex.api == "embeddings":
            return await self._embeddings(ex, body, model)
        conv = _PARSERS[ex.api](body)
        if self.reject_prefill.get(model) and conv.ends_with_prefill:
            return self._error(ex, Error.bad_request(PREFILL_MESSAGE))
        window = self.context_window.get(model)
        if window is not None:
            completion = conv.max_tokens or 0
            if conv.prompt_tokens > window - completion:
                style = self.context_style.get(model, ex.style)
                too_long = context_length_body(style, window, conv.prompt_tokens, completion)
                return self._error(ex, Error(400, too_long))

        answer = self._answer(ex, conv, model)
        if conv.stream:
            return await self._stream(ex, answer, conv, body)
        payload = {
            "chat": lambda: shapes.chat_json(answer),
            "completions": lambda: shapes.completion_json(answer),
            "responses": lambda: shapes.responses_json(answer, body),
            "messages": lambda: shapes.messages_json(answer),
        }[ex.api]()
        return await self._json(ex, payload)

    # --- answers ------------------------------------------------------------------------

    def _answer(self, ex: _Exchange, conv: Conversation, model: str) -> shapes.Answer:
        forced = ex.step(Success) or Success()
        prefix = "toolu_fake" if ex.api == "messages" else "call_fake"
        call_id = f"{prefix}{ex.n:05d}"
        tool: shapes.ToolCall | None = None
        if forced.tool_call is not None:
            spec = forced.tool_call
            if isinstance(spec, str):
                match = next((t for t in conv.tools if t.name == spec), None)
                args = example_arguments(match) if match else {}
                tool = shapes.ToolCall(spec, json.dumps(args), call_id)
            else:
                args_json = json.dumps(spec.get("arguments", {}))
                tool = shapes.ToolCall(str(spec["name"]), args_json, call_id)
        elif forced.text is None and (wanted := conv.wants_tool_call()):
            tool = shapes.ToolCall(wanted.name, json.dumps(example_arguments(wanted)), call_id)

        if tool is not None:
            text, finish = "", "tool_calls"
            completion = tokens_of(tool.name + tool.arguments)
        else:
            text, finish = self._text(conv, model, forced.text)
            completion = tokens_of(text)
        usage = forced.usage or {}
        return shapes.Answer(
            id=f"{_ID_PREFIX[ex.api]}{ex.n:05d}",
            model=model,
            text=text,
            finish=forced.finish_reason or finish,
            prompt_tokens=usage.get("prompt_tokens", conv.prompt_tokens),
            completion_tokens=usage.get("completion_tokens", completion),
            created=int(time.time()),
            chunks=self.chunks,
            tool_call=tool,
        )

    def _text(self, conv: Conversation, model: str, forced: str | None) -> tuple[str, str]:
        """The answer text (after continuation and max-tokens cut) and finish reason."""
        last = conv.last
        if forced is not None:
            full = forced
        elif last is not None and last.role == "tool":
            full = f"The tool returned: {last.text[:200]}"
        else:
            full = self.reply.get(model, DEFAULT_REPLY.format(model=model))
        text = full
        already = conv.already_said()
        if already is not None and full.startswith(already):
            text = full[len(already) :]
        limits = [n for n in (conv.max_tokens, self.cut_at.get(model)) if n is not None]
        if limits and tokens_of(text) > min(limits):
            return text[: min(limits) * 4], "length"
        return text, "stop"

    async def _embeddings(
        self, ex: _Exchange, body: dict[str, Any], model: str
    ) -> web.StreamResponse:
        raw = body.get("input")
        items = raw if isinstance(raw, list) and raw and not isinstance(raw[0], int) else [raw]
        inputs = [i if isinstance(i, str) else json.dumps(i) for i in items]
        window = self.context_window.get(model)
        longest = max((tokens_of(i) for i in inputs), default=0)
        if window is not None and longest > window:
            return self._error(ex, Error.context_length(window, longest, "openai"))
        dims = body.get("dimensions") or self.embedding_dimensions
        payload = shapes.embeddings_json(model, inputs, dims, body.get("encoding_format"))
        return await self._json(ex, payload)

    # --- sending ------------------------------------------------------------------------

    def _headers(self, style: str, n: int) -> dict[str, str]:
        if style == "anthropic":
            return {"request-id": f"req_fake{n:05d}", "anthropic-organization-id": "fake-org"}
        return {
            "x-request-id": f"req_fake{n:05d}",
            "openai-processing-ms": "1",
            "openai-version": "2020-10-01",
        }

    def _success_headers(self, ex: _Exchange) -> dict[str, str]:
        forced = ex.step(Success)
        return dict(forced.headers) if forced is not None else {}

    def _error(self, ex: _Exchange, error: Error) -> web.Response:
        data, content_type = error.render(ex.style)
        headers = {**self._headers(ex.style, ex.n), **error.headers, "Content-Type": content_type}
        return web.Response(status=error.status, body=data, headers=headers)

    async def _json(self, ex: _Exchange, payload: dict[str, Any]) -> web.StreamResponse:
        data = json.dumps(payload, ensure_ascii=False).encode()
        headers = {**self._headers(ex.style, ex.n), **self._success_headers(ex)}
        cut, stall = ex.step(CutAfter), ex.step(StallAfter)
        if not (cut or stall):
            return web.Response(body=data, headers=headers, content_type="application/json")
        response = web.StreamResponse(headers=headers)
        response.content_type = "application/json"
        response.content_length = len(data)
        await self._send(ex, response.prepare(ex.request))
        await self._send(ex, response.write(data[: len(data) // 2]))
        if cut:
            self._abort(ex)
        await self._until_gone(ex)

    async def _stream(
        self, ex: _Exchange, answer: shapes.Answer, conv: Conversation, body: dict[str, Any]
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
            events.insert(at, shapes.Event("{not json"))
        terminal = ex.step(CutAfter) or ex.step(StallAfter) or ex.step(ErrorEventAfter)
        stop_at = _position(events, terminal.n_chunks) if terminal else None
        delay = ex.step(Delay)

        headers = {**self._headers(ex.style, ex.n), **self._success_headers(ex)}
        response = web.StreamResponse(headers=headers)
        response.content_type = "text/event-stream"
        response.charset = "utf-8"
        response.headers["Cache-Control"] = "no-cache"
        await self._send(ex, response.prepare(ex.request))
        for index, event in enumerate(events):
            if index == stop_at:
                await self._stream_fault(ex, response, terminal, events[:index])
                return response
            if event.delta and delay:
                await asyncio.sleep(delay.per_chunk_s)
            await self._send(ex, response.write(event.encode()))
        await self._finish(ex, response)
        return response

    async def _stream_fault(
        self,
        ex: _Exchange,
        response: web.StreamResponse,
        fault: CutAfter | StallAfter | ErrorEventAfter | None,
        sent: list[shapes.Event],
    ) -> None:
        if isinstance(fault, CutAfter):
            self._abort(ex)
        if isinstance(fault, StallAfter):
            await self._until_gone(ex)
        if isinstance(fault, ErrorEventAfter):
            sequence = sum(1 for e in sent if e.event and e.event.startswith("response."))
            event = shapes.stream_error_event(ex.api, fault.payload, sequence)
            await self._send(ex, response.write(event.encode()))
            await self._finish(ex, response)

    async def _finish(self, ex: _Exchange, response: web.StreamResponse) -> None:
        """End the body; every event is out, so a client closing now is no disconnect."""
        ex.settled = True
        await self._send(ex, response.write_eof())

    async def _send(self, ex: _Exchange, write: Any) -> None:
        """Await a write; a failed write means the client went away."""
        try:
            await write
        except ConnectionError:
            self._note_disconnect(ex)
            raise asyncio.CancelledError from None

    def _abort(self, ex: _Exchange, rst: bool = False) -> NoReturn:
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

    async def _until_gone(self, ex: _Exchange) -> NoReturn:
        """Wait until the client closes the connection (or the server stops), then end."""
        while True:
            transport = ex.request.transport
            if transport is None or transport.is_closing():
                self._note_disconnect(ex)
                raise asyncio.CancelledError
            await asyncio.sleep(_POLL_S)


def _entry(entry: ScriptEntry) -> list[Step]:
    return list(entry) if isinstance(entry, tuple) else [entry]


def _position(events: list[shapes.Event], n: int) -> int:
    """Index in ``events`` just after ``n`` content deltas (before the next one)."""
    deltas = [i for i, e in enumerate(events) if e.delta]
    if not deltas:
        return min(1, len(events))
    if n < len(deltas):
        return deltas[n]
    return deltas[-1] + 1


__all__ = ["DEFAULT_REPLY", "FakeProvider", "RecordedRequest"]
