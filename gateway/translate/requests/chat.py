# long: both directions of one format, read and write, so that each field's two rules sit together
"""OpenAI Chat Completions requests <-> the neutral :class:`Conv`.

Reference: https://platform.openai.com/docs/api-reference/chat/create
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
    unset,
)
from gateway.translate.requests.common import effort_of_budget, read_stop

#: Chat fields with the same name and meaning in the Responses API.
SHARED = frozenset(
    {"metadata", "service_tier", "store", "safety_identifier", "prompt_cache_key",
     "prompt_cache_retention", "verbosity"}
)  # fmt: skip
#: Chat fields no other format has; losing them changes no answer's meaning (sampling
#: nudges and a latency hint), so they are dropped and named.
DROPPED = frozenset({"frequency_penalty", "presence_penalty", "seed", "prediction"})
#: Chat fields whose loss would change the answer: refused (400 naming the field).
REFUSED = {
    "logprobs": "log probabilities are not available on this model",
    "top_logprobs": "log probabilities are not available on this model",
    "logit_bias": "token biases are tokenizer-specific and not available on this model",
    "audio": "audio output is not available on this model",
    "functions": "not available on this model (use tools)",
    "function_call": "not available on this model (use tool_choice)",
    "web_search_options": "web search is not available on this model",
}


def read(body: dict[str, Any], drops: Dropped) -> Conv:
    conv = Conv(model=body.get("model"))
    for key, value in body.items():
        reader = _READERS.get(key)
        if reader is not None:
            reader(conv, value, drops)
        elif value is None or key == "model":
            continue
        elif key in SHARED:
            conv.shared[key] = value
        elif key in REFUSED:
            # (web_search_options: {} asks for a search with the defaults)
            if not unset(value) or (key == "web_search_options" and value == {}):
                raise Refused(key, REFUSED[key])
        elif key == "n":
            if value != 1:
                raise Refused("n", "only one choice can be generated on this model")
        elif key == "modalities":
            if value != ["text"]:
                raise Refused(key, "only text output is available on this model")
        elif not (key in DROPPED and unset(value)):
            drops.add(key)
    return conv


def _messages(conv: Conv, value: Any, drops: Dropped) -> None:
    messages = conv.messages
    for m in value or ():
        role = m.get("role")
        content = m.get("content")
        if "name" in m and m["name"] is not None:
            drops.add("messages.name")
        if role == "user":
            if isinstance(content, str):
                messages.append(Msg("user", [Text(content)], True))
            else:
                messages.append(Msg("user", _parts(content)))
        elif role == "assistant":
            messages.append(_assistant(m, content))
        elif role == "tool":
            result = content if isinstance(content, str) else _parts(content)
            messages.append(Msg("tool", [ToolResult(str(m.get("tool_call_id")), result)]))
        elif role in ("system", "developer"):
            msg = Msg(role, _parts(content), isinstance(content, str))
            (messages if messages else conv.system).append(msg)
        else:
            raise Refused(f"messages.role.{role}", "this role is not available on this model")


def _assistant(m: dict[str, Any], content: Any) -> Msg:
    if m.get("audio") or m.get("function_call"):
        key = "audio" if m.get("audio") else "function_call"
        raise Refused(f"messages.{key}", "not available on this model")
    parts: list[Part] = []
    reasoning = m.get("reasoning_content")
    if reasoning:
        parts.append(Reasoning(reasoning))
    if content:
        if isinstance(content, str):
            parts.append(Text(content))
        else:
            parts.extend(_parts(content))
    if m.get("refusal"):
        parts.append(Refusal(m["refusal"]))
    calls = m.get("tool_calls")
    if calls:
        for call in calls:
            if call.get("type", "function") != "function":
                raise Refused(f"tool_calls.{call.get('type')}", "not available on this model")
            fn = call.get("function") or {}
            args = fn.get("arguments") or ""
            parts.append(ToolCall(str(call.get("id")), fn.get("name", ""), args))
    return Msg("assistant", parts, isinstance(content, str))


def _parts(content: Any) -> list[Part]:
    if content is None:
        return []
    if isinstance(content, str):
        return [Text(content)]
    parts: list[Part] = []
    for p in content:
        kind = p.get("type")
        if kind == "text":
            parts.append(Text(p.get("text", "")))
        elif kind == "image_url":
            img = p.get("image_url") or {}
            url = img.get("url", "") if isinstance(img, dict) else str(img)
            detail = img.get("detail") if isinstance(img, dict) else None
            detail = None if detail == "auto" else detail
            parsed = parse_data_url(url)
            if parsed:
                parts.append(Image(media_type=parsed[0], data=parsed[1], detail=detail))
            else:
                parts.append(Image(url=url, detail=detail))
        elif kind == "file":
            parts.append(_file(p.get("file") or {}))
        elif kind == "refusal":
            parts.append(Refusal(p.get("refusal", "")))
        else:
            raise Refused(f"messages.content.{kind}", "this content type is not available")
    return parts


def _file(f: dict[str, Any]) -> Document:
    name, data = f.get("filename"), f.get("file_data")
    parsed = parse_data_url(data or "")
    if parsed:
        return Document(media_type=parsed[0], data=parsed[1], filename=name)
    if data:  # bare base64, as some clients send it (OpenAI takes PDFs)
        return Document(media_type="application/pdf", data=data, filename=name)
    return Document(file_id=f.get("file_id"), filename=name)


def _tools(conv: Conv, value: Any, drops: Dropped) -> None:
    if value is None:
        return
    conv.tools = []
    for t in value:
        if t.get("type", "function") != "function":
            raise Refused(f"tools.{t.get('type')}", "this tool type is not available on this model")
        fn = t.get("function") or {}
        conv.tools.append(
            Tool(fn.get("name", ""), fn.get("description"), fn.get("parameters"), fn.get("strict"))
        )


def _tool_choice(conv: Conv, value: Any, drops: Dropped) -> None:
    if value is None:
        return
    if isinstance(value, str):
        conv.tool_choice = value
    elif value.get("type") == "function":
        conv.tool_choice = "tool"
        conv.tool_name = (value.get("function") or {}).get("name")
    else:
        raise Refused(f"tool_choice.{value.get('type')}", "not available on this model")


def _set(name: str) -> Any:
    def setter(conv: Conv, value: Any, drops: Dropped) -> None:
        setattr(conv, name, value)

    return setter


def _max_tokens(field: str) -> Any:
    def setter(conv: Conv, value: Any, drops: Dropped) -> None:
        if value is not None and (conv.max_tokens is None or field == "max_completion_tokens"):
            conv.max_tokens = value
            conv.max_tokens_field = field

    return setter


def _stop(conv: Conv, value: Any, drops: Dropped) -> None:
    conv.stop, conv.stop_as_string = read_stop(value)


def _stream_options(conv: Conv, value: Any, drops: Dropped) -> None:
    if isinstance(value, dict):
        conv.include_usage = value.get("include_usage")
        if any(k != "include_usage" for k in value):
            drops.add("stream_options")


_READERS: dict[str, Any] = {
    "messages": _messages,
    "tools": _tools,
    "tool_choice": _tool_choice,
    "parallel_tool_calls": _set("parallel_tool_calls"),
    "max_tokens": _max_tokens("max_tokens"),
    "max_completion_tokens": _max_tokens("max_completion_tokens"),
    "temperature": _set("temperature"),
    "top_p": _set("top_p"),
    "stop": _stop,
    "stream": _set("stream"),
    "stream_options": _stream_options,
    "reasoning_effort": _set("effort"),
    "user": _set("user"),
    "response_format": _set("response_format"),
}


# ---------------------------------------------------------------- writing


def write(conv: Conv, drops: Dropped, caps: Caps = DEFAULT_CAPS) -> dict[str, Any]:
    body: dict[str, Any] = {"model": conv.model, "messages": _write_messages(conv, drops)}
    if conv.tools is not None:
        body["tools"] = [_write_tool(t) for t in conv.tools]
    if conv.tool_choice is not None:
        body["tool_choice"] = (
            {"type": "function", "function": {"name": conv.tool_name}}
            if conv.tool_choice == "tool"
            else conv.tool_choice
        )
    if conv.parallel_tool_calls is not None:
        body["parallel_tool_calls"] = conv.parallel_tool_calls
    effort = _effort(conv, drops, caps)
    if conv.max_tokens is not None:
        # reasoning models take only max_completion_tokens; other servers know max_tokens
        field = conv.max_tokens_field or ("max_completion_tokens" if effort else "max_tokens")
        body[field] = conv.max_tokens
    _write_sampling(conv, body, drops, caps)
    if conv.stop is not None:
        body["stop"] = conv.stop[0] if conv.stop_as_string and conv.stop else conv.stop
    if effort is not None:
        body["reasoning_effort"] = effort
    if conv.reasoning_summary is not None:
        drops.add("reasoning.summary")
    if conv.user is not None:
        body["user"] = conv.user
    if conv.response_format is not None:
        body["response_format"] = conv.response_format
    body.update(conv.shared)
    if conv.stream is not None:
        body["stream"] = conv.stream
        if conv.stream:
            # always: the gateway counts tokens; the client's own choice is in
            # conv.include_usage, for the stream translator
            body["stream_options"] = {"include_usage": True}
    return body


def _write_messages(conv: Conv, drops: Dropped) -> list[dict[str, Any]]:
    """The system turns, then the conversation: a tool turn's results one message each."""
    messages: list[dict[str, Any]] = [_write_plain(m, drops) for m in conv.system]
    for m in conv.messages:
        if m.role == "assistant":
            msg = _write_assistant(m, drops)
            if msg is not None:
                messages.append(msg)
        elif m.role == "tool":
            for p in m.parts:
                if isinstance(p, ToolResult):
                    messages.append(_write_result(p, drops))
        else:
            messages.append(_write_plain(m, drops))
    return messages


