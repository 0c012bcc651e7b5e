"""The neutral form every format is read into and written from.

Three formats, one hub: a reader per format turns a body into these values and a
writer per format turns them back into a body, so that six translation directions
are three readers and three writers. The values are small slotted dataclasses,
built once per request and thrown away; large JSON values (tool schemas, base64
data) are referenced, never copied.

Pure: no I/O.
"""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass, field
from typing import Any

from gateway.formats.usage import Usage

#: Anthropic requires ``max_tokens``; used when neither the request nor the model's
#: ``max_output_tokens`` gives one. 4096 is accepted by every Claude model.
DEFAULT_ANTHROPIC_MAX_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class Caps:
    """What the target model accepts, as far as the request writers need to know (the
    engine builds one per model from its policy; the defaults suit most models).

    ``sampling``: the model accepts ``temperature`` / ``top_p`` (Claude Opus 4.7 and later
    reject them: False drops them, named). ``reasoning``: the model takes a reasoning
    effort (False drops ``reasoning_effort`` / ``reasoning`` / ``thinking``, named; None
    sends it and lets the provider judge). ``adaptive_thinking``: an Anthropic model that
    takes ``thinking: {"type": "adaptive"}`` with ``output_config.effort`` instead of a
    ``budget_tokens`` (Claude Opus 4.7 and later).
    """

    sampling: bool = True
    reasoning: bool | None = None
    adaptive_thinking: bool = False


DEFAULT_CAPS = Caps()


@dataclass(slots=True)
class Text:
    text: str
    cache: bool = False  # carried an Anthropic cache_control


@dataclass(slots=True)
class Image:
    url: str | None = None  # a URL (http(s)); or base64 below
    media_type: str | None = None
    data: str | None = None  # base64
    detail: str | None = None  # OpenAI's detail hint


@dataclass(slots=True)
class Document:
    media_type: str | None = None
    data: str | None = None  # base64
    url: str | None = None
    filename: str | None = None
    text: str | None = None  # a plain-text document (Anthropic ``source.type: text``)
    file_id: str | None = None  # an OpenAI file id (meaningless to Anthropic)


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI carries it


@dataclass(slots=True)
class ToolResult:
    id: str
    content: str | list[Part]
    is_error: bool = False


@dataclass(slots=True)
class Reasoning:
    text: str
    signature: str | None = None  # Anthropic's; meaningless to any other provider


@dataclass(slots=True)
class Refusal:
    text: str


Part = Text | Image | Document | ToolCall | ToolResult | Reasoning | Refusal


@dataclass(slots=True)
class Msg:
    role: str  # user | assistant | system | developer
    parts: list[Part]
    as_string: bool = False  # the content was a plain string (kept on the way back)


@dataclass(slots=True)
class Tool:
    name: str
    description: str | None
    parameters: dict[str, Any] | None
    strict: bool | None = None


@dataclass(slots=True)
class Conv:
    """A request, neutral."""

    model: Any = None
    system: list[Msg] = field(default_factory=list)  # leading system / developer messages
    messages: list[Msg] = field(default_factory=list)
    tools: list[Tool] | None = None
    tool_choice: str | None = None  # auto | none | required | tool
    tool_name: str | None = None  # with tool_choice == "tool"
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    max_tokens_field: str | None = None  # which chat field carried it
    temperature: Any = None
    top_p: Any = None
    stop: list[str] | None = None
    stop_as_string: bool = False
    stream: bool | None = None
    include_usage: bool | None = None  # the client's stream_options.include_usage (chat)
    effort: str | None = None  # OpenAI reasoning effort
    reasoning_summary: str | None = None  # Responses ``reasoning.summary``
    thinking_budget: int | None = None  # Anthropic thinking budget
    user: Any = None  # OpenAI ``user``; Anthropic ``metadata.user_id``
    response_format: Any = None  # chat-shaped ``response_format``
    shared: dict[str, Any] = field(
        default_factory=dict
    )  # same name and meaning in chat and Responses


@dataclass(slots=True)
class Answer:
    """A complete (JSON) answer, neutral."""

    id: str
    model: Any
    parts: list[Part]
    stop: str | None  # neutral stop reason, see stops.py
    usage: Usage | None
    created: int | None = None
    stop_sequence: str | None = None


