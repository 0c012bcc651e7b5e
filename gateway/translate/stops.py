"""Stop reasons. The neutral reason is Anthropic's (the richest set):
``end_turn``, ``stop_sequence``, ``max_tokens``, ``tool_use``, ``refusal`` (and
Anthropic's own ``pause_turn``, ``model_context_window_exceeded``).

References: https://platform.openai.com/docs/api-reference/chat/object (finish_reason),
https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html (stopReason),
https://docs.anthropic.com/en/api/messages (stop_reason),
https://platform.openai.com/docs/api-reference/responses/object (status, incomplete_details).
"""

from __future__ import annotations

from typing import Any

FROM_CHAT = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
TO_CHAT = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


#: Bedrock Converse ``stopReason`` (read only: no client speaks Converse); another reason
#: (``malformed_model_output``, ``malformed_tool_use``, a newer one) reads as ``end_turn``.
FROM_CONVERSE = {
    "end_turn": "end_turn",
    "stop_sequence": "stop_sequence",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "model_context_window_exceeded",
    "tool_use": "tool_use",
    "guardrail_intervened": "refusal",
    "content_filtered": "refusal",
}


#: Gemini ``finishReason`` (https://ai.google.dev/api/generate-content#FinishReason): the
#: safety family is a refusal; another reason (``OTHER``, the enum's unset value, a newer
#: one) reads as ``end_turn``. ``MALFORMED_FUNCTION_CALL`` (and its kin) is no stop:
#: the model failed to write a call, and the answer is retried (:data:`GEMINI_FAILED`).
FROM_GEMINI = {
    "STOP": "end_turn",
    "MAX_TOKENS": "max_tokens",
    "SAFETY": "refusal",
    "RECITATION": "refusal",
    "LANGUAGE": "refusal",
    "BLOCKLIST": "refusal",
    "PROHIBITED_CONTENT": "refusal",
    "SPII": "refusal",
    "IMAGE_SAFETY": "refusal",
    "IMAGE_PROHIBITED_CONTENT": "refusal",
    "IMAGE_RECITATION": "refusal",
}
#: Gemini finish reasons that say the model produced no usable answer.
GEMINI_FAILED = frozenset(
    {"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS",
     "MALFORMED_RESPONSE", "MISSING_THOUGHT_SIGNATURE"}
)  # fmt: skip
#: The Gemini ``finishReason`` of a neutral stop.
TO_GEMINI = {"max_tokens": "MAX_TOKENS", "model_context_window_exceeded": "MAX_TOKENS",
             "refusal": "SAFETY"}  # fmt: skip


def from_gemini(reason: Any) -> str:
    return FROM_GEMINI.get(reason, "end_turn") if type(reason) is str else "end_turn"


def to_gemini(stop: str | None) -> str:
    return TO_GEMINI.get(stop or "end_turn", "STOP")


def from_converse(reason: Any) -> str:
    return FROM_CONVERSE.get(reason, "end_turn") if type(reason) is str else "end_turn"


def from_chat(reason: Any) -> str:
    return FROM_CHAT.get(reason, "end_turn") if type(reason) is str else "end_turn"


def to_chat(stop: str | None) -> str:
    return TO_CHAT.get(stop or "end_turn", "stop")


def from_responses(status: Any, details: Any, tool_calls: bool) -> str:
    if status == "incomplete":
        reason = details.get("reason") if isinstance(details, dict) else None
        return "refusal" if reason == "content_filter" else "max_tokens"
    return "tool_use" if tool_calls else "end_turn"


def to_responses(stop: str | None) -> tuple[str, dict[str, str] | None]:
    """(status, incomplete_details) of a Responses answer that stopped for ``stop``."""
    if stop in ("max_tokens", "model_context_window_exceeded"):
        return "incomplete", {"reason": "max_output_tokens"}
    if stop == "refusal":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None
