"""The one scrubber: the credentials an attempt sent, in every form a provider's text may
quote them, and nothing else."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest

from gateway.upstream.egress_scrub import scrub, scrub_bytes, secrets_of

pytestmark = pytest.mark.fast

SIGV4 = (
    "AWS4-HMAC-SHA256 Credential=ASIAEXAMPLE0001/20260101/us-east-1/bedrock/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date, Signature=" + "ab12" * 16
)
TOKEN = "IQoJb3JpZ2luX2Vj/session+token=="


def test_every_credential_header_and_its_parts() -> None:
    """Bearer and Basic tokens, the SigV4 access key id and signature, session tokens and
    API keys are found; the request id, versions and dates are not secrets."""
    headers = {
        "authorization": SIGV4,
        "x-amz-security-token": TOKEN,
        "x-amz-date": "20260101T000000Z",
        "x-request-id": "0123456789abcdef01234567",
        "anthropic-version": "2023-06-01",
        "api-key": "azure-key-0123456789",
        "x-custom-api-key": "custom-secret-987654",
        "content-type": "application/json",
    }
    secrets = secrets_of([(headers, None)])
    text = (
        f"sig {'ab12' * 16} id ASIAEXAMPLE0001 tok {TOKEN} azure azure-key-0123456789 "
        "custom custom-secret-987654 date 20260101T000000Z rid 0123456789abcdef01234567"
    )
    assert scrub(text, secrets) == (
        "sig *** id *** tok *** azure *** custom *** "
        "date 20260101T000000Z rid 0123456789abcdef01234567"
    )
    assert scrub(f"auth={SIGV4}", secrets) == "auth=***"
    bearer = secrets_of([({"authorization": "Bearer sk-proj-0123456789"}, None)])
    assert scrub("got Bearer sk-proj-0123456789 and sk-proj-0123456789", bearer) == (
        "got *** and ***"
    )


def test_json_escaped_and_percent_encoded_forms() -> None:
    """A token quoted in JSON with ``\\/`` or in a percent-encoded query is found too, in
    bytes as in text."""
    secrets = secrets_of([({"x-amz-security-token": TOKEN}, None)])
    escaped = json.dumps({"message": TOKEN}).replace("/", "\\/").encode()
    assert TOKEN.replace("/", "\\/").encode() in escaped
    assert scrub_bytes(escaped, secrets) == b'{"message": "***"}'
    assert scrub(f"?X-Amz-Security-Token={quote(TOKEN, safe='')}&x=1", secrets) == (
        "?X-Amz-Security-Token=***&x=1"
    )


def test_short_values_and_plain_text_are_left_alone() -> None:
    """A credential header shorter than 8 characters is not taken for a secret (it would
    mangle the message); text without credentials comes back as it was."""
    secrets = secrets_of([({"x-api-key": "short", "authorization": "Bearer abc"}, None)])
    assert secrets == ()
    assert scrub("a short abc message", secrets) == "a short abc message"
    assert scrub_bytes(b"\xff\xfe not utf-8", secrets_of([({"x-api-key": "k" * 20}, None)])) == (
        b"\xff\xfe not utf-8"
    )


def test_the_egress_proxy_credentials_are_in_the_same_scrubber() -> None:
    """The proxy's user and password (plain, percent-encoded, Basic) are scrubbed along
    with the provider's credentials: one scrubber for both."""
    proxy = "http://gw:pw%2Fsecret@proxy:3128"
    token = base64.b64encode(b"gw:pw/secret").decode()
    secrets = secrets_of([({"x-api-key": "provider-key-123"}, proxy)])
    text = f"{proxy} Basic {token} pw/secret provider-key-123"
    assert scrub(text, secrets) == "http://***@proxy:3128 Basic *** *** ***"
