"""A scripted fake AWS Bedrock Runtime: a real aiohttp server that AWS's own SDK accepts.

It is the fake provider (:class:`~gateway.testing.FakeProvider`: the same answers, script
and records) behind Bedrock's routes, authentication and framing::

    async with FakeBedrock(region="us-east-1") as fake:
        fake.push(BedrockError.throttling(), model=MODEL)           # the next call: 429
        fake.push(stream_exception(3, "modelStreamErrorException"))  # then: cut by an exception
        client = botocore.session.get_session().create_client(
            "bedrock-runtime", region_name="us-east-1", endpoint_url=fake.url,
            aws_access_key_id=fake.access_key, aws_secret_access_key=fake.secret_key)

Routes (the model id URL-encoded in the path, as AWS SDKs send it):
``POST /model/{modelId}/invoke`` (the Anthropic Messages answer),
``/invoke-with-response-stream`` (``application/vnd.amazon.eventstream``: chunk frames
wrapping Anthropic's stream events in base64, the last ``message_stop`` carrying
``amazon-bedrock-invocationMetrics``), ``/converse`` and ``/converse-stream``
(messageStart, contentBlockStart for a tool use, contentBlockDelta, contentBlockStop,
messageStop, metadata), ``/count-tokens`` (CountTokens: the InvokeModel body in base64 as
``{"input": {"invokeModel": {"body": ...}}}``, checked as an invoke body; the answer is
``{"inputTokens": N}`` by the fake provider's tokens rule; scripted as the others).

**Authentication**, as AWS checks it (:mod:`gateway.testing.sigv4_check`): every request's
Signature V4 is computed again with botocore for service ``bedrock`` and the fake's
``region``, with the secret of its access key (:attr:`access_key`/:attr:`secret_key`, more
with :meth:`add_key`, temporary ones with their session token; :meth:`expire` a token);
or ``Authorization: Bearer <key>`` with a Bedrock API key of :meth:`add_api_key`. Refused
with AWS's 403s: ``MissingAuthenticationTokenException``, ``UnrecognizedClientException``,
``InvalidSignatureException`` (a wrong secret; another region, named),
``ExpiredTokenException``.

**Bodies**, as Bedrock checks them: an invoke body needs ``anthropic_version:
bedrock-2023-05-31``, ``messages`` and ``max_tokens``, and may not hold ``model`` or
``stream`` (400 ``ValidationException`` "extraneous key [model] is not permitted");
``anthropic_beta`` must be a list of flags Bedrock knows (``fake.betas``, by default the
gateway's list of them, :data:`gateway.providers.kinds.BEDROCK_BETAS`; another is a 400
``ValidationException`` "invalid beta flag"), and every turn's ``role`` must be ``user``
or ``assistant`` (a ``system`` turn is a 400 ``ValidationException``
"messages.N: role must be user or assistant"). A Converse body is checked by
:func:`gateway.testing.converse_shapes.problem`. ``fake.context_window[model]`` answers a
longer prompt with "Input is too long for requested model.".

**Prompt cache**: the fake provider's (``fake.prompt_cache``, ``None``: off), one per
model for the whole fake (an account's, whatever key signs). InvokeModel bodies are cached
at their ``cache_control`` markers and report Anthropic's ``cache_read_input_tokens`` and
``cache_creation_input_tokens`` (a stream's invocation metrics too); Converse bodies at
their ``{"cachePoint": {"type": "default"}}`` entries, each marking the block before it,
and report ``cacheReadInputTokens`` and ``cacheWriteInputTokens`` next to
``inputTokens`` (left out when both are 0). More than 4 markers: a 400
``ValidationException``.

**Script**: ``push``/``script`` as the fake provider's, per model id (decoded, e.g.
``us.anthropic.claude-sonnet-4-5-20250929-v1:0``) and per ``key`` (the access key id, or
the API key). Errors: :class:`~gateway.testing.bedrock_errors.BedrockError`
(``throttling()``, ``service_quota()``, ``model_not_ready()``, ``service_unavailable()``,
``internal()``, ``model_timeout()``, ``input_too_long()``, ``access_denied()``); the
fake provider's ``Reset``, ``Hang``, ``SlowFirstByte``, ``Success``, ``Tamper``. In a
stream (``n`` counts content deltas, as there): ``CutAfter(n)`` closes the connection,
:func:`stream_exception` (an ``ErrorEventAfter``) sends an exception frame,
``MalformedEventAt(n)`` sends a frame whose message CRC is wrong, ``StallAfter(n)``,
``Delay``.

**Records**: ``fake.requests`` (path as sent, headers, parsed body, ``model`` the model
id), whatever their fate.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import Collection, Hashable
from typing import Any

from aiohttp import web

from gateway.providers.kinds import BEDROCK_BETAS
from gateway.testing import replies
from gateway.testing.answer import FakeEvent, dump
from gateway.testing.anthropic_shapes import messages_events, messages_json
from gateway.testing.bedrock_errors import BedrockError
from gateway.testing.cache_blocks import marker_problem
from gateway.testing.conversation import parse_messages
from gateway.testing.converse_shapes import converse_events, converse_json, parse_converse
from gateway.testing.converse_shapes import problem as converse_problem
from gateway.testing.eventstream_frames import chunk_frame, event_frame, exception_frame
from gateway.testing.fake_provider import FakeProvider, RecordedRequest
from gateway.testing.replies import Exchange
from gateway.testing.replies import _position as position  # the fake provider's own rules
from gateway.testing.replies import _tampered as tampered
from gateway.testing.script import (
    CutAfter,
    Delay,
    Error,
    ErrorEventAfter,
    MalformedEventAt,
    StallAfter,
    Success,
    Tamper,
)
from gateway.testing.sigv4_check import AwsAccounts, Caller, check

ANTHROPIC_VERSION = "bedrock-2023-05-31"
_OPERATIONS = (
    "invoke", "invoke-with-response-stream", "converse", "converse-stream", "count-tokens",
)  # fmt: skip
_MISSING_BODY = (
    "1 validation error detected: Value at 'input.invokeModel.body' failed to satisfy "
    "constraint: Member must not be null"
)
_MALFORMED = "Malformed input request: {}, please reformat your input and try again."
#: Bedrock's answer to an ``anthropic_beta`` flag it does not know.
INVALID_BETA = "invalid beta flag"
_DEFAULT_EXCEPTION = (
    "internalServerException",
    "The system encountered an unexpected error during processing. Try your request again.",
)


def stream_exception(
    n_chunks: int, exception_type: str, message: str | None = None
) -> ErrorEventAfter:
    """After ``n_chunks`` content deltas, an exception frame ``exception_type`` (as AWS
    spells it in a stream: ``throttlingException``, ``modelStreamErrorException``, ...)."""
    error = {"type": exception_type, "message": message or f"fake {exception_type}"}
    return ErrorEventAfter(n_chunks, {"type": "error", "error": error})


def invoke_problem(body: Any, betas: Collection[str] = BEDROCK_BETAS) -> str | None:
    """What Bedrock's validation says of an InvokeModel body for Claude (taking the beta
    flags ``betas``), or None."""
    if not isinstance(body, dict):
        return _MALFORMED.format("#: expected type: JSONObject")
    for key in ("anthropic_version", "messages", "max_tokens"):
        if key not in body:
            return _MALFORMED.format(f"#: required key [{key}] not found")
    if body["anthropic_version"] != ANTHROPIC_VERSION:
        return _MALFORMED.format(
            f"#/anthropic_version: {body['anthropic_version']} is not a valid enum value"
        )
    for key in ("model", "stream"):
        if key in body:
            return _MALFORMED.format(f"#: extraneous key [{key}] is not permitted")
    beta = body.get("anthropic_beta")
    if beta is not None and not (isinstance(beta, list) and all(isinstance(b, str) for b in beta)):
        return _MALFORMED.format("#/anthropic_beta: expected type: JSONArray")
    if beta is not None and any(b not in betas for b in beta):
        return INVALID_BETA
    messages = body["messages"]
    for i, m in enumerate(messages if isinstance(messages, list) else ()):
        if isinstance(m, dict) and m.get("role") not in ("user", "assistant"):
            return f"messages.{i}: role must be user or assistant"
    return marker_problem("messages", body)


def counted_body(body: Any) -> tuple[Any, str | None]:
    """The InvokeModel body a CountTokens body wraps (``{"input": {"invokeModel":
    {"body": "<base64 of the JSON>"}}}``), or what Bedrock's validation says of it."""
    wrapper = body.get("input") if isinstance(body, dict) else None
    invoke = wrapper.get("invokeModel") if isinstance(wrapper, dict) else None
    encoded = invoke.get("body") if isinstance(invoke, dict) else None
    if not isinstance(encoded, str):
        return None, _MISSING_BODY
    try:
        return json.loads(base64.b64decode(encoded, validate=True)), None
    except ValueError:
        return None, _MALFORMED.format("#: the body is not base64-encoded JSON")


