"""The Anthropic Messages request writer: the neutral :class:`Conv` -> a Messages body.

System messages hoisted, turns of one role merged, tool ids made acceptable, the output
cap, thinking and sampling fitted to the model. The reader is
:mod:`gateway.translate.requests.anthropic`; the rule for every field is in the table of
:mod:`gateway.translate.requests`.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from gateway.errors import Refused
from gateway.translate.ir import (
    DEFAULT_ANTHROPIC_MAX_TOKENS,
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
    plain_id,
)
from gateway.translate.requests.common import (
    BUDGET_OF_EFFORT,
    EFFORT_TO_ANTHROPIC,
    UNAVAILABLE_TOOL,
    call_input,
    effort_of_budget,
    history_tools,
    json_schema,
    system_texts,
)

_BAD_ID = re.compile(r"[^a-zA-Z0-9_-]")


def tool_id(value: str) -> str:
    """A tool call id as Anthropic accepts it (``^[a-zA-Z0-9_-]+$``): an acceptable id as
    it is; any other with each character Anthropic refuses as ``_`` and a digest of the
    whole id appended (``call.1`` -> ``call_1_<8 hex>``), so that ids which differ only
    there stay apart (``call.1`` and ``call_1``). A function of the id alone: a call and
    its result, and every attempt of a request, give the same."""
    if value and not _BAD_ID.search(value):
        return value
    digest = hashlib.blake2s(value.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return f"{_BAD_ID.sub('_', value)}_{digest}"


def wire_id(value: str) -> str:
    """A client's tool call id as a request to Anthropic (or Converse) carries it: without
    the Gemini thought signature it may carry (:func:`~gateway.translate.ir.plain_id`),
    made acceptable (:func:`tool_id`)."""
    return tool_id(plain_id(value))


def one_id(seen: dict[str, str], client_id: str) -> None:
    """Two different ids of the request must not be one id on the wire (an id that is
    already another's rewritten form): refused rather than paired wrongly. ``seen``: the
    request's ids on the wire -> the client's."""
    if seen.setdefault(wire_id(client_id), client_id) != client_id:
        raise Refused(
            "tool_call_id",
            "two different tool call ids are the same id on this model, which takes "
            "only letters, digits, '_' and '-' (rename one)",
        )


def write(
    conv: Conv, drops: Dropped, max_output_tokens: int | None = None, caps: Caps = DEFAULT_CAPS
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": conv.model}
    _write_system(conv, body, drops)
    messages: list[dict[str, Any]] = []
    ids: dict[str, str] = {}  # tool call ids on the wire -> the client's
    last: dict[str, Any] | None = None
    tool_blocks = False  # the history holds a tool call or result: Anthropic wants tools
    for m in conv.messages:
        if m.role == "assistant":
            role = "assistant"
        elif m.role in ("system", "developer"):
            continue  # hoisted into ``system``
        else:
            role = "user"
        parts = m.parts
        content: Any
        if m.as_string and len(parts) == 1 and type(parts[0]) is Text and parts[0].text:
            content = parts[0].text
        else:
            content = []
            for p in parts:
                block = _write_part(p, drops)
                if block is not None:
                    content.append(block)
                if type(p) is ToolCall or type(p) is ToolResult:
                    one_id(ids, p.id)
                    tool_blocks = True
            if not content:
                continue  # nothing Anthropic accepts (an empty turn): skipped
        if last is not None and last["role"] == role:
            _merge(last, content)
        else:
            last = {"role": role, "content": content}
            messages.append(last)
    body["messages"] = messages
    cap = conv.max_tokens if conv.max_tokens is not None else max_output_tokens
    body["max_tokens"] = cap if cap is not None else DEFAULT_ANTHROPIC_MAX_TOKENS
    _write_tools(conv, body, drops, tool_blocks)
    thinking = _write_thinking(conv, body, drops, caps, cap is None)
    _write_sampling(conv, body, drops, caps, thinking)
    if conv.stop is not None:
        body["stop_sequences"] = conv.stop
    if conv.user is not None:
        body["metadata"] = {"user_id": conv.user}
    _write_format(conv, body, drops)
    for key, value in conv.shared.items():
        if not (key == "store" and value is False):  # Anthropic keeps no answers anyway
            drops.add(key)
    if conv.stream is not None:
        body["stream"] = conv.stream
    return body


def _write_system(conv: Conv, body: dict[str, Any], drops: Dropped) -> None:
    system = conv.system + [m for m in conv.messages if m.role in ("system", "developer")]
    if not system:
        return
    if len(system) == 1 and system[0].as_string:
        body["system"] = "".join(p.text for p in system[0].parts if isinstance(p, Text))
        return
    blocks = [{"type": "text", "text": t} for t in system_texts(system, drops)]
    body["system"] = blocks


def _merge(last: dict[str, Any], content: Any) -> None:
    """One turn out of two of the same role; tool results first, as Anthropic wants."""
    prev = last["content"]
    if isinstance(prev, str):
        prev = [{"type": "text", "text": prev}]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    merged = prev + content
    if last["role"] == "user":
        results = [b for b in merged if b["type"] == "tool_result"]
        if results and len(results) < len(merged):
            merged = results + [b for b in merged if b["type"] != "tool_result"]
    last["content"] = merged


def _write_part(p: Part, drops: Dropped) -> dict[str, Any] | None:
    if type(p) is Text:  # the most common part first, by its exact type
        return {"type": "text", "text": p.text} if p.text else None
    if isinstance(p, ToolCall):
        args = call_input(p, drops)
        return {"type": "tool_use", "id": wire_id(p.id), "name": p.name, "input": args}
    if isinstance(p, ToolResult):
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": wire_id(p.id)}
        if isinstance(p.content, str):
            out["content"] = p.content
        else:
            blocks = [_write_part(c, drops) for c in p.content]
            out["content"] = [b for b in blocks if b is not None]
        if p.is_error:
            out["is_error"] = True
        return out
    if isinstance(p, Image):
        if p.detail is not None:
            drops.add("image_url.detail")
        if p.url is not None:
            return {"type": "image", "source": {"type": "url", "url": p.url}}
        src = {"type": "base64", "media_type": p.media_type, "data": p.data}
        return {"type": "image", "source": src}
    if isinstance(p, Document):
        return _write_document(p)
    if isinstance(p, Refusal):
        return {"type": "text", "text": p.text} if p.text else None
    if isinstance(p, Reasoning):
        if p.signature:
            return {"type": "thinking", "thinking": p.text, "signature": p.signature}
        drops.add("reasoning")  # another provider's reasoning has no Anthropic signature
    return None


def _write_document(p: Document) -> dict[str, Any]:
    if p.file_id is not None:
        raise Refused("file.file_id", "an OpenAI file id is not available on this model")
    text = p.text
    if text is None and p.media_type == "text/plain" and p.data is not None:
        try:  # a text file as base64: Anthropic takes it as a plain-text document
            text = base64.b64decode(p.data, validate=True).decode("utf-8")
        except ValueError:  # not base64 (binascii.Error), not ASCII, or not UTF-8
            text = None
    if text is not None:
        src: dict[str, Any] = {"type": "text", "media_type": "text/plain", "data": text}
    elif p.url is not None:
        src = {"type": "url", "url": p.url}
    else:
        src = {"type": "base64", "media_type": p.media_type, "data": p.data}
    out: dict[str, Any] = {"type": "document", "source": src}
    if p.filename is not None:
        out["title"] = p.filename
    return out


def _write_tools(conv: Conv, body: dict[str, Any], drops: Dropped, tool_blocks: bool) -> None:
    if conv.tools is not None:
        tools = []
        for t in conv.tools:
            tool: dict[str, Any] = {"name": t.name}
            if t.description is not None:
                tool["description"] = t.description
            tool["input_schema"] = t.parameters or {"type": "object", "properties": {}}
            if t.strict:
                tool["strict"] = True
            tools.append(tool)
        body["tools"] = tools
    if not conv.tools:
        if conv.tool_choice in ("required", "tool"):
            raise Refused("tool_choice", f"{conv.tool_choice} needs tools")
        if tool_blocks:  # Anthropic refuses tool blocks without tools
            schema = {"type": "object", "properties": {}}
            body["tools"] = [
                {"name": n, "description": UNAVAILABLE_TOOL, "input_schema": schema}
                for n in history_tools(conv)
            ]
        return  # no tools: no choice to make
    choice: dict[str, Any] | None = None
    if conv.tool_choice is not None:
        kind = {"required": "any"}.get(conv.tool_choice, conv.tool_choice)
        choice = {"type": kind}
        if kind == "tool":
            choice["name"] = conv.tool_name
    if conv.parallel_tool_calls is False and conv.tool_choice != "none":
        choice = choice or {"type": "auto"}
        choice["disable_parallel_tool_use"] = True
    if choice is not None:
        body["tool_choice"] = choice


#: The output cap used for a thinking request that names none (and a model whose own cap
#: is unknown): room for the thinking budget and a default answer, within the smallest
#: output cap of the Claude models that think (32000, Opus 4 and 4.1).
THINKING_MAX_TOKENS = 32000


def _write_thinking(
    conv: Conv, body: dict[str, Any], drops: Dropped, caps: Caps, no_cap: bool
) -> bool:
    """Thinking from the effort (or budget) asked for; True when it is on. With ``no_cap``
    (neither the request nor the model gives one) ``max_tokens`` is raised to make room
    for the thinking and a default-sized answer."""
    effort, budget = conv.effort, conv.thinking_budget
    if (effort is None or effort == "none") and budget is None:
        return False
    if caps.reasoning is False or conv.tool_choice in ("required", "tool"):
        drops.add("reasoning_effort")  # no reasoning here; or forced tool use (no thinking)
        return False
    last = next((m for m in reversed(body["messages"]) if m["role"] == "assistant"), None)
    if last is not None and isinstance(last["content"], list):
        kinds = [b["type"] for b in last["content"]]
        if "tool_use" in kinds and kinds[0] not in ("thinking", "redacted_thinking"):
            # Anthropic wants the signed thinking of a tool-use turn handed back; a client
            # of another format has none, so this turn goes on without thinking
            drops.add("reasoning_effort")
            return False
    if caps.adaptive_thinking:
        if effort is None and budget is not None:
            effort = effort_of_budget(budget)
        if no_cap:
            room = BUDGET_OF_EFFORT.get(effort or "", 0) + DEFAULT_ANTHROPIC_MAX_TOKENS
            body["max_tokens"] = min(room, THINKING_MAX_TOKENS)
        body["thinking"] = {"type": "adaptive"}
        if conv.reasoning_summary not in (None, "none"):
            body["thinking"]["display"] = "summarized"
        body["output_config"] = {"effort": EFFORT_TO_ANTHROPIC.get(effort or "", effort)}
        return True
    if budget is None and effort is not None:
        budget = BUDGET_OF_EFFORT.get(effort)
        if budget is None:
            drops.add("reasoning_effort")
            return False
    if budget is None:
        return False
    if no_cap:
        body["max_tokens"] = min(budget + DEFAULT_ANTHROPIC_MAX_TOKENS, THINKING_MAX_TOKENS)
        budget = min(budget, body["max_tokens"] - DEFAULT_ANTHROPIC_MAX_TOKENS)
    cap = body["max_tokens"]
    if budget >= cap:
        if cap - 1 < 1024:
            drops.add("reasoning_effort")  # no room for thinking under this output cap
            return False
        budget = cap - 1
    body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    return True


def _write_sampling(
    conv: Conv, body: dict[str, Any], drops: Dropped, caps: Caps, thinking: bool
) -> None:
    temperature, top_p = conv.temperature, conv.top_p
    if temperature is not None:
        if not caps.sampling or (thinking and temperature != 1):
            drops.add("temperature")  # thinking runs at temperature 1 only
        elif isinstance(temperature, int | float) and temperature > 1:
            raise Refused("temperature", "Anthropic models take a temperature from 0 to 1")
        else:
            body["temperature"] = temperature
    if top_p is not None:
        if not caps.sampling or (thinking and isinstance(top_p, int | float) and top_p < 0.95):
            drops.add("top_p")  # thinking takes top_p from 0.95 only
        else:
            body["top_p"] = top_p


def _write_format(conv: Conv, body: dict[str, Any], drops: Dropped) -> None:
    spec = json_schema(conv)
    if spec is None:
        return
    for key in ("name", "description"):
        if spec.get(key) is not None:
            drops.add(f"response_format.json_schema.{key}")
    config = body.setdefault("output_config", {})
    config["format"] = {"type": "json_schema", "schema": spec.get("schema") or {}}


__all__ = ["THINKING_MAX_TOKENS", "one_id", "tool_id", "write"]
