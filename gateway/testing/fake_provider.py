# long: its docstring is the fake provider's user guide (92 lines), above the one server class
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
``/v1/embeddings`` (OpenAI), ``POST /v1/messages`` and ``/v1/messages/count_tokens``
(Anthropic: ``{"input_tokens": N}`` by the tokens rule below, scripted as the others),
``GET /v1/models``.
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

**Prompt cache.** ``fp.prompt_cache`` (a :class:`~gateway.testing.prompt_cache.PromptCache`,
``None`` turns it off) is a deployment's prompt cache. It is kept per API key and model,
so a separate fake, or a separate key, is a separate deployment's cache (two fakes never
share one). Only answered requests use it (not a scripted error; never a token count).
Messages requests are cached at their ``cache_control`` markers (more than 4: Anthropic's
400) and report ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` next to
``input_tokens`` (the rest); chat and Responses requests are cached automatically, every
prefix, and report the tokens read as ``cached_tokens`` inside their total. A prefix
under 1,024 tokens is never cached, and an entry lives 5 minutes after it was last
written or read; ``fp.prompt_cache = PromptCache(clock=clock, ttl=60, minimum=0)`` sets a
virtual clock and other limits. Each record has ``cache_read`` and ``cache_write``;
``fp.cache_reads`` and ``fp.cache_writes`` total them.

**Script.** ``fp.push(step, model=None)`` appends one entry, ``fp.script(model, steps)``
replaces a queue. Each POST request consumes one entry: first from its model's queue,
else from the shared queue (``model=None``); an empty queue means a normal answer.
Both take ``key=``: a queue for the requests that carry that API key (the
``Authorization: Bearer`` token, else ``x-api-key``, else ``api-key``), so a test can
make one key of several fail whatever order the requests come in; such a request
consumes from its key's queue for its model, then its key's shared queue
(``model=None``), then the queues above::

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
path, query string, lower-cased headers, parsed JSON body and ``raw``, its bytes, model,
and ``key``: the API key it carried; ``cache_read`` and ``cache_write`` as above).
``fp.disconnects`` counts requests whose client went away before the answer was complete (a failed
write, a cancelled handler or a closed connection while hanging), and
``fp.disconnected`` (an :class:`asyncio.Event`) is set at the first one.
``fp.reset()`` clears the script and the records.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from gateway.testing import replies, shapes
from gateway.testing.anthropic_shapes import TOOLS_REQUIRED, tool_blocks_without_tools
from gateway.testing.cache_blocks import marker_problem, request_blocks
from gateway.testing.cloud_auth import bearer_token
from gateway.testing.conversation import (
    Conversation,
    parse_chat,
    parse_completions,
    parse_messages,
    parse_responses,
)
from gateway.testing.error_bodies import context_length_body
from gateway.testing.prompt_cache import PromptCache
from gateway.testing.replies import DEFAULT_REPLY, Exchange
from gateway.testing.script import Error, ScriptEntry, Step

PREFILL_MESSAGE = (
    "This model does not support assistant message prefill. "
    "The conversation must end with a user message."
)

_PARSERS = {
    "chat": parse_chat,
    "completions": parse_completions,
    "responses": parse_responses,
    "messages": parse_messages,
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
    #: Prompt tokens the provider's prompt cache read for it, and wrote (0 unless answered).
    cache_read: int = 0
    cache_write: int = 0
    #: The body's bytes as they arrived.
    raw: bytes = b""

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(self.query_string, keep_blank_values=True))

    @property
    def key(self) -> str | None:
        """The API key: the ``Authorization: Bearer`` token, else ``x-api-key``, else
        ``api-key`` (Azure's)."""
        token = bearer_token(self.headers)
        return token or self.headers.get("x-api-key") or self.headers.get("api-key") or None


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
        #: The deployment's prompt cache (``None``: off), per API key and model.
        self.prompt_cache: PromptCache | None = PromptCache()

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
            self._add_routes(app)
            self._app = app
        return self._app

    def _add_routes(self, app: web.Application) -> None:
        """The endpoints served (a cloud fake serves its own paths instead)."""
        for path, api in (
            ("/v1/chat/completions", "chat"),
            ("/v1/completions", "completions"),
            ("/v1/responses", "responses"),
            ("/v1/messages", "messages"),
            ("/v1/messages/count_tokens", "count_tokens"),
            ("/v1/embeddings", "embeddings"),
        ):
            app.router.add_post(path, self._endpoint(api))
        app.router.add_get("/v1/models", self._models)

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

    @property
    def cache_reads(self) -> int:
        """The prompt tokens read from the prompt cache, over :attr:`requests`."""
        return sum(r.cache_read for r in self.requests)

    @property
    def cache_writes(self) -> int:
        """The prompt tokens written to the prompt cache, over :attr:`requests`."""
        return sum(r.cache_write for r in self.requests)

    def _cache_scope(self, record: RecordedRequest) -> Hashable:
        """Whose cache a request uses: its API key's, for its model."""
        return record.key, record.model

    def _cache_of(self, record: RecordedRequest) -> PromptCache | None:
        """The prompt cache a request goes through (``None``: none)."""
        return self.prompt_cache

    def _use_cache(
        self, api: str, body: dict[str, Any], record: RecordedRequest, conv: Conversation
    ) -> tuple[int, int]:
        """Send an answered request through its prompt cache: ``(read, write)`` tokens,
        noted on its record."""
        cache = self._cache_of(record)
        reduced = request_blocks(api, body) if cache is not None else None
        if cache is None or reduced is None:
            return 0, 0
        read, write = cache.use(self._cache_scope(record), *reduced)
        read = min(read, conv.prompt_tokens)
        write = min(write, conv.prompt_tokens - read)
        record.cache_read, record.cache_write = read, write
        return read, write

    def _note_disconnect(self, ex: Exchange) -> None:
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
        return web.json_response(
            shapes.models_json(names), headers=replies.base_headers("openai", 0)
        )

    def _endpoint(self, api: str) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            self._counter += 1
            ex = Exchange(request, api, self._counter, self._note_disconnect)
            try:
                return await self._serve(ex)
            except asyncio.CancelledError:
                self._note_disconnect(ex)
                raise
            finally:
                self._tasks.discard(task)

        return handler

    def _model_of(self, request: web.Request, body: Any) -> str | None:
        """The model a request names: its body's ``model`` (a cloud's may be in the path)."""
        model = body.get("model") if isinstance(body, dict) else None
        return model if isinstance(model, str) else None

    def _refuse(self, request: web.Request, record: RecordedRequest) -> web.Response | None:
        """A refusal sent before the script is consulted (a cloud fake checks the
        credentials, the path and the body here); ``None``: serve the request."""
        return None

    def _record(self, request: web.Request, body: Any, raw: bytes = b"") -> RecordedRequest:
        model = self._model_of(request, body)
        record = RecordedRequest(
            method=request.method,
            path=request.path,
            query_string=request.query_string,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            model=model,
            raw=raw,
        )
        self.requests.append(record)
        return record

    async def _serve(self, ex: Exchange) -> web.StreamResponse:
        raw = await ex.request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = self._record(ex.request, body, raw)
        refusal = self._refuse(ex.request, record)
        if refusal is not None:
            return refusal
        if not isinstance(body, dict):
            return replies.error_response(
                ex, Error.bad_request("We could not parse the JSON body.")
            )
        model = record.model
        if model is None:
            return replies.error_response(
                ex, Error.bad_request("you must provide a model parameter")
            )

        counting = ex.api == "count_tokens"
        if counting:
            ex.api = "messages"  # Anthropic's ids and error shape
        ex.steps = self._steps(model, record.key)
        early = await replies.before_answer(ex, body)
        if early is not None:
            return early
        if counting:
            return await replies.token_count(ex, body, "input_tokens")

        if ex.api == "embeddings":
            return await replies.embeddings(
                ex,
                body,
                model,
                context_window=self.context_window,
                embedding_dimensions=self.embedding_dimensions,
            )
        problem = _messages_problem(body) if ex.api == "messages" else None
        if problem is not None:
            return replies.error_response(ex, Error.bad_request(problem))
        conv = _PARSERS[ex.api](body)
        if self.reject_prefill.get(model) and conv.ends_with_prefill:
            return replies.error_response(ex, Error.bad_request(PREFILL_MESSAGE))
        window = self.context_window.get(model)
        if window is not None:
            completion = conv.max_tokens or 0
            if conv.prompt_tokens > window - completion:
                style = self.context_style.get(model, ex.style)
                too_long = context_length_body(style, window, conv.prompt_tokens, completion)
                return replies.error_response(ex, Error(400, too_long))

        cache = self._use_cache(ex.api, body, record, conv)
        answer = replies.answer(
            ex, conv, model, reply=self.reply, cut_at=self.cut_at, chunks=self.chunks, cache=cache
        )
        return await replies.send_answer(ex, answer, conv, body)


def _messages_problem(body: dict[str, Any]) -> str | None:
    """What Anthropic refuses in a Messages body it takes as JSON, or ``None``."""
    if tool_blocks_without_tools(body):
        return TOOLS_REQUIRED
    return marker_problem("messages", body)


def _entry(entry: ScriptEntry) -> list[Step]:
    return list(entry) if isinstance(entry, tuple) else [entry]


__all__ = ["DEFAULT_REPLY", "FakeProvider", "RecordedRequest"]
