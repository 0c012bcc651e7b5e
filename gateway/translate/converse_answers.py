"""A Bedrock Converse JSON answer -> the neutral :class:`Answer` (written for the client by
:mod:`gateway.translate.answers`; no client speaks Converse, so there is no writer).

``output.message.content`` blocks: ``text``, ``toolUse`` (``toolUseId``, ``name``,
``input``) and ``reasoningContent.reasoningText`` (``text``, ``signature``) are kept;
``reasoningContent.redactedContent``, server tools' uses and results (a ``toolUse`` with
a ``type``, ``toolResult``), images, documents and citations are not. ``stopReason``
through :func:`gateway.translate.stops.from_converse`, ``usage`` through
:func:`gateway.translate.usage.from_converse`. A Converse answer has no id (AWS names the
request in a header): the answer gets a random one, as a stream does.

Reference: https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.translate import stops, usage
from gateway.translate.ir import Answer, Part, Reasoning, Text, ToolCall
from gateway.translate.streams.write import base_id


def read_converse(body: dict[str, Any]) -> Answer:
    message = (body.get("output") or {}).get("message") or {}
    parts: list[Part] = []
    for b in message.get("content") or ():
        if "text" in b:
            parts.append(Text(b["text"]))
        elif "toolUse" in b:
            use = b["toolUse"]
            if use.get("type") is not None:
                continue  # a server tool's use: not the client's to run
            args = orjson.dumps(use.get("input") or {}).decode()
            parts.append(ToolCall(str(use.get("toolUseId")), use.get("name", ""), args))
        elif "reasoningContent" in b:
            r = b["reasoningContent"].get("reasoningText")
            if r:
                parts.append(Reasoning(r.get("text", ""), r.get("signature")))
    u = body.get("usage")
    return Answer(
        base_id(None),
        None,
        parts,
        stops.from_converse(body.get("stopReason")),
        usage.from_converse(u) if isinstance(u, dict) else None,
    )


__all__ = ["read_converse"]
