"""The error bodies real providers send, in their own wording: OpenAI and Anthropic
envelopes, Zhipu's documented codes, and the prompt-too-long 400 of OpenAI, Anthropic
and vLLM. Used by :class:`~gateway.testing.Error` and the fake provider's context window.
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
    """The body of a real prompt-too-long error of ``style`` (openai/anthropic/vllm)."""
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
