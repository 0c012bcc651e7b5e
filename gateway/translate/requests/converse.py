"""The Bedrock Converse request writer: the neutral :class:`Conv` -> a Converse body.

Reference: https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html
No client speaks Converse, so there is no reader. The body has no ``model`` and no
``stream`` (the URL names the model and the operation, Converse or ConverseStream).

Turns alternate, user first: system and developer messages are hoisted into ``system``,
tool results join the user turn (first, as Claude on Bedrock wants them), consecutive
turns of one role are merged, blank text (Bedrock refuses it) and a turn left empty
are left out. Content blocks are keyed by their kind; images and documents go as base64
bytes (a URL is refused: Converse takes none). Tool call ids are made ``[a-zA-Z0-9_-]``
as for Anthropic; a history with tool blocks always goes with a ``toolConfig`` (Bedrock
refuses it without one). The rule for every field is in docs/translation.md (Bedrock
Converse).
"""

from __future__ import annotations

import base64
import re
from typing import Any

import orjson

from gateway.errors import Refused
from gateway.translate.ir import (
    DEFAULT_CAPS,
    Caps,
    Conv,
    Document,
    Dropped,
    Image,
    Part,
    Reasoning,
    Refusal,
    Text,
    ToolCall,
    ToolResult,
)
from gateway.translate.requests.anthropic_write import one_id, wire_id
from gateway.translate.requests.common import (
    UNAVAILABLE_TOOL,
    call_input,
    history_tools,
    json_schema,
    merged_turns,
    system_texts,
)

#: Image media types Converse takes -> its ``format``.
IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}
#: Document media types Converse takes -> its ``format``.
DOCUMENT_FORMATS = {
    "application/pdf": "pdf",
    "text/csv": "csv",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/html": "html",
    "text/plain": "txt",
    "text/markdown": "md",
}
#: What a document's name may hold on Converse (letters, digits, spaces, hyphens,
#: parentheses, square brackets); anything else becomes a space, runs of spaces one.
_NAME_REFUSED = re.compile(r"[^A-Za-z0-9 \-()\[\]]+")


