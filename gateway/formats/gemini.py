"""Google's Gemini API (``gemini``): ``generateContent`` as Google AI Studio and Vertex AI
serve it. ``contents`` of ``user`` and ``model`` turns, each a list of ``parts`` keyed by
their kind (``{"text"}``, ``{"inlineData"}``, ``{"functionCall"}``,
``{"functionResponse"}``; a part may carry ``"thought": true`` and a
``thoughtSignature``), a top-level ``systemInstruction``, the output cap in
``generationConfig.maxOutputTokens``; an answer's parts in ``candidates[0].content``, cut
with ``finishReason: MAX_TOKENS``; usage in ``usageMetadata`` (``promptTokenCount``,
``candidatesTokenCount``, ``thoughtsTokenCount``, ``cachedContentTokenCount``).

A stream is ``streamGenerateContent?alt=sse``: each SSE event's data is a whole
``GenerateContentResponse`` holding the next piece of the answer; the one with a
``finishReason`` ends it. There is no ``[DONE]``.

The gateway sends requests in it (translated, or its own summary request) and reads its
JSON answers, streams and errors through :mod:`gateway.translate`. Its errors are
Google's: ``{"error": {"code", "message", "status", "details"}}``. It has the rules of a
format clients call: how the client's stream is read and a resumed one spliced into it
(:mod:`gateway.formats.gemini_stream`, a mixin of the class), and a cut JSON answer's text
as a continuation reads it and its parts merged (:meth:`Gemini.text_answer`,
:meth:`Gemini.merge`); it has no client paths yet.

Reference: https://ai.google.dev/api/generate-content
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from gateway.formats.base import ErrorLike, Format
from gateway.formats.gemini_stream import GeminiStream
from gateway.formats.parts import as_dict, as_list, plain_text
from gateway.formats.usage import Usage, from_gemini

#: Google's canonical status name of an HTTP status, as its error bodies carry it.
STATUS_OF_HTTP = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
    529: "UNAVAILABLE",
}


def _parts(entry: Any) -> list[Any]:
    return as_list(entry.get("parts")) if isinstance(entry, Mapping) else []


def _role(entry: Any) -> str | None:
    value = entry.get("role") if isinstance(entry, Mapping) else None
    return value if isinstance(value, str) else None


def _call_keys(entry: Any, who: str, kind: str) -> list[str]:
    """The key of each ``kind`` part (``functionCall`` / ``functionResponse``) of a ``who``
    turn: its ``id``, else its function's name (Gemini's calls often have no id: a call
    and its response are then paired by name, in order)."""
    if _role(entry) != who:
        return []
    keys = []
    for p in _parts(entry):
        call = as_dict(p.get(kind)) if isinstance(p, Mapping) else {}
        key = call.get("id") or call.get("name")
        if isinstance(key, str) and key:
            keys.append(key)
    return keys


def candidate(response: Mapping[str, Any]) -> Mapping[str, Any]:
    """The first candidate of an answer or stream chunk (empty when there is none)."""
    candidates = response.get("candidates")
    return as_dict(candidates[0]) if isinstance(candidates, list) and candidates else {}


class Gemini(GeminiStream, Format):
    name = "gemini"
    provider_api = "gemini"
    paths = ()  # no client path yet (its stream rules are there)
    entries_key = "contents"
    fixed_keys = ("systemInstruction", "tools")
    output_cap = "maxOutputTokens"
    usage_key = "usageMetadata"
    answer_usage_key = "usageMetadata"

    def auth_headers(self, key: str | None) -> dict[str, str]:
        return {"x-goog-api-key": key} if key else {}

    def capped(self, request: Mapping[str, Any]) -> bool:
        return self.requested_output(request) is not None

    def requested_output(self, request: Mapping[str, Any]) -> int | None:
        value = as_dict(request.get("generationConfig")).get("maxOutputTokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def several_choices(self, request: Mapping[str, Any]) -> bool:
        n = as_dict(request.get("generationConfig")).get("candidateCount")
        return isinstance(n, int) and n > 1

    def text_turn(self, role: str, text: str) -> dict[str, Any]:
        return {"role": "model" if role == "assistant" else "user", "parts": [{"text": text}]}

    def assistant_text(self, entry: Any) -> str | None:
        if _role(entry) != "model":
            return None
        return "".join(p["text"] for p in _parts(entry) if _answer_text(p))

    def summary_request(
        self, model: str, instructions: str, prompt: str, max_tokens: int
    ) -> dict[str, Any]:
        """No ``model`` and no ``stream``: the URL names the model and the method."""
        return {
            "systemInstruction": {"parts": [{"text": instructions}]},
            "contents": [{"role": "user", "parts": [{"text": prompt}]}],
            "generationConfig": {"maxOutputTokens": max_tokens, "temperature": 0},
        }

    # ---- conversations -----------------------------------------------------------

    def opened_calls(self, entry: Any) -> list[str]:
        return _call_keys(entry, "model", "functionCall")

    def closed_calls(self, entry: Any) -> list[str]:
        return _call_keys(entry, "user", "functionResponse")

    def problems(self, items: Sequence[Any]) -> list[str]:
        """Roles other than ``user`` and ``model``, and calls not answered in the next
        turn (Gemini wants every call of a turn answered in the user turn after it)."""
        problems: list[str] = []
        if not items:
            return ["no contents"]
        for i, entry in enumerate(items):
            if _role(entry) not in ("user", "model"):
                problems.append(f"content {i}: role {_role(entry)!r}")
            nxt = items[i + 1] if i + 1 < len(items) else None
            answered = set(self.closed_calls(nxt))
            for call in sorted(set(self.opened_calls(entry)) - answered):
                problems.append(f"content {i}: functionCall {call!r} has no functionResponse")
            previous = set(self.opened_calls(items[i - 1])) if i else set()
            for call in sorted(set(self.closed_calls(entry)) - previous):
                problems.append(f"content {i}: functionResponse {call!r} has no functionCall")
        return problems

    def transcript_lines(self, entry: Any) -> list[str]:
        who = "assistant" if _role(entry) == "model" else "user"
        lines: list[str] = []
        for p in _parts(entry):
            if not isinstance(p, Mapping) or p.get("thought") is True:
                continue
            if isinstance(p.get("text"), str):
                lines.append(f"{who}: {p['text']}")
            elif "functionCall" in p:
                call = as_dict(p["functionCall"])
                arguments = json.dumps(call.get("args"), ensure_ascii=False, default=str)
                lines.append(f"assistant called {call.get('name')}({arguments})")
            elif "functionResponse" in p:
                response = as_dict(p["functionResponse"]).get("response")
                text = response if isinstance(response, str) else plain_text(_values(response))
                lines.append(f"tool result: {text}")
        return lines

    def snip_results(self, entry: Any, snip: Callable[[Any], Any]) -> Any:
        if _role(entry) != "user" or not isinstance(entry.get("parts"), list):
            return entry
        parts = []
        for p in entry["parts"]:
            if isinstance(p, Mapping) and isinstance(p.get("functionResponse"), Mapping):
                fr = p["functionResponse"]
                snipped = snip(orjson.dumps(fr.get("response")).decode())
                p = {**p, "functionResponse": {**fr, "response": {"output": snipped}}}
            parts.append(p)
        return {**entry, "parts": parts}

    # ---- answers -----------------------------------------------------------------

    def answer_text(self, response: Mapping[str, Any], sep: str = "") -> str:
        parts = as_list(as_dict(candidate(response).get("content")).get("parts"))
        return sep.join(p["text"] for p in parts if _answer_text(p))

    def cut_at_length(self, response: Mapping[str, Any]) -> bool:
        c = candidate(response)
        parts = as_list(as_dict(c.get("content")).get("parts"))
        calls = any(isinstance(p, Mapping) and "functionCall" in p for p in parts)
        return c.get("finishReason") == "MAX_TOKENS" and not calls

    def text_answer(
        self, text: str, *, id: Any, model: Any, created: Any, index: int, item_id: Any
    ) -> dict[str, Any]:
        """One candidate of one text part, no ``finishReason`` (``created``: Vertex's
        ``createTime``, when the stream had one)."""
        answer: dict[str, Any] = {
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": text}]}, "index": index}
            ],
            "modelVersion": model,
            "responseId": id,
        }
        if created is not None:
            answer["createTime"] = created
        return answer

    def merge(self, merged: dict[str, Any], parts: Sequence[Mapping[str, Any]], text: str) -> None:
        """The first candidate's text parts (not thoughts) become one, where the first was,
        holding ``text`` and the other fields they had (a ``thoughtSignature``); its other
        parts (thoughts) stay. The last part's ``finishReason`` (and ``finishMessage``)."""
        candidates = merged.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            merged["candidates"] = candidates = [{}]
        if not isinstance(candidates[0], dict):
            candidates[0] = {}
        c = candidates[0]
        if not isinstance(c.get("content"), dict):
            c["content"] = {"role": "model"}
        content = c["content"]
        given = as_list(content.get("parts"))
        joined: dict[str, Any] = {"text": text}
        kept: list[Any] = []
        placed = False
        for p in given:
            if not _answer_text(p):
                kept.append(p)
                continue
            if not placed:
                kept.append(joined)  # where the first text part was
                placed = True
            joined.update((k, v) for k, v in p.items() if k != "text")
        if not placed:
            kept.append(joined)
        content["parts"] = kept
        last = candidate(parts[-1])
        for key in ("finishReason", "finishMessage"):
            if key in last:
                c[key] = last[key]
            else:
                c.pop(key, None)

    # ---- streams (each event a GenerateContentResponse) --------------------------

    def event_cut(self, data: Any) -> bool:
        return bool(candidate(data).get("finishReason") == "MAX_TOKENS")

    def answer_usage(self, block: dict[str, Any]) -> Usage:
        return from_gemini(block)

    def event_usage(self, obj: dict[str, Any], so_far: Usage | None) -> Usage | None:
        """Each chunk's ``usageMetadata`` counts the whole answer so far: the last wins."""
        u = obj.get("usageMetadata")
        return from_gemini(u) if isinstance(u, dict) else None

    # ---- errors: Google's shape ----------------------------------------------------

    def error_body(self, err: ErrorLike) -> dict[str, object]:
        """``{"error": {"code", "message", "status"}}``, as Google's SDKs read it."""
        openai = as_dict(err.openai_body().get("error"))
        code = getattr(err, "status", 500)
        status = STATUS_OF_HTTP.get(code, "INTERNAL" if code >= 500 else "INVALID_ARGUMENT")
        return {"error": {"code": code, "message": openai.get("message", ""), "status": status}}

    def stream_error(
        self, etype: str, message: str, code: str | None = None, response_id: str = ""
    ) -> bytes:
        """``data: {"error": {...}}``: what Gemini sends when a stream fails after its start."""
        err = {"code": 500, "message": message, "status": code or "INTERNAL"}
        return b"data: " + orjson.dumps({"error": err}) + b"\n\n"


def _answer_text(part: Any) -> bool:
    """The part is the answer's text (a text part, not a thought)."""
    return (
        isinstance(part, Mapping) and isinstance(part.get("text"), str) and not part.get("thought")
    )


def _values(response: Any) -> Any:
    """The values of a ``functionResponse.response`` object (its ``output``, ``error``...)."""
    return list(response.values()) if isinstance(response, Mapping) else response


GEMINI = Gemini()
