"""A fake AWS container-credentials endpoint (ECS / EKS Pod Identity style) and STS web
identity (EKS IRSA), for Bedrock credential tests, and a SigV4 check made with botocore's
own signer.

    async with FakeAwsCredentials(lifetime=2.0) as aws:
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", aws.endpoint)

botocore's container provider (loopback addresses are allowed) then gets temporary
credentials ``{"AccessKeyId", "SecretAccessKey", "Token", "Expiration"}`` from ``GET
/creds``, new ones each time, each valid for :attr:`lifetime` seconds.
With ``AWS_ENDPOINT_URL_STS`` set to :attr:`url` (and ``AWS_ROLE_ARN``,
``AWS_WEB_IDENTITY_TOKEN_FILE``), botocore's web identity provider gets them from ``POST /``
(``AssumeRoleWithWebIdentity``, answered in STS's XML) instead.
:meth:`FakeAwsCredentials.secrets_of` gives the secret key and session token of an
access key id it issued while they are valid, for :func:`sigv4_problem`.
"""

from __future__ import annotations

import datetime as dt
import hmac
import re
import secrets
from collections.abc import Callable
from typing import Any

from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gateway.testing.token_service import TokenService

_AUTHORIZATION = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), "
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)
_STS_ANSWER = """<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>{key}</AccessKeyId>
<SecretAccessKey>{secret}</SecretAccessKey><SessionToken>{token}</SessionToken>
<Expiration>{expiration}</Expiration></Credentials>
<AssumedRoleUser><Arn>{role}/gateway</Arn><AssumedRoleId>AROAFAKE:gateway</AssumedRoleId>
</AssumedRoleUser></AssumeRoleWithWebIdentityResult>
<ResponseMetadata><RequestId>fake</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"""
#: A secret key and session token (None for long-term keys).
Secrets = tuple[str, str | None]


class FakeAwsCredentials(TokenService):
    """The container-credentials endpoint (see the module's docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._secrets: dict[str, Secrets] = {}

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/creds", self._creds)
        app.router.add_post("/", self._sts)

    @property
    def endpoint(self) -> str:
        """The AWS_CONTAINER_CREDENTIALS_FULL_URI value."""
        return f"{self.url}/creds"

    def secrets_of(self, access_key: str) -> Secrets | None:
        """The secret key and session token of ``access_key`` while it is valid."""
        return self._secrets.get(access_key) if self.valid(access_key) else None

    def _new(self) -> tuple[str, str, str, str]:
        """A new access key id, secret key, session token and expiry (ISO 8601)."""
        access_key, expires_at = self.issue("ASIA")
        secret, token = secrets.token_urlsafe(30), secrets.token_urlsafe(60)
        self._secrets[access_key] = (secret, token)
        expiration = dt.datetime.fromtimestamp(expires_at, dt.UTC)
        return access_key, secret, token, expiration.isoformat(timespec="milliseconds")

    async def _creds(self, request: web.Request) -> web.Response:
        refused = await self.served(request)
        if refused is not None:
            return refused
        key, secret, token, expiration = self._new()
        answer = {"AccessKeyId": key, "SecretAccessKey": secret, "Token": token,
                  "Expiration": expiration}  # fmt: skip
        return web.json_response(answer)

    async def _sts(self, request: web.Request) -> web.Response:
        refused = await self.served(request)
        if refused is not None:
            return refused
        form = self.requests[-1].form
        if form.get("Action") != "AssumeRoleWithWebIdentity" or not form.get("WebIdentityToken"):
            return web.Response(status=400, text="only AssumeRoleWithWebIdentity, with a token")
        key, secret, token, expiration = self._new()
        return web.Response(
            content_type="text/xml",
            text=_STS_ANSWER.format(
                key=key, secret=secret, token=token, expiration=expiration, role=form["RoleArn"]
            ),
        )


def sigv4_problem(
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes,
    secrets_of: Callable[[str], Secrets | None],
    *,
    region: str,
    service: str = "bedrock",
) -> str | None:
    """Why a request's SigV4 signature is refused, as AWS would refuse it, or None when it
    is right: botocore's ``SigV4Auth`` recomputes the signature from the signed headers,
    the request's own ``X-Amz-Date``, and the secret of its access key
    (``secrets_of(access key)``: None for an unknown or expired key). ``headers`` by
    lowercase name."""
    found = _AUTHORIZATION.match(headers.get("authorization", ""))
    if found is None:
        return "no SigV4 authorization header"
    if found["region"] != region or found["service"] != service:
        return f"signed for {found['region']}/{found['service']}, not {region}/{service}"
    known = secrets_of(found["key"])
    if known is None:
        return "unknown or expired access key"
    secret, token = known
    if headers.get("x-amz-security-token") != token:
        return "wrong or missing session token"
    stamp = headers.get("x-amz-date", "")
    if not stamp.startswith(found["date"]):
        return "x-amz-date does not match the credential scope"
    signed = found["signed"].split(";")
    if "host" not in signed:
        return "host is not signed"
    request = AWSRequest(
        method=method, url=url, data=body, headers={n: headers[n] for n in signed if n in headers}
    )
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(found["key"], secret, token), service, region)
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    if not hmac.compare_digest(expected, found["signature"]):
        return "signature mismatch"
    return None
