"""AWS credentials for Bedrock: found by botocore's chain, signed with awscrt, the
signatures checked by botocore's own SigV4 signer, refreshed ahead of expiry."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from yarl import URL as Url

from gateway.errors import CredentialUnavailable
from gateway.testing.fake_aws_credentials import FakeAwsCredentials, Secrets, sigv4_problem
from gateway.upstream.aws_credentials import AwsCredential, seconds_left
from tests.clouds.cloud_env import Ticker, isolate, leaked, until

KEY_ID, SECRET = "AKIAFAKEKEY0000000001", "fake/secret/key/0000000000000000000000001"
URL = (
    "https://bedrock-runtime.us-east-1.amazonaws.com/model/"
    "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream"
)
BODY = b'{"anthropic_version":"bedrock-2023-05-31","max_tokens":64,"messages":[]}' * 28


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


def _static(key_id: str, secret: str) -> Callable[[str], Secrets | None]:
    def secrets_of(k: str) -> Secrets | None:
        return (secret, None) if k == key_id else None

    return secrets_of


def _signed(credential: AwsCredential, url: str = URL, body: bytes = BODY) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/vnd.amazon.eventstream"}
    credential.authorize("POST", Url(url, encoded=True), headers, body)
    return headers


async def test_environment_credentials_sign_requests_botocore_accepts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Keys in the environment sign a request whose signature botocore's SigV4Auth
    recomputes (with the request's own X-Amz-Date) to the same value."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    credential = AwsCredential("bedrock-us", "us-east-1")
    await credential.start()
    assert credential.problem is None
    headers = _signed(credential)
    assert headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={KEY_ID}/")
    assert "x-amz-security-token" not in headers
    check = _static(KEY_ID, SECRET)
    assert sigv4_problem("POST", URL, headers, BODY, check, region="us-east-1") is None
    await credential.close()
    secrets = [SECRET, KEY_ID, headers["authorization"].rpartition("=")[2]]
    assert leaked(secrets, repr(credential), caplog.text) == []


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ("secret", "signature mismatch"),
        ("body", "signature mismatch"),
        ("path", "signature mismatch"),
        ("content-type", "signature mismatch"),
        ("region", "signed for us-east-1/bedrock, not eu-west-1/bedrock"),
        ("key", "unknown or expired access key"),
    ],
)
async def test_a_signature_is_refused_when_anything_signed_differs(
    monkeypatch: pytest.MonkeyPatch, change: str, refusal: str
) -> None:
    """The check is no rubber stamp: another secret, body, path, content type, region or
    key id makes botocore's signature differ and the request refused."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    credential = AwsCredential("bedrock-us", "us-east-1")
    await credential.start()
    headers = _signed(credential)
    url, body, region, check = URL, BODY, "us-east-1", _static(KEY_ID, SECRET)
    if change == "secret":
        check = _static(KEY_ID, SECRET[:-1] + "2")
    elif change == "body":
        body = BODY + b" "
    elif change == "path":
        url = URL.replace("%3A0", "%3A1")
    elif change == "content-type":
        headers["content-type"] = "text/plain"
    elif change == "region":
        region = "eu-west-1"
    else:
        check = _static("AKIAOTHERKEY000000001", SECRET)
    assert sigv4_problem("POST", url, headers, body, check, region=region) == refusal
    await credential.close()


async def test_a_path_with_a_colon_and_a_query_signs_as_botocore_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model id with a literal colon, a query string and unsigned headers added after
    signing: botocore's canonical request agrees."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    credential = AwsCredential("bedrock-us", "us-east-1")
    await credential.start()
    url = (
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-v2:1/invoke?b=2&a=1"
    )
    headers = _signed(credential, url)
    headers["user-agent"] = "llm-gateway"
    assert (
        sigv4_problem("POST", url, headers, BODY, _static(KEY_ID, SECRET), region="us-east-1")
        is None
    )
    await credential.close()


