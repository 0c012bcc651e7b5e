"""The Gemini stream writer: neutral stream calls -> ``streamGenerateContent?alt=sse``
events, each ``data: <GenerateContentResponse>`` holding the next piece of the answer in
its one candidate (as Google's SDKs read them: ``google-genai``, ``@google/genai``)::

    start       nothing: a Gemini stream has no opening event; the first piece's chunk
                starts it
    text        one event per delta, one part {"text"}:
                data: {"candidates":[{"content":{"parts":[{"text":"Hel"}],"role":"model"},
                "index":0}],"modelVersion":<model>,"responseId":<id>}
    reasoning   the same with the part {"text", "thought": true}
    signature   dropped (an Anthropic thinking signature has no place in Gemini's parts;
                Gemini's own signatures ride on calls, below)
    refusal     text (the stop says SAFETY)
    tool call   Gemini sends a call whole: the argument deltas are kept, and one event
                holds the part {"functionCall": {"id", "name", "args"}} when the source
                closes the call's block (calls still open then all go in one event), or
                at the end. The id's thought signature (gateway.translate.ir.split_id)
                becomes the part's ``thoughtSignature`` and the plain id the call's
                ``id``; arguments that are not a JSON object are ``{}``
    end         a last event: the part {"text": ""} (as Gemini's own last chunk often
                is: a client reading ``parts[0]`` finds it), ``finishReason``
                (stops.to_gemini: ``STOP`` for an answer that calls tools, ``MAX_TOKENS``,
                ``SAFETY``) and ``usageMetadata`` (usage.to_gemini; zeros when the source
                said none)
    error       data: {"error": {"code", "message", "status"}} (Google's shape: the
                status name of the error's kind, its HTTP code; google-genai raises it
                as ``ClientError`` / ``ServerError``)
    keepalive   nothing: an SSE comment line breaks google-genai (its line reader takes
                a line that is not ``data:`` for raw JSON and fails to parse ``: ping``)

Every event carries ``modelVersion`` (the public model name) and ``responseId`` (the
source's id without its prefix, :func:`~.write.base_id`); ``usageMetadata`` is only in
the last (the counts are known at the end). A call delta that arrives after its call was
sent is dropped (no source sends one after closing the call's block; chat closes none,
so its calls all go at the end). A thought signature that is not base64 (no Gemini
signature is) is left out: the SDKs read the field as bytes, and would refuse the chunk.

Reference: https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from gateway.formats.gemini import STATUS_OF_HTTP
from gateway.formats.usage import Usage
from gateway.translate import stops, usage
from gateway.translate.errors import ANTHROPIC_OF_GOOGLE, UpstreamError
from gateway.translate.ir import Dropped, ToolCall, split_id
from gateway.translate.requests.common import call_input
from gateway.translate.streams.write import Writer, base_id, dumps

_PARTS = b'data: {"candidates":[{"content":{"parts":'
_TEXT = _PARTS + b'[{"text":'
_FINAL = _PARTS + b'[{"text":""}],"role":"model"},"finishReason":'

_BASE64 = re.compile(r"[A-Za-z0-9+/]*|[A-Za-z0-9_-]*")
#: Google's status name of an error kind (the first of ANTHROPIC_OF_GOOGLE's for it), and
#: the HTTP code of a status name (the first of STATUS_OF_HTTP's).
_STATUS_OF_KIND = {kind: name for name, kind in reversed(ANTHROPIC_OF_GOOGLE.items())}
_STATUS_OF_KIND["billing_error"] = "PERMISSION_DENIED"  # Google: "requires billing to be enabled"
_STATUS_OF_KIND["request_too_large"] = STATUS_OF_HTTP[413]
_HTTP_OF_STATUS = {name: code for code, name in reversed(STATUS_OF_HTTP.items())}
_GOOGLE_STATUSES = frozenset(ANTHROPIC_OF_GOOGLE) | frozenset(_HTTP_OF_STATUS)


def google_error(err: UpstreamError) -> dict[str, Any]:
    """``err`` as Google's error object: ``{"code", "message", "status"}``. A status name
    read from Google (``FAILED_PRECONDITION``, ``ABORTED``...: the error's code) is kept;
    else the kind's. The HTTP code is the status's, else the kind's."""
    by_kind = _STATUS_OF_KIND.get(err.anthropic_type, "INTERNAL")
    status = err.code if err.code in _GOOGLE_STATUSES else by_kind
    code = _HTTP_OF_STATUS.get(status) or _HTTP_OF_STATUS[by_kind]
    return {"code": code, "message": err.message, "status": status}


def is_base64(value: str) -> bool:
    """Base64 as Google's SDKs decode a bytes field: one alphabet or the other, padded or
    not (not past a whole quantum), no stray bits in its last character."""
    body = value.rstrip("=")
    if not _BASE64.fullmatch(body) or len(value) - len(body) > -len(body) % 4:
        return False
    std = body.replace("-", "+").replace("_", "/")
    try:
        raw = base64.b64decode(std + "=" * (-len(std) % 4), validate=True)
    except binascii.Error:
        return False
    return base64.b64encode(raw).rstrip(b"=").decode() == std


def call_part(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A ``functionCall`` part: the id's thought signature as ``thoughtSignature``."""
    own_id, signature = split_id(call_id)
    args = call_input(ToolCall(own_id, name, arguments), Dropped())
    part: dict[str, Any] = {"functionCall": {"id": own_id, "name": name, "args": args}}
    if signature and is_base64(signature):
        part["thoughtSignature"] = signature
    return part


class GeminiWriter(Writer):
    """``GenerateContentResponse`` chunks: see the module docstring."""

    __slots__ = ("_after", "_calls", "_ids", "_tail")

    def __init__(self, model: Any, include_usage: bool, created: int) -> None:
        super().__init__(model, include_usage, created)
        self._calls: dict[Any, tuple[str, str, list[str]]] = {}  # unsent: id, name, args
        self._ids = b""  # ,"modelVersion":...,"responseId":...}\n\n
        self._after = b""  # what follows a chunk's parts
        self._tail = b""  # what follows a text part's text

    def start(self, source_id: Any = None, created: Any = None) -> None:
        if self.started:
            return
        self.started = True
        rid = base_id(source_id)
        self._ids = b',"modelVersion":%b,"responseId":%b}\n\n' % (dumps(self.model), dumps(rid))
        self._after = b',"role":"model"},"index":0}]' + self._ids
        self._tail = b"}]" + self._after

    def text(self, t: str) -> None:
        if not self.started:
            self.start()
        if t:
            self.out.append(_TEXT + dumps(t) + self._tail)

    def reasoning(self, t: str) -> None:
        if not self.started:
            self.start()
        if t:
            self.out.append(_TEXT + dumps(t) + b',"thought":true' + self._tail)

    def tool_start(self, key: Any, call_id: str, name: str) -> None:
        if not self.started:
            self.start()
        self.tools[key] = len(self.tools)
        self._calls[key] = (call_id, name, [])

    def tool_args(self, key: Any, delta: str) -> None:
        call = self._calls.get(key)
        if call is not None and delta:
            call[2].append(delta)

    def block_end(self) -> None:
        if self._calls:
            self._send_calls()

    def _send_calls(self) -> None:
        parts = [call_part(i, name, "".join(args)) for i, name, args in self._calls.values()]
        self._calls.clear()
        self.out.append(_PARTS + dumps(parts) + self._after)

    def ping(self) -> None:
        """Nothing: no keepalive form every Gemini SDK reads (module docstring)."""

    def end(self) -> None:
        if not self.started:
            self.start()
        if self._calls:
            self._send_calls()
        self.done = True
        reason = dumps(stops.to_gemini(self.final_stop()))
        counts = dumps(usage.to_gemini(self.usage or Usage()))
        self.out.append(_FINAL + reason + b',"index":0}],"usageMetadata":' + counts + self._ids)

    def error(self, err: UpstreamError) -> None:
        self.done = True
        self.out.append(b"data: " + dumps({"error": google_error(err)}) + b"\n\n")


__all__ = ["GeminiWriter", "call_part", "google_error", "is_base64"]
