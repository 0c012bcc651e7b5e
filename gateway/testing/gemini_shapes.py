# long: one wire format, read (the request), checked (what Gemini refuses) and written
"""Google's Gemini API (``generateContent``) for the fake Gemini and the fake Vertex: the
request read as the fake provider's :class:`~gateway.testing.conversation.Conversation`,
what Gemini refuses in it (:func:`problem`, :func:`signature_problem`: Google's own 400
bodies), and the answer written as Gemini's JSON body and stream chunks.

A request body: ``contents`` (each a ``role``, ``user`` or ``model``, and ``parts``:
``{"text"}`` with an optional ``"thought": true``, ``{"inlineData"}``, ``{"fileData"}``,
``{"functionCall": {"name", "args"}}``, ``{"functionResponse": {"name", "response"}}``, any
of them with a ``thoughtSignature``), ``systemInstruction`` (``parts``), ``tools``
(``functionDeclarations`` of ``{name, description, parameters | parametersJsonSchema}``),
``toolConfig.functionCallingConfig`` (``mode``: AUTO, ANY, NONE, VALIDATED;
``allowedFunctionNames``), ``generationConfig`` (``maxOutputTokens``, ``thinkingConfig``,
``responseMimeType``, ``responseSchema`` | ``responseJsonSchema``, ...),
``safetySettings``. The model is in the URL. Google's JSON parser takes every field in
camelCase or in snake_case, and so does this module.

Reference: https://ai.google.dev/api/generate-content
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from collections.abc import Collection, Iterator
from typing import Any

from gateway.testing.answer import FakeAnswer, FakeEvent, dump, split_pieces
from gateway.testing.conversation import (
    Conversation,
    ToolSpec,
    Turn,
    example_arguments,
    tokens_of,
)
from gateway.testing.error_bodies import google_error

#: The value Google documents for a client to pass Gemini 3's signature check with a
#: call it did not get from Gemini (https://ai.google.dev/gemini-api/docs/thought-signatures).
SKIP_SIGNATURE = "skip_thought_signature_validator"
#: Gemini's finish reasons for the fake provider's (OpenAI's); others are sent as given.
GEMINI_FINISH = {
    "stop": "STOP",
    "length": "MAX_TOKENS",
    "tool_calls": "STOP",
    "content_filter": "SAFETY",
}
_REQUEST_FIELDS = (
    "contents", "systemInstruction", "tools", "toolConfig", "safetySettings",
    "generationConfig", "cachedContent", "labels", "serviceTier", "store", "modelArmorConfig",
)  # fmt: skip
#: What countTokens takes: AI Studio's two forms, Vertex's fields.
_COUNT_FIELDS = ("contents", "generateContentRequest")
_VERTEX_COUNT_FIELDS = (
    "contents", "systemInstruction", "tools", "generationConfig", "model", "instances",
)  # fmt: skip
#: The fields of Gemini's ``Schema`` (an OpenAPI 3.0 subset): ``parameters`` and
#: ``responseSchema`` take these only (https://ai.google.dev/api/caching#Schema).
_SCHEMA_FIELDS = (
    "type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems",
    "properties", "required", "minProperties", "maxProperties", "minLength", "maxLength",
    "pattern", "example", "anyOf", "propertyOrdering", "default", "items", "minimum",
    "maximum",
)  # fmt: skip
_ROLE = "Please use a valid role: user, model."
_NO_CONTENTS = "* GenerateContentRequest.contents: contents is not specified\n"
_NO_PARTS = "* GenerateContentRequest.contents[{}].parts: contents.parts must not be empty.\n"
_MISSING_SIGNATURE = (
    "Function call is missing a thought_signature in functionCall parts. This is required "
    "for tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:{}` , position {}. Please "
    "refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _spellings(names: Collection[str]) -> frozenset[str]:
    return frozenset(names) | {_snake(n) for n in names}


REQUEST_FIELDS = _spellings(_REQUEST_FIELDS)
SCHEMA_FIELDS = _spellings(_SCHEMA_FIELDS)


def field(obj: Any, name: str) -> Any:
    """``obj``'s field ``name`` (camelCase), or its snake_case spelling; ``None``: absent."""
    if not isinstance(obj, dict):
        return None
    return obj[name] if name in obj else obj.get(_snake(name))


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    return (v for v in value if isinstance(v, dict)) if isinstance(value, list) else iter(())


