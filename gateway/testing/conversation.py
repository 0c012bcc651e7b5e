"""What the fake provider reads out of a request: the conversation, tools and limits.

Every supported request shape (OpenAI chat, legacy completions and Responses input,
Anthropic Messages) is reduced to a flat list of :class:`Turn` values, from which the
fake provider decides its answer.

The token rule used everywhere by the fake provider: ``tokens(text) = ceil(chars / 4)``.
A request's prompt tokens are ``ceil(total_chars / 4)`` over all message text: system
prompt / instructions, message contents, tool results and the arguments of earlier
tool calls (tool definitions are not counted).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

CONTINUE_RE = re.compile(r"\b(continue|resume|keep going|go on)\b|继续", re.IGNORECASE)


def tokens_of(text: str) -> int:
    """The fake provider's token rule: ``ceil(len(text) / 4)``."""
    return math.ceil(len(text) / 4)


@dataclass(frozen=True)
class Turn:
    """One message of a conversation, reduced to what the fake provider looks at.

    ``role`` is ``system``, ``user``, ``assistant`` or ``tool`` (a tool result);
    ``tool_call`` marks an assistant turn that called a tool (its ``text`` is the
    call's arguments).
    """

    role: str
    text: str
    tool_call: bool = False


@dataclass(frozen=True)
class ToolSpec:
    """A tool the request offers: its name and JSON-schema parameters."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class Conversation:
    """A request as the fake provider sees it."""

    turns: list[Turn]
    tools: list[ToolSpec] = field(default_factory=list)
    #: ``None`` (auto), ``"none"``, ``"required"`` or the name of a forced tool.
    tool_choice: str | None = None
    max_tokens: int | None = None
    stream: bool = False
    include_usage: bool = False

    @property
    def prompt_chars(self) -> int:
        return sum(len(t.text) for t in self.turns)

    @property
    def prompt_tokens(self) -> int:
        return math.ceil(self.prompt_chars / 4)

    @property
    def last(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    @property
    def ends_with_prefill(self) -> bool:
        """The last message is the assistant's (a prefill the model should continue)."""
        return self.last is not None and self.last.role == "assistant" and not self.last.tool_call

    def already_said(self) -> str | None:
        """The assistant text this request asks to continue, or ``None``.

        Either the last message is an assistant message (prefill), or assistant
        messages are followed only by user messages asking to continue / resume.
        Consecutive assistant parts are joined, so a third continuation request that
        repeats each earlier part is understood too.
        """
        parts: list[str] = []
        for turn in reversed(self.turns):
            if turn.role == "assistant" and not turn.tool_call:
                parts.append(turn.text)
            elif turn.role == "user" and is_continue_instruction(turn.text):
                continue
            else:
                break
        if not parts:
            return None
        return "".join(reversed(parts))

    def wants_tool_call(self) -> ToolSpec | None:
        """The tool to call: forced by ``tool_choice``, or named (as a word) in the last
        user turn, unless that turn asks to continue an earlier answer."""
        last = self.last
        if not self.tools or self.tool_choice == "none" or last is None or last.role != "user":
            return None
        if self.tool_choice == "required":
            return self.tools[0]
        for tool in self.tools:
            if tool.name == self.tool_choice:
                return tool
        if self.already_said() is not None:
            return None  # a request to continue an answer wants the rest of its text
        text = last.text.lower()
        for tool in self.tools:
            name = tool.name.lower()
            if _names(name, text) or _names(name.replace("_", " "), text):
                return tool
        return None


def _names(name: str, text: str) -> bool:
    """``text`` names the tool as a word: "read" is in "Read the file", not in "already"."""
    return re.search(rf"(?<![a-z0-9]){re.escape(name)}(?![a-z0-9])", text) is not None


def is_continue_instruction(text: str) -> bool:
    """A short user message asking the model to continue its previous answer."""
    return len(text) < 500 and CONTINUE_RE.search(text) is not None


