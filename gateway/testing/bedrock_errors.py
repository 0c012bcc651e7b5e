"""The errors AWS Bedrock Runtime answers, as script steps of the fake Bedrock.

Each is an :class:`~gateway.testing.script.Error` the way Bedrock sends it: the status,
``x-amzn-errortype: <Exception>:<namespace>`` (what AWS SDKs read the exception's name
from), ``x-amzn-requestid``, and the JSON body ``{"message": ...}``, in AWS's wording::

    fake.push(BedrockError.throttling(), model="us.anthropic.claude-sonnet-4-5-20250929-v1:0")
    fake.push(BedrockError.input_too_long(), key="AKIDEXAMPLE")

Exceptions inside a stream are the stream steps of the fake provider, rendered as AWS
event-stream frames (see :mod:`gateway.testing.fake_bedrock`).
"""

from __future__ import annotations

import itertools

from gateway.testing.script import Error

_NAMESPACE = "http://internal.amazon.com/coral/com.amazon.bedrock/"
_COUNTER = itertools.count(1)

SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. Consult the service documentation "
    "for details."
)


def aws_error(status: int, exception: str, message: str) -> Error:
    """``status`` with AWS's error header and body for ``exception``."""
    headers = {
        "x-amzn-errortype": f"{exception}:{_NAMESPACE}",
        "x-amzn-requestid": f"00000000-fake-4000-8000-{next(_COUNTER):012d}",
    }
    return Error(status, {"message": message}, headers, "application/json")


class BedrockError:
    """Ready-made Bedrock Runtime errors (status and wording as Bedrock sends them)."""

    @staticmethod
    def throttling(message: str = "Too many requests, please wait before trying again.") -> Error:
        return aws_error(429, "ThrottlingException", message)

    @staticmethod
    def service_quota() -> Error:
        return aws_error(
            400,
            "ServiceQuotaExceededException",
            "Your request exceeds the service quota for your account. You can view your quotas "
            "at https://console.aws.amazon.com/servicequotas. You can resubmit your request "
            "later.",
        )

    @staticmethod
    def model_not_ready() -> Error:
        return aws_error(
            429,
            "ModelNotReadyException",
            "Model is not ready to serve inference requests. The AWS SDK will automatically "
            "retry the operation up to 5 times.",
        )

    @staticmethod
    def service_unavailable() -> Error:
        return aws_error(
            503, "ServiceUnavailableException", "Bedrock is unable to process your request."
        )

    @staticmethod
    def internal() -> Error:
        return aws_error(
            500,
            "InternalServerException",
            "The system encountered an unexpected error during processing. Try your request again.",
        )

    @staticmethod
    def model_timeout() -> Error:
        return aws_error(
            408,
            "ModelTimeoutException",
            "Model has timed out in processing the request. Try your request again.",
        )

    @staticmethod
    def input_too_long() -> Error:
        return aws_error(400, "ValidationException", "Input is too long for requested model.")

    @staticmethod
    def validation(message: str) -> Error:
        return aws_error(400, "ValidationException", message)

    @staticmethod
    def access_denied() -> Error:
        return aws_error(
            403,
            "AccessDeniedException",
            "You don't have access to the model with the specified model ID.",
        )

    # --- refusals of the request's authentication (the fake checks these itself) -----------

    @staticmethod
    def missing_authentication() -> Error:
        return aws_error(403, "MissingAuthenticationTokenException", "Missing Authentication Token")

    @staticmethod
    def unrecognized_client() -> Error:
        return aws_error(
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        )

    @staticmethod
    def invalid_signature(message: str = SIGNATURE_MISMATCH) -> Error:
        return aws_error(403, "InvalidSignatureException", message)

    @staticmethod
    def expired_token() -> Error:
        return aws_error(
            403, "ExpiredTokenException", "The security token included in the request is expired"
        )


__all__ = ["SIGNATURE_MISMATCH", "BedrockError", "aws_error"]
