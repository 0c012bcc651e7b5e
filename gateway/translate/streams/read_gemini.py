"""The Gemini stream reader (``streamGenerateContent?alt=sse``): one decoded chunk -> calls
on a :class:`~gateway.translate.streams.write.Writer`.

Each event's data is a ``GenerateContentResponse`` holding the next piece of the first
candidate's parts:

    text part              -> text (``"thought": true``: reasoning)
    functionCall part      -> a whole tool call (start, its arguments, its end); its id
                              carries the part's ``thoughtSignature``, as in a JSON answer
                              (:mod:`gateway.translate.gemini_answers`)
    finishReason           -> the stop; the stream is complete
    usageMetadata          -> usage (each chunk's counts the answer so far: the last wins)
    {"error": {...}}       -> an error (Google's shape)

The client's closing events go out with the chunk that carries the ``finishReason`` when
it has the usage too (Gemini's do), else with the next chunk that has usage or at the end
of the body. A finish reason that says the model failed (``MALFORMED_FUNCTION_CALL``...)
is an error: the stream failed mid-answer. Code execution parts and a text part's own
signature are dropped.

Reference: https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent
"""

from __future__ import annotations

from typing import Any

from gateway.translate import stops, usage
from gateway.translate.errors import from_google, generic
from gateway.translate.fields import args_text, is_text, name_of
from gateway.translate.ir import new_call_id, signed_id
from gateway.translate.streams.read import Obj, Reader
from gateway.translate.streams.write import Writer


class GeminiReader(Reader):
    """``GenerateContentResponse`` chunks: see the module docstring."""

    __slots__ = ("_calls", "_kind", "_usage")

    def __init__(self, w: Writer) -> None:
        super().__init__(w)
        self._calls = 0  # function calls seen (each its own tool call index)
        self._kind: str | None = None  # the open block: text | reasoning
        self._usage: Any = None  # the last usageMetadata, read when asked (:meth:`settle`)

    def feed(self, obj: Obj) -> None:
        w = self.w
        err = obj.get("error")
        if err is not None:
            w.error(from_google(err) if isinstance(err, dict) else generic(500))
            return
        if not w.started:
            w.start(obj.get("responseId"))
        candidates = obj.get("candidates")
        reason = None
        if candidates:
            c = candidates[0]
            content = c.get("content")
            if content:
                for p in content.get("parts") or ():
                    self._part(p)
            reason = c.get("finishReason")
        u = obj.get("usageMetadata")
        if u:
            self._usage = u  # each chunk's counts the answer so far: read at the end
        if reason is not None and not self.final:
            self._finish(reason)
        if self.final and u and not w.done:
            self.settle()
            w.end()
        elif not candidates and (obj.get("promptFeedback") or {}).get("blockReason"):
            w.stop = "refusal"  # the prompt was blocked: an empty answer
            self.final = True
            w.end()

    def settle(self) -> None:
        u, self._usage = self._usage, None
        if type(u) is dict:
            self.w.usage = usage.from_gemini(u)

    def _part(self, p: Any) -> None:
        w = self.w
        call = p.get("functionCall")
        if call is not None:
            self._close()
            key = self._calls
            self._calls += 1
            call_id = name_of(call.get("id")) or new_call_id()
            signature = p.get("thoughtSignature")
            if is_text(signature):
                call_id = signed_id(call_id, signature)
            w.tool_start(key, call_id, name_of(call.get("name")))
            w.tool_args(key, args_text(call.get("args")) or "{}")
            w.block_end()
            return
        t = p.get("text")
        if is_text(t):
            kind = "reasoning" if p.get("thought") is True else "text"
            if kind != self._kind:
                self._close()
                self._kind = kind
            if kind == "text":
                w.text(t)
            else:
                w.reasoning(t)

    def _close(self) -> None:
        if self._kind is not None:
            self.w.block_end()
            self._kind = None

    def _finish(self, reason: Any) -> None:
        w = self.w
        if reason in stops.GEMINI_FAILED:
            message = f"the model's answer failed ({reason})"
            w.error(from_google({"code": 500, "message": message, "status": "INTERNAL"}))
            return
        self._close()
        w.stop = stops.from_gemini(reason)
        self.final = True


__all__ = ["GeminiReader"]
