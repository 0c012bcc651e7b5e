"""Pydantic models of a Gemini ``generateContent`` request body: the fields
:mod:`gateway.translate.requests.gemini_read` reads, with their JSON types, each under
both of the names Google's JSON takes (lowerCamelCase and the proto name: google-genai
sends ``mime_type``, ``thinking_budget``...); the rest is ignored, as in
:mod:`gateway.translate.request_models` (the other formats'). :func:`GEMINI_ADAPTER`
validates a body (:func:`gateway.translate.request_check.check`)."""

from __future__ import annotations

from typing import Annotated, Any, Required

from pydantic import ConfigDict, Discriminator, Field, Tag, TypeAdapter
from typing_extensions import TypedDict

from gateway.translate.request_models import TAG

_G = ConfigDict(strict=True, extra="ignore")
_Obj = dict[str, Any]
_Count = Annotated[int, Field(ge=1)]


class _Blob(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    mimeType: str | None
    mime_type: str | None
    data: str | None
    displayName: str | None
    display_name: str | None


class _FileData(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    mimeType: str | None
    mime_type: str | None
    fileUri: str | None
    file_uri: str | None


class _Call(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    id: str | None
    name: str | None
    args: _Obj | None


class _Media(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    inlineData: _Blob | None
    inline_data: _Blob | None
    fileData: _FileData | None
    file_data: _FileData | None


class _Response(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    id: str | None
    name: str | None
    response: _Obj | None
    parts: list[_Media] | None


class _Part(_Media, total=False):
    text: str | None
    thought: bool | None
    thoughtSignature: str | None
    thought_signature: str | None
    functionCall: _Call | None
    function_call: _Call | None
    functionResponse: _Response | None
    function_response: _Response | None


class _Content(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    role: str | None
    parts: list[_Part] | None


def _system_tag(value: Any) -> str | None:
    kind = type(value)
    return TAG + "str" if kind is str else TAG + "obj" if kind is dict else None


_System = Annotated[
    Annotated[str, Tag(TAG + "str")] | Annotated[_Content, Tag(TAG + "obj")],
    Discriminator(
        _system_tag,
        custom_error_type="text_or_object",
        custom_error_message="a string or an object",
    ),
]


class _Declaration(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    name: str | None
    description: str | None
    parameters: _Obj | None
    parametersJsonSchema: _Obj | None
    parameters_json_schema: _Obj | None


class _Tool(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    functionDeclarations: list[_Declaration] | None
    function_declarations: list[_Declaration] | None


class _Calling(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    mode: str | None
    allowedFunctionNames: list[str] | None
    allowed_function_names: list[str] | None


class _ToolConfig(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    functionCallingConfig: _Calling | None
    function_calling_config: _Calling | None


class _ThinkingConfig(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    thinkingBudget: int | None
    thinking_budget: int | None
    thinkingLevel: str | None
    thinking_level: str | None
    includeThoughts: bool | None
    include_thoughts: bool | None


class _Generation(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    maxOutputTokens: _Count | None
    max_output_tokens: _Count | None
    temperature: float | None
    topP: float | None
    top_p: float | None
    stopSequences: list[str] | None
    stop_sequences: list[str] | None
    candidateCount: int | None
    candidate_count: int | None
    responseMimeType: str | None
    response_mime_type: str | None
    responseSchema: _Obj | None
    response_schema: _Obj | None
    responseJsonSchema: _Obj | None
    response_json_schema: _Obj | None
    responseModalities: list[str] | None
    response_modalities: list[str] | None
    thinkingConfig: _ThinkingConfig | None
    thinking_config: _ThinkingConfig | None


class _GeminiRequest(TypedDict, total=False):
    __pydantic_config__ = _G  # type: ignore[misc]
    contents: Required[list[_Content]]
    systemInstruction: _System | None
    system_instruction: _System | None
    tools: list[_Tool] | None
    toolConfig: _ToolConfig | None
    tool_config: _ToolConfig | None
    generationConfig: _Generation | None
    generation_config: _Generation | None


GEMINI_ADAPTER: TypeAdapter[Any] = TypeAdapter(_GeminiRequest)

__all__ = ["GEMINI_ADAPTER"]