def _effort(conv: Conv, drops: Dropped, caps: Caps) -> str | None:
    """The ``reasoning_effort`` to send: the client's, or its thinking budget's; none (and
    dropped) where the server takes no reasoning."""
    effort = conv.effort
    if effort is None and conv.thinking_budget is not None:
        effort = effort_of_budget(conv.thinking_budget)
    if effort is not None and caps.reasoning is False:
        drops.add("reasoning_effort")
        effort = None
    return effort


def _write_sampling(conv: Conv, body: dict[str, Any], drops: Dropped, caps: Caps) -> None:
    for key in ("temperature", "top_p"):
        value = getattr(conv, key)
        if value is None:
            continue
        if caps.sampling:
            body[key] = value
        else:
            drops.add(key)


def _content(parts: list[Part], drops: Dropped) -> str | list[dict[str, Any]]:
    """Content that is one text part is written as a string (every OpenAI-compatible
    server takes a string; not all take a list)."""
    if len(parts) == 1 and isinstance(parts[0], Text):
        return parts[0].text
    return [_write_part(p, drops) for p in parts]


def _write_plain(m: Msg, drops: Dropped) -> dict[str, Any]:
    if m.as_string and all(isinstance(p, Text) for p in m.parts):
        return {"role": m.role, "content": "".join(p.text for p in m.parts if isinstance(p, Text))}
    return {"role": m.role, "content": _content(m.parts, drops)}