class Dropped:
    """The names of request fields dropped on the way (for ``x-gateway-dropped``), each
    once, in the order first dropped. Some are the client's own text (an unknown key, a
    ``type``): any number of them, of any length; each is checked against those already
    named in constant time (the access log and the header bound and clean them:
    ``gateway/observe/events.py``)."""

    __slots__ = ("_seen", "names")

    def __init__(self) -> None:
        self.names: list[str] = []
        self._seen: set[str] = set()

    def add(self, name: str) -> None:
        if name not in self._seen:
            self._seen.add(name)
            self.names.append(name)


def parse_data_url(url: str) -> tuple[str, str] | None:
    """``data:<media type>;base64,<data>`` -> (media type, data); None for another URL."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url.partition(",")
    if not sep or not head.endswith(";base64"):
        return None
    return head[5:-7] or "application/octet-stream", data


def data_url(media_type: str | None, data: str) -> str:
    return f"data:{media_type or 'application/octet-stream'};base64,{data}"


#: Joins a Responses namespace and the name of one of its functions into the one name the
#: other formats know it by (they have no namespaces): ``multi_agent_v1__spawn_agent``.
NAMESPACE_SEPARATOR = "__"


#: A request's namespaced functions: the name other formats call one by -> (namespace, name).
Names = dict[str, tuple[str, str]]


def qualified(namespace: str, name: str) -> str:
    """The name a function of a Responses namespace tool goes by in the other formats."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}"


def text_of(content: str | list[Part]) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.text for p in content if isinstance(p, Text))


#: The prefix of a Responses ``encrypted_content`` that carries an Anthropic thinking
#: signature, so that a Responses client handing its reasoning items back lets an
#: Anthropic model check its own thinking (OpenAI's own encrypted content never starts so).
SEALED_PREFIX = "gw-anthropic:"


def seal_signature(signature: str) -> str:
    return SEALED_PREFIX + signature


def unseal_signature(encrypted: Any) -> str | None:
    """The Anthropic signature in a Responses ``encrypted_content``; None for OpenAI's own."""
    if isinstance(encrypted, str) and encrypted.startswith(SEALED_PREFIX):
        return encrypted[len(SEALED_PREFIX) :]
    return None


#: Joins a tool call's id and the thought signature Gemini gave the call, so that a client
#: of another format hands the signature back with the call (and its result) in the next
#: turn, as Gemini requires (docs/translation.md, "Thought signatures").
SIGNED_SEPARATOR = "__thought__"


def signed_id(call_id: str, signature: str) -> str:
    """``call_id`` carrying ``signature`` (base64url of its UTF-8, unpadded: the id stays
    ``[A-Za-z0-9_-]`` wherever the call id was)."""
    encoded = base64.urlsafe_b64encode(signature.encode("utf-8", "surrogatepass"))
    return f"{call_id}{SIGNED_SEPARATOR}{encoded.rstrip(b'=').decode('ascii')}"


def new_call_id() -> str:
    """An id for a call its provider sent without one (Gemini's often have none)."""
    return "call_" + secrets.token_hex(12)


def split_id(value: str) -> tuple[str, str | None]:
    """A tool call id as the client returned it -> (the call's own id, the Gemini thought
    signature it carries, or None). An id whose tail does not decode is not split."""
    head, sep, tail = value.rpartition(SIGNED_SEPARATOR)
    if not sep or not head:
        return value, None
    padded = tail.replace("-", "+").replace("_", "/") + "=" * (-len(tail) % 4)
    try:
        return head, base64.b64decode(padded, validate=True).decode("utf-8", "surrogatepass")
    except (ValueError, UnicodeDecodeError):
        return value, None


def plain_id(value: str) -> str:
    """A tool call id without the signature it may carry (what other providers get)."""
    return split_id(value)[0] if SIGNED_SEPARATOR in value else value


def unset(value: Any) -> bool:
    """A request field left at its no-op value (absent, null, false, zero, empty)."""
    return value is None or value is False or value == 0 or value == {} or value == []
