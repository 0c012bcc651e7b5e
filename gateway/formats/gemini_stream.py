"""How the client's Gemini stream is read and a resumed one spliced into it
(:class:`GeminiStream`, the stream rules of :data:`gateway.formats.GEMINI`).

``streamGenerateContent?alt=sse``: each event is a whole ``GenerateContentResponse``,
the answer's next parts in ``candidates[0].content.parts`` (text, text with
``"thought": true``, a ``functionCall``; any of them may carry a ``thoughtSignature``),
the ids repeated on every event (``responseId``, ``modelVersion``, Vertex's
``createTime``) and, usually, the usage so far. The event with a ``finishReason`` ends
the answer; Gemini's often carries the last text too: it is held back whole, text and
all, as chat's finish chunk is (a continued answer drops it, and the continuation,
prefilled with the text the client has, writes that text again).

A resumed stream continues the client's: its text goes through the overlap pipe, its
thoughts are dropped once the client had output, a part of another kind ends the
text before it, the ids are the client's, and every ``usageMetadata`` tells the
answer's parts summed (:func:`gemini_usage`). Pure.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gateway.formats.overlap import Diverged, Out
from gateway.formats.parts import sizes, text_size

if TYPE_CHECKING:
    from gateway.formats.event_kinds import Kind
    from gateway.formats.splice import Splice
    from gateway.formats.transcript import Transcript
    from gateway.formats.usage import Usage

#: A part's fields that are not content: a part holding only these (and no text, thought
#: or call) adds nothing; one holding anything else is content of another kind.
_META = frozenset({"thoughtSignature", "thought", "partMetadata", "videoMetadata",
                   "mediaResolution"})  # fmt: skip
#: What a total written over a ``usageMetadata`` block makes false: the tool prompt
#: (folded into ``promptTokenCount``, as :func:`~gateway.formats.usage.from_gemini` reads
#: it) and the per-modality breakdowns of the provider's own counts.
_RECOUNTED = frozenset({"toolUsePromptTokenCount", "promptTokensDetails", "cacheTokensDetails",
                        "candidatesTokensDetails", "toolUsePromptTokensDetails"})  # fmt: skip


class GeminiStream:
    """Gemini ``streamGenerateContent`` streams: see the module docstring."""

    def stream_read(self, t: Transcript, obj: dict[str, Any], hold: bool = False) -> bool:
        if hold and self.stream_closes(t, obj):
            return True
        if t.id is None and isinstance(obj.get("responseId"), str):
            _read_head(t, obj)
        candidates = obj.get("candidates")
        if candidates is None:  # prompt feedback, usage alone
            return False
        for c in candidates:  # a field of the wrong type raises: the event is unreadable
            t.choose(c.get("index", 0))
            if finished(c):
                t.closed = True
            content = c.get("content")
            if content is not None:
                for p in content.get("parts") or ():
                    _read_part(t, p)
        return False

    def stream_closes(self, t: Transcript, obj: dict[str, Any]) -> bool:
        candidates = obj.get("candidates")
        return type(candidates) is list and any(finished(c) for c in candidates)

    def stream_output(self, obj: dict[str, Any]) -> int:
        candidates = obj.get("candidates")
        n = 0
        if type(candidates) is not list:
            return n
        for c in candidates:
            content = c.get("content") if type(c) is dict else None
            parts = content.get("parts") if type(content) is dict else None
            if type(parts) is list:
                for p in parts:
                    if type(p) is dict:
                        n += part_output(p)
        return n

    def stream_resumable(self, t: Transcript) -> bool:
        """One candidate, and not in the middle of its thoughts (sent, with no text yet:
        a resumed stream's thoughts would be dropped, the client's left unfinished)."""
        return not t.multiple_choices and not (t.reasoning and not t.text)

    def splice_event(self, s: Splice, obj: dict[str, Any], kind: Kind) -> Out | Diverged:
        data = dict(obj)
        t = s.t
        if t.id is not None:
            data["responseId"] = t.id
            if t.model is not None:
                data["modelVersion"] = t.model
            if t.created is not None:
                data["createTime"] = t.created
        if s.base is not None and isinstance(usage := data.get("usageMetadata"), dict):
            data["usageMetadata"] = gemini_usage(usage, s.total())
        candidates = data.get("candidates")
        if not isinstance(candidates, list) or not candidates or type(candidates[0]) is not dict:
            return Out([(data, kind)])  # no answer in it (prompt feedback): as it came
        c = dict(candidates[0])  # the one candidate (a resumable stream has no other)
        got = _splice_candidate(s, c)
        if isinstance(got, Diverged):
            return got
        if not got:
            return Out()
        data["candidates"] = [c]
        return Out([(data, kind)])


def finished(c: Any) -> bool:
    """The candidate ends the answer: it has a ``finishReason`` (one of another type is
    none, as :mod:`gateway.formats.sse` reads a chat ``finish_reason``)."""
    if type(c) is not dict:
        return False
    reason = c.get("finishReason")
    return type(reason) is str and bool(reason)


def part_output(p: dict[str, Any]) -> int:
    """What the model wrote in one part, in the estimate's units: its text (a thought's
    too), or a function call's name and arguments (as JSON text). Never raises."""
    text = p.get("text")
    if type(text) is str:
        return text_size(text)
    call = p.get("functionCall")
    if type(call) is not dict:
        return 0
    args = call.get("args")
    if type(args) is str:
        return sizes(call, ("name", "args"))
    if type(args) is not dict and type(args) is not list:
        return sizes(call, ("name",))
    try:
        written = json.dumps(args, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # not JSON (never so off the wire)
        written = ""
    return sizes(call, ("name",)) + text_size(written)


def gemini_usage(block: dict[str, Any], u: Usage) -> dict[str, Any]:
    """A ``usageMetadata`` block with the counts of ``u`` written over the provider's:
    :func:`~gateway.formats.usage.from_gemini` reads ``u`` back from it (the thoughts
    apart from the candidates' tokens, the cached ones inside the prompt's)."""
    out = {k: v for k, v in block.items() if k not in _RECOUNTED}
    out["promptTokenCount"] = u.input
    out["candidatesTokenCount"] = max(u.output - (u.reasoning or 0), 0)
    out["totalTokenCount"] = u.input + u.output
    if u.cache_read or "cachedContentTokenCount" in block:
        out["cachedContentTokenCount"] = u.cache_read
    if u.reasoning or (u.reasoning is not None and "thoughtsTokenCount" in block):
        out["thoughtsTokenCount"] = u.reasoning
    else:
        out.pop("thoughtsTokenCount", None)
    return out


def _read_head(t: Transcript, obj: dict[str, Any]) -> None:
    """The answer's id, model and (Vertex) creation time, from its first event with an id."""
    t.id = obj["responseId"]
    t.model = obj.get("modelVersion")
    t.created = obj.get("createTime")


def _read_part(t: Transcript, p: Any) -> None:
    """One part the client was sent: text, a thought, a function call, or content of
    another kind (an image, code: the answer is no longer text alone)."""
    if p.get("thought") is True:  # a part that is no object raises: unreadable
        t.reasoning = True
        t.other += part_output(p)
    elif "text" in p:
        text = p["text"]
        if type(text) is not str:
            raise TypeError(f"a text part of {type(text).__name__}")
        t.add(text)
    elif "functionCall" in p:
        t.tool = True
        t.other += part_output(p)
    elif not _META.issuperset(p):
        t.non_text = True


def _splice_candidate(s: Splice, c: dict[str, Any]) -> bool | Diverged:
    """Rewrite the resumed stream's candidate in place; False when nothing of it is left
    to send (the final one is always sent)."""
    if "index" in c and s.t.choice_index is not None:
        c["index"] = s.t.choice_index
    content = c.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    kept: list[Any] = []
    for p in parts if isinstance(parts, list) else ():
        got = _splice_part(s, p)
        if isinstance(got, Diverged):
            return got
        kept.extend(got)
    final = finished(c)
    if final:  # the text ends here: what the pipe holds, or a regeneration too short
        tail = s.pipe.flush()
        if isinstance(tail, Diverged):
            return tail
        if tail:
            kept.append({"text": tail})
    if kept:
        c["content"] = {**(content if isinstance(content, dict) else {"role": "model"}),
                        "parts": kept}  # fmt: skip
    else:
        c.pop("content", None)
    return final or bool(kept)


def _splice_part(s: Splice, p: Any) -> list[Any] | Diverged:
    """What the client gets of one part of the resumed stream: its text past what the
    client has, no thoughts once it had output, a call (or other content) after the
    text it ends."""
    if not isinstance(p, dict):
        return [p]  # as it came (the transcript finds it unreadable)
    if p.get("thought") is True:
        return [] if s.had_output else [p]
    text = p.get("text")
    if isinstance(text, str):
        got = s.pipe.push(text)
        if isinstance(got, Diverged):
            return got
        if got or len(p) > 1:  # a part with no text left to send keeps its signature
            return [{**p, "text": got}]
        return []
    if not s.pipe.settled:
        tail = s.pipe.flush()
        if isinstance(tail, Diverged):
            what = "function call" if "functionCall" in p else "part that is not text"
            return Diverged(f"regenerated answer sends a {what} before covering the text sent")
        if tail:
            return [{"text": tail}, p]
    return [p]
