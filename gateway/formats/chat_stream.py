"""How the client's chat completions stream is read and a resumed one spliced into it
(:class:`ChatStream`, the stream rules of :data:`gateway.formats.CHAT`).

Chunks carry ``choices``; a choice's text is ``delta.content`` (legacy completions: the
choice's own ``text``, :attr:`gateway.formats.endpoints.Endpoint.text_key`), a ``finish_reason``
ends it, and a chunk with no choices but ``usage`` closes the stream. Pure.
"""

from __future__ import annotations

import copy
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from gateway.formats.event_kinds import Kind
from gateway.formats.overlap import Diverged, Out
from gateway.formats.parts import sizes, text_size

if TYPE_CHECKING:
    from gateway.formats.splice import Splice
    from gateway.formats.transcript import Transcript
    from gateway.formats.usage import Usage

_CHOICE = itemgetter("index", "delta", "finish_reason")  # of a chat choice
_OTHER = ("reasoning_content", "reasoning", "refusal")  # a delta's output besides its text
_CALL = ("name", "arguments")  # a tool call's output


class ChatStream:
    """Chat completions (and legacy completions) streams: see the module docstring."""

    def stream_read(self, t: Transcript, obj: dict[str, Any], hold: bool = False) -> bool:
        choices = obj.get("choices")
        if not choices:  # the closing usage chunk, or a chunk without output
            return _read_no_choices(t, obj, choices, hold)
        if t.id is None and isinstance(obj.get("id"), str):
            _read_head(t, obj)
        if not isinstance(choices, list):
            return False
        if t.text_key != "content":
            read_texts(t, choices)
            return False
        for c in choices:
            try:  # the usual choice has these keys: a C call fetches the three
                index, delta, finish = _CHOICE(c)
            except (KeyError, TypeError):  # a key missing, or not a dict at all
                read_choice(t, c)
                continue
            if index != t.choice_index:
                t.choose(index)
            if finish:
                t.closed = True
            if isinstance(delta, dict):
                content = delta.get("content")
                if isinstance(content, str):
                    if content:
                        t.parts.append(content)
                    if len(delta) == 1:
                        continue  # the usual chunk: text and nothing else
                _read_delta(t, delta)
        return False

    def stream_output(self, obj: dict[str, Any]) -> int:
        choices = obj.get("choices")
        n = 0
        if type(choices) is not list:
            return n
        for c in choices:
            if type(c) is not dict:
                continue
            delta = c.get("delta")
            if type(delta) is not dict:  # legacy completions: the choice holds its text
                text = c.get("text")
                if type(text) is str:
                    n += text_size(text)
                continue
            content = delta.get("content")
            if type(content) is str:
                n += text_size(content)
                if len(delta) == 1:
                    continue  # the usual chunk: text and nothing else
            n += delta_output(delta)
        return n

    def stream_closes(self, t: Transcript, obj: dict[str, Any]) -> bool:
        choices = obj.get("choices")
        return isinstance(choices, list) and not choices and obj.get("usage") is not None

    def stream_resumable(self, t: Transcript) -> bool:
        return not t.multiple_choices and not (t.reasoning and not t.text)

    def splice_event(self, s: Splice, obj: dict[str, Any], kind: Kind) -> Out | Diverged:
        data = copy.copy(obj)
        t = s.t
        if s.base is not None and isinstance(usage := data.get("usage"), dict):
            data["usage"] = chat_usage(usage, s.total())
        if t.id is not None:
            data["id"], data["created"], data["model"] = t.id, t.created, t.model
            if t.has_fingerprint:
                data["system_fingerprint"] = t.fingerprint
        choices = data.get("choices")
        if not isinstance(choices, list):
            return Out([(data, kind)])
        kept = []
        for c in choices:
            if not isinstance(c, dict):
                continue
            c = copy.copy(c)
            if t.choice_index is not None:
                c["index"] = t.choice_index
            got = _splice_choice(s, c)
            if isinstance(got, Diverged):
                return got
            if got:
                kept.append(c)
        if not kept and (choices or data.get("usage") is None):
            return Out()
        data["choices"] = kept
        return Out([(data, kind)])


def chat_usage(block: dict[str, Any], u: Usage) -> dict[str, Any]:
    """A chat ``usage`` block with the counts of ``u`` written over the provider's."""
    out = {
        **block,
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input + u.output,
    }
    details = block.get("prompt_tokens_details")
    if u.cache_read or u.cache_creation or isinstance(details, dict):
        cached = {"cached_tokens": u.cache_read}
        if u.cache_creation:
            cached["cache_write_tokens"] = u.cache_creation
        out["prompt_tokens_details"] = {**(details or {}), **cached}
    if "prompt_cache_hit_tokens" in block:  # DeepSeek's name for the cached tokens
        out["prompt_cache_hit_tokens"] = u.cache_read
    if u.reasoning is not None:
        done = block.get("completion_tokens_details")
        out["completion_tokens_details"] = {**(done or {}), "reasoning_tokens": u.reasoning}
    return out


