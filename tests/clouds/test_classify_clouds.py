"""What each cloud's errors become: Bedrock's exceptions (as answers and as stream
exception frames), Vertex's Google and Anthropic errors, Azure's content filter and its
waits (pure: the classifier on the bodies the clouds send)."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import Category as C
from gateway.policy.schema import Provider
from gateway.providers.kinds import cloud_of
from gateway.resilience.classify import classify_error_event, classify_response

pytestmark = pytest.mark.fast

BEDROCK = cloud_of(Provider(api="bedrock", region="us-east-1"), "")


@pytest.mark.parametrize(
    ("status", "exception", "message", "category"),
    [
        (
            429,
            "ThrottlingException",
            "Too many requests, please wait before trying again.",
            C.rate_limit,
        ),
        (
            400,
            "ServiceQuotaExceededException",
            "Your request exceeds the service quota",
            C.rate_limit,
        ),
        (503, "ServiceUnavailableException", "Service is unavailable", C.server_overload),
        (
            429,
            "ModelNotReadyException",
            "Model is not ready to serve inference requests",
            C.server_overload,
        ),
        (500, "InternalServerException", "Internal server error", C.server_error),
        (408, "ModelTimeoutException", "Model has timed out in processing the request", C.timeout),
        (400, "ValidationException", "Input is too long for requested model.", C.prompt_too_long),
        (
            400,
            "ValidationException",
            "prompt is too long: 210000 tokens > 200000 maximum",
            C.prompt_too_long,
        ),
        (400, "ValidationException", "messages.0.content: field required", C.invalid_request),
        (
            403,
            "AccessDeniedException",
            "You don't have access to the model with the specified model ID.",
            C.auth,
        ),
        (
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
            C.auth,
        ),
        (
            403,
            "ExpiredTokenException",
            "The security token included in the request is expired",
            C.auth,
        ),
    ],
)
def test_bedrock_exceptions(status: int, exception: str, message: str, category: C) -> None:
    """Each Bedrock exception answer is classified by its name (the status alone would
    call ModelNotReady a rate limit and a quota exception a bad request)."""
    headers = {
        "x-amzn-errortype": f"{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/"
    }
    raw = BEDROCK.error_body(headers, orjson.dumps({"message": message}))
    f = classify_response(status, headers, raw, now=0.0)
    assert f.category is category
    assert f.message == message


@pytest.mark.parametrize(
    ("exception", "category"),
    [
        ("throttlingException", C.rate_limit),
        ("serviceUnavailableException", C.server_overload),
        ("modelStreamErrorException", C.server_error),
        ("internalServerException", C.server_error),
        ("modelTimeoutException", C.timeout),
    ],
)
def test_bedrock_exceptions_inside_a_stream(exception: str, category: C) -> None:
    """A stream's exception frame (read as Anthropic's error event) is a mid-stream
    failure of the same category as the answer would be."""
    event = {"type": "error", "error": {"type": exception, "message": "m"}}
    assert classify_error_event(event, now=0.0).category is category


def test_vertex_errors() -> None:
    """Vertex: Google's RESOURCE_EXHAUSTED is a rate limit, Anthropic's overloaded_error
    (529) on a Claude route an overload, a bad token auth."""
    exhausted = b'{"error":{"code":429,"message":"Resource exhausted. Please try again later.","status":"RESOURCE_EXHAUSTED"}}'
    assert classify_response(429, {}, exhausted, now=0.0).category is C.rate_limit
    overloaded = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    assert classify_response(529, {}, overloaded, now=0.0).category is C.server_overload
    unauth = b'{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}'
    assert classify_response(401, {}, unauth, now=0.0).category is C.auth


def test_azure_content_filter_and_waits() -> None:
    """Azure: the content filter (code content_filter, inner ResponsibleAIPolicyViolation)
    is a content filter, not a bad request; its 429 waits come from retry-after-ms or the
    message."""
    filtered = orjson.dumps(
        {
            "error": {
                "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
                "type": None,
                "param": "prompt",
                "code": "content_filter",
                "status": 400,
                "innererror": {"code": "ResponsibleAIPolicyViolation"},
            }
        }
    )
    assert classify_response(400, {}, filtered, now=0.0).category is C.content_filter
    limited = orjson.dumps(
        {
            "error": {
                "code": "429",
                "message": "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 7 seconds.",
            }
        }
    )
    f = classify_response(429, {"retry-after-ms": "1500"}, limited, now=0.0)
    assert f.category is C.rate_limit and f.retry_after == pytest.approx(1.5)
    f = classify_response(429, {}, limited, now=0.0)
    assert f.category is C.rate_limit and f.retry_after == pytest.approx(7.0)