class FakeBedrock(FakeProvider):
    """A scripted fake Bedrock Runtime on ``127.0.0.1`` (see the module docstring)."""

    def __init__(
        self,
        *,
        region: str = "us-east-1",
        access_key: str = "AKIAFAKEBEDROCK00001",
        secret_key: str = "fake/bedrock/secret/key/0000000000000000",
        chunks: int = 8,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(chunks=chunks, models=(), ssl_context=ssl_context)
        self.region = region
        self.access_key, self.secret_key = access_key, secret_key
        self.accounts = AwsAccounts(secrets={access_key: secret_key})
        #: The ``latencyMs`` of Converse answers and Bedrock's invocation metrics.
        self.latency_ms = 42
        #: The ``anthropic_beta`` flags taken; any other: "invalid beta flag".
        self.betas: set[str] = set(BEDROCK_BETAS)

    def _cache_scope(self, record: RecordedRequest) -> Hashable:
        """The account's cache for the model: every key of the fake shares it."""
        return record.model

    def add_key(self, access_key: str, secret_key: str, session_token: str | None = None) -> None:
        """Know another access key; with ``session_token``, a temporary one that needs it."""
        self.accounts.secrets[access_key] = secret_key
        if session_token is not None:
            self.accounts.tokens[access_key] = session_token

    def expire(self, session_token: str) -> None:
        """From now on a request carrying ``session_token`` gets ``ExpiredTokenException``."""
        self.accounts.expired.add(session_token)

    def add_api_key(self, key: str) -> None:
        """Accept ``Authorization: Bearer <key>`` (a Bedrock API key)."""
        self.accounts.api_keys.add(key)

    @property
    def app(self) -> web.Application:
        if self._app is None:
            app = web.Application(client_max_size=64 * 1024 * 1024)
            for op in _OPERATIONS:
                app.router.add_post("/model/{model_id:.+}/" + op, self._endpoint(op))
            self._app = app
        return self._app

    async def _serve(self, ex: Exchange) -> web.StreamResponse:
        op, request = ex.api, ex.request
        ex.api = "messages"  # the answer machinery's ids and wording: Anthropic's
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = self._record(request, body)
        record.model = model = request.match_info["model_id"]
        record.path = request.rel_url.raw_path  # as sent: the model id URL-encoded
        url = f"{request.scheme}://{request.host}{request.raw_path}"
        caller = check(
            request.method, url, request.headers, raw, accounts=self.accounts, region=self.region
        )
        if not isinstance(caller, Caller):
            return replies.error_response(ex, caller)
        counting, problem = op == "count-tokens", None
        if counting:
            body, problem = counted_body(body)
        invoke = counting or op.startswith("invoke")
        problem = problem or (
            invoke_problem(body, self.betas)
            if invoke
            else converse_problem(body) or marker_problem("converse", body)
        )
        if problem is not None or not isinstance(body, dict):
            return replies.error_response(ex, BedrockError.validation(problem or ""))
        ex.steps = self._steps(model, caller.key)
        early = await replies.before_answer(ex, body)
        if early is not None:
            return early
        if counting:
            return await replies.token_count(ex, body, "inputTokens")
        stream = op.endswith("stream")
        if invoke:
            conv = parse_messages(body)
            conv.stream = stream
        else:
            conv = parse_converse(body, stream=stream)
        window = self.context_window.get(model)
        if window is not None and conv.prompt_tokens > window - (conv.max_tokens or 0):
            return replies.error_response(ex, BedrockError.input_too_long())
        cache = self._use_cache("messages" if invoke else "converse", body, record, conv)
        answer = replies.answer(
            ex, conv, model, reply=self.reply, cut_at=self.cut_at, chunks=self.chunks, cache=cache
        )
        if not stream:
            payload = messages_json(answer) if invoke else converse_json(answer, self.latency_ms)
            return await replies.json_answer(ex, payload)
        if invoke:
            events = messages_events(answer)
            metrics = {
                "inputTokenCount": answer.uncached_tokens,
                "outputTokenCount": answer.completion_tokens,
                "invocationLatency": self.latency_ms,
                "firstByteLatency": self.latency_ms // 4,
            }
            if answer.cache_read or answer.cache_write:
                metrics["cacheReadInputTokenCount"] = answer.cache_read
                metrics["cacheWriteInputTokenCount"] = answer.cache_write
            stop = {"type": "message_stop", "amazon-bedrock-invocationMetrics": metrics}
            events[-1] = FakeEvent(dump(stop), "message_stop")
        else:
            events = converse_events(answer, self.latency_ms)
        return await self._frames(ex, events, invoke)

    async def _frames(
        self, ex: Exchange, events: list[FakeEvent], invoke: bool
    ) -> web.StreamResponse:
        """The stream as event-stream frames, with the scripted faults."""

        def encode(e: FakeEvent) -> bytes:
            data = json.loads(e.data)
            return chunk_frame(data) if invoke else event_frame(str(e.event), data)

        tamper = ex.step(Tamper)
        if tamper is not None:
            events = [tampered(e, i, tamper) for i, e in enumerate(events)]
        malformed = ex.step(MalformedEventAt)
        bad_at = position(events, malformed.n) if malformed else None
        terminal = ex.step(CutAfter) or ex.step(StallAfter) or ex.step(ErrorEventAfter)
        stop_at = position(events, terminal.n_chunks) if terminal else None
        delay = ex.step(Delay)
        forced = ex.step(Success)
        headers = {"x-amzn-requestid": f"00000000-fake-4000-8000-{ex.n:012d}",
                   "x-amzn-bedrock-content-type": "application/json",
                   **(forced.headers if forced else {})}  # fmt: skip
        response = web.StreamResponse(headers=headers)
        response.content_type = "application/vnd.amazon.eventstream"
        await replies.send(ex, response.prepare(ex.request))
        for index, event in enumerate(events):
            if index == bad_at:
                good = encode(event)
                await replies.send(ex, response.write(good[:-1] + bytes([good[-1] ^ 0xFF])))
            if index == stop_at:
                await self._fault(ex, response, terminal)
                return response
            if event.delta and delay:
                await asyncio.sleep(delay.per_chunk_s)
            await replies.send(ex, response.write(encode(event)))
        ex.settled = True
        await replies.send(ex, response.write_eof())
        return response

    async def _fault(
        self,
        ex: Exchange,
        response: web.StreamResponse,
        fault: CutAfter | StallAfter | ErrorEventAfter | None,
    ) -> None:
        if isinstance(fault, CutAfter):
            replies.abort(ex)
        if isinstance(fault, StallAfter):
            await replies.until_gone(ex)
        if isinstance(fault, ErrorEventAfter):
            error = (fault.payload or {}).get("error") or {}
            kind = error.get("type") or _DEFAULT_EXCEPTION[0]
            await replies.send(
                ex,
                response.write(
                    exception_frame(kind, error.get("message") or _DEFAULT_EXCEPTION[1])
                ),
            )
            ex.settled = True
            await replies.send(ex, response.write_eof())


__all__ = [
    "ANTHROPIC_VERSION",
    "INVALID_BETA",
    "BedrockError",
    "Error",
    "FakeBedrock",
    "invoke_problem",
    "stream_exception",
]
