# long: its docstring is the fake Gemini's user guide, above the serving code FakeVertex shares
"""A scripted fake Google Gemini API (AI Studio): a real aiohttp server that Google's own
``google-genai`` SDK accepts.

It is the fake provider (:class:`~gateway.testing.FakeProvider`: the same answers, script,
records, ``reply``, ``cut_at``, ``context_window`` and ``prompt_cache``) behind Gemini's
routes, key check, shapes and refusals::

    from google import genai
    from google.genai import types
    from gateway.testing import CutAfter, Error, FakeGemini

    async with FakeGemini(keys={"AIza-good"}) as fg:
        fg.push(Error.gemini_rate_limit(retry_delay="2s"), model="gemini-2.5-flash")
        fg.push(CutAfter(2))                        # the next request: a cut stream
        client = genai.Client(api_key="AIza-good",
                              http_options=types.HttpOptions(base_url=fg.url))
        await client.aio.models.generate_content(model="gemini-2.5-flash", contents="Hi")

Routes (``{v}``: ``v1``, ``v1beta`` or ``v1alpha``; the model is the path's, e.g.
``gemini-2.5-flash``: scripts and ``reply`` are keyed by it):

- ``POST /{v}/models/{model}:generateContent``: the JSON answer.
- ``POST /{v}/models/{model}:streamGenerateContent?alt=sse``: SSE, one ``data:
  <GenerateContentResponse>`` event per chunk, each ended by ``\\r\\n\\r\\n`` as Google
  ends them (https://github.com/nyroway/nyro/pull/265; Google's own JS SDK splits events
  on ``\\r\\n\\r\\n`` too). Without ``alt=sse``: the same chunks as one streamed JSON array,
  each element pretty-printed, ``[{...}\\n,\\r\\n{...}\\n]`` (as clients that parse it
  split it; an error answer to such a request is wrapped in an array too, ``[{"error":
  ...}]``, as Google sends it: https://github.com/continuedev/continue/issues/8516).
- ``POST /{v}/models/{model}:countTokens``: ``{"totalTokens": N}`` for ``{"contents"}`` or
  ``{"generateContentRequest": {...}}``, by the tokens rule; scripted as the others.
- ``GET /{v}/models`` (``{"models": [{"name": "models/x", "inputTokenLimit", ...}]}``:
  ``fg.models`` and every model configured) and ``GET /{v}/models/{model}``.

**Key**, as Gemini checks it: the request's key (an ``Authorization: Bearer`` token as the
fake provider reads keys, else ``x-goog-api-key``, else ``?key=``) must be one of ``keys``
(a collection, a predicate, or ``None`` for any): without a key, the 403 "Method doesn't
allow unregistered callers ..."; another key, the 400 ``API_KEY_INVALID``. The record's
``key`` (:class:`GeminiRequest`) is that key, and ``key=`` scripts are keyed by it.

**Answers**, as Gemini writes them: one candidate (``candidateCount`` above 1 still gets
one) of ``role: model`` parts, ``finishReason`` (``STOP``; ``MAX_TOKENS`` when
``maxOutputTokens`` or ``fg.cut_at`` cuts it; a function call ends with ``STOP`` too),
``usageMetadata`` (``promptTokenCount``, ``candidatesTokenCount``, ``totalTokenCount``,
``cachedContentTokenCount`` when the prompt cache was read), ``modelVersion`` (the model),
``responseId``. The fake provider's rules decide what is said: a function named in the
last user message (or forced by ``toolConfig.functionCallingConfig`` ANY) is called, with
arguments made from its ``parameters`` or ``parametersJsonSchema``, whole in one part; a
last ``functionResponse`` gets "The tool returned: ..."; a last ``model`` turn is continued
(prefill); ``responseMimeType: application/json`` with a schema gets a JSON object made
from it (unless ``fg.reply`` names the model). With ``thinkingConfig.includeThoughts``
the answer starts with one thought part (``"thought": true``) counted in
``thoughtsTokenCount``. A stream sends the thought, then the text in ``fg.chunks`` pieces
(or the function call whole), each chunk with the usage so far; then a last chunk, an
empty text part with ``finishReason`` and the final usage (there is no ``[DONE]``).
``Success(finish_reason="SAFETY")`` (or ``RECITATION``, ``MALFORMED_FUNCTION_CALL``, ...)
ends the next answer so; ``SAFETY`` brings the blocking ``safetyRatings``, and
``Success(text="", finish_reason="SAFETY")`` a candidate without content, as a blocked
answer has.

**Thought signatures.** A model for which ``fg.signatures_required`` holds (a predicate or
a collection of names; by default a name starting ``gemini-3``) signs its answers as
Gemini 3 does: a function call part carries a ``thoughtSignature`` the fake mints and keeps
in ``fg.signatures`` (the raw bytes); a text answer's last part carries one too. A request
to such a model whose current turn (the contents after the last user message that is not
only function responses) holds a ``model`` content whose first ``functionCall`` part has
no signature gets Gemini's 400 "Function call is missing a thought_signature in
functionCall parts ..."; one the fake did not mint, "Corrupted thought signature.".
``skip_thought_signature_validator`` passes, as on Gemini. The signature may come back in
standard or URL-safe base64 (the Python SDK sends the latter).

**Refusals** (before the script is consulted, with Google's 400 bodies, see
:func:`gateway.testing.gemini_shapes.problem`): a top-level field Gemini does not know
(``model`` and ``stream`` included) or a keyword the OpenAPI-subset ``parameters`` /
``responseSchema`` lacks (``additionalProperties``, ``$ref``, ``$schema``, ``const``,
``oneOf``, ``allOf``, ``exclusiveMinimum``, ...) is ``Invalid JSON payload received.
Unknown name "x" at 'tools[0].function_declarations[0].parameters': Cannot find field.``,
every one in the message and in ``google.rpc.BadRequest`` field violations; a role other
than ``user`` / ``model``, "Please use a valid role: user, model."; no ``contents``, or a
content without parts, Gemini's ``* GenerateContentRequest.contents...`` messages.
``fg.context_window[model] = N``: a prompt over ``N`` tokens gets "The input token count
(M) exceeds the maximum number of tokens allowed (N)." (Gemini limits the input alone).

**Prompt cache**: the fake provider's, implicit as Gemini 2.5's: every prefix of at least
``minimum`` tokens (tools, ``systemInstruction``, then each part of each content) is
cached per key and model; a hit is reported as ``cachedContentTokenCount`` inside
``promptTokenCount``.

**Script**: every step of :mod:`gateway.testing.script`, per model and per key, with
Gemini's errors: ``Error.gemini_rate_limit(retry_delay="2s", per_day=False)`` (429 with
``QuotaFailure`` and ``RetryInfo``), ``Error.gemini_overloaded()`` (503),
``Error.gemini_internal()`` (500), ``Error.gemini_deadline()`` (504),
``Error.gemini_prompt_too_long(count, limit)``, ``Error.gemini_auth()`` (400
``API_KEY_INVALID``; ``missing=True``: 403). Stream faults count content chunks (the
thought, each text piece, the function call): ``CutAfter``, ``StallAfter``,
``ErrorEventAfter`` (then ``data: {"error": {"code": 503, ..., "status":
"UNAVAILABLE"}}``), ``MalformedEventAt``, ``Delay``, ``Tamper``, and ``NoDone`` (the
stream ends cleanly without its finishing chunk: no ``finishReason``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import Any

from aiohttp import web

from gateway.testing import replies, shapes
from gateway.testing.answer import FakeEvent, dump
from gateway.testing.cloud_auth import Accept, accepts
from gateway.testing.error_bodies import GEMINI_NO_KEY, gemini_key_invalid, google_error
from gateway.testing.fake_provider import FakeProvider, RecordedRequest
from gateway.testing.gemini_shapes import (
    counted_body,
    field,
    gemini_chunks,
    gemini_json,
    model_json,
    models_json,
    parse_gemini,
    problem,
    signature_problem,
    structured_reply,
    thought_text,
    wants_thoughts,
)
from gateway.testing.replies import Exchange
from gateway.testing.replies import _position as position  # the fake provider's own rule
from gateway.testing.script import (
    CutAfter,
    Delay,
    Error,
    ErrorEventAfter,
    MalformedEventAt,
    NoDone,
    StallAfter,
    Success,
    Tamper,
)

_METHODS = ("generateContent", "streamGenerateContent", "countTokens")
_VERSIONS = "v1|v1beta|v1alpha"


def requires_signatures(model: str) -> bool:
    """Gemini 3 models require their function calls' thought signatures back."""
    return model.startswith("gemini-3")


