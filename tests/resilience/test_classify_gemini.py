"""Gemini errors (Google AI Studio ``generativelanguage.googleapis.com``, Vertex AI
``aiplatform.googleapis.com``) as real bodies carry them, classified.

Every body is quoted as found at the address next to it; long ``details`` arrays are
trimmed to what the classifier reads, and a body a report shows only in part (a message
without its envelope) says so. Error events inside a 200 stream come last.
"""

# Provider messages are kept verbatim as captured, so some table lines are long.

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import Category
from gateway.formats import sse
from gateway.resilience.classify import classify_error_event
from tests.resilience.test_classify import (
    AUTH,
    INVALID,
    NOW,
    OVER,
    PTL,
    QUOTA,
    RL,
    SERVER,
    TIMEOUT,
    Case,
    check,
    j,
)

pytestmark = pytest.mark.fast

RPC = "type.googleapis.com/google.rpc."
HELP = {"@type": RPC + "Help", "links": [{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]}  # fmt: skip
QUOTA_HEAD = "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."


def google(code: int, status: str, message: str, **extra: Any) -> bytes:
    return j({"error": {"code": code, "message": message, "status": status, **extra}})


def listed(code: int, status: str, message: str, **extra: Any) -> bytes:
    """The list-wrapped body (``[{"error": ...}]``) of ``streamGenerateContent`` and Vertex."""
    return j([{"error": {"code": code, "message": message, **extra, "status": status}}])


# ---- 429 RESOURCE_EXHAUSTED ------------------------------------------------------------

QUOTAS = [
    # https://github.com/RooCodeInc/Roo-Code/issues/3883
    pytest.param(
        Case(429, google(429, "RESOURCE_EXHAUSTED", QUOTA_HEAD, details=[
            {"@type": RPC + "QuotaFailure", "violations": [{
                "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",
                "quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier",
                "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
                "quotaValue": "250000"}]},
            HELP,
            {"@type": RPC + "RetryInfo", "retryDelay": "26s"}]),
            RL, {"retry_after": 26.0, "code": "RESOURCE_EXHAUSTED", "status": 429}),
        id="429-per-minute-QuotaFailure-RetryInfo",
    ),
    # https://github.com/google-gemini/gemini-cli/issues/6962 (the details after Help are
    # cut off in the report)
    pytest.param(
        Case(429, google(429, "RESOURCE_EXHAUSTED", QUOTA_HEAD, details=[
            {"@type": RPC + "QuotaFailure", "violations": [{
                "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                "quotaDimensions": {"location": "global", "model": "gemini-2.5-pro"},
                "quotaValue": "50"}]},
            HELP]),
            QUOTA),
        id="429-per-day-quotaId",
    ),
    # https://github.com/google-gemini/gemini-cli/issues/8437 (a free tier listing its
    # per-minute and per-day violations together; Help trimmed): any per-day one is
    # terminal, as the Gemini CLI reads it
    pytest.param(
        Case(429, google(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.", details=[
            {"@type": RPC + "QuotaFailure", "violations": [
                {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count", "quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier", "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash-preview-image"}},
                {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests", "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash-preview-image"}},
                {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests", "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "quotaDimensions": {"model": "gemini-2.5-flash-preview-image", "location": "global"}}]}]),
            QUOTA),
        id="429-per-minute-and-per-day-violations",
    ),
    # https://github.com/diegosouzapw/OmniRoute/issues/9504: a per-day quotaId that still
    # names a wait of seconds; terminal all the same, the wait kept
    pytest.param(
        Case(429, google(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 20, model: gemini-3.6-flash\nPlease retry in 36.429760048s.", details=[
            {"@type": RPC + "QuotaFailure", "violations": [{
                "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                "quotaDimensions": "[MaxDepth]", "quotaValue": "20"}]},
            {"@type": RPC + "RetryInfo", "retryDelay": "36s"}]),
            QUOTA, {"retry_after": 36.0}),
        id="429-per-day-with-retryDelay",
    ),
    # https://github.com/continuedev/continue/issues/10062 (details after Help cut off in
    # the report): a free tier with no quota at all for the model
    pytest.param(
        Case(429, google(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 0, model: gemini-2.5-pro\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 0, model: gemini-2.5-pro\nPlease retry in 20.04466179s.", details=[HELP]),
            QUOTA, {"retry_after": 20.04466179}),
        id="429-limit-0",
    ),
    # https://github.com/google-gemini/gemini-cli/blob/main/packages/core/src/utils/googleQuotaErrors.test.ts
    # (a captured message; its "limit: 2" is a per-minute free tier, retried)
    pytest.param(
        Case(429, google(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 2\nPlease retry in 56.185908122s.", details=[
            {"@type": RPC + "QuotaFailure", "violations": [{
                "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                "quotaDimensions": {"location": "global", "model": "gemini-2.5-pro"},
                "quotaValue": "2"}]},
            HELP,
            {"@type": RPC + "RetryInfo", "retryDelay": "56s"}]),
            RL, {"retry_after": 56.0}),
        id="429-limit-2-is-not-limit-0",
    ),
    # https://github.com/google/generative-ai-docs/issues/236
    pytest.param(
        Case(429, google(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."), RL),
        id="429-resource-has-been-exhausted",
    ),
    # https://github.com/google/generative-ai-docs/issues/236 (the v1 endpoint; the
    # ErrorInfo metadata is cut off in the report)
    pytest.param(
        Case(429, google(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Generate Content API requests per minute' and limit 'GenerateContent request limit per minute for a region' of service 'generativelanguage.googleapis.com' for consumer 'project_number:696498078762'.", details=[
            {"@type": RPC + "ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com"}]),
            RL),
        id="429-per-minute-region-RATE_LIMIT_EXCEEDED",
    ),
    # https://github.com/google-gemini/gemini-cli/issues/14831 (Vertex AI's shared capacity)
    pytest.param(
        Case(429, listed(429, "RESOURCE_EXHAUSTED", "Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.", errors=[
            {"message": "Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.", "domain": "global", "reason": "rateLimitExceeded"}]),
            RL),
        id="429-vertex-resource-exhausted",
    ),
    # https://github.com/google-gemini/gemini-cli/issues/10925 (Code Assist's endpoint; the
    # per-day limit named in ErrorInfo metadata, the Help detail trimmed)
    pytest.param(
        Case(429, listed(429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Gemini 2.5 Pro Requests' and limit 'Gemini 2.5 Pro Requests per day per user per tier' of service 'cloudcode-pa.googleapis.com' for consumer 'project_number:681255809395'.", errors=[
            {"message": "Quota exceeded for quota metric 'Gemini 2.5 Pro Requests' and limit 'Gemini 2.5 Pro Requests per day per user per tier' of service 'cloudcode-pa.googleapis.com' for consumer 'project_number:681255809395'.", "domain": "global", "reason": "rateLimitExceeded"}],
            details=[{"@type": RPC + "ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com", "metadata": {
                "quota_metric": "cloudcode-pa.googleapis.com/gemini_2_5_pro_requests",
                "quota_limit": "Gemini25ProRequestsPerDay"}}]),
            QUOTA),
        id="429-per-day-quota_limit-over-RATE_LIMIT_EXCEEDED",
    ),
    # https://github.com/google-gemini/gemini-cli/issues/25179 (Code Assist's endpoint)
    pytest.param(
        Case(429, listed(429, "RESOURCE_EXHAUSTED", "No capacity available for model gemini-3.1-pro-preview on the server", errors=[
            {"message": "No capacity available for model gemini-3.1-pro-preview on the server", "domain": "global", "reason": "rateLimitExceeded"}],
            details=[{"@type": RPC + "ErrorInfo", "reason": "MODEL_CAPACITY_EXHAUSTED", "domain": "cloudcode-pa.googleapis.com", "metadata": {"model": "gemini-3.1-pro-preview"}}]),
            OVER, {"status": 429}),
        id="429-MODEL_CAPACITY_EXHAUSTED",
    ),
]  # fmt: skip

# ---- 5xx -------------------------------------------------------------------------------

SERVER_SIDE = [
    # https://github.com/lobehub/lobehub/issues/9728
    pytest.param(
        Case(503, google(503, "UNAVAILABLE", "The model is overloaded. Please try again later."), OVER, {"code": "UNAVAILABLE"}),
        id="503-model-overloaded",
    ),
    # https://github.com/continuedev/continue/issues/10639
    pytest.param(
        Case(503, google(503, "UNAVAILABLE", "This model is currently experiencing high demand. Spikes in demand are usually temporary. Please try again later."), OVER),
        id="503-high-demand",
    ),
    # https://github.com/google-gemini/gemini-cli/issues/11196
    pytest.param(
        Case(503, listed(503, "UNAVAILABLE", "The service is currently unavailable.", errors=[
            {"message": "The service is currently unavailable.", "domain": "global", "reason": "backendError"}]),
            OVER),
        id="503-service-unavailable",
    ),
    # https://github.com/tatookan/comfyui_ssl_gemini_EXP/issues/6 (a deadline worded under
    # 503 UNAVAILABLE: an overload, as the status says)
    pytest.param(
        Case(503, google(503, "UNAVAILABLE", "Deadline expired before operation could complete."), OVER),
        id="503-deadline-expired",
    ),
    # https://github.com/google-gemini/gemini-cli/issues/23520
    pytest.param(
        Case(503, j({"error": {"code": 503, "details": [
            {"@type": RPC + "ErrorInfo", "domain": "cloudcode-pa.googleapis.com", "reason": "MODEL_CAPACITY_EXHAUSTED"}],
            "message": "No capacity available for model on the server", "status": "UNAVAILABLE"}}),
            OVER),
        id="503-MODEL_CAPACITY_EXHAUSTED",
    ),
    # https://github.com/PublicAffairs/openai-gemini/issues/15
    pytest.param(
        Case(500, google(500, "INTERNAL", "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"), SERVER, {"code": "INTERNAL"}),
        id="500-internal",
    ),
    # No 504 body was found quoted whole: the status and its text are the troubleshooting
    # table's, https://ai.google.dev/gemini-api/docs/troubleshooting
    pytest.param(
        Case(504, google(504, "DEADLINE_EXCEEDED", "The service is unable to finish processing within the deadline."), TIMEOUT),
        id="504-deadline-exceeded",
    ),
    # https://github.com/google-gemini/gemini-cli/issues/20309 ("when there is a heavy usage")
    pytest.param(
        Case(499, listed(499, "CANCELLED", "The operation was cancelled.", errors=[
            {"message": "The operation was cancelled.", "domain": "global", "reason": "backendError"}]),
            SERVER, {"status": 499, "code": "CANCELLED"}),
        id="499-cancelled",
    ),
]  # fmt: skip

# ---- 400 prompt too long ---------------------------------------------------------------

TOO_LONG = [
    # https://github.com/google-gemini/gemini-cli/issues/6678
    pytest.param(
        Case(400, listed(400, "INVALID_ARGUMENT", "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).", errors=[
            {"message": "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).", "domain": "global", "reason": "badRequest"}]),
            PTL, {"prompt_tokens": 1200293, "context_limit": 1048576}),
        id="400-input-token-count",
    ),
    # https://github.com/googleapis/python-genai/issues/2466 (Vertex AI, eu-west)
    pytest.param(
        Case(400, google(400, "INVALID_ARGUMENT", "The input token count (81881) exceeds the maximum number of tokens allowed (65536)."),
             PTL, {"prompt_tokens": 81881, "context_limit": 65536}),
        id="400-input-token-count-vertex",
    ),
    # https://github.com/arkavo-org/arkavo-edge/issues/371
    pytest.param(
        Case(400, google(400, "INVALID_ARGUMENT", "The input token count exceeds the maximum number of tokens allowed (1048576)."),
             PTL, {"prompt_tokens": None, "context_limit": 1048576}),
        id="400-no-input-count",
    ),
    # https://github.com/warpdotdev/warp/issues/15662 (Vertex AI; the report lists the
    # fields: "Error 400, Message: ..., Status: INVALID_ARGUMENT, Details: []")
    pytest.param(
        Case(400, google(400, "INVALID_ARGUMENT", "The input token count exceeds the maximum number of tokens allowed 1048576.", details=[]),
             PTL, {"prompt_tokens": None, "context_limit": 1048576}),
        id="400-limit-without-parentheses",
    ),
    # https://github.com/google-gemini/gemini-cli/issues/19727 (Vertex AI; the message as
    # reported, in the 400 INVALID_ARGUMENT envelope google.api_core reports it with)
    pytest.param(
        Case(400, google(400, "INVALID_ARGUMENT", "Unable to submit request because the input token count is 1251952 but model only supports up to 1048576. Reduce the input token count and try again. You can also use the CountTokens API to calculate prompt token count and billable characters. Learn more: https://cloud.google.com/vertex-ai/generative-ai/docs/learn/models"),
             PTL, {"prompt_tokens": 1251952, "context_limit": 1048576}),
        id="400-vertex-only-supports-up-to",
    ),
]  # fmt: skip

# ---- credentials, location, model ------------------------------------------------------

ACCESS = [
    # https://github.com/continuedev/continue/issues/8516
    pytest.param(
        Case(400, listed(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", details=[
            {"@type": RPC + "ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}},
            {"@type": RPC + "LocalizedMessage", "locale": "en-US", "message": "API key not valid. Please pass a valid API key."}]),
            AUTH, {"code": "INVALID_ARGUMENT"}),
        id="400-API_KEY_INVALID",
    ),
    # https://github.com/continuedev/continue/issues/11541
    pytest.param(
        Case(403, google(403, "PERMISSION_DENIED", "Your API key was reported as leaked. Please use another API key."), AUTH),
        id="403-key-reported-as-leaked",
    ),
    # https://github.com/continuedev/continue/issues/12781 (LocalizedMessage trimmed)
    pytest.param(
        Case(403, google(403, "PERMISSION_DENIED", "Requests to this API generativelanguage.googleapis.com method google.ai.generativelanguage.v1beta.GenerativeService.StreamGenerateContent are blocked.", details=[
            {"@type": RPC + "ErrorInfo", "reason": "API_KEY_SERVICE_BLOCKED", "domain": "googleapis.com", "metadata": {
                "consumer": "projects/177838813423", "service": "generativelanguage.googleapis.com",
                "apiName": "generativelanguage.googleapis.com",
                "methodName": "google.ai.generativelanguage.v1beta.GenerativeService.StreamGenerateContent"}}]),
            AUTH),
        id="403-API_KEY_SERVICE_BLOCKED",
    ),
    # https://github.com/PublicAffairs/openai-gemini/issues/92
    pytest.param(
        Case(403, google(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."), AUTH),
        id="403-unregistered-caller",
    ),
    # https://github.com/google-gemini/gemini-cli/issues/14519
    pytest.param(
        Case(403, google(403, "PERMISSION_DENIED", "The caller does not have permission"), AUTH),
        id="403-caller-has-no-permission",
    ),
    # https://github.com/a2aproject/a2a-samples/issues/43 (an API key sent to Vertex AI)
    pytest.param(
        Case(401, google(401, "UNAUTHENTICATED", "API keys are not supported by this API. Expected OAuth2 access token or other authentication credentials that assert a principal. See https://cloud.google.com/docs/authentication", details=[
            {"@type": RPC + "ErrorInfo", "reason": "CREDENTIALS_MISSING", "domain": "googleapis.com", "metadata": {
                "service": "aiplatform.googleapis.com",
                "method": "google.cloud.aiplatform.v1beta1.PredictionService.GenerateContent"}}]),
            AUTH, {"code": "UNAUTHENTICATED"}),
        id="401-CREDENTIALS_MISSING-vertex",
    ),
    # https://github.com/snailyp/gemini-balance/issues/328: where the gateway calls from,
    # which a deployment elsewhere (or behind another egress) may not share
    pytest.param(
        Case(400, google(400, "FAILED_PRECONDITION", "User location is not supported for the API use."), AUTH, {"code": "FAILED_PRECONDITION"}),
        id="400-FAILED_PRECONDITION-user-location",
    ),
    # https://github.com/EvanZhouDev/gemini-ai/issues/16
    pytest.param(
        Case(400, google(400, "FAILED_PRECONDITION", "User location is not supported for the API use without a billing account linked."), QUOTA),
        id="400-FAILED_PRECONDITION-location-without-billing",
    ),
    # The message as https://github.com/u14app/neo-chat/issues/45 reports it, in the
    # envelope https://ai.google.dev/gemini-api/docs/troubleshooting gives it (400
    # FAILED_PRECONDITION); no body was found quoted whole
    pytest.param(
        Case(400, google(400, "FAILED_PRECONDITION", "Gemini API free tier is not available in your country. Please enable billing on your project in Google AI Studio."), QUOTA),
        id="400-FAILED_PRECONDITION-free-tier-country",
    ),
    # https://github.com/swuecho/chat/issues/597 (a 404 names the deployment's model: the
    # next model of the chain is tried)
    pytest.param(
        Case(404, google(404, "NOT_FOUND", "models/gemini-2.0-pro is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods."),
             INVALID, {"status": 404, "code": "NOT_FOUND"}),
        id="404-model-not-found",
    ),
    # https://github.com/googlecodelabs/feedback/issues/1881 (Vertex AI)
    pytest.param(
        Case(404, google(404, "NOT_FOUND", "Publisher Model `projects/empty-proj/locations/us-central1/publishers/google/models/gemini-1.0-pro-001` was not found or your project does not have access to it. Please ensure you are using a valid model version. For more information, see: https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions"),
             INVALID, {"status": 404}),
        id="404-vertex-publisher-model",
    ),
]  # fmt: skip


@pytest.mark.parametrize("case", QUOTAS)
def test_resource_exhausted(case: Case) -> None:
    """429 RESOURCE_EXHAUSTED: the model out of capacity is an overload, a per-day or
    zero quota is terminal, anything else a rate limit with Google's wait."""
    check(case)


@pytest.mark.parametrize("case", SERVER_SIDE)
def test_server_side(case: Case) -> None:
    """503 UNAVAILABLE is an overload, 500 INTERNAL and 499 CANCELLED server errors, 504
    DEADLINE_EXCEEDED a timeout."""
    check(case)


@pytest.mark.parametrize("case", TOO_LONG)
def test_prompt_too_long(case: Case) -> None:
    """Every wording of a prompt over the model's window, with the counts it names."""
    check(case)


@pytest.mark.parametrize("case", ACCESS)
def test_credentials_location_and_model(case: Case) -> None:
    """Keys, permissions and the caller's location are the deployment's (auth, or quota
    where billing is the way out); a missing model is a 404."""
    check(case)


# ---- errors inside a 200 stream --------------------------------------------------------
# Gemini ends a ``streamGenerateContent?alt=sse`` stream that fails midway with Google's
# error object in place of the next chunk. The Google SDKs read it as such: a chunk that
# decodes to ``{"error": ...}`` raises with its code
# (https://github.com/googleapis/js-genai/commit/1932f1dd7d5012747918cb6f8f0dcbd9b4581838,
# https://github.com/googleapis/python-genai/commit/72afa50eb2c4d960a4f6b55909205d0739fde05a);
# their message "got status: <STATUS>. <the chunk>" is how the reports below quote it.

STREAM_EVENTS = [
    # https://github.com/google-gemini/gemini-cli/issues/5191
    pytest.param(
        {"error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}},
        OVER, {"status": 503, "code": "UNAVAILABLE"},
        id="stream-503-overloaded",
    ),
    # https://github.com/googleapis/js-genai/issues/650
    pytest.param(
        {"error": {"code": 500, "message": "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting", "status": "INTERNAL"}},
        SERVER, {"status": 500, "code": "INTERNAL"},
        id="stream-500-internal",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("payload", "category", "expect"), STREAM_EVENTS)
def test_stream_errors_by_status(
    payload: dict[str, Any], category: Category, expect: dict[str, Any]
) -> None:
    """An error event of a Gemini stream is an error event to the relay, and it is
    classified by its code and status as the same error answered as a response."""
    raw = b"data: " + j(payload) + b"\n\n"
    assert sse.is_error_event(raw)
    failure = classify_error_event(payload, now=NOW)
    assert failure.category is category, failure
    for name, value in expect.items():
        assert getattr(failure, name) == value, name


@pytest.mark.parametrize(("payload", "category", "expect"), STREAM_EVENTS)
def test_a_bare_json_error_inside_a_stream_is_an_error(
    payload: dict[str, Any], category: Category, expect: dict[str, Any]
) -> None:
    """The same error object with no ``data:`` field (as the SDKs above learned to read it)
    is an error event too, not a comment; other bare JSON is undecodable."""
    for raw in (j(payload) + b"\n\n", json.dumps(payload, indent=2).encode() + b"\n\n"):
        assert sse.is_error_event(raw)
    assert not sse.is_error_event(b'{"candidates": []}\n\n')
