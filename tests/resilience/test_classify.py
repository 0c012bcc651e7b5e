"""Classification of upstream failures: provider bodies, statuses, events, policy rules."""

# Provider messages are kept verbatim as captured, so some table lines are long.

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import format_datetime
from types import MappingProxyType
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import Category
from gateway.policy.schema import ClassifyRule
from gateway.resilience.classify import (
    MESSAGE_MAX_CHARS,
    classify_error_event,
    classify_response,
    token_counts,
    transport_failure,
)
from gateway.resilience.keywords import KEYWORDS

pytestmark = pytest.mark.fast

NOW = 1_750_000_000.0
RL = Category.rate_limit
QUOTA = Category.quota_exhausted
OVER = Category.server_overload
SERVER = Category.server_error
TIMEOUT = Category.timeout
PTL = Category.prompt_too_long
FILTER = Category.content_filter
AUTH = Category.auth
INVALID = Category.invalid_request


def j(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def oai(message: str, type_: str | None = None, code: Any = None, **extra: Any) -> bytes:
    return j({"error": {"message": message, "type": type_, "param": None, "code": code, **extra}})


def ant(type_: str, message: str) -> bytes:
    return j({"type": "error", "error": {"type": type_, "message": message}, "request_id": "req_1"})


def zhipu(code: str, message: str) -> bytes:
    return j({"error": {"code": code, "message": message}, "request_id": "20250821124059abc"})


class Case(NamedTuple):
    status: int
    body: bytes
    category: Category
    expect: Mapping[str, Any] = MappingProxyType({})
    headers: Mapping[str, str] = MappingProxyType({})


def check(case: Case) -> None:
    failure = classify_response(case.status, case.headers, case.body, now=NOW)
    assert failure.category is case.category, failure
    for name, value in case.expect.items():
        got = getattr(failure, name)
        assert got == (pytest.approx(value) if isinstance(value, float) else value), name


OPENAI_RL_MSG = (
    "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): "
    "Limit 30000, Used 29000, Requested 2000. Please try again in 2s. Visit "
    "https://platform.openai.com/account/rate-limits to learn more."
)
OPENAI = [
    pytest.param(
        Case(429, oai(OPENAI_RL_MSG, "tokens", "rate_limit_exceeded"), RL, {"retry_after": 2.0}),
        id="rate_limit_exceeded-body-hint",
    ),
    pytest.param(
        Case(
            429,
            oai(OPENAI_RL_MSG, "tokens", "rate_limit_exceeded"),
            RL,
            {"retry_after": 1.5, "code": "rate_limit_exceeded", "status": 429},
            {"retry-after-ms": "1500", "retry-after": "2"},
        ),
        id="rate_limit_exceeded-retry-after-ms",
    ),
    pytest.param(
        Case(
            429,
            oai(
                "You exceeded your current quota, please check your plan and billing details. "
                "For more information on this error, read the docs: "
                "https://platform.openai.com/docs/guides/error-codes/api-errors.",
                "insufficient_quota",
                "insufficient_quota",
            ),
            QUOTA,
            {"code": "insufficient_quota"},
        ),
        id="insufficient_quota-as-429",
    ),
    pytest.param(
        Case(
            429,
            oai("Spend limit reached.", "insufficient_quota", "project_spend_limit_exceeded"),
            QUOTA,
        ),
        id="project_spend_limit_exceeded",
    ),
    pytest.param(
        Case(
            400,
            oai(
                "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in 9100 tokens. Please reduce the length of the messages.",
                "invalid_request_error",
                "context_length_exceeded",
                param="messages",
            ),
            PTL,
            {"prompt_tokens": 9100, "context_limit": 8192},
        ),
        id="context_length_exceeded",
    ),
    pytest.param(
        Case(
            400,
            oai(
                "This model's maximum context length is 4097 tokens. However, you requested "
                "4162 tokens (3162 in the messages, 1000 in the completion). Please reduce the "
                "length of the messages or completion.",
                "invalid_request_error",
                "context_length_exceeded",
            ),
            PTL,
            {"prompt_tokens": 4162, "context_limit": 4097},
        ),
        id="context_length_exceeded-older-wording",
    ),
    pytest.param(
        Case(
            503,
            oai(
                "That model is currently overloaded with other requests. You can retry your "
                "request, or contact us through our help center if the error persists.",
                "service_unavailable_error",
                "server_is_overloaded",
            ),
            OVER,
        ),
        id="server_is_overloaded-503",
    ),
    pytest.param(
        Case(429, oai("Please reduce your rate of requests.", "rate_limit_error", "slow_down"), RL),
        id="slow_down",
    ),
    pytest.param(
        Case(
            429,
            oai(
                "Rate limit reached for default-gpt-3.5-turbo in organization org-x on requests "
                "per min. Limit: 3 / min. Please try again in 20s.",
                "requests",
            ),
            RL,
            {"retry_after": 20.0},
        ),
        id="older-429-type-requests",
    ),
    pytest.param(
        Case(
            429,
            oai("Rate limit reached.", "requests"),
            RL,
            {"retry_after": 360.0},
            {
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "6m0s",
                "x-ratelimit-remaining-tokens": "1000",
                "x-ratelimit-reset-tokens": "12ms",
            },
        ),
        id="reset-headers-of-the-exhausted-dimension",
    ),
    pytest.param(
        Case(
            500,
            oai(
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
            ),
            SERVER,
            {"retry_after": None},
            {"x-ratelimit-reset-requests": "1s", "x-ratelimit-remaining-requests": "0"},
        ),
        id="server_error-ignores-reset-headers",
    ),
    pytest.param(
        Case(500, oai("The server is overloaded, please retry.", "server_error"), OVER),
        id="500-overloaded",
    ),
    pytest.param(
        Case(
            401,
            oai(
                "Incorrect API key provided: sk-abc***. You can find your API key at "
                "https://platform.openai.com/account/api-keys.",
                "invalid_request_error",
                "invalid_api_key",
            ),
            AUTH,
        ),
        id="invalid_api_key",
    ),
    pytest.param(
        Case(
            403,
            oai(
                "Country, region, or territory not supported",
                "request_forbidden",
                "unsupported_country_region_territory",
            ),
            AUTH,
        ),
        id="region-403",
    ),
    pytest.param(
        Case(
            404,
            oai("The model `gpt-9` does not exist", "invalid_request_error", "model_not_found"),
            INVALID,
        ),
        id="model_not_found",
    ),
    pytest.param(
        Case(400, oai("Invalid value for 'temperature': 3 > 2.", "invalid_request_error"), INVALID),
        id="plain-bad-request",
    ),
    pytest.param(Case(409, oai("Conflict"), Category.conflict), id="409-conflict"),
    pytest.param(Case(408, oai("Request timed out"), TIMEOUT), id="408-timeout"),
]

AZURE_429 = (
    "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
    "2024-02-15-preview have exceeded token rate limit of your current OpenAI S0 pricing "
    "tier. Please retry after {n} seconds. Please go here: https://aka.ms/oai/quotaincrease "
    "if you would like to further increase the default rate limit."
)
AZURE = [
    pytest.param(
        Case(
            400,
            oai(
                "The response was filtered due to the prompt triggering Azure OpenAI's content "
                "management policy. Please modify your prompt and retry.",
                None,
                "content_filter",
                status=400,
                innererror={"code": "ResponsibleAIPolicyViolation", "content_filter_result": {}},
            ),
            FILTER,
        ),
        id="content_filter",
    ),
    pytest.param(
        Case(
            429,
            j({"error": {"code": "429", "message": AZURE_429.format(n=37)}}),
            RL,
            {"retry_after": 37.0},
        ),
        id="retry-after-37-seconds",
    ),
    pytest.param(
        Case(
            429,
            j({"error": {"code": "429", "message": AZURE_429.format(n=37)}}),
            RL,
            {"retry_after": 12.0},
            {"retry-after": "12"},
        ),
        id="header-beats-body",
    ),
    pytest.param(
        Case(
            429,
            j({"error": {"code": "429", "message": AZURE_429.format(n=86400)}}),
            QUOTA,
            {"retry_after": 86400.0},
        ),
        id="daily-quota-86400-seconds",
    ),
]

ANTHROPIC = [
    pytest.param(Case(529, ant("overloaded_error", "Overloaded"), OVER), id="529-overloaded"),
    pytest.param(
        Case(
            429,
            ant(
                "rate_limit_error",
                "This request would exceed the rate limit for your organization of 50,000 input "
                "tokens per minute. Please reduce the prompt length or the maximum tokens "
                "requested, or try again later.",
            ),
            RL,
            {"retry_after": 17.0, "code": "rate_limit_error"},
            {"retry-after": "17", "anthropic-ratelimit-input-tokens-remaining": "0"},
        ),
        id="rate_limit_error-retry-after",
    ),
    pytest.param(
        Case(
            429,
            ant(
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            ),
            RL,
            {"retry_after": 30.0},
            {
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": datetime.fromtimestamp(NOW + 30, UTC)
                .isoformat()
                .replace("+00:00", "Z"),
            },
        ),
        id="rate_limit_error-rfc3339-reset",
    ),
    pytest.param(
        Case(
            400,
            ant("invalid_request_error", "prompt is too long: 205351 tokens > 200000 maximum"),
            PTL,
            {"prompt_tokens": 205351, "context_limit": 200000},
        ),
        id="prompt-is-too-long",
    ),
    pytest.param(
        Case(
            400,
            ant(
                "invalid_request_error",
                "Your credit balance is too low to access the Anthropic API. Please go to Plans "
                "& Billing to upgrade or purchase credits.",
            ),
            QUOTA,
        ),
        id="credit-balance-too-low-400",
    ),
    pytest.param(Case(402, ant("billing_error", "Billing issue"), QUOTA), id="402-billing_error"),
    pytest.param(Case(401, ant("authentication_error", "invalid x-api-key"), AUTH), id="401"),
    pytest.param(
        Case(403, ant("permission_error", "Your API key does not have permission"), AUTH),
        id="403-permission_error",
    ),
    pytest.param(
        Case(
            413,
            ant("request_too_large", "Request exceeds the maximum allowed number of bytes."),
            PTL,
        ),
        id="413-request_too_large",
    ),
    pytest.param(
        Case(
            413,
            b"<html><head><title>413 Request Entity Too Large</title></head></html>",
            PTL,
            {"message": ""},
        ),
        id="413-cloudflare-html",
    ),
    pytest.param(Case(500, ant("api_error", "Internal server error"), SERVER), id="500-api_error"),
    pytest.param(
        Case(504, ant("timeout_error", "Request timed out"), TIMEOUT), id="504-timeout_error"
    ),
    pytest.param(
        Case(404, ant("not_found_error", "model: claude-9"), INVALID), id="404-not_found_error"
    ),
]

ZHIPU = [
    pytest.param(
        Case(
            429,
            zhipu("1302", "您当前使用该 API 的并发数过高，请降低并发，或联系客服增加限额。"),
            RL,
            {"code": "1302"},
        ),
        id="1302-concurrency",
    ),
    pytest.param(
        Case(429, zhipu("1302", "您的账户已达到速率限制，请您控制请求频率"), RL), id="1302-newer"
    ),
    pytest.param(
        Case(
            429, zhipu("1303", "您当前使用该 API 的频率过高，请降低频率，或联系客服增加限额。"), RL
        ),
        id="1303",
    ),
    pytest.param(
        Case(429, zhipu("1113", "您的账户已欠费，请充值后重试。"), QUOTA), id="1113-arrears-as-429"
    ),
    pytest.param(
        Case(
            429, zhipu("1304", "该 API 已达今日调用次数限额，如有更多需求，请联系客服购买。"), QUOTA
        ),
        id="1304",
    ),
    pytest.param(
        Case(
            429,
            zhipu("1308", "已达到 5 小时 的使用上限。您的限额将在 2025-08-21 12:40:59 重置。"),
            QUOTA,
        ),
        id="1308",
    ),
    pytest.param(Case(429, zhipu("1309", "您的 GLM Coding Plan 套餐已到期"), QUOTA), id="1309"),
    pytest.param(Case(400, zhipu("1261", "Prompt 超长"), PTL, {"prompt_tokens": None}), id="1261"),
    pytest.param(
        Case(
            400,
            zhipu(
                "1301",
                "系统检测到输入或生成内容可能包含不安全或敏感内容，请您避免输入易产生敏感内容的提示语，感谢您的配合。",
            ),
            FILTER,
        ),
        id="1301",
    ),
    pytest.param(Case(429, zhipu("1305", "该模型当前访问量过大，请您稍后再试"), OVER), id="1305"),
    pytest.param(
        Case(429, zhipu("1312", "该模型当前访问量过大，请您稍后再试，或切换其他模型"), OVER),
        id="1312",
    ),
    pytest.param(Case(401, zhipu("1000", "身份验证失败。"), AUTH), id="1000"),
    pytest.param(
        Case(401, zhipu("1001", "Header中未收到Authentication参数，无法进行身份验证。"), AUTH),
        id="1001",
    ),
    pytest.param(
        Case(
            401,
            zhipu("1002", "Authentication Token非法，请确认Authentication Token正确传递。"),
            AUTH,
        ),
        id="1002",
    ),
    pytest.param(
        Case(401, zhipu("1003", "Authentication Token已过期，请重新生成/获取。"), AUTH), id="1003"
    ),
    pytest.param(
        Case(401, zhipu("1004", "通过提供的Authentication Token认证失败。"), AUTH), id="1004"
    ),
    pytest.param(
        Case(200, zhipu("1112", "当前账户已被锁定，请联系客服解锁。"), AUTH), id="1112-locked"
    ),
    pytest.param(
        Case(400, zhipu("1211", "模型不存在，请检查模型代码。"), INVALID), id="1211-no-such-model"
    ),
    pytest.param(
        Case(429, j({"error": {"message": "请求过于频繁，请稍后再试"}}), RL), id="no-code-429-zh"
    ),
    pytest.param(
        Case(429, j({"error": {"message": "账户余额不足"}}), QUOTA), id="no-code-429-balance-zh"
    ),
    pytest.param(
        Case(400, j({"error": {"message": "请求 Prompt 超长"}}), PTL), id="no-code-400-too-long-zh"
    ),
    pytest.param(
        Case(429, zhipu("1302", "并发数过高，请在20秒后重试"), RL, {"retry_after": 20.0}),
        id="chinese-wait-hint",
    ),
]

DEEPSEEK = [
    pytest.param(
        Case(402, oai("Insufficient Balance", "unknown_error", "invalid_request_error"), QUOTA),
        id="402-insufficient-balance",
    ),
    pytest.param(Case(429, oai("Rate Limit Reached", "rate_limit_reached"), RL), id="429"),
    pytest.param(
        Case(503, oai("服务器繁忙，请稍后重试。", "server_error"), OVER), id="503-server-busy-zh"
    ),
    pytest.param(
        Case(500, oai("服务器繁忙，请稍后重试。", "server_error"), OVER), id="500-server-busy-zh"
    ),
    pytest.param(Case(503, oai("Server Overloaded", "server_error"), OVER), id="503-overloaded"),
    pytest.param(
        Case(
            400,
            oai(
                "This model's maximum context length is 65536 tokens. However, you requested "
                "70000 tokens (70000 in the messages, 0 in the completion). Please reduce the "
                "length of the messages or completion.",
                "invalid_request_error",
            ),
            PTL,
            {"prompt_tokens": 70000, "context_limit": 65536},
        ),
        id="context",
    ),
]


def gemini_429(quota_id: str, delay: str) -> bytes:
    return j(
        {
            "error": {
                "code": 429,
                "message": "You exceeded your current quota, please check your plan and billing "
                "details. Please retry in 47.434392449s.",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                        "violations": [
                            {
                                "quotaMetric": "generativelanguage.googleapis.com/"
                                "generate_content_free_tier_requests",
                                "quotaId": quota_id,
                                "quotaValue": "15",
                            }
                        ],
                    },
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay},
                ],
            }
        }
    )