class GeminiRequest(RecordedRequest):
    """A request to a Gemini route, whose API key may also be Google's."""

    @property
    def key(self) -> str | None:
        """The fake provider's key (a bearer token, ``x-api-key``, ``api-key``), else
        Google's ``x-goog-api-key`` header, else the ``key`` query parameter."""
        return super().key or self.headers.get("x-goog-api-key") or self.query.get("key") or None


class GeminiServer(FakeProvider):
    """A fake provider that also serves Gemini's ``generateContent``,
    ``streamGenerateContent`` and ``countTokens`` (on the routes its subclass adds, with
    :meth:`_endpoint` ``("gemini")``): the serving code of :class:`FakeGemini` and
    :class:`~gateway.testing.FakeVertex`. See the module docstring."""

    #: Vertex's shapes (``createTime``, ``trafficType``, no candidate ``index``) and rules
    #: (every content names its role; countTokens takes Vertex's fields).
    vertex_shapes = False

    def __init__(
        self,
        *,
        chunks: int = 8,
        models: Iterable[str] = (),
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(chunks=chunks, models=models, ssl_context=ssl_context)
        #: The models that sign their answers and check the signatures sent back: a
        #: predicate or a collection of names.
        self.signatures_required: Callable[[str], bool] | Collection[str] = requires_signatures
        #: Every thought signature the fake minted (raw bytes).
        self.signatures: set[bytes] = set()

    def needs_signatures(self, model: str) -> bool:
        """Whether ``model`` signs its answers and checks the signatures sent back."""
        rule = self.signatures_required
        return bool(rule(model)) if callable(rule) else model in rule

    def _record(self, request: web.Request, body: Any, raw: bytes = b"") -> RecordedRequest:
        record = GeminiRequest(
            method=request.method,
            path=request.path,
            query_string=request.query_string,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            model=self._model_of(request, body),
            raw=raw,
        )
        self.requests.append(record)
        return record

    def _model_of(self, request: web.Request, body: Any) -> str | None:
        model, _ = _target(request)
        return model or super()._model_of(request, body)

    async def _serve(self, ex: Exchange) -> web.StreamResponse:
        if ex.api == "gemini":
            return await self._serve_gemini(ex)
        return await super()._serve(ex)

    async def _serve_gemini(self, ex: Exchange) -> web.StreamResponse:
        """Refuse (credentials, path, body, signatures), play the script, then answer."""
        request = ex.request
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = self._record(request, body, raw)
        refusal = self._refuse(request, record)
        if refusal is not None:
            return refusal
        model, method = _target(request)
        array = _array_stream(request)
        if method not in _METHODS or not model:
            error = Error(404, google_error(404, "NOT_FOUND", f"Method not found: {method}."))
            return replies.error_response(ex, error)
        failure = problem(body, vertex=self.vertex_shapes, counting=method == "countTokens")
        if failure is None and method != "countTokens" and self.needs_signatures(model):
            message = signature_problem(field(body, "contents"), self.signatures)
            failure = google_error(400, "INVALID_ARGUMENT", message) if message else None
        if failure is not None or not isinstance(body, dict):
            return replies.error_response(ex, _arrayed(Error(400, failure), array))
        steps = self._steps(model, record.key)
        ex.steps = [_arrayed(s, array) if isinstance(s, Error) else s for s in steps]
        sse = method == "streamGenerateContent" and not array
        early = await replies.before_answer(ex, body, stream=sse)
        if early is not None:
            return early
        if method == "countTokens":
            return await self._count(ex, body)
        return await self._generate(ex, body, record, method == "streamGenerateContent")

    async def _count(self, ex: Exchange, body: dict[str, Any]) -> web.StreamResponse:
        """``{"totalTokens": N}`` by the tokens rule (Vertex adds the billable characters)."""
        conv = parse_gemini(counted_body(body))
        payload: dict[str, Any] = {"totalTokens": conv.prompt_tokens}
        if self.vertex_shapes:
            payload["totalBillableCharacters"] = conv.prompt_chars
        payload["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": conv.prompt_tokens}]
        return await replies.json_answer(ex, payload)

    async def _generate(
        self, ex: Exchange, body: dict[str, Any], record: RecordedRequest, stream: bool
    ) -> web.StreamResponse:
        model = str(record.model)
        conv = parse_gemini(body, stream=stream)
        window = self.context_window.get(model)
        if window is not None and conv.prompt_tokens > window:
            error = Error.gemini_prompt_too_long(conv.prompt_tokens, window)
            return replies.error_response(ex, _arrayed(error, _array_stream(ex.request)))
        cache = self._use_cache("gemini", body, record, conv)
        reply = self.reply
        structured = structured_reply(body)
        if structured is not None and model not in reply:
            reply = {**reply, model: structured}
        answer = replies.answer(
            ex, conv, model, reply=reply, cut_at=self.cut_at, chunks=self.chunks, cache=cache
        )
        thought = thought_text(model) if wants_thoughts(body) else None
        signature = self._mint(model) if self.needs_signatures(model) else None
        vertex = self.vertex_shapes
        if not stream:
            payload = gemini_json(answer, thought=thought, signature=signature, vertex=vertex)
            return await replies.json_answer(ex, payload)
        chunks = gemini_chunks(answer, thought=thought, signature=signature, vertex=vertex)
        return await self._stream(ex, chunks)

    def _mint(self, model: str) -> str:
        """A new thought signature, kept in :attr:`signatures`, in standard base64."""
        raw = f"fake-thought-signature/{model}/".encode() + os.urandom(16)
        self.signatures.add(raw)
        return base64.b64encode(raw).decode()

    async def _stream(self, ex: Exchange, events: list[FakeEvent]) -> web.StreamResponse:
        """The chunks as SSE (``alt=sse``) or as a streamed JSON array, with the faults."""
        array = _array_stream(ex.request)
        if ex.step(NoDone):
            events = [e for e in events if not e.done]
        malformed = ex.step(MalformedEventAt)
        if malformed:
            events.insert(position(events, malformed.n), FakeEvent("{not json"))
        tamper = ex.step(Tamper)
        if tamper is not None:
            events = [_tampered(e, i, tamper) for i, e in enumerate(events)]
        terminal = ex.step(CutAfter) or ex.step(StallAfter) or ex.step(ErrorEventAfter)
        stop_at = position(events, terminal.n_chunks) if terminal else None
        delay, forced = ex.step(Delay), ex.step(Success)
        headers = {**replies.base_headers("gemini", ex.n), **(forced.headers if forced else {})}
        response = web.StreamResponse(headers=headers)
        response.content_type = "application/json" if array else "text/event-stream"
        response.charset = "utf-8"
        await replies.send(ex, response.prepare(ex.request))
        for index, event in enumerate(events):
            if index == stop_at:
                await _fault(ex, response, terminal, index, array)
                return response
            if event.delta and delay:
                await asyncio.sleep(delay.per_chunk_s)
            await replies.send(ex, response.write(_frame(event, index, array)))
        await _end(ex, response, len(events), array)
        return response


