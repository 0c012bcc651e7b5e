"""How the fake Bedrock checks a request's AWS Signature V4, as AWS does, with botocore.

The signature is computed again by botocore's own signer (``botocore.auth.SigV4Auth``:
``canonical_request``, ``string_to_sign``, ``signature``) over the request as received,
its headers limited to the ``SignedHeaders`` it names and its own ``X-Amz-Date`` as the
time, with the secret the fake knows for the access key; and compared. A request is
refused as AWS refuses it (:class:`~gateway.testing.bedrock_errors.BedrockError`): no
authentication, an unknown access key, another region or service in the credential
scope, a session token that is missing, unknown or expired, a signature that differs.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gateway.testing.bedrock_errors import SIGNATURE_MISMATCH, BedrockError, aws_error
from gateway.testing.script import Error

_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/,\s]+)/"
    r"(?P<service>[^/,\s]+)/aws4_request,\s*SignedHeaders=(?P<signed>[a-z0-9;\-]+),\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})"
)


@dataclass
class AwsAccounts:
    """What the fake AWS knows: secrets per access key, the session token a temporary
    access key needs, expired tokens, and Bedrock API keys (bearer tokens)."""

    # repr=False: no secret in a repr (a test's failure message, a log)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    tokens: dict[str, str] = field(default_factory=dict, repr=False)
    expired: set[str] = field(default_factory=set, repr=False)
    api_keys: set[str] = field(default_factory=set, repr=False)


@dataclass(frozen=True)
class Caller:
    """Who a request that passed the check is: its access key id or its API key."""

    key: str = field(repr=False)  # an API key is a secret
    signed: bool = True


def check(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    accounts: AwsAccounts,
    region: str,
    service: str = "bedrock",
) -> Caller | Error:
    """The caller of a request (``url`` as sent: scheme, host, raw path and query), or the
    error AWS answers it with. ``headers`` is case-insensitive (aiohttp's)."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        key = auth[7:].strip()
        return (
            Caller(key, False) if key in accounts.api_keys else BedrockError.unrecognized_client()
        )
    if not auth:
        return BedrockError.missing_authentication()
    m = _AUTHORIZATION.fullmatch(auth.strip())
    if m is None:
        return aws_error(403, "IncompleteSignatureException", "Authorization header is malformed.")
    key = m["key"]
    secret = accounts.secrets.get(key)
    if secret is None:
        return BedrockError.unrecognized_client()
    if m["region"] != region:
        return BedrockError.invalid_signature(
            f"Credential should be scoped to a valid region, not '{m['region']}'. "
        )
    if m["service"] != service:
        return BedrockError.invalid_signature(
            f"Credential should be scoped to correct service: '{service}'. "
        )
    token = headers.get("x-amz-security-token")
    needed = accounts.tokens.get(key)
    if needed is not None and (token != needed or token in accounts.expired):
        return BedrockError.expired_token()
    if needed is None and token is not None:
        return BedrockError.unrecognized_client()
    stamp = headers.get("x-amz-date", "")
    signed = m["signed"].split(";")
    if stamp[:8] != m["date"] or "host" not in signed:
        return BedrockError.invalid_signature(SIGNATURE_MISMATCH)
    request = AWSRequest(method=method, url=url, data=body)
    for name in signed:
        for value in _all(headers, name):
            request.headers[name] = value  # a repeated header: one more value
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(key, secret, token), service, region)
    expected = signer.signature(
        signer.string_to_sign(request, signer.canonical_request(request)), request
    )
    if not hmac.compare_digest(expected, m["signature"]):
        return BedrockError.invalid_signature(SIGNATURE_MISMATCH)
    return Caller(key, True)


def _all(headers: Mapping[str, str], name: str) -> list[str]:
    getall = getattr(headers, "getall", None)
    if getall is not None:
        return list(getall(name, []))
    value = headers.get(name)
    return [] if value is None else [value]


__all__ = ["AwsAccounts", "Caller", "check"]
