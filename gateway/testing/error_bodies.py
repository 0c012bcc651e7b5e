"""The error bodies real providers send, in their own wording: OpenAI, Anthropic and Google
envelopes, Zhipu's documented codes, Gemini's quota, overload and key errors, and the
prompt-too-long 400 of OpenAI, Anthropic, vLLM and Gemini. Used by
:class:`~gateway.testing.Error` and the fake providers' context windows.
"""

from __future__ import annotations

from typing import Any

OPENAI_SERVER_MESSAGE = "The server had an error while processing your request. Sorry about that!"


def openai_error(
    message: str, type_: str | None, code: str | int | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def anthropic_error(type_: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": type_, "message": message},
        "request_id": "req_fake_error",
    }


def google_error(
    code: int, status: str, message: str, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A Google API error body: ``{"error": {"code", "message", "status"}}``, with
    ``details`` (``google.rpc`` messages, each with its ``@type``) when given."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = details
    return {"error": error}


# --- Gemini (Google AI Studio) ----------------------------------------------------------
# Each body below is the one Gemini sends, copied from a report of it.

_RPC = "type.googleapis.com/google.rpc."
#: 503 ``UNAVAILABLE``: https://github.com/google-gemini/gemini-cli/issues/4360 and
#: https://github.com/google-gemini/cookbook/issues/425
GEMINI_OVERLOADED = "The model is overloaded. Please try again later."
#: 500 ``INTERNAL``: https://github.com/PublicAffairs/openai-gemini/issues/15 and
#: https://github.com/google-gemini/gemini-cli/issues/3656
GEMINI_INTERNAL = (
    "An internal error has occurred. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting"
)
#: 504 ``DEADLINE_EXCEEDED``: Google's text for the status, as the Gemini SDKs report it
#: (https://github.com/interviewstreet/hiring-agent/issues/284,
#: https://github.com/googleapis/python-genai/issues/1808)
GEMINI_DEADLINE = "Deadline expired before operation could complete."
#: 400 ``API_KEY_INVALID``: https://github.com/continuedev/continue/issues/8516
GEMINI_KEY_INVALID = "API key not valid. Please pass a valid API key."
#: 403 without any key: https://github.com/PublicAffairs/openai-gemini/issues/92
GEMINI_NO_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). "
    "Please use API Key or other form of API consumer identity to call this API."
)
_QUOTA_HEAD = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. "
    "To monitor your current usage, head to: https://ai.dev/rate-limit. "
)


def gemini_key_invalid() -> dict[str, Any]:
    """400 ``INVALID_ARGUMENT``, reason ``API_KEY_INVALID``: a key Gemini does not know
    (https://github.com/continuedev/continue/issues/8516)."""
    info = {"@type": _RPC + "ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com",
            "metadata": {"service": "generativelanguage.googleapis.com"}}  # fmt: skip
    localized = {"@type": _RPC + "LocalizedMessage", "locale": "en-US",
                 "message": GEMINI_KEY_INVALID}  # fmt: skip
    return google_error(400, "INVALID_ARGUMENT", GEMINI_KEY_INVALID, [info, localized])