class FakeGemini(GeminiServer):
    """A scripted fake Gemini API (AI Studio) on ``127.0.0.1`` (see the module docstring)."""

    def __init__(
        self,
        *,
        keys: Accept = None,
        models: Iterable[str] = ("gemini-2.5-flash",),
        chunks: int = 8,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(chunks=chunks, models=models, ssl_context=ssl_context)
        #: The API keys accepted: a collection, a predicate, or ``None`` (any non-empty).
        self.keys: Accept = keys

    def _add_routes(self, app: web.Application) -> None:
        models = "/{version:" + _VERSIONS + "}/models"
        app.router.add_post(models + "/{target}", self._endpoint("gemini"))
        app.router.add_get(models + "/{target}", self._describe)
        app.router.add_get(models, self._list)

    def _refuse(self, request: web.Request, record: RecordedRequest) -> web.Response | None:
        """Gemini's answer to a request without a key (403) or with one it does not know
        (400 ``API_KEY_INVALID``)."""
        if not record.key:
            body = google_error(403, "PERMISSION_DENIED", GEMINI_NO_KEY)
        elif not accepts(self.keys, record.key):
            body = gemini_key_invalid()
        else:
            return None
        status = body["error"]["code"]
        sent = [body] if _array_stream(request) else body
        return web.json_response(sent, status=status, headers=replies.base_headers("gemini", 0))

    async def _list(self, request: web.Request) -> web.Response:
        record = self._record(request, None)
        refusal = self._refuse(request, record)
        if refusal is not None:
            return refusal
        names = [*self.models]
        for table in (self.reply, self.context_window, self.cut_at):
            names.extend(m for m in table if m not in names)
        return web.json_response(models_json(names, self.context_window))

    async def _describe(self, request: web.Request) -> web.Response:
        record = self._record(request, None)
        refusal = self._refuse(request, record)
        if refusal is not None:
            return refusal
        model = str(record.model)
        return web.json_response(model_json(model, self.context_window.get(model)))


def _target(request: web.Request) -> tuple[str | None, str]:
    """``(model, method)`` of a Gemini path's last segment (``gemini-2.5-flash:countTokens``);
    ``(None, "")`` on another route."""
    target = request.match_info.get("target")
    if target is None:
        return None, ""
    model, sep, method = target.rpartition(":")
    return (model, method) if sep else (target, "")


def _array_stream(request: web.Request) -> bool:
    """A ``streamGenerateContent`` request without ``alt=sse``: its answer is a JSON array."""
    _, method = _target(request)
    return method == "streamGenerateContent" and request.query.get("alt") != "sse"


def _arrayed(error: Error, array: bool) -> Error:
    """``error`` as Google answers a JSON-array stream request: its JSON body in an array."""
    if not array:
        return error
    data, _ = error.render("gemini")
    try:
        body = json.loads(data)
    except ValueError:
        return error
    return replace(error, body=[body]) if isinstance(body, dict) else error


def _tampered(event: FakeEvent, index: int, tamper: Tamper) -> FakeEvent:
    """``event`` with its data rewritten by ``tamper`` (undecodable data kept)."""
    try:
        data = json.loads(event.data)
    except ValueError:
        return event
    return replace(event, data=dump(tamper.rewrite(data, index)))


def _frame(event: FakeEvent, index: int, array: bool) -> bytes:
    """One chunk on the wire: ``data: <json>\\r\\n\\r\\n``, or the ``index``-th element of
    a JSON array (pretty-printed, after ``[`` or ``\\n,\\r\\n``)."""
    if not array:
        return f"data: {event.data}\r\n\r\n".encode()
    try:
        text = json.dumps(json.loads(event.data), indent=2, ensure_ascii=False)
    except ValueError:
        text = event.data
    return (("[" if index == 0 else "\n,\r\n") + text).encode()


async def _end(ex: Exchange, response: web.StreamResponse, sent: int, array: bool) -> None:
    """Close the array (``sent`` elements written) and end the body; every chunk is out,
    so a client closing now is no disconnect."""
    if array:
        await replies.send(ex, response.write(b"\n]" if sent else b"[]"))
    ex.settled = True
    await replies.send(ex, response.write_eof())


async def _fault(
    ex: Exchange,
    response: web.StreamResponse,
    fault: CutAfter | StallAfter | ErrorEventAfter | None,
    sent: int,
    array: bool,
) -> None:
    if isinstance(fault, CutAfter):
        replies.abort(ex)
    if isinstance(fault, StallAfter):
        await replies.until_gone(ex)
    if isinstance(fault, ErrorEventAfter):
        event = shapes.stream_error_event("gemini", fault.payload, 0)
        await replies.send(ex, response.write(_frame(event, sent, array)))
        await _end(ex, response, sent + 1, array)


__all__ = [
    "Error",
    "FakeGemini",
    "GeminiRequest",
    "GeminiServer",
    "requires_signatures",
]