# --- what Gemini refuses -----------------------------------------------------------------


def _unknown(name: str, at: str) -> dict[str, str]:
    """A field violation of Google's JSON parser: ``name`` is no field at ``at``. Real
    bodies: https://github.com/mnfst/llm-gateway/issues/1858 (a schema keyword),
    https://github.com/openswarm-ai/openswarm/issues/24 (``$schema``, ``const``, ...)."""
    where = f" at '{at}'" if at else ""
    violation = {"description": f'Invalid JSON payload received. Unknown name "{name}"{where}: '
                                "Cannot find field."}  # fmt: skip
    return {"field": at, **violation} if at else violation


def _schema_violations(schema: Any, at: str) -> list[dict[str, str]]:
    """Every keyword of an OpenAPI-subset ``schema`` that Gemini's ``Schema`` lacks, in the
    order Google's parser meets them (depth first, in document order), with its path
    (``properties[K].value``: the K-th property, ``items``, ``any_of[I]``)."""
    if not isinstance(schema, dict):
        return []
    out: list[dict[str, str]] = []
    for key, value in schema.items():
        if key not in SCHEMA_FIELDS:
            out.append(_unknown(key, at))
        elif key == "properties" and isinstance(value, dict):
            for k, sub in enumerate(value.values()):
                out.extend(_schema_violations(sub, f"{at}.properties[{k}].value"))
        elif key == "items":
            out.extend(_schema_violations(value, f"{at}.items"))
        elif key in ("anyOf", "any_of") and isinstance(value, list):
            for i, sub in enumerate(value):
                out.extend(_schema_violations(sub, f"{at}.any_of[{i}]"))
    return out


def _field_violations(body: dict[str, Any], allowed: frozenset[str]) -> list[dict[str, str]]:
    """Unknown top-level names, then unknown schema keywords of the tools' ``parameters``
    and of ``generationConfig.responseSchema`` (``parametersJsonSchema`` and
    ``responseJsonSchema`` take any JSON Schema)."""
    out = [_unknown(key, "") for key in body if key not in allowed]
    for i, tool in enumerate(_dicts(field(body, "tools"))):
        for j, decl in enumerate(_dicts(field(tool, "functionDeclarations"))):
            params = field(decl, "parameters")
            at = f"tools[{i}].function_declarations[{j}].parameters"
            out.extend(_schema_violations(params, at))
    schema = field(field(body, "generationConfig"), "responseSchema")
    out.extend(_schema_violations(schema, "generation_config.response_schema"))
    return out


def _contents_problem(body: dict[str, Any], vertex: bool) -> str | None:
    """What Gemini says of the ``contents``: missing, a turn without parts, a role other
    than ``user`` or ``model`` (on Vertex a turn must name its role; AI Studio takes a
    turn without one as the user's). Real bodies: https://github.com/vercel/ai/issues/3775,
    https://github.com/langchain-ai/langchain-google/issues/691; the role's wording is
    quoted by clients that met it on both (no public body with its URL was found)."""
    contents = field(body, "contents")
    if not isinstance(contents, list) or not contents:
        return _NO_CONTENTS
    for i, content in enumerate(contents):
        if not isinstance(content, dict):
            return _NO_PARTS.format(i)
        role = content.get("role")
        if (role is None and vertex) or (role is not None and role not in ("user", "model")):
            return _ROLE
        if not field(content, "parts"):
            return _NO_PARTS.format(i)
    return None