def gemini_quota(retry_delay: str | None, per_day: bool, model: str) -> dict[str, Any]:
    """429 ``RESOURCE_EXHAUSTED`` as AI Studio sends it since late 2025: the message names
    the quota and the wait, then ``Help``, ``QuotaFailure`` and ``RetryInfo`` (left out
    without ``retry_delay``) details
    (https://github.com/continuedev/continue/issues/10066; the violation's fields:
    https://github.com/google-gemini/gemini-cli-action/issues/36; the per-day quota id:
    https://github.com/googleapis/python-genai/issues/2044)."""
    metric = "generativelanguage.googleapis.com/generate_content_free_tier_requests"
    period, limit = ("Day", 250) if per_day else ("Minute", 10)
    message = (
        f"{_QUOTA_HEAD}\n* Quota exceeded for metric: {metric}, limit: {limit}, model: {model}"
    )
    if retry_delay is not None:
        message += f"\nPlease retry in {retry_delay}."
    violation = {
        "quotaMetric": metric,
        "quotaId": f"GenerateRequestsPer{period}PerProjectPerModel-FreeTier",
        "quotaDimensions": {"location": "global", "model": model},
        "quotaValue": str(limit),
    }
    link = {"description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}  # fmt: skip
    details: list[dict[str, Any]] = [
        {"@type": _RPC + "Help", "links": [link]},
        {"@type": _RPC + "QuotaFailure", "violations": [violation]},
    ]
    if retry_delay is not None:
        details.append({"@type": _RPC + "RetryInfo", "retryDelay": retry_delay})
    return google_error(429, "RESOURCE_EXHAUSTED", message, details)


def gemini_too_long(got: int, limit: int) -> dict[str, Any]:
    """Gemini's prompt-too-long 400
    (https://github.com/google-gemini/gemini-cli/issues/4231)."""
    message = (
        f"The input token count ({got}) exceeds the maximum number of tokens allowed ({limit})."
    )
    return google_error(400, "INVALID_ARGUMENT", message)


# Zhipu (bigmodel.cn) codes -> (default HTTP status, message); from the provider docs.
ZHIPU_CODES: dict[int, tuple[int, str]] = {
    1000: (401, "身份验证失败。"),
    1001: (401, "Header中未收到Authentication参数，无法进行身份验证。"),
    1002: (401, "Authorization Token非法，请确认Authorization Token正确传递。"),
    1003: (401, "Authorization Token过期，请重新生成/获取。"),
    1004: (401, "Authorization Token验证失败。"),
    1113: (429, "您的账户已欠费，请充值后重试。"),
    1211: (400, "模型不存在，请检查模型代码。"),
    1214: (400, "参数非法。请检查文档。"),
    1261: (400, "Prompt 超长"),
    1301: (
        400,
        "系统检测到输入或生成内容可能包含不安全或敏感内容，请您避免输入易产生敏感内容的提示语，感谢您的配合。",
    ),
    1302: (429, "您当前使用该 API 的并发数过高，请降低并发，或联系客服增加限额。"),
    1303: (429, "您当前使用该 API 的频率过高，请降低频率，或联系客服增加限额。"),
    1304: (429, "该 API 已达今日调用次数限额，如有更多需求，请联系客服购买。"),
    1305: (429, "该模型当前访问量过大，请您稍后再试"),
    1308: (429, "已达到 5 小时 的使用上限。您的限额将在 2030-01-01 00:00:00 重置。"),
    1312: (429, "该模型当前访问量过大，请您稍后再试，或切换其他模型"),
}


def context_length_body(style: str, limit: int, got: int, completion: int = 0) -> dict[str, Any]:
    """The body of a real prompt-too-long error of ``style`` (openai/anthropic/vllm/gemini)."""
    if style == "gemini":
        return gemini_too_long(got, limit)
    if style == "anthropic":
        if got > limit or completion == 0:
            message = f"prompt is too long: {got} tokens > {limit} maximum"
        else:
            message = (
                f"input length and `max_tokens` exceed context limit: {got} + {completion} "
                f"> {limit}, decrease input length or `max_tokens` and try again"
            )
        return anthropic_error("invalid_request_error", message)
    if style == "vllm":
        total = got + completion
        message = (
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{completion} output tokens and your prompt contains at least {got} input tokens, "
            f"for a total of at least {total} tokens. Please reduce the length of the input "
            f"prompt or the number of requested output tokens. "
            f"(parameter=input_tokens, value={got})"
        )
        return openai_error(message, "BadRequestError", 400, "input_tokens")
    if completion:
        detail = (
            f"However, you requested {got + completion} tokens ({got} in the messages, "
            f"{completion} in the completion). Please reduce the length of the messages "
            "or completion."
        )
    else:
        detail = (
            f"However, your messages resulted in {got} tokens. "
            "Please reduce the length of the messages."
        )
    message = f"This model's maximum context length is {limit} tokens. {detail}"
    return openai_error(message, "invalid_request_error", "context_length_exceeded", "messages")
