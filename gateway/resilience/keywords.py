"""Provider error codes and message keywords, as data (docs/recovery.md, Classification).

Sources: the providers' own error documentation and observed error bodies (OpenAI,
Azure, Anthropic, Zhipu, DeepSeek, Gemini, Groq, Mistral, vLLM, OpenRouter, Moonshot,
Qianfan, DashScope).
Codes are matched lowercased against ``error.code``, ``error.type`` and
``error.status`` in that order. Generic codes (``invalid_request_error``,
``BadRequestError``, ``INVALID_ARGUMENT``, ``not_found_error``, ``server_error``,
``api_error``) are deliberately absent: they say nothing beyond the status, so the
message keywords decide (a 500 ``server_error`` saying "overloaded" is an overload).

Message words are the weakest evidence: providers quote the client's own text in
their messages, so ``classify.py`` lets :data:`KEYWORDS` decide only within what the
status allows (a 400 at most a request-scoped category). :data:`REASONS` (Google's
structured ``details[].reason``) and :data:`LEADS` (a provider's fixed sentence that
opens its message, where no quoted value can be) are the evidence that still names a
quota or a credential problem on a 400.
"""

from __future__ import annotations

from gateway.errors import Category

C = Category

CODES: dict[str, Category] = {
    # rate limits
    "rate_limit_exceeded": C.rate_limit,  # OpenAI, Groq
    "rate_limit_error": C.rate_limit,  # Anthropic
    "rate_limited": C.rate_limit,  # Mistral
    "rate_limit_reached_error": C.rate_limit,  # Moonshot
    "slow_down": C.rate_limit,  # OpenAI ramp-up limit
    "too_many_requests": C.rate_limit,
    "throttling": C.rate_limit,  # DashScope
    "throttling.ratequota": C.rate_limit,
    "throttling.allocationquota": C.rate_limit,
    "1300": C.rate_limit,  # Mistral
    "1302": C.rate_limit,  # Zhipu: concurrency
    "1303": C.rate_limit,  # Zhipu: frequency
    "1313": C.rate_limit,  # Zhipu: fair-use throttling
    # quota, billing
    "insufficient_quota": C.quota_exhausted,
    "credit_balance_exhausted": C.quota_exhausted,
    "organization_spend_limit_exceeded": C.quota_exhausted,
    "project_spend_limit_exceeded": C.quota_exhausted,
    "organization_usage_limit_exceeded": C.quota_exhausted,
    "billing_hard_limit_reached": C.quota_exhausted,
    "exceeded_current_quota_error": C.quota_exhausted,  # Moonshot
    "billing_error": C.quota_exhausted,  # Anthropic
    "insufficient_balance": C.quota_exhausted,
    "arrearage": C.quota_exhausted,  # DashScope
    "1113": C.quota_exhausted,  # Zhipu: 欠费
    "1304": C.quota_exhausted,  # Zhipu: daily call limit
    "1308": C.quota_exhausted,  # Zhipu: usage cap until reset
    "1309": C.quota_exhausted,  # Zhipu: plan expired
    "1310": C.quota_exhausted,  # Zhipu: weekly / monthly cap
    # provider-wide overload
    "overloaded_error": C.server_overload,  # Anthropic 529
    "overloaded": C.server_overload,
    "server_is_overloaded": C.server_overload,  # OpenAI 503
    "service_unavailable_error": C.server_overload,
    "engine_overloaded": C.server_overload,
    "engine_overloaded_error": C.server_overload,  # Moonshot
    "capacity_exceeded": C.server_overload,  # Groq 498
    "unavailable": C.server_overload,  # Gemini status
    "1305": C.server_overload,  # Zhipu: 访问量过大
    "1312": C.server_overload,  # Zhipu: 访问量过大，或切换其他模型
    # timeouts and conflicts
    "timeout_error": C.timeout,  # Anthropic 504
    "deadline_exceeded": C.timeout,  # Gemini status
    # Gemini 499 CANCELLED "The operation was cancelled." (reason backendError, under load):
    # the server gave up on the request, not the request at fault (the gateway's own
    # cancellations close the connection and leave no body to classify)
    "cancelled": C.server_error,
    "conflict_error": C.conflict,
    # prompt too long
    "context_length_exceeded": C.prompt_too_long,
    "model_context_window_exceeded": C.prompt_too_long,
    "request_too_large": C.prompt_too_long,  # Anthropic 413
    "tokens_too_long": C.prompt_too_long,  # Qianfan
    "characters_too_long": C.prompt_too_long,
    "1261": C.prompt_too_long,  # Zhipu: Prompt 超长
    # content filter
    "content_filter": C.content_filter,  # Azure
    "content_policy_violation": C.content_filter,
    "responsibleaipolicyviolation": C.content_filter,
    "datainspectionfailed": C.content_filter,  # DashScope
    "1301": C.content_filter,  # Zhipu: 不安全或敏感内容
    # credentials
    "authentication_error": C.auth,
    "permission_error": C.auth,
    "invalid_api_key": C.auth,
    "invalidapikey": C.auth,
    "invalid_authentication": C.auth,
    "account_deactivated": C.auth,
    "unsupported_country_region_territory": C.auth,
    "unauthenticated": C.auth,  # Gemini status
    "permission_denied": C.auth,  # Gemini status
    "1220": C.auth,  # Zhipu: no permission for this API
    # AWS Bedrock exceptions (its errors and stream exception frames are read as
    # Anthropic's error object, the exception's name as its type: gateway/providers/kinds.py)
    "throttlingexception": C.rate_limit,
    "servicequotaexceededexception": C.rate_limit,
    "serviceunavailableexception": C.server_overload,
    "modelnotreadyexception": C.server_overload,
    "internalserverexception": C.server_error,
    "modelstreamerrorexception": C.server_error,
    "modeltimeoutexception": C.timeout,
    "accessdeniedexception": C.auth,
    "unrecognizedclientexception": C.auth,
    "expiredtokenexception": C.auth,
    "invalidsignatureexception": C.auth,
    "missingauthenticationtokenexception": C.auth,
    "incompletesignatureexception": C.auth,
    # the request itself: OpenAI Responses ``response.failed`` codes, which arrive in a
    # 200 stream with no status to say so (else a server error, counted toward fallback)
    "invalid_prompt": C.invalid_request,
    "bio_policy": C.content_filter,
    "misalignment_policy_violation": C.content_filter,
    "image_content_policy_violation": C.content_filter,
    **{
        code: C.invalid_request
        for code in (
            "invalid_image", "invalid_image_format", "invalid_base64_image", "invalid_image_url",
            "image_too_large", "image_too_small", "image_parse_error", "invalid_image_mode",
            "image_file_too_large", "unsupported_image_media_type", "empty_image_file",
            "failed_to_download_image", "image_file_not_found",
        )
    },
}  # fmt: skip
# Zhipu 1000-1004 (authentication) and 1110-1121 (account state; 1113 is 欠费, above).
CODES.update({str(code): C.auth for code in (*range(1000, 1005), *range(1110, 1122))})
CODES["1113"] = C.quota_exhausted