GEMINI = [
    pytest.param(
        Case(
            429,
            j(
                [
                    {
                        "error": {
                            "code": 429,
                            "message": "Resource has been exhausted (e.g. check quota).",
                            "status": "RESOURCE_EXHAUSTED",
                        }
                    }
                ]
            ),
            RL,
            {"code": "RESOURCE_EXHAUSTED"},
        ),
        id="array-body",
    ),
    pytest.param(
        Case(
            429,
            gemini_429("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "38s"),
            RL,
            {"retry_after": 38.0},
        ),
        id="per-minute-retryDelay",
    ),
    pytest.param(
        Case(
            429,
            gemini_429("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "45.8s"),
            QUOTA,
            {"retry_after": 45.8},
        ),
        id="per-day-is-quota",
    ),
    pytest.param(
        Case(
            503,
            j(
                {
                    "error": {
                        "code": 503,
                        "message": "The model is overloaded. Please try again later.",
                        "status": "UNAVAILABLE",
                    }
                }
            ),
            OVER,
        ),
        id="503-unavailable",
    ),
    pytest.param(
        Case(
            400,
            j(
                {
                    "error": {
                        "code": 400,
                        "message": "The input token count (1234567) exceeds the maximum number of tokens allowed (1048576).",
                        "status": "INVALID_ARGUMENT",
                    }
                }
            ),
            PTL,
            {"prompt_tokens": 1234567, "context_limit": 1048576},
        ),
        id="input-token-count",
    ),
    pytest.param(
        Case(
            400,
            j(
                {
                    "error": {
                        "code": 400,
                        "message": "API key not valid. Please pass a valid API key.",
                        "status": "INVALID_ARGUMENT",
                    }
                }
            ),
            AUTH,
        ),
        id="api-key-not-valid",
    ),
    pytest.param(
        Case(
            500,
            j(
                {
                    "error": {
                        "code": 500,
                        "message": "An internal error has occurred.",
                        "status": "INTERNAL",
                    }
                }
            ),
            SERVER,
        ),
        id="500-internal",
    ),
    pytest.param(
        Case(
            504,
            j(
                {
                    "error": {
                        "code": 504,
                        "message": "Deadline expired.",
                        "status": "DEADLINE_EXCEEDED",
                    }
                }
            ),
            TIMEOUT,
        ),
        id="504-deadline",
    ),
]

GROQ_TPM = (
    "Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_01` service "
    "tier `on_demand` on tokens per minute (TPM): Limit 15000, Used 11972, Requested 4351. "
    "Please try again in 5.289s. Need more tokens? Upgrade to Dev Tier today."
)
GROQ = [
    pytest.param(
        Case(
            498,
            oai("Flex tier capacity exceeded. This is a known issue.", "capacity_exceeded"),
            OVER,
        ),
        id="498",
    ),
    pytest.param(
        Case(429, oai(GROQ_TPM, "tokens", "rate_limit_exceeded"), RL, {"retry_after": 5.289}),
        id="tpm-try-again-in-5.289s",
    ),
    pytest.param(
        Case(
            429,
            oai(GROQ_TPM, "tokens", "rate_limit_exceeded"),
            RL,
            {"retry_after": 6.0},
            {"retry-after": "6"},
        ),
        id="tpm-retry-after-header",
    ),
    pytest.param(
        Case(
            413,
            oai(
                "Request too large for model `llama3-8b-8192` in organization `org_01` on tokens "
                "per minute (TPM): Limit 6000, Requested 9000, please reduce your message size "
                "and try again.",
                "tokens",
                "rate_limit_exceeded",
            ),
            PTL,
        ),
        id="413-request-larger-than-tpm",
    ),
]

MISTRAL = [
    pytest.param(
        Case(
            429,
            j(
                {
                    "object": "error",
                    "message": "Rate limit exceeded",
                    "type": "rate_limited",
                    "param": None,
                    "code": "1300",
                }
            ),
            RL,
        ),
        id="rate_limited-1300",
    ),
    pytest.param(
        Case(429, j({"message": "Requests rate limit exceeded"}), RL), id="older-bare-message"
    ),
    pytest.param(
        Case(
            503,
            j(
                {
                    "object": "error",
                    "message": "Service tier capacity exceeded for this model.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "3505",
                }
            ),
            OVER,
        ),
        id="capacity-exceeded",
    ),
    pytest.param(
        Case(
            400,
            j(
                {
                    "object": "error",
                    "message": "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            ),
            PTL,
            {"prompt_tokens": 40000, "context_limit": 32768},
        ),
        id="too-large-for-model",
    ),
    pytest.param(Case(401, j({"message": "Unauthorized", "request_id": "abc"}), AUTH), id="401"),
]

VLLM_PTL = (
    "This model's maximum context length is 40960 tokens. However, you requested 0 output "
    "tokens and your prompt contains at least 40961 input tokens, for a total of at least "
    "40961 tokens. Please reduce the length of the input prompt or the number of requested "
    "output tokens. (parameter=input_tokens, value=40961)"
)
VLLM = [
    pytest.param(
        Case(
            400,
            j(
                {
                    "error": {
                        "message": VLLM_PTL,
                        "type": "BadRequestError",
                        "param": "input_tokens",
                        "code": 400,
                    }
                }
            ),
            PTL,
            {"prompt_tokens": 40961, "context_limit": 40960, "code": "BadRequestError"},
        ),
        id="int-code-parameter-input_tokens",
    ),
    pytest.param(
        Case(
            400,
            j(
                {
                    "error": {
                        "message": "Input too big (parameter=input_tokens, value=99)",
                        "type": "BadRequestError",
                        "code": 400,
                    }
                }
            ),
            PTL,
        ),
        id="parameter-marker-alone",
    ),
    pytest.param(
        Case(
            400,
            j(
                {
                    "object": "error",
                    "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            ),
            PTL,
            {"prompt_tokens": 5000, "context_limit": 4096},
        ),
        id="older-top-level",
    ),
    pytest.param(
        Case(
            500,
            j(
                {
                    "error": {
                        "message": "EngineCore encountered an issue.",
                        "type": "InternalServerError",
                        "code": 500,
                    }
                }
            ),
            SERVER,
        ),
        id="500",
    ),
    pytest.param(
        Case(
            404,
            j(
                {
                    "error": {
                        "message": "The model `foo` does not exist.",
                        "type": "NotFoundError",
                        "code": 404,
                    }
                }
            ),
            INVALID,
        ),
        id="404",
    ),
]

OPENROUTER = [
    pytest.param(
        Case(
            402,
            j(
                {
                    "error": {
                        "code": 402,
                        "message": "Insufficient credits. Add more using https://openrouter.ai/credits",
                    }
                }
            ),
            QUOTA,
        ),
        id="402",
    ),
    pytest.param(
        Case(
            403,
            j(
                {
                    "error": {
                        "code": 403,
                        "message": 'openai/gpt-4o requires moderation on OpenAI. Your input was flagged for "harassment". No credits were charged.',
                        "metadata": {
                            "reasons": ["harassment"],
                            "flagged_input": "...",
                            "provider_name": "OpenAI",
                            "model_slug": "openai/gpt-4o",
                        },
                    }
                }
            ),
            FILTER,
        ),
        id="403-moderation",
    ),
    pytest.param(
        Case(
            200,
            j({"error": {"code": 502, "message": "Provider returned error"}}),
            SERVER,
            {"status": 502},
        ),
        id="200-carrying-502",
    ),
    pytest.param(
        Case(
            200,
            j({"error": {"code": 429, "message": "Provider rate limited"}}),
            RL,
            {"status": 429},
        ),
        id="200-carrying-429",
    ),
    pytest.param(
        Case(
            429,
            j({"error": {"code": 429, "message": "Rate limit exceeded: free-models-per-min."}}),
            RL,
            {"retry_after": 3.0},
            {"retry-after": "3"},
        ),
        id="429-retry-after",
    ),
    pytest.param(
        Case(
            400,
            j(
                {
                    "error": {
                        "code": 400,
                        "message": 'This endpoint\'s maximum context length is 32768 tokens. However, you requested about 37623 tokens (21239 of text input, 16384 in the output). Please reduce the length of either one, or use the "middle-out" transform to compress your prompt automatically.',
                    }
                }
            ),
            PTL,
            {"prompt_tokens": 37623, "context_limit": 32768},
        ),
        id="context-requested-about",
    ),
    pytest.param(
        Case(408, j({"error": {"code": 408, "message": "Request timed out"}}), TIMEOUT), id="408"
    ),
    pytest.param(
        Case(
            503,
            j(
                {
                    "error": {
                        "code": 503,
                        "message": "No endpoints found that can handle the requested parameters.",
                    }
                }
            ),
            OVER,
        ),
        id="503",
    ),
]

OTHERS = [
    pytest.param(
        Case(
            429,
            oai(
                "Your account org-x<ak-y> request reached max organization concurrency: 1, please try again after 1 seconds",
                "rate_limit_reached_error",
            ),
            RL,
            {"retry_after": 1.0},
        ),
        id="moonshot-concurrency",
    ),
    pytest.param(
        Case(
            429,
            oai(
                "Your account is suspended, please check your plan and billing details",
                "exceeded_current_quota_error",
            ),
            QUOTA,
        ),
        id="moonshot-quota",
    ),
    pytest.param(
        Case(
            400,
            j(
                {
                    "error": {
                        "code": "tokens_too_long",
                        "message": "Prompt tokens too long",
                        "type": "invalid_request_error",
                    }
                }
            ),
            PTL,
        ),
        id="qianfan-tokens_too_long",
    ),
    pytest.param(
        Case(
            400,
            j(
                {
                    "code": "Arrearage",
                    "message": "Access denied, please make sure your account is in good standing.",
                    "request_id": "x",
                }
            ),
            QUOTA,
        ),
        id="dashscope-arrearage",
    ),
    pytest.param(
        Case(
            429,
            j(
                {
                    "code": "Throttling.RateQuota",
                    "message": "Requests rate limit exceeded, please try again later.",
                }
            ),
            RL,
        ),
        id="dashscope-throttling",
    ),
    pytest.param(
        Case(
            400,
            j(
                {
                    "code": "DataInspectionFailed",
                    "message": "Input data may contain inappropriate content.",
                }
            ),
            FILTER,
        ),
        id="dashscope-inspection",
    ),
    pytest.param(
        Case(429, j({"detail": "Too many requests, slow down"}), RL),
        id="fastapi-detail",
    ),
]

GARBAGE = [
    pytest.param(Case(500, b"", SERVER, {"message": "", "code": None}), id="500-empty"),
    pytest.param(
        Case(
            502,
            b"<html><body><h1>502 Bad Gateway</h1>cloudflare</body></html>",
            SERVER,
            {"message": ""},
        ),
        id="502-html",
    ),
    pytest.param(
        Case(
            503,
            b"upstream connect error or disconnect/reset before headers. reset reason: overflow",
            OVER,
        ),
        id="503-envoy-text",
    ),
    pytest.param(Case(500, "服务器繁忙，请稍后再试".encode(), OVER), id="500-plain-zh"),
    pytest.param(Case(429, b"\xff\xfe\x00\x81garbage", RL, {"message": ""}), id="429-invalid-utf8"),
    pytest.param(Case(400, b"{not json", INVALID), id="400-broken-json"),
    pytest.param(Case(500, b"null", SERVER), id="json-null"),
    pytest.param(Case(500, b"[]", SERVER), id="json-empty-list"),
    pytest.param(Case(500, b"42", SERVER), id="json-number"),
    pytest.param(
        Case(500, b'"Internal Server Error"', SERVER, {"message": "Internal Server Error"}),
        id="json-string",
    ),
    pytest.param(Case(500, b'{"error": null}', SERVER), id="error-null"),
    pytest.param(
        Case(429, b'{"error": {"code": true, "message": 5, "type": []}}', RL), id="odd-field-types"
    ),
    pytest.param(Case(500, b"[" * 5000 + b"]" * 5000, SERVER), id="deep-nesting"),
    pytest.param(Case(500, b"a" * (5 << 20), SERVER), id="5-MiB-body"),
    pytest.param(Case(200, b"", SERVER, {"status": 200}), id="200-empty"),
    pytest.param(Case(0, b"", SERVER, {"status": None}), id="status-0"),
    pytest.param(Case(418, b"I'm a teapot", INVALID), id="418"),
    pytest.param(Case(599, b"", SERVER), id="599"),
    pytest.param(Case(500, b"\xef\xbb\xbf" + oai("The server is overloaded"), OVER), id="utf8-bom"),
]


@pytest.mark.parametrize("case", OPENAI)
def test_openai(case: Case) -> None:
    """OpenAI bodies: code beats status (insufficient_quota at 429); hints, token counts parsed."""
    check(case)


@pytest.mark.parametrize("case", AZURE)
def test_azure(case: Case) -> None:
    """Azure: content_filter, the wait in the 429 message, an 86400 s wait is a quota."""
    check(case)


@pytest.mark.parametrize("case", ANTHROPIC)
def test_anthropic(case: Case) -> None:
    """Anthropic error types, credit balance at 400 is a quota, prompt-too-long token counts."""
    check(case)


@pytest.mark.parametrize("case", ZHIPU)
def test_zhipu(case: Case) -> None:
    """Zhipu numeric string codes and Chinese messages decide, whatever the HTTP status."""
    check(case)


@pytest.mark.parametrize("case", DEEPSEEK)
def test_deepseek(case: Case) -> None:
    """DeepSeek 402 balance, 429, 503/500 服务器繁忙 as overload, context length counts."""
    check(case)


@pytest.mark.parametrize("case", GEMINI)
def test_gemini(case: Case) -> None:
    """Gemini list-wrapped bodies, RESOURCE_EXHAUSTED per minute vs per day, retryDelay hints."""
    check(case)


@pytest.mark.parametrize("case", GROQ)
def test_groq(case: Case) -> None:
    """Groq 498 capacity, TPM limits with fractional waits, 413 larger-than-TPM requests."""
    check(case)


@pytest.mark.parametrize("case", MISTRAL)
def test_mistral(case: Case) -> None:
    """Mistral top-level error objects, capacity exceeded as overload, token counts."""
    check(case)


@pytest.mark.parametrize("case", VLLM)
def test_vllm(case: Case) -> None:
    """vLLM int codes and the (parameter=input_tokens marker mean prompt_too_long."""
    check(case)


@pytest.mark.parametrize("case", OPENROUTER)
def test_openrouter(case: Case) -> None:
    """OpenRouter int codes, a 200 carrying the real status, moderation as content_filter."""
    check(case)


@pytest.mark.parametrize("case", OTHERS)
def test_other_providers(case: Case) -> None:
    """Moonshot, Qianfan, DashScope and FastAPI-style bodies."""
    check(case)


@pytest.mark.parametrize("case", GARBAGE)
def test_garbage_bodies_fall_back_to_status(case: Case) -> None:
    """Empty, HTML, binary, odd JSON and huge bodies never raise and classify by status."""
    check(case)


@pytest.mark.parametrize(
    ("status", "category"),
    [
        (400, INVALID), (401, AUTH), (402, QUOTA), (403, AUTH), (404, INVALID), (408, TIMEOUT),
        (409, Category.conflict), (413, PTL), (422, INVALID), (429, RL), (498, OVER), (500, SERVER),
        (502, SERVER), (503, OVER), (504, SERVER), (529, OVER),
    ],
)  # fmt: skip
def test_status_alone(status: int, category: Category) -> None:
    """With a body that says nothing, the status decides."""
    assert classify_response(status, {}, b"{}", now=NOW).category is category


def test_message_is_truncated() -> None:
    """The provider's message is kept, cut to MESSAGE_MAX_CHARS."""
    failure = classify_response(500, {}, oai("x" * 5000, "server_error"), now=NOW)
    assert failure.message == "x" * MESSAGE_MAX_CHARS


@pytest.mark.parametrize(
    ("message", "prompt", "limit"),
    [
        ("maximum context length is 128,000 tokens. However, your messages resulted in 202,868 tokens", 202868, 128000),
        ("prompt is too long: 205351 tokens > 200000 maximum", 205351, 200000),
        ("request (9000 tokens) exceeds the available context size (8192 tokens)", 9000, 8192),
        ("Prompt 超长", None, None),
        ("maximum context length is 0 tokens. However, your messages resulted in 99999999999 tokens", None, None),
    ],
)  # fmt: skip
def test_token_counts(message: str, prompt: int | None, limit: int | None) -> None:
    """Token counts come from every known wording; absurd or missing numbers give None."""
    assert token_counts(message) == (prompt, limit)


# ---- client text quoted in an error never decides provider health ----------------

#: What a client may put in a field a provider quotes back.
HEALTH_WORDS = [
    "exceeded your current quota", "incorrect api key", "invalid api key", "rate limit",
    "too many requests", "overloaded", "server is busy", "insufficient balance", "欠费",
    "身份验证失败", "访问量过大", "请求过于频繁", "Please try again in 3600s", "retry after 86400 seconds",
]  # fmt: skip
ROLES = "'system', 'assistant', 'user', 'function', 'tool', and 'developer'"


def quoting(text: str) -> list[tuple[int, bytes]]:
    """Real provider bodies for a bad request, each quoting ``text`` from the request."""
    return [
        (400, oai(f"Invalid value: '{text}'. Supported values are: {ROLES}.",
                  "invalid_request_error", "invalid_value", param="messages[0].role")),
        (400, ant("invalid_request_error", f"messages.0.content.0: Input tag '{text}' found "
                  "using 'type' does not match any of the expected tags: 'image', 'text'")),
        (400, j({"error": {"message": f"1 validation error for ChatCompletionRequest\nmessages.0"
                           f".role\n  Input should be 'user' [type=literal_error, input_value="
                           f"'{text}', input_type=str]", "type": "BadRequestError", "code": 400}})),
        (422, j({"detail": [{"type": "literal_error", "loc": ["body", "messages", 0, "role"],
                             "msg": "Input should be 'user'", "input": text}]})),
        (404, oai(f"The model `{text}` does not exist or you do not have access to it.",
                  "invalid_request_error", "model_not_found")),
        (400, j({"error": {"code": 400, "message": f"Invalid value at 'contents[0].role' ({text})",
                           "status": "INVALID_ARGUMENT"}})),
        (400, f"unknown role: {text}".encode()),
        (400, j({"error": {"message": f"Invalid value: 'x'. {text} '", "type": "invalid_request_error"}})),
    ]  # fmt: skip


@pytest.mark.parametrize("text", HEALTH_WORDS)
def test_a_bad_request_quoting_client_text_stays_a_bad_request(text: str) -> None:
    """A 4xx that says the request is at fault keeps that verdict whatever text it quotes:
    no quota, auth, rate limit or overload from words, and no wait read from the quote."""
    for status, body in quoting(text):
        failure = classify_response(status, {}, body, now=NOW)
        assert (failure.category, failure.retry_after) == (INVALID, None), (status, body)


@pytest.mark.parametrize("text", HEALTH_WORDS)
def test_a_5xx_echoing_client_text_is_a_server_error(text: str) -> None:
    """A 500 echoing the input (vLLM) is never quota, auth or a rate limit; words may call
    it an overload at most, and then no wait is read from the echoed text."""
    body = j({"error": {"message": f"Internal error while handling role={text!r}",
                        "type": "InternalServerError", "code": 500}})  # fmt: skip
    failure = classify_response(500, {}, body, now=NOW)
    assert failure.category in {SERVER, OVER}
    assert failure.retry_after is None


@pytest.mark.parametrize("text", HEALTH_WORDS)
def test_client_words_cannot_hide_a_real_overload(text: str) -> None:
    """Only the categories the status allows are looked for: a client's quota or auth
    words ahead of the provider's own "overloaded" do not mask it."""
    body = oai(f"Input {text!r} failed: the server is overloaded.", "server_error")
    assert classify_response(500, {}, body, now=NOW).category is OVER


@pytest.mark.parametrize(
    ("status", "body", "category"),
    [
        # request-scoped categories may still come from words on a 400
        (400, oai("Invalid value: 'prompt is too long'.", "invalid_request_error", "invalid_value"), PTL),
        (400, oai("Your request was flagged by our content policy.", "invalid_request_error"), FILTER),
        # a provider's opening sentence only counts at the start of its message
        (400, oai("Invalid value: 'Your credit balance is too low to access the Anthropic API.'", "invalid_request_error"), INVALID),
        (400, oai("Invalid value: 'API key not valid. Please pass a valid API key.'", "invalid_request_error"), INVALID),
        (400, b"Your credit balance is too low to access the Anthropic API.", INVALID),  # not JSON
        # a details reason counts as a whole value only, never quoted in another field
        (400, j({"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT", "details": [
            {"@type": "type.googleapis.com/google.rpc.BadRequest", "fieldViolations": [
                {"field": "contents", "description": "API_KEY_INVALID BILLING_DISABLED"}]}]}}), INVALID),
        (400, j({"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT", "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "not API_KEY_INVALID"}]}}), INVALID),
    ],
)  # fmt: skip
def test_what_words_may_still_say_on_a_bad_request(
    status: int, body: bytes, category: Category
) -> None:
    """Words may give a request-scoped category on a 400; provider sentences and reasons
    count only where a quoted value cannot be."""
    assert classify_response(status, {}, body, now=NOW).category is category


def gemini_error_info(status: int, grpc: str, message: str, reason: str) -> bytes:
    return j({"error": {"code": status, "message": message, "status": grpc, "details": [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
         "domain": "googleapis.com",
         "metadata": {"service": "generativelanguage.googleapis.com"}}]}})  # fmt: skip


STRUCTURED_ON_4XX = [
    pytest.param(
        Case(400, gemini_error_info(400, "INVALID_ARGUMENT", "API key expired. Please renew the API key.", "API_KEY_EXPIRED"), AUTH, {"code": "INVALID_ARGUMENT"}),
        id="gemini-400-API_KEY_EXPIRED",
    ),
    pytest.param(
        Case(400, j([{"error": json.loads(gemini_error_info(400, "INVALID_ARGUMENT", "Bad key.", "API_KEY_INVALID"))["error"]}]), AUTH),
        id="gemini-400-API_KEY_INVALID-list-wrapped",
    ),
    pytest.param(
        Case(403, gemini_error_info(403, "PERMISSION_DENIED", "Generative Language API has not been used in project 1 before or it is disabled.", "SERVICE_DISABLED"), AUTH),
        id="gemini-403-SERVICE_DISABLED",
    ),
    pytest.param(
        Case(400, gemini_error_info(400, "FAILED_PRECONDITION", "Billing is not enabled.", "BILLING_DISABLED"), QUOTA),
        id="gemini-400-BILLING_DISABLED",
    ),
    pytest.param(
        Case(400, gemini_error_info(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", "API_KEY_INVALID"), AUTH),
        id="gemini-400-API_KEY_INVALID",
    ),
    pytest.param(Case(400, zhipu("1113", "您的账户已欠费，请充值后重试。"), QUOTA), id="zhipu-1113-on-400"),
    pytest.param(Case(400, zhipu("1302", "您的账户已达到速率限制，请您控制请求频率"), RL), id="zhipu-1302-on-400"),
    pytest.param(Case(400, zhipu("1002", "Authentication Token非法，请确认Authentication Token正确传递。"), AUTH), id="zhipu-1002-on-400"),
    pytest.param(Case(400, j({"code": "Arrearage", "message": "Access denied, please make sure your account is in good standing."}), QUOTA), id="dashscope-arrearage-400"),
    pytest.param(Case(400, j({"code": "InvalidApiKey", "message": "Invalid API-key provided."}), AUTH), id="dashscope-invalidapikey-400"),
    pytest.param(Case(400, oai("You exceeded your current quota.", "insufficient_quota", "insufficient_quota"), QUOTA), id="openai-insufficient_quota-on-400"),
    pytest.param(Case(400, ant("billing_error", "Your credit balance is too low."), QUOTA), id="anthropic-billing_error-type-on-400"),
    pytest.param(
        Case(400, ant("invalid_request_error", "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."), QUOTA),
        id="anthropic-credit-balance-sentence",
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", STRUCTURED_ON_4XX)
def test_structured_fields_still_decide_on_a_4xx(case: Case) -> None:
    """Providers that report quota, credentials or limits on a 400 or another 4xx keep
    their verdict: it comes from their code, type or details reason, or from their own
    opening sentence, none of which a client's text can be."""
    check(case)


@pytest.mark.parametrize(
    ("payload", "category"),
    [
        ({"type": "error", "error": {"type": "invalid_request_error", "message": "Input tag 'exceeded your current quota' found"}}, INVALID),
        ({"type": "error", "error": {"type": "invalid_request_error", "message": "Input tag 'overloaded' found"}}, INVALID),
        ({"error": {"message": "bad role 'incorrect api key'"}}, SERVER),
        ({"error": {"message": "bad role 'rate limit, try again in 3600s'", "type": "invalid_request_error"}}, INVALID),
        ({"type": "response.failed", "response": {"error": {"code": "invalid_prompt", "message": "'exceeded your current quota'"}}}, INVALID),
        ({"type": "response.failed", "response": {"error": {"code": "invalid_image_url", "message": "'overloaded'"}}}, INVALID),
        ({"type": "response.failed", "response": {"error": {"code": "bio_policy", "message": "'rate limit'"}}}, FILTER),
        ({"error": {"code": 400, "message": "Invalid value: 'exceeded your current quota'"}}, INVALID),
    ],
)  # fmt: skip
def test_stream_errors_quoting_client_text(payload: Any, category: Category) -> None:
    """In-stream errors follow the same rule: their status (or none) bounds what words say."""
    failure = classify_error_event(payload, now=NOW)
    assert (failure.category, failure.retry_after) == (category, None)


#: 4xx statuses that say the request is at fault (not 401-403, 408, 409, 413, 429).
_REQUEST_AT_FAULT = [400, 404, 405, 406, 410, 411, 412, 415, 416, 417, 418, 421, 422, 424, 426, 428, 431, 451]  # fmt: skip
_WORDS = [w for _, words in KEYWORDS for w in words] + ["try again in 3600s", "per day", "'", '"']


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    status=st.sampled_from(_REQUEST_AT_FAULT),
    pieces=st.lists(st.sampled_from(_WORDS) | st.text(max_size=20), max_size=6),
    shape=st.sampled_from(["openai", "anthropic", "vllm", "text", "detail"]),
)
def test_no_client_text_turns_a_bad_request_into_a_health_verdict(
    status: int, pieces: list[str], shape: str
) -> None:
    """Any text quoted in a generic 4xx body (every keyword the classifier knows, waits,
    quotes that break out of the provider's quoting) gives a request-scoped category."""
    text = " ".join(pieces)
    body = {
        "openai": oai(f"Invalid value: '{text}'.", "invalid_request_error", "invalid_value"),
        "anthropic": ant("invalid_request_error", f"Input tag '{text}' found using 'type'"),
        "vllm": j({"error": {"message": f"input_value='{text}'", "type": "BadRequestError", "code": status}}),
        "text": f"bad input: {text}".encode(),
        "detail": j({"detail": [{"msg": "bad", "input": text}]}),
    }[shape]  # fmt: skip
    failure = classify_response(status, {}, body, now=NOW)
    assert failure.category in {INVALID, PTL, FILTER}
    assert failure.retry_after is None


# ---- policy rules --------------------------------------------------------------


def rule(**kw: Any) -> ClassifyRule:
    return ClassifyRule.model_validate(kw)


@pytest.mark.parametrize(
    ("rules", "status", "body", "category"),
    [
        ([rule(status=429, category="quota_exhausted")], 429, oai(OPENAI_RL_MSG, "tokens", "rate_limit_exceeded"), QUOTA),
        ([rule(code="1302", category="invalid_request")], 429, zhipu("1302", "策略拒绝"), INVALID),
        ([rule(code="overloaded_error", category="server_error")], 529, ant("overloaded_error", "Overloaded"), SERVER),
        ([rule(body_contains="ENGINEDEAD", category="server_overload")], 500, oai("EngineDeadError: boom"), OVER),
        ([rule(status=400, code="400", category="rate_limit")], 400, j({"error": {"code": 400, "message": "busy"}}), RL),
        # every given condition must hold: status 500 does not match
        ([rule(status=500, code="1302", category="invalid_request")], 429, zhipu("1302", "并发"), RL),
        # the first matching rule wins
        ([rule(status=429, category="server_error"), rule(status=429, category="auth")], 429, b"", SERVER),
        # a rule saying rate_limit is not upgraded to quota by a long hint
        ([rule(status=429, category="rate_limit")], 429, j({"error": {"code": "429", "message": AZURE_429.format(n=86400)}}), RL),
    ],
)  # fmt: skip
def test_policy_rules_win(
    rules: list[ClassifyRule], status: int, body: bytes, category: Category
) -> None:
    """Policy classify rules run before the built-ins; all their conditions must hold."""
    assert classify_response(status, {}, body, rules=rules, now=NOW).category is category


def test_policy_rules_apply_to_stream_events() -> None:
    """A rule matching an in-stream error's code wins over the built-in mapping."""
    rules = [rule(code="overloaded_error", category="rate_limit")]
    event = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert classify_error_event(event, rules=rules, now=NOW).category is RL


# ---- in-stream error events ----------------------------------------------------


@pytest.mark.parametrize(
    ("etype", "status", "category"),
    [
        ("api_error", 500, SERVER), ("overloaded_error", 529, OVER), ("rate_limit_error", 429, RL),
        ("timeout_error", 504, TIMEOUT), ("authentication_error", 401, AUTH),
        ("permission_error", 403, AUTH), ("not_found_error", 404, INVALID),
        ("billing_error", 402, QUOTA), ("invalid_request_error", 400, INVALID),
    ],
)  # fmt: skip
def test_anthropic_stream_error_types(etype: str, status: int, category: Category) -> None:
    """An Anthropic `event: error` type stands for a status, which it is given."""
    event = {"type": "error", "error": {"type": etype, "message": "x"}}
    failure = classify_error_event(event, now=NOW)
    assert (failure.category, failure.status, failure.code) == (category, status, etype)


@pytest.mark.parametrize(
    ("payload", "category", "expect"),
    [
        ({"error": {"message": "The server had an error", "type": "server_error"}}, SERVER, {}),
        (
            {"error": {"message": "Rate limit reached. Please try again in 3s.", "type": "requests", "code": "rate_limit_exceeded"}},
            RL,
            {"retry_after": 3.0},
        ),
        ({"error": {"code": 502, "message": "Provider returned error"}}, SERVER, {"status": 502}),
        ({"error": {"code": "1305", "message": "该模型当前访问量过大"}}, OVER, {}),
        (
            {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 201000 tokens > 200000 maximum"}},
            PTL,
            {"prompt_tokens": 201000, "context_limit": 200000},
        ),
        ({"type": "error", "code": "rate_limit_exceeded", "message": "Rate limit reached", "sequence_number": 3}, RL, {}),
        ({"type": "error", "code": "server_is_overloaded", "message": "Overloaded"}, OVER, {}),
        (
            {"type": "response.failed", "response": {"id": "resp_1", "status": "failed", "error": {"code": "server_error", "message": "An error occurred while processing your request."}}},
            SERVER,
            {"code": "server_error"},
        ),
        (
            {"type": "response.failed", "response": {"error": {"code": "rate_limit_exceeded", "message": "Rate limit reached for gpt-5. Please try again in 1.5s."}}},
            RL,
            {"retry_after": 1.5},
        ),
        ({"type": "response.failed", "response": {"status": "failed"}}, SERVER, {}),
        ({"type": "response.failed", "response": None}, SERVER, {}),
    ],
)  # fmt: skip
def test_stream_error_events(payload: Any, category: Category, expect: dict[str, Any]) -> None:
    """OpenAI chat, Anthropic and Responses in-stream errors classify like responses."""
    failure = classify_error_event(payload, now=NOW)
    assert failure.category is category
    for name, value in expect.items():
        assert getattr(failure, name) == value


@pytest.mark.parametrize(
    "payload",
    [
        None, "rate limit", 42, [], {}, {"type": "ping"},
        {"choices": [{"delta": {"content": "rate limit exceeded, overloaded, prompt is too long, try again in 5s"}}]},
        {"error": None}, {"type": "error"}, float("nan"), {1: 2}, [[[]]],
    ],
)  # fmt: skip
def test_unknown_event_shapes_are_server_errors(payload: Any) -> None:
    """Anything without a recognisable error object is a server_error; content is never read."""
    failure = classify_error_event(payload, now=NOW)
    assert (failure.category, failure.retry_after) == (SERVER, None)


def test_transport_failure() -> None:
    """A transport failure carries its category and a short message, nothing else."""
    failure = transport_failure(Category.connection, "connection reset by peer " * 100)
    assert failure.category is Category.connection
    assert failure.status is None and failure.retry_after is None
    assert len(failure.message) == MESSAGE_MAX_CHARS


def test_http_date_retry_after_on_503() -> None:
    """A Retry-After HTTP date on a 503 becomes the hint, relative to now."""
    when = format_datetime(datetime.fromtimestamp(NOW + 120, UTC), usegmt=True)
    failure = classify_response(503, {"retry-after": when}, b"", now=NOW)
    assert (failure.category, failure.retry_after) == (OVER, 120.0)


# ---- never raises --------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["error", "code", "type", "status", "message", "details", "response", "detail"]
            )
            | st.text(max_size=8),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    status=st.integers(min_value=-1, max_value=1000),
    body=st.binary(max_size=300) | _json.map(lambda v: json.dumps(v).encode()),
    headers=st.dictionaries(
        st.sampled_from(
            [
                "retry-after",
                "retry-after-ms",
                "x-ratelimit-reset-requests",
                "anthropic-ratelimit-tokens-reset",
                "x-ratelimit-remaining-requests",
            ]
        ),
        st.text(max_size=40),
    ),
)
def test_classify_response_never_raises(status: int, body: bytes, headers: dict[str, str]) -> None:
    """Any status, body and header values give a Failure with a sane hint, never an exception."""
    failure = classify_response(status, headers, body, now=NOW)
    assert isinstance(failure.category, Category)
    assert failure.retry_after is None or 0 <= failure.retry_after <= 7 * 86400
    assert len(failure.message) <= MESSAGE_MAX_CHARS


@settings(max_examples=200, derandomize=True, deadline=None)
@given(payload=_json)
def test_classify_error_event_never_raises(payload: Any) -> None:
    """Any decoded JSON payload gives a Failure, never an exception."""
    assert isinstance(classify_error_event(payload, now=NOW).category, Category)
