"""Stream writers: neutral stream calls -> the client format's SSE events (bytes). Chat
completions and Anthropic here; Responses in write_responses.py.

A reader (read.py) calls one writer method per piece of the answer as it arrives;
the writer appends whole SSE events to :attr:`Writer.out`. Blocks of the client's format
(Anthropic content blocks, Responses output items) are opened lazily on their first
piece and closed when a piece of another kind arrives, when the source closes its
block, or at the end; so the client always sees them one after another.

What a writer keeps between events: ids, the open block and the tool calls' indexes.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from gateway.formats import CHAT, MESSAGES
from gateway.formats.usage import Usage
from gateway.translate import stops, usage
from gateway.translate.errors import UpstreamError
from gateway.translate.requests.anthropic import tool_id

dumps = orjson.dumps
_PREFIXES = ("chatcmpl-", "msg_", "resp_")
PING = b": ping\n\n"


def base_id(source_id: Any) -> str:
    """The id of the answer without its format's prefix (``chatcmpl-``, ``msg_``,
    ``resp_``), so that the client's id names the upstream's; random when there is none."""
    if isinstance(source_id, str) and source_id:
        sid: str = source_id
        for p in _PREFIXES:
            if sid.startswith(p):
                sid = sid[len(p) :]
                break
        if sid:
            return sid
    return secrets.token_hex(12)


class Writer:
    """What every writer knows; the methods a reader calls."""

    __slots__ = (
        "created",
        "done",
        "include_usage",
        "model",
        "out",
        "started",
        "stop",
        "stop_sequence",
        "tools",
        "usage",
    )

    def __init__(self, model: Any, include_usage: bool, created: int) -> None:
        self.model = model
        self.include_usage = include_usage
        self.created = created
        self.out: list[bytes] = []
        self.started = False
        self.done = False  # the client's stream is closed (its final or error event sent)
        self.usage: Usage | None = None
        self.stop: str | None = None  # neutral, see stops.py
        self.stop_sequence: str | None = None
        self.tools: dict[Any, int] = {}  # the source's key of a tool call -> its index here

    def final_stop(self) -> str:
        """The stop reason; an answer that calls tools stops for them whatever the upstream
        said (some providers say ``stop``), so that the client runs them."""
        stop = self.stop or "end_turn"
        return "tool_use" if self.tools and stop == "end_turn" else stop

    # -- what readers call
    def start(self, source_id: Any = None, created: Any = None) -> None:
        raise NotImplementedError

    def text(self, t: str) -> None:
        raise NotImplementedError

    def reasoning(self, t: str) -> None:
        raise NotImplementedError

    def signature(self, s: str) -> None:  # Anthropic's thinking signature: only it reads it
        pass

    def refusal(self, t: str) -> None:
        self.text(t)

    def tool_start(self, key: Any, call_id: str, name: str) -> None:
        raise NotImplementedError

    def tool_args(self, key: Any, delta: str) -> None:
        raise NotImplementedError

    def block_end(self) -> None:
        """The source closed its current block (text, thinking or tool call)."""

    def ping(self) -> None:
        self.out.append(PING)  # a comment: keeps the connection alive, read by no SDK

    def end(self) -> None:
        raise NotImplementedError

    def error(self, err: UpstreamError) -> None:
        raise NotImplementedError


# ---------------------------------------------------------------- chat completions


class ChatWriter(Writer):
    """``data: {chat.completion.chunk}`` events; a usage chunk when the client asked for it
    (``stream_options.include_usage``); ``data: [DONE]`` last."""

    __slots__ = ("_head", "_tail", "_top")

    def start(self, source_id: Any = None, created: Any = None) -> None:
        if self.started:
            return
        self.started = True
        if type(created) is int:  # not a bool: str(True) is no JSON
            self.created = created
        self._top = (
            b'data: {"id":'
            + dumps("chatcmpl-" + base_id(source_id))
            + b',"object":"chat.completion.chunk","created":'
            + str(self.created).encode()
            + b',"model":'
            + dumps(self.model)
            + b","
        )
        self._head = self._top + b'"choices":[{"index":0,"delta":'
        self._tail = b',"logprobs":null,"finish_reason":null}]}\n\n'
        self.out.append(self._head + b'{"role":"assistant","content":""}' + self._tail)

    def _delta(self, delta: bytes) -> None:
        if not self.started:
            self.start()
        self.out.append(self._head + delta + self._tail)

    def text(self, t: str) -> None:
        self._delta(b'{"content":' + dumps(t) + b"}")

    def reasoning(self, t: str) -> None:
        self._delta(b'{"reasoning_content":' + dumps(t) + b"}")

    def refusal(self, t: str) -> None:
        self._delta(b'{"refusal":' + dumps(t) + b"}")

    def tool_start(self, key: Any, call_id: str, name: str) -> None:
        index = self.tools[key] = len(self.tools)
        call = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        self._delta(b'{"tool_calls":[' + dumps(call) + b"]}")

    def tool_args(self, key: Any, delta: str) -> None:
        index = self.tools.get(key)
        if index is not None and delta:
            self._delta(
                b'{"tool_calls":[{"index":%d,"function":{"arguments":%b}}]}' % (index, dumps(delta))
            )

    def end(self) -> None:
        if not self.started:
            self.start()
        self.done = True
        finish = dumps(stops.to_chat(self.final_stop()))
        out = self.out
        out.append(self._head + b'{},"logprobs":null,"finish_reason":' + finish + b"}]}\n\n")
        if self.include_usage:
            u = dumps(usage.to_chat(self.usage or Usage()))
            out.append(self._top + b'"choices":[],"usage":' + u + b"}\n\n")
        out.append(b"data: [DONE]\n\n")

    def error(self, err: UpstreamError) -> None:
        self.done = True
        self.out.append(CHAT.stream_error(err.openai_type, err.message, err.code))


# ---------------------------------------------------------------- Anthropic Messages


def _event(name: bytes, obj: Any) -> bytes:
    return b"event: " + name + b"\ndata: " + dumps(obj) + b"\n\n"


_DELTA = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_STOP = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n'


class AnthropicWriter(Writer):
    """``message_start``, content blocks (``text``, ``thinking``, ``tool_use``) each between
    a ``content_block_start`` and a ``content_block_stop`` with consecutive indexes,
    ``message_delta`` (stop reason, usage), ``message_stop``."""

    __slots__ = ("_kind", "_next", "_open")

    def __init__(self, model: Any, include_usage: bool, created: int) -> None:
        super().__init__(model, include_usage, created)
        self._open = -1  # index of the open block
        self._kind = ""  # text | thinking | tool
        self._next = 0

    def start(self, source_id: Any = None, created: Any = None) -> None:
        if self.started:
            return
        self.started = True
        message = {
            "id": "msg_" + base_id(source_id),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage.to_anthropic(self.usage or Usage()),
        }
        self.out.append(_event(b"message_start", {"type": "message_start", "message": message}))

    def _close(self) -> None:
        if self._open >= 0:
            self.out.append(_STOP % self._open)
            self._open = -1
            self._kind = ""

    def _block(self, kind: str, block: dict[str, Any]) -> int:
        if not self.started:
            self.start()
        self._close()
        index = self._open = self._next
        self._next += 1
        self._kind = kind
        start = {"type": "content_block_start", "index": index, "content_block": block}
        self.out.append(_event(b"content_block_start", start))
        return index

    def text(self, t: str) -> None:
        if self._kind != "text":
            self._block("text", {"type": "text", "text": ""})
        self.out.append(
            _DELTA + b'%d,"delta":{"type":"text_delta","text":%b}}\n\n' % (self._open, dumps(t))
        )

    def reasoning(self, t: str) -> None:
        if self._kind != "thinking":
            self._block("thinking", {"type": "thinking", "thinking": "", "signature": ""})
        self.out.append(
            _DELTA
            + b'%d,"delta":{"type":"thinking_delta","thinking":%b}}\n\n' % (self._open, dumps(t))
        )

    def signature(self, s: str) -> None:
        if self._kind == "thinking" and s:
            self.out.append(
                _DELTA
                + b'%d,"delta":{"type":"signature_delta","signature":%b}}\n\n'
                % (self._open, dumps(s))
            )

    def tool_start(self, key: Any, call_id: str, name: str) -> None:
        block = {"type": "tool_use", "id": tool_id(call_id), "name": name, "input": {}}
        self.tools[key] = self._block("tool", block)

    def tool_args(self, key: Any, delta: str) -> None:
        # a delta for a call whose block was closed (OpenAI may interleave parallel calls'
        # deltas) still goes to that call's index: the SDKs accumulate input by index
        index = self.tools.get(key)
        if index is not None and delta:
            self.out.append(
                _DELTA
                + b'%d,"delta":{"type":"input_json_delta","partial_json":%b}}\n\n'
                % (index, dumps(delta))
            )

    def block_end(self) -> None:
        self._close()

    def ping(self) -> None:
        self.out.append(b'event: ping\ndata: {"type":"ping"}\n\n')

    def end(self) -> None:
        if not self.started:
            self.start()
        self._close()
        self.done = True
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": self.final_stop(), "stop_sequence": self.stop_sequence},
            "usage": usage.to_anthropic(self.usage or Usage()),
        }
        self.out.append(_event(b"message_delta", delta))
        self.out.append(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')

    def error(self, err: UpstreamError) -> None:
        self.done = True
        e = err.anthropic()
        self.out.append(MESSAGES.stream_error(e["type"], e["message"]))