# google.api.ErrorReason in a google.rpc.ErrorInfo detail (Gemini, Vertex), matched
# lowercased as the whole ``reason`` value: Gemini answers a bad key with
# 400 INVALID_ARGUMENT, whose status says nothing, and the reason API_KEY_INVALID.
REASONS: dict[str, Category] = {
    **{
        reason: C.auth
        for reason in (
            "api_key_invalid", "api_key_expired", "api_key_not_found", "api_key_service_blocked",
            "api_key_http_referrer_blocked", "api_key_ip_address_blocked",
            "api_key_android_app_blocked", "api_key_ios_app_blocked", "service_disabled",
            "consumer_suspended", "consumer_invalid", "account_state_invalid",
            "access_token_expired", "access_token_scope_insufficient",
            "access_token_type_unsupported", "credentials_missing", "user_project_denied",
        )
    },
    "billing_disabled": C.quota_exhausted,
    "rate_limit_exceeded": C.rate_limit,
    "resource_quota_exceeded": C.rate_limit,
    # "No capacity available for model ... on the server", on a 429 RESOURCE_EXHAUSTED as
    # on a 503: the model is full, not the caller's quota
    "model_capacity_exhausted": C.server_overload,
}  # fmt: skip

# A provider's fixed sentence that opens its error message (lowercased, spaces
# collapsed), for statuses that otherwise mean "the request is at fault". A value a
# provider quotes from the request comes after its own words ("Invalid value: '...'"),
# never at the start of the message, so these are the provider speaking.
LEADS: tuple[tuple[str, Category], ...] = (
    # Anthropic: an account out of credits, answered as 400 invalid_request_error
    ("your credit balance is too low to access the anthropic api", C.quota_exhausted),
    # Gemini: 400 INVALID_ARGUMENT (its details carry API_KEY_INVALID too)
    ("api key not valid. please pass a valid api key", C.auth),
    # Gemini: 400 FAILED_PRECONDITION for where the gateway calls from (its egress), which
    # another deployment may not share; billing lifts the free tier's country limits
    ("user location is not supported for the api use without a billing account", C.quota_exhausted),
    ("user location is not supported for the api use", C.auth),
    ("gemini api free tier is not available in your country", C.quota_exhausted),
)

