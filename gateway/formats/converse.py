"""Amazon Bedrock's Converse API (``converse``): the format of Bedrock's models other than
Anthropic's. ``messages`` whose roles alternate (user first), each a list of content
blocks keyed by their kind (``{"text"}``, ``{"image"}``, ``{"toolUse"}``,
``{"toolResult"}``, ``{"reasoningContent"}``), a top-level ``system`` list of
``{"text"}`` blocks, the output cap in ``inferenceConfig.maxTokens``; an answer's message
in ``output.message``, cut with ``stopReason: max_tokens``; usage as ``inputTokens`` /
``outputTokens``.

An upstream format only: no client calls it (it has no paths and no client stream
rules). The gateway sends requests in it (translated, or its own summary request) and
reads its JSON answers, streams and errors through :mod:`gateway.translate`. Inside the
gateway its errors and in-band stream errors have Anthropic's shape (``{"type": "error",
"error": {"type": <the AWS exception>, "message"}}``): Bedrock's own (a status, an
``x-amzn-errortype`` header and ``{"message"}``) are rewritten into it before anything
reads them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from gateway.formats.base import Format
from gateway.formats.messages import Messages, turn_problems
from gateway.formats.parts import as_dict, as_list, plain_text, role, text_of
from gateway.formats.usage import Usage, from_converse

if TYPE_CHECKING:
    from gateway.formats.event_kinds import Kind
    from gateway.formats.overlap import Diverged, Out
    from gateway.formats.splice import Splice
    from gateway.formats.transcript import Transcript


def _blocks(entry: Any) -> list[Any]:
    return as_list(entry.get("content")) if isinstance(entry, Mapping) else []


def _ids(entry: Any, who: str, kind: str, key: str) -> list[str]:
    """The ``key`` of each ``kind`` block of a ``who`` message."""
    if role(entry) != who:
        return []
    ids = [as_dict(b.get(kind)).get(key) for b in _blocks(entry) if isinstance(b, Mapping)]
    return [i for i in ids if isinstance(i, str)]


def _not_a_client_format() -> NoReturn:
    raise NotImplementedError("converse is an upstream format only: no client speaks it")


class Converse(Format):
    name = "converse"
    provider_api = "bedrock"
    paths = ()  # no client calls it
    fixed_keys = ("system", "toolConfig")  # the tools' names, descriptions and schemas
    alternating = True
    final_events = frozenset({"messageStop"})  # by the event's name: its data has no type
    named_events = True

    def capped(self, request: Mapping[str, Any]) -> bool:
        return as_dict(request.get("inferenceConfig")).get("maxTokens") is not None

    def requested_output(self, request: Mapping[str, Any]) -> int | None:
        value = as_dict(request.get("inferenceConfig")).get("maxTokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def prefill_allowed(self, request: Mapping[str, Any]) -> bool:
        """Only Claude continues a final assistant message on Converse: a resumed stream is
        regenerated instead."""
        return False

    def summary_request(
        self, model: str, instructions: str, prompt: str, max_tokens: int
    ) -> dict[str, Any]:
        """No ``model`` (the URL names it) and no ``stream`` (the operation says it)."""
        return {
            "system": [{"text": instructions}],
            "messages": [{"role": "user", "content": [{"text": prompt}]}],
            "inferenceConfig": {"maxTokens": max_tokens, "temperature": 0},
        }

    # ---- conversations -----------------------------------------------------------

    def opened_calls(self, entry: Any) -> list[str]:
        return _ids(entry, "assistant", "toolUse", "toolUseId")

    def closed_calls(self, entry: Any) -> list[str]:
        return _ids(entry, "user", "toolResult", "toolUseId")

    def problems(self, items: Sequence[Any]) -> list[str]:
        return turn_problems(self, items, "toolUse", "toolResult")

    def transcript_lines(self, entry: Any) -> list[str]:
        who = role(entry) or "assistant"
        lines: list[str] = []
        for block in _blocks(entry):
            if not isinstance(block, Mapping):
                continue
            if isinstance(block.get("text"), str):
                lines.append(f"{who}: {block['text']}")
            elif "toolUse" in block:
                use = as_dict(block["toolUse"])
                arguments = json.dumps(use.get("input"), ensure_ascii=False, default=str)
                lines.append(f"assistant called {use.get('name')}({arguments})")
            elif "toolResult" in block:
                content = as_list(as_dict(block["toolResult"]).get("content"))
                texts = [
                    c["text"] if isinstance(c.get("text"), str) else json.dumps(c.get("json"))
                    for c in content
                    if isinstance(c, Mapping) and ("text" in c or "json" in c)
                ]
                lines.append(f"tool result: {plain_text(texts)}")
        return lines

    def snip_results(self, entry: Any, snip: Callable[[Any], Any]) -> Any:
        if role(entry) != "user" or not isinstance(entry.get("content"), list):
            return entry
        content = []
        for block in entry["content"]:
            if isinstance(block, Mapping) and isinstance(block.get("toolResult"), Mapping):
                result = block["toolResult"]
                block = {**block, "toolResult": {**result, "content": snip(result.get("content"))}}
            content.append(block)
        return {**entry, "content": content}

    # ---- answers -----------------------------------------------------------------

    def answer_text(self, response: Mapping[str, Any], sep: str = "") -> str:
        message = as_dict(as_dict(response.get("output")).get("message"))
        return sep.join(
            text_of(b) for b in as_list(message.get("content")) if isinstance(b, Mapping)
        )

    def cut_at_length(self, response: Mapping[str, Any]) -> bool:
        message = as_dict(as_dict(response.get("output")).get("message"))
        calls = any(
            isinstance(b, Mapping) and "toolUse" in b for b in as_list(message.get("content"))
        )
        return response.get("stopReason") == "max_tokens" and not calls

    def text_answer(
        self, text: str, *, id: Any, model: Any, created: Any, index: int, item_id: Any
    ) -> dict[str, Any]:
        _not_a_client_format()

    def merge(self, merged: dict[str, Any], parts: Sequence[Mapping[str, Any]], text: str) -> None:
        _not_a_client_format()

    # ---- streams (the payloads of ConverseStream's events) -----------------------

    def event_cut(self, data: Any) -> bool:
        """A ``messageStop`` payload saying ``max_tokens``."""
        return bool(data.get("stopReason") == "max_tokens")

    def answer_usage(self, block: dict[str, Any]) -> Usage:
        return from_converse(block)

    def event_usage(self, obj: dict[str, Any], so_far: Usage | None) -> Usage | None:
        """A ``metadata`` payload's usage (it comes after ``messageStop``)."""
        u = obj.get("usage")
        return from_converse(u) if isinstance(u, dict) else None

    def stream_read(self, t: Transcript, obj: dict[str, Any], hold: bool = False) -> bool:
        _not_a_client_format()

    def stream_closes(self, t: Transcript, obj: dict[str, Any]) -> bool:
        _not_a_client_format()

    def stream_output(self, obj: dict[str, Any]) -> int:
        _not_a_client_format()

    def stream_resumable(self, t: Transcript) -> bool:
        _not_a_client_format()

    def splice_event(self, s: Splice, obj: dict[str, Any], kind: Kind) -> Out | Diverged:
        _not_a_client_format()

    # ---- errors: Anthropic's shape, as Bedrock's errors have inside the gateway ------

    error_body = Messages.error_body
    stream_error = Messages.stream_error


CONVERSE = Converse()
