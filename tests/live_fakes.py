"""In-memory edges of the live path (gateway/live/): a provider's responses, the upstream
client that hands them out, the client's writer, and a virtual clock.

The code under test (the attempter, the exchange, the pump, the relay) runs as it does
in the gateway; only what it talks to is faked: no socket, no real wait.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml
from aiohttp import ClientPayloadError, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict
from yarl import URL

from gateway.formats import CHAT, Format
from gateway.formats.endpoints import ENDPOINT_OF
from gateway.live.attempter import HttpAttempter
from gateway.live.context import LiveConfig, LiveRequest
from gateway.observe.events import Events
from gateway.observe.metrics import Metrics
from gateway.observe.request_log import RequestLog
from gateway.policy.schema import Policy
from gateway.providers import Target, Wiring
from gateway.recovery.seams import Env, Request
from gateway.routing.build import build_policy_set
from gateway.routing.policyset import PolicySet
from gateway.state.memory import MemoryState
from gateway.upstream.client import AnswerLimits, Upstream

SECRET = "sk-provider-secret-0123456789"
UPSTREAM = "http://upstream.test/v1"

#: The policy of every case, changed by a case's ``policy`` (merged one level deep).
BASE_POLICY: dict[str, Any] = {
    "retry": {
        "max_retries": 2,
        "transient": {"base": 2, "cap": 2, "jitter": 0},
        "rate_limit": {"base": 1, "cap": 1, "jitter": 0},
    },
    "turn_retry": {"max": 0},
    "stream": {"keepalive": "500ms"},
    "timeouts": {"connect": "1s", "first_byte": "2s", "stream_idle": "2s", "total": "60s"},
}


def policy_set() -> PolicySet:
    """Two models on an OpenAI-format provider (``gpt-test`` named ``up-model`` there), one
    on an Anthropic-format provider (``claude-test``)."""
    platform = {
        "providers": {
            "up": {"api": "openai", "base_url": UPSTREAM, "api_key_env": "UP_KEY"},
            "ant": {"api": "anthropic", "base_url": UPSTREAM, "api_key_env": "UP_KEY"},
        },
        "models": {
            "gpt-test": {"provider": "up", "upstream_model": "up-model"},
            "gpt-prefill": {"provider": "up", "prefill": True},
            "claude-test": {"provider": "ant", "upstream_model": "claude-up"},
        },
        "policies": {"p": {}},
    }
    raw = yaml.safe_dump(platform).encode()
    return build_policy_set([("platform.yaml", "platform.yaml", raw, "")], {"UP_KEY": "k"}, [])


POLICIES = policy_set()


def policy(**changes: Any) -> Policy:
    merged = {k: ({**v, **changes[k]} if isinstance(v, dict) and k in changes else v)
              for k, v in BASE_POLICY.items()}  # fmt: skip
    merged.update({k: v for k, v in changes.items() if k not in BASE_POLICY})
    return Policy.model_validate(merged)


# ---- the provider's side ------------------------------------------------------------
class Content:
    """A response body read piece by piece (``readany``); an exception in ``pieces`` is
    raised when its turn comes (the connection cut); past the last piece: ``b""``."""

    def __init__(self, pieces: list[bytes | BaseException]) -> None:
        self.pieces = list(pieces)

    def is_eof(self) -> bool:
        return not self.pieces

    def read_nowait(self) -> bytes:
        return b""

    async def readany(self) -> bytes:
        await asyncio.sleep(0)
        if not self.pieces:
            return b""
        piece = self.pieces.pop(0)
        if isinstance(piece, BaseException):
            raise piece
        return piece


class FakeResponse:
    """What the attempter reads of a provider's response."""

    def __init__(
        self,
        status: int = 200,
        pieces: list[bytes | BaseException] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.headers = CIMultiDict(headers or {"content-type": "application/json"})
        self.content = Content(pieces or [])
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def release(self) -> None:
        self.closed = True


def cut() -> BaseException:
    """The upstream connection cut mid-body."""
    return ClientPayloadError("Response payload is not completed")


def answer(text: str = "hi", status: int = 200) -> FakeResponse:
    body = {
        "id": "c1",
        "object": "chat.completion",
        "model": "up-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }  # fmt: skip
    return FakeResponse(status, [orjson.dumps(body)])


def error(status: int, message: str = "boom", kind: str = "server_error") -> FakeResponse:
    body = {"error": {"message": message, "type": kind}}
    return FakeResponse(status, [orjson.dumps(body)])


def chunk(text: str | None = None, finish: str | None = None, **extra: Any) -> bytes:
    """One chat stream event: a piece of text, or the end of the choice."""
    delta = {} if text is None else {"content": text}
    data = {"id": "c1", "object": "chat.completion.chunk", "model": "up-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}  # fmt: skip
    return b"data: " + orjson.dumps(data) + b"\n\n"


ROLE = (
    b'data: {"id":"c1","object":"chat.completion.chunk","model":"up-model",'
    b'"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}\n\n'
)
USAGE = (
    b'data: {"id":"c1","object":"chat.completion.chunk","model":"up-model","choices":[],'
    b'"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}\n\n'
)
DONE = b"data: [DONE]\n\n"


def event(name: str, **data: Any) -> bytes:
    """One event of an Anthropic Messages stream."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data}) + b"\n\n"


START = event(
    "message_start",
    message={"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-up",
             "content": [], "stop_reason": None,
             "usage": {"input_tokens": 7, "output_tokens": 1}},
) + event("content_block_start", index=0, content_block={"type": "text", "text": ""})  # fmt: skip


def delta(text: str) -> bytes:
    return event("content_block_delta", index=0, delta={"type": "text_delta", "text": text})


STOP = (
    event("content_block_stop", index=0)
    + event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 4})
    + event("message_stop")
)


def stream(*pieces: bytes | BaseException) -> FakeResponse:
    return FakeResponse(200, list(pieces), {"content-type": "text/event-stream"})


class FakeUpstream(Upstream):
    """The upstream client with no pool: hands out the scripted responses in turn, records
    each request (URL, headers, body); their bodies are read as the client reads them."""

    def __init__(self, *responses: FakeResponse) -> None:
        super().__init__(AnswerLimits())
        self.responses = list(responses)
        self.opened: list[FakeResponse] = []
        self.requests: list[tuple[URL, dict[str, str], dict[str, Any]]] = []

    async def open(  # type: ignore[override]
        self, url: URL, headers: Mapping[str, str], data: Any, **_: Any
    ) -> Any:
        self.requests.append((url, dict(headers), orjson.loads(data.decode())))
        resp = self.responses.pop(0)
        self.opened.append(resp)
        return resp


# ---- the client's side --------------------------------------------------------------
class FakeWriter(AbstractStreamWriter):
    """The client's connection: records what the gateway wrote; from its ``gone_after``-th
    write on, the client is gone (the write raises)."""

    def __init__(self, gone_after: int | None = None) -> None:
        self.status_line = ""
        self.chunks: list[bytes] = []
        self.eof = False
        self.gone_after = gone_after
        self.buffer_size = self.output_size = 0
        self.length = None

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    async def write(self, chunk: Any) -> None:
        if self.gone_after is not None and len(self.chunks) >= self.gone_after:
            raise ConnectionResetError("the client left")
        self.chunks.append(bytes(chunk))
        self.output_size += len(chunk)

    async def write_eof(self, chunk: bytes = b"") -> None:
        self.eof = True

    async def drain(self) -> None:
        return None

    def enable_compression(self, encoding: str = "deflate", strategy: Any = None) -> None:
        return None

    def enable_chunking(self) -> None:
        return None

    async def write_headers(self, status_line: str, headers: Any) -> None:
        self.status_line = status_line

    def send_headers(self) -> None:
        return None


class FakeTransport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return self.aborted


class Clock:
    """Virtual time: a wait advances it at once (and lets the loop run). It starts at the
    real monotonic time: the deadlines it sets are also read by code on the real clock."""

    def __init__(self) -> None:
        self.now = time.monotonic()
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


# ---- one request --------------------------------------------------------------------
@dataclass
class Live:
    """One request's live path over the fakes: its context, attempter, log and env."""

    upstream: FakeUpstream
    writer: FakeWriter
    transport: FakeTransport
    clock: Clock
    ctx: LiveRequest
    att: HttpAttempter
    log: RequestLog
    env: Env
    events: list[tuple[str, Any]] = field(default_factory=list)


def live(
    *responses: FakeResponse,
    body: dict[str, Any] | None = None,
    model: str = "gpt-test",
    fmt: Format = CHAT,
    pol: Policy | None = None,
    gone_after: int | None = None,
    write_timeout: float = 5.0,
) -> Live:
    """A request for ``model`` (streamed when ``body`` says so) whose attempts get
    ``responses`` in turn."""
    body = body or {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    clock = Clock()
    upstream = FakeUpstream(*responses)
    writer, transport = FakeWriter(gone_after), FakeTransport()
    path = "/v1/chat/completions" if fmt is CHAT else fmt.paths[0]
    client = make_mocked_request(
        "POST", path, headers={"content-type": "application/json"},
        writer=writer, transport=transport,
    )  # fmt: skip
    events = Events(Metrics())
    targets = {ep: Target(URL(UPSTREAM + ep.value.removeprefix("/v1")),
                          {"authorization": f"Bearer {SECRET}"})
               for ep in ENDPOINT_OF.values()}  # fmt: skip
    wiring = Wiring(targets)
    config = LiveConfig(
        upstream, events, lambda provider, key: wiring, write_timeout,  # type: ignore[arg-type]
        set(), None, clock.monotonic, clock.sleep,
    )  # fmt: skip
    pol = pol or policy()
    req = Request(fmt, body, model, "route", "team", pol, clock.now + 60.0)
    stream = body.get("stream") is True
    ctx = LiveRequest(config, POLICIES, ENDPOINT_OF[path], client, req, stream, "req-1", None, None)
    log = RequestLog("req-1", clock.now)
    log.bill = req.bill  # as the handler does: the access log reports the request's bill
    env = Env(MemoryState(), events, clock.monotonic, clock.wall, random.Random(0))
    return Live(upstream, writer, transport, clock, ctx, HttpAttempter(ctx, log), log, env)


def committed(live: Live) -> web.StreamResponse | None:
    return live.att.response