def _write_part(p: Part, drops: Dropped) -> dict[str, Any]:
    if isinstance(p, Text):
        return {"type": "text", "text": p.text}
    if isinstance(p, Image):
        url = p.url if p.url is not None else data_url(p.media_type, p.data or "")
        img: dict[str, Any] = {"url": url}
        if p.detail is not None:
            img["detail"] = p.detail
        return {"type": "image_url", "image_url": img}
    if isinstance(p, Document):
        if p.text is not None:
            if p.filename is not None:
                drops.add("document.title")
            return {"type": "text", "text": p.text}
        if p.url is not None:
            raise Refused("document.source.url", "a document by URL is not available here")
        f: dict[str, Any] = (
            {"file_id": p.file_id}
            if p.file_id is not None
            else {"file_data": data_url(p.media_type, p.data or "")}
        )
        if p.filename is not None:
            f["filename"] = p.filename
        return {"type": "file", "file": f}
    if isinstance(p, Refusal):
        return {"type": "refusal", "refusal": p.text}
    raise Refused(f"content.{type(p).__name__.lower()}", "not available in this position")


def _write_assistant(m: Msg, drops: Dropped) -> dict[str, Any] | None:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    out: dict[str, Any] = {"role": "assistant"}
    for p in m.parts:
        if isinstance(p, Text):
            texts.append(p.text)
        elif isinstance(p, ToolCall):
            calls.append(
                {
                    "id": plain_id(p.id),
                    "type": "function",
                    "function": {"name": p.name, "arguments": p.arguments},
                }
            )
        elif isinstance(p, Reasoning):
            drops.add("reasoning")  # a provider's own reasoning is not sent to another
        elif isinstance(p, Refusal):
            out["refusal"] = p.text
        else:
            drops.add(f"assistant.{type(p).__name__.lower()}")
    if not texts and not calls and "refusal" not in out:
        return None  # only reasoning: nothing left to send
    if len(texts) == 1 or (m.as_string and texts):
        out["content"] = "".join(texts)
    elif texts:
        out["content"] = [{"type": "text", "text": t} for t in texts]
    else:
        out["content"] = None
    if calls:
        out["tool_calls"] = calls
    return out


def _write_result(r: ToolResult, drops: Dropped) -> dict[str, Any]:
    if r.is_error:
        drops.add("tool_result.is_error")
    content: Any = r.content
    if not isinstance(content, str):
        texts: list[Part] = []
        for p in content:
            if isinstance(p, Text):
                texts.append(p)
            elif isinstance(p, Document) and p.text is not None:
                texts.append(Text(p.text))
            else:
                drops.add(f"tool_result.{type(p).__name__.lower()}")
        content = _content(texts, drops) if texts else ""
    return {"role": "tool", "tool_call_id": plain_id(r.id), "content": content}


def _write_tool(t: Tool) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": t.name}
    if t.description is not None:
        fn["description"] = t.description
    if t.parameters is not None:
        fn["parameters"] = t.parameters
    if t.strict is not None:
        fn["strict"] = t.strict
    return {"type": "function", "function": fn}
