"""The Gemini request writer: the neutral :class:`Conv` -> a ``generateContent`` body.

Reference: https://ai.google.dev/api/generate-content (``GenerateContentRequest``). The
body has no ``model`` and no ``stream``: the URL names the model and the method
(``generateContent`` or ``streamGenerateContent``).

- Turns are ``user`` and ``model``; system and developer messages go into
  ``systemInstruction``. Consecutive turns of one role are merged (a user turn's function
  responses first), so that the responses to a turn's calls are one turn, as Gemini wants.
- Parts: text; an image or a PDF with its data as ``inlineData`` (by URL: refused, the
  Gemini API fetches none); a call as ``functionCall`` ``{id, name, args}``; a result as
  ``functionResponse`` ``{id, name, response: {"output"}}`` (``{"error"}`` for a failed
  one, as Google's docs advise), its function's name found from the call.
- Thought signatures: a call id that carries one (:func:`~gateway.translate.ir.split_id`,
  as the gateway gave it to a client of another format) goes back as the call's
  ``thoughtSignature``. Reasoning of any provider is not sent (named ``reasoning``).
- Tools: ``functionDeclarations`` with the parameters' JSON schema in Gemini's dialect
  (:mod:`gateway.translate.gemini_schema`, each conversion kept for the next turns:
  :func:`converted`); ``tool_choice`` as
  ``toolConfig.functionCallingConfig.mode`` (``AUTO``, ``NONE``, ``ANY`` with
  ``allowedFunctionNames`` for one tool).
- ``generationConfig``: ``maxOutputTokens``, ``temperature``, ``topP``,
  ``stopSequences``, JSON output (``responseMimeType: application/json``, with
  ``responseSchema`` when the client gave a schema), ``thinkingConfig`` (a reasoning
  effort or an Anthropic thinking budget as ``thinkingBudget``; ``includeThoughts`` when
  the client asked to see the reasoning).

The rule for every field is in docs/translation.md.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import Refused
from gateway.translate.gemini_schema import to_gemini
from gateway.translate.ir import (
    DEFAULT_CAPS,
    Caps,
    Conv,
    Document,
    Dropped,
    Image,
    Msg,
    Part,
    Reasoning,
    Refusal,
    Text,
    ToolCall,
    ToolResult,
    split_id,
    text_of,
)
from gateway.translate.requests.common import (
    BUDGET_OF_EFFORT,
    call_input,
    merged_turns,
    system_texts,
)

#: Media types Gemini takes inline (images, PDF, plain text), as the client named them.
INLINE_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif", "application/pdf",
     "text/plain"}
)  # fmt: skip
_JPEG = {"image/jpg": "image/jpeg"}


def write(
    conv: Conv, drops: Dropped, max_output_tokens: int | None = None, caps: Caps = DEFAULT_CAPS
) -> dict[str, Any]:
    contents, system = _contents(conv, drops)
    if not contents:
        raise Refused("messages", "no message has content this model accepts")
    body: dict[str, Any] = {"contents": contents}
    if system and (texts := system_texts(system, drops)):
        body["systemInstruction"] = {"parts": [{"text": t} for t in texts]}
    if conv.tools:
        _write_tools(conv, body, drops)
    elif conv.tool_choice in ("required", "tool"):
        raise Refused("tool_choice", f"{conv.tool_choice} needs tools")
    config = _generation_config(conv, drops, caps)
    if config:
        body["generationConfig"] = config
    if conv.user is not None or conv.shared:
        _write_rest(conv, drops)
    return body


def _contents(conv: Conv, drops: Dropped) -> tuple[list[dict[str, Any]], list[Msg]]:
    """The turns, and the system and developer messages (the leading ones first)."""
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call id (without its signature) -> the function's name
    system = conv.system
    last: dict[str, Any] | None = None
    for m in conv.messages:
        role = m.role
        if role == "assistant":
            role = "model"
        elif role != "user":
            if role in ("system", "developer"):
                system = [*system, m]  # hoisted into ``systemInstruction``
                continue
            role = "user"
        parts = []
        for part in m.parts:
            if type(part) is Text:  # the most common part, by its exact type, inline
                if part.text:
                    parts.append({"text": part.text})
            elif (written := _write_part(part, names, drops)) is not None:
                parts.append(written)
        if not parts:
            continue
        if last is not None and last["role"] == role:
            last["parts"] = merged_turns(role, last["parts"], parts, "functionResponse")
        else:
            last = {"role": role, "parts": parts}
            contents.append(last)
    return contents, system


def _write_part(p: Part, names: dict[str, str], drops: Dropped) -> dict[str, Any] | None:
    if type(p) is Text:  # the most common part first, by its exact type
        return {"text": p.text} if p.text else None
    if isinstance(p, ToolCall):
        call_id, signature = split_id(p.id)
        names[call_id] = p.name
        part: dict[str, Any] = {
            "functionCall": {"id": call_id, "name": p.name, "args": call_input(p, drops)}
        }
        if signature is not None:
            part["thoughtSignature"] = signature
        return part
    if isinstance(p, ToolResult):
        return {"functionResponse": _write_result(p, names, drops)}
    if isinstance(p, Image | Document):
        return _inline(p, drops)
    if isinstance(p, Refusal):
        return {"text": p.text} if p.text else None
    if isinstance(p, Reasoning):
        drops.add("reasoning")  # Gemini's own thoughts need not come back; others' cannot
    return None


def _write_result(r: ToolResult, names: dict[str, str], drops: Dropped) -> dict[str, Any]:
    call_id = split_id(r.id)[0]
    if not isinstance(r.content, str) and any(type(p) is not Text for p in r.content):
        drops.add("tool_result.image")  # only the result's text is sent
    text = text_of(r.content)
    return {
        "id": call_id,
        "name": names.get(call_id, call_id),
        "response": {"error" if r.is_error else "output": text},
    }


def _inline(p: Image | Document, drops: Dropped) -> dict[str, Any]:
    field = "image_url" if isinstance(p, Image) else "document"
    if isinstance(p, Document) and p.file_id is not None:
        raise Refused("file.file_id", "an OpenAI file id is not available on this model")
    if isinstance(p, Document) and p.text is not None:
        return {"text": p.text}
    if p.data is None:
        raise Refused(field, "content by URL is not available on this model (send its data)")
    media_type = (p.media_type or "").lower()
    media_type = _JPEG.get(media_type, media_type)
    if media_type not in INLINE_TYPES:
        raise Refused(field, f"content of type {p.media_type!r} is not available here")
    if isinstance(p, Image) and p.detail is not None:
        drops.add("image_url.detail")
    return {"inlineData": {"mimeType": media_type, "data": p.data}}


#: Schemas converted lately: an agent sends the same tools on every turn, and converting
#: one costs 10 to 70 µs where finding them all costs one encode of them (a few µs).
#: Keyed by what was converted (the tools' schemas in order, or one schema with its path);
#: a value is shared by the bodies that use it (none changes it).
_CONVERTED: dict[bytes, tuple[list[dict[str, Any]], tuple[str, ...]]] = {}
_CONVERTED_MAX = 256
#: Tools whose schemas encode longer than this are converted anew each time: the cache
#: holds at most 256 x 64 KiB of keys (and their conversions), whatever clients send.
_CONVERTED_KEY_MAX = 64 * 1024


def converted(schemas: list[Any], paths: list[str], drops: Dropped) -> list[dict[str, Any]]:
    """:func:`~gateway.translate.gemini_schema.to_gemini` of each of ``schemas`` at its
    path, the names they drop added to ``drops``; from :data:`_CONVERTED` when they were
    converted lately. A refusal is never kept: it is raised anew."""
    try:
        key = orjson.dumps([paths, schemas])
    except orjson.JSONEncodeError:
        return [to_gemini(s, p, drops) for s, p in zip(schemas, paths, strict=True)]
    if len(key) > _CONVERTED_KEY_MAX:
        return [to_gemini(s, p, drops) for s, p in zip(schemas, paths, strict=True)]
    hit = _CONVERTED.get(key)
    if hit is None:
        own = Dropped()
        hit = (
            [to_gemini(s, p, own) for s, p in zip(schemas, paths, strict=True)],
            tuple(own.names),
        )
        if len(_CONVERTED) >= _CONVERTED_MAX:
            _CONVERTED.clear()  # (a new set of tools: the old ones are not coming back)
        _CONVERTED[key] = hit
    for name in hit[1]:
        drops.add(name)
    return hit[0]


def _write_tools(conv: Conv, body: dict[str, Any], drops: Dropped) -> None:
    assert conv.tools
    given = [(i, t.parameters) for i, t in enumerate(conv.tools) if t.parameters]
    schemas = converted([p for _, p in given], [f"tools[{i}].parameters" for i, _ in given], drops)
    parameters = {i: schema for (i, _), schema in zip(given, schemas, strict=True)}
    declarations = []
    for i, t in enumerate(conv.tools):
        d: dict[str, Any] = {"name": t.name}
        if t.description:
            d["description"] = t.description
        if i in parameters:
            d["parameters"] = parameters[i]
        if t.strict:
            drops.add("tools.strict")  # Gemini's calls follow the schema given; no flag
        declarations.append(d)
    body["tools"] = [{"functionDeclarations": declarations}]
    mode = {"none": "NONE", "required": "ANY", "tool": "ANY", "auto": "AUTO"}.get(
        conv.tool_choice or ""
    )
    if mode is not None:
        calling: dict[str, Any] = {"mode": mode}
        if conv.tool_choice == "tool":
            calling["allowedFunctionNames"] = [conv.tool_name]
        body["toolConfig"] = {"functionCallingConfig": calling}
    if conv.parallel_tool_calls is False:
        drops.add("parallel_tool_calls")


def _generation_config(conv: Conv, drops: Dropped, caps: Caps) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if conv.max_tokens is not None:
        config["maxOutputTokens"] = conv.max_tokens
    if conv.temperature is not None or conv.top_p is not None:
        for key, name in (("temperature", "temperature"), ("top_p", "topP")):
            value = getattr(conv, key)
            if value is not None:
                if caps.sampling:
                    config[name] = value
                else:
                    drops.add(key)
    if conv.stop:
        config["stopSequences"] = conv.stop
    if conv.response_format is not None:
        _write_format(conv, config, drops)
    if conv.effort is not None or conv.thinking_budget is not None:
        thinking = _thinking(conv, drops, caps)
        if thinking:
            config["thinkingConfig"] = thinking
    return config


def _write_format(conv: Conv, config: dict[str, Any], drops: Dropped) -> None:
    """JSON output: ``responseMimeType``, with ``responseSchema`` for a JSON schema."""
    rf = conv.response_format
    if not isinstance(rf, dict) or rf.get("type") in (None, "text"):
        return
    config["responseMimeType"] = "application/json"
    if rf.get("type") == "json_schema":
        spec = rf.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if schema:
            path = "response_format.json_schema.schema"
            config["responseSchema"] = converted([schema], [path], drops)[0]
    elif rf.get("type") != "json_object":
        raise Refused(f"response_format.{rf.get('type')}", "not available on this model")


def _thinking(conv: Conv, drops: Dropped, caps: Caps) -> dict[str, Any]:
    """``thinkingConfig`` from a reasoning effort or an Anthropic thinking budget; the
    thoughts' summaries are asked for when the client asked to see its reasoning."""
    effort, budget = conv.effort, conv.thinking_budget
    if (effort is None or effort == "none") and budget is None:
        return {}
    if caps.reasoning is False:
        drops.add("reasoning_effort")
        return {}
    if budget is None:
        budget = BUDGET_OF_EFFORT.get(effort or "")
        if budget is None:
            drops.add("reasoning_effort")
            return {}
    out: dict[str, Any] = {"thinkingBudget": budget}
    if conv.thinking_budget is not None or conv.reasoning_summary not in (None, "none"):
        out["includeThoughts"] = True
    return out


def _write_rest(conv: Conv, drops: Dropped) -> None:
    """Fields Gemini has no place for: dropped and named."""
    if conv.user is not None:
        drops.add("user")
    for key, value in conv.shared.items():
        if not (key == "store" and value is False):  # Gemini keeps no answers anyway
            drops.add(key)


__all__ = ["INLINE_TYPES", "write"]
