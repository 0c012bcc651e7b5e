"""The built-in simulated provider (``api: sim``) behind ``llm-gateway serve --demo``.

It is the scripted fake provider of :mod:`gateway.testing`, served on a loopback
port inside the gateway process, so a new user sees real recovery with no network
and no key. Each model fails on a fixed script, counted per gateway request (the
gateway passes its ``x-request-id`` upstream):

============== ===================================================================
sim-ok         always answers
sim-flaky      429 with ``Retry-After: 1`` on the first attempt, then answers
sim-down       always 500 (its demo route falls back to sim-ok)
sim-overloaded "overloaded" (529 on /v1/messages, 503 otherwise) twice, then answers
sim-claude     always "overloaded" (its demo route falls back to sim-gpt, of the other
               format: the bundled policies serve it from a ``speaks: anthropic`` sim)
sim-long       every answer is cut at 24 tokens (finish_reason ``length``)
sim-small      a 2048-token context window: longer prompts get prompt-too-long
sim-cached     always answers, from three deployments (upstream models sim-cached-a,
               -b and -c), each with a prompt cache of its own
any other      answers like sim-ok
============== ===================================================================

Prompt caches: every model has the fake provider's (per upstream model, and per key when
the gateway sends one; a prefix under 1,024 tokens is never cached, as at Anthropic and
OpenAI), except the upstream models whose name starts with ``sim-cached``: a demo's
prompts are short, so their cache keeps every prefix, however short, and the second turn
of a chat already reads the first from the cache (``cached_tokens`` in an OpenAI answer's
usage; ``cache_read_input_tokens`` in an Anthropic answer's, once the request marks a
block with ``cache_control``). A session kept on one deployment reads its cache; one
moved to another deployment writes it again.

Tools: when the request offers tools and the client's last message names one as a word
("Use lookup_weather for Paris"), the answer calls it, with arguments taken from that
message (:func:`prompt_arguments`); when the last message is a tool result, the answer
says what the tool returned. Messages with ``role: system`` after the client's last
message, and ``<system-reminder>`` blocks inside it, are not the client's words and are
passed over (Claude Code ends its list with such a system message and wraps context in
such blocks).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

from gateway.testing.conversation import (
    Conversation,
    ToolSpec,
    Turn,
    parse_chat,
    parse_messages,
    parse_responses,
)
from gateway.testing.fake_provider import FakeProvider, RecordedRequest
from gateway.testing.prompt_cache import PromptCache
from gateway.testing.script import Error, Step, Success

_LONG_REPLY = (
    "Retries, fallbacks and continuations are what a gateway is for: this answer is long "
    "enough that sim-long cuts it at the token limit several times, and llm-gateway asks "
    "the model to continue until the whole text is there, joined into one answer."
)
_MEMORY = 10_000  # request ids remembered for per-request attempt counts
#: The upstream models whose prompt cache keeps every prefix (sim-cached's deployments).
CACHED_PREFIX = "sim-cached"
_PARSERS = {
    "/v1/chat/completions": parse_chat,
    "/v1/responses": parse_responses,
    "/v1/messages": parse_messages,
}
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
_QUOTED = re.compile(r"`([^`]+)`|\"([^\"]+)\"|'([^']+)'")
# Words between a tool's name and what it should act on: "Use Bash to run ls", "for Paris".
_FILLER = re.compile(
    r"^(?:\s*(?:to|for|with|on|in|at|about|and|run|call|the|tool|:|,|-))+\s+", re.IGNORECASE
)


class SimProvider(FakeProvider):
    def __init__(self) -> None:
        super().__init__(models=("sim-ok",))
        self.reply["sim-long"] = _LONG_REPLY
        self.cut_at["sim-long"] = 24
        self.context_window["sim-small"] = 2048
        #: The prompt cache of the ``sim-cached*`` upstream models: no minimum.
        self.demo_cache = PromptCache(minimum=0)
        self._attempts: OrderedDict[tuple[str, str], int] = OrderedDict()

    def _cache_of(self, record: RecordedRequest) -> PromptCache | None:
        cached = (record.model or "").startswith(CACHED_PREFIX)
        return self.demo_cache if cached and self.prompt_cache is not None else self.prompt_cache

    def _next_steps(self, model: str | None) -> list[Step]:
        record = self.requests[-1]
        self.requests.clear()  # a long-running demo keeps no history
        key = (record.headers.get("x-request-id", ""), model or "")
        n = self._attempts.pop(key, 0) + 1
        self._attempts[key] = n
        if len(self._attempts) > _MEMORY:
            self._attempts.popitem(last=False)
        anthropic = record.path.startswith("/v1/messages")
        if model == "sim-flaky" and n == 1:
            return [Error.openai_rate_limit(retry_after=1)]
        if model == "sim-down":
            return [Error.anthropic_server(500) if anthropic else Error.openai_server(500)]
        if model == "sim-claude":
            return [Error.anthropic_overloaded() if anthropic else Error.overloaded_503()]
        if model == "sim-overloaded" and n <= 2:
            return [Error.anthropic_overloaded() if anthropic else Error.overloaded_503()]
        parse = _PARSERS.get(record.path)
        if parse is None or not isinstance(record.body, dict):
            return []
        step = tool_step(parse(record.body))
        return [] if step is None else [step]


def tool_step(conv: Conversation) -> Success | None:
    """A call of the tool the client's last message names, with arguments from that
    message; or, after a tool result, the answer that says what it returned. None: the
    fake provider's usual answer."""
    turns = list(conv.turns)
    while turns and turns[-1].role == "system":
        turns.pop()  # not the client's words (Claude Code's last message)
    if not turns:
        return None
    last = turns[-1]
    if last.role == "tool":
        return Success(text=f"The tool returned: {last.text[:200]}")
    if last.role != "user":
        return None
    said = _REMINDER.sub("", last.text).strip()
    asked = Conversation([*turns[:-1], Turn("user", said)], conv.tools, conv.tool_choice)
    tool = asked.wants_tool_call()
    if tool is None:
        return None
    return Success(tool_call={"name": tool.name, "arguments": prompt_arguments(tool, said)})


