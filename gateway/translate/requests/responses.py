# long: both directions of one format, read and write, so that each field's two rules sit together
"""OpenAI Responses requests <-> the neutral :class:`Conv`.

Reference: https://platform.openai.com/docs/api-reference/responses/create
The rule for every field is in the table of :mod:`gateway.translate.requests`.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import Refused
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
    Tool,
    ToolCall,
    ToolResult,
    data_url,
    parse_data_url,
    plain_id,
    qualified,
    unseal_signature,
    unset,
)
from gateway.translate.requests.common import effort_of_budget

#: Responses fields with the same name and meaning in Chat Completions.
SHARED = frozenset(
    {"metadata", "service_tier", "store", "safety_identifier", "prompt_cache_key",
     "prompt_cache_retention"}
)  # fmt: skip
#: Responses fields no other format has; losing them changes no answer's meaning.
#: (Any other unknown field is dropped and named too.)
DROPPED = frozenset({"include", "truncation", "max_tool_calls", "stream_options"})
#: Responses fields that point at state held by OpenAI, or ask for what no other format
#: gives: refused.
REFUSED = {
    "previous_response_id": "state held by OpenAI is not available on this model",
    "conversation": "state held by OpenAI is not available on this model",
    "prompt": "prompt templates held by OpenAI are not available on this model",
    "background": "background responses are not available on this model",
    "top_logprobs": "log probabilities are not available on this model",
}


def read(body: dict[str, Any], drops: Dropped) -> Conv:
    conv = Conv(model=body.get("model"))
    for key, value in body.items():
        if value is None or key == "model":
            continue
        if key == "input":
            _read_input(conv, value, drops)
        elif key == "instructions":
            conv.system.insert(0, Msg("system", [Text(value)], True))
        elif key in ("temperature", "top_p", "stream", "parallel_tool_calls", "user"):
            setattr(conv, key, value)
        elif key == "max_output_tokens":
            conv.max_tokens = value
        elif key == "tools":
            _read_tools(conv, value, drops)
        elif key == "tool_choice":
            _read_tool_choice(conv, value)
        elif key == "reasoning":
            conv.effort = value.get("effort")
            conv.reasoning_summary = value.get("summary") or value.get("generate_summary")
        elif key == "text":
            _read_text(conv, value, drops)
        elif key in SHARED:
            conv.shared[key] = value
        elif key in REFUSED:
            if not unset(value):
                raise Refused(key, REFUSED[key])
        elif not (key == "truncation" and value == "disabled"):
            drops.add(key)
    return conv


def _read_text(conv: Conv, value: dict[str, Any], drops: Dropped) -> None:
    fmt = value.get("format")
    if fmt is not None:
        if fmt.get("type") == "json_schema":
            schema = {k: v for k, v in fmt.items() if k != "type"}
            conv.response_format = {"type": "json_schema", "json_schema": schema}
        else:
            conv.response_format = fmt
    if value.get("verbosity") is not None:
        conv.shared["verbosity"] = value["verbosity"]


def _open_turn(conv: Conv) -> Msg | None:
    """The assistant turn an output item read now belongs to, if the last one is."""
    last = conv.messages[-1] if conv.messages else None
    return last if last is not None and last.role == "assistant" else None


def _read_input(conv: Conv, value: Any, drops: Dropped) -> None:
    if isinstance(value, str):
        conv.messages.append(Msg("user", [Text(value)], True))
        return
    for item in value:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role", "user")
            content = item.get("content")
            msg = Msg(role, _read_parts(content), isinstance(content, str))
            turn = _open_turn(conv) if role == "assistant" else None
            if role in ("system", "developer") and not conv.messages:
                conv.system.append(msg)
            elif turn is not None and not any(isinstance(p, Text | Refusal) for p in turn.parts):
                turn.parts.extend(msg.parts)  # the text after this turn's reasoning
                turn.as_string = msg.as_string
            else:
                conv.messages.append(msg)
        elif kind in ("function_call", "reasoning"):
            part: Part
            if kind == "function_call":
                args, name = item.get("arguments", ""), item.get("name", "")
                if item.get("namespace"):  # a function of a namespace tool, flattened
                    name = qualified(item["namespace"], name)
                part = ToolCall(str(item.get("call_id")), name, args)
            else:
                text = "".join(s.get("text", "") for s in item.get("summary") or ())
                part = Reasoning(text, unseal_signature(item.get("encrypted_content")))
            turn = _open_turn(conv)
            if turn is not None:
                turn.parts.append(part)
            else:
                conv.messages.append(Msg("assistant", [part]))
        elif kind == "function_call_output":
            out = item.get("output")
            content = out if isinstance(out, str) else _read_parts(out)
            conv.messages.append(Msg("tool", [ToolResult(str(item.get("call_id")), content)]))
        elif kind == "item_reference":
            raise Refused("input.item_reference", "items held by OpenAI are not available")
        else:
            drops.add(f"input.{kind}")  # the record of a built-in tool's run


def _read_parts(content: Any) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [Text(content)]
    parts: list[Part] = []
    for p in content:
        kind = p.get("type")
        if kind in ("input_text", "output_text"):
            parts.append(Text(p.get("text", "")))
        elif kind == "refusal":
            parts.append(Refusal(p.get("refusal", "")))
        elif kind == "input_image":
            detail = p.get("detail")
            detail = None if detail == "auto" else detail
            url = p.get("image_url")
            if url is None:
                raise Refused("input_image.file_id", "an OpenAI file id is not available here")
            parsed = parse_data_url(url)
            if parsed:
                parts.append(Image(media_type=parsed[0], data=parsed[1], detail=detail))
            else:
                parts.append(Image(url=url, detail=detail))
        elif kind == "input_file":
            parsed = parse_data_url(p.get("file_data") or "")
            name = p.get("filename")
            if parsed:
                parts.append(Document(media_type=parsed[0], data=parsed[1], filename=name))
            elif p.get("file_url"):
                parts.append(Document(url=p["file_url"], filename=name))
            else:
                parts.append(Document(file_id=p.get("file_id"), filename=name))
        else:
            raise Refused(f"content.{kind}", "this content type is not available on this model")
    return parts


def _read_tools(conv: Conv, value: Any, drops: Dropped) -> None:
    conv.tools = []
    for t in value:
        kind = t.get("type")
        if kind == "namespace":
            _read_namespace(conv.tools, t, drops)
            continue
        if kind != "function":  # built-in (run by OpenAI) or custom: nothing to map it to
            drops.add(f"tools.{kind}")  # offered, not forced: the model answers without it
            continue
        tool = Tool(t.get("name", ""), t.get("description"), t.get("parameters"), t.get("strict"))
        conv.tools.append(tool)
    names = [t.name for t in conv.tools]
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise Refused("tools.namespace", f"two tools are named {twice!r} once flattened")


def _read_namespace(tools: list[Tool], t: dict[str, Any], drops: Dropped) -> None:
    """A namespace tool: a group of the client's own functions (which the client runs, as
    any function). The other formats have no groups: each function is offered as
    ``<namespace>__<name>`` (:func:`namespaces` names it back in an answer)."""
    ns = t.get("name", "")
    if t.get("description"):
        drops.add("tools.namespace.description")
    for f in t.get("tools") or ():
        kind = f.get("type")
        if kind != "function":
            drops.add(f"tools.namespace.{kind}")
            continue
        name = qualified(ns, f.get("name", ""))
        tools.append(Tool(name, f.get("description"), f.get("parameters"), f.get("strict")))


def namespaces(tools: Any) -> dict[str, tuple[str, str]]:
    """The functions of a Responses request's namespace tools as the other formats name
    them (``<namespace>__<name>``) -> (namespace, name): what a call of one made by a model
    of another format is turned back into for the client."""
    out: dict[str, tuple[str, str]] = {}
    if not isinstance(tools, list):
        return out
    for t in tools:
        if isinstance(t, dict) and t.get("type") == "namespace":
            ns = t.get("name", "")
            for f in t.get("tools") or ():
                if isinstance(f, dict) and f.get("type") == "function":
                    out[qualified(ns, f.get("name", ""))] = (ns, f.get("name", ""))
    return out


def _read_tool_choice(conv: Conv, value: Any) -> None:
    if isinstance(value, str):
        conv.tool_choice = value
    elif value.get("type") == "function":
        name = value.get("name")
        if value.get("namespace"):
            name = qualified(value["namespace"], name or "")
        conv.tool_choice, conv.tool_name = "tool", name
    else:
        raise Refused(f"tool_choice.{value.get('type')}", "not available on this model")


# ---------------------------------------------------------------- writing


def write(conv: Conv, drops: Dropped, caps: Caps = DEFAULT_CAPS) -> dict[str, Any]:
    body: dict[str, Any] = {"model": conv.model}
    body["input"] = _write_input(conv, body, drops)
    if conv.tools is not None:
        body["tools"] = [_write_tool(t) for t in conv.tools]
    if conv.tool_choice is not None:
        body["tool_choice"] = (
            {"type": "function", "name": conv.tool_name}
            if conv.tool_choice == "tool"
            else conv.tool_choice
        )
    if conv.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = conv.parallel_tool_calls
    if conv.max_tokens is not None:
        body["max_output_tokens"] = conv.max_tokens
    for key in ("temperature", "top_p"):
        value = getattr(conv, key)
        if value is not None:
            if caps.sampling:
                body[key] = value
            else:
                drops.add(key)
    if conv.user is not None:
        body["user"] = conv.user
    if conv.stop is not None:
        raise Refused("stop", "stop sequences are not available on this model (Responses API)")
    _write_reasoning(conv, body, drops, caps)
    _write_text(conv, body)
    if conv.stream is not None:
        body["stream"] = conv.stream
    return body


def _write_input(conv: Conv, body: dict[str, Any], drops: Dropped) -> list[dict[str, Any]]:
    """The ``input`` items; a first system turn written as a string goes to
    ``instructions`` (set in ``body``) instead."""
    items: list[dict[str, Any]] = []
    system = conv.system
    if system and system[0].role == "system" and system[0].as_string:
        body["instructions"] = "".join(p.text for p in system[0].parts if isinstance(p, Text))
        system = system[1:]
    for m in system:
        items.append(_message(m, drops))
    for m in conv.messages:
        if m.role == "assistant":
            _write_assistant(m, items, drops)
        elif m.role == "tool":
            for p in m.parts:
                if isinstance(p, ToolResult):
                    items.append(_write_result(p, drops))
        else:
            items.append(_message(m, drops))
    return items


def _write_reasoning(conv: Conv, body: dict[str, Any], drops: Dropped, caps: Caps) -> None:
    effort = conv.effort
    if effort is None and conv.thinking_budget is not None:
        effort = effort_of_budget(conv.thinking_budget)
    if effort is None and conv.reasoning_summary is None:
        return
    if caps.reasoning is False:
        drops.add("reasoning_effort")
        return
    reasoning: dict[str, Any] = {}
    if effort is not None:
        reasoning["effort"] = effort
    if conv.reasoning_summary is not None:
        reasoning["summary"] = conv.reasoning_summary
    body["reasoning"] = reasoning


def _write_text(conv: Conv, body: dict[str, Any]) -> None:
    text: dict[str, Any] = {}
    rf = conv.response_format
    if rf is not None:
        if rf.get("type") == "json_schema":
            text["format"] = {"type": "json_schema", **(rf.get("json_schema") or {})}
        else:
            text["format"] = rf
    for key, value in conv.shared.items():
        if key == "verbosity":
            text["verbosity"] = value
        else:
            body[key] = value
    if text:
        body["text"] = text


def _message(m: Msg, drops: Dropped) -> dict[str, Any]:
    content: Any
    if m.as_string and all(isinstance(p, Text) for p in m.parts):
        content = "".join(p.text for p in m.parts if isinstance(p, Text))
    else:
        content = [c for c in (_write_part(p, drops) for p in m.parts) if c]
    return {"type": "message", "role": m.role, "content": content}


def _write_assistant(m: Msg, items: list[dict[str, Any]], drops: Dropped) -> None:
    pending: list[Part] = []

    def flush() -> None:
        if not pending:
            return
        if all(isinstance(p, Text) for p in pending):
            # an assistant message takes text as a string (a list would need output items
            # with ids this gateway cannot give)
            text = "".join(p.text for p in pending if isinstance(p, Text))
            items.append({"type": "message", "role": "assistant", "content": text})
        else:
            content = [_write_output_part(p) for p in pending]
            items.append({"type": "message", "role": "assistant", "content": content})
        pending.clear()

    for p in m.parts:
        if isinstance(p, ToolCall):
            flush()
            items.append(
                {
                    "type": "function_call",
                    "call_id": plain_id(p.id),
                    "name": p.name,
                    "arguments": p.arguments,
                }
            )
        elif isinstance(p, Reasoning):
            drops.add("reasoning")  # no OpenAI encrypted_content: another provider's reasoning
        elif isinstance(p, Text | Refusal):
            pending.append(p)
        else:
            drops.add(f"assistant.{type(p).__name__.lower()}")
    flush()


def _write_output_part(p: Part) -> dict[str, Any]:
    if isinstance(p, Refusal):
        return {"type": "refusal", "refusal": p.text}
    text = p.text if isinstance(p, Text) else ""
    return {"type": "output_text", "text": text, "annotations": []}


def _write_part(p: Part, drops: Dropped) -> dict[str, Any] | None:
    if isinstance(p, Text):
        return {"type": "input_text", "text": p.text}
    if isinstance(p, Image):
        url = p.url if p.url is not None else data_url(p.media_type, p.data or "")
        return {"type": "input_image", "image_url": url, "detail": p.detail or "auto"}
    if isinstance(p, Document):
        if p.text is not None:
            if p.filename is not None:
                drops.add("document.title")
            return {"type": "input_text", "text": p.text}
        out: dict[str, Any] = {"type": "input_file"}
        if p.file_id is not None:
            out["file_id"] = p.file_id
        elif p.url is not None:
            out["file_url"] = p.url
        else:
            out["file_data"] = data_url(p.media_type, p.data or "")
        if p.filename is not None:
            out["filename"] = p.filename
        return out
    drops.add(f"content.{type(p).__name__.lower()}")
    return None


def _write_result(r: ToolResult, drops: Dropped) -> dict[str, Any]:
    if r.is_error:
        drops.add("tool_result.is_error")
    output: Any = r.content
    if not isinstance(output, str):
        output = [c for c in (_write_part(p, drops) for p in output) if c]
    return {"type": "function_call_output", "call_id": plain_id(r.id), "output": output}


def _write_tool(t: Tool) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": t.name}
    if t.description is not None:
        tool["description"] = t.description
    tool["parameters"] = t.parameters
    # explicit: Responses makes a tool without ``strict`` strict, other formats do not
    tool["strict"] = bool(t.strict)
    return tool