async def test_an_explicit_default_port_is_signed_as_aiohttp_sends_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A base_url written with its default port (``:443``): aiohttp sends ``Host`` without
    it (yarl's ``host_port_subcomponent``), so the signed host must leave it out too, or
    AWS answers a signature mismatch."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    credential = AwsCredential("bedrock-us", "us-east-1")
    await credential.start()
    with_port = URL.replace("amazonaws.com/", "amazonaws.com:443/")
    headers = _signed(credential, with_port)
    sent = Url(with_port, encoded=True).host_port_subcomponent  # what aiohttp writes
    assert sent == "bedrock-runtime.us-east-1.amazonaws.com"
    headers["host"] = sent
    check = _static(KEY_ID, SECRET)
    assert sigv4_problem("POST", URL, headers, BODY, check, region="us-east-1") is None
    await credential.close()


async def test_a_profile_of_the_shared_credentials_file_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """aws_profile names a profile of AWS_SHARED_CREDENTIALS_FILE: its keys sign, not the
    default profile's; a profile that does not exist is a problem naming it."""
    (tmp_path / "aws-credentials").write_text(
        "[default]\naws_access_key_id = AKIADEFAULT000000001\naws_secret_access_key = nope\n"
        f"[prod]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {SECRET}\n"
    )
    credential = AwsCredential("bedrock-us", "us-east-1", profile="prod")
    await credential.start()
    headers = _signed(credential)
    assert (
        sigv4_problem("POST", URL, headers, BODY, _static(KEY_ID, SECRET), region="us-east-1")
        is None
    )
    await credential.close()

    missing = AwsCredential("bedrock-us", "us-east-1", profile="staging")
    await missing.start()
    assert missing.problem is not None
    assert "bedrock-us" in missing.problem and "profile staging" in missing.problem
    await missing.close()


async def test_web_identity_credentials_are_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """EKS IRSA: AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE make botocore ask STS
    (AssumeRoleWithWebIdentity, the endpoint a local fake) for temporary credentials,
    whose signatures botocore accepts."""
    token_file = tmp_path / "web-identity-token"
    token_file.write_text("eyJhbGciOiJSUzI1NiJ9.fake-projected-service-account-token.sig")
    async with FakeAwsCredentials(lifetime=3600.0) as aws:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", aws.url)
        monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/gateway")
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        credential = AwsCredential("bedrock-us", "us-east-1")
        await credential.start()
        assert credential.problem is None
        headers = _signed(credential)
        assert sigv4_problem("POST", URL, headers, BODY, aws.secrets_of, region="us-east-1") is None
        (asked,) = aws.requests
        assert asked.form["Action"] == "AssumeRoleWithWebIdentity"
        assert asked.form["RoleArn"] == "arn:aws:iam::123456789012:role/gateway"
        await credential.close()


async def test_container_credentials_are_refreshed_across_their_expiry() -> None:
    """Temporary credentials of 1.5 s from the container endpoint: every request signed
    over 3.5 s is accepted (botocore's check, the fake knowing only unexpired keys), with
    the keys of several refreshes."""
    async with FakeAwsCredentials(lifetime=1.5) as aws:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", aws.endpoint)
            credential = AwsCredential("bedrock-us", "us-east-1")
            await credential.start()
        refused, keys = [], set()
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            headers = _signed(credential)
            keys.add(headers["authorization"].split("Credential=")[1].split("/")[0])
            why = sigv4_problem("POST", URL, headers, BODY, aws.secrets_of, region="us-east-1")
            if why is not None:
                refused.append(why)
            await asyncio.sleep(0.02)
        await credential.close()
    assert refused == []
    assert len(keys) >= 3


async def test_an_expired_session_token_is_refused() -> None:
    """A request signed with temporary credentials is refused once they have expired
    (the endpoint's clock moved past the expiry)."""
    clock = [time.time()]
    async with FakeAwsCredentials(lifetime=900.0, clock=lambda: clock[0]) as aws:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", aws.endpoint)
            credential = AwsCredential("bedrock-us", "us-east-1")
            await credential.start()
        headers = _signed(credential)
        assert sigv4_problem("POST", URL, headers, BODY, aws.secrets_of, region="us-east-1") is None
        clock[0] += 901.0
        refusal = sigv4_problem("POST", URL, headers, BODY, aws.secrets_of, region="us-east-1")
        assert refusal == "unknown or expired access key"
        await credential.close()


async def test_the_expiry_is_learnt_from_botocore() -> None:
    """The expiry botocore holds for container credentials is found to within a second
    through its public refresh_needed, and the next refresh is planned ahead of it."""
    async with FakeAwsCredentials(lifetime=3000.0) as aws:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", aws.endpoint)
            credential = AwsCredential("bedrock-us", "us-east-1")
            await credential.start()
        left = seconds_left(credential._found)
        assert left is not None and 2998.0 < left <= 3000.0
        assert seconds_left(object()) is None
        await credential.close()


async def test_a_slow_refresh_does_not_block_the_event_loop() -> None:
    """A refresh that takes 2 s (the endpoint answering slowly) runs in a thread: a
    coroutine ticking every 10 ms never waits more than 100 ms meanwhile."""
    async with FakeAwsCredentials(lifetime=0.4) as aws:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", aws.endpoint)
            credential = AwsCredential("bedrock-us", "us-east-1")
            await credential.start()
        asked = len(aws.requests)
        aws.delay = 2.0
        with Ticker() as ticker:
            await until(lambda: len(aws.requests) > asked, 2.0)
            started = time.monotonic()
            await until(lambda: len(aws.issued) > asked, 3.0)
            took = time.monotonic() - started
        await credential.close()
    assert took >= 1.9  # the refresh did take 2 s
    assert ticker.ticks > 150
    assert ticker.longest < 0.1, f"the event loop stalled {ticker.longest * 1000:.0f} ms"


async def test_no_credentials_then_some(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No credentials anywhere: a problem naming the provider and where it looked,
    authorize refuses, on_change hears it; keys appear in the environment: the retry
    finds them, on_change(provider, None), requests are signed again. No secret leaks."""
    caplog.set_level(logging.DEBUG)
    changes: list[tuple[str, str | None]] = []
    credential = AwsCredential(
        "bedrock-us", "us-east-1", on_change=lambda p, q: changes.append((p, q)),
        retry_first=0.05, retry_cap=0.1,
    )  # fmt: skip
    await credential.start()
    problem = credential.problem
    assert problem is not None and problem.startswith("bedrock-us: no usable AWS credentials")
    assert "environment" in problem and "container" in problem
    assert changes == [("bedrock-us", problem)]
    assert credential.check() == problem
    with pytest.raises(CredentialUnavailable, match="bedrock-us"):
        _signed(credential)

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "FwoGZXIvYXdzEFakeSessionToken0001")
    await until(lambda: credential.problem is None)
    assert changes[-1] == ("bedrock-us", None)
    headers = _signed(credential)
    assert headers["x-amz-security-token"] == "FwoGZXIvYXdzEFakeSessionToken0001"
    assert credential.check() is None
    await credential.close()
    out = capsys.readouterr()
    secrets = [KEY_ID, SECRET, "FwoGZXIvYXdzEFakeSessionToken0001",
               headers["authorization"].rpartition("=")[2]]  # fmt: skip
    texts = [repr(credential), problem, caplog.text, out.out, out.err, str(changes)]
    assert leaked(secrets, *texts) == []
