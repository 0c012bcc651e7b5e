"""A Gemini JSON answer (``GenerateContentResponse``) <-> the neutral :class:`Answer`. The
reader is what the gateway uses (the answer is then written for the client by
:mod:`gateway.translate.answers`); the writer gives a Gemini client its answer
(:func:`gateway.translate.convert.answer`) and serves who plays a Gemini provider
(``simulate``'s summary call, the tests).

Only the first candidate is read. Its parts: ``text`` is kept, a ``"thought": true``
text is reasoning (no signature), a ``functionCall`` is a tool call whose id carries the
part's ``thoughtSignature`` (:func:`~gateway.translate.ir.signed_id`: the client hands it
back with the call, and the request writer returns it to Gemini). A call without an id
gets one (``call_<random>``). Code execution parts, inline data and a text part's own
signature are not kept. ``finishReason`` through
:func:`gateway.translate.stops.from_gemini`; an answer that calls tools stops with
``tool_use``. A reason that says the model failed (``MALFORMED_FUNCTION_CALL``...:
:data:`~gateway.translate.stops.GEMINI_FAILED`) is no answer: :class:`Malformed`, retried
like a server error. A prompt Gemini blocked (no candidate, ``promptFeedback.blockReason``)
is an empty answer stopped for ``refusal``. ``usageMetadata`` through
:func:`gateway.translate.usage.from_gemini`.

Written: one candidate (``index`` 0) of ``model`` parts (text, ``"thought": true``
reasoning, a refusal as text, each call as
:func:`~gateway.translate.streams.write_gemini.call_part`: its id's signature as the
part's ``thoughtSignature`` when it is base64, arguments that are not a JSON object as
``{}``), ``finishReason`` (:func:`gateway.translate.stops.to_gemini`: ``STOP`` for an
answer that calls tools), ``usageMetadata`` (zeros when the source said none),
``modelVersion`` (the public model name) and ``responseId`` (the source's id without its
prefix, as in a stream). What Google's ``google-genai`` SDK validates
(``GenerateContentResponse``): its ``text``, ``function_calls`` with their
``thought_signature``, ``usage_metadata``.

Reference: https://ai.google.dev/api/generate-content#generatecontentresponse
"""

from __future__ import annotations

from typing import Any

from gateway.errors import Malformed
from gateway.formats.usage import Usage
from gateway.translate import stops, usage
from gateway.translate.fields import id_at, input_at, object_at, objects_at, text_at
from gateway.translate.ir import (
    Answer,
    Part,
    Reasoning,
    Refusal,
    Text,
    ToolCall,
    new_call_id,
    signed_id,
)
from gateway.translate.streams.write import base_id
from gateway.translate.streams.write_gemini import call_part


def read_call(part: dict[str, Any], where: str) -> ToolCall:
    """A ``functionCall`` part as a tool call, its signature in its id."""
    call = object_at(part["functionCall"], where + ".functionCall")
    call_id = id_at(call.get("id"), where + ".functionCall.id", "") or new_call_id()
    signature = text_at(part.get("thoughtSignature"), where + ".thoughtSignature")
    return ToolCall(
        signed_id(call_id, signature) if signature else call_id,
        text_at(call.get("name"), where + ".functionCall.name") or "",
        input_at(call.get("args"), where + ".functionCall.args"),
    )


def read_gemini(body: dict[str, Any]) -> Answer:
    candidates = objects_at(body.get("candidates"), "candidates")
    u = body.get("usageMetadata")
    counts = usage.from_gemini(u) if type(u) is dict else None
    answer_id = base_id(text_at(body.get("responseId"), "responseId"))
    if not candidates:
        feedback = object_at(body.get("promptFeedback"), "promptFeedback")
        if feedback.get("blockReason") is None:
            raise Malformed("the provider's answer has no candidate")
        return Answer(answer_id, None, [], "refusal", counts)
    c = candidates[0]
    reason = c.get("finishReason")
    if reason in stops.GEMINI_FAILED:
        raise Malformed(f"the model's answer failed ({reason})")
    content = object_at(c.get("content"), "candidates[0].content")
    parts: list[Part] = []
    calls = False
    for p in objects_at(content.get("parts"), "candidates[0].content.parts"):
        if "functionCall" in p:
            parts.append(read_call(p, "candidates[0].content.parts[]"))
            calls = True
        elif (text := text_at(p.get("text"), "parts[].text")) is not None:
            if p.get("thought") is True:
                parts.append(Reasoning(text))
            elif text:
                parts.append(Text(text))
    stop = stops.from_gemini(reason)
    return Answer(answer_id, None, parts, "tool_use" if calls and stop == "end_turn" else stop,
                  counts)  # fmt: skip


def write_gemini(a: Answer) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for p in a.parts:
        if isinstance(p, Text | Refusal):
            parts.append({"text": p.text})
        elif isinstance(p, Reasoning):
            parts.append({"text": p.text, "thought": True})
        elif isinstance(p, ToolCall):
            parts.append(call_part(p.id, p.name, p.arguments))
    candidate = {
        "content": {"role": "model", "parts": parts},
        "finishReason": stops.to_gemini(a.stop),
        "index": 0,
    }
    out: dict[str, Any] = {"candidates": [candidate]}
    out["usageMetadata"] = usage.to_gemini(a.usage or Usage())
    if a.model is not None:
        out["modelVersion"] = a.model
    out["responseId"] = base_id(a.id)
    return out


__all__ = ["read_call", "read_gemini", "write_gemini"]
