# long: one TypedDict per JSON object of three request formats: the types pydantic validates
"""Pydantic models of the request bodies: the fields the gateway and its translators read,
with their JSON types, nested (messages, content parts by type, tool calls, tools,
``tool_choice``, image and file sources, Responses input items, Anthropic system blocks).

One :class:`~pydantic.TypeAdapter` per format the translators read validates the dict
orjson produced (:data:`ADAPTERS`); :mod:`gateway.translate.request_check` discards the
result (the body stays the one copy the rest uses) and turns the first error into a 400
naming the field's path.

Everything else stays allowed, as the provider would allow it: unknown fields are
ignored (``extra="ignore"``: not copied, not checked), a content part, input item or tool
of a type not listed is any JSON object (a translator that cannot map it refuses it with
its own 400), ``null`` passes wherever a field is optional. Types are strict (a string is
never an integer); an integer beyond 64 bits, which orjson reads as a float, is no integer.

Parts and items are told apart by their ``type`` through a discriminator function, so an
error names the branch that applies instead of every branch of a union; the tags are
marked with :data:`TAG` and left out of the paths.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import ConfigDict, Discriminator, Field, Tag, TypeAdapter
from typing_extensions import TypedDict

__all__ = ["ADAPTERS", "ARRAY", "TAG", "TEXT"]

#: Marks a union's tag in an error's location (never a field name).
TAG = "~"
_CONFIG = ConfigDict(strict=True, extra="ignore")
_OTHER = TAG + "other"
#: The branches of a string-or-array union, in an error's location.
TEXT, ARRAY = TAG + "str", TAG + "list"
_TYPED = TAG + "typed"

Obj = dict[str, Any]
PosInt = Annotated[int, Field(ge=1)]


def _by_type(tags: Mapping[str, Any], *, default: str | None = None, other: Any = Any) -> Any:
    """A union of ``tags`` (``type`` value -> schema) chosen by the object's ``type``
    (``default`` when it has none); any other object is ``other``; a value that is not an
    object is refused as such."""
    choices = [Annotated[schema, Tag(TAG + name)] for name, schema in tags.items()]
    choices.append(Annotated[other, Tag(_OTHER)])
    choices.append(Annotated[_Typed, Tag(_TYPED)])
    known = {name: TAG + name for name in tags}

    def tag(value: Any) -> str | None:
        if type(value) is not dict:
            return None
        kind = value.get("type", default)
        if type(kind) is str:
            return known.get(kind, _OTHER)
        return _OTHER if kind is None else _TYPED  # a ``type`` that is not a string

    union = choices[0]
    for choice in choices[1:]:
        union = union | choice
    return Annotated[
        union,
        Discriminator(tag, custom_error_type="object_type", custom_error_message="an object"),
    ]


def _text_or(array: Any) -> Any:
    """A string or ``array`` (a list type): a plain union, checked in pydantic-core without
    a Python call; its branches are labelled :data:`TEXT` and :data:`ARRAY` in an error's
    location (:mod:`gateway.translate.request_check` reports the branch that applies)."""
    return Annotated[str, Tag(TEXT)] | Annotated[array, Tag(ARRAY)]


def _str_or_obj(obj: Any) -> Any:
    """A string or the object ``obj`` (``tool_choice``, an image URL)."""

    def tag(value: Any) -> str | None:
        kind = type(value)
        return TAG + "str" if kind is str else TAG + "obj" if kind is dict else None

    return Annotated[
        Annotated[str, Tag(TAG + "str")] | Annotated[obj, Tag(TAG + "obj")],
        Discriminator(
            tag, custom_error_type="text_or_object", custom_error_message="a string or an object"
        ),
    ]


class _Model(TypedDict, total=False):
    __pydantic_config__ = _CONFIG  # type: ignore[misc]


class _Typed(_Model, total=False):
    type: str


# ---- OpenAI chat completions ----------------------------------------------------------


class _Text(_Model, total=False):
    text: str


class _ImageUrl(_Model, total=False):
    url: str
    detail: str | None


class _ChatImage(_Model, total=False):
    image_url: _str_or_obj(_ImageUrl)  # type: ignore[valid-type]


class _FileRef(_Model, total=False):
    file_data: str | None
    file_id: str | None
    filename: str | None


class _ChatFile(_Model, total=False):
    file: _FileRef


class _Refusal(_Model, total=False):
    refusal: str


ChatPart = _by_type(
    {"text": _Text, "image_url": _ChatImage, "file": _ChatFile, "refusal": _Refusal}
)


class _Function(_Model, total=False):
    name: str
    arguments: str


class _ToolCall(_Model, total=False):
    id: str
    type: str
    function: _Function | None


class _ChatMessage(_Model, total=False):
    role: str
    content: _text_or(list[ChatPart]) | None  # type: ignore[valid-type]
    tool_calls: list[_ToolCall] | None
    tool_call_id: str | None
    reasoning_content: str | None
    refusal: str | None


class _FunctionDef(_Model, total=False):
    name: str
    description: str | None
    parameters: Obj | None
    strict: bool | None


class _ChatTool(_Model, total=False):
    type: str
    function: _FunctionDef | None


class _Named(_Model, total=False):
    name: str | None


class _ChatToolChoice(_Model, total=False):
    type: str
    function: _Named | None


class _StreamOptions(_Model, total=False):
    include_usage: bool | None


class _ResponseFormat(_Model, total=False):
    type: str
    json_schema: Obj | None


class _Common(_Model, total=False):
    model: str
    stream: bool | None
    temperature: float | None
    top_p: float | None
    user: str | None
    metadata: Obj | None
    seed: int | None
    n: int | None
    top_logprobs: int | None
    max_tokens: PosInt | None
    max_completion_tokens: PosInt | None
    max_output_tokens: PosInt | None


class ChatRequest(_Common, total=False):
    messages: list[_ChatMessage]
    tools: list[_ChatTool] | None
    tool_choice: _str_or_obj(_ChatToolChoice) | None  # type: ignore[valid-type]
    parallel_tool_calls: bool | None
    stop: _text_or(list[str]) | None  # type: ignore[valid-type]
    stream_options: _StreamOptions | None
    reasoning_effort: str | None
    response_format: _ResponseFormat | None
    modalities: list[str] | None
    verbosity: str | None


# ---- OpenAI Responses ------------------------------------------------------------------


class _InputImage(_Model, total=False):
    image_url: str | None
    file_id: str | None
    detail: str | None


class _InputFile(_Model, total=False):
    file_data: str | None
    file_url: str | None
    file_id: str | None
    filename: str | None


ResponsesPart = _by_type(
    {"input_text": _Text, "output_text": _Text, "refusal": _Refusal,
     "input_image": _InputImage, "input_file": _InputFile}
)  # fmt: skip
_Content = _text_or(list[ResponsesPart])  # type: ignore[valid-type]


class _Message(_Model, total=False):
    role: str
    content: _Content | None  # type: ignore[valid-type]


class _FunctionCall(_Model, total=False):
    call_id: str
    name: str
    arguments: str
    namespace: str | None


class _Reasoning(_Model, total=False):
    summary: list[_Text] | None
    encrypted_content: str | None


class _FunctionOutput(_Model, total=False):
    call_id: str
    output: _Content | None  # type: ignore[valid-type]


InputItem = _by_type(
    {"message": _Message, "function_call": _FunctionCall, "reasoning": _Reasoning,
     "function_call_output": _FunctionOutput},
    default="message",
)  # fmt: skip


_NamespacedTool = _by_type({"function": _FunctionDef})


class _Namespace(_Model, total=False):
    name: str
    description: str | None
    tools: list[_NamespacedTool] | None  # type: ignore[valid-type]


ResponsesTool = _by_type({"function": _FunctionDef, "namespace": _Namespace})


class _ResponsesToolChoice(_Model, total=False):
    type: str
    name: str | None
    namespace: str | None


class _ReasoningOptions(_Model, total=False):
    effort: str | None
    summary: str | None
    generate_summary: str | None


class _Format(_Model, total=False):
    type: str


class _TextOptions(_Model, total=False):
    format: _Format | None
    verbosity: str | None


class ResponsesRequest(_Common, total=False):
    input: _text_or(list[InputItem]) | None  # type: ignore[valid-type]
    instructions: str | None
    tools: list[ResponsesTool] | None  # type: ignore[valid-type]
    tool_choice: _str_or_obj(_ResponsesToolChoice) | None  # type: ignore[valid-type]
    parallel_tool_calls: bool | None
    reasoning: _ReasoningOptions | None
    text: _TextOptions | None
    max_tool_calls: int | None


# ---- Anthropic Messages ----------------------------------------------------------------


class _Source(_Model, total=False):
    type: str
    media_type: str | None
    data: str | None
    url: str | None


class _Image(_Model, total=False):
    source: _Source


class _Document(_Model, total=False):
    source: _Source
    title: str | None


Block = _by_type({"text": _Text, "image": _Image, "document": _Document})


class _ToolUse(_Model, total=False):
    id: str
    name: str
    input: Obj


class _ToolResult(_Model, total=False):
    tool_use_id: str
    content: _text_or(list[Block]) | None  # type: ignore[valid-type]
    is_error: bool | None


class _Thinking(_Model, total=False):
    thinking: str
    signature: str | None


MessageBlock = _by_type(
    {"text": _Text, "image": _Image, "document": _Document, "tool_use": _ToolUse,
     "tool_result": _ToolResult, "thinking": _Thinking}
)  # fmt: skip


class _AnthropicMessage(_Model, total=False):
    role: str
    content: _text_or(list[MessageBlock]) | None  # type: ignore[valid-type]


class _CustomTool(_Model, total=False):
    name: str
    description: str | None
    input_schema: Obj | None
    strict: bool | None


AnthropicTool = _by_type({"custom": _CustomTool}, default="custom")


class _AnthropicToolChoice(_Model, total=False):
    type: str
    name: str | None
    disable_parallel_tool_use: bool | None


class _ThinkingOptions(_Model, total=False):
    type: str
    budget_tokens: int | None


class _OutputFormat(_Model, total=False):
    type: str
    schema: Obj | None


class _OutputConfig(_Model, total=False):
    effort: str | None
    format: _OutputFormat | None


class _AnthropicMetadata(_Model, total=False):
    user_id: str | None


class MessagesRequest(_Common, total=False):
    messages: list[_AnthropicMessage]
    system: _text_or(list[_Text]) | None  # type: ignore[valid-type]
    tools: list[AnthropicTool] | None  # type: ignore[valid-type]
    tool_choice: _AnthropicToolChoice | None
    stop_sequences: list[str] | None
    thinking: _ThinkingOptions | None
    output_config: _OutputConfig | None
    metadata: _AnthropicMetadata | None  # type: ignore[misc]
    top_k: int | None


#: The validator of each format's requests (the formats of ``gateway.translate.convert``).
ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "chat": TypeAdapter(ChatRequest),
    "responses": TypeAdapter(ResponsesRequest),
    "messages": TypeAdapter(MessagesRequest),
}
