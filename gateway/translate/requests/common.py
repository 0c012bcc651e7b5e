"""What the request readers and writers share: stop sequences, reasoning effort, the text
of system messages, a tool call's arguments as an object, the JSON schema of an answer,
the tools a history names when the request offers none."""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway.errors import Refused
from gateway.translate.ir import Conv, Dropped, Msg, Text, ToolCall

#: Anthropic thinking budget for an OpenAI reasoning effort (budget_tokens >= 1024).
BUDGET_OF_EFFORT = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768}
#: Anthropic ``output_config.effort`` (low, medium, high, xhigh, max) for an OpenAI effort
#: (none, minimal, low, medium, high, xhigh), where the names differ; and back.
EFFORT_TO_ANTHROPIC = {"minimal": "low"}
EFFORT_FROM_ANTHROPIC = {"max": "xhigh"}


def effort_of_budget(budget: int) -> str:
    """The OpenAI reasoning effort for an Anthropic thinking budget (the inverse of
    :data:`BUDGET_OF_EFFORT` on its values: under 4096 low, under 16384 medium, else high)."""
    if budget < 4096:
        return "low"
    if budget < 16384:
        return "medium"
    return "high"


def read_stop(value: Any) -> tuple[list[str] | None, bool]:
    """Chat ``stop`` (a string or a list) -> (list, was a string)."""
    if value is None:
        return None, False
    if isinstance(value, str):
        return [value], True
    return list(value), False


def merged_turns(role: str, prev: list[Any], new: list[Any], result: str) -> list[Any]:
    """Two turns of one role as one (a format whose turns alternate, or whose results of
    one turn's calls must be one turn); in a user turn, the blocks keyed ``result`` (the
    tool results: ``toolResult``, ``functionResponse``) first."""
    merged = prev + new
    if role == "user":
        results = [b for b in merged if result in b]
        if results and len(results) < len(merged):
            merged = results + [b for b in merged if result not in b]
    return merged


def system_texts(system: list[Msg], drops: Dropped) -> list[str]:
    """The non-empty texts of system messages, for a format whose system is text blocks;
    any other part is dropped and named (``system.image``)."""
    texts = []
    for m in system:
        for p in m.parts:
            if isinstance(p, Text):
                if p.text:
                    texts.append(p.text)
            else:
                drops.add(f"system.{type(p).__name__.lower()}")
    return texts


#: The deepest arguments a call carries as an object: a request body may be at most 240
#: levels deep (``max_json_depth``), and a client's arguments are held to it at the edge
#: (gateway/web/shapes.py); a provider's may be deeper.
ARGUMENTS_DEPTH = 240
#: The deepest nesting orjson encodes.
_ENCODABLE = 254


def call_input(p: ToolCall, drops: Dropped) -> dict[str, Any]:
    """A tool call's arguments as the JSON object Anthropic and Converse carry; arguments
    that are not a JSON object, or nested deeper than :data:`ARGUMENTS_DEPTH` (they could
    not be encoded inside a body), are sent as ``{}``, named."""
    try:
        args = orjson.loads(p.arguments) if p.arguments else {}
    except orjson.JSONDecodeError:
        args = None
    if not isinstance(args, dict) or _too_deep(p.arguments, args):
        drops.add("tool_calls.function.arguments")
        args = {}
    return args


def _too_deep(text: str, value: Any) -> bool:
    """``value`` (parsed from ``text``) is nested deeper than :data:`ARGUMENTS_DEPTH`: one
    count of brackets, and an encode inside a chain of arrays only past it."""
    if text.count("{") + text.count("[") <= ARGUMENTS_DEPTH:
        return False
    chain: list[Any] = [value]
    for _ in range(_ENCODABLE - ARGUMENTS_DEPTH - 1):
        chain = [chain]
    try:
        orjson.dumps(chain)
    except orjson.JSONEncodeError:
        return True
    return False


def json_schema(conv: Conv) -> dict[str, Any] | None:
    """The ``json_schema`` the answer must follow (``response_format``), for a format that
    takes only a schema; None when the answer is free text. JSON mode without a schema is
    refused."""
    rf = conv.response_format
    if not isinstance(rf, dict) or rf.get("type") in (None, "text"):
        return None
    if rf.get("type") != "json_schema":
        raise Refused(
            f"response_format.{rf.get('type')}",
            "JSON mode without a schema is not available on this model (give a json_schema)",
        )
    return rf.get("json_schema") or {}


#: What a tool of the history that the request does not offer may be named (the names
#: Converse and Anthropic both take).
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
#: How such a tool is described to the model.
UNAVAILABLE_TOOL = (
    "Used earlier in this conversation; not available in this request. Do not call it."
)


def history_tools(conv: Conv) -> list[str]:
    """The tools to name for a request that offers none while its history holds tool
    calls or results (a summary or a title asked of an agent's conversation): Anthropic
    and Converse refuse tool blocks without tools. The names the calls use, each once
    (any the formats cannot take left out), or ``unavailable_tool`` when none is left.
    Called by a writer whose own pass saw a tool block, when the request offers no tool."""
    names = dict.fromkeys(
        p.name for m in conv.messages for p in m.parts if type(p) is ToolCall
    )  # (ordered, each once: linear however many calls the history holds)
    return [n for n in names if _TOOL_NAME.fullmatch(n)] or ["unavailable_tool"]
