"""A live gateway on a background event loop, for synchronous (hypothesis) tests.

Hypothesis drives plain functions; the gateway and an *echo upstream* run on an
event loop in a thread and the tests talk to them over real sockets with
:func:`raw_http`, which sends exactly the bytes given (invalid UTF-8 in headers,
odd header names, any body) and parses the answer with ``http.client``.

The echo upstream answers every endpoint in its own format whatever the body
holds; the query parameter ``mode`` (query strings are passed upstream) picks the
answer, so fuzzed bodies also reach the recovery code paths:

``ok``      a normal answer (JSON, or SSE when the body's ``stream`` is ``true``)
``length``  an answer cut at the token limit (the gateway asks to continue)
``ptl``     400 prompt too long with token counts (the gateway compacts)
``500``     a server error (the gateway retries, then passes it on)
"""

from __future__ import annotations

import asyncio
import gc
import http.client
import json
import logging
import socket
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from gateway.observe.metrics import Metrics
from gateway.routing.policyset import hash_key
from gateway.settings import GatewaySettings
from gateway.web.app import create_app
from tests.harness import CLIENT_KEY, PROVIDER_KEY_ENV, write_policies

T = TypeVar("T")

FUZZ_POLICY: dict[str, Any] = {
    "retry": {
        "max_retries": 1,
        "rate_limit": {"base": "1ms", "cap": "5ms", "jitter": "1ms"},
        "transient": {"base": "1ms", "cap": "5ms"},
        "budget": {"ratio": 1.0, "min_per_second": 1000},
    },
    "turn_retry": {"max": 0},
    "output_recovery": {"max_continuations": 2, "respect_client_max_tokens": False},
    "timeouts": {"connect": "1s", "first_byte": "2s", "stream_idle": "2s", "total": "5s"},
}
MODELS = ["gpt-echo", "claude-echo", "gpt-resp-echo"]


def fuzz_policies(upstream_url: str, admin_models: bool = False) -> dict[str, Any]:
    return {
        "platform.yaml": {
            "providers": {
                "echo": {"api": "openai", "base_url": upstream_url + "/v1",
                         "api_key_env": PROVIDER_KEY_ENV},
                "echo-anthropic": {"api": "anthropic", "base_url": upstream_url,
                                   "api_key_env": PROVIDER_KEY_ENV},
            },
            "models": {
                "gpt-echo": {"provider": "echo", "context_window": 1000,
                             "upstream_api": ["chat", "responses"]},
                "claude-echo": {"provider": "echo-anthropic", "prefill": True},
                "gpt-resp-echo": {"provider": "echo", "upstream_api": "responses"},
                "forbidden-model": {"provider": "echo"},
            },
            "policies": {"fuzz": FUZZ_POLICY},
        },
        "teams/t.yaml": {
            "teams": {
                "team-f": {
                    "keys": [hash_key(CLIENT_KEY)],
                    "models": ["gpt-*", "claude-*"],
                    "routes": [{"match": {"model": "*"}, "policy": "fuzz"}],
                }
            }
        },
    }  # fmt: skip


# ---- the echo upstream ------------------------------------------------------------------


