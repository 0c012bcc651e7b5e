"""The Gemini request reader: a ``generateContent`` body -> the neutral :class:`Conv`, so
that a Gemini client (the Gemini CLI, google-genai) may call a model of any format; the
inverse of :mod:`gateway.translate.requests.gemini`, the writer.

Reference: https://ai.google.dev/api/generate-content (``GenerateContentRequest``). The
URL names the model and the method: the caller sets ``model`` and ``stream``. Google's
JSON takes a field by its lowerCamelCase name or its proto name (``mimeType`` or
``mime_type``: google-genai sends both kinds); both are read, and a field is named by the
first. Calls and results without ids are paired as Gemini pairs them (:class:`_Turns`).
The rule for every field is in docs/translation.md (Gemini). Pure: no I/O;
large values (texts, base64 data, schemas) are referenced, never copied.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import orjson

from gateway.errors import Refused
from gateway.translate.gemini_schema import from_gemini
from gateway.translate.ir import (
    Conv,
    Document,
    Dropped,
    Image,
    Msg,
    Part,
    Reasoning,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    signed_id,
    unset,
)

#: The smallest thinking budget (Anthropic's); a smaller one (Gemini's 128, 512) is raised.
MIN_BUDGET = 1024
_LEVELS = frozenset({"minimal", "low", "medium", "high"})  # thinkingLevel: an effort
_ROLES = {"user": "user", "model": "assistant", "function": "user"}
#: The fields read of each object (any other is named where it is met).
_MEDIA_KEYS = frozenset({"inlineData", "fileData"})
_PART_KEYS = _MEDIA_KEYS | {"text", "thought", "thoughtSignature", "functionCall",
                            "functionResponse"}  # fmt: skip
_RESULT_KEYS = frozenset({"id", "name", "response", "parts"})
_BLOB_KEYS = frozenset({"mimeType", "data", "displayName", "fileUri"})
_SYSTEM_KEYS = frozenset({"text", "thought", "thoughtSignature"})
_DECLARATION_KEYS = frozenset({"name", "description", "parameters", "parametersJsonSchema"})
_CALLING_KEYS = frozenset({"mode", "allowedFunctionNames"})
_THINKING_KEYS = frozenset({"thinkingBudget", "thinkingLevel", "includeThoughts"})
_FORMAT_KEYS = frozenset({"responseMimeType", "responseSchema", "responseJsonSchema"})
_SET = {"maxOutputTokens": "max_tokens", "temperature": "temperature", "topP": "top_p"}
_GENERATION_KEYS = frozenset(_FORMAT_KEYS | _SET.keys() | {
    "stopSequences", "thinkingConfig", "candidateCount", "responseModalities", "topK", "seed",
    "presencePenalty", "frequencyPenalty", "mediaResolution", "responseLogprobs", "logprobs",
    "speechConfig", "audioTimestamp", "enableEnhancedCivicAnswers"})  # fmt: skip
_CALLING = "toolConfig.functionCallingConfig"
_LOGPROBS, _AUDIO = "log probabilities are not available here", "audio output is not available"
_REFUSED = {"responseLogprobs": _LOGPROBS, "logprobs": _LOGPROBS, "speechConfig": _AUDIO,
            "audioTimestamp": _AUDIO}  # fmt: skip
_GOOGLE_FILES = "generativelanguage.googleapis.com"  # the Files API: only Google reads them
_VIDEO_HOSTS = ("youtube.com", "www.youtube.com", "m.youtube.com", "youtu.be")


def read(body: dict[str, Any], drops: Dropped) -> Conv:
    conv = Conv()
    calling = None
    for key, value in body.items():
        if value is None:
            continue
        key = camel(key) if "_" in key else key
        if key == "contents":
            _Turns(conv, drops).read(value)
        elif key == "systemInstruction":
            _system(conv, value, drops)
        elif key == "tools":
            _tools(conv, value, drops)
        elif key == "toolConfig":
            calling = value  # read once every tool is known
        elif key == "generationConfig":
            _generation(conv, value, drops)
        elif key == "cachedContent":
            if value:  # (a name: "cachedContents/...")
                raise Refused(key, "cached content is held by Google, not on this model")
        elif not unset(value):  # safetySettings, labels and any other field
            drops.add(key)
    if calling is not None:
        _tool_config(conv, calling, drops)
    return conv


def camel(key: str) -> str:
    """A proto field name as its lowerCamelCase JSON name (``mime_type`` -> ``mimeType``)."""
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _fields(
    obj: dict[str, Any], known: frozenset[str], drops: Dropped | None = None, where: str = ""
) -> dict[str, Any]:
    """``obj`` by its lowerCamelCase names: ``obj`` itself when every name is one of
    ``known`` (nothing copied), else a new dict, any other set field named ``where.name``
    in ``drops``. Either may hold nulls: a null field is one not given."""
    if obj.keys() <= known:
        return obj
    out = {}
    for k, v in obj.items():
        key = camel(k) if "_" in k else k
        out[key] = v
        if key not in known and drops is not None and v is not None:
            drops.add(f"{where}.{key}")
    return out


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:  # (an integer beyond 64 bits, a lone surrogate)
        return json.dumps(value, ensure_ascii=False, default=str)


class _Turns:
    """``contents`` -> messages. A call without an id gets ``<name>_<turn>_<k>`` (its turn's
    index in ``contents``, its index among that turn's calls): a function of the history
    alone, so each request of a conversation names a call the same way (and a provider's
    prompt cache keeps matching). A result without an id takes the id of the first call
    of its name in the last model turn still unanswered (Gemini pairs them so: by name, in
    order), one with an id its call's signed id. A result identical to one read since that
    model turn is left out (the Gemini CLI's resumed sessions send some twice)."""

    __slots__ = ("conv", "drops", "pending", "seen", "signed")

    def __init__(self, conv: Conv, drops: Dropped) -> None:
        self.conv, self.drops = conv, drops
        self.pending: dict[str, list[str]] = {}  # name -> unanswered calls of the last turn
        self.seen: dict[str, Any] = {}  # id -> the functionResponse read since that turn
        self.signed: dict[str, str] = {}  # a call's own id -> its id with the signature

    def read(self, contents: list[Any]) -> None:
        for t, content in enumerate(contents):
            role = content.get("role") or "user"
            if (neutral := _ROLES.get(role)) is None:
                raise Refused("contents.role", f"{role!r}: a turn is a user or a model turn")
            if neutral == "assistant":
                self.pending, self.seen = {}, {}
            self.turn(t, neutral, content.get("parts") or ())

    def turn(self, t: int, role: str, parts: Any) -> None:
        own: list[Part] = []
        results: list[ToolResult] = []
        calls = 0
        for p in parts:  # (other fields: executableCode, videoMetadata ... named)
            f = _fields(p, _PART_KEYS, self.drops, "contents.parts")
            if (text := f.get("text")) is not None:
                self.text(f, text, role, own)
            if (fc := f.get("functionCall")) is not None:
                own.append(self.call(fc, f.get("thoughtSignature"), t, calls))
                calls += 1
            if (fr := f.get("functionResponse")) is not None:
                self.result(fr, t, results)
            if (blob := f.get("inlineData")) is not None:
                own.append(_media(blob, "inlineData", None, self.drops))
            if (file_data := f.get("fileData")) is not None:
                own.append(_by_url(file_data, self.drops))
        messages = self.conv.messages
        for r in results:  # results first, one a message
            messages.append(Msg("tool", [r]))
        if own:
            messages.append(Msg(role, own))

    def text(self, f: dict[str, Any], text: str, role: str, own: list[Part]) -> None:
        if f.get("thought") is True and role == "assistant":
            if text:
                own.append(Reasoning(text))  # (its signature means nothing elsewhere)
            return
        if text:
            own.append(Text(text))
        if f.get("thoughtSignature") is not None:
            self.drops.add("contents.parts.thoughtSignature")  # a text's: Gemini needs none

    def call(self, fc: dict[str, Any], signature: Any, t: int, k: int) -> ToolCall:
        name = fc.get("name") or ""
        own_id = fc.get("id") or f"{name}_{t}_{k}"
        call_id = signed_id(own_id, signature) if signature else own_id
        self.signed[own_id] = call_id
        self.pending.setdefault(name, []).append(call_id)
        args = fc.get("args")
        return ToolCall(call_id, name, _json(args) if args is not None else "{}")

    def result(self, fr: dict[str, Any], t: int, results: list[ToolResult]) -> None:
        name = fr.get("name") or ""
        waiting = self.pending.get(name)
        given = fr.get("id")
        if given:
            call_id = self.signed.get(given, given)
            if waiting and call_id in waiting:
                waiting.remove(call_id)
        elif waiting:
            call_id = waiting.pop(0)
        elif fr in self.seen.values():
            return  # a result sent twice, without ids
        else:
            call_id = f"{name}_{t}_{len(results)}"  # answers no call: the provider judges it
        if self.seen.get(call_id) != fr:  # (else the same result twice)
            self.seen[call_id] = fr
            results.append(_result(call_id, fr, self.drops))


def _result(call_id: str, fr: dict[str, Any], drops: Dropped) -> ToolResult:
    """``{"output": x}``: x (a string as it is, else its JSON); ``{"error": x}``: the same,
    failed; any other object: its JSON; the images and documents of ``parts`` after it."""
    where = "contents.parts.functionResponse"
    fr = _fields(fr, _RESULT_KEYS, drops, where)  # (willContinue, scheduling: named)
    response = fr.get("response")
    error = False
    if not response:
        text = ""
    elif len(response) == 1 and ("output" in response or "error" in response):
        error = "error" in response
        value = response["error" if error else "output"]
        text = value if isinstance(value, str) else "" if value is None else _json(value)
    else:
        text = _json(response)
    if not (media := fr.get("parts")):
        return ToolResult(call_id, text, error)
    content: list[Part] = [Text(text)] if text else []
    for p in media:
        f = _fields(p, _MEDIA_KEYS, drops, f"{where}.parts")
        if (blob := f.get("inlineData")) is not None:
            content.append(_media(blob, "functionResponse.parts.inlineData", None, drops))
        if (file_data := f.get("fileData")) is not None:
            content.append(_by_url(file_data, drops))
    return ToolResult(call_id, content, error)


def _media(blob: dict[str, Any], where: str, url: str | None, drops: Dropped) -> Image | Document:
    """An image (``image/*``) or a document of any other type, from its data or ``url``;
    audio and video refused (the model would not hear or see them)."""
    f = _fields(blob, _BLOB_KEYS, drops, f"contents.parts.{where}")
    media_type = f.get("mimeType")
    kind = media_type.lower() if isinstance(media_type, str) else ""
    if kind.startswith(("audio/", "video/")):
        raise Refused(f"contents.parts.{where}", f"{kind} content is not available on this model")
    if kind.startswith("image/"):
        return Image(url=url, media_type=media_type, data=f.get("data"))
    return Document(media_type, f.get("data"), url, filename=f.get("displayName"))


def _by_url(file_data: dict[str, Any], drops: Dropped) -> Image | Document:
    """``fileData``: content by URL, for a format that takes URLs (the others refuse it).
    A file held by Google (the Files API, ``gs://``) or a video site is refused."""
    uri = file_data.get("fileUri") or file_data.get("file_uri") or ""
    try:
        parts = urlsplit(uri)
    except ValueError:
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or parts.hostname == _GOOGLE_FILES:
        raise Refused("contents.parts.fileData", "a file held by Google is not available here")
    if parts.hostname in _VIDEO_HOSTS:
        raise Refused("contents.parts.fileData", "video is not available on this model")
    return _media(file_data, "fileData", uri, drops)


def _system(conv: Conv, value: Any, drops: Dropped) -> None:
    """``systemInstruction``: a Content (its ``role`` ignored) or a string."""
    if isinstance(value, str):
        conv.system.extend([Msg("system", [Text(value)], True)] if value else ())
        return
    texts: list[Part] = []
    for p in value.get("parts") or ():
        if text := _fields(p, _SYSTEM_KEYS, drops, "systemInstruction.parts").get("text"):
            texts.append(Text(text))
    if texts:
        conv.system.append(Msg("system", texts))


def _tools(conv: Conv, value: list[Any], drops: Dropped) -> None:
    tools: list[Tool] = []
    conv.tools = tools
    for i, t in enumerate(value):
        for key, v in t.items():
            if v is None:
                continue
            if key != "functionDeclarations" and camel(key) != "functionDeclarations":
                drops.add(f"tools.{camel(key)}")  # built in: answered without it
                continue
            for j, d in enumerate(v):  # (their response, behavior: named)
                f = _fields(d, _DECLARATION_KEYS, drops, "tools.functionDeclarations")
                schema = f.get("parametersJsonSchema")
                if schema is None and (gemini := f.get("parameters")) is not None:
                    schema = from_gemini(gemini, f"tools[{i}].functionDeclarations[{j}].parameters")
                tools.append(Tool(f.get("name") or "", f.get("description"), schema))


def _tool_config(conv: Conv, value: dict[str, Any], drops: Dropped) -> None:
    """``AUTO``, ``NONE``; ``ANY``: one allowed name, that tool; several, only those tools,
    one required; ``VALIDATED``: ``AUTO`` (with only the allowed tools)."""
    f = _fields(value, frozenset({"functionCallingConfig"}), drops, "toolConfig")
    c = _fields(f.get("functionCallingConfig") or {}, _CALLING_KEYS, drops, _CALLING)
    # read lowered, as Google takes them; ``mode_unspecified``: the enum's unset value
    mode = (c.get("mode") or "mode_unspecified").lower()
    names: list[str] = c.get("allowedFunctionNames") or []
    if mode in ("auto", "none", "mode_unspecified"):
        if names and mode != "none":
            drops.add(f"{_CALLING}.allowedFunctionNames")  # (for ANY and VALIDATED only)
        conv.tool_choice = None if mode == "mode_unspecified" else mode
        return
    if mode not in ("any", "validated"):
        raise Refused(f"{_CALLING}.mode", f"{c['mode']!r} is not AUTO, ANY, NONE or VALIDATED")
    if mode == "any" and not conv.tools:
        raise Refused(f"{_CALLING}.mode", "ANY needs a function declaration")
    declared = {t.name for t in conv.tools or ()}
    if unknown := [n for n in names if n not in declared]:
        raise Refused(f"{_CALLING}.allowedFunctionNames", f"{unknown[0]!r} is not declared")
    if mode == "any" and len(names) == 1:
        conv.tool_choice, conv.tool_name = "tool", names[0]
        return
    conv.tool_choice = "required" if mode == "any" else "auto"
    if names:
        conv.tools = [t for t in conv.tools or () if t.name in names]


def _generation(conv: Conv, value: dict[str, Any], drops: Dropped) -> None:
    f = _fields(value, _GENERATION_KEYS)  # (the fields Google documents: none copied)
    for key, v in f.items():
        if v is None or key in _FORMAT_KEYS:  # (those are read together, below)
            continue
        if (attr := _SET.get(key)) is not None:
            setattr(conv, attr, v)
        elif key == "stopSequences":
            conv.stop = list(v)
        elif key == "thinkingConfig":
            _thinking(conv, _fields(v, _THINKING_KEYS, drops, f"generationConfig.{key}"), drops)
        else:
            _other(key, v, drops)
    if not f.keys().isdisjoint(_FORMAT_KEYS):
        _format(conv, f)


def _other(key: str, v: Any, drops: Dropped) -> None:
    """Refused where its loss changes the answer, else named (``topK``, ``seed`` ...)."""
    if key in _REFUSED:
        if not unset(v):
            raise Refused(f"generationConfig.{key}", _REFUSED[key])
    elif key == "candidateCount":
        if v not in (0, 1):
            raise Refused("generationConfig.candidateCount", "one candidate only on this model")
    elif key == "responseModalities":
        if any(m.lower() not in ("text", "modality_unspecified") for m in v):
            raise Refused("generationConfig.responseModalities", "only text output on this model")
    elif not unset(v):
        drops.add(f"generationConfig.{key}")


def _format(conv: Conv, f: dict[str, Any]) -> None:
    """JSON output: ``responseMimeType: application/json`` with a schema (in JSON Schema,
    or Gemini's dialect) is a ``json_schema`` answer, without one a ``json_object``."""
    mime = str(f.get("responseMimeType") or "text/plain").lower()
    schema = f.get("responseJsonSchema")
    if schema is None and (gemini := f.get("responseSchema")) is not None:
        schema = from_gemini(gemini, "generationConfig.responseSchema")
    if mime == "application/json":
        if schema is None:
            conv.response_format = {"type": "json_object"}
        else:
            spec = {"name": "response", "schema": schema}
            conv.response_format = {"type": "json_schema", "json_schema": spec}
    elif mime == "text/x.enum":  # one of the values as bare text: JSON would quote it
        raise Refused("generationConfig.responseMimeType", "an enum answer is not available")
    elif mime != "text/plain":
        raise Refused("generationConfig.responseMimeType", f"{mime!r} output is not available")
    elif schema is not None:
        raise Refused("generationConfig.responseMimeType", "a schema needs application/json")


def _thinking(conv: Conv, f: dict[str, Any], drops: Dropped) -> None:
    """``thinkingBudget`` (0: none; -1, the model's choice: ``medium``; at least
    :data:`MIN_BUDGET`), ``thinkingLevel`` (an effort), ``includeThoughts`` (a summary)."""
    budget = f.get("thinkingBudget")
    if budget is not None:
        if budget == 0:
            conv.effort = "none"
        elif budget < 0:
            conv.effort = "medium"
        else:
            conv.thinking_budget = max(budget, MIN_BUDGET)
    level = f.get("thinkingLevel")
    if level is not None:
        if (effort := level.lower()) in _LEVELS:
            conv.effort = effort
        elif effort != "thinking_level_unspecified":
            drops.add("generationConfig.thinkingConfig.thinkingLevel")
    if f.get("includeThoughts") is True and conv.effort != "none":
        conv.reasoning_summary = "auto"


__all__ = ["MIN_BUDGET", "camel", "read"]