def write(
    conv: Conv, drops: Dropped, max_output_tokens: int | None = None, caps: Caps = DEFAULT_CAPS
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    ids: dict[str, str] = {}  # tool call ids on the wire -> the client's
    last: dict[str, Any] | None = None
    history_calls = False  # toolUse / toolResult blocks: Converse then wants toolConfig
    for m in conv.messages:
        if m.role in ("system", "developer"):
            continue  # hoisted into ``system``
        role = "assistant" if m.role == "assistant" else "user"
        content = []
        for p in m.parts:
            block = _write_part(p, drops)
            if block is not None:
                content.append(block)
            if type(p) is ToolCall or type(p) is ToolResult:
                one_id(ids, p.id)
                history_calls = True
        if role == "assistant" and all("reasoningContent" in b for b in content):
            if content:
                drops.add("reasoning")  # reasoning alone would read as a prefill
            continue
        if not content:
            continue  # nothing Converse accepts (an empty turn): left out
        if last is not None and last["role"] == role:
            last["content"] = merged_turns(role, last["content"], content, "toolResult")
        else:
            last = {"role": role, "content": content}
            messages.append(last)
    if not messages:  # (Bedrock's answer: "A conversation must start with a user message")
        raise Refused("messages", "no message has content this model accepts (text not blank)")
    if messages[0]["role"] != "user":
        raise Refused("messages", "a conversation must start with a user message on this model")
    body["messages"] = messages
    _write_system(conv, body, drops)
    _write_inference(conv, body, drops, max_output_tokens, caps)
    _write_tools(conv, body, drops, history_calls)
    _write_format(conv, body)
    _write_rest(conv, drops)
    return body


def _write_system(conv: Conv, body: dict[str, Any], drops: Dropped) -> None:
    system = conv.system + [m for m in conv.messages if m.role in ("system", "developer")]
    if texts := [t for t in system_texts(system, drops) if not t.isspace()]:
        body["system"] = [{"text": t} for t in texts]  # (a blank one is refused)


def _write_part(p: Part, drops: Dropped) -> dict[str, Any] | None:
    if type(p) is Text:  # the most common part first, by its exact type
        return {"text": p.text} if p.text and not p.text.isspace() else None  # blank: refused
    if isinstance(p, ToolCall):
        args = call_input(p, drops)
        return {"toolUse": {"toolUseId": wire_id(p.id), "name": p.name, "input": args}}
    if isinstance(p, ToolResult):
        return {"toolResult": _write_result(p, drops)}
    if isinstance(p, Image):
        return _write_image(p, drops)
    if isinstance(p, Document):
        return _write_document(p, drops)
    if isinstance(p, Refusal):
        return {"text": p.text} if p.text and not p.text.isspace() else None
    if isinstance(p, Reasoning):
        if p.signature and p.text:  # Converse refuses reasoning without its text
            text = {"text": p.text, "signature": p.signature}
            return {"reasoningContent": {"reasoningText": text}}
        drops.add("reasoning")  # another provider's reasoning (unsigned), or no text: not sent
    return None


def _write_result(r: ToolResult, drops: Dropped) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if isinstance(r.content, str):
        if r.content:
            content.append({"text": r.content})
    else:
        for p in r.content:
            block = _write_part(p, drops)
            if block is not None and "toolUse" not in block and "toolResult" not in block:
                content.append(block)
    out: dict[str, Any] = {"toolUseId": wire_id(r.id), "content": content}
    if r.is_error:
        out["status"] = "error"
    return out


def _write_image(p: Image, drops: Dropped) -> dict[str, Any]:
    if p.data is None:
        raise Refused("image_url", "an image by URL is not available on this model (send its data)")
    fmt = IMAGE_FORMATS.get((p.media_type or "").lower())
    if fmt is None:
        raise Refused("image_url", f"images of type {p.media_type!r} are not available here")
    if p.detail is not None:
        drops.add("image_url.detail")
    return {"image": {"format": fmt, "source": {"bytes": p.data}}}


def _write_document(p: Document, drops: Dropped) -> dict[str, Any]:
    if p.file_id is not None:
        raise Refused("file.file_id", "an OpenAI file id is not available on this model")
    if p.data is None and p.text is None:
        raise Refused("document.source.url", "a document by URL is not available on this model")
    data = p.data if p.text is None else base64.b64encode(p.text.encode()).decode()
    media_type = (p.media_type or "text/plain") if p.text is None else "text/plain"
    fmt = DOCUMENT_FORMATS.get(media_type.lower())
    if fmt is None:
        raise Refused("document", f"documents of type {media_type!r} are not available here")
    name = " ".join(_NAME_REFUSED.sub(" ", p.filename or "").split()) or "document"
    return {"document": {"format": fmt, "name": name[:200], "source": {"bytes": data}}}


def _write_inference(
    conv: Conv, body: dict[str, Any], drops: Dropped, max_output_tokens: int | None, caps: Caps
) -> None:
    config: dict[str, Any] = {}
    cap = conv.max_tokens if conv.max_tokens is not None else max_output_tokens
    if cap is not None:
        config["maxTokens"] = cap
    for key, name in (("temperature", "temperature"), ("top_p", "topP")):
        value = getattr(conv, key)
        if value is None:
            continue
        if not caps.sampling:
            drops.add(key)
        elif isinstance(value, int | float) and value > 1:
            raise Refused(key, f"Bedrock Converse takes a {key} from 0 to 1")
        else:
            config[name] = value
    if conv.stop:
        config["stopSequences"] = conv.stop
    if config:
        body["inferenceConfig"] = config


def _write_tools(conv: Conv, body: dict[str, Any], drops: Dropped, history_calls: bool) -> None:
    if not conv.tools:
        if conv.tool_choice in ("required", "tool"):
            raise Refused("tool_choice", f"{conv.tool_choice} needs tools")
        if history_calls:  # Converse refuses tool blocks without tools
            schema = {"json": {"type": "object", "properties": {}}}
            body["toolConfig"] = {"tools": [
                {"toolSpec": {"name": n, "description": UNAVAILABLE_TOOL, "inputSchema": schema}}
                for n in history_tools(conv)
            ]}  # fmt: skip
        return
    choice: dict[str, Any] | None = None
    if conv.tool_choice == "none":
        if not history_calls:
            return  # no tool may be called: none offered
        drops.add("tool_choice")  # Converse wants the tools of the calls in the history
    elif conv.tool_choice == "required":
        choice = {"any": {}}
    elif conv.tool_choice == "tool":
        choice = {"tool": {"name": conv.tool_name}}
    elif conv.tool_choice == "auto":
        choice = {"auto": {}}
    tools = []
    for t in conv.tools:
        spec: dict[str, Any] = {"name": t.name}
        if t.description:
            spec["description"] = t.description
        spec["inputSchema"] = {"json": t.parameters or {"type": "object", "properties": {}}}
        if t.strict:
            spec["strict"] = True
        tools.append({"toolSpec": spec})
    config: dict[str, Any] = {"tools": tools}
    if choice is not None:
        config["toolChoice"] = choice
    body["toolConfig"] = config
    if conv.parallel_tool_calls is False:
        drops.add("parallel_tool_calls")


def _write_format(conv: Conv, body: dict[str, Any]) -> None:
    """A JSON schema for the answer: ``outputConfig.textFormat`` (the schema as JSON text)."""
    spec = json_schema(conv)
    if spec is None:
        return
    schema: dict[str, Any] = {"schema": orjson.dumps(spec.get("schema") or {}).decode()}
    for key in ("name", "description"):
        if isinstance(spec.get(key), str) and spec[key]:
            schema[key] = spec[key]
    text_format = {"type": "json_schema", "structure": {"jsonSchema": schema}}
    body["outputConfig"] = {"textFormat": text_format}


def _write_rest(conv: Conv, drops: Dropped) -> None:
    """Fields Converse has no place for: dropped and named, or refused."""
    if conv.effort not in (None, "none") or conv.thinking_budget is not None:
        drops.add("reasoning_effort")  # model-specific on Bedrock: not sent
    if conv.reasoning_summary is not None:
        drops.add("reasoning.summary")
    if conv.user is not None:
        drops.add("user")
    for key, value in conv.shared.items():
        if not (key == "store" and value is False):  # Bedrock keeps no answers anyway
            drops.add(key)


__all__ = ["DOCUMENT_FORMATS", "IMAGE_FORMATS", "write"]