def _text_of(content: Any) -> str:
    """Text of an OpenAI / Anthropic / Responses content value (str or list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif part.get("type") == "tool_result":
                    out.append(_text_of(part.get("content")))
        return "".join(out)
    return str(content)


def _max_tokens(body: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _tool_choice(value: Any) -> str | None:
    if isinstance(value, str):
        return {"any": "required", "auto": None}.get(value, value)
    if isinstance(value, dict):
        kind = value.get("type")
        if kind == "any":
            return "required"
        if kind == "none":
            return "none"
        name = value.get("name") or (value.get("function") or {}).get("name")
        return name if isinstance(name, str) else None
    return None


def _openai_tools(body: dict[str, Any]) -> list[ToolSpec]:
    tools = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        fn = tool["function"] if isinstance(tool.get("function"), dict) else tool
        if isinstance(fn.get("name"), str):
            tools.append(ToolSpec(fn["name"], fn.get("parameters") or {}))
    return tools


def parse_chat(body: dict[str, Any]) -> Conversation:
    """An OpenAI ``/v1/chat/completions`` body."""
    turns: list[Turn] = []
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        role = msg.get("role", "user")
        role = "system" if role == "developer" else role
        text = _text_of(msg.get("content"))
        if role == "assistant" and msg.get("tool_calls"):
            if text:
                turns.append(Turn("assistant", text))
            args = "".join(
                str((c.get("function") or {}).get("arguments", "")) for c in msg["tool_calls"]
            )
            turns.append(Turn("assistant", args, tool_call=True))
            continue
        turns.append(Turn(role, text))
    stream_options = body.get("stream_options") or {}
    return Conversation(
        turns=turns,
        tools=_openai_tools(body),
        tool_choice=_tool_choice(body.get("tool_choice")),
        max_tokens=_max_tokens(body, "max_completion_tokens", "max_tokens"),
        stream=bool(body.get("stream")),
        include_usage=bool(stream_options.get("include_usage")),
    )


def parse_completions(body: dict[str, Any]) -> Conversation:
    """An OpenAI legacy ``/v1/completions`` body."""
    prompt = body.get("prompt")
    texts = prompt if isinstance(prompt, list) else [prompt]
    turns = [Turn("user", t if isinstance(t, str) else json.dumps(t)) for t in texts if t]
    stream_options = body.get("stream_options") or {}
    return Conversation(
        turns=turns,
        max_tokens=_max_tokens(body, "max_tokens"),
        stream=bool(body.get("stream")),
        include_usage=bool(stream_options.get("include_usage")),
    )


def parse_responses(body: dict[str, Any]) -> Conversation:
    """An OpenAI ``/v1/responses`` body (``instructions`` + ``input``)."""
    turns: list[Turn] = []
    if isinstance(body.get("instructions"), str):
        turns.append(Turn("system", body["instructions"]))
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "function_call_output":
            turns.append(Turn("tool", _text_of(item.get("output"))))
        elif kind == "function_call":
            turns.append(Turn("assistant", str(item.get("arguments", "")), tool_call=True))
        elif kind == "message":
            role = item.get("role", "user")
            role = "system" if role == "developer" else role
            turns.append(Turn(role, _text_of(item.get("content"))))
    return Conversation(
        turns=turns,
        tools=_openai_tools(body),
        tool_choice=_tool_choice(body.get("tool_choice")),
        max_tokens=_max_tokens(body, "max_output_tokens"),
        stream=bool(body.get("stream")),
    )


def parse_messages(body: dict[str, Any]) -> Conversation:
    """An Anthropic ``/v1/messages`` body."""
    turns: list[Turn] = []
    system = _text_of(body.get("system"))
    if system:
        turns.append(Turn("system", system))
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        role = msg.get("role", "user")
        content = msg.get("content")
        if isinstance(content, str):
            turns.append(Turn(role, content))
            continue
        pending: list[str] = []
        for block in content or []:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_result":
                turns.append(Turn("tool", _text_of(block.get("content"))))
            elif kind == "tool_use":
                args = json.dumps(block.get("input", {}))
                if pending:
                    turns.append(Turn(role, "".join(pending)))
                    pending = []
                turns.append(Turn("assistant", args, tool_call=True))
            elif isinstance(block.get("text"), str):
                pending.append(block["text"])
        if pending or not content:
            turns.append(Turn(role, "".join(pending)))
    tools = [
        ToolSpec(t["name"], t.get("input_schema") or {})
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("name"), str)
    ]
    return Conversation(
        turns=turns,
        tools=tools,
        tool_choice=_tool_choice(body.get("tool_choice")),
        max_tokens=_max_tokens(body, "max_tokens"),
        stream=bool(body.get("stream")),
    )


def example_arguments(tool: ToolSpec) -> dict[str, Any]:
    """Deterministic arguments for ``tool`` from its JSON schema's properties."""
    args: dict[str, Any] = {}
    props = tool.parameters.get("properties") or {}
    for name, schema in props.items():
        schema = schema if isinstance(schema, dict) else {}
        if schema.get("enum"):
            args[name] = schema["enum"][0]
            continue
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "string")
        samples: dict[str, Any] = {
            "integer": 1,
            "number": 1,
            "boolean": True,
            "array": [],
            "object": {},
        }
        args[name] = samples.get(str(kind), f"fake {name}")
    return args