def problem(body: Any, *, vertex: bool = False, counting: bool = False) -> dict[str, Any] | None:
    """What Gemini answers to a ``generateContent`` body (``counting``: a ``countTokens``
    body) it refuses, as Google's 400 body; ``None``: it is sound. ``vertex``: Vertex's
    rules. A body with ``model`` or ``stream`` is refused as any unknown field is."""
    if not isinstance(body, dict):
        return google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
    allowed = REQUEST_FIELDS
    inner = body
    if counting:
        allowed = _spellings(_VERTEX_COUNT_FIELDS if vertex else _COUNT_FIELDS)
        wrapped = field(body, "generateContentRequest")
        inner = wrapped if isinstance(wrapped, dict) and not vertex else body
    violations = _field_violations(body, allowed)
    if inner is not body:
        violations += _field_violations(inner, REQUEST_FIELDS | {"model"})
    if violations:
        message = "\n".join(v["description"] for v in violations)
        details = [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": violations}]  # fmt: skip
        return google_error(400, "INVALID_ARGUMENT", message, details)
    contents = _contents_problem(inner, vertex)
    return google_error(400, "INVALID_ARGUMENT", contents) if contents else None


def counted_body(body: dict[str, Any]) -> dict[str, Any]:
    """The request a ``countTokens`` body counts: its ``generateContentRequest``, or itself."""
    wrapped = field(body, "generateContentRequest")
    return wrapped if isinstance(wrapped, dict) else body


def decode_signature(value: Any) -> bytes | None:
    """A ``thoughtSignature`` as bytes (base64, standard or URL-safe: the Python SDK sends
    the latter); ``None``: not base64."""
    if not isinstance(value, str):
        return None
    text = value.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def signature_problem(contents: Any, minted: Collection[bytes]) -> str | None:
    """What Gemini 3 says of ``contents`` whose current turn holds a function call without
    the signature Gemini gave it, or ``None``.

    As https://ai.google.dev/gemini-api/docs/thought-signatures describes it: the current
    turn starts at the last ``user`` content holding something other than function
    responses; in each ``model`` content after it, the first ``functionCall`` part must
    carry a ``thoughtSignature`` (the later calls of a parallel batch carry none).
    :data:`SKIP_SIGNATURE` passes. Missing: "Function call is missing a thought_signature
    ..." (https://github.com/google-gemini/gemini-cli/issues/26682; ``position``: the
    content's place, from 1); one ``minted`` does not hold: "Corrupted thought signature."
    (https://github.com/google-gemini/gemini-cli/issues/13467).
    """
    turns = list(contents) if isinstance(contents, list) else []
    start = 0
    for i in range(len(turns) - 1, -1, -1):
        content = turns[i] if isinstance(turns[i], dict) else {}
        parts = list(_dicts(field(content, "parts")))
        if content.get("role", "user") == "user" and any(
            field(p, "functionResponse") is None for p in parts
        ):
            start = i
            break
    for i, content in enumerate(turns[start:], start):
        if not isinstance(content, dict) or content.get("role") != "model":
            continue
        call = next((p for p in _dicts(field(content, "parts")) if field(p, "functionCall")), None)
        if call is None:
            continue
        signature = field(call, "thoughtSignature")
        if signature is None:
            return _MISSING_SIGNATURE.format(field(call, "functionCall").get("name"), i + 1)
        raw = decode_signature(signature)
        if signature == SKIP_SIGNATURE or raw == SKIP_SIGNATURE.encode():
            continue
        if raw not in minted:
            return "Corrupted thought signature."
    return None


# --- the request read ----------------------------------------------------------------------


def _text(parts: Any) -> str:
    return "".join(p["text"] for p in _dicts(parts) if isinstance(p.get("text"), str))


def _content_turns(content: dict[str, Any]) -> Iterator[Turn]:
    """The turns of one content: its text (thoughts left out, as Gemini does), each
    function call (its arguments) and each function response (its JSON)."""
    role = "assistant" if content.get("role") == "model" else "user"
    said: list[str] = []
    parts = list(_dicts(field(content, "parts")))
    for part in parts:
        call, result = field(part, "functionCall"), field(part, "functionResponse")
        if isinstance(part.get("text"), str) and not part.get("thought"):
            said.append(part["text"])
        elif isinstance(call, dict) or isinstance(result, dict):
            if said:
                yield Turn(role, "".join(said))
                said = []
            if isinstance(call, dict):
                yield Turn("assistant", json.dumps(call.get("args") or {}), True)
            else:
                yield Turn("tool", json.dumps(field(result, "response") or {}, ensure_ascii=False))
    if said or not parts:
        yield Turn(role, "".join(said))


def _lowered(schema: Any) -> Any:
    """An OpenAPI-subset schema with JSON Schema's lower-case ``type`` names."""
    if isinstance(schema, list):
        return [_lowered(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _lowered(v) for k, v in schema.items()}
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].lower()
    return out


def _tools(body: dict[str, Any]) -> list[ToolSpec]:
    specs = []
    for tool in _dicts(field(body, "tools")):
        for decl in _dicts(field(tool, "functionDeclarations")):
            schema = field(decl, "parametersJsonSchema") or field(decl, "parameters") or {}
            if isinstance(decl.get("name"), str):
                specs.append(ToolSpec(decl["name"], _lowered(schema)))
    return specs


def _tool_choice(body: dict[str, Any]) -> str | None:
    """AUTO and VALIDATED: None; NONE: ``none``; ANY: the one allowed function, else
    ``required``."""
    config = field(field(body, "toolConfig"), "functionCallingConfig")
    mode = str(field(config, "mode") or "AUTO").upper()
    if mode == "NONE":
        return "none"
    if mode != "ANY":
        return None
    allowed = field(config, "allowedFunctionNames")
    return allowed[0] if isinstance(allowed, list) and allowed else "required"


def parse_gemini(body: dict[str, Any], *, stream: bool = False) -> Conversation:
    """A Gemini body (sound by :func:`problem`) as the fake provider's conversation."""
    turns: list[Turn] = []
    system = _text(field(field(body, "systemInstruction"), "parts"))
    if system:
        turns.append(Turn("system", system))
    for content in _dicts(field(body, "contents")):
        turns.extend(_content_turns(content))
    limit = field(field(body, "generationConfig"), "maxOutputTokens")
    return Conversation(
        turns=turns,
        tools=_tools(body),
        tool_choice=_tool_choice(body),
        max_tokens=limit if isinstance(limit, int) and not isinstance(limit, bool) else None,
        stream=stream,
    )


def wants_thoughts(body: dict[str, Any]) -> bool:
    """The request asks for thought summaries (``thinkingConfig.includeThoughts``)."""
    thinking = field(field(body, "generationConfig"), "thinkingConfig")
    return field(thinking, "includeThoughts") is True


def structured_reply(body: dict[str, Any]) -> str | None:
    """The JSON text a request for JSON (``responseMimeType: application/json`` with a
    ``responseJsonSchema`` or ``responseSchema``) gets: an object made from the schema's
    properties, as tool arguments are; ``None``: the request wants text."""
    config = field(body, "generationConfig")
    if field(config, "responseMimeType") != "application/json":
        return None
    schema = field(config, "responseJsonSchema") or field(config, "responseSchema")
    if not isinstance(schema, dict):
        return None
    return json.dumps(example_arguments(ToolSpec("response", _lowered(schema))))


def thought_text(model: str) -> str:
    """The thought summary the fake model gives before its answer."""
    return f"**Answering the request**\n\nI will give the fake reply of {model}."


# --- the answer written ----------------------------------------------------------------------


def _usage(
    a: FakeAnswer, thoughts: int, candidates: int | None = None, vertex: bool = False
) -> dict[str, Any]:
    """``usageMetadata``: the prompt (its cached part in ``cachedContentTokenCount``), the
    candidates' tokens (``candidates``: so far), the thoughts' and their total."""
    said = a.completion_tokens if candidates is None else candidates
    usage: dict[str, Any] = {
        "promptTokenCount": a.prompt_tokens,
        "candidatesTokenCount": said,
        "totalTokenCount": a.prompt_tokens + said + thoughts,
    }
    if a.cache_read:
        usage["cachedContentTokenCount"] = a.cache_read
    usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": a.prompt_tokens}]
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    if vertex:
        usage["trafficType"] = "ON_DEMAND"
    return usage


def _candidate(parts: list[dict[str, Any]], finish: str | None, vertex: bool) -> dict[str, Any]:
    """A candidate: its content (none without parts, as a blocked answer has none), its
    finish reason (a SAFETY one with the rating that blocked it), AI Studio's ``index``."""
    candidate: dict[str, Any] = {}
    if parts:
        candidate["content"] = {"parts": parts, "role": "model"}
    if finish is not None:
        candidate["finishReason"] = finish
        if finish == "SAFETY":
            rating = {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH",
                      "blocked": True}  # fmt: skip
            candidate["safetyRatings"] = [rating]
    if not vertex:
        candidate["index"] = 0
    return candidate


def _response(
    a: FakeAnswer, candidate: dict[str, Any], usage: dict[str, Any], vertex: bool
) -> dict[str, Any]:
    out = {"candidates": [candidate], "usageMetadata": usage, "modelVersion": a.model}
    if vertex:
        created = dt.datetime.fromtimestamp(a.created, dt.UTC)
        out["createTime"] = created.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    out["responseId"] = a.id
    return out


def _answer_parts(a: FakeAnswer, signature: str | None) -> list[dict[str, Any]]:
    """The answer's part: its function call (with the signature), or its text (with the
    signature on it: Gemini 3 signs a text answer's last part); none for no text."""
    if a.tool_call is not None:
        call = {"name": a.tool_call.name, "args": json.loads(a.tool_call.arguments)}
        part: dict[str, Any] = {"functionCall": call}
    elif a.text or signature:
        part = {"text": a.text}
    else:
        return []
    if signature is not None:
        part["thoughtSignature"] = signature
    return [part]


def gemini_finish(a: FakeAnswer) -> str:
    return GEMINI_FINISH.get(a.finish, a.finish)


def gemini_json(
    a: FakeAnswer, *, thought: str | None = None, signature: str | None = None,
    vertex: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The ``generateContent`` answer: one candidate (a thought part first when
    ``thought``), its finish reason, the usage (``thoughtsTokenCount`` for the thought)."""
    parts = [{"text": thought, "thought": True}] if thought else []
    parts += _answer_parts(a, signature)
    thoughts = tokens_of(thought) if thought else 0
    candidate = _candidate(parts, gemini_finish(a), vertex)
    return _response(a, candidate, _usage(a, thoughts, vertex=vertex), vertex)


def gemini_chunks(
    a: FakeAnswer, *, thought: str | None = None, signature: str | None = None,
    vertex: bool = False,
) -> list[FakeEvent]:  # fmt: skip
    """The ``streamGenerateContent`` chunks, each a whole ``GenerateContentResponse``: the
    thought, the text in ``a.chunks`` pieces (or the function call whole, with its
    signature), each a content delta with the usage so far (on Vertex only the traffic
    type); then the chunk that finishes (``done``): an empty text part (carrying a text
    answer's signature, as Gemini 3 sends it), ``finishReason`` and the final usage."""
    thoughts = tokens_of(thought) if thought else 0

    def chunk(parts: list[dict[str, Any]], said: int) -> FakeEvent:
        usage = {"trafficType": "ON_DEMAND"} if vertex else _usage(a, thoughts, said)
        return FakeEvent(dump(_response(a, _candidate(parts, None, vertex), usage, vertex)),
                         delta=True)  # fmt: skip

    events = [chunk([{"text": thought, "thought": True}], 0)] if thought else []
    if a.tool_call is not None:
        events.append(chunk(_answer_parts(a, signature), a.completion_tokens))
        signature = None
    said = ""
    for piece in split_pieces(a.text, a.chunks) if a.tool_call is None else []:
        said += piece
        events.append(chunk([{"text": piece}], tokens_of(said)))
    last: dict[str, Any] = {"text": ""}
    if signature is not None:
        last["thoughtSignature"] = signature
    final = _candidate([last], gemini_finish(a), vertex)
    events.append(FakeEvent(dump(_response(a, final, _usage(a, thoughts, vertex=vertex), vertex)),
                            done=True))  # fmt: skip
    return events


def models_json(names: list[str], windows: dict[str, int]) -> dict[str, Any]:
    """``GET /v1beta/models``: Gemini's list of models, each with its limits."""
    return {"models": [model_json(n, windows.get(n)) for n in names]}


def model_json(name: str, window: int | None = None) -> dict[str, Any]:
    """One model as ``GET /v1beta/models/{model}`` describes it (``inputTokenLimit``: the
    fake's context window for it, else Gemini 2.5's)."""
    return {
        "name": f"models/{name}",
        "version": "001",
        "displayName": name,
        "description": "A model of the fake Gemini.",
        "inputTokenLimit": window or 1048576,
        "outputTokenLimit": 65536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
        "temperature": 1,
        "topP": 0.95,
        "topK": 64,
        "maxTemperature": 2,
        "thinking": True,
    }


__all__ = [
    "GEMINI_FINISH",
    "REQUEST_FIELDS",
    "SCHEMA_FIELDS",
    "SKIP_SIGNATURE",
    "counted_body",
    "decode_signature",
    "field",
    "gemini_chunks",
    "gemini_finish",
    "gemini_json",
    "model_json",
    "models_json",
    "parse_gemini",
    "problem",
    "signature_problem",
    "structured_reply",
    "thought_text",
    "wants_thoughts",
]
