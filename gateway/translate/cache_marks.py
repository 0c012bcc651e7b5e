"""Prompt-cache markers for translated requests (docs/caching.md, "Markers"): policy
``prompt_cache.breakpoints: auto``.

Anthropic (and Bedrock's InvokeModel and Vertex's rawPredict, which take Messages bodies)
caches a prompt only up to the blocks marked ``cache_control: {"type": "ephemeral"}``;
Bedrock's Converse only up to a ``cachePoint`` block. An OpenAI-format client never marks
anything, so its agent on a Claude model would pay full input on every turn. A request
translated towards one of them whose translated body carries no marker gets the markers a
careful client sets: after the tools, after the system text and on the last message (three:
Anthropic and Bedrock take at most four), when its prompt reaches the model's cacheable
minimum. A marker below that minimum would do nothing (the provider caches nothing and
refuses nothing), so the estimate only spares the bytes.

Converse also serves models without a prompt cache, where a ``cachePoint`` is refused: it
gets markers only for Claude models (and Amazon Nova, without the tools one, which Nova
does not take). Pure: the body is changed in place and the markers counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["mark", "minimum"]

#: Anthropic's documented smallest cacheable prompt, by model family (the first pattern the
#: upstream model id contains decides; any other Claude: :data:`DEFAULT_MINIMUM`).
MINIMUMS = (
    ("opus-4-6", 4096),
    ("opus-4-5", 4096),
    ("haiku-4-5", 4096),
    ("3-5-haiku", 2048),
    ("3-haiku", 2048),
    ("nova", 1024),
)
DEFAULT_MINIMUM = 1024
# blocks that cannot carry cache_control (Anthropic refuses a marker on them)
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def _ephemeral() -> dict[str, str]:
    return {"type": "ephemeral"}  # a dict of its own per marker: a later change touches one


def _cache_point() -> dict[str, Any]:
    return {"cachePoint": {"type": "default"}}


def minimum(upstream_model: str) -> int:
    """The smallest prompt (tokens) ``upstream_model`` caches."""
    m = upstream_model.lower()
    for pattern, tokens in MINIMUMS:
        if pattern in m:
            return tokens
    return DEFAULT_MINIMUM


def mark(
    body: dict[str, Any], target: str, upstream_model: str, prompt_tokens: Callable[[], int]
) -> int:
    """Add the markers to ``body``, a request translated into ``target`` (``messages`` or
    ``converse``) for ``upstream_model``, and say how many were added: none when it
    already carries one, when the model caches nothing (a Converse model neither Claude
    nor Nova), or when ``prompt_tokens()`` (an estimate) is below the model's minimum."""
    if target == "messages":
        if _has_cache_control(body) or prompt_tokens() < minimum(upstream_model):
            return 0
        return _mark_messages(body)
    if target == "converse":
        m = upstream_model.lower()
        nova = "nova" in m
        if not (nova or "claude" in m) or _has_cache_point(body):
            return 0
        if prompt_tokens() < minimum(upstream_model):
            return 0
        return _mark_converse(body, tools=not nova)
    return 0


# ---- Messages ------------------------------------------------------------------------
def _has_cache_control(body: dict[str, Any]) -> bool:
    for tool in body.get("tools") or ():
        if isinstance(tool, dict) and "cache_control" in tool:
            return True
    system = body.get("system")
    if isinstance(system, list) and any("cache_control" in b for b in system):
        return True
    for m in body.get("messages") or ():
        content = m.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and "cache_control" in b for b in content
        ):
            return True
    return False


def _mark_messages(body: dict[str, Any]) -> int:
    added = 0
    tools = body.get("tools")
    if tools:
        tools[-1] = {**tools[-1], "cache_control": _ephemeral()}
        added += 1
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": _ephemeral()}]
        added += 1
    elif isinstance(system, list) and system:
        system[-1] = {**system[-1], "cache_control": _ephemeral()}
        added += 1
    messages = body.get("messages")
    if messages:
        last = messages[-1]
        content = last.get("content")
        if isinstance(content, str) and content:
            text = {"type": "text", "text": content, "cache_control": _ephemeral()}
            messages[-1] = {**last, "content": [text]}
            added += 1
        elif isinstance(content, list):
            for i in range(len(content) - 1, -1, -1):
                if content[i].get("type") not in _UNMARKABLE:
                    content[i] = {**content[i], "cache_control": _ephemeral()}
                    added += 1
                    break
    return added


# ---- Converse ------------------------------------------------------------------------
def _has_cache_point(body: dict[str, Any]) -> bool:
    lists = [(body.get("toolConfig") or {}).get("tools"), body.get("system")]
    lists += [m.get("content") for m in body.get("messages") or ()]
    return any(any("cachePoint" in b for b in blocks) for blocks in lists if blocks)


def _mark_converse(body: dict[str, Any], *, tools: bool) -> int:
    added = 0
    config = body.get("toolConfig")
    if tools and config and config.get("tools"):
        config["tools"].append(_cache_point())
        added += 1
    if body.get("system"):
        body["system"].append(_cache_point())
        added += 1
    messages = body.get("messages")
    if messages and messages[-1].get("content"):
        messages[-1]["content"].append(_cache_point())
        added += 1
    return added