def _read_no_choices(t: Transcript, obj: dict[str, Any], choices: Any, hold: bool) -> bool:
    """A chunk with no choices: the closing one when it has ``usage`` (with ``hold``, what
    :meth:`ChatStream.stream_closes` says, before it is read)."""
    closes = isinstance(choices, list) and obj.get("usage") is not None
    if closes and hold:
        return True
    if t.id is None and isinstance(obj.get("id"), str):
        _read_head(t, obj)
    if closes:
        t.closed = True
    return False


def _read_head(t: Transcript, obj: dict[str, Any]) -> None:
    """The stream's id, time and model, from its first chunk that has an id."""
    t.id = obj["id"]
    t.created = obj.get("created")
    t.model = obj.get("model")
    t.has_fingerprint = "system_fingerprint" in obj
    t.fingerprint = obj.get("system_fingerprint")


def read_choice(t: Transcript, c: Any) -> None:
    """A chat choice in any shape (the general path of :meth:`ChatStream.stream_read`)."""
    if not isinstance(c, dict):
        return
    t.choose(c.get("index", 0))
    if c.get("finish_reason"):
        t.closed = True
    delta = c.get("delta")
    if isinstance(delta, dict):
        content = delta.get("content")
        if isinstance(content, str):
            t.add(content)
        _read_delta(t, delta)


def _read_delta(t: Transcript, delta: dict[str, Any]) -> None:
    if delta.get("tool_calls") or delta.get("function_call"):
        t.tool = True
    if delta.get("refusal"):
        t.non_text = True
    if delta.get("reasoning_content") or delta.get("reasoning"):
        t.reasoning = True
    t.other += delta_output(delta)


def delta_output(delta: dict[str, Any]) -> int:
    """The output of a chat delta besides its text: reasoning, a refusal, the names and
    arguments of tool calls (in the estimate's units, :func:`text_size`)."""
    n = sizes(delta, _OTHER)
    calls = delta.get("tool_calls")
    if type(calls) is list:
        for call in calls:
            if type(call) is dict and type(fn := call.get("function")) is dict:
                n += sizes(fn, _CALL)
    fn = delta.get("function_call")  # the legacy single call
    if type(fn) is dict:
        n += sizes(fn, _CALL)
    return n


def read_texts(t: Transcript, choices: list[Any]) -> None:
    """The choices of a legacy completions chunk: their own text, no delta."""
    key = t.text_key
    for c in choices:
        if not isinstance(c, dict):
            continue
        t.choose(c.get("index", 0))
        if c.get("finish_reason"):
            t.closed = True
        if isinstance(c.get(key), str):
            t.add(c[key])


def _splice_choice(s: Splice, c: dict[str, Any]) -> bool | Diverged:
    """Rewrite one choice in place; False when nothing of it is left to send."""
    key = s.t.text_key
    in_delta = key == "content"  # else legacy completions: the choice holds its text
    flush_now = False
    holder: dict[str, Any]
    if not in_delta:
        holder = c
    else:
        delta = c.get("delta")
        holder = dict(delta) if isinstance(delta, dict) else {}
        c["delta"] = holder
        holder.pop("role", None)
        if holder.get("refusal") is None:
            holder.pop("refusal", None)
        if s.had_output:
            for name in ("reasoning_content", "reasoning"):
                holder.pop(name, None)
        flush_now = bool(holder.get("tool_calls") or holder.get("function_call"))
        if flush_now and s.regenerate and not s.pipe.settled:
            return Diverged("regenerated answer calls a tool before covering the text sent")
    text = holder.get(key)
    out = ""
    if isinstance(text, str) and text:
        got = s.pipe.push(text)
        if isinstance(got, Diverged):
            return got
        out = got
    if c.get("finish_reason") or flush_now:
        tail = s.pipe.flush()
        if isinstance(tail, Diverged):
            return tail
        out += tail
    if isinstance(text, str) or out:
        if out != text:
            c["logprobs"] = None
        if out or not in_delta:
            holder[key] = out
        else:
            holder.pop(key, None)
    if c.get("finish_reason"):
        return True
    if not in_delta:
        return bool(out)
    return any(v is not None for v in holder.values())
