"""Anthropic Messages requests -> the neutral :class:`Conv` (the reader).

Reference: https://docs.anthropic.com/en/api/messages
The rule for every field is in the table of :mod:`gateway.translate.requests`.
This module is the format's API: the writer (``Conv`` -> a Messages body) is in
:mod:`gateway.translate.requests.anthropic_write`; its ``write`` and ``tool_id`` are
imported from here too.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway.errors import Refused
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
)
from gateway.translate.requests.anthropic_write import tool_id, write
from gateway.translate.requests.common import EFFORT_FROM_ANTHROPIC, effort_of_budget

#: Anthropic fields no OpenAI format has; losing them changes no answer's meaning.
#: (Any other unknown field is dropped and named too.)
DROPPED = frozenset(
    {"top_k", "service_tier", "context_management", "cache_control", "inference_geo",
     "speed", "diagnostics", "user_profile_id", "workspace_id"}
)  # fmt: skip
REFUSED = {
    "mcp_servers": "remote MCP servers are not available on this model",
    "container": "code-execution containers are not available on this model",
}
#: Content blocks that record a server tool's run (history): dropped, named.
_SERVER_HISTORY = re.compile(r"^(server_tool_use|mcp_tool_use|container_upload|.*_tool_result)$")
#: OpenAI rejects a ``user`` longer than this.
MAX_OPENAI_USER = 64


def read(body: dict[str, Any], drops: Dropped) -> Conv:
    conv = Conv(model=body.get("model"))
    for key, value in body.items():
        if value is None or key == "model":
            continue
        if key == "messages":
            for m in value:
                _read_message(conv, m, drops)
        elif key == "system":
            conv.system.append(_read_system(value, drops))
        elif key == "tools":
            _read_tools(conv, value, drops)
        elif key == "tool_choice":
            _read_tool_choice(conv, value)
        elif key in ("max_tokens", "temperature", "top_p", "stream"):
            setattr(conv, key, value)
        elif key == "stop_sequences":
            conv.stop = list(value)
        elif key == "thinking":
            _read_thinking(conv, value, drops)
        elif key == "output_config":
            _read_output_config(conv, value, drops)
        elif key == "metadata":
            _read_metadata(conv, value, drops)
        elif key in REFUSED:
            raise Refused(key, REFUSED[key])
        else:
            drops.add(key)
    return conv


def fold_system(body: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    """``body`` (a Messages request) with its ``role: system`` turns moved into ``system``,
    after what is there, in order: where translation places them (:func:`read` takes
    them as system messages, the writer hoists every one into ``system``), for a cloud
    that takes only ``user`` and ``assistant`` turns. The client's text blocks are kept as
    they are (``cache_control`` included); a turn's other blocks are dropped and named in
    ``dropped`` (``system.image``), as the writer does; empty texts are left out (with
    nothing left to fold in, ``system`` stays as it was)."""
    blocks: list[Any] = []
    turns = []
    for m in body["messages"]:
        if type(m) is not dict or m.get("role") != "system":
            turns.append(m)
            continue
        content = m.get("content")
        if isinstance(content, str):
            if content:
                blocks.append({"type": "text", "text": content})
            continue
        for b in content if isinstance(content, list) else ():
            if isinstance(b, dict) and b.get("type") == "text":
                if b.get("text"):
                    blocks.append(b)
            else:
                kind = b.get("type") if isinstance(b, dict) else None
                dropped.append(f"system.{kind if isinstance(kind, str) else 'block'}")
    out = {**body, "messages": turns}
    system = body.get("system")
    if not blocks:
        return out
    if isinstance(system, str) and system:
        blocks.insert(0, {"type": "text", "text": system})
    elif isinstance(system, list):
        blocks[:0] = system
    out["system"] = blocks
    return out


def _read_metadata(conv: Conv, value: dict[str, Any], drops: Dropped) -> None:
    """``metadata.user_id``: the neutral ``user`` (dropped when too long for OpenAI's)."""
    user = value.get("user_id")
    if isinstance(user, str) and len(user) > MAX_OPENAI_USER:
        drops.add("metadata.user_id")
    elif user is not None:
        conv.user = user


def _read_thinking(conv: Conv, value: dict[str, Any], drops: Dropped) -> None:
    kind = value.get("type")
    if kind == "enabled":
        conv.thinking_budget = value.get("budget_tokens")
    elif kind not in ("adaptive", "between_tools", "disabled"):
        drops.add("thinking")
    if value.get("display") is not None:
        drops.add("thinking.display")


def _read_output_config(conv: Conv, value: dict[str, Any], drops: Dropped) -> None:
    for key, v in value.items():
        if v is None:
            continue
        if key == "effort":
            conv.effort = EFFORT_FROM_ANTHROPIC.get(v, v)
        elif key == "format" and v.get("type") == "json_schema":
            schema = {"name": "response", "schema": v.get("schema")}
            conv.response_format = {"type": "json_schema", "json_schema": schema}
        else:
            drops.add(f"output_config.{key}")


def _read_system(value: Any, drops: Dropped) -> Msg:
    if isinstance(value, str):
        return Msg("system", [Text(value)], True)
    parts: list[Part] = []
    for b in value:
        _extras(b, drops)
        parts.append(Text(b.get("text", ""), "cache_control" in b))
    return Msg("system", parts)


def _extras(block: dict[str, Any], drops: Dropped) -> None:
    if block.get("cache_control") is not None:
        drops.add("cache_control")
    if block.get("citations"):
        drops.add("citations")


def _read_message(conv: Conv, m: dict[str, Any], drops: Dropped) -> None:
    role = m.get("role")
    content = m.get("content")
    if role == "system":  # a system turn among the messages (the SDK's SystemMessageParam)
        msg = _read_system(content, drops)
        (conv.messages if conv.messages else conv.system).append(msg)
        return
    if role not in ("user", "assistant"):
        raise Refused(f"messages.role.{role}", "not a Messages API role")
    if isinstance(content, str):
        conv.messages.append(Msg(role, [Text(content)], True))
        return
    parts: list[Part] = []
    for b in content or ():
        kind = b.get("type")
        if kind == "tool_result":
            _extras(b, drops)
            result = b.get("content")
            blocks = result if isinstance(result, str) else _read_blocks(result or [], drops)
            r = ToolResult(str(b.get("tool_use_id")), blocks, bool(b.get("is_error")))
            conv.messages.append(Msg("tool", [r]))
        elif kind == "tool_use":
            _extras(b, drops)
            args = orjson.dumps(b.get("input") or {}).decode()
            parts.append(ToolCall(str(b.get("id")), b.get("name", ""), args))
        elif kind == "thinking":
            parts.append(Reasoning(b.get("thinking", ""), b.get("signature")))
        elif kind == "redacted_thinking":
            drops.add("redacted_thinking")
        elif isinstance(kind, str) and _SERVER_HISTORY.match(kind):
            drops.add(f"content.{kind}")
        else:
            parts.extend(_read_blocks([b], drops))
    if parts or role != "user":
        conv.messages.append(Msg(role, parts))


def _read_blocks(blocks: list[dict[str, Any]], drops: Dropped) -> list[Part]:
    parts: list[Part] = []
    for b in blocks:
        kind = b.get("type")
        _extras(b, drops)
        if kind == "text":
            parts.append(Text(b.get("text", "")))
        elif kind == "image":
            src = b.get("source") or {}
            if src.get("type") == "base64":
                parts.append(Image(media_type=src.get("media_type"), data=src.get("data")))
            elif src.get("type") == "url":
                parts.append(Image(url=src.get("url")))
            else:
                raise Refused(f"image.source.{src.get('type')}", "not available on this model")
        elif kind == "document":
            parts.append(_read_document(b, drops))
        else:
            raise Refused(f"content.{kind}", "this content type is not available on this model")
    return parts


def _read_document(b: dict[str, Any], drops: Dropped) -> Document:
    src = b.get("source") or {}
    stype = src.get("type")
    if b.get("context"):
        drops.add("document.context")
    title = b.get("title")
    if stype == "base64":
        return Document(media_type=src.get("media_type"), data=src.get("data"), filename=title)
    if stype == "text":
        return Document(media_type="text/plain", text=src.get("data", ""), filename=title)
    if stype == "url":
        return Document(url=src.get("url"), filename=title)
    raise Refused(f"document.source.{stype}", "not available on this model")


_TOOL_KEYS = frozenset({"name", "description", "input_schema", "type", "strict", "cache_control"})


def _read_tools(conv: Conv, value: Any, drops: Dropped) -> None:
    conv.tools = []
    for t in value:
        if t.get("type") not in (None, "custom"):  # Anthropic's own (server or schema) tools
            drops.add(f"tools.{t.get('type')}")  # offered, not forced: answered without it
            continue
        _extras(t, drops)
        for key in t.keys() - _TOOL_KEYS:
            drops.add(f"tools.{key}")
        strict = t.get("strict")
        tool = Tool(t.get("name", ""), t.get("description"), t.get("input_schema"), strict or None)
        conv.tools.append(tool)


def _read_tool_choice(conv: Conv, value: dict[str, Any]) -> None:
    kind = value.get("type")
    conv.tool_choice = {"any": "required"}.get(kind or "auto", kind)
    if kind == "tool":
        conv.tool_name = value.get("name")
    if value.get("disable_parallel_tool_use"):
        conv.parallel_tool_calls = False


__all__ = ["effort_of_budget", "fold_system", "read", "tool_id", "write"]