# Limit dimensions OpenAI (older bodies) and Groq put in error.type; a rate limit only with 429.
CODES_WHEN_429: dict[str, Category] = {"requests": C.rate_limit, "tokens": C.rate_limit}

# Message keywords, matched lowercased, in priority order: the first category with a
# hit wins ("rate limit ... due to high demand" is an overload).
KEYWORDS: tuple[tuple[Category, tuple[str, ...]], ...] = (
    (
        C.prompt_too_long,
        (
            "maximum context length", "context length exceeded", "context_length_exceeded",
            "prompt is too long", "(parameter=input_tokens", "tokens_too_long",
            "prompt tokens too long", "input is too long", "exceeds the context window",
            "exceeds the maximum number of tokens", "exceeds the available context size",
            "too large for model with", "but model only supports up to", "上下文长度", "超长",
        ),
    ),
    (
        C.quota_exhausted,
        (
            "exceeded your current quota", "insufficient_quota", "insufficient balance",
            "insufficient credits", "credit balance", "spend limit", "billing details",
            "payment required", "good standing", "quota exceeded",
            "欠费", "余额不足", "额度已用完", "使用上限", "调用次数限额", "套餐已到期",
        ),
    ),
    (
        C.content_filter,
        (
            "content management policy", "content policy", "content_filter", "content filter",
            "usage policy", "flagged", "moderation", "responsibleaipolicyviolation",
            "敏感内容", "不安全",
        ),
    ),
    (
        C.auth,
        (
            "invalid api key", "incorrect api key", "api key not valid", "invalid_api_key",
            "invalid authentication", "身份验证失败", "token 已过期", "账户已被锁定",
        ),
    ),
    (
        C.server_overload,
        (
            "overload", "capacity exceeded", "at capacity", "high demand",
            "server is busy", "服务器繁忙", "系统繁忙", "访问量过大", "过载",
        ),
    ),
    (
        C.rate_limit,
        (
            "rate limit", "rate_limit", "ratelimit", "too many requests", "concurrency",
            "throttl", "slow down", "频率", "速率限制", "并发", "请求过于频繁", "限流",
        ),
    ),
)  # fmt: skip

# Anthropic error.type -> the HTTP status it stands for (used for in-stream errors).
ANTHROPIC_TYPE_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