def prompt_arguments(tool: ToolSpec, text: str) -> dict[str, Any]:
    """Arguments for ``tool`` from the user's ``text``: its required string parameters get
    what the text asks the tool to act on (a quoted or backticked part, else the words after
    the tool's name: "Use Bash to run ls -la" gives ``ls -la``), other required ones a plain
    value (an enum's first, a number in the text or 1, true, [] or {}); optional ones are
    left out."""
    props = tool.parameters.get("properties")
    props = props if isinstance(props, dict) else {}
    required = tool.parameters.get("required")
    names = [n for n in required if n in props] if isinstance(required, list) else list(props)
    subject = _subject(tool.name, text)
    args: dict[str, Any] = {}
    for name in names:
        schema = props[name] if isinstance(props[name], dict) else {}
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "string")
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            args[name] = schema["enum"][0]
        elif kind in ("integer", "number"):
            number = re.search(r"\d+", subject)
            args[name] = int(number.group()) if number else 1
        elif kind == "boolean":
            args[name] = True
        elif kind == "array":
            args[name] = []
        elif kind == "object":
            args[name] = {}
        else:
            args[name] = subject
    return args


def _subject(tool: str, text: str) -> str:
    """What ``text`` asks ``tool`` to act on."""
    quoted = _QUOTED.search(text)
    if quoted:
        return next(g for g in quoted.groups() if g)
    for name in (tool, tool.replace("_", " ")):
        at = re.search(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])", text, re.I)
        if at:
            rest = _FILLER.sub("", " " + text[at.end() :]).strip().rstrip(".!?").strip()
            if rest:
                return rest
    return text.strip()