def _answer(api: str, stream: bool, cut: bool) -> tuple[bytes, str]:
    text = "ok"
    if api == "messages":
        stop = "max_tokens" if cut else "end_turn"
        if not stream:
            body = {"id": "msg_echo", "type": "message", "role": "assistant", "model": "m",
                    "content": [{"type": "text", "text": text}], "stop_reason": stop,
                    "usage": {"input_tokens": 1, "output_tokens": 1}}  # fmt: skip
            return orjson.dumps(body), "application/json"
        events = [
            ("message_start", {"type": "message_start", "message": {
                "id": "msg_echo", "type": "message", "role": "assistant", "model": "m",
                "content": [], "usage": {"input_tokens": 1, "output_tokens": 0}}}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": text}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop},
                               "usage": {"output_tokens": 1}}),
            ("message_stop", {"type": "message_stop"}),
        ]  # fmt: skip
        sse = b"".join(f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in events)
        return sse, "text/event-stream"
    if api == "responses":
        status = "incomplete" if cut else "completed"
        resp = {"id": "resp_echo", "object": "response", "status": status, "model": "m",
                "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
                "output": [{"type": "message", "id": "m1", "role": "assistant", "status": status,
                            "content": [{"type": "output_text", "text": text,
                                         "annotations": []}]}],
                "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}  # fmt: skip
        if not stream:
            return orjson.dumps(resp), "application/json"
        events = [
            {"type": "response.created", "response": {**resp, "status": "in_progress"}},
            {"type": "response.output_text.delta", "delta": text, "item_id": "m1",
             "output_index": 0, "content_index": 0},
            {"type": f"response.{status}", "response": resp},
        ]  # fmt: skip
        sse = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
        return sse, "text/event-stream"
    if api == "embeddings":
        body = {"object": "list", "model": "m",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
                "usage": {"prompt_tokens": 1, "total_tokens": 1}}  # fmt: skip
        return orjson.dumps(body), "application/json"
    finish = "length" if cut else "stop"
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    if api == "completions":
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": finish}
        obj = "text_completion"
    else:
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "finish_reason": finish}  # fmt: skip
        obj = "chat.completion"
    if not stream:
        body = {"id": "c1", "object": obj, "model": "m", "choices": [choice], "usage": usage}
        return orjson.dumps(body), "application/json"
    chunks = [
        {"id": "c1", "object": "chat.completion.chunk", "model": "m",
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"id": "c1", "object": "chat.completion.chunk", "model": "m",
         "choices": [{"index": 0, "delta": {"content": text}}]},
        {"id": "c1", "object": "chat.completion.chunk", "model": "m",
         "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage},
    ]  # fmt: skip
    sse = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    return sse, "text/event-stream"


def _error(api: str, status: int, message: str, code: str | None) -> web.Response:
    if api == "messages":
        etype = "invalid_request_error" if status < 500 else "api_error"
        body: dict[str, Any] = {"type": "error", "error": {"type": etype, "message": message}}
    else:
        etype = "invalid_request_error" if status < 500 else "server_error"
        body = {"error": {"message": message, "type": etype, "param": None, "code": code}}
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


class EchoUpstream:
    """Answers every endpoint whatever the body holds; ``?mode=`` picks the answer."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []  # path, raw query, ...
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> EchoUpstream:
        app = web.Application(client_max_size=1 << 30)
        for path, api in (
            ("/v1/chat/completions", "chat"),
            ("/v1/completions", "completions"),
            ("/v1/responses", "responses"),
            ("/v1/messages", "messages"),
            ("/v1/embeddings", "embeddings"),
        ):
            app.router.add_post(path, self._handler(api))
        app.router.add_route("*", "/{tail:.*}", self._other)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _other(self, request: web.Request) -> web.Response:
        self.requests.append(
            (request.path, request.raw_path, dict(request.headers), await request.read())
        )
        return web.Response(status=404, text="echo upstream: no such path")

    def _handler(self, api: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            raw = await request.read()
            self.requests.append((request.path, request.raw_path, dict(request.headers), raw))
            mode = request.query.get("mode", "ok")
            gc.disable()  # as the gateway does for big bodies: its stall is what is measured
            try:
                body = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return _error(api, 400, "echo: body is not JSON", None)
            finally:
                gc.enable()
            stream = isinstance(body, dict) and body.get("stream") is True
            if mode == "ptl":
                return _error(
                    api,
                    400,
                    "This model's maximum context length is 100 tokens. However, your messages "
                    "resulted in 200 tokens. prompt is too long",
                    "context_length_exceeded",
                )
            if mode == "500":
                return _error(api, 500, "echo: server error", None)
            data, ctype = _answer(api, stream, cut=mode == "length")
            return web.Response(body=data, content_type=ctype)

        return handle


# ---- the live gateway --------------------------------------------------------------------


class ErrorLog(logging.Handler):
    """ERROR records of the gateway's HTTP server (a handler that raised) and asyncio."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()} {record.exc_info!r}")


class LiveGateway:
    """Echo upstream + gateway on a loop in a thread; ``call`` runs a coroutine there."""

    def __init__(self, root: Path, **settings: Any) -> None:
        self.root = root
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.errors = ErrorLog()
        self.port = 0
        self.metrics = Metrics(CollectorRegistry())

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> LiveGateway:
        self.thread.start()
        for name in ("aiohttp.server", "gateway.web.listener", "asyncio"):
            logging.getLogger(name).addHandler(self.errors)
        self.call(self._start())
        return self

    async def _start(self) -> None:
        self.upstream = await EchoUpstream().start()
        policy_dir = write_policies(self.root / "policies", fuzz_policies(self.upstream.url))
        settings = GatewaySettings(policy_dir=policy_dir, **self.settings)
        self.app = create_app(settings, metrics=self.metrics)
        self.port = await self.app.start("127.0.0.1", 0)

    def stop(self) -> None:
        self.call(self._stop())
        for name in ("aiohttp.server", "gateway.web.listener", "asyncio"):
            logging.getLogger(name).removeHandler(self.errors)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    async def _stop(self) -> None:
        await self.app.stop()
        await self.upstream.stop()


# ---- a raw HTTP/1.1 client ---------------------------------------------------------------


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return orjson.loads(self.body)

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.headers.get('content-type')!r}, {self.body[:300]!r})"


def raw_http(
    port: int,
    method: str,
    target: bytes | str,
    headers: list[tuple[bytes | str, bytes | str]] = (),  # type: ignore[assignment]
    body: bytes = b"",
    timeout: float = 15.0,
    content_length: bool = True,
) -> Reply:
    """Send exactly these bytes (``Connection: close``) and parse the answer."""

    def b(x: bytes | str) -> bytes:
        return x if isinstance(x, bytes) else x.encode("latin-1")

    lines = [b(method) + b" " + b(target) + b" HTTP/1.1", b"host: 127.0.0.1"]
    lines += [b(k) + b": " + b(v) for k, v in headers]
    if content_length:
        lines.append(b"content-length: " + str(len(body)).encode())
    lines.append(b"connection: close")
    data = b"\r\n".join(lines) + b"\r\n\r\n" + body
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        payload = resp.read()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, payload)


def error_shape_ok(reply: Reply, path: str) -> bool:
    """The endpoint's error format: Anthropic on /v1/messages, OpenAI elsewhere."""
    if not reply.headers.get("content-type", "").startswith("application/json"):
        return False
    try:
        obj = reply.json()
    except orjson.JSONDecodeError:
        return False
    if not isinstance(obj, dict) or not isinstance(obj.get("error"), dict):
        return False
    err = obj["error"]
    if path.startswith("/v1/messages"):
        return (
            obj.get("type") == "error"
            and isinstance(err.get("type"), str)
            and isinstance(err.get("message"), str)
        )
    return isinstance(err.get("message"), str) and isinstance(err.get("type"), str)
